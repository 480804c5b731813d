"""Crash-consistent checkpointing for training frameworks that own their own loop.

- :mod:`statecraft.integrations.lightning`: a Lightning ``CheckpointIO`` plugin
  (``pip install 'statecraft[lightning]'``).
- :mod:`statecraft.integrations.hf`: a Hugging Face ``TrainerCallback``
  (``pip install 'statecraft[hf]'``).

Both seal what the framework writes into committed units (:mod:`statecraft.checkpoint.units`:
every file durable and digested, a commit manifest written last, invalidate before delete).
Importing this package imports neither framework; each submodule imports its framework and
raises a clear error naming the extra to install when it is missing.
"""
