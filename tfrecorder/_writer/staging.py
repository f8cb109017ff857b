"""What reaches the workers: the shard tasks.

Shard tasks are staged (``stage``) in a folder the workers can read: the rows in block
files (``SPLIT.part-KKKKK``: one per spill block), one task file per shard listing its byte ranges in them. The job graph holds only
the folder, so it does not grow with the table. No Beam here: the pipeline only calls
``list_tasks`` and ``read_task``.

"""

from __future__ import annotations

import os
import pickle
import stat
from typing import Sequence

from tfrecorder import _storage as storage
from tfrecorder._folder import layout
from tfrecorder._errors import ConfigError
from tfrecorder._writer.plan import ShardTask, SplitPlan
from tfrecorder._inputs.block import Block


def stage(spilled, plans: Sequence[SplitPlan], folder: str, *, name: str,
          gzip: bool, version: int = 1, tag: str = "") -> list[str]:
    """Writes the task files of every shard of ``plans`` under ``folder`` by streaming
    ``spilled`` (a ``spill.Spilled``) once; returns the shard names, in plan order.

    Per spill block, one block file holds that block's rows grouped by shard; each
    shard's task file lists its byte ranges in the block files.
    """
    return _stage(spilled, plans, folder, name=name, gzip=gzip, version=version, tag=tag)


def _stage(spilled, plans: Sequence[SplitPlan], folder: str, *, name: str,
           gzip: bool, version: int = 1, tag: str = "") -> list[str]:
    import numpy as np

    storage.makedirs(folder, private=True)
    shard_names = []
    for lay in plans:
        refs: list[list] = [[] for _ in range(lay.count)]
        starts = np.concatenate([[0], lay.ends[:-1]])
        offset = 0
        for k, block in enumerate(spilled.blocks(lay.split)):
            positions = lay.inverse[offset:offset + len(block)]
            shards = np.searchsorted(lay.ends, positions, side="right")
            offset += len(block)
            order = np.argsort(shards, kind="stable")
            cuts = np.searchsorted(shards[order], np.arange(lay.count + 1))
            block_file = layout.spill_block(lay.split, k)
            data, at = [], 0
            for shard in range(lay.count):
                picked = order[cuts[shard]:cuts[shard + 1]]
                if not len(picked):
                    continue
                # (positions within the shard, rows): the worker sorts rows by position
                blob = pickle.dumps(((positions[picked] - starts[shard]).tolist(),
                                     block.take(picked.tolist()).as_tuple()),
                                    protocol=pickle.HIGHEST_PROTOCOL)
                refs[shard].append((block_file, at, len(blob)))
                data.append(blob)
                at += len(blob)
            storage.write_bytes(storage.join(folder, block_file), b"".join(data), private=True)
        for number in range(lay.count):
            filename = str(layout.ShardName(name, lay.split, number, lay.count, gzip, version,
                                            tag))
            task = (lay.split, number, lay.count, filename, refs[number])
            storage.write_bytes(task_path(folder, filename),
                                pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL),
                                private=True)
            shard_names.append(filename)
    return shard_names


def task_path(folder: str, filename: str) -> str:
    """Where the task of shard ``filename`` is staged in ``folder``."""
    return storage.join(folder, f"{filename}{layout.TASK_SUFFIX}")


def read_task(path: str) -> ShardTask:
    """The task staged at ``path`` by ``stage``, its rows in the shard's seeded order.

    Task and block files are pickles, which run code when loaded, so a local one is
    loaded only when it is this user's own and nobody else can write it (as ``stage``
    makes them): a file swapped in by another user of a shared folder is refused.
    """
    _check_private(path)
    split, number, count, filename, refs = pickle.loads(storage.read_bytes(path))
    folder = path[:-len(storage.basename(path))]
    placed = []
    for block_file, offset, length in refs:
        _check_private(folder + block_file)
        positions, columns = pickle.loads(storage.read_range(folder + block_file, offset,
                                                             length))
        placed.extend(zip(positions, Block.from_tuple(columns).rows(split)))
    placed.sort(key=lambda pr: pr[0])  # positions in the shard's seeded order
    return ShardTask(split, number, count, filename, [row for _, row in placed])


def _check_private(path: str) -> None:
    if storage.is_remote(path):
        return  # a bucket's access is its IAM policy's (docs/reliability.md)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise ConfigError(
            f"{path} is not a private file of this user (owner {st.st_uid}, mode "
            f"{stat.filemode(st.st_mode)}); a staged task must be written by the run that "
            f"reads it. Another user may have replaced it: run the conversion again")


#: The shards an update keeps, read by the pipeline for the data report (JSON).
KEPT = "kept.json"


def stage_kept(folder: str, kept: dict) -> int:
    """Writes the list of the shards an update keeps (``{split: [ShardInfo]}``) for
    the workers; returns how many there are. Each is numbered before the update's own
    shards of its split (-k .. -1), so that the report's positions follow the version's
    file order."""
    import dataclasses
    import json

    listed = []
    for split, shards in kept.items():
        for j, shard in enumerate(shards):
            listed.append([split, j - len(shards), dataclasses.asdict(shard)])
    storage.write_bytes(storage.join(folder, KEPT), json.dumps(listed).encode(), private=True)
    return len(listed)


def read_kept(folder: str) -> list:
    """``[(split, number, ShardInfo)]`` that ``stage_kept`` wrote; [] when none."""
    import json

    from tfrecorder._folder.manifest import ShardInfo

    try:
        listed = json.loads(storage.read_bytes(storage.join(folder, KEPT)))
    except FileNotFoundError:
        return []
    return [(split, number, ShardInfo(**info)) for split, number, info in listed]


def list_tasks(folder: str) -> list[str]:
    """The task files staged in ``folder``, in name order."""
    return [storage.join(folder, n) for n in storage.listdir(folder)
            if n.endswith(layout.TASK_SUFFIX)]
