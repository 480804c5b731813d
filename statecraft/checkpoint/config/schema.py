"""The knob records of the checkpoint configuration (``rl.*`` of the reference table).

:class:`CheckpointConfig` and its sections are frozen attrs records that check every knob
and the cross-option rules when built, so every instance is valid. Loading lives in
:mod:`statecraft.checkpoint.config.load`, the not-built-yet gate in
:mod:`statecraft.checkpoint.config.support`; the methods here delegate to them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from statecraft.checkpoint.config.format_rules import incremental_issues
from statecraft.checkpoint.config.knobs import (
    _CHECK,
    _COUNT,
    _COUNT_OR_NULL,
    _CURSOR_MODES,
    _EMERGENCY_PLANS,
    _FORMATS,
    _STRIP_PREFIXES,
    _VERIFY_MODES,
    FULL_PLAN,
    CheckpointFormat,
    Component,
    CursorResume,
    EmergencyPlan,
    VerifyMode,
    _check_fields,
    _components,
    _deadline,
    _file_name,
    _flag,
    _raise_if,
    _resume,
    _run_ts,
    _signals,
    _text,
)
from statecraft.checkpoint.config.load import config_from_dict, load_config, unstructure
from statecraft.checkpoint.config.remote import CheckpointStoreConfig, UploadConfig
from statecraft.checkpoint.config.support import require_supported
from statecraft.errors import ConfigIssue

__all__ = [
    "CheckpointConfig",
    "CheckpointStoreConfig",
    "DataConfig",
    "TerminationConfig",
    "UploadConfig",
    "ValidationConfig",
]


@attrs.frozen(kw_only=True)
class ValidationConfig:
    """When model validation runs, whether it requests its own save, and which components
    (``validation.*``).

    - ``every``: validate at every optimizer step that is a multiple of it, and at the final
      step when not already validated there; ``0`` (the default) never validates on a
      cadence. Validation runs only when the loop registered an evaluation
      (``Checkpointer.validate_with``).
    - ``before_training``: one checkpoint-free pass before the first step of a fresh run that
      has steps left (it never saves, whatever ``save_checkpoint`` says).
    - ``save_checkpoint``: validation requests a save of ``checkpoint_components`` (full plan:
      the durable evaluation-pending checkpoint; partial: an artifact committed after a
      successful evaluation).
    - ``checkpoint_components`` is canonicalized into :data:`FULL_PLAN` order and is inactive
      unless ``save_checkpoint`` is true.

    ``save_checkpoint=true`` with ``every=0`` requests no save by itself (only
    ``before_training`` could validate, and that pass never saves): not an error, but
    :func:`~statecraft.checkpoint.config.plans.plan_warnings` says so.

    Raises:
        ConfigError: a knob has the wrong type, ``every`` is not a count, or the plan is
            empty, has duplicates, non-strings or unknown names.
    """

    _knob_prefix = "validation."

    every: int = attrs.field(default=0, metadata={_CHECK: _COUNT})
    before_training: bool = attrs.field(default=False, metadata={_CHECK: _flag})
    save_checkpoint: bool = attrs.field(default=False, metadata={_CHECK: _flag})
    checkpoint_components: tuple[Component, ...] = attrs.field(
        default=FULL_PLAN, metadata={_CHECK: _components}
    )

    def __attrs_post_init__(self) -> None:
        _raise_if(_check_fields(self), "ValidationConfig")

    @property
    def is_full_plan(self) -> bool:
        """True when the validation plan is the exact-resume plan :data:`FULL_PLAN`."""
        return self.checkpoint_components == FULL_PLAN


@attrs.frozen(kw_only=True)
class DataConfig:
    """How resume treats the data source cursor (``data.*``).

    Raises:
        ConfigError: ``cursor_resume`` is not one of ``auto``, ``strict``, ``off``.
    """

    _knob_prefix = "data."

    cursor_resume: CursorResume = attrs.field(default="auto", metadata={_CHECK: _CURSOR_MODES})

    def __attrs_post_init__(self) -> None:
        _raise_if(_check_fields(self), "DataConfig")


@attrs.frozen(kw_only=True)
class TerminationConfig:
    """How a run learns that it must stop and save (``termination.*``; preemption and timeout).

    - ``enabled``: watch for termination at every step boundary (false: never stop early).
    - ``sentinel_dir``: the directory polled for the sentinel file; ``""`` (the default) means
      ``$SLURM_LOG_DIR`` when that is set, else no sentinel is polled.
    - ``sentinel_name``: the sentinel's file name (the batch script's USR1 trap creates it).
    - ``signals``: the signals that get a flag-only handler on the main thread at
      ``resume()`` (empty: none); a handled signal only sets a flag, read at the next step
      boundary.
    - ``deadline``: a wall-clock deadline: ``""`` (none), ``"slurm"`` (``$SLURM_JOB_END_TIME``),
      a unix time, or an ISO 8601 date-time with a UTC offset.
    - ``deadline_margin_s``: stop this many seconds before the deadline (room for one step and
      one save).

    Raises:
        ConfigError: a knob has the wrong type or a value outside what is allowed.
    """

    _knob_prefix = "termination."

    enabled: bool = attrs.field(default=True, metadata={_CHECK: _flag})
    sentinel_dir: str = attrs.field(default="", metadata={_CHECK: _text})
    sentinel_name: str = attrs.field(default="SIGUSR1_RECEIVED", metadata={_CHECK: _file_name})
    signals: tuple[str, ...] = attrs.field(
        default=("SIGUSR1", "SIGTERM"), metadata={_CHECK: _signals}
    )
    deadline: str = attrs.field(default="", metadata={_CHECK: _deadline})
    deadline_margin_s: int = attrs.field(default=0, metadata={_CHECK: _COUNT})

    def __attrs_post_init__(self) -> None:
        _raise_if(_check_fields(self), "TerminationConfig")


@attrs.frozen(kw_only=True)
class CheckpointConfig:
    """Every checkpoint knob, validated; build it with :meth:`load` or :meth:`from_dict`.

    Normalization: ``resume=""`` becomes ``"off"``; component plans are put in
    :data:`FULL_PLAN` order. Cross-option rules: ``checkpoint_store.backend="object_store"``
    requires ``checkpoint_format="dcp"`` and refuses ``upload.enabled=true`` and non-zero
    ``keep_optim_last``/``keep_model_last``; ``emergency_checkpoint_components="run"`` with
    ``validation.save_checkpoint=true`` requires the validation plan to cover
    ``checkpoint_components`` plus ``model``. The statecraft knob ``verify`` says how resume
    checks checkpoint files: ``"digest"`` (full content digests, with the algorithm each
    manifest records) or ``"size"`` (sizes only). The statecraft knob ``quiet`` silences the
    ``statecraft: ...`` lines printed on stderr when the script configures no logging
    (:func:`statecraft.logs.configure_default_output`; ``Checkpointer(quiet=...)`` overrides it).

    Raises:
        ConfigError: every bad knob and every broken cross-option rule, together (cross-option
            rules are checked once every knob on its own is valid).

    Example:
        >>> CheckpointConfig(resume="").resume
        'off'
    """

    _knob_prefix = ""

    save_every: int = attrs.field(default=0, metadata={_CHECK: _COUNT})
    resume: str = attrs.field(default="auto", metadata={_CHECK: _resume})
    run_ts: str = attrs.field(default="", metadata={_CHECK: _run_ts})
    # init_from: a fresh start's weights (statecraft.checkpoint.init_from; docs/checkpointing.md)
    init_from: str = attrs.field(default="", metadata={_CHECK: _text})
    init_from_strip_prefix: str = attrs.field(default="", metadata={_CHECK: _STRIP_PREFIXES})
    init_from_lora: bool = attrs.field(default=False, metadata={_CHECK: _flag})
    checkpoint_format: CheckpointFormat = attrs.field(
        default="consolidated", metadata={_CHECK: _FORMATS}
    )
    checkpoint_components: tuple[Component, ...] = attrs.field(
        default=FULL_PLAN, metadata={_CHECK: _components}
    )
    emergency_checkpoint_components: EmergencyPlan = attrs.field(
        default="full", metadata={_CHECK: _EMERGENCY_PLANS}
    )
    checkpoint_store: CheckpointStoreConfig = attrs.field(factory=CheckpointStoreConfig)
    save_async: bool = attrs.field(default=True, metadata={_CHECK: _flag})
    save_async_dcp: bool = attrs.field(default=False, metadata={_CHECK: _flag})
    keep_optim_last: int | None = attrs.field(default=None, metadata={_CHECK: _COUNT_OR_NULL})
    keep_model_last: int = attrs.field(default=0, metadata={_CHECK: _COUNT})
    upload: UploadConfig = attrs.field(factory=UploadConfig)
    validation: ValidationConfig = attrs.field(factory=ValidationConfig)
    data: DataConfig = attrs.field(factory=DataConfig)
    termination: TerminationConfig = attrs.field(factory=TerminationConfig)
    verify: VerifyMode = attrs.field(default="digest", metadata={_CHECK: _VERIFY_MODES})
    quiet: bool = attrs.field(default=False, metadata={_CHECK: _flag})

    def __attrs_post_init__(self) -> None:
        issues = _check_fields(self)
        _raise_if(issues or self._cross_option_issues(), "CheckpointConfig")

    def _cross_option_issues(self) -> list[ConfigIssue]:
        issues: list[ConfigIssue] = []
        if self.checkpoint_store.backend == "object_store":
            why = "when checkpoint_store.backend='object_store'"
            if self.checkpoint_format != "dcp":
                issues.append(
                    ConfigIssue(
                        "checkpoint_format",
                        self.checkpoint_format,
                        f"'dcp' {why} (a direct object-store primary writes DCP shards only)",
                    )
                )
            if self.upload.enabled:
                issues.append(
                    ConfigIssue(
                        "upload.enabled",
                        True,
                        f"false {why} (no secondary archive from a remote primary; for local "
                        "primary plus archive use checkpoint_store.backend=local)",
                    )
                )
            for knob, allowed in (("keep_optim_last", "null or 0"), ("keep_model_last", "0")):
                value = getattr(self, knob)
                if value not in (None, 0):
                    reason = "(the direct primary's retention is checkpoint_store.keep_last)"
                    issues.append(ConfigIssue(knob, value, f"{allowed} {why} {reason}"))
        issues += incremental_issues(self)
        if self.emergency_checkpoint_components == "run" and self.validation.save_checkpoint:
            needed = {*self.checkpoint_components, "model"}
            if not needed <= set(self.validation.checkpoint_components):
                plan = [c for c in FULL_PLAN if c in needed]
                issues.append(
                    ConfigIssue(
                        "validation.checkpoint_components",
                        list(self.validation.checkpoint_components),
                        f"a plan covering {plan} (checkpoint_components plus 'model') when "
                        "emergency_checkpoint_components='run' and "
                        "validation.save_checkpoint=true: a step's validation artifact stands "
                        "in for its emergency save",
                    )
                )
        return issues

    @property
    def is_full_plan(self) -> bool:
        """True when ``checkpoint_components`` is the exact-resume plan :data:`FULL_PLAN`."""
        return self.checkpoint_components == FULL_PLAN

    def resolved_keep_optim_last(self) -> int:
        """Return ``keep_optim_last``, resolving ``None`` to 1 (local) or 0 (object store)."""
        if self.keep_optim_last is not None:
            return self.keep_optim_last
        return 1 if self.checkpoint_store.backend == "local" else 0

    def require_supported(self) -> list[str]:
        """Refuse knobs whose feature is not built yet; return warnings for safe defaults.

        Returns:
            One warning line per default whose feature is absent but whose absence is safe;
            the caller logs them (none in this release: the defaults ``save_async=true`` and
            ``keep_optim_last=null`` are built).

        Raises:
            NotSupportedYetError: for the first knob (backend, format, upload, emergency
                plan) whose value would change behaviour this release cannot
                deliver.
        """
        return require_supported(self)

    def to_dict(self) -> dict[str, Any]:
        """Return the knobs as plain JSON-able data; :meth:`from_dict` rebuilds ``self`` from it."""
        return unstructure(self)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, source: str = "checkpoint config"
    ) -> CheckpointConfig:
        """Build a config from a knob mapping (the ``rl:`` contents, not the wrapper).

        Args:
            data: knob name to value; nested sections are mappings. Missing knobs take defaults.
            source: names where ``data`` came from in the error message.

        Raises:
            ConfigError: every problem found (unknown keys at any level, wrong types, values
                out of range, broken cross-option rules), together, with ``source``.
        """
        return config_from_dict(cls, data, source=source)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()
    ) -> CheckpointConfig:
        """Read a YAML knob file (or start from defaults) and apply ``key=value`` overrides.

        The file's top level is the knob mapping, optionally wrapped in a single ``rl:`` key; it is
        read with ``yaml.safe_load`` (quote ``'off'``: YAML reads a bare ``off`` as false).
        Each override is ``KNOB=VALUE`` with a dotted knob (``checkpoint_store.backend``), an
        optional ``rl.`` prefix, and a value read by ``yaml.safe_load`` (``100``, ``true``,
        ``[model,optimizer]``, ``null``); for a string knob the text is taken literally unless it
        is a quoted YAML string, so ``resume=off`` means ``"off"`` and ``resume=`` means ``""``.

        Args:
            path: the YAML file, or ``None`` for defaults plus overrides.
            overrides: applied in order after the file; a later one wins.

        Raises:
            ConfigError: the file is missing, unreadable, not YAML or not a mapping; an override
                lacks ``=`` or names an unknown knob (the message lists the known ones); or any
                knob is invalid. All problems found are reported together.

        Example:
            >>> CheckpointConfig.load(None, ["rl.checkpoint_components=[optimizer,model]"]
            ...     ).checkpoint_components
            ('model', 'optimizer')
        """
        return load_config(cls, path, overrides)


_SECTIONS: tuple[type, ...] = (
    CheckpointStoreConfig,
    UploadConfig,
    ValidationConfig,
    DataConfig,
    TerminationConfig,
)
for _cls in (*_SECTIONS, CheckpointConfig):
    attrs.resolve_types(_cls)
