"""The `[watch]` rules, one class a rule (rules/base.py says what a rule is): every module of this
package is imported here, and each `Rule` subclass with a `name` registers itself in `RULES`. A new
rule is one new file here and its test; `Watch`, the config's `[watch]` table, the Learner and `Monitor`
take it from the registry.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import RULES, Rule

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["RULES", "Rule"]
