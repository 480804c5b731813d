"""Loading the checkpoint configuration: YAML files, ``key=value`` overrides, mappings.

Every problem found (unknown keys at any level, wrong types, values out of range, malformed
overrides, broken cross-option rules) is collected and raised together as ONE
:class:`~statecraft.errors.ConfigError` whose issues name each dotted knob. cattrs structures
the mapping; each knob's checker (:mod:`statecraft.checkpoint.config.knobs`) runs as its
structure hook.

The functions take the root record class (``CheckpointConfig``, whose methods call them with
``cls``) and walk its sections through their attrs fields, so this module never names the
schema it loads.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, get_origin

import attrs
import cattrs
import yaml
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn, override

from statecraft.checkpoint.config.knobs import _CHECK, _Checker, _raise_if
from statecraft.errors import ConfigError, ConfigIssue

__all__ = ["config_from_dict", "load_config", "unstructure"]

C = TypeVar("C")


def config_from_dict(root: type[C], data: Mapping[str, Any], *, source: str) -> C:
    """Build a ``root`` config from a knob mapping (see :meth:`CheckpointConfig.from_dict`).

    Raises:
        ConfigError: every problem found, together, with ``source``.
    """
    try:
        return _structure_section(root, data, "")
    except _IssuesFound as exc:
        raise ConfigError(exc.issues, source=source) from None


def load_config(
    root: type[C], path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()
) -> C:
    """Read a YAML knob file (or defaults) and apply overrides into a ``root`` config (see
    :meth:`CheckpointConfig.load`).

    Raises:
        ConfigError: every problem of the file, the overrides and the knobs, together.
    """
    source = "checkpoint config" if path is None else os.fspath(path)
    data: dict[str, Any] = {} if path is None else _read_yaml(source)
    if overrides:
        source += " + overrides"
    issues = _apply_overrides(root, data, overrides)
    try:
        config = _structure_section(root, data, "")
    except _IssuesFound as exc:
        issues.extend(exc.issues)
    _raise_if(issues, source)
    return config


def unstructure(config: Any) -> dict[str, Any]:
    """The knobs of ``config`` as plain JSON-able data."""
    return _CONVERTER.unstructure(config)


def _prefix(cls: Any) -> str:
    """The dotted prefix of a config record's knobs (``upload.``; ``""`` at the top)."""
    return str(cls._knob_prefix)


class _IssuesFound(Exception):
    """Internal carrier of collected issues through cattrs' structuring."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__(f"{len(issues)} issue(s)")
        self.issues = issues


def _known_knobs(cls: type) -> list[str]:
    """Every dotted leaf knob under ``cls``, in declaration order."""
    names: list[str] = []
    for f in attrs.fields(cls):
        if f.metadata.get(_CHECK) is None:
            names.extend(_known_knobs(f.type))
        else:
            names.append(_prefix(cls) + f.name)
    return names


def _did_you_mean(key: str, known: Sequence[str]) -> str:
    """``"; did you mean 'save_every'?"`` for the known knob closest to the unknown ``key``
    (a typo, a stray space, another case), or ``""`` when none is close."""
    text = key.strip().lower()
    exact = [k for k in known if k.lower() == text]
    close = exact or difflib.get_close_matches(text, known, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


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
            names = [prefix + f.name for f in attrs.fields(sub.cl)]
            for key in sorted(sub.extra_fields, key=str):
                allowed = f"a known knob{_did_you_mean(prefix + str(key), names)} (one of: {known})"
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
        return _structure_fn(cls)(data, cls)
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


def _structure_fn(cls: type) -> Callable[[Any, Any], Any]:
    """cattrs' structuring function of config record ``cls``, built on first use and kept:
    each knob's checker is its field's hook, each section field is structured by
    :func:`_structure_section` under its own prefix."""
    fn = _STRUCTURE_FNS.get(cls)
    if fn is None:
        overrides: dict[str, Any] = {
            f.name: override(
                struct_hook=_field_hook(f.metadata[_CHECK], _prefix(cls) + f.name)
                if _CHECK in f.metadata
                else _section_hook(f.type, _prefix(f.type))
            )
            for f in attrs.fields(cls)
        }
        fn = make_dict_structure_fn(
            cls,
            _CONVERTER,
            _cattrs_forbid_extra_keys=True,
            _cattrs_detailed_validation=True,
            **overrides,
        )
        _CONVERTER.register_structure_hook(cls, _section_hook(cls, _prefix(cls)))
        _STRUCTURE_FNS[cls] = fn
    return fn


class _StrictLoader(yaml.SafeLoader):
    """YAML with only the scalars the config accepts: integers in plain decimal (``16``, not
    ``0x10``, ``0o20``, ``1_6`` or ``016``), booleans spelled ``true`` / ``false`` (``yes``,
    ``on`` and ``True`` stay strings, so the knob's checker names them), ``null`` / ``~`` /
    nothing for null, and a mapping key given twice is an error."""


_StrictLoader.yaml_implicit_resolvers = {
    key: [
        (tag, regexp) for tag, regexp in resolvers if tag.rsplit(":", 1)[-1] not in ("bool", "int")
    ]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|false)$"), list("tf")
)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^-?(?:0|[1-9][0-9]*)$"), list("-0123456789")
)


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"found the key {key!r} twice (first {seen[key]}); give each knob once",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(
    "tag:yaml.org,2002:map",
    lambda loader, node: _strict_mapping(loader, node),
)


def _read_yaml(source: str) -> dict[str, Any]:
    """Read the knob mapping of a YAML file, unwrapping a sole top-level ``rl:`` key."""
    try:
        with open(source, encoding="utf-8") as fh:
            loaded = yaml.load(fh, Loader=_StrictLoader)  # a SafeLoader subclass: safe
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


def _locate(root: type, key: str) -> tuple[type, list[str]] | None:
    """Return the class holding the last part of dotted ``key`` (a knob of ``root``) and its
    parts; None if unknown."""
    cls: type = root
    parts = key.split(".")
    for part in parts[:-1]:
        field = attrs.fields_dict(cls).get(part)
        if field is None or _CHECK in field.metadata:
            return None
        cls = field.type if isinstance(field.type, type) else root
    return (cls, parts) if parts[-1] in attrs.fields_dict(cls) else None


def _apply_overrides(
    root: type, data: dict[str, Any], overrides: Sequence[str]
) -> list[ConfigIssue]:
    """Apply ``KNOB=VALUE`` overrides (knobs of ``root``) to ``data`` in place; return the
    malformed ones."""
    known = ", ".join(_known_knobs(root))
    if isinstance(overrides, str):
        return [ConfigIssue("overrides", overrides, "a list of KNOB=VALUE strings")]
    issues: list[ConfigIssue] = []
    given: dict[str, str] = {}
    for i, item in enumerate(overrides):
        if not isinstance(item, str) or "=" not in item:
            allowed = f"KNOB=VALUE with a known knob (one of: {known})"
            issues.append(ConfigIssue(f"overrides[{i}]", item, allowed))
            continue
        raw_key, _, text = item.partition("=")
        key = raw_key.removeprefix("rl.")
        if raw_key != raw_key.strip():
            # ``save_every =3`` is refused, not read as ``save_every=3``: a knob name is
            # written exactly, like a value (whose surrounding whitespace is refused too)
            meant = raw_key.strip().removeprefix("rl.")
            hint = f"; did you mean {meant + '=' + text.strip()!r}?" if _locate(root, meant) else ""
            allowed = f"KNOB=VALUE with no whitespace around the knob name{hint}"
            issues.append(ConfigIssue(meant or f"overrides[{i}]", item, allowed))
            continue
        located = _locate(root, key)
        if located is None:
            hint = _did_you_mean(key, _known_knobs(root))
            issues.append(ConfigIssue(key, item, f"a known knob{hint} (one of: {known})"))
            continue
        if key in given:
            issues.append(
                ConfigIssue(
                    key,
                    f"{given[key]!r} and {item!r}",
                    "each knob at most once in the overrides (drop one of them)",
                )
            )
            continue
        given[key] = item
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
    """Read an override's right-hand side.

    A string knob takes the text verbatim (``resume=/ck/a #1`` is that path; surrounding
    whitespace is kept, so its checker can refuse it); only a quoted value (``resume='off'``)
    is read as a YAML string. Any other knob's value is read with the strict YAML scalars
    (:class:`_StrictLoader`); with surrounding whitespace or a ``#`` (a comment) the raw text
    is kept, which its checker refuses, naming the rule.
    """
    if _stringy(cls, name):
        if text.strip()[:1] in ("'", '"'):
            try:
                value = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: safe
            except yaml.YAMLError:
                return text
            return value if isinstance(value, str) else text
        return text
    if text != text.strip() or "#" in text:
        return text
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: safe
    except yaml.YAMLError:
        return text
