"""``init_from``: a model (and its copies: reference, old policy, maintained EMA) initialized
from a source's weights only, and the model's copies a run keeps beside it.

- :mod:`.sources`: what a source is (statecraft checkpoint or run, torch state dict file, DCP
  directory, safetensors / Hugging Face directory) and reading its entries lazily;
  :mod:`.remote`: staging an ``s3://`` source through the archive's verified fetch.
- :mod:`.keys`: the key and shape rule (every key, same shape, or one error listing every
  difference before a tensor changes) and its two opt-ins (wrapper prefixes, target-only LoRA).
- :mod:`.apply`: :func:`init_from`, the public function, and the all-targets-checked-first load.
- :mod:`.roles`: the tracked copies and their versioned identity, saved as the reserved
  stateful object ``model_roles``; :mod:`.moving`: the moving copies (``old.pt``, ``ref.pt``),
  their refresh after applied updates and the versioned ``derived_from_policy`` marker.
- :mod:`.ema`: the maintained EMA (an ``AveragedModel``): what may be tracked, its identity,
  its advance at ``record(Outcome.APPLIED)``; saved in ``model.pt`` under ``@ema.``.
- :mod:`.start`: what a start initializes (a fresh start: model and every copy; a resumed
  one: the frozen reference only), called by ``Checkpointer.resume()``.

Never read: a source's optimizer, clocks, RNG, data cursor or validation state.
"""

from statecraft.checkpoint.init_from.apply import InitReport, init_from, load_into
from statecraft.checkpoint.init_from.keys import STRIPPABLE_PREFIXES, KeyRules, match_keys
from statecraft.checkpoint.init_from.roles import (
    IDENTITY_NAME,
    IDENTITY_VERSION,
    ModelCopies,
    RolesIdentity,
)
from statecraft.checkpoint.init_from.sources import SourceWeights, open_source
from statecraft.checkpoint.init_from.start import apply_on_start, targets_at_start

__all__ = [
    "IDENTITY_NAME",
    "IDENTITY_VERSION",
    "STRIPPABLE_PREFIXES",
    "InitReport",
    "KeyRules",
    "ModelCopies",
    "RolesIdentity",
    "SourceWeights",
    "apply_on_start",
    "init_from",
    "load_into",
    "match_keys",
    "open_source",
    "targets_at_start",
]
