"""The publishing lock of an output folder: one conversion writes it at a time.

The lock is a file, ``OUT/.tfrecorder.lock`` (``layout.LOCK``), created only where none
exists (O_EXCL on a local disk, an object-generation precondition on Cloud Storage).
On an object store every later write or removal of it is fenced by the generation last
read or written (``ifGenerationMatch``): a take-over replaces only the stale lock it
judged, a renewal and a release touch only this run's own, so of two runs that meet one
stale lock exactly one holds it, and a run whose lock was taken over learns it at its
next renewal and stops renewing.
It says who holds it and until when; a local run renews it, a Dataflow job's last step removes
it. ``acquire`` takes it, taking over only a lock that provably belongs to no live run
(``_stale``); ``describe`` says who holds one in words a user can act on. A Lock is a
context manager: ``with acquire(...) as lock:`` renews it while the block runs and
releases it however the block ends, unless the run was handed on (``hand_over``) to a
job that goes on without this process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import socket
import threading
import time
import uuid

from tfrecorder import _storage as storage
from tfrecorder._folder import layout
from tfrecorder._errors import OutputBusyError
from tfrecorder._folder.manifest import loads

log = logging.getLogger(__name__)

#: Seconds a lock holds without being renewed; a running local conversion renews it.
LOCK_TTL = 600
RENEW_EVERY = 60
#: A Dataflow job cannot renew its lock; its last step removes it.
DATAFLOW_LOCK_TTL = 24 * 3600


@dataclasses.dataclass
class Lock:
    """The lock file of an output directory, held by one run.

    It is created only where none exists (O_EXCL on a local disk, an object-generation
    precondition on Cloud Storage) and says who holds it and until when. A lock is
    stale, and is taken over, only when it provably belongs to no live run: it has
    expired (its run stopped renewing it), or its run is its process (not a job the
    process handed to a runner elsewhere, ``detached``) and that process is provably
    gone: the same machine (host name, boot id), the same PID namespace, and no process
    of that id and start time. A process that is merely not visible from here (another
    container with the same host name) proves nothing, and its lock holds until it
    expires.
    """

    path: str
    holder: dict
    ttl: int = LOCK_TTL
    #: The run went on without this process (a submitted job): its last step removes
    #: the lock, and leaving the ``with`` block does not.
    handed_over: bool = False
    #: On an object store, the generation of the lock as this run last wrote it.
    generation: int | None = None
    #: Why this run holds the lock no more (another run took it over), once a renewal
    #: found it so; nothing renews or releases it after that.
    lost: "OutputBusyError | None" = None
    _renewer: "_Renewer | None" = dataclasses.field(default=None, repr=False)

    def write(self) -> None:
        """Writes ``holder`` to the lock; on an object store only while the lock is the
        generation this run wrote last: OutputBusyError when another run took it over."""
        if self.generation is None:
            storage.write_atomic(self.path, _encode(self.holder))
            return
        try:
            self.generation = _put(self.path, self.holder, self.generation)
        except (FileExistsError, FileNotFoundError):
            self.lost = OutputBusyError(
                f"{self.path}: run {self.holder['run_id']} no longer holds this lock: it "
                f"stalled past its expiry and another run took it over, so this run stops")
            raise self.lost from None

    def renew(self) -> None:
        """Moves the lock's expiry on; OutputBusyError when another run holds it now."""
        if self.generation is None:
            if _read_holder(self.path).get("run_id") != self.holder["run_id"]:
                return
        self.holder["expires"] = time.time() + self.ttl
        self.write()

    def check(self) -> None:
        """Raises the OutputBusyError of a lock this run found taken over."""
        if self.lost is not None:
            raise self.lost

    def release(self) -> None:
        """Removes the lock if it is still this run's."""
        if self.lost is None:
            release(self.path, self.holder["run_id"])

    def hand_over(self, **holder) -> None:
        """The run goes on as a job without this process (Dataflow): the lock records
        ``holder`` (its job id), is no longer renewed here and outlives the ``with``
        block; the job's last step removes it, or it expires."""
        self._stop_renewing()
        self.holder.update(holder)
        self.write()
        self.handed_over = True

    def __enter__(self) -> "Lock":
        # Every path out of the block releases: a failure, a return, KeyboardInterrupt.
        self._renewer = _Renewer(self)
        self._renewer.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._stop_renewing()
        if not self.handed_over:
            self.release()

    def _stop_renewing(self) -> None:
        if self._renewer is not None:
            self._renewer.__exit__(None, None, None)
            self._renewer = None


class _Renewer:
    def __init__(self, lock: Lock):
        self._lock, self._stop = lock, threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfrecorder-lock", daemon=True)

    def _run(self):
        while not self._stop.wait(RENEW_EVERY):
            try:
                self._lock.renew()
            except OutputBusyError as e:  # taken over: the lock is the other run's now
                log.warning("%s", e)
                return
            except OSError as e:  # a missed renewal only shortens the lock's life
                log.warning("could not renew %s: %s", self._lock.path, e)

    def __enter__(self):
        self._thread.start()
        return self._lock

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _read_holder(path: str) -> dict:
    """The lock's content; {} when there is none, ``{"damaged": True}`` when it is not a
    lock tfrecorder wrote whole, ``{"folder": True}`` for a folder at its name."""
    return _read_lock(path)[0]


def _read_lock(path: str) -> tuple[dict, int | None]:
    """The lock's content (as ``_read_holder``) and, on an object store, the generation
    of the object read: what a take-over or a release of it is fenced by."""
    generation = None
    try:
        if storage.is_remote(path):
            data, generation = storage.read_with_generation(path)
        else:
            data = storage.read_bytes(path)
    except FileNotFoundError:
        return {}, None
    except IsADirectoryError:
        return {"folder": True}, None
    except OSError:
        return {"damaged": True}, None
    try:
        holder = loads(data)
    except ValueError:
        return {"damaged": True}, generation
    if not isinstance(holder, dict) or _number(holder.get("expires")) is None:
        return {"damaged": True}, generation
    return holder, generation


def _encode(holder: dict) -> bytes:
    return json.dumps(holder, sort_keys=True).encode()


def _put(path: str, holder: dict, generation: int) -> int:
    """Writes the lock at ``path`` on an object store only while it is ``generation``
    (0: only where none is); FileExistsError otherwise. Returns the new generation.
    Every write of a lock on an object store goes through here."""
    return storage.write_if_generation(path, _encode(holder), generation)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _proc_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def identity() -> dict:
    """What identifies this process, as a lock records it: host name, boot id and PID
    namespace (one machine, one boot, one process tree), process id and start time."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "boot_id": _read_text(BOOT_ID),
            "pid_namespace": _pid_namespace(), "pid": pid, "pid_start": _proc_start(pid)}


#: Linux's id of the current boot: a lock from before a reboot names no live process.
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _detached(holder: dict) -> bool:
    """True when the lock's run may go on without its process: a job submitted to a
    runner elsewhere (Dataflow, Flink, Spark, Dask...), which its process need not
    outlive. A lock written before the field says so only by its runner."""
    detached = holder.get("detached")
    if isinstance(detached, bool):
        return detached
    return holder.get("runner") != "DirectRunner"


def _process_gone(holder: dict) -> bool:
    """True only when the lock's run is its process, and that process is provably not
    running any more; whatever the run is (a conversion, compact, vacuum, index)."""
    me = identity()
    if (me["boot_id"] is None or me["pid_namespace"] is None
            or holder.get("host") != me["host"] or holder.get("boot_id") != me["boot_id"]
            or holder.get("pid_namespace") != me["pid_namespace"]
            or not isinstance(holder.get("pid"), int) or _detached(holder)):
        return False
    started = _proc_start(holder["pid"])
    if started is None:
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return True
        except (OSError, OverflowError):
            return False
        return False
    return holder.get("pid_start") is not None and started != holder.get("pid_start")


def _stale(holder: dict, path: str) -> bool:
    """True when the lock at ``path`` provably belongs to no live run."""
    if holder.get("folder"):
        return False  # not a lock of ours: never removed
    if holder.get("damaged"):
        # No run renews a lock it cannot read as its own; it expires a full TTL after
        # its last write (the renewals of a live local run rewrite it every minute).
        written = storage.mtime(path)
        return written is not None and written + LOCK_TTL < time.time()
    if _number(holder.get("expires")) < time.time():
        return True
    return _process_gone(holder)


def _when(value, fmt: str) -> str:
    number = _number(value)
    return time.strftime(fmt, time.localtime(number)) if number is not None else "?"


def describe(holder: dict, path: str) -> str:
    folder = storage.dirname(path)
    if holder.get("folder"):
        return (f"{path} is a folder, not a lock file of tfrecorder's, so {folder} cannot be "
                f"locked. If no conversion is running there, remove that folder")
    if holder.get("damaged"):
        written = storage.mtime(path)
        until = _when((written or time.time()) + LOCK_TTL, "%H:%M:%S")
        return (f"{path} is a lock file tfrecorder cannot read (damaged, or written by "
                f"something else), so another conversion may be writing {folder}. It is "
                f"taken over at {until}, ten minutes after its last change; if no "
                f"conversion is running, delete it now")
    # An export's destination is locked as a folder is (``_export.target.claimed``).
    doing = "export" if holder.get("runner") == "export" else "conversion"
    who = f"run {holder.get('run_id')} ({holder.get('runner')}"
    who += f", job {holder['job_id']})" if holder.get("job_id") else (
        f", process {holder.get('pid')} on {holder.get('host')})")
    return (f"another {doing} is writing {folder}: {who}, started "
            f"{_when(holder.get('started'), '%Y-%m-%d %H:%M:%S')}. Wait for it to end, or "
            f"write elsewhere. If it is not running any more, its lock expires at "
            f"{_when(holder.get('expires'), '%H:%M:%S')}, or delete {path}.")


def acquire(output_dir: str, run_id: str, runner: str, ttl: int = LOCK_TTL,
            detached: bool = False) -> Lock:
    """Takes the lock of ``output_dir`` for ``run_id``; OutputBusyError when a live
    conversion holds it. ``runner``: what runs (a Beam runner's name, ``compact``,
    ``vacuum``), said to whoever meets the lock; ``detached``: the run goes on where
    this process cannot see it (a job submitted to a runner), so its lock is not taken
    over when this process is gone, only when it expires."""
    path = storage.join(output_dir, layout.LOCK)
    now = time.time()
    holder = {**identity(), "run_id": run_id, "runner": runner, "detached": detached,
              "started": now, "expires": now + ttl}
    remote = storage.is_remote(path)
    for _ in range(3):
        try:
            if remote:
                return Lock(path, holder, ttl, generation=storage.create_new(
                    path, _encode(holder)))
            storage.create_exclusive(path, _encode(holder))
            return Lock(path, holder, ttl)
        except FileExistsError:
            current, generation = _read_lock(path)
            if current and not _stale(current, path):
                raise OutputBusyError(describe(current, path)) from None
            log.info("taking over the stale lock %s (%s)", path, current)
            if not remote:
                _break(path, current)
            elif generation is not None:
                try:  # replaced only while it is the stale lock judged: one taker wins
                    return Lock(path, holder, ttl, generation=_put(path, holder, generation))
                except (FileExistsError, FileNotFoundError):
                    continue  # another run changed it meanwhile: look again
    raise OutputBusyError(describe(_read_holder(path), path))


def _break(path: str, seen: dict) -> None:
    """Removes a stale local lock, unless another run has replaced it meanwhile."""
    aside = f"{path}.{uuid.uuid4().hex}"
    try:
        os.rename(path, aside)  # atomic: of two runs breaking it, one succeeds
    except FileNotFoundError:
        return
    if _read_holder(aside) != seen:
        try:  # a fresh lock was moved aside: put it back
            os.link(aside, path)
        except FileExistsError:
            pass
    os.remove(aside)


def holds(lock_path: str, run_id: str) -> bool:
    """True when the lock at ``lock_path`` is ``run_id``'s now: what a run checks before
    it removes a published file, so that a run that stalled past its lock's expiry
    removes nothing of the run that took the lock over."""
    return _read_holder(lock_path).get("run_id") == run_id


def release(lock_path: str, run_id: str) -> None:
    """Removes the lock at ``lock_path`` if ``run_id`` holds it (on an object store,
    only the generation read as ``run_id``'s: a lock another run took meanwhile stays)."""
    holder, generation = _read_lock(lock_path)
    if holder.get("run_id") != run_id:
        return
    if generation is None:
        storage.remove(lock_path)
        return
    try:
        storage.remove_if_generation(lock_path, generation)
    except (FileExistsError, FileNotFoundError):
        pass  # another run's now, or gone
