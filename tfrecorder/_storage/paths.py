"""Paths as strings, local and ``scheme://`` alike: their kind, joined, split, resolved
against a folder, whole columns of them resolved at once. Its own module because it does
no I/O: every other module of ``_storage`` builds on it.
"""

from __future__ import annotations

import itertools
import os
import posixpath

#: URI schemes tfrecorder reads and writes; anything else is refused before a run.
SCHEMES = ("gs",)


def scheme(path: str) -> str | None:
    """``gs`` for ``gs://...``; None for a local path (``file://`` included)."""
    return str(path).split("://", 1)[0].lower() if is_remote(path) else None


def check_scheme(path: str) -> str | None:
    """The reason ``path`` cannot be used, or None: only local paths and gs:// work."""
    kind = scheme(path)
    if kind is None or kind in SCHEMES:
        return None
    return (f"unsupported URI scheme {kind}://; tfrecorder reads and writes local paths and "
            f"gs:// (copy the files to Cloud Storage or a local disk)")


def is_remote(path: str) -> bool:
    """True for ``scheme://...`` paths (``gs://``, ``s3://``, ``memory://``...)."""
    return "://" in str(path) and not str(path).startswith("file://")


def _local(path: str) -> str:
    path = str(path)
    return path[len("file://"):] if path.startswith("file://") else path


def join(base: str, *components: str) -> str:
    """``base/component/...`` with the separator the path's kind uses."""
    if is_remote(base):
        return posixpath.join(base, *components)
    return os.path.join(_local(base), *components)


def dirname(path: str) -> str:
    if is_remote(path):
        return posixpath.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(_local(path)))


def parent(path: str) -> str:
    """The folder of ``path`` as written (not made absolute): "" for a bare file name."""
    if is_remote(path):
        return posixpath.dirname(path.rstrip("/"))
    return os.path.dirname(_local(path))


def basename(path: str) -> str:
    return posixpath.basename(str(path).rstrip("/")) if is_remote(path) else os.path.basename(path)


def resolve(path: str, base: str | None = None) -> str:
    """``path`` made absolute: relative paths resolve against ``base`` (or the cwd)."""
    path = str(path)
    if is_remote(path):
        return path
    path = os.path.expanduser(_local(path))
    if os.path.isabs(path):
        return os.path.normpath(path)
    if base is not None and is_remote(base):
        return posixpath.normpath(posixpath.join(base, path)).replace(":/", "://", 1)
    return os.path.normpath(os.path.join(base or os.getcwd(), path))


def within(folder: str, path: str) -> str:
    """``path`` as seen from where ``folder`` is: itself when absolute or a URI, else
    ``folder/path`` (normalized), still relative when ``folder`` is. A relative path in
    a file read from ``folder`` keys the same image on every machine, wherever the
    working directory is, unlike its absolute form."""
    path = str(path)
    if is_remote(path) or os.path.isabs(os.path.expanduser(_local(path))) or not folder:
        return path
    if is_remote(folder):
        return posixpath.normpath(posixpath.join(folder, path)).replace(":/", "://", 1)
    return os.path.normpath(os.path.join(_local(folder), _local(path)))


def all_on_gcs(uris) -> bool:
    """True when every one of ``uris`` is a string starting with ``gs://`` (one C-level
    pass each over a column, no Python call per value)."""
    return set(map(type, uris)) == {str} and all(map(str.startswith, uris, _GS))


_GS = itertools.repeat("gs://")


def resolve_all(paths: list[str], base: str | None = None) -> list[str] | None:
    """``[resolve(p, base) for p in paths]`` for a column of plain relative local paths
    (``photos/cat/1.jpg``), or of plain absolute ones (``/data/cat/1.jpg``, which resolve
    to themselves), found with a few string searches over the whole column instead of a
    call per path; None when any path could need ``resolve``'s care (a scheme, ``~``,
    ``.``, ``//``, a trailing ``/``, a blank, non-ASCII) or the column mixes the two."""
    base = base or os.getcwd()
    if (os.sep != "/" or not paths or is_remote(base) or not os.path.isabs(base)
            or os.path.normpath(base) != base):
        return None
    joined = "\0".join(paths)
    if (not joined or joined.count("\0") != len(paths) - 1 or not joined.isascii()
            or joined[-1] in "/\0"):
        return None
    if joined[0] == "/":  # absolute: every path must be, and normalized already
        if (joined.count("\0/") != len(paths) - 1
                or any(c in joined for c in _NOT_PLAIN_ABSOLUTE)):
            return None
        return list(paths)
    if any(c in joined for c in _NOT_PLAIN) or joined[0] in "~.\0":
        return None
    prefix = base if base.endswith("/") else base + "/"
    return list(map(prefix.__add__, paths))


#: What no plain relative path holds: blanks, a scheme, empty or dot components, a
#: component starting with "~", an empty path (two separators in a row).
_NOT_PLAIN = (" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f",
              "://", "//", "/.", "\0/", "\0.", "\0~", "/\0", "\0\0")
#: The same for a column of absolute paths, each of which starts with "/".
_NOT_PLAIN_ABSOLUTE = tuple(c for c in _NOT_PLAIN if c != "\0/")


def is_pattern(path: str) -> bool:
    """True when ``path`` holds a wildcard (``*``, ``?`` or ``[``), as Cloud Storage's and
    the shell's patterns do (``gs://bucket/export/training-*``)."""
    return any(c in str(path) for c in "*?[")
