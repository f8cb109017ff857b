"""Removing files of ours from an output directory, and only those.

What unfinished runs left (the files their ledgers list, half-written temporary files,
a killed run's lock in the making, their own folders), the files that only removed
versions list, and the folders of ours left empty. Each removal checks that the file is
the one a conversion wrote: a file of the user's under a name of ours stays. Its own
module because a run before it writes (``clear_leftovers``), publishing and ``vacuum``
remove by the same rules.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Iterable

from tfrecorder import _storage as storage
from tfrecorder._folder import index, layout
from tfrecorder._folder.lock import _process_gone, _read_holder
from tfrecorder._folder.survey import Survey, _inside, _ours_in_the_writing

log = logging.getLogger(__name__)


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
        sub = storage.join(folder, layout.INDEX_DIR)
        if storage.isdir(sub) and not storage.is_link(sub) and not storage.listdir(sub):
            storage.remove(sub)
        if storage.isdir(folder) and not storage.is_link(folder) and not storage.listdir(folder):
            storage.remove(folder)
    if not storage.listdir(versions):
        storage.remove(versions)


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
