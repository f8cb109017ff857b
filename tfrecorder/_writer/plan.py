"""The shard plan: how many shards each split gets and which rows go where, from
the rows' counts alone. Pure functions: no I/O, no Beam.

A shard task is one output file: its split, number and count, and its rows in a seeded,
shuffled order. Because the plan is fixed before the pipeline runs, per-shard record
counts are exact, output is byte-for-byte reproducible (on any machine: nothing here
depends on the one that runs it), and a retried shard rewrites exactly what it wrote
before.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Mapping, Sequence

from tfrecorder._folder.layout import ShardName, split_order
from tfrecorder._inputs.block import Row

MIN_SHARD_BYTES = 64 << 20
MAX_SHARD_BYTES = 1 << 30
#: Shards aim at a power of two up to this many, as TFDS does; beyond, multiples of it.
PREFERRED_MAX_SHARDS = 1024
#: Framing plus the small features each record carries besides the image.
RECORD_OVERHEAD_BYTES = 120
#: Shards a split gets at least when it has enough rows, so that as many workers can
#: write it at once (a number, not this machine's core count: the same table gives the
#: same files on a laptop, CI and Dataflow).
PARALLEL_SHARDS = 8
#: A split is "big enough" for ``PARALLEL_SHARDS`` when it has this many rows per shard;
#: below that, start-up costs more than the parallelism gains.
MIN_ROWS_PER_SHARD_FOR_PARALLELISM = 64


@dataclasses.dataclass
class ShardTask:
    """One output file and the rows that go into it, in order."""

    split: str
    number: int
    count: int
    filename: str
    rows: list[Row]


def shard_count(total_bytes: int, num_rows: int, parallel: int = PARALLEL_SHARDS) -> int:
    """How many shards a split of ``num_rows`` rows and about ``total_bytes`` gets.

    Every shard stays at most 1 GiB and, where possible, at least 64 MiB; within that
    range the count is the largest power of two up to 1024 (above 1024 shards, the
    smallest multiple of 1024 that keeps shards under 1 GiB). There are never fewer
    shards than ``parallel`` when the split has enough rows to keep that many writers
    busy, and never more shards than rows.
    """
    if num_rows <= 0:
        return 0
    total = total_bytes + num_rows * RECORD_OVERHEAD_BYTES
    least = max(1, math.ceil(total / MAX_SHARD_BYTES))
    most = max(1, total // MIN_SHARD_BYTES)
    if least > PREFERRED_MAX_SHARDS:
        n = math.ceil(least / PREFERRED_MAX_SHARDS) * PREFERRED_MAX_SHARDS
    else:
        n = least
        p = PREFERRED_MAX_SHARDS
        while p >= 1:
            if least <= p <= most:
                n = p
                break
            p //= 2
    if num_rows >= parallel * MIN_ROWS_PER_SHARD_FOR_PARALLELISM:
        n = max(n, parallel)
    return max(1, min(n, num_rows))


def permutation(n: int, seed: int, split: str):
    """The seeded order of a split's ``n`` rows: position j holds row ``permutation[j]``.

    RandomState's stream is frozen by NumPy's compatibility policy, so the order stays
    the same across NumPy releases and machines.
    """
    import numpy as np

    key = (seed * 1_000_003 + zlib.crc32(split.encode())) % (2**32)
    return np.random.RandomState(key).permutation(n)


def boundaries(num_rows: int, num_shards: int) -> list[int]:
    """End offsets of each shard when ``num_rows`` are cut into ``num_shards``."""
    return [round(num_rows * (i + 1) / num_shards) for i in range(num_shards)]


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """How one split's rows go to its shards, from its row count alone."""

    split: str
    count: int                # shards
    inverse: object           # numpy int array: row number -> position in the shuffled order
    ends: object              # numpy int array: end position of each shard


def split_plans(counts: Mapping[str, int], *, num_shards: int | Mapping[str, int] = 0,
            bytes_per_split: Mapping[str, int] | None = None,
            parallel: int = PARALLEL_SHARDS, seed: int = 0) -> list[SplitPlan]:
    """The shard plan of every split of ``counts`` (rows per split), in the order
    train, validation, test: row i of a split (in the order its rows were read) goes to
    position ``inverse[i]`` of the split's seeded order, cut into shards at ``ends``.

    ``num_shards`` 0 sizes shards automatically from ``bytes_per_split``
    (``shard_count``); a number (or a number per split) fixes the count, capped at the
    split's row count.
    """
    import numpy as np

    out = []
    for split in sorted(counts, key=split_order):
        n = counts[split]
        wanted = num_shards.get(split, 0) if isinstance(num_shards, Mapping) else num_shards
        count = (max(1, min(int(wanted), n)) if wanted else
                 shard_count((bytes_per_split or {}).get(split, 0), n, parallel))
        order = permutation(n, seed, split)
        # int32 while a split has fewer than 2**31 rows: held for every split until
        # the tasks are staged
        int_type = np.int32 if n < 2**31 else np.int64
        inverse = np.empty(n, int_type)
        inverse[order] = np.arange(n, dtype=int_type)
        del order
        out.append(SplitPlan(split, count, inverse, np.array(boundaries(n, count), np.int64)))
    return out


def shard_names(plans: Sequence[SplitPlan], name: str, gzip: bool,
                version: int = 1, tag: str = "") -> list[str]:
    """The file names of every shard of ``plans``, in order; ``version`` > 1 names an
    update's shards, with its run's ``tag`` (``NAME-<split>-vKKKKK-TAG.tfrecord-...``)."""
    return [str(ShardName(name, lay.split, i, lay.count, gzip, version, tag))
            for lay in plans for i in range(lay.count)]
