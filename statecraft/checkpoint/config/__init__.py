"""The checkpoint configuration: schema, loading, validation, and the not-built-yet gate.

:class:`CheckpointConfig` holds the ``rl.*`` checkpoint knobs of the reference table under the
same names and defaults, plus two statecraft knobs, ``verify`` and ``quiet``. Every instance is
valid: the classes are frozen and check themselves when built, so a bad value can only surface as
a :class:`~statecraft.errors.ConfigError` at the point it comes in. :func:`knob_rows` lists every
knob with its default (the user guide's knob table is checked against it).

Loading protocol (who calls what):
    1. the entry point calls :meth:`CheckpointConfig.load` with a YAML file (or ``None``) and the
       command line's ``key=value`` overrides, or :meth:`CheckpointConfig.from_dict` with a mapping;
    2. every type, value and cross-option problem is collected and raised together as ONE
       :class:`~statecraft.errors.ConfigError` whose ``issues`` name each dotted knob;
    3. the caller then calls :meth:`CheckpointConfig.require_supported`, which raises
       :class:`~statecraft.errors.NotSupportedYetError` for a valid knob whose feature is not built
       yet and returns warnings for defaults that are safe to continue with;
    4. :func:`plan_warnings` returns one line per partial component plan the config makes
       active (issued by the facade as a ``UserWarning``).

Example:
    >>> cfg = CheckpointConfig.load(None, ["save_every=100", "save_async=false"])
    >>> cfg.save_every, cfg.is_full_plan
    (100, True)
"""

from statecraft.checkpoint.config.knobs import (
    CONFIG_SCHEMA,
    FULL_PLAN,
    CheckpointFormat,
    Component,
    CursorResume,
    EmergencyPlan,
    StoreBackend,
    VerifyMode,
)
from statecraft.checkpoint.config.plans import plan_warnings, run_plan, validation_plan
from statecraft.checkpoint.config.rows import KnobRow, knob_rows
from statecraft.checkpoint.config.schema import (
    CheckpointConfig,
    CheckpointStoreConfig,
    DataConfig,
    TerminationConfig,
    UploadConfig,
    ValidationConfig,
)
from statecraft.checkpoint.config.support import Feature, KnobNote, KnobRequest, declared_features

__all__ = [
    "CONFIG_SCHEMA",
    "FULL_PLAN",
    "CheckpointConfig",
    "CheckpointFormat",
    "CheckpointStoreConfig",
    "Component",
    "CursorResume",
    "DataConfig",
    "EmergencyPlan",
    "Feature",
    "KnobNote",
    "KnobRequest",
    "KnobRow",
    "StoreBackend",
    "TerminationConfig",
    "UploadConfig",
    "ValidationConfig",
    "VerifyMode",
    "declared_features",
    "knob_rows",
    "plan_warnings",
    "run_plan",
    "validation_plan",
]
