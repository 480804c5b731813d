"""Where a multi-role boundary lives and what its names may be.

::

    <run>/role_checkpoints/iter_000000012/
        policy/  model.pt optim.pt role.pt data.pt .statecraft-role.json   (the first role)
        critic/  model.pt optim.pt role.pt .statecraft-role.json
        _SUCCESS                                                            (written last)

The boundaries live beside ``checkpoints/`` (never inside it), so the single-role catalog,
retention and resume never mistake a boundary for a partial single-role save.
"""

from __future__ import annotations

import re

from statecraft.checkpoint.kernel.layout import iter_dirname, parse_iter_dirname
from statecraft.errors import TrackingError

__all__ = [
    "MARKER_NAME",
    "ROLES_DIR",
    "ROLE_MANIFEST_NAME",
    "boundary_dir",
    "check_role_name",
    "iter_dirname",
    "parse_iter_dirname",
    "role_dir",
]

#: the directory of a run attempt that holds the multi-role boundaries
ROLES_DIR = "role_checkpoints"
#: the boundary's commit marker, created last by exclusive create
MARKER_NAME = "_SUCCESS"
#: each role unit's commit manifest, created last in the role's directory
ROLE_MANIFEST_NAME = ".statecraft-role.json"

_ROLE_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def check_role_name(name: object) -> str:
    """``name`` as a role name: lowercase letters, digits and ``_``, starting with a letter,
    at most 32 characters (it is a directory name of every boundary).

    Raises:
        TrackingError: naming the value and the rule.
    """
    if not isinstance(name, str) or not _ROLE_RE.match(name):
        raise TrackingError(
            f"track_role(name={name!r}): a role name is lowercase letters, digits and '_', "
            "starting with a letter, at most 32 characters (it names a directory of every "
            "boundary); use a name such as 'policy' or 'critic'"
        )
    return name


def boundary_dir(iteration: int) -> str:
    """The boundary's directory relative to the roles store (``iter_000000012``)."""
    return iter_dirname(iteration)


def role_dir(iteration: int, role: str) -> str:
    """One role's unit directory relative to the roles store."""
    return f"{iter_dirname(iteration)}/{role}"
