"""The output directory as a whole: what it holds, who writes it, how a run publishes.

A run never destroys what it cannot replace:

- ``survey`` reads what a directory holds before a run: a complete output (its manifest
  and the files it lists), files of runs that did not finish (listed in their ledgers),
  and anything else, which is the user's and never removed or replaced.
- ``Lock``: one conversion writes a directory at a time (``layout.LOCK``).
- Every file a run will put into the directory is listed in its ledger
  (``.tfrecorder-tmp/<run>/ledger.json``) before the first one is written, so a run that
  dies leaves nothing that a later run cannot recognise as its own.
- Shards are written into the run's own folder and moved into place by ``finish``, the
  run's last step: only then is the previous output removed (its manifest first), and
  the new manifest is written last. A run that fails before leaves the previous output
  as it was.
- ``build_index`` adds index files to a finished output that has none, under the lock.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from typing import Iterable

from tfrecorder import (
    _index as index, _layout as layout, _legacy as legacy, _metadata as metadata,
    _storage as storage)
from tfrecorder._errors import (ConfigError, ConversionError, CorruptRecordError,
                               OutputBusyError, OutputExistsError, TFRecorderError)
from tfrecorder._manifest import Manifest

log = logging.getLogger(__name__)

LEDGER = "ledger.json"
#: Seconds a lock holds without being renewed; a running local conversion renews it.
LOCK_TTL = 600
RENEW_EVERY = 60
#: A Dataflow job cannot renew its lock; its last step removes it.
DATAFLOW_LOCK_TTL = 24 * 3600


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """One run in an output directory: its id, its own folder (shard tasks, shards being
    written, its ledger and errors file), where its shards are written, and what else
    its last step removes."""

    output_dir: str
    run_id: str
    # Shards are written into the run's folder and moved into place by the last step;
    # False: straight to their names (an object store with no previous output to keep).
    moved: bool = True
    cleanup: tuple[str, ...] = ()   # other folders removed once the directory is complete

    @property
    def folder(self) -> str:
        return storage.join(self.output_dir, layout.TMP_DIR, self.run_id)

    @property
    def shard_folder(self) -> str:
        """Where the shards are written."""
        return self.folder if self.moved else self.output_dir


# --- what a directory holds -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Survey:
    """What an output directory holds before a run."""

    output_dir: str
    entries: tuple[str, ...]
    manifest: Manifest | None               # a complete previous output
    leftovers: frozenset[str]                # files listed by ledgers of unfinished runs
    damaged: str | None = None               # why its manifest cannot be trusted, if so
    #: Every published version's manifest (``versions/KKKKK.json``), by number.
    versions: tuple = ()

    @property
    def complete_files(self) -> frozenset[str]:
        """The files of the complete output: the shards and metadata files of its
        manifest and of every published version."""
        m = self.manifest
        if m is None and not self.versions:
            return frozenset()
        names = {layout.MANIFEST, layout.ERRORS, layout.DATASET_INFO, layout.FEATURES}
        for k, v in ([] if m is None else [(None, m)]) + list(self.versions):
            names |= _listed(v)
            if k is not None:
                names.add(layout.version_manifest(k))
        return frozenset(names)

    @property
    def latest(self) -> Manifest | None:
        """The latest published version: the highest of ``versions/``, else the
        manifest (a folder written before versions). The manifest where it is that
        version (``build_index`` adds index files to it alone)."""
        if not self.versions:
            return self.manifest
        k, m = self.versions[-1]
        return self.manifest if self.manifest is not None and self.manifest.version == k else m

    def ours(self) -> frozenset[str]:
        names = self.complete_files | self.leftovers | {layout.LOCK, layout.TMP_DIR}
        return names | _folders(names)

    def foreign(self) -> list[str]:
        """Entries no conversion of ours wrote: left alone, never replaced."""
        ours = self.ours()
        return [e for e in self.entries if e not in ours]


# Index files are the only names with a folder (``index/<shard>.idx``): the folder is
# ours when a file of ours is in it, and is removed with its last file.

def _listed(m: Manifest) -> set[str]:
    """The files one manifest lists (shards, their index and rows files, live indexes,
    labels files, its data report), by the names a conversion gives them: never a name
    merely listed (the manifest's own check refuses any other)."""
    shards = [s for info in m.splits.values() for s in info.shards]
    names = {s.file for s in shards}
    names |= {index.name(s.file) for s in shards if s.index}
    names |= {layout.rows_file(s.file) for s in shards if s.rows}
    names |= {s.live_index for s in shards if s.live_index}
    names |= {layout.labels_file(k) for k in m.vocabularies}
    if m.quality:
        names.add(m.quality)
    return names


def _folders(names: Iterable[str]) -> set[str]:
    """The top folders of the names that have one."""
    return {n.split("/", 1)[0] for n in names if "/" in n}


def _remove_empty_index_dir(output_dir: str) -> None:
    """Removes the folders of ours left empty (an object store has none)."""
    if storage.is_remote(output_dir):
        return
    for name in (index.DIR, layout.ROWS_DIR):
        folder = storage.join(output_dir, name)
        if storage.isdir(folder) and not storage.is_link(folder) and not storage.listdir(folder):
            storage.remove(folder)
    versions = storage.join(output_dir, layout.VERSIONS_DIR)
    if not storage.isdir(versions) or storage.is_link(versions):
        return
    for k in storage.listdir(versions):
        folder = storage.join(versions, k)
        sub = storage.join(folder, "index")
        if storage.isdir(sub) and not storage.is_link(sub) and not storage.listdir(sub):
            storage.remove(sub)
        if storage.isdir(folder) and not storage.is_link(folder) and not storage.listdir(folder):
            storage.remove(folder)
    if not storage.listdir(versions):
        storage.remove(versions)


def read_versions(output_dir: str, entries: Iterable[str] | None = None) -> tuple:
    """``((number, Manifest), ...)`` of every version published in ``output_dir``
    (``versions/KKKKK.json``), in order; a file there that is not a whole manifest
    is skipped (it is no published version)."""
    if entries is not None and layout.VERSIONS_DIR not in entries:
        return ()
    folder = storage.join(output_dir, layout.VERSIONS_DIR)
    try:
        names = storage.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    out = []
    for name in names:
        k = layout.parse_version_manifest(f"{layout.VERSIONS_DIR}/{name.rstrip('/')}")
        if k is None:
            continue
        try:
            m = Manifest.from_bytes(storage.read_bytes(
                _inside(output_dir, layout.version_manifest(k))))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        out.append((k, m))
    return tuple(sorted(out, key=lambda km: km[0]))


def under_a_file(output_dir: str) -> ConfigError:
    """The error for an output path that runs through a file."""
    return ConfigError(f"output directory {output_dir}: a part of the path is a file, not a "
                       f"folder; give a path under a folder")


def survey(output_dir: str) -> Survey:
    """Reads what ``output_dir`` holds; ConfigError when it cannot be a directory."""
    if storage.exists(output_dir) and not storage.isdir(output_dir):
        raise ConfigError(f"output directory {output_dir} is a file; give a directory path")
    try:
        entries = tuple(storage.listdir(output_dir))
    except NotADirectoryError:
        raise under_a_file(output_dir) from None
    except PermissionError:
        raise ConfigError(f"output directory {output_dir} cannot be read (no permission); "
                          f"give a folder you can write to") from None
    # Another run's lock, written whole before it is linked in, is there for a moment.
    entries = tuple(e for e in entries if not layout.is_lock_in_the_making(e))
    manifest, damaged = None, None
    if layout.MANIFEST in entries:
        try:
            manifest = metadata.read_manifest(output_dir)
        except TFRecorderError as e:
            # a damaged or crafted manifest: not a complete output, and nothing it
            # lists is taken as ours
            damaged = str(e)
    leftovers: set[str] = set()
    tmp = storage.join(output_dir, layout.TMP_DIR)
    if layout.TMP_DIR in entries:
        if storage.is_link(tmp) or not storage.isdir(tmp):
            raise ConfigError(
                f"{tmp} is {'a symbolic link' if storage.is_link(tmp) else 'not a folder'}; "
                f"tfrecorder keeps a run's private files in that folder and never writes "
                f"through a link. Remove it, then run again")
        for run in storage.listdir(tmp):
            try:
                ledger = json.loads(storage.read_bytes(_inside(output_dir, layout.TMP_DIR,
                                                               run, LEDGER)))
                files = ledger["files"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            # A ledger names what its run wrote; only names a run writes are taken from
            # it (never "../x" or "/etc/x"), and only as names inside this folder.
            leftovers.update(n for n in files if layout.is_output_name(n))
    # A damaged manifest makes nothing in the folder ours, the versions' files included.
    found = () if damaged else read_versions(output_dir, entries)
    return Survey(output_dir, entries, manifest, frozenset(leftovers), damaged, found)


def _inside(output_dir: str, *parts: str) -> str:
    """The path of ``parts`` inside ``output_dir``: ConfigError when a part is not a plain
    name, or when a folder on the way is a link (``storage.inside``)."""
    try:
        return storage.inside(output_dir, "/".join(parts))
    except storage.UnsafePathError as e:
        raise ConfigError(str(e)) from None


def check_target(s: Survey, overwrite: bool, planned: Iterable[str],
                 run_id: str | None = None) -> None:
    """Refuses a directory the run may not write, before anything is written.

    A live lock of another run is an OutputBusyError. Without ``overwrite`` a non-empty
    directory is refused. With it, only what a conversion of ours wrote may be replaced:
    a file of the user's that bears a name the run would write is refused too. ``convert``
    checks once before it takes the lock, and again, authoritatively, with the lock held.
    """
    if layout.LOCK in s.entries:
        path = storage.join(s.output_dir, layout.LOCK)
        holder = _read_holder(path)
        if holder and holder.get("run_id") != run_id and not _stale(holder, path):
            raise OutputBusyError(describe(holder, path))
    entries = [e for e in s.entries if e != layout.LOCK]
    if entries and not overwrite:
        shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
        raise OutputExistsError(
            f"output directory {s.output_dir} already holds {len(entries)} entries ({shown}). "
            f"Pass overwrite=True (--overwrite in the CLI) to replace tfrecorder's files there, "
            f"or give an empty directory.")
    planned = set(planned)
    for name in sorted(planned | s.ours()):
        _inside(s.output_dir, name)  # no link on the way to anything we write or remove
    clash = sorted(set(s.foreign()) & (planned | _folders(planned)))
    if clash:
        raise OutputExistsError(
            f"output directory {s.output_dir} holds {', '.join(clash[:5])}, which no "
            f"tfrecorder manifest lists, and this conversion would replace it. Move it away, "
            f"or give another output directory."
            + (f" (Its {layout.MANIFEST} cannot be trusted: {s.damaged})" if s.damaged else ""))


def clear_leftovers(s: Survey, keep_run: str) -> None:
    """Removes what unfinished runs left (with the lock held, none is running).

    Their ledger-listed files go unless a published version lists them: a run killed
    after publishing its manifest lists the very files of that output.
    """
    keep = s.complete_files
    if s.manifest is None and not s.versions:
        keep = frozenset()
    for name in sorted(s.leftovers - keep):
        if name.split("/", 1)[0] in s.entries:
            storage.remove(_inside(s.output_dir, name))
    _remove_empty_index_dir(s.output_dir)
    if layout.TMP_DIR in s.entries:
        for run in storage.listdir(_inside(s.output_dir, layout.TMP_DIR)):
            if run != keep_run:
                storage.remove(_inside(s.output_dir, layout.TMP_DIR, run))


def write_ledger(folder: str, names: Iterable[str]) -> None:
    """Creates the run's own folder (its owner's alone) and lists in it every file the
    run will put into the output folder, before the first one is written."""
    storage.makedirs(folder, private=True)
    storage.write_bytes(storage.join(folder, LEDGER),
                        json.dumps({"files": sorted(set(names))}).encode(), private=True)


# --- one writer at a time -------------------------------------------------------------

@dataclasses.dataclass
class Lock:
    """The lock file of an output directory, held by one run.

    It is created only where none exists (O_EXCL on a local disk, a generation
    precondition on Cloud Storage) and says who holds it and until when. A lock is
    stale, and is taken over, only when it provably belongs to no live run: it has
    expired (its run stopped renewing it), or its process is provably gone: the same
    machine (host name, boot id), the same PID namespace, and no process of that id and
    start time. A process that is merely not visible from here (another container with
    the same host name) proves nothing, and its lock holds until it expires.
    """

    path: str
    holder: dict

    def write(self) -> None:
        storage.write_atomic(self.path, json.dumps(self.holder, sort_keys=True).encode())

    def renew(self, ttl: int = LOCK_TTL) -> None:
        if _read_holder(self.path).get("run_id") == self.holder["run_id"]:
            self.holder["expires"] = time.time() + ttl
            self.write()

    def release(self) -> None:
        """Removes the lock if it is still this run's."""
        release(self.path, self.holder["run_id"])

    def renewing(self):
        """A context in which a thread renews the lock every ``RENEW_EVERY`` seconds."""
        return _Renewer(self)


class _Renewer:
    def __init__(self, lock: Lock):
        self._lock, self._stop = lock, threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfrecorder-lock", daemon=True)

    def _run(self):
        while not self._stop.wait(RENEW_EVERY):
            try:
                self._lock.renew()
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
    try:
        holder = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        return {}
    except IsADirectoryError:
        return {"folder": True}
    except (OSError, ValueError):
        return {"damaged": True}
    if not isinstance(holder, dict) or _number(holder.get("expires")) is None:
        return {"damaged": True}
    return holder


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


def _process_gone(holder: dict) -> bool:
    """True only when the lock's process is provably not running any more."""
    me = identity()
    if (me["boot_id"] is None or me["pid_namespace"] is None
            or holder.get("host") != me["host"] or holder.get("boot_id") != me["boot_id"]
            or holder.get("pid_namespace") != me["pid_namespace"]
            or not isinstance(holder.get("pid"), int) or holder.get("runner") != "DirectRunner"):
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
    who = f"run {holder.get('run_id')} ({holder.get('runner')}"
    who += f", job {holder['job_id']})" if holder.get("job_id") else (
        f", process {holder.get('pid')} on {holder.get('host')})")
    return (f"another conversion is writing {folder}: {who}, started "
            f"{_when(holder.get('started'), '%Y-%m-%d %H:%M:%S')}. Wait for it to end, or "
            f"write elsewhere. If it is not running any more, its lock expires at "
            f"{_when(holder.get('expires'), '%H:%M:%S')}, or delete {path}.")


def acquire(output_dir: str, run_id: str, runner: str, ttl: int = LOCK_TTL) -> Lock:
    """Takes the lock of ``output_dir`` for ``run_id``; OutputBusyError when a live
    conversion holds it."""
    path = storage.join(output_dir, layout.LOCK)
    now = time.time()
    holder = {**identity(), "run_id": run_id, "runner": runner, "started": now,
              "expires": now + ttl}
    for _ in range(3):
        try:
            storage.create_exclusive(path, json.dumps(holder, sort_keys=True).encode())
            return Lock(path, holder)
        except FileExistsError:
            current = _read_holder(path)
            if current and not _stale(current, path):
                raise OutputBusyError(describe(current, path)) from None
            log.info("taking over the stale lock %s (%s)", path, current)
            _break(path, current)
    raise OutputBusyError(describe(_read_holder(path), path))


def _break(path: str, seen: dict) -> None:
    """Removes a stale lock, unless another run has replaced it meanwhile."""
    if not storage.is_remote(path):
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
        return
    if _read_holder(path) == seen:
        storage.remove(path)


def release(lock_path: str, run_id: str) -> None:
    """Removes the lock at ``lock_path`` if ``run_id`` holds it."""
    if _read_holder(lock_path).get("run_id") == run_id:
        storage.remove(lock_path)


# --- the last step --------------------------------------------------------------------

def finish(run: RunFolder, spec: metadata.DatasetSpec, stats: Iterable,
           quarantined: Iterable, matches: tuple = ((), ())) -> Manifest | None:
    """The run's last step: the error budget, then its files published, manifest last.
    ``matches``: the exact groups and near pairs the data report lists (``quality``).

    Raises ConversionError over the error budget (returns None instead when
    ``spec.fail_in_pipeline`` is False: the caller reads it back with
    ``budget_failure``); the previous output then stays as it was, and the errors file
    is written into the directory only when it held no complete output (else into the
    run's own folder, named in the error).
    """
    built = metadata.build(spec, stats, quarantined, matches)
    output_dir, folder = run.output_dir, run.folder
    storage.write_bytes(storage.join(folder, layout.ERRORS), built.errors)
    failure = metadata.over_budget(spec, built.rows_bad, built.first_reasons,
                                   storage.join(folder, layout.ERRORS))
    if failure is not None:
        if not storage.exists(storage.join(output_dir, layout.MANIFEST)):
            storage.write_bytes(_inside(output_dir, layout.ERRORS), built.errors)
            failure = metadata.over_budget(spec, built.rows_bad, built.first_reasons,
                                           storage.join(output_dir, layout.ERRORS))
        for name in (*built.shards, *built.indexes, *built.rows):
            storage.remove(storage.join(folder, name))
        if spec.fail_in_pipeline:
            raise failure
        return None

    before = survey(output_dir)
    here = functools.partial(_inside, output_dir)
    update = spec.update
    if update is not None and not any(c["added"] or c["retired"]
                                      for c in built.manifest.changes.values()):
        # Every row it tried was quarantined again, and it retires nothing: the update
        # changes nothing, so it publishes nothing.
        for done in (folder, *run.cleanup):
            storage.remove(done)
        tmp = here(layout.TMP_DIR)
        if not storage.listdir(tmp):
            storage.remove(tmp)
        release(storage.join(output_dir, layout.LOCK), run.run_id)
        return None
    moved = [*built.shards, *built.indexes, *built.rows,
             *(update.live_indexes if update is not None else ())]
    if update is None:
        # A conversion starts over at version 1. From here on the directory reads as
        # incomplete, until the new manifest is in: the old one goes first, then every
        # version's manifest, newest first, then the files they listed.
        storage.remove(here(layout.MANIFEST))
        for k, _ in reversed(before.versions):
            storage.remove(here(layout.version_manifest(k)))
        new = set(moved) | set(built.files) | {layout.ERRORS, layout.MANIFEST}
        for name in sorted(before.complete_files - new):
            storage.remove(here(name))
        version = 1
    else:
        version = update.version
    if run.moved:
        if not storage.is_remote(output_dir):
            for folder_name in sorted({storage.dirname(here(n)) for n in moved}):
                storage.makedirs(folder_name)
        for name in moved:
            storage.rename(storage.join(folder, name), here(name))
    _remove_empty_index_dir(output_dir)
    storage.write_bytes(here(layout.ERRORS), built.errors)
    for name, data in built.files.items():
        if "/" in name and not storage.is_remote(output_dir):  # versions/KKKKK/quality.json
            storage.makedirs(storage.dirname(here(name)))
        storage.write_bytes(here(name), data)
    # Published: the version's own manifest, created (never replaced: of two runs, one
    # wins), then the latest version's, which readers open.
    manifest = metadata.published(built.manifest)
    data = manifest.to_bytes()
    if not storage.is_remote(output_dir):
        storage.makedirs(here(layout.VERSIONS_DIR))
    storage.create_exclusive(here(layout.version_manifest(version)), data)
    storage.write_atomic(here(layout.MANIFEST), data)
    for done in (folder, *run.cleanup):
        storage.remove(done)
    tmp = here(layout.TMP_DIR)
    if not storage.listdir(tmp):
        storage.remove(tmp)
    release(storage.join(output_dir, layout.LOCK), run.run_id)
    return manifest


def budget_failure(run: RunFolder, spec: metadata.DatasetSpec) -> ConversionError | None:
    """The error budget's ConversionError, read back from the run's folder after its last
    step failed (it writes the errors file there before it checks the budget).

    A failed pipeline step reaches the caller wrapped by the runner (from a worker
    process, only as text); the files say what happened without parsing that text.
    """
    try:
        lines = storage.read_bytes(storage.join(run.folder, layout.ERRORS)).splitlines()
    except FileNotFoundError:
        return None
    bad = [json.loads(line) for line in lines if line.strip()]
    errors = storage.join(run.output_dir, layout.ERRORS)
    if (storage.exists(storage.join(run.output_dir, layout.MANIFEST))
            or not storage.exists(errors)):
        errors = storage.join(run.folder, layout.ERRORS)
    return metadata.over_budget(spec, len(bad),
                                [f"row {q['row']}: {q['reason']}" for q in bad[:5]], errors)


# --- index files for a finished output ------------------------------------------------

def build_index(output_dir: str) -> list[str]:
    """Writes the index file of every shard of ``output_dir`` from the shard's length
    fields (its data is skipped, not read) and lists them in the manifest; returns the
    index files' paths. For conversions written before index files existed, with
    ``write_index=False``, and for TFRecorder 2.0 directories.

    ConfigError for gzip shards (a gzip stream has no record offsets: convert again
    without compression); CorruptRecordError when a shard is damaged or holds another
    number of records than its manifest says. Takes the directory's lock, so it never
    runs beside a conversion of the same directory.
    """
    output_dir = str(output_dir)
    manifest = metadata.read_manifest(output_dir)
    if manifest.compression == "gzip":
        raise ConfigError(
            f"{output_dir} holds gzip shards: a gzip stream cannot be entered at a record's "
            f"byte offset, so an index of it would serve no reader. Convert again without "
            f"compression (the default), which writes the index files with the shards.")
    lock = acquire(output_dir, new_run_id(), "DirectRunner")
    try:
        # Every path written is checked before the first write: a link planted at the
        # index folder is refused (what it points to is outside); a link at an index
        # file's or the manifest's name is replaced by ``write_atomic``, never followed.
        here = functools.partial(_inside, output_dir)
        targets = {s.file: here(index.name(s.file))
                   for info in manifest.splits.values() for s in info.shards}
        if not storage.is_remote(output_dir):
            storage.makedirs(here(index.DIR))
        written, splits = [], {}
        for split, info in manifest.splits.items():
            shards = []
            for shard in info.shards:
                shard_path = here(shard.file)
                with storage.open_file(shard_path, "rb") as f:
                    entries = list(index.scan(f, shard_path))
                if 0 <= shard.num_examples != len(entries):
                    raise CorruptRecordError(
                        f"{shard_path}: {len(entries)} records, the manifest says "
                        f"{shard.num_examples}; the shard was truncated or replaced")
                storage.write_atomic(targets[shard.file], index.format(entries))
                written.append(targets[shard.file])
                shards.append(dataclasses.replace(shard, index=index.name(shard.file)))
            splits[split] = dataclasses.replace(info, shards=shards)
        if manifest.format_version != legacy.FORMAT_VERSION:  # TFRecorder's has no manifest
            updated = dataclasses.replace(manifest, splits=splits)
            storage.write_atomic(here(layout.MANIFEST), updated.to_bytes())
        return written
    finally:
        lock.release()
