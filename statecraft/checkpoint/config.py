"""The checkpoint configuration: schema, loading, validation, and the not-built-yet gate.

:class:`CheckpointConfig` holds the ``rl.*`` checkpoint knobs of the reference table under the
same names and defaults, plus one statecraft knob, ``verify``. Every instance is valid: the
classes are frozen and check themselves when built, so a bad value can only surface as a
:class:`~statecraft.errors.ConfigError` at the point it comes in.

Loading protocol (who calls what):
    1. the entry point calls :meth:`CheckpointConfig.load` with a YAML file (or ``None``) and the
       command line's ``key=value`` overrides, or :meth:`CheckpointConfig.from_dict` with a mapping;
    2. every type, value and cross-option problem is collected and raised together as ONE
       :class:`~statecraft.errors.ConfigError` whose ``issues`` name each dotted knob;
    3. the caller then calls :meth:`CheckpointConfig.require_supported`, which raises
       :class:`~statecraft.errors.NotSupportedYetError` for a valid knob whose feature is not built
       yet and returns warnings for defaults that are safe to continue with.

Example:
    >>> cfg = CheckpointConfig.load(None, ["save_every=100", "save_async=false"])
    >>> cfg.save_every, cfg.is_full_plan
    (100, True)
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, get_origin

import attrs
import cattrs
import yaml
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn, override

from statecraft.errors import ConfigError, ConfigIssue, NotSupportedYetError

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
    "StoreBackend",
    "UploadConfig",
    "ValidationConfig",
    "VerifyMode",
]

CONFIG_SCHEMA = "statecraft.checkpoint-config.v1"

Component = Literal["model", "optimizer", "training_state"]
StoreBackend = Literal["local", "object_store"]
CheckpointFormat = Literal["consolidated", "dcp"]
EmergencyPlan = Literal["full", "run"]
CursorResume = Literal["auto", "strict", "off"]
VerifyMode = Literal["digest", "size"]

#: The full logical plan, in canonical order; the only plan that makes an exact-resume checkpoint.
FULL_PLAN: tuple[Component, ...] = ("model", "optimizer", "training_state")

# A checker takes (value, dotted path) and returns (normalized value, problems found).
_Checker = Callable[[Any, str], tuple[Any, list[ConfigIssue]]]
_CHECK = "statecraft.check"


def _quote_hint(value: object) -> str:
    """Explain how a YAML scalar that should be a string was read as something else."""
    if isinstance(value, bool):
        return " (YAML reads a bare on/off/yes/no/true/false as a boolean: quote it, e.g. 'off')"
    if isinstance(value, int | float):
        return " (YAML reads bare digits as a number: quote it)"
    return ""


def _text(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    if isinstance(value, str):
        return value, []
    return value, [ConfigIssue(path, value, "a string" + _quote_hint(value))]


def _flag(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    if isinstance(value, bool):
        return value, []
    return value, [ConfigIssue(path, value, "true or false")]


def _count(*, nullable: bool) -> _Checker:
    allowed = "null or a non-negative integer" if nullable else "a non-negative integer"

    def check(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
        if value is None and nullable:
            return value, []
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return value, [ConfigIssue(path, value, allowed)]
        return value, []

    return check


def _choice(*choices: str) -> _Checker:
    allowed = "one of " + ", ".join(repr(c) for c in choices)

    def check(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
        if isinstance(value, str) and value in choices:
            return value, []
        return value, [ConfigIssue(path, value, allowed + _quote_hint(value))]

    return check


def _resume(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    if isinstance(value, str):
        return (value or "off"), []
    allowed = "'auto', 'off', '' (same as 'off') or a checkpoint path"
    return value, [ConfigIssue(path, value, allowed + _quote_hint(value))]


def _run_ts(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    allowed = "'' (auto-resolved) or a real date/time as 14 digits YYYYmmddHHMMSS"
    if value == "":
        return value, []
    if isinstance(value, str) and len(value) == 14 and value.isascii() and value.isdigit():
        parts = (value[0:4], value[4:6], value[6:8], value[8:10], value[10:12], value[12:14])
        try:
            datetime.datetime(*(int(p) for p in parts))
        except ValueError:
            pass
        else:
            return value, []
    return value, [ConfigIssue(path, value, allowed + _quote_hint(value))]


def _components(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    """Check a component plan and return it in canonical FULL_PLAN order."""
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        return value, [ConfigIssue(path, value, f"a non-empty list drawn from {list(FULL_PLAN)}")]
    issues: list[ConfigIssue] = []
    seen: set[str] = set()
    for i, name in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(name, str):
            issues.append(ConfigIssue(where, name, "a component name (a string)"))
        elif name not in FULL_PLAN:
            issues.append(ConfigIssue(where, name, "one of " + ", ".join(map(repr, FULL_PLAN))))
        elif name in seen:
            issues.append(ConfigIssue(where, name, "each component at most once"))
        else:
            seen.add(name)
    if issues:
        return value, issues
    return tuple(c for c in FULL_PLAN if c in seen), []


_BACKENDS = _choice("local", "object_store")
_FORMATS = _choice("consolidated", "dcp")
_EMERGENCY_PLANS = _choice("full", "run")
_CURSOR_MODES = _choice("auto", "strict", "off")
_VERIFY_MODES = _choice("digest", "size")
_COUNT = _count(nullable=False)
_COUNT_OR_NULL = _count(nullable=True)


# (knob, "needs an unbuilt feature", what to do). The backend comes first: an object-store
# primary also requires dcp, so with dcp first the backend could never be the one named.
_NOT_BUILT_YET: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    (
        "checkpoint_store.backend",
        lambda v: v == "object_store",
        "set checkpoint_store.backend=local",
    ),
    ("checkpoint_format", lambda v: v == "dcp", "set checkpoint_format=consolidated"),
    ("upload.enabled", bool, "set upload.enabled=false and copy checkpoints out of band"),
    ("validation.save_checkpoint", bool, "set validation.save_checkpoint=false"),
    (
        "checkpoint_components",
        lambda v: v != FULL_PLAN,
        "partial (non-resumable) artifacts are not built yet; "
        "set checkpoint_components=[model,optimizer,training_state]",
    ),
    (
        "emergency_checkpoint_components",
        lambda v: v == "run",
        "set emergency_checkpoint_components=full",
    ),
    (
        "keep_optim_last",
        lambda v: v is not None and v >= 1,
        "retention is not built yet; set keep_optim_last=0 (keep optimizer state everywhere)",
    ),
    (
        "keep_model_last",
        lambda v: v >= 1,
        "retention is not built yet; set keep_model_last=0 (keep every checkpoint)",
    ),
    ("data.cursor_resume", lambda v: v == "strict", "set data.cursor_resume=auto or off"),
)


def _knob_value(obj: Any, knob: str) -> Any:
    """Read dotted ``knob`` (``upload.enabled``) from a config object."""
    for part in knob.split("."):
        obj = getattr(obj, part)
    return obj


def _check_fields(obj: Any) -> list[ConfigIssue]:
    """Check and normalize every knob of one config object in place (frozen: via object)."""
    prefix = type(obj)._knob_prefix
    issues: list[ConfigIssue] = []
    for f in attrs.fields(type(obj)):
        current = getattr(obj, f.name)
        check = f.metadata.get(_CHECK)
        if check is None:
            if not isinstance(current, f.type):
                issues.append(ConfigIssue(prefix + f.name, current, f"a {f.type.__name__}"))
            continue
        value, found = check(current, prefix + f.name)
        issues.extend(found)
        if not found and value is not current:
            object.__setattr__(obj, f.name, value)
    return issues


def _raise_if(issues: list[ConfigIssue], source: str) -> None:
    if issues:
        raise ConfigError(issues, source=source)


@attrs.frozen(kw_only=True)
class CheckpointStoreConfig:
    """Where the primary, resumable checkpoint lives (``checkpoint_store.*``).

    ``bucket``/``credentials``/``prefix`` address a direct object-store primary and are ignored
    for ``backend="local"``; an empty ``prefix`` mirrors the local run layout.

    Raises:
        ConfigError: a knob has the wrong type or a value outside what is allowed.
    """

    _knob_prefix = "checkpoint_store."

    backend: StoreBackend = attrs.field(default="local", metadata={_CHECK: _BACKENDS})
    bucket: str = attrs.field(default="", metadata={_CHECK: _text})
    credentials: str = attrs.field(default="", metadata={_CHECK: _text})
    prefix: str = attrs.field(default="", metadata={_CHECK: _text})

    def __attrs_post_init__(self) -> None:
        _raise_if(_check_fields(self), "CheckpointStoreConfig")


@attrs.frozen(kw_only=True)
class UploadConfig:
    """Archive upload of completed local-primary checkpoints (``upload.*``); off by default.

    Raises:
        ConfigError: a knob has the wrong type or a value outside what is allowed.
    """

    _knob_prefix = "upload."

    enabled: bool = attrs.field(default=False, metadata={_CHECK: _flag})
    bucket: str = attrs.field(default="", metadata={_CHECK: _text})
    credentials: str = attrs.field(default="", metadata={_CHECK: _text})
    prefix: str = attrs.field(default="", metadata={_CHECK: _text})

    def __attrs_post_init__(self) -> None:
        _raise_if(_check_fields(self), "UploadConfig")


@attrs.frozen(kw_only=True)
class ValidationConfig:
    """Whether validation requests its own save, and which components (``validation.*``).

    ``checkpoint_components`` is canonicalized into :data:`FULL_PLAN` order and is inactive
    unless ``save_checkpoint`` is true.

    Raises:
        ConfigError: a knob has the wrong type, or the plan is empty, has duplicates or unknown
            names.
    """

    _knob_prefix = "validation."

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
class CheckpointConfig:
    """Every checkpoint knob, validated; build it with :meth:`load` or :meth:`from_dict`.

    Normalization: ``resume=""`` becomes ``"off"``; component plans are put in
    :data:`FULL_PLAN` order. Cross-option rules: ``checkpoint_store.backend="object_store"``
    requires ``checkpoint_format="dcp"`` and refuses ``upload.enabled=true`` and non-zero
    ``keep_optim_last``/``keep_model_last``; ``emergency_checkpoint_components="run"`` with
    ``validation.save_checkpoint=true`` requires the validation plan to cover
    ``checkpoint_components`` plus ``model``. The statecraft knob ``verify`` says how resume
    checks checkpoint files: ``"digest"`` (full SHA-256 digests) or ``"size"`` (sizes only).

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
    keep_optim_last: int | None = attrs.field(default=None, metadata={_CHECK: _COUNT_OR_NULL})
    keep_model_last: int = attrs.field(default=0, metadata={_CHECK: _COUNT})
    upload: UploadConfig = attrs.field(factory=UploadConfig)
    validation: ValidationConfig = attrs.field(factory=ValidationConfig)
    data: DataConfig = attrs.field(factory=DataConfig)
    verify: VerifyMode = attrs.field(default="digest", metadata={_CHECK: _VERIFY_MODES})

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
                    reason = "(remote retention is not implemented)"
                    issues.append(ConfigIssue(knob, value, f"{allowed} {why} {reason}"))
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
            One warning line per default whose feature is absent but whose absence is safe
            (``save_async=true``, ``keep_optim_last=null``); the caller logs them.

        Raises:
            NotSupportedYetError: for the first knob (backend, format, upload, validation save,
                partial plan, emergency plan, retention, strict cursor) whose value would change
                behaviour this release cannot deliver.
        """
        for knob, refused, what_to_do in _NOT_BUILT_YET:
            value = _knob_value(self, knob)
            if refused(value):
                raise NotSupportedYetError(knob, value, what_to_do)
        warnings: list[str] = []
        if self.save_async:
            warnings.append(
                "save_async=true: asynchronous writes are not supported yet; checkpoints are "
                "written synchronously; set save_async=false to silence"
            )
        if self.keep_optim_last is None:
            warnings.append(
                "keep_optim_last=null: would resolve to 1 for a local primary, but retention is "
                "not supported yet: optimizer state is kept for every checkpoint; set "
                "keep_optim_last=0 to silence"
            )
        return warnings

    def to_dict(self) -> dict[str, Any]:
        """Return the knobs as plain JSON-able data; :meth:`from_dict` rebuilds ``self`` from it."""
        return _CONVERTER.unstructure(self)

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
        try:
            return _structure_section(CheckpointConfig, data, "")
        except _IssuesFound as exc:
            raise ConfigError(exc.issues, source=source) from None

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
        source = "checkpoint config" if path is None else os.fspath(path)
        data: dict[str, Any] = {} if path is None else _read_yaml(source)
        if overrides:
            source += " + overrides"
        issues = _apply_overrides(data, overrides)
        try:
            config = _structure_section(CheckpointConfig, data, "")
        except _IssuesFound as exc:
            issues.extend(exc.issues)
        _raise_if(issues, source)
        return config


_SECTIONS: tuple[type, ...] = (CheckpointStoreConfig, UploadConfig, ValidationConfig, DataConfig)
for _cls in (*_SECTIONS, CheckpointConfig):
    attrs.resolve_types(_cls)


class _IssuesFound(Exception):
    """Internal carrier of collected issues through cattrs' structuring."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__(f"{len(issues)} issue(s)")
        self.issues = issues


def _known_knobs(cls: type = CheckpointConfig) -> list[str]:
    """Every dotted leaf knob under ``cls``, in declaration order."""
    names: list[str] = []
    for f in attrs.fields(cls):
        if f.metadata.get(_CHECK) is None:
            names.extend(_known_knobs(f.type))
        else:
            names.append(cls._knob_prefix + f.name)
    return names


def _issues_from(
    exc: ClassValidationError, data: Mapping[Any, Any], prefix: str
) -> list[ConfigIssue]:
    """Flatten one cattrs exception group into issues with dotted paths."""
    issues: list[ConfigIssue] = []
    for sub in exc.exceptions:
        if isinstance(sub, _IssuesFound | ConfigError):
            issues.extend(sub.issues)
        elif isinstance(sub, ForbiddenExtraKeysError):
            known = ", ".join(prefix + f.name for f in attrs.fields(sub.cl))
            for key in sorted(sub.extra_fields, key=str):
                allowed = f"a known knob (one of: {known})"
                if prefix == "" and key == "rl":
                    allowed += "; an 'rl:' wrapper must be the file's only top-level key"
                issues.append(ConfigIssue(f"{prefix}{key}", data[key], allowed))
        else:
            names = [n.name for n in getattr(sub, "__notes__", []) if hasattr(n, "name")]
            path = prefix + names[0] if names else prefix.rstrip(".") or "<top level>"
            issues.append(ConfigIssue(path, data.get(names[0]) if names else data, str(sub)))
    return issues


def _structure_section(cls: type, data: Any, prefix: str) -> Any:
    """Structure ``data`` into ``cls``, raising :class:`_IssuesFound` with every problem."""
    if not isinstance(data, Mapping):
        path = prefix.rstrip(".") or "<top level>"
        allowed = f"a mapping of knobs ({', '.join(_known_knobs(cls))})"
        raise _IssuesFound([ConfigIssue(path, data, allowed)])
    try:
        return _STRUCTURE_FNS[cls](data, cls)
    except ClassValidationError as exc:
        raise _IssuesFound(_issues_from(exc, data, prefix)) from None


def _field_hook(check: _Checker, path: str) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _type: Any) -> Any:
        normalized, issues = check(value, path)
        if issues:
            raise _IssuesFound(issues)
        return normalized

    return hook


def _section_hook(cls: type, prefix: str) -> Callable[[Any, Any], Any]:
    return lambda value, _type: _structure_section(cls, value, prefix)


_CONVERTER = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
_CONVERTER.register_unstructure_hook_func(
    lambda t: t is tuple or get_origin(t) is tuple, lambda value: list(value)
)
_STRUCTURE_FNS: dict[type, Callable[[Any, Any], Any]] = {}
for _cls in (*_SECTIONS, CheckpointConfig):
    _STRUCTURE_FNS[_cls] = make_dict_structure_fn(
        _cls,
        _CONVERTER,
        _cattrs_forbid_extra_keys=True,
        _cattrs_detailed_validation=True,
        **{
            f.name: override(
                struct_hook=_field_hook(f.metadata[_CHECK], _cls._knob_prefix + f.name)
                if _CHECK in f.metadata
                else _section_hook(f.type, f.type._knob_prefix)
            )
            for f in attrs.fields(_cls)
        },
    )
    _CONVERTER.register_structure_hook(_cls, _section_hook(_cls, _cls._knob_prefix))


def _read_yaml(source: str) -> dict[str, Any]:
    """Read the knob mapping of a YAML file, unwrapping a sole top-level ``rl:`` key."""
    try:
        with open(source, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        issue = ConfigIssue(source, source, f"a readable YAML file ({reason})")
        raise ConfigError([issue], source=source) from None
    except yaml.YAMLError as exc:
        issue = ConfigIssue(source, "invalid YAML", f"a YAML mapping of knobs ({exc})")
        raise ConfigError([issue], source=source) from None
    if loaded is None:
        return {}
    if isinstance(loaded, Mapping) and list(loaded) == ["rl"]:
        loaded = {} if loaded["rl"] is None else loaded["rl"]
    if not isinstance(loaded, Mapping):
        allowed = "a YAML mapping of checkpoint knobs at the top level (optionally under 'rl:')"
        raise ConfigError([ConfigIssue(source, loaded, allowed)], source=source)
    return dict(loaded)


def _stringy(cls: type, name: str) -> bool:
    """True when knob ``name`` of ``cls`` takes a string (plain or one of fixed choices)."""
    field = attrs.fields_dict(cls)[name]
    return field.type is str or get_origin(field.type) is Literal


def _locate(key: str) -> tuple[type, list[str]] | None:
    """Return the class holding the last part of dotted ``key`` and its parts; None if unknown."""
    cls: type = CheckpointConfig
    parts = key.split(".")
    for part in parts[:-1]:
        field = attrs.fields_dict(cls).get(part)
        if field is None or _CHECK in field.metadata:
            return None
        cls = field.type
    return (cls, parts) if parts[-1] in attrs.fields_dict(cls) else None


def _apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> list[ConfigIssue]:
    """Apply ``KNOB=VALUE`` overrides to ``data`` in place; return the malformed ones."""
    known = ", ".join(_known_knobs())
    if isinstance(overrides, str):
        return [ConfigIssue("overrides", overrides, "a list of KNOB=VALUE strings")]
    issues: list[ConfigIssue] = []
    for i, item in enumerate(overrides):
        if not isinstance(item, str) or "=" not in item:
            allowed = f"KNOB=VALUE with a known knob (one of: {known})"
            issues.append(ConfigIssue(f"overrides[{i}]", item, allowed))
            continue
        key, _, text = item.partition("=")
        key = key.strip().removeprefix("rl.")
        located = _locate(key)
        if located is None:
            issues.append(ConfigIssue(key, item, f"a known knob (one of: {known})"))
            continue
        cls, parts = located
        target = data
        for part in parts[:-1]:
            child = target.get(part)
            if child is not None and not isinstance(child, Mapping):
                break  # the file gave a non-mapping section; structuring reports it
            target[part] = child = dict(child or {})
            target = child
        else:
            target[parts[-1]] = _override_value(cls, parts[-1], text)
    return issues


def _override_value(cls: type, name: str, text: str) -> Any:
    """Read an override's right-hand side with YAML; a string knob keeps unquoted text as is."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text.strip()
    if _stringy(cls, name) and not isinstance(value, str):
        return text.strip()
    return value
