"""Multi-role boundaries: one atomic checkpoint over several training roles (PPO's policy and
critic, a GAN's generator and discriminator, a teacher and a student).

A boundary is ``role_checkpoints/iter_N/``: one committed unit per role (``<role>/``, its own
``.statecraft-role.json`` written last) and ``_SUCCESS``, created last by exclusive create,
recording every role's committed optimizer counter and the loop's ``loop_state``. The
``roles_boundary`` machine is the transaction (:mod:`.bindings`); :mod:`.reading` judges and
picks boundaries; the ``roles_prune`` machine (:mod:`.prune_bindings`) is their retention;
:mod:`.run` is the front the facade hands a multi-role loop's calls to.
"""

from __future__ import annotations

from statecraft.checkpoint.roles.layout import MARKER_NAME, ROLE_MANIFEST_NAME, ROLES_DIR
from statecraft.checkpoint.roles.loop_state import check_loop_state
from statecraft.checkpoint.roles.prune_bindings import KeepBoundaries
from statecraft.checkpoint.roles.reading import BoundaryVerdict, judge_boundary, pick_boundary
from statecraft.checkpoint.roles.records import BoundaryMarker, RoleManifest
from statecraft.checkpoint.roles.run import RoleRun, RolesResume
from statecraft.checkpoint.roles.tracking import RoleSet, TrackedRole, refuse_config

__all__ = [
    "MARKER_NAME",
    "ROLES_DIR",
    "ROLE_MANIFEST_NAME",
    "BoundaryMarker",
    "BoundaryVerdict",
    "KeepBoundaries",
    "RoleManifest",
    "RoleRun",
    "RoleSet",
    "RolesResume",
    "TrackedRole",
    "check_loop_state",
    "judge_boundary",
    "pick_boundary",
    "refuse_config",
]
