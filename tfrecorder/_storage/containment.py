"""The guarded path into an output folder: ``inside`` builds every path tfrecorder takes
from a manifest, a ledger or a listing of its output folder, refusing names that lead
outside it. Its own module because one guarded function, rather than a check in each
caller, is what keeps a conversion or a reader inside its folder.
"""

from __future__ import annotations

import os

from tfrecorder._storage.paths import _local, is_remote, join


def inside(root: str, name: str) -> str:
    """``root/name``, for a ``name`` made of plain components (``a``, ``index/a.idx``).

    Every path tfrecorder takes from a manifest, a ledger or a listing of its output
    folder goes through here before anything is read, written or removed there: an
    absolute name, ``..``, ``.``, an empty component or a NUL raises
    UnsafePathError, and so does a symbolic link (locally) at any folder between
    ``root`` and the name's last component, so nothing outside ``root`` is reached.
    (The last component may be a link: writes replace it, removal removes the link.)
    """
    components = str(name).split("/")
    if any(p in ("", ".", "..") or "\0" in p for p in components):
        raise UnsafePathError(f"{name!r} is not a plain file name inside {root}")
    if not is_remote(root):
        at = _local(root)
        for component in components[:-1]:
            at = os.path.join(at, component)
            if os.path.islink(at):
                raise UnsafePathError(
                    f"{at} is a symbolic link (to {os.readlink(at)}); tfrecorder never "
                    f"writes or removes anything through a link in its output folder. "
                    f"Remove the link, then run again")
    return join(root, *components)


class UnsafePathError(OSError):
    """A name that would lead outside the folder it was taken from."""


def is_link(path: str) -> bool:
    """True for a local symbolic link (object stores have none)."""
    return not is_remote(path) and os.path.islink(_local(path))
