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
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Iterable

from tfrecorder import layout, metadata, storage
from tfrecorder.errors import ConfigError, OutputBusyError, OutputExistsError, TFRecorderError

log = logging.getLogger(__name__)

LEDGER = "ledger.json"
#: Seconds a lock holds without being renewed; a running local conversion renews it.
LOCK_TTL = 600
RENEW_EVERY = 60
#: A Dataflow job cannot renew its lock; its last step removes it.
DATAFLOW_LOCK_TTL = 24 * 3600


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def run_dir(output_dir: str, run_id: str) -> str:
    """The folder of one run's own files: tasks, shards being written, its ledger."""
    return storage.join(output_dir, layout.TMP_DIR, run_id)


# --- what a directory holds -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Survey:
    """What an output directory holds before a run."""

    output_dir: str
    entries: tuple[str, ...]
    manifest: metadata.Manifest | None      # a complete previous output
    leftovers: frozenset[str]                # files listed by ledgers of unfinished runs

    @property
    def complete_files(self) -> frozenset[str]:
        """The files of the complete output: its shards and metadata files."""
        m = self.manifest
        if m is None:
            return frozenset()
        names = {f for split in m.splits for f in m.files(split)}
        names |= {layout.MANIFEST, layout.ERRORS, layout.DATASET_INFO, layout.FEATURES}
        names |= {layout.labels_file(k) for k in m.vocabularies}
        return frozenset(names)

    def ours(self) -> frozenset[str]:
        return self.complete_files | self.leftovers | {layout.LOCK, layout.TMP_DIR}

    def foreign(self) -> list[str]:
        """Entries no conversion of ours wrote: left alone, never replaced."""
        ours = self.ours()
        return [e for e in self.entries if e not in ours]


def survey(output_dir: str) -> Survey:
    """Reads what ``output_dir`` holds; ConfigError when it cannot be a directory."""
    if storage.exists(output_dir) and not storage.isdir(output_dir):
        raise ConfigError(f"output directory {output_dir} is a file; give a directory path")
    try:
        entries = tuple(storage.listdir(output_dir))
    except NotADirectoryError:
        raise ConfigError(f"output directory {output_dir}: a part of the path is a file, "
                          f"not a folder; give a path under a folder") from None
    except PermissionError:
        raise ConfigError(f"output directory {output_dir} cannot be read (no permission); "
                          f"give a folder you can write to") from None
    manifest = None
    if layout.MANIFEST in entries:
        try:
            manifest = metadata.read_manifest(output_dir)
        except TFRecorderError:
            manifest = None  # a damaged manifest: the directory is not a complete output
    leftovers: set[str] = set()
    tmp = storage.join(output_dir, layout.TMP_DIR)
    if layout.TMP_DIR in entries:
        for run in storage.listdir(tmp):
            try:
                ledger = json.loads(storage.read_bytes(storage.join(tmp, run, LEDGER)))
                leftovers.update(str(n) for n in ledger["files"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return Survey(output_dir, entries, manifest, frozenset(leftovers))


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
        if holder and holder.get("run_id") != run_id and not _stale(holder):
            raise OutputBusyError(describe(holder, path))
    entries = [e for e in s.entries if e != layout.LOCK]
    if entries and not overwrite:
        shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
        raise OutputExistsError(
            f"output directory {s.output_dir} already holds {len(entries)} entries ({shown}). "
            f"Pass overwrite=True (--overwrite in the CLI) to replace tfrecorder's files there, "
            f"or give an empty directory.")
    clash = sorted(set(s.foreign()) & set(planned))
    if clash:
        raise OutputExistsError(
            f"output directory {s.output_dir} holds {', '.join(clash[:5])}, which no "
            f"tfrecorder manifest lists, and this conversion would replace it. Move it away, "
            f"or give another output directory.")


def clear_leftovers(s: Survey, keep_run: str) -> None:
    """Removes what unfinished runs left (with the lock held, none is running).

    Their ledger-listed files go only when no complete output is there: a run killed
    after publishing its manifest lists the very files of that output.
    """
    if s.manifest is None:
        for name in sorted(s.leftovers):
            if name in s.entries and name not in (layout.LOCK, layout.TMP_DIR):
                storage.remove(storage.join(s.output_dir, name))
    tmp = storage.join(s.output_dir, layout.TMP_DIR)
    if layout.TMP_DIR in s.entries:
        for run in storage.listdir(tmp):
            if run != keep_run:
                storage.remove(storage.join(tmp, run))


def write_ledger(folder: str, names: Iterable[str]) -> None:
    storage.makedirs(folder)
    storage.write_bytes(storage.join(folder, LEDGER),
                        json.dumps({"files": sorted(set(names))}).encode())


# --- one writer at a time -------------------------------------------------------------

@dataclasses.dataclass
class Lock:
    """The lock file of an output directory, held by one run.

    It is created only where none exists (O_EXCL on a local disk, a generation
    precondition on Cloud Storage) and says who holds it and until when. A lock is
    stale, and is taken over, when it has expired, or when it was taken by a local run
    on this machine whose process is gone.
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
    try:
        holder = json.loads(storage.read_bytes(path))
        return holder if isinstance(holder, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {"damaged": True}


def _stale(holder: dict) -> bool:
    if holder.get("damaged") or float(holder.get("expires", 0)) < time.time():
        return True
    if holder.get("runner") != "DirectRunner" or holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, ValueError, OverflowError):
        return False
    return False


def describe(holder: dict, path: str) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("started", 0))))
    who = f"run {holder.get('run_id')} ({holder.get('runner')}"
    who += f", job {holder['job_id']})" if holder.get("job_id") else (
        f", process {holder.get('pid')} on {holder.get('host')})")
    expires = time.strftime("%H:%M:%S", time.localtime(float(holder.get("expires", 0))))
    return (f"another conversion is writing {storage.dirname(path)}: {who}, started {started}. "
            f"Wait for it to end, or write elsewhere. If it is not running any more, its lock "
            f"expires at {expires}, or delete {path}.")


def acquire(output_dir: str, run_id: str, runner: str, ttl: int = LOCK_TTL) -> Lock:
    """Takes the lock of ``output_dir`` for ``run_id``; OutputBusyError when a live
    conversion holds it."""
    path = storage.join(output_dir, layout.LOCK)
    now = time.time()
    holder = {"run_id": run_id, "runner": runner, "host": socket.gethostname(),
              "pid": os.getpid(), "started": now, "expires": now + ttl}
    for _ in range(3):
        try:
            storage.create_exclusive(path, json.dumps(holder, sort_keys=True).encode())
            return Lock(path, holder)
        except FileExistsError:
            current = _read_holder(path)
            if current and not _stale(current):
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
        if _read_holder(aside).get("run_id") != seen.get("run_id"):
            try:  # a fresh lock was moved aside: put it back
                os.link(aside, path)
            except FileExistsError:
                pass
        os.remove(aside)
        return
    if _read_holder(path).get("run_id") == seen.get("run_id"):
        storage.remove(path)


def release(lock_path: str, run_id: str) -> None:
    """Removes the lock at ``lock_path`` if ``run_id`` holds it."""
    if _read_holder(lock_path).get("run_id") == run_id:
        storage.remove(lock_path)


# --- the last step --------------------------------------------------------------------

def finish(output_dir: str, spec: metadata.DatasetSpec, stats: Iterable,
           quarantined: Iterable) -> metadata.Manifest:
    """The run's last step: the error budget, then its files published, manifest last.

    Raises ConversionError over the error budget; the previous output then stays as it
    was, and the errors file is written into the directory only when it held no
    complete output (else into the run's own folder, named in the error).
    """
    built = metadata.build(spec, stats, quarantined)
    run = spec.run_dir
    storage.write_bytes(storage.join(run, layout.ERRORS), built.errors)
    failure = metadata.over_budget(spec, built.rows_bad, built.first_reasons,
                                   storage.join(run, layout.ERRORS))
    if failure is not None:
        if not storage.exists(storage.join(output_dir, layout.MANIFEST)):
            storage.write_bytes(storage.join(output_dir, layout.ERRORS), built.errors)
            failure = metadata.over_budget(spec, built.rows_bad, built.first_reasons,
                                           storage.join(output_dir, layout.ERRORS))
        for name in built.shards:
            storage.remove(storage.join(run, name))
        raise failure

    before = survey(output_dir)
    # From here on the directory reads as incomplete, until the new manifest is in.
    storage.remove(storage.join(output_dir, layout.MANIFEST))
    new = set(built.shards) | set(built.files) | {layout.ERRORS, layout.MANIFEST}
    for name in sorted(before.complete_files - new):
        storage.remove(storage.join(output_dir, name))
    if spec.staged:
        for name in built.shards:
            storage.rename(storage.join(run, name), storage.join(output_dir, name))
    storage.write_bytes(storage.join(output_dir, layout.ERRORS), built.errors)
    for name, data in built.files.items():
        storage.write_bytes(storage.join(output_dir, name), data)
    storage.write_atomic(storage.join(output_dir, layout.MANIFEST), built.manifest_bytes)
    for folder in (run, *spec.cleanup):
        storage.remove(folder)
    tmp = storage.join(output_dir, layout.TMP_DIR)
    if not storage.listdir(tmp):
        storage.remove(tmp)
    release(storage.join(output_dir, layout.LOCK), spec.run_id)
    return built.manifest
