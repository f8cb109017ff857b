"""The export folder: what it holds, what a new export may reuse, and how it is
published whole.

An export folder holds exactly one version of one folder, and a manifest of its own,
``tfrecorder-export.json``, which says which of our shards made which file (with what
identifies that shard's live records) and each file's SHA-256. Exporting again reads it:
a file whose shard is unchanged is taken from the previous export as it is (a hard link
locally), so an update rewrites only the files of the shards it changed.

An export is all or nothing, as a version is: locally it is written into a folder
beside ``dest`` and renamed into place (the previous export renamed aside first, then
removed); on ``gs://``, where a folder cannot be renamed, its files are written beside
and moved in one by one, the manifest removed first and written last, so a folder
without it is one being written.

One export writes ``dest`` at a time: it holds ``dest``'s lock (``claimed``), the
folder lock's file (``layout.LOCK``, a dot-name no reader of an export takes for data)
under the folder lock's rules: refused while another export holds it, taken over when
its holder is provably gone or its lease ran out, released however the export ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import shutil
from typing import Iterator

from tfrecorder import _storage as storage
from tfrecorder._errors import ConfigError, OutputBusyError
from tfrecorder._folder import layout, lock
from tfrecorder._folder.ledger import new_run_id
from tfrecorder._folder.manifest import ShardInfo

#: The export's own manifest, written last.
MANIFEST = "tfrecorder-export.json"
#: What an export's lock says runs (``lock.describe`` words its message by it).
RUNNER = "export"


@contextlib.contextmanager
def claimed(dest: str) -> Iterator[lock.Lock]:
    """``dest``'s lock held for the ``with`` block: OutputBusyError while another export
    holds it; a stale one taken over; released however the block ends, Ctrl-C
    included. Locally the lock file needs its folder: one created here is removed
    again where the export left nothing in it (a first export that failed)."""
    created = not storage.is_remote(dest) and not os.path.isdir(dest)
    if created:
        os.makedirs(dest, exist_ok=True)
    try:
        with lock.acquire(dest, new_run_id(), RUNNER) as held:
            yield held
    finally:
        if created:
            try:
                os.rmdir(dest)
            except OSError:
                pass  # it holds the export now, or another export's lock


def confirm(held: lock.Lock, dest: str) -> None:
    """OutputBusyError where ``held`` is this export's no more: it stalled past its
    lock's expiry and another export took the lock over. Checked before publishing,
    so that of two exports only the lock's holder replaces ``dest``."""
    held.check()
    if not lock.holds(held.path, held.holder["run_id"]):
        raise OutputBusyError(
            f"{dest}: this export stalled past its lock's expiry and another export "
            f"took the lock over, so nothing was published. Export again once that "
            f"one has ended.")


def _is_lock(name: str) -> bool:
    """True for the lock's name, or the name it is written under a moment first."""
    return name == layout.LOCK or layout.is_lock_in_the_making(name)


@dataclasses.dataclass(frozen=True)
class Planned:
    """One file of an export: its name in the folder, the shard it is made from and
    what identifies that shard's live records (``shard_key``)."""

    name: str
    split: str
    shard: int
    key: dict


def shard_key(output_dir: str, shard: ShardInfo) -> dict:
    """What identifies a shard's live records: its name, size and counts, and the
    SHA-256 of its rows file (each record's digest) and of its live index, where the
    folder has them. Shard files are never rewritten under the same name but by an
    overwrite, which rewrites the rows files too."""
    def digest(name):
        if not name:
            return None
        return hashlib.sha256(storage.read_bytes(storage.inside(output_dir, name))).hexdigest()

    return {"shard": shard.file, "bytes": shard.num_bytes, "records": shard.num_examples,
            "live": shard.live, "rows": digest(shard.rows),
            "live_index": digest(shard.live_index)}


def previous(dest: str) -> dict | None:
    """The manifest of the export in ``dest``; None where there is none. ConfigError
    where ``dest`` holds anything else: an export never replaces the user's files."""
    if storage.exists(storage.join(dest, MANIFEST)):
        try:
            return json.loads(storage.read_bytes(storage.join(dest, MANIFEST)))
        except ValueError as e:
            raise ConfigError(f"{dest}/{MANIFEST} is damaged ({e}); remove {dest} and "
                              f"export again") from None
    if storage.isdir(dest) and [n for n in storage.listdir(dest) if not _is_lock(n)]:
        raise ConfigError(
            f"{dest} holds files and no {MANIFEST}: it is not an export of tfrecorder's, "
            f"and an export replaces what its folder holds. Give a new or empty folder.")
    return None


def reusable(old: dict | None, settings: dict) -> dict:
    """``{json of a shard key: (name, sha256, bytes)}`` of the previous export's files
    that a new export with ``settings`` may take as they are: none where the settings
    (format, features, labels) changed."""
    if not old or old.get("settings") != settings:
        return {}
    return {json.dumps(f["key"], sort_keys=True): (name, f["sha256"], f["bytes"])
            for name, f in old.get("files", {}).items() if "key" in f}


class Writing:
    """An export being written beside ``dest``: ``put`` a file, ``take`` one from the
    previous export, ``publish`` at the end; ``discard`` on failure."""

    def __init__(self, dest: str):
        self.dest = dest.rstrip("/")
        self.remote = storage.is_remote(self.dest)
        parent, base = storage.dirname(self.dest), storage.basename(self.dest)
        self.temp = storage.join(parent, f".{base}.export-{secrets.token_hex(6)}")
        self.names: list[str] = []
        self.bytes_written = 0
        self.bytes_reused = 0
        if not self.remote:
            os.makedirs(self.temp)

    def put(self, name: str, data: bytes) -> str:
        """``data`` written as the file ``name``; its SHA-256."""
        path = storage.inside(self.temp, name)
        storage.makedirs(storage.dirname(path))
        storage.write_bytes(path, data)
        self.names.append(name)
        self.bytes_written += len(data)
        return hashlib.sha256(data).hexdigest()

    def take(self, name: str, old_name: str, size: int) -> None:
        """The previous export's file ``old_name``, unchanged, as ``name``."""
        old = storage.inside(self.dest, old_name)
        path = storage.inside(self.temp, name)
        if self.remote:
            if name != old_name:
                storage.write_bytes(path, storage.read_bytes(old))
                self.names.append(name)
            self.bytes_reused += size
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.link(old, path)
        except OSError:  # a file system without hard links
            shutil.copyfile(old, path)
        self.names.append(name)
        self.bytes_reused += size

    def publish(self, manifest: dict, old: dict | None) -> None:
        """The export in place of ``dest``'s: renamed whole locally; on ``gs://`` the
        files moved in with the manifest removed first and written last, and the files
        of the previous export no longer listed removed."""
        data = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n"
        if not self.remote:
            storage.write_bytes(os.path.join(self.temp, MANIFEST), data)
            self._carry_lock()
            aside = None
            if os.path.isdir(self.dest):
                aside = self.temp + ".old"
                os.rename(self.dest, aside)
            try:
                os.rename(self.temp, self.dest)
            except OSError:
                if aside:
                    self._put_back(aside)
                raise
            if aside:
                shutil.rmtree(aside)
            return
        if old is not None:
            storage.remove(storage.join(self.dest, MANIFEST))
        for name in self.names:
            storage.rename(storage.join(self.temp, name), storage.join(self.dest, name))
        listed = set(manifest["files"]) | set(manifest.get("metadata", []))
        for name in (old or {}).get("files", {}):
            if name not in listed:
                storage.remove(storage.join(self.dest, name))
        storage.write_bytes(storage.join(self.dest, MANIFEST), data)

    def _carry_lock(self) -> None:
        """The lock of ``dest`` given a second name in the new folder, so that it
        moves in with it: the folder that takes ``dest``'s place is locked as it lands."""
        held, carried = (os.path.join(d, layout.LOCK) for d in (self.dest, self.temp))
        if not os.path.exists(held):
            return
        try:
            os.link(held, carried)
        except OSError:  # a file system without hard links
            shutil.copyfile(held, carried)

    def _put_back(self, aside: str) -> None:
        """The previous export back in place where the new one could not be renamed
        there (another run made ``dest`` in the moment it was away)."""
        try:
            os.rename(aside, self.dest)
        except OSError:
            raise OutputBusyError(
                f"{self.dest} was taken by another run while this export replaced it: "
                f"nothing was published, and the previous export is kept whole in "
                f"{aside}; move it back once that run has ended") from None

    def discard(self) -> None:
        """What was written beside ``dest`` removed: a failed export leaves nothing."""
        if not self.remote:
            shutil.rmtree(self.temp, ignore_errors=True)
            return
        for name in self.names:
            try:
                storage.remove(storage.join(self.temp, name))
            except FileNotFoundError:
                pass
