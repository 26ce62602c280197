"""The screens: the dashboard's own (screen.py) and its dialogs, each a `Modal` (modal.py)."""
