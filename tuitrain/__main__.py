"""`python -m tuitrain ...` is the `tuitrain` command."""

import sys

from tuitrain.cli import main

sys.exit(main())
