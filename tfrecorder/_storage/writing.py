"""Writing, moving and removing files, local paths and ``scheme://`` alike. Locally a
write creates a new file (``O_EXCL | O_NOFOLLOW``) under a temporary name and renames it
over the old one, so no write goes through a link and readers see the old file or the
whole new one. Its own module because this one way to write a file is what keeps
conversions from corrupting or escaping their output folder.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import IO

from tfrecorder._storage.generations import copy_new
from tfrecorder._storage.paths import _local, dirname, is_remote
from tfrecorder._storage.remote import _fs


def makedirs(path: str, private: bool = False) -> None:
    """Creates folder ``path`` and its parents; ``private``: the last one is its owner's
    alone (0700) locally."""
    if is_remote(path):
        _fs(path).makedirs(path, exist_ok=True)
    else:
        os.makedirs(_local(path), mode=0o700 if private else 0o777, exist_ok=True)


#: Buffer of files opened for writing: shards are written in large sequential chunks.
WRITE_BUFFER = 1 << 20


def open_file(path: str, mode: str = "rb", private: bool = False) -> IO:
    """A file object for ``path``; ``mode`` as for ``open`` (binary or text).

    Writing (``"w"``) locally creates a new file: an existing path, a symbolic link
    included, is a FileExistsError, so nothing is ever written through a link. Callers
    write under a fresh name and rename it into place. ``private`` files are readable
    by their owner only (0600).
    """
    if is_remote(path):
        return _fs(path).open(path, mode)
    if "a" in mode or "+" in mode:
        raise ValueError(f"mode {mode!r}: files are created new, or read")
    if "w" in mode:
        fd = _create(_local(path), private)
        return os.fdopen(fd, mode, buffering=WRITE_BUFFER if "b" in mode else -1)
    return open(_local(path), mode)


def _create(path: str, private: bool) -> int:
    """A new file at ``path``, opened for writing; never follows a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.open(path, flags, 0o600 if private else 0o666)


def write_bytes(path: str, data: bytes, private: bool = False, durable: bool = False) -> None:
    """Writes ``path`` so that readers see the old file or the whole new one, never a
    partial one, and never through a link: a new file under a temporary name renamed over
    ``path`` locally (a link at ``path`` is replaced, its target untouched); one upload on
    an object store, which makes an object visible only once complete. ``private``: see
    ``open_file``; ``durable``: flushed to the disk before the rename."""
    if is_remote(path):
        with _fs(path).open(path, "wb") as f:
            f.write(data)
        return
    tmp = temp_name(_local(path))
    try:
        with os.fdopen(_create(tmp, private), "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, _local(path))
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


def write_into(path: str, data: bytes) -> None:
    """``write_bytes``, with the local folders of ``path`` made first (an object store
    has no folders to make)."""
    if not is_remote(path):
        makedirs(dirname(path))
    write_bytes(path, data)


#: Bytes a file's name grows by while ``write_bytes`` writes it (``temp_name``).
TEMP_SUFFIX_BYTES = 17


def temp_name(path: str) -> str:
    """A fresh name beside ``path`` to write it under before the rename."""
    return f"{path}.{uuid.uuid4().hex[:12]}.tmp"


def write_atomic(path: str, data: bytes) -> None:
    """``write_bytes``, flushed to the disk before it replaces ``path``."""
    write_bytes(path, data, durable=True)


def create_exclusive(path: str, data: bytes) -> None:
    """Creates ``path`` holding ``data``; FileExistsError when it already exists.

    Atomic: of two callers, one wins (O_EXCL on a local disk; a ``ifGenerationMatch=0``
    precondition on Cloud Storage).
    """
    if is_remote(path):
        fs = _fs(path)
        fs.invalidate_cache(path)
        if fs.exists(path):  # stores that ignore the precondition (emulators) still refuse
            raise FileExistsError(path)
        fs.pipe_file(path, data, mode="create")
        return
    # Written whole under a temporary name, then linked to ``path``: the link fails when
    # ``path`` exists, and a reader never sees a created but not yet written file.
    local = _local(path)
    tmp = temp_name(local)
    try:
        with os.fdopen(_create(tmp, False), "wb") as f:
            f.write(data)
        try:
            os.link(tmp, local)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: create, then write
            with os.fdopen(_create(local, False), "wb") as f:
                f.write(data)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


def rename(src: str, dst: str) -> None:
    """Moves ``src`` to ``dst``, replacing ``dst``; atomic on a local file system. On an
    object store, a server-side copy and a delete: gcsfs's ``mv`` first tries GCS's
    ``moveTo`` call, and where a server lacks it (a GCS emulator, other GCS-compatible
    stores) it retries for about 30 seconds per object before it copies."""
    if is_remote(src):
        fs = _fs(src)
        fs.copy(src, dst)
        fs.rm_file(src)
    else:
        os.replace(_local(src), _local(dst))


def move_new(src: str, dst: str) -> None:
    """Moves ``src`` to ``dst`` only where ``dst`` does not exist: FileExistsError
    otherwise, and ``src`` stays. Locally a hard link then the removal of ``src`` (the
    link fails on an existing name, atomically); on an object store a server-side copy
    conditional on no object at ``dst`` (``ifGenerationMatch=0``: of two copies to one
    name, whatever their timing, one lands), then the removal of ``src``; on a file
    system without hard links, a check that ``dst`` is absent before the rename."""
    if not is_remote(src):
        try:
            os.link(_local(src), _local(dst))
        except FileExistsError:
            raise
        except OSError:  # no hard links here: the check, then the rename
            if os.path.lexists(_local(dst)):
                raise FileExistsError(dst) from None
            os.rename(_local(src), _local(dst))
            return
        os.remove(_local(src))
        return
    fs = _fs(dst)
    fs.invalidate_cache(dst)
    if fs.exists(dst):  # stores that ignore the precondition (emulators) still refuse
        raise FileExistsError(dst)
    copy_new(src, dst)
    fs.rm_file(src)


def write_new(path: str, data: bytes) -> None:
    """``create_exclusive``, with the local folders of ``path`` made first."""
    if not is_remote(path):
        makedirs(dirname(path))
    create_exclusive(path, data)


def remove(path: str) -> None:
    """Removes a file or a whole directory tree; absent paths are fine. A link is
    removed as a link: what it points to is never touched."""
    if is_remote(path):
        fs = _fs(path)
        if fs.exists(path):
            fs.rm(path, recursive=True)
        return
    path = _local(path)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
