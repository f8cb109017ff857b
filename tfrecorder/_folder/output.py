"""The output directory as a whole: what it holds, who writes it, how a run publishes.

A run never destroys what it cannot replace:

- ``survey`` reads what a directory holds before a run: a complete output (its manifest
  and the files it lists), files of runs that did not finish (listed in their ledgers),
  and anything else, which is the user's and never removed or replaced.
- ``Lock`` (module ``lock``): one conversion writes a directory at a time (``layout.LOCK``).
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
import os
import time
import uuid
from typing import Iterable

from tfrecorder import _storage as storage
from tfrecorder._folder import index, layout, legacy, metadata, view
from tfrecorder._writer import records
from tfrecorder._errors import (ConfigError, ConversionError, CorruptRecordError,
                               IncompleteOutputError, OutputBusyError, OutputExistsError,
                               TFRecorderError)
from tfrecorder._folder.lock import (  # noqa: F401  (the lock's names, as callers know them)
    BOOT_ID, DATAFLOW_LOCK_TTL, LOCK_TTL, RENEW_EVERY, Lock, _process_gone, _read_holder,
    _stale, acquire, describe, identity, release)
from tfrecorder._inputs.labels import format_labels_file
from tfrecorder._folder.manifest import Manifest, json_bytes, loads

log = logging.getLogger(__name__)

LEDGER = "ledger.json"


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
        # quality.json is the latest version's report, which only version 1 lists.
        names = {layout.MANIFEST, layout.ERRORS, layout.DATASET_INFO, layout.FEATURES,
                 layout.QUALITY}
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
        return names | _folders(names) | set(self.half_written)

    @property
    def half_written(self) -> tuple[str, ...]:
        """Temporary files of ours at the top (``quality.json.<id>.tmp``) that a killed
        run left: never anything but ours, so the next run removes them."""
        return tuple(e for e in self.entries if _ours_in_the_writing(e))

    def unfinished_only(self) -> bool:
        """True when everything here was left by runs that did not finish (a failed
        run's errors file and folder, half-written files): no output to protect, so a
        new run may replace them without ``overwrite``."""
        ours = self.leftovers | _folders(self.leftovers) | {layout.LOCK, layout.TMP_DIR}
        return all(e in ours or e in self.half_written for e in self.entries)

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
    if (m.version or 1) > 1:  # its copies of the top files (``publish``), where written
        names |= {layout.version_copy(m.version, n) for n in layout.LATEST_FILES}
    return names


def _ours_in_the_writing(name: str) -> bool:
    """True for the temporary name ``storage.temp_name`` gives a file of ours (``name``
    inside the output folder)."""
    target = layout.written_as(name)
    return target is not None and (layout.is_output_name(target) or target == layout.LOCK)


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
    (``versions/KKKKK.json``), in order, as ``view.published`` lists them and
    ``view.read_version`` reads them: IncompleteOutputError naming the file when one is
    not a manifest whose every name its conversion writes, and nothing it lists may be
    read or removed."""
    return tuple((k, view.read_version(output_dir, k).manifest)
                 for k in view.published(output_dir, entries))


def under_a_file(output_dir: str) -> ConfigError:
    """The error for an output path that runs through a file."""
    return ConfigError(f"output directory {output_dir}: a part of the path is a file, not a "
                       f"folder; give a path under a folder")


def survey(output_dir: str, run: layout.Declared | None = None) -> Survey:
    """Reads what ``output_dir`` holds; ConfigError when it cannot be a directory.
    ``run``: what the run about to write declares; the files a ledger lists are taken
    as leftovers only where the folder's manifest or ``run`` writes them."""
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
        for dead in storage.listdir(tmp):
            try:
                ledger = loads(storage.read_bytes(_inside(output_dir, layout.TMP_DIR,
                                                               dead, LEDGER)))
                files = ledger["files"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            # A ledger names what its run wrote, but anyone can write a ledger: only
            # names of this folder's conversion are taken from it (never "../x",
            # "/etc/x", another dataset's shard or a labels file of no feature of its),
            # and only as names inside this folder.
            if isinstance(files, list):
                leftovers.update(n for n in files if isinstance(n, str))
    # A damaged manifest, or version manifest, makes nothing in the folder ours, the
    # versions' files included.
    found = ()
    if not damaged:
        try:
            found = read_versions(output_dir, entries)
        except IncompleteOutputError as e:
            manifest, damaged = None, str(e)
        else:
            damaged = unlike(output_dir, manifest, found)
            if damaged:
                manifest, found = None, ()
    declared = [run, *(_declared(m) for m in (manifest, *(m for _, m in found)) if m)]
    leftovers = {n for n in leftovers if any(d and d.writes(n) for d in declared)}
    return Survey(output_dir, entries, manifest, frozenset(leftovers), damaged, found)


def unlike(output_dir: str, manifest: Manifest | None, found: tuple) -> str | None:
    """Why the versions of a folder cannot all be its own, or None: every version of a
    folder holds one dataset with the same features (an update refuses any other), so a
    manifest that declares another dataset name or other features was not written by
    its conversions, and nothing it lists is ours."""
    first = manifest or (found[-1][1] if found else None)
    for k, m in found:
        if m.name != first.name or m.features != first.features:
            what = (f"dataset {m.name!r}" if m.name != first.name else
                    f"features {sorted(m.features)}")
            return (f"{storage.join(output_dir, layout.version_manifest(k))} declares "
                    f"{what}, where the folder's latest version declares "
                    f"{first.name!r} with features {sorted(first.features)}: it is no "
                    f"version of this folder's conversions, so nothing it lists is read "
                    f"or removed. Put back the file tfrecorder wrote, or convert into "
                    f"another folder")
    return None


def _declared(m: Manifest) -> layout.Declared:
    return layout.Declared(m.name, frozenset(m.splits), frozenset(m.vocabularies))


def _all_versions(output_dir: str, latest: "view.Version") -> list:
    """Every published version of ``output_dir``, the latest (already open) last."""
    if latest.manifest.format_version < 2:
        return [latest]
    return [view.open_version(output_dir, n) for n in view.versions(output_dir)
            if n != latest.number] + [latest]


def _order(latest, path: str):
    """Index files in the manifest's order of their shards (splits, then shards)."""
    names = [index.name(s.file) for info in latest.manifest.splits.values()
             for s in info.shards]
    name = path.rsplit("/", 2)
    name = f"{name[-2]}/{name[-1]}"
    return (names.index(name) if name in names else len(names), name)


def _remove_listed(output_dir: str, names: Iterable[str], manifests: list) -> tuple:
    """Removes the files ``names`` of ours that ``manifests`` list: ``(names removed,
    their bytes)``. A shard whose size is not the one its manifest gives is left where
    it is: a file of the user's under a name a conversion could give, not the shard
    one wrote (whatever a manifest says, a stat before the removal)."""
    sizes = {s.file: s.num_bytes for m in manifests for info in m.splits.values()
             for s in info.shards if s.num_bytes > 0}
    removed, total = [], 0
    for name in names:
        path = _inside(output_dir, name)
        try:
            size = storage.size(path)
        except FileNotFoundError:
            continue
        if sizes.get(name, size) != size:
            log.warning("%s is not the shard its manifest lists (%d bytes, not %d): left "
                        "as it is", path, size, sizes[name])
            continue
        storage.remove(path)
        removed.append(name)
        total += size
    return tuple(removed), total


def _remove_empty_tree(folder: str) -> None:
    """Removes the empty folders under ``folder`` and it, bottom up; a file in it (the
    user's) keeps it and the folders on its way."""
    for root, dirs, files in os.walk(folder, topdown=False):
        if not os.listdir(root):
            os.rmdir(root)


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
    if entries and not overwrite and not s.unfinished_only():
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
            + (f" (A manifest there cannot be trusted: {s.damaged})" if s.damaged else ""))


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
    _remove_half_written(s)
    _remove_empty_index_dir(s.output_dir)
    if layout.TMP_DIR in s.entries:
        tmp = _inside(s.output_dir, layout.TMP_DIR)
        for run in storage.listdir(tmp):
            if run != keep_run:
                storage.remove(_inside(s.output_dir, layout.TMP_DIR, run))
        if not storage.listdir(tmp):  # a run that goes on makes it again for its files
            storage.remove(tmp)


#: A lock's temporary file lives for the moment between its writing and its link; one
#: older than this was left by a killed process.
_LOCK_IN_THE_MAKING_AGE = 60.0


def _remove_half_written(s: Survey) -> None:
    """Removes the temporary files killed runs left beside our files (with the lock
    held, no run of ours is writing one): at the top and in the folders of ours. Only
    local folders have them (an object store's upload has no temporary name)."""
    if storage.is_remote(s.output_dir):
        return
    top = os.path.realpath(s.output_dir)
    for name in s.half_written:
        storage.remove(_inside(s.output_dir, name))
    for name in os.listdir(top):
        path = os.path.join(top, name)
        if not layout.is_lock_in_the_making(name) or os.path.islink(path):
            continue
        # Another run's lock, written whole, then linked: removed once its maker is
        # provably gone, or, when it is not whole, once no maker can still be at it.
        holder = _read_holder(path)
        written = storage.mtime(path)
        if (_process_gone(holder) if not holder.get("damaged") else
                written is not None and time.time() - written > _LOCK_IN_THE_MAKING_AGE):
            storage.remove(path)
    for folder in (index.DIR, layout.ROWS_DIR, layout.VERSIONS_DIR):
        root = os.path.join(top, folder)
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        for here, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(here, d))]
            for name in files:
                path = os.path.join(here, name)
                if _ours_in_the_writing(os.path.relpath(path, top).replace(os.sep, "/")):
                    os.remove(path)


def write_ledger(folder: str, names: Iterable[str]) -> None:
    """Creates the run's own folder (its owner's alone) and lists in it every file the
    run will put into the output folder, before the first one is written."""
    storage.makedirs(folder, private=True)
    storage.write_bytes(storage.join(folder, LEDGER),
                        json.dumps({"files": sorted(set(names))}).encode(), private=True)


# --- the last step --------------------------------------------------------------------

def finish(run: RunFolder, spec: metadata.DatasetSpec, stats: Iterable,
           quarantined: Iterable, matches: tuple = ((), ())) -> Manifest | None:
    """The run's last step: the error budget, then its files published, manifest last.
    ``matches``: the exact groups and near pairs the data report lists (``matching``).

    Raises ConversionError over the error budget (returns None instead when
    ``spec.fail_in_pipeline`` is False: the caller reads it back with
    ``budget_failure``); the previous output then stays as it was, and the errors file
    is written into the directory only when it held no complete output (else into the
    run's own folder, named in the error).
    """
    stats = list(stats)
    exact, near = matches
    if near or exact:
        # Matches name their records by place: the rest is in their rows files.
        from tfrecorder._report.matching import full_refs
        from tfrecorder._folder.rows import rows_of

        rows = rows_of(run.output_dir, run.shard_folder, run.folder, stats, spec.update,
                       metadata.label_names(spec))
        near, exact = full_refs(near, rows, exact)
    built = metadata.build(spec, stats, quarantined, (exact, near))
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
                                      for c in built.manifest.changes.values()) and (
            built.manifest.vocabularies == update.parent.vocabularies):
        # Every row it tried was quarantined again, it retires nothing and names no new
        # label: the update changes nothing, so it publishes nothing.
        close(run)
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
        _remove_listed(output_dir, sorted(before.complete_files - new),
                       [m for m in (before.manifest, *(m for _, m in before.versions)) if m])
        version = 1
    else:
        version = update.version
    return publish(run, moved, {layout.ERRORS: built.errors, **built.files},
                   built.manifest, version)


def publish(run: RunFolder, moved: Iterable[str], files: dict[str, bytes],
            manifest: Manifest, version: int) -> Manifest:
    """A version published: the files ``moved`` from the run's folder into place (when
    the run wrote there), ``files`` written, then the version's own manifest created
    (never replaced: of two runs, one wins), then ``tfrecorder.json``, which readers
    open; the run closed. Returns ``manifest`` as published (with its time).

    A version after the first has a parent that readers may have open: the top files
    that describe the latest version (``layout.LATEST_FILES``, the labels files) are
    written under the version's own names first and put at the top only after its
    manifest exists (``complete_latest``), so that a run killed before that leaves the
    parent whole, and one killed after it is completed by the next run.
    """
    output_dir, folder = run.output_dir, run.folder
    here = functools.partial(_inside, output_dir)
    moved = list(moved)
    if run.moved:
        if not storage.is_remote(output_dir):
            for folder_name in sorted({storage.dirname(here(n)) for n in moved}):
                storage.makedirs(folder_name)
        for name in moved:
            storage.rename(storage.join(folder, name), here(name))
    _remove_empty_index_dir(output_dir)
    top = {n: d for n, d in files.items() if version > 1 and _is_top(n)}
    for name, data in files.items():  # versions/KKKKK/quality.json has its folder made
        if name not in top:
            storage.write_into(here(name), data)
        elif name in layout.LATEST_FILES and layout.version_copy(version, name) not in files:
            storage.write_into(here(layout.version_copy(version, name)), data)
    manifest = metadata.published(manifest)
    data = manifest.to_bytes()
    if not storage.is_remote(output_dir):
        storage.makedirs(here(layout.VERSIONS_DIR))
    storage.create_exclusive(here(layout.version_manifest(version)), data)
    for name in sorted(top):
        storage.write_atomic(here(name), top[name])
    storage.write_atomic(here(layout.MANIFEST), data)
    close(run)
    return manifest


def _is_top(name: str) -> bool:
    """A top file that describes the latest version: replaced only by publishing."""
    return name in layout.LATEST_FILES or (
        "/" not in name and name.endswith(layout.LABELS_SUFFIX))


def complete_latest(s: Survey) -> bool:
    """Completes the publishing of a version whose run was killed after its manifest
    ``versions/KKKKK.json`` was created but before the top files were all in place:
    its own copies of them (and its labels, from its manifest) put at the top, then
    ``tfrecorder.json``. Runs with the folder's lock held; True when it did."""
    if s.damaged or not s.versions:
        return False
    k, m = s.versions[-1]
    if s.manifest is not None and s.manifest.version == k:
        return False
    here = functools.partial(_inside, s.output_dir)
    for name in layout.LATEST_FILES:
        try:
            data = storage.read_bytes(here(layout.version_copy(k, name)))
        except FileNotFoundError:  # a version written before its copies, or without one
            continue
        storage.write_atomic(here(name), data)
    for key, names in m.vocabularies.items():
        storage.write_atomic(here(layout.labels_file(key)),
                             format_labels_file(names).encode("utf-8"))
    storage.write_atomic(here(layout.MANIFEST),
                         storage.read_bytes(here(layout.version_manifest(k))))
    return True


def close(run: RunFolder) -> None:
    """The run's end: its own folders removed (and the folder of runs, once empty), its
    lock released."""
    for done in (run.folder, *run.cleanup):
        storage.remove(done)
    tmp = _inside(run.output_dir, layout.TMP_DIR)
    if not storage.listdir(tmp):
        storage.remove(tmp)
    release(storage.join(run.output_dir, layout.LOCK), run.run_id)


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
    latest = view.open_version(output_dir)
    manifest = latest.manifest
    latest.need_offsets("an index file")
    with acquire(output_dir, new_run_id(), "DirectRunner"):
        # Every path written is checked before the first write: a link planted at the
        # index folder is refused (what it points to is outside); a link at an index
        # file's or the manifest's name is replaced by ``write_atomic``, never followed.
        here = functools.partial(_inside, output_dir)
        # Every shard some version reads: a reader of an older version needs its index too.
        shards = {s.file: s for v in _all_versions(output_dir, latest)
                  for info in v.manifest.splits.values() for s in info.shards}
        targets = {name: here(index.name(name)) for name in shards}
        if not storage.is_remote(output_dir):
            storage.makedirs(here(index.DIR))
        written = []
        for name, shard in sorted(shards.items()):
            shard_path = here(name)
            with storage.open_file(shard_path, "rb") as f:
                entries = list(records.scan(f, shard_path))
            if 0 <= shard.num_examples != len(entries):
                raise CorruptRecordError(
                    f"{shard_path}: {len(entries)} records, the manifest says "
                    f"{shard.num_examples}; the shard was truncated or replaced")
            storage.write_atomic(targets[name], index.format(entries))
            written.append(targets[name])
        if manifest.format_version != legacy.FORMAT_VERSION:  # TFRecorder's has no manifest
            # The manifest's own text with each shard's index entry added: what a later
            # format adds to it is kept. A version's file (versions/KKKKK.json) is never
            # rewritten; readers find index files by their name.
            d = loads(storage.read_bytes(here(layout.MANIFEST)))
            for info in d["splits"].values():
                for shard in info["shards"]:
                    shard["index"] = index.name(shard["file"])
            storage.write_atomic(here(layout.MANIFEST), json_bytes(d))
        return sorted(written, key=lambda p: _order(latest, p))


@dataclasses.dataclass(frozen=True)
class Vacuumed:
    """What ``vacuum`` removed: the versions and the files (names inside the folder)."""

    versions: tuple
    files: tuple
    bytes: int

    def __str__(self) -> str:
        from tfrecorder._writer.result import human_bytes

        if not self.versions:
            return "nothing to remove: every version is kept"
        return (f"removed version(s) {', '.join(map(str, self.versions))}: "
                f"{len(self.files)} file(s) of records and reports, "
                f"{human_bytes(self.bytes)}, and {len(self.versions)} version manifest(s)")


def vacuum(output_dir: str, keep: int) -> Vacuumed:
    """Removes the versions of ``output_dir`` older than its last ``keep``: first the
    files that only those versions list (shards, index, rows and live index files, their
    data reports), then their manifests, oldest first. A file any kept version lists is
    never removed, nor the folder's own files (``tfrecorder.json``, labels, report). Runs
    under the folder's lock, as a conversion does; a reader of a removed version stops
    with ``OutputChangedError``."""
    from tfrecorder._folder.lock import acquire

    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"keep={keep!r}: give how many of the latest versions to keep, "
                          f"1 or more")
    s = survey(output_dir)
    if s.manifest is None:
        raise IncompleteOutputError(
            f"{output_dir} holds no whole conversion ({s.damaged or 'no tfrecorder.json'}); "
            f"nothing to vacuum")
    with acquire(output_dir, new_run_id(), "vacuum"):
        versions = read_versions(output_dir)
        dropped, kept = versions[:-keep], versions[-keep:]
        if not dropped:
            return Vacuumed((), (), 0)
        in_use = {layout.MANIFEST, layout.ERRORS, layout.DATASET_INFO, layout.FEATURES,
                  layout.QUALITY}
        for k, m in kept:
            in_use |= _listed(m) | {layout.version_manifest(k)}
        in_use |= _listed(s.manifest)
        # Only a version's own files go; a labels file is the folder's, whatever an
        # old version's manifest says.
        gone = sorted(n for n in set().union(*(_listed(m) for _, m in dropped)) - in_use
                      if not n.endswith(layout.LABELS_SUFFIX))
        here = functools.partial(_inside, output_dir)
        gone, size = _remove_listed(output_dir, gone, [m for _, m in dropped])
        for k, _ in dropped:  # oldest first: what is left is always a run of versions
            storage.remove(here(layout.version_manifest(k)))
        if not storage.is_remote(output_dir):
            for k, _ in dropped:
                folder = here(layout.VERSIONS_DIR, f"{k:05d}")
                if os.path.isdir(folder):
                    _remove_empty_tree(folder)
        return Vacuumed(tuple(k for k, _ in dropped), tuple(gone), size)
