"""A bounded local cache of whole shards read from an object store (docs/bucket.md).

A random-access reader of ``gs://`` would otherwise make one ranged request per record.
With a cache, the first read of a shard fetches the whole object (several ranged
requests in flight) into ``CACHE/shards/`` and every read after it is a local
``pread``. The cache is a folder, shared by every process of the machine that names it:

- **One fetch per shard per machine.** An entry is fetched under an exclusive
  ``flock`` on its ``KEY.fetch`` file: a second process (a DataLoader worker, another
  job) that wants it waits for that fetch and then reads the same file.
- **Whole or absent.** A fetch writes ``KEY.shard.tmp-PID-RAND`` and renames it to
  ``KEY.shard`` once every byte came and the reader's check (its conversion still the
  one in the bucket) passed; a killed fetch leaves only a temporary name, never served,
  and removed by the next eviction once nobody fetches that key.
- **Never stale, never twice.** ``KEY`` is a digest of the source folder, the shard's
  name and size and the ``generation`` of the version that wrote it (what identifies
  its bytes): a folder converted again gives other keys, and its old entries age out;
  the versions of an update share the entries of the shards they keep.
- **Bounded.** Before a fetch, entries are evicted, least recently opened first
  (``mtime``, set on every open), until the new one fits under the limit; an entry
  being read is pinned (a shared ``flock`` on ``KEY.lock`` for as long as it is open)
  and never evicted, so the cache holds at most its limit plus the shards being read.
- **Only its own files.** It removes only names it writes (``_ENTRY``, ``_TEMP``) in
  its own ``shards`` folder, never anything else, never the source: local folders are
  never cached (``for_source``).

Locks are files that eviction removes; a lock is trusted only when, once taken, its
name still leads to the locked file (``_lock``), so a process that opened a lock file
just before its removal tries again instead of locking a file nobody else sees.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import math
import os
import re
import secrets
import shutil
import stat
import threading

from tfrecorder import _storage as storage
from tfrecorder._errors import ConfigError, CorruptRecordError

#: Where the cache lives when ``cache_dir`` is not given.
ENV_DIR = "TFRECORDER_CACHE"
#: The limit when ``cache_limit`` is not given: at most this...
DEFAULT_LIMIT = 20 * 10**9
#: ... and at most this fraction of the disk's free space (with what the cache holds).
DEFAULT_FREE_FRACTION = 0.5
#: The folder of entries inside the cache folder.
SHARDS = "shards"
#: The cache-wide lock, held while entries are counted, evicted and reserved.
LOCK = "cache.lock"
#: Bytes asked for by one ranged request of a fetch (smaller shards: fewer bytes each,
#: so that every shard is fetched with several requests in flight).
FETCH_RANGE = 8 << 20
FETCH_MIN_RANGE = 1 << 20

_ENTRY = re.compile(r"^([0-9a-f]{32})\.(shard|lock|fetch)$")
_TEMP = re.compile(r"^([0-9a-f]{32})\.shard\.tmp-\d+-[0-9a-f]{8}$")

#: What a write or an allocation on a full disk (or past a quota or a file size
#: limit) fails with.
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_limit(value) -> int | None:
    """``cache_limit`` in bytes: an int, or a string such as ``"10GB"`` or ``"512MiB"``
    (GB = 10**9 bytes, GiB = 2**30); None stays None (the default). ConfigError
    otherwise."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"cache_limit={value!r}; give bytes (an int) or a size such "
                          f"as '10GB' or '512MiB' (0: no cache)")
    if isinstance(value, (int, float)) or type(value).__name__.startswith(("int", "uint")):
        number, unit = value, ""
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
        if m is None or m.group(2).lower() not in _UNITS:
            number, unit = -1, ""
        else:
            number, unit = float(m.group(1)), m.group(2).lower()
    # nan and inf are no size; neither is a part of a byte ("0.5" is not half a GB: a
    # fraction takes its unit, "0.5GB"), nor a negative one.
    if not (math.isfinite(number) and number >= 0):
        raise ConfigError(f"cache_limit={value!r}; give bytes (an int >= 0) or a size such "
                          f"as '10GB' or '512MiB' (0: no cache)")
    if _UNITS[unit] == 1 and number != int(number):
        raise ConfigError(f"cache_limit={value!r}; give bytes (an int >= 0) or a size such "
                          f"as '10GB' or '512MiB' (0: no cache): a fraction needs its unit "
                          f"('{number}GB'), {value!r} would be a part of a byte")
    return int(number * _UNITS[unit])


def default_dir() -> str:
    """``$TFRECORDER_CACHE``, else ``$XDG_CACHE_HOME/tfrecorder``, else
    ``~/.cache/tfrecorder``."""
    given = os.environ.get(ENV_DIR)
    if given:
        return os.path.expanduser(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfrecorder")


def for_source(source: str, cache_dir=None, cache_limit=None) -> "Cache | None":
    """The cache a reader of ``source`` uses: None for a local folder (read in place,
    never copied) and for ``cache_limit=0``; else the cache in ``cache_dir`` (default:
    ``default_dir()``) with its limit (default: the smaller of 20 GB and half the free
    space of its disk, counting what it holds)."""
    limit = parse_limit(cache_limit)
    if not storage.is_remote(source) or limit == 0:
        return None
    if cache_dir is not None and (not isinstance(cache_dir, (str, os.PathLike))
                                  or storage.is_remote(str(cache_dir))):
        raise ConfigError(f"cache_dir={cache_dir!r}; give a local folder (the cache is "
                          f"on this machine's disk)")
    root = os.path.abspath(os.path.expanduser(str(cache_dir if cache_dir is not None
                                                  else default_dir())))
    if os.path.exists(root) and not os.path.isdir(root):
        raise ConfigError(f"cache_dir={root!r} is a file, not a folder; give a folder for "
                          f"the cache (it is created if absent), or cache_limit=0 to read "
                          f"without a cache")
    return Cache(root, limit)


def key(source: str, generation: str, file: str, size: int) -> str:
    """The name of the entry of shard ``file`` of folder ``source``: ``generation`` is
    that of the version that wrote it (its bytes), so every version that keeps the
    shard shares the entry."""
    text = f"{source.rstrip('/')}\n{generation}\n{file}\n{size}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


# Every descriptor the cache holds open in this process (entries, locks, fetches
# under way), and every Pin not closed. A forked process (a DataLoader worker) gets
# copies of them all, and a flock belongs to the open file, not the process: a copy
# left open would hold a lock of its parent's threads (a fetch ahead, a pin) for the
# child's whole life, so that entry could never be evicted nor dropped. The child
# closes every copy as it starts (``_forget``); ``_held_lock`` keeps a fork out of the
# moment between an open and its registration.
_held: set[int] = set()
_pins: dict[int, "Pin"] = {}
_held_lock = threading.Lock()


def _open_fd(path: str, flags: int, mode: int = 0o644) -> int:
    with _held_lock:
        fd = os.open(path, flags, mode)
        _held.add(fd)
    return fd


def _close_fd(fd: int, _close=os.close, _held=_held, _lock=_held_lock) -> None:
    with _lock:
        _held.discard(fd)
        _close(fd)


def _forget() -> None:
    """In a child just forked: the copies of the parent's descriptors closed, and its
    Pins emptied (closing one later closes nothing)."""
    _held_lock.release()  # taken by this thread for the fork (``before``)
    for pin in _pins.values():
        pin.fd = pin.lock = -1
    _pins.clear()
    for fd in _held:
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_held_lock.acquire, after_in_parent=_held_lock.release,
                        after_in_child=_forget)


@dataclasses.dataclass(eq=False)
class Pin:
    """An open cache entry: ``fd`` reads it; its lock keeps it from eviction until
    ``close()``. A forked process holds none of it (``_forget``): its Pins are closed
    there, and the entry stays pinned only until the parent closes its own."""

    fd: int
    lock: int
    path: str

    def __post_init__(self):
        _pins[id(self)] = self

    def close(self, _close=os.close, _pins=_pins, _release=_close_fd) -> None:
        # Bound as defaults: a reader may close its pin at interpreter exit.
        _pins.pop(id(self), None)
        fds, self.fd, self.lock = (self.fd, self.lock), -1, -1
        for fd in fds:
            if fd >= 0:
                _release(fd, _close)


class Cache:
    """The shard cache in folder ``root`` holding at most ``limit`` bytes (None: the
    default limit) plus the entries being read. Picklable: a worker process gets the
    folder and the limit, and shares the entries through the folder."""

    def __init__(self, root: str, limit: int | None = None):
        self.root = root
        self.folder = os.path.join(root, SHARDS)
        #: Whether the limit was given (``cache_limit``), not the default, which
        #: depends on the disk's free space.
        self.given = limit is not None
        self._limit = limit

    def __repr__(self) -> str:
        return f"Cache({self.root!r}, limit={self.limit})"

    @property
    def limit(self) -> int:
        if self._limit is None:
            self._limit = self._default_limit()
        return self._limit

    def _default_limit(self) -> int:
        at = self.root
        while not os.path.isdir(at) and os.path.dirname(at) != at:
            at = os.path.dirname(at)
        free = shutil.disk_usage(at).free + self.held()
        return int(min(DEFAULT_LIMIT, free * DEFAULT_FREE_FRACTION))

    def fits(self, size: int) -> int:
        """How many entries of ``size`` bytes the limit holds (at least 1)."""
        return max(1, self.limit // max(1, size))

    def held(self) -> int:
        """Bytes of the cache's entries and fetches under way."""
        return sum(size for _, _, size, _ in self._scan())

    # --- reading --------------------------------------------------------------------

    def pin(self, name: str, remote: str, size: int, verify) -> Pin:
        """Entry ``name`` (shard ``remote``, ``size`` bytes) opened and pinned, fetched
        first if it is not here whole; ``verify()`` runs after a fetch and before the
        entry is published (it raises if the bytes may not be the reader's)."""
        self._makedirs()
        lock = _lock(self._path(name, "lock"), fcntl.LOCK_SH)
        try:
            for _ in range(3):
                fd = self._open(name, size)
                if fd is not None:
                    return Pin(fd, lock, self._path(name, "shard"))
                self._fetch(name, remote, size, verify)
            raise OSError(errno.EIO, f"{remote}: the cache entry {self._path(name, 'shard')} "
                                     f"vanished right after each fetch")
        except BaseException:
            _close_fd(lock)
            raise

    def fetch(self, name: str, remote: str, size: int, verify, *, room_only=False,
              keep=frozenset(), wait=True) -> bool:
        """Entry ``name`` fetched unless it is here whole (not pinned: fetching ahead).
        With ``room_only``, only when it fits under the limit without evicting the
        entries being read nor those named in ``keep`` (still to be read); False when
        it did not fit. With ``wait=False``, left to another thread or process that is
        fetching it already (True: it will be here)."""
        self._makedirs()
        if self._open(name, size, close=True):
            return True
        return self._fetch(name, remote, size, verify, room_only=room_only, keep=keep,
                           wait=wait)

    def holds(self, name: str) -> bool:
        """Whether entry ``name`` is here (whole: an entry has its name once fetched),
        without opening it."""
        return os.path.exists(self._path(name, "shard"))

    def drop(self, pin: Pin) -> None:
        """Removes ``pin``'s entry if its name still leads to the file pinned (found
        damaged: the next pin fetches it again); other readers of it keep their open
        file."""
        fetching = _lock(pin.path[:-len("shard")] + "fetch", fcntl.LOCK_EX)
        try:
            st = os.stat(pin.path)
            if (st.st_dev, st.st_ino) == _inode(os.fstat(pin.fd)):
                os.unlink(pin.path)
        except FileNotFoundError:
            pass
        finally:
            _close_fd(fetching)

    def _open(self, name: str, size: int, close: bool = False):
        """The open entry, marked as used now; None when absent or not ``size`` bytes
        (damaged: fetched again)."""
        path = self._path(name, "shard")
        try:
            fd = _open_fd(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(os.fstat(fd).st_mode):  # a folder at the entry's name
            _close_fd(fd)
            _in_the_way(path)
            return None
        if os.fstat(fd).st_size != size:
            _close_fd(fd)
            return None
        try:
            os.utime(fd)  # least recently used is least recently opened
        except OSError:
            pass  # another user's entry in a shared cache: still readable
        if close:
            _close_fd(fd)
            return True
        return fd

    # --- fetching -------------------------------------------------------------------

    def _fetch(self, name: str, remote: str, size: int, verify, room_only=False,
               keep=frozenset(), wait=True) -> bool:
        fetching = _lock(self._path(name, "fetch"),
                         fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fetching is None:  # another is fetching it
            return True
        tmp = None
        try:
            if self._open(name, size, close=True):  # fetched while we waited
                return True
            _check_size(remote, size)  # before room is made for a size that is wrong
            try:
                tmp = self._reserve(name, size, room_only, keep)
                if tmp is None:
                    return False
                fd = _open_fd(tmp, os.O_WRONLY)
                try:
                    _download(remote, fd, size)
                finally:
                    _close_fd(fd)
            except OSError as e:
                if e.errno not in _FULL:
                    raise
                raise self._full(remote, size, e) from None
            verify()
            os.replace(tmp, self._path(name, "shard"))
            tmp = None
            return True
        finally:
            if tmp is not None:
                _unlink(tmp)
            _close_fd(fetching)

    def _reserve(self, name: str, size: int, room_only: bool, keep=frozenset()) -> str | None:
        """Under the cache-wide lock: evicts least recently used entries nobody reads
        until ``size`` more bytes fit (or nothing more can go), removes the temporary
        files of killed fetches, and creates this fetch's temporary file at its full size
        (so that concurrent fetches count it). None with ``room_only`` when it does not
        fit."""
        whole = _lock(os.path.join(self.folder, LOCK), fcntl.LOCK_EX)
        try:
            if not self._make_room(name, size, keep) and room_only:
                return None
            tmp = self._path(name, f"shard.tmp-{os.getpid()}-{secrets.token_hex(4)}")
            fd = _open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _allocate(fd, size)
            except BaseException:
                _unlink(tmp)
                raise
            finally:
                _close_fd(fd)
            return tmp
        finally:
            _close_fd(whole)

    def _full(self, remote: str, size: int, e: OSError) -> ConfigError:
        """The error of a fetch the cache's disk cannot hold (its temporary file is
        removed: nothing half-written stays)."""
        try:
            free = f"{shutil.disk_usage(self.folder).free:,} bytes free"
        except OSError:
            free = "free space unknown"
        return ConfigError(
            f"the cache's disk is full: cache_dir={self.root!r} cannot hold {remote} "
            f"({size:,} bytes; {e.strerror}; {free}). Give a smaller cache_limit, a "
            f"cache_dir on a disk with room, or cache_limit=0 to read without a cache")

    def _make_room(self, name: str | None, size: int, keep=frozenset()) -> bool:
        """With the cache-wide lock held: removes killed fetches' temporary files and
        evicts entries (not ``name``, not in ``keep``, not pinned) until ``size`` more
        bytes fit; whether they do."""
        entries = self._scan()
        total = sum(s for _, _, s, _ in entries)
        for kind, other, s, path in entries:
            if kind == "temp" and (other == name or _free(self._path(other, "fetch"))):
                _unlink(path)
                total -= s
        shards = sorted((_mtime(path), other, s) for kind, other, s, path in entries
                        if kind == "shard" and other != name and other not in keep)
        for _, other, s in shards:
            if total + size <= self.limit:
                break
            if self._evict(other):
                total -= s
        return total + size <= self.limit

    def _evict(self, name: str) -> bool:
        """Removes entry ``name`` unless it is pinned or being fetched."""
        pinned = _lock(self._path(name, "lock"), fcntl.LOCK_EX | fcntl.LOCK_NB)
        if pinned is None:
            return False
        try:
            fetching = _lock(self._path(name, "fetch"), fcntl.LOCK_EX | fcntl.LOCK_NB)
            if fetching is None:
                return False
            try:
                _unlink(self._path(name, "shard"))
                _unlink(self._path(name, "fetch"))
            finally:
                _close_fd(fetching)
            _unlink(self._path(name, "lock"))
            return True
        finally:
            _close_fd(pinned)

    def _scan(self) -> list[tuple[str, str, int, str]]:
        """``(kind, key, bytes, path)`` of every entry ("shard") and fetch under way
        ("temp") in the folder; names the cache does not write are not looked at."""
        out = []
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return out
        for n in names:
            m = _ENTRY.match(n)
            kind = "shard" if m and m.group(2) == "shard" else None
            if kind is None and (m := _TEMP.match(n)):
                kind = "temp"
            if kind is None:
                continue
            path = os.path.join(self.folder, n)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue  # not written by the cache: never counted nor removed
            out.append((kind, m.group(1), st.st_size, path))
        return out

    def _path(self, name: str, kind: str) -> str:
        return os.path.join(self.folder, f"{name}.{kind}")

    def _makedirs(self) -> None:
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cache_dir={self.root!r} cannot be created ({e.strerror}); "
                              f"give a folder this process can write, or cache_limit=0 "
                              f"to read without a cache") from None


def _download(remote: str, fd: int, size: int) -> None:
    """The object ``remote``'s ``size`` bytes into ``fd``, by ranged requests in flight
    together (``storage.each``); CorruptRecordError when the object is shorter."""
    fs = storage._fs(remote)
    step = max(FETCH_MIN_RANGE, min(FETCH_RANGE, -(-size // storage.ROUND_TRIPS)))
    ranges = [(at, min(size, at + step)) for at in range(0, size, step)]

    def one(span):
        start, end = span
        data = fs.cat_file(remote, start=start, end=end)
        if len(data) != end - start:
            raise CorruptRecordError(
                f"{remote}: the object ends before byte {end} of the {size} its manifest "
                f"gives; the shard was cut short or replaced")
        _write(fd, data, start)

    storage.each(one, ranges, at_once=True)


def _allocate(fd: int, size: int) -> None:
    """``size`` bytes of disk given to ``fd`` now, not as its bytes arrive: a disk too
    full for the entry fails here, before any request (a sparse file would take blocks
    one write at a time, and a write cut short would leave a hole)."""
    if size > 0 and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    os.ftruncate(fd, size)  # a file system that allocates no space ahead


def _write(fd: int, data: bytes, at: int) -> None:
    """All of ``data`` at byte ``at`` of ``fd``: a write cut short is continued, and
    its cause (a full disk) raised by the next."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view, at = view[n:], at + n


def _check_size(remote: str, size: int) -> None:
    """CorruptRecordError unless the object ``remote`` is ``size`` bytes, as its
    manifest says: one small request, so that a wrong size neither evicts other entries
    to make room for it nor sends a request per range before failing."""
    actual = storage._fs(remote).size(remote)
    if actual != size:
        raise CorruptRecordError(
            f"{remote}: the object is {actual} bytes where its manifest gives {size}; the "
            f"shard was replaced or the manifest is wrong (convert the folder again)")


def _lock(path: str, how: int) -> int | None:
    """An open file on ``path`` (created if absent) locked ``how``; None when
    ``LOCK_NB`` is in ``how`` and another holds it. Taken again when the file was
    removed (evicted) between its opening and its locking."""
    while True:
        try:
            fd = _open_fd(path, os.O_RDWR | os.O_CREAT, 0o644)
        except IsADirectoryError:  # a folder at the lock's name
            _in_the_way(path)
            continue
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:
            _close_fd(fd)
            return None
        except BaseException:
            _close_fd(fd)
            raise
        try:
            same = _inode(os.stat(path)) == _inode(os.fstat(fd))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        _close_fd(fd)


def _in_the_way(path: str) -> None:
    """A folder at ``path``, where the cache keeps a file of its own, removed if empty
    (the file is made there again); else a ConfigError naming it: the cache never
    removes what it did not write."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        raise ConfigError(f"{path} is a folder where the shard cache keeps a file of its "
                          f"own; remove that folder, or give another cache_dir") from None


def _free(path: str) -> bool:
    """True when nobody holds the lock ``path`` (absent: nobody)."""
    if not os.path.exists(path):
        return True
    fd = _lock(path, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if fd is None:
        return False
    _close_fd(fd)
    return True


def _inode(st) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return 0


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
