"""A run's last step: the error budget, then a version published, manifest last.

Shards are written into the run's own folder and moved into place by ``finish``: only
then is the previous output removed (its manifest first), and the new manifest is
written last. A run that fails before leaves the previous output as it was. A version
after the first keeps its parent whole until its own manifest exists
(``complete_latest`` finishes the publishing of a run killed after that). Its own module
because a conversion, an update and ``compact`` all publish this one way.
"""

from __future__ import annotations

import functools
import json
from typing import Iterable

from tfrecorder import _storage as storage
from tfrecorder._errors import ConversionError, OutputBusyError
from tfrecorder._folder import layout
from tfrecorder._writer import run_metadata as metadata
from tfrecorder._folder.ledger import RunFolder, write_ledger
from tfrecorder._folder.lock import holds, release
from tfrecorder._folder.manifest import Manifest
from tfrecorder._folder.removal import _remove_empty_index_dir, _remove_listed
from tfrecorder._folder.survey import Survey, _inside, survey
from tfrecorder._inputs.labels import format_labels_file


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
                                   storage.join(folder, layout.ERRORS), built.reasons)
    if failure is not None:
        if not storage.exists(storage.join(output_dir, layout.MANIFEST)):
            storage.write_bytes(_inside(output_dir, layout.ERRORS), built.errors)
            failure = metadata.over_budget(spec, built.rows_bad, built.first_reasons,
                                           storage.join(output_dir, layout.ERRORS),
                                           built.reasons)
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
        # version's manifest, newest first, then the files they listed. Each removal
        # first checks that the lock is still this run's.
        _check_held(run)
        storage.remove(here(layout.MANIFEST))
        for k, _ in reversed(before.versions):
            _check_held(run)
            storage.remove(here(layout.version_manifest(k)))
        new = set(moved) | set(built.files) | {layout.ERRORS, layout.MANIFEST}
        _check_held(run)
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
    tag = manifest.tag or ""
    # A version after the first writes names unique to its run (its tag), and puts each
    # file where none is: of two runs publishing one version number (one stalled past
    # its lock's expiry while another took the lock over), neither replaces a file of
    # the other, and the creation of the version's manifest alone decides which wins.
    move, write = ((storage.move_new, storage.write_new) if version > 1
                   else (storage.rename, storage.write_into))
    # What this run puts into the folder before its manifest.
    put = [*moved, *(n for n in files if not (version > 1 and _is_top(n)))]
    try:
        if run.moved:
            if not storage.is_remote(output_dir):
                for folder_name in sorted({storage.dirname(here(n)) for n in moved}):
                    storage.makedirs(folder_name)
            for name in moved:
                move(storage.join(folder, name), here(name))
        _remove_empty_index_dir(output_dir)
        top = {n: d for n, d in files.items() if version > 1 and _is_top(n)}
        for name, data in files.items():  # versions/KKKKK/quality.json has its folder made
            if name not in top:
                write(here(name), data)
            elif name in layout.LATEST_FILES and (
                    layout.version_copy(version, name, tag) not in files):
                put.append(layout.version_copy(version, name, tag))
                write(here(layout.version_copy(version, name, tag)), data)
        manifest = metadata.published(manifest)
        data = manifest.to_bytes()
        if not storage.is_remote(output_dir):
            storage.makedirs(here(layout.VERSIONS_DIR))
        if version > 1 and not holds(storage.join(output_dir, layout.LOCK), run.run_id):
            # A run that took the lock over removed what this one had put in place
            # (this run's files were its leftovers): publishing would list them.
            raise lost(run, version, None, put)
        storage.create_exclusive(here(layout.version_manifest(version)), data)
    except FileExistsError as e:
        if version == 1:
            raise
        raise lost(run, version, e, put) from None
    except FileNotFoundError as e:
        # The run's own folder was cleared by a run that took its lock over.
        if version == 1 or holds(storage.join(output_dir, layout.LOCK), run.run_id):
            raise
        raise lost(run, version, e, put) from None
    for name in sorted(top):
        storage.write_atomic(here(name), top[name])
    storage.write_atomic(here(layout.MANIFEST), data)
    close(run)
    return manifest


def _check_held(run: RunFolder) -> None:
    """OutputBusyError when the folder's lock is no longer the run's: it stalled past
    the lock's expiry and another run took it over (and may have published since)."""
    if not holds(storage.join(run.output_dir, layout.LOCK), run.run_id):
        raise OutputBusyError(
            f"{run.output_dir}: run {run.run_id} no longer holds the folder's lock (it "
            f"stalled past its expiry and another run took it over), so it removes and "
            f"publishes nothing; the next conversion there removes what it left")


def lost(run: RunFolder, version: int, clash: OSError | None, put=()) -> OutputBusyError:
    """The error of a run that found its version's manifest (or a file of its run's
    names) in place: another run published the version (or is publishing it) since
    this one took the lock, which it held no more (it stalled past the lock's expiry).
    Nothing of the other's was replaced. What this run put in place (``put``) is left,
    listed again in its ledger (the run that took the lock over removed the first), so
    that the next run removes it as it removes what a killed run left: this run holds
    no lock, so it removes nothing itself."""
    try:
        write_ledger(run.folder, put)
    except OSError:  # the error below says what happened all the same
        pass
    name = clash and (clash.filename or (clash.args[0] if clash.args else ""))
    found = ("the folder's lock is that run's" if clash is None else
             f"{name} is that run's" if isinstance(clash, FileExistsError) else
             f"that run cleared this one's folder: {name} is gone")
    return OutputBusyError(
        f"{run.output_dir}: another run published version {version} while this one "
        f"(run {run.run_id}) was stalled past its lock's expiry ({found}), so "
        f"this run publishes nothing; the next conversion, update or compact there removes "
        f"what it left. Run the update again: it updates the version published since")


def _is_top(name: str) -> bool:
    """A top file that describes the latest version: replaced only by publishing. The
    labels files, and the model_garden layout's label maps beside them (``garden``)."""
    return name in layout.LATEST_FILES or (
        "/" not in name and name.endswith((layout.LABELS_SUFFIX, layout.LABEL_MAP_SUFFIX)))


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
            data = storage.read_bytes(here(layout.version_copy(k, name, m.tag or "")))
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
                                [f"row {q['row']}: {q['reason']}" for q in bad[:5]], errors,
                                metadata.reason_counts(q.get("reason", "") for q in bad))
