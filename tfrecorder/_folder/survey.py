"""What an output directory holds before a run, and whether the run may write it.

A run never destroys what it cannot replace. ``survey`` reads what a directory holds: a
complete output (its manifest, every published version and the files they list), files
of runs that did not finish (listed in their ledgers, ``ledger``), and anything else,
which is the user's and never removed or replaced. ``check_target`` refuses, before
anything is written, a directory the run may not write. Its own module because every
verb that changes a directory (a conversion, an update, ``compact``, ``vacuum``) starts
from this one reading of it.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from tfrecorder import _storage as storage
from tfrecorder._errors import (ConfigError, IncompleteOutputError, OutputBusyError,
                               OutputExistsError, TFRecorderError)
from tfrecorder._folder import index, layout, metadata, view
from tfrecorder._folder.ledger import LEDGER
from tfrecorder._folder.lock import _read_holder, _stale, describe
from tfrecorder._folder.manifest import Manifest, loads


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
    if m.layout != "tfrecorder":  # the label map beside the label's names (garden)
        names |= {layout.escape(m.label_key) + layout.LABEL_MAP_SUFFIX} if m.label_key else set()
    if m.quality:
        names.add(m.quality)
    if (m.version or 1) > 1:  # its copies of the top files (``publish``), where written
        names |= {layout.version_copy(m.version, n, m.tag or "") for n in layout.LATEST_FILES}
    return names


def _ours_in_the_writing(name: str) -> bool:
    """True for the temporary name ``storage.temp_name`` gives a file of ours (``name``
    inside the output folder)."""
    target = layout.written_as(name)
    return target is not None and (layout.is_output_name(target) or target == layout.LOCK)


def _folders(names: Iterable[str]) -> set[str]:
    """The top folders of the names that have one."""
    return {n.split("/", 1)[0] for n in names if "/" in n}


def read_versions(output_dir: str, entries: Iterable[str] | None = None) -> tuple:
    """``((number, Manifest), ...)`` of every version published in ``output_dir``
    (``versions/KKKKK.json``), in order, as ``view.published`` lists them and
    ``view.read_version`` reads them: IncompleteOutputError naming the file when one is
    not a manifest whose every name its conversion writes, and nothing it lists may be
    read or removed."""
    return tuple((k, view.read_version(output_dir, k).manifest)
                 for k in view.published(output_dir, entries))


def under_a_file(output_dir: str) -> ConfigError:
    """The error for an output path that passes through a file."""
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


def _inside(output_dir: str, *components: str) -> str:
    """The path of ``components`` inside ``output_dir``: ConfigError when one is not a plain
    name, or when a folder on the way is a link (``storage.inside``)."""
    try:
        return storage.inside(output_dir, "/".join(components))
    except storage.UnsafePathError as e:
        raise ConfigError(str(e)) from None


def check_target(s: Survey, overwrite: bool, planned: Iterable[str],
                 run_id: str | None = None, update: bool = False) -> None:
    """Refuses a directory the run may not write, before anything is written.

    A live lock of another run is an OutputBusyError. Without ``overwrite`` a non-empty
    directory is refused. With it, only what a conversion of ours wrote may be replaced:
    a file of the user's that bears a name the run would write is refused too. ``convert``
    checks once before it takes the lock, and again, authoritatively, with the lock held.
    ``update``: the run was asked to update a folder that has no version to update.
    """
    if layout.LOCK in s.entries:
        path = storage.join(s.output_dir, layout.LOCK)
        holder = _read_holder(path)
        if holder and holder.get("run_id") != run_id and not _stale(holder, path):
            raise OutputBusyError(describe(holder, path))
    entries = [e for e in s.entries if e != layout.LOCK]
    if entries and not overwrite and not s.unfinished_only():
        shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
        if update:  # suggesting --update again would send the user round in a circle
            raise OutputExistsError(
                f"output directory {s.output_dir} holds {len(entries)} "
                f"{'entry' if len(entries) == 1 else 'entries'} ({shown}) and no version "
                f"of a conversion to update. Give the folder a conversion wrote, or an "
                f"empty or new one (the update is then a first conversion); to convert "
                f"into this one anyway, give mode='overwrite' instead (--overwrite in place "
                f"of --update), which leaves files tfrecorder did not write alone.")
        raise OutputExistsError(
            f"output directory {s.output_dir} already holds {len(entries)} entries ({shown}). "
            f"Pass mode='overwrite' (--overwrite in the CLI) to replace "
            f"tfrecorder's files there, mode='update' (--update) to publish what changed as "
            f"a new version, or give an empty directory.")
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
