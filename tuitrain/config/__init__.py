"""The config: a TOML file (plus `--set` overrides) -> a typed, checked `Config`.

- schema.py: one dataclass per TOML table, `ConfigError`, type and value rules
- loading.py: files and dicts -> `Config`, `--set`, the checks that need no imports
- targets.py: "module:callable" strings -> callables, and their keyword arguments checked
- validation.py: `validate(cfg)`, every check short of building the model (imports the targets)
- toml_writer.py: `Config` -> TOML text (a run directory's config.toml)

Part of the run layer: it may import `tuitrain.core` and `tuitrain.dashboard.themes`, never the run
package or the CLI. Must not import textual, nor torch at import time.
"""

from tuitrain.config.loading import (
    BUILTIN_METRICS,
    CheckpointConfig,
    Config,
    ConfigError,
    DashboardConfig,
    DataConfig,
    EarlyStoppingConfig,
    ExperimentConfig,
    LogConfig,
    LossConfig,
    MetricsConfig,
    ModelConfig,
    OPTIONAL_SECTIONS,
    OptimizerConfig,
    SchedulerConfig,
    TrainConfig,
    apply_override,
    chain_parts,
    check_kwargs,
    check_values,
    config_from_dict,
    load_config,
    metric_name,
    named_parts,
    parse_value,
    resolve_target,
)
from tuitrain.config.validation import validate

__all__ = [
    "BUILTIN_METRICS",
    "CheckpointConfig",
    "Config",
    "ConfigError",
    "DashboardConfig",
    "DataConfig",
    "EarlyStoppingConfig",
    "ExperimentConfig",
    "LogConfig",
    "LossConfig",
    "MetricsConfig",
    "ModelConfig",
    "OPTIONAL_SECTIONS",
    "OptimizerConfig",
    "SchedulerConfig",
    "TrainConfig",
    "apply_override",
    "chain_parts",
    "check_kwargs",
    "check_values",
    "config_from_dict",
    "load_config",
    "metric_name",
    "named_parts",
    "parse_value",
    "resolve_target",
    "validate",
]
