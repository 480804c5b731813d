"""The key and shape rules of ``init_from``: which source tensor initializes which model entry.

The rule is strict: every entry of the model's ``state_dict()`` (parameters and persistent
buffers) must be in the source under the same name and with the same shape, and the source may
hold nothing else. Anything else is one :class:`~statecraft.errors.InitFromError` listing every
difference (missing, unexpected, shape) before a tensor changes. Dtypes may differ (the copy
casts, as ``load_state_dict`` does: a bf16 safetensors file initializes an fp32 model).

Two documented opt-ins (:class:`KeyRules`) cover the common migrations:

- ``strip_prefix``: the wrapper prefixes ``_orig_mod.`` (``torch.compile``) and ``module.``
  (DDP, ``AveragedModel``) are removed from the start of the names on both sides before they
  are compared, so a compiled or wrapped run and a plain one initialize each other.
- ``lora``: target-only LoRA adapters. The model may hold adapters the source lacks: entries
  named like peft's (``...lora_A.<adapter>.weight`` / ``...lora_B.<adapter>.weight``, also
  ``lora_embedding_A`` / ``lora_embedding_B``) stay as the model built them, and peft's
  renames of the wrapped layer (``base_model.model.`` in front, ``.base_layer`` inside) are
  undone for matching. Accepted only as a complete cold inventory: the source holds no LoRA
  entry at all, and every ``lora_A`` has its ``lora_B`` (and back).

Example:
    >>> rules = KeyRules(strip_prefix=("_orig_mod.",))
    >>> rules.name("_orig_mod.fc.weight")
    'fc.weight'
    >>> KeyRules(lora=True).name("base_model.model.q.base_layer.weight")
    'q.weight'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs

from statecraft.errors import InitFromError

__all__ = ["STRIPPABLE_PREFIXES", "KeyRules", "Shapes", "match_keys"]

#: the prefixes ``strip_prefix`` may name (the wrappers that add them)
STRIPPABLE_PREFIXES = ("_orig_mod.", "module.")

#: a peft LoRA adapter entry: ``lora_A`` / ``lora_B`` (or the embedding variants) + adapter name
_LORA = re.compile(r"(^|\.)lora_(embedding_)?([AB])(\.|$)")
_PEFT_ROOT = "base_model.model."
_SHOWN = 8  # differences shown per kind in the message (all are in the error's fields)

#: a state dict's entry names mapped to their shapes
Shapes = Mapping[str, tuple[int, ...]]


def _prefixes(value: Sequence[str] | str) -> tuple[str, ...]:
    given = (value,) if isinstance(value, str) else tuple(value)
    bad = [p for p in given if p not in STRIPPABLE_PREFIXES]
    if bad:
        raise InitFromError(
            f"init_from strip_prefix={bad!r}: only {list(STRIPPABLE_PREFIXES)} are strippable "
            "(the prefixes torch.compile and DDP / AveragedModel add); pass one of them, or "
            "rename the source's keys before saving it",
            source=None,
        )
    return given


@attrs.frozen
class KeyRules:
    """The opt-ins of the key rule (both off: the strict rule).

    Attributes:
        strip_prefix: prefixes of :data:`STRIPPABLE_PREFIXES` removed from both sides' names.
        lora: target-only LoRA adapters are allowed (see the module docstring).
    """

    strip_prefix: tuple[str, ...] = attrs.field(default=(), converter=_prefixes)
    lora: bool = False

    def name(self, key: str) -> str:
        """``key`` as it is compared: the opted-in prefixes and peft's renames removed."""
        changed = True
        while changed:
            changed = False
            for prefix in self.strip_prefix:
                if key.startswith(prefix):
                    key, changed = key[len(prefix) :], True
        if self.lora:
            key = key.removeprefix(_PEFT_ROOT).replace(".base_layer.", ".")
        return key


def is_lora(key: str) -> bool:
    """True for a peft-named LoRA adapter entry."""
    return _LORA.search(key) is not None


def _compared(shapes: Shapes, rules: KeyRules, side: str, source: str) -> dict[str, str]:
    """compared name -> original name; two names that compare equal are refused."""
    names: dict[str, str] = {}
    for key in shapes:
        name = rules.name(key)
        if name in names:
            raise InitFromError(
                f"init_from {source}: the {side} names {names[name]!r} and {key!r} are the "
                f"same entry {name!r} once {rules.strip_prefix or 'peft'} prefixes are "
                "removed; drop the opt-in or fix the duplicated entry",
                source=source,
            )
        names[name] = key
    return names


def _lora_problems(target_only: list[str]) -> list[str]:
    """A target-only LoRA inventory must pair every A with its B (and back)."""
    present = set(target_only)

    def partner(key: str) -> str:
        swap = {"A": "B", "B": "A"}
        return _LORA.sub(lambda m: m.group(0).replace(m.group(3), swap[m.group(3)]), key)

    return [
        f"{partner(key)} (the LoRA partner of {key}, which the model holds)"
        for key in sorted(present)
        if partner(key) not in present
    ]


def match_keys(
    target: Shapes,
    source: Shapes,
    rules: KeyRules,
    *,
    where: str,
    tied: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Pair each model entry with the source entry that initializes it.

    Args:
        target: the model's entries and shapes.
        source: the source's entries and shapes.
        where: names the source in the error.
        tied: model entry -> another entry that is the same tensor (tied weights, such as an
            LM head tied to the embedding); a tied entry the source lacks is initialized from
            its partner's source entry (exports such as ``save_pretrained`` keep one of them).

    Returns:
        model name -> source name, for every model entry the source initializes (under
        ``rules.lora`` the target-only adapter entries are absent: they keep their values).

    Raises:
        InitFromError: every difference at once: ``missing``, ``unexpected``, ``shapes``.
    """
    live = _compared(target, rules, "model", where)
    saved = _compared(source, rules, "source", where)
    missing = sorted(set(live) - set(saved))
    partners: dict[str, str] = {}  # compared name -> the tied partner's compared name
    for name in missing:
        partner = (tied or {}).get(live[name])
        if partner is not None and rules.name(partner) in saved:
            partners[name] = rules.name(partner)
    missing = [n for n in missing if n not in partners]
    unexpected = sorted(set(saved) - set(live))
    lora_problem = ""
    if rules.lora and missing:
        target_only = [live[n] for n in missing if is_lora(n)]
        source_lora = sorted(saved[n] for n in saved if is_lora(n))
        if target_only and source_lora:
            lora_problem = (
                f"lora=True allows target-only adapters only when the source holds none; it "
                f"holds {source_lora[:_SHOWN]}"
            )
        elif target_only:
            missing = [n for n in missing if not is_lora(n)] + _lora_problems(target_only)
    shapes = [
        f"{name}: source {tuple(source[saved[name]])} != model {tuple(target[live[name]])}"
        for name in sorted(set(live) & set(saved))
        if tuple(source[saved[name]]) != tuple(target[live[name]])
    ]
    if missing or unexpected or shapes or lora_problem:
        parts = [
            f"{label} ({len(items)}): {', '.join(items[:_SHOWN])}"
            + (f", ... {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")
            for label, items in (
                ("missing from the source", missing),
                ("unexpected in the source", unexpected),
                ("shape differs", shapes),
            )
            if items
        ]
        if lora_problem:
            parts.append(lora_problem)
        raise InitFromError(
            f"init_from {where}: the source does not fit the model: {'; '.join(parts)}. "
            "Nothing was changed. Build the model with the source's architecture, or opt in "
            "to a documented migration (strip_prefix='_orig_mod.' / 'module.' for a wrapper "
            "prefix; lora=True for target-only LoRA adapters)",
            source=where,
            missing=missing,
            unexpected=unexpected,
            shapes=shapes,
        )
    plan = {live[name]: saved[name] for name in live if name in saved}
    plan.update({live[name]: saved[partner] for name, partner in partners.items()})
    return plan
