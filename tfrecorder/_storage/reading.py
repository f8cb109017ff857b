"""Reading files and looking at what is there, local paths and ``scheme://`` alike: whole
files (capped, refusing what is not a regular file), byte ranges, sizes and stamps,
existence, listings, patterns, and the missing files of a whole column at once. Its own
module because reads are most of the traffic; ``ROUND_TRIPS`` calls at once
(``pool.each``) are how an object store is read fast.
"""

from __future__ import annotations

import os
import posixpath
import stat
from typing import Iterator, Sequence

from tfrecorder._storage.paths import _local, is_remote
from tfrecorder._storage.pool import each
from tfrecorder._storage.remote import _fs


class NotAFileError(OSError):
    """The path is not a regular file (a directory, a device, a FIFO, a socket)."""


class FileTooLargeError(OSError):
    """The file is larger than the cap a read was given."""


def exists(path: str) -> bool:
    if is_remote(path):
        return _fs(path).exists(path)
    return os.path.exists(_local(path))


#: Local paths looked at by one thread at a time in ``missing``.
STAT_BATCH = 1024


def missing(paths: Sequence, listed: dict[str, set[str]] | None = None) -> list[int]:
    """The indices of ``paths`` (None: no file wanted) where no file is, as a reader
    would find it, in order: one ``stat`` per local path, ``ROUND_TRIPS`` threads at once
    (a stat waits on the file system without the GIL; on a network file system or a
    mounted bucket each is a round trip); on an object store, one listing per folder the
    paths are in (a request per thousand names, where a lookup per object would be a
    request each: a table names most of its folders' images), ``ROUND_TRIPS`` folders at
    once, held in ``listed`` (folder -> names) for the next calls. Anything else a read
    would meet (a directory, no permission) is left to the read, which names it."""
    out: list[int] = []
    local: list[int] = []
    remote: list[int] = []
    listed = {} if listed is None else listed
    unlisted: dict[str, str] = {}  # folder -> a path in it, in the order first met
    for i, path in enumerate(paths):
        if path is None:
            continue
        if not is_remote(path):
            local.append(i)
            continue
        remote.append(i)
        folder = path.rpartition("/")[0]
        if folder not in listed:
            unlisted.setdefault(folder, path)
    # The folders' listings in flight together: a table with an image per folder
    # would otherwise wait a round trip per row.
    folders = list(unlisted)
    got = each(lambda folder: _names_in(folder, unlisted[folder]), folders, at_once=True)
    listed.update(zip(folders, got))
    for i in remote:
        folder, _, name = paths[i].rpartition("/")
        if name not in listed[folder]:
            out.append(i)

    def gone(batch: list[int]) -> list[int]:
        return [i for i in batch if not _there(_local(paths[i]))]

    batches = [local[k:k + STAT_BATCH] for k in range(0, len(local), STAT_BATCH)]
    for found in each(gone, batches, at_once=True):
        out.extend(found)
    return sorted(out)


def _there(path: str) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):  # not a folder on the way, a NUL: the read says
        pass
    return True


def _names_in(folder: str, path: str) -> set[str]:
    """The names of the objects directly in object-store ``folder``, listed now; ``path``,
    one of them, is what a problem with the file system (no credentials) names."""
    fs = _fs(path)
    fs.invalidate_cache(folder)
    try:
        return {posixpath.basename(p.rstrip("/")) for p in fs.ls(folder, detail=False)}
    except FileNotFoundError:
        return set()
    finally:
        # gcsfs would answer later questions about these objects (``stamp``: their
        # object generation) from this listing, however long ago it was made.
        fs.invalidate_cache(folder)


def isdir(path: str) -> bool:
    if is_remote(path):
        return _fs(path).isdir(path)
    return os.path.isdir(_local(path))


def listdir(path: str) -> list[str]:
    """Sorted names (not paths) of the entries of directory ``path``; [] if it is absent."""
    if is_remote(path):
        fs = _fs(path)
        if not fs.exists(path):
            return []
        fs.invalidate_cache(path)
        return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))
    try:
        return sorted(os.listdir(_local(path)))
    except FileNotFoundError:
        return []


def walk_files(path: str) -> Iterator[str]:
    """Every file below directory ``path``, as full paths, in sorted order."""
    if is_remote(path):
        fs = _fs(path)
        protocol = path.split("://", 1)[0]
        for p in sorted(fs.find(path)):
            yield p if "://" in p else f"{protocol}://{p}"
        return
    for root, dirs, files in os.walk(_local(path)):
        dirs.sort()
        for name in sorted(files):
            yield os.path.join(root, name)


def glob(pattern: str) -> list[str]:
    """The files matching ``pattern``, as full paths, sorted; [] when none does."""
    if is_remote(pattern):
        fs = _fs(pattern)
        protocol = pattern.split("://", 1)[0]
        found = fs.glob(pattern, detail=True)
        return sorted(p if "://" in p else f"{protocol}://{p}"
                      for p, info in found.items() if info.get("type") != "directory")
    import glob as globbing

    return sorted(p for p in globbing.glob(os.path.expanduser(_local(pattern)))
                  if os.path.isfile(p))


def read_bytes(path: str) -> bytes:
    if is_remote(path):
        return _fs(path).cat_file(path)
    with open(_local(path), "rb") as f:
        return f.read()


def read_range(path: str, offset: int, length: int) -> bytes:
    """``length`` bytes of ``path`` from ``offset``: one ranged request on an object store."""
    if is_remote(path):
        return _fs(path).cat_file(path, start=offset, end=offset + length)
    with open(_local(path), "rb") as f:
        f.seek(offset)
        return f.read(length)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"))


def read_file(path: str, max_bytes: int) -> bytes:
    """The bytes of regular file ``path``, refusing anything else before reading it.

    A device (/dev/zero), a FIFO, a socket or a directory raises NotAFileError at once,
    and a file over ``max_bytes`` raises FileTooLargeError, so no input can hang or
    exhaust a run. On an object store the read itself stops after ``max_bytes + 1``.
    """
    return read_file_stamped(path, max_bytes, stamped=False)[0]


def read_file_stamped(path: str, max_bytes: int,
                      stamped: bool = True) -> tuple[bytes, int | None, int | None]:
    """``read_file``, with the file's size and stamp as ``stamp`` gives them: locally
    from the descriptor the bytes are read through (no second look at the path); on an
    object store from the object's metadata, asked for before its bytes (so a stamp is
    never newer than the bytes read). ``stamped=False`` asks for no stamp: ``(data,
    None, None)``."""
    if is_remote(path):
        size_, stamp_ = stamp(path) if stamped else (None, None)
        data = _fs(path).cat_file(path, start=0, end=max_bytes + 1)
        if len(data) > max_bytes:
            raise FileTooLargeError(f"{path} is larger than {max_bytes} bytes")
        return data, size_, stamp_
    local = _local(path)
    mode = os.stat(local).st_mode
    for test, kind in _KINDS:
        if test(mode):
            raise NotAFileError(f"{path} is {kind}, not a regular file")
    # O_NONBLOCK: should the path turn into a FIFO after the check, open does not wait.
    fd = os.open(local, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFileError(f"{path} is not a regular file")
        if st.st_size > max_bytes:
            raise FileTooLargeError(f"{path} is {st.st_size} bytes, more than {max_bytes}")
        # One read of the size fstat gave, plus a byte that shows a file grown since.
        # A read of max_bytes + 1 would allocate (and unmap) that much for every image:
        # five times the cost of reading a 60 KB photo.
        data = os.read(fd, st.st_size + 1)
        if len(data) != st.st_size:  # it changed under us, or a short read: read to its end
            chunks, size_ = [data], len(data)
            while size_ <= max_bytes:
                chunk = os.read(fd, min(max_bytes + 1 - size_, _READ_CHUNK))
                if not chunk:
                    break
                chunks.append(chunk)
                size_ += len(chunk)
            data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise FileTooLargeError(f"{path} is more than {max_bytes} bytes")
    return data, st.st_size, st.st_mtime_ns


def stamp(path: str) -> tuple[int, int]:
    """``(size, stamp)`` of file ``path``, which an update compares to decide that an
    image is unchanged without reading it: the stamp is the modification time in
    nanoseconds locally, the object generation on Cloud Storage (a new one for every
    write of the object). OSError when it cannot be looked at."""
    if is_remote(path):
        fs = _fs(path)
        info = fs.info(path)
        object_generation = info.get("generation")
        if object_generation in (None, ""):  # a store without them: its update time
            when = info.get("mtime") or info.get("updated")
            object_generation = (int(when.timestamp() * 1e9) if hasattr(when, "timestamp")
                                 else 0)
        return int(info["size"]), int(object_generation)
    st = os.stat(_local(path))
    return st.st_size, st.st_mtime_ns


#: Bytes per read once a file turns out larger than its size said (``read_file``).
_READ_CHUNK = 1 << 20


def size(path: str) -> int:
    if is_remote(path):
        return int(_fs(path).size(path))
    return os.path.getsize(_local(path))


def mtime(path: str) -> float | None:
    """When ``path`` was last written (seconds since the epoch), or None if absent."""
    try:
        if is_remote(path):
            fs = _fs(path)
            fs.invalidate_cache(path)
            info = fs.info(path)
            when = info.get("mtime") or info.get("updated")
            if isinstance(when, str):
                import datetime

                return datetime.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
            return when.timestamp() if hasattr(when, "timestamp") else None
        return os.lstat(_local(path)).st_mtime
    except FileNotFoundError:
        return None
