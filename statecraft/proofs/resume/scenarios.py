"""The scenarios ``specs/resume.toml`` names: the restarted process of every crashed local save
(:func:`~statecraft.proofs.save.scenarios.save_scenarios`: resume over a local attempt's tree)
and of every crashed direct object-store save
(:func:`~statecraft.proofs.resume.direct_scenarios.direct_resume_scenarios`: resume over a
``s3://`` root through the same machine)."""

from __future__ import annotations

from typing import Any

from statecraft.proofs.resume.direct_scenarios import direct_resume_scenarios
from statecraft.proofs.save.scenarios import save_scenarios

__all__ = ["resume_scenarios"]


def resume_scenarios() -> list[Any]:
    """Every scenario whose recovery runs the ``resume`` machine: local, then direct."""
    return [*save_scenarios(), *direct_resume_scenarios()]
