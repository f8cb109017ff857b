"""Every file access of tfrecorder goes through here: local paths and ``gs://`` alike.

Local paths use the operating system directly (the fast path for the common case);
anything with a ``scheme://`` goes through fsspec (gcsfs for ``gs://``), which honours
``STORAGE_EMULATOR_HOST`` for tests against a local GCS emulator.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import shutil
import stat
import threading
import uuid
from typing import IO, Iterator, Sequence

#: URI schemes tfrecorder reads and writes; anything else is refused before a run.
SCHEMES = ("gs",)


class NotAFileError(OSError):
    """The path is not a regular file (a directory, a device, a FIFO, a socket)."""


class FileTooLargeError(OSError):
    """The file is larger than the cap a read was given."""


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


#: Calls in flight at once where each is a round trip to an object store (``each``).
ROUND_TRIPS = 16


def each(fn, items: list, at_once: bool) -> list:
    """``[fn(item) for item in items]``, in order; with ``at_once`` (each call a round
    trip to an object store, or a whole file read), ROUND_TRIPS calls in flight."""
    if not at_once or len(items) < 2:
        return [fn(item) for item in items]
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(ROUND_TRIPS) as pool:
        return list(pool.map(fn, items))


#: Held while a scheme's file system is resolved for the first time in this process.
_FS_LOCK = threading.Lock()
#: Schemes whose file system has been resolved once (fsspec caches the instance).
_RESOLVED: set[str] = set()


def _new_fs_lock() -> None:
    # A process forked while another thread held the lock (a DataLoader's workers,
    # forked while reader threads make their first reads) would wait for it forever.
    global _FS_LOCK
    _FS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # no fork on Windows
    os.register_at_fork(after_in_child=_new_fs_lock)


def _fs(path: str):
    """The fsspec file system of ``path``; ConfigError naming the scheme when no file
    system for it can be imported (``s3://`` without s3fs, a scheme fsspec does not
    know), instead of fsspec's ImportError or ValueError.

    The first resolution of each scheme (importing fsspec and gcsfs, creating the file
    system) happens under one lock: reader threads make a process's first reads at
    once, and each would otherwise create a file system of its own (its credentials,
    its connection pool) or meet a module another thread is still importing. Later
    calls take fsspec's cached instance without the lock."""
    kind = scheme(path)
    if kind not in _RESOLVED:
        with _FS_LOCK:
            if kind not in _RESOLVED:
                fs = _resolve(path, kind)
                _RESOLVED.add(kind)
                return fs
    return _resolve(path, kind)


def _resolve(path: str, kind: str):
    import fsspec

    if kind == "gs":
        problem = credentials_problem(path)
        if problem is not None:
            from tfrecorder._errors import ConfigError

            raise ConfigError(problem)

    try:
        fsspec.get_filesystem_class(kind)
    except (ImportError, ValueError) as e:
        from tfrecorder._errors import ConfigError

        if kind in SCHEMES:  # a dependency of ours missing or broken
            raise ConfigError(f"{path}: {kind}:// needs gcsfs, which cannot be imported "
                              f"({e}); install it: pip install gcsfs") from None
        raise ConfigError(f"{path}: {check_scheme(path)}") from None
    fs, _ = fsspec.core.url_to_fs(path)
    return fs


#: Where ``gcloud auth application-default login`` writes its credentials, below the
#: gcloud configuration folder (``CLOUDSDK_CONFIG``, else ~/.config/gcloud, or
#: %APPDATA%\gcloud on Windows).
ADC_FILE = "application_default_credentials.json"
#: Variables set on Google Cloud's serverless runtimes (Cloud Run services and jobs,
#: Cloud Functions, App Engine), where the metadata server gives credentials.
_SERVERLESS = ("K_SERVICE", "CLOUD_RUN_JOB", "FUNCTION_TARGET", "GAE_ENV")
#: The file Linux fills from the machine's firmware; "Google ..." on Google's machines.
_PRODUCT_NAME = "/sys/class/dmi/id/product_name"


def _gcloud_folder() -> str:
    folder = os.environ.get("CLOUDSDK_CONFIG")
    if folder:
        return folder
    if os.name == "nt" and os.environ.get("APPDATA"):
        return os.path.join(os.environ["APPDATA"], "gcloud")
    return os.path.join(os.path.expanduser("~"), ".config", "gcloud")


def on_google_cloud() -> bool:
    """True when this machine is Google's (Compute Engine, GKE, Dataflow and Vertex AI
    workers, Cloud Run...), judged from local signs only: its firmware's product name or a
    serverless runtime's variables. ``NO_GCE_CHECK=true`` tells google.auth to not use
    the metadata server, so then it is False too."""
    if os.environ.get("NO_GCE_CHECK", "").lower() == "true":
        return False
    if any(os.environ.get(v) for v in _SERVERLESS):
        return True
    if os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_ROOT"):
        return True  # a metadata server named by the user
    try:
        with open(_PRODUCT_NAME) as f:
            return f.read().strip().startswith("Google")
    except OSError:
        return False


def credentials_problem(path: str) -> str | None:
    """Why ``gs://`` cannot be reached from here, in one line naming the fix; None when
    credentials are at hand (or not needed: a GCS emulator, fsspec's ``token`` set).

    It looks where google.auth looks (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
    application-default file, a Google Cloud machine) without any network request. On a
    machine that is not Google's, google.auth would ask the Compute Engine metadata
    server, which is not there: that costs seconds of timeouts, then gcsfs goes on
    anonymously and retries each request for half a minute. So the metadata server is
    never asked; a Google machine is known by its firmware's name, as google.auth itself
    falls back to when the server does not answer.
    """
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return None
    if _fsspec_token():
        return None
    explicit = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if explicit:
        if not os.path.isfile(os.path.expanduser(explicit)):
            return (f"{path}: GOOGLE_APPLICATION_CREDENTIALS={explicit} is not a file; set it "
                    f"to a service account key file (JSON), or unset it and run `gcloud auth "
                    f"application-default login`")
        return None
    adc = os.path.join(_gcloud_folder(), ADC_FILE)
    if os.path.isfile(adc) or on_google_cloud():
        return None
    return (f"{path}: no Google Cloud credentials found (GOOGLE_APPLICATION_CREDENTIALS is "
            f"not set, {adc} does not exist, and this is not a Google Cloud machine); run "
            f"`gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
            f"to a service account key file (for a public bucket, FSSPEC_GS_TOKEN=anon reads "
            f"it without credentials)")


def _fsspec_token() -> bool:
    """True when fsspec's configuration gives gcsfs a ``token`` (``FSSPEC_GS_TOKEN=anon``,
    a key file): the user chose how to connect."""
    import fsspec.config

    return any(fsspec.config.conf.get(p, {}).get("token") for p in ("gs", "gcs"))


def join(base: str, *parts: str) -> str:
    """``base/part/...`` with the separator the path's kind uses."""
    if is_remote(base):
        return posixpath.join(base, *parts)
    return os.path.join(_local(base), *parts)


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
    request each: a table names most of its folders' images), kept in ``listed``
    (folder -> names) for the next calls. Anything else a read would meet (a directory,
    no permission) is left to the read, which names it."""
    out: list[int] = []
    local: list[int] = []
    listed = {} if listed is None else listed
    for i, path in enumerate(paths):
        if path is None:
            continue
        if not is_remote(path):
            local.append(i)
            continue
        folder, _, name = path.rpartition("/")
        names = listed.get(folder)
        if names is None:
            names = listed[folder] = _names_in(folder, path)
        if name not in names:
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
        # generation) from this listing, however long ago it was made.
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


def is_pattern(path: str) -> bool:
    """True when ``path`` holds a wildcard (``*``, ``?`` or ``[``), as Cloud Storage's and
    the shell's patterns do (``gs://bucket/export/training-*``)."""
    return any(c in str(path) for c in "*?[")


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


def write_bytes(path: str, data: bytes, private: bool = False, durable: bool = False) -> None:
    """Writes ``path`` so that readers see the old file or the whole new one, never a
    part, and never through a link: a new file under a temporary name renamed over
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
    nanoseconds locally, the object's generation on Cloud Storage (a new one for every
    write of the object). OSError when it cannot be looked at."""
    if is_remote(path):
        fs = _fs(path)
        info = fs.info(path)
        generation = info.get("generation")
        if generation in (None, ""):  # a store without generations: its update time
            when = info.get("mtime") or info.get("updated")
            generation = int(when.timestamp() * 1e9) if hasattr(when, "timestamp") else 0
        return int(info["size"]), int(generation)
    st = os.stat(_local(path))
    return st.st_size, st.st_mtime_ns


#: Bytes per read once a file turns out larger than its size said (``read_file``).
_READ_CHUNK = 1 << 20


def size(path: str) -> int:
    if is_remote(path):
        return int(_fs(path).size(path))
    return os.path.getsize(_local(path))


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


def inside(root: str, name: str) -> str:
    """``root/name``, for a ``name`` made of plain components (``a``, ``index/a.idx``).

    Every path tfrecorder takes from a manifest, a ledger or a listing of its output
    folder goes through here before anything is read, written or removed there: an
    absolute name, ``..``, ``.``, an empty component or a NUL raises
    UnsafePathError, and so does a symbolic link (locally) at any folder between
    ``root`` and the name's last component, so nothing outside ``root`` is reached.
    (The last component may be a link: writes replace it, removal removes the link.)
    """
    parts = str(name).split("/")
    if any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise UnsafePathError(f"{name!r} is not a plain file name inside {root}")
    if not is_remote(root):
        at = _local(root)
        for part in parts[:-1]:
            at = os.path.join(at, part)
            if os.path.islink(at):
                raise UnsafePathError(
                    f"{at} is a symbolic link (to {os.readlink(at)}); tfrecorder never "
                    f"writes or removes anything through a link in its output folder. "
                    f"Remove the link, then run again")
    return join(root, *parts)


class UnsafePathError(OSError):
    """A name that would lead outside the folder it was taken from."""


def is_link(path: str) -> bool:
    """True for a local symbolic link (object stores have none)."""
    return not is_remote(path) and os.path.islink(_local(path))


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
