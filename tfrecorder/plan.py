"""Validated rows -> shard tasks. Pure functions: no I/O, no Beam.

A shard task is one output file: its split, index and count, and its rows in a seeded,
shuffled order. Because the plan is fixed before the pipeline runs, per-shard record
counts are exact, output is byte-for-byte reproducible, and a retried shard rewrites
exactly what it wrote before.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Any, Mapping, Sequence

from tfrecorder.layout import ShardName, split_order

MIN_SHARD_BYTES = 64 << 20
MAX_SHARD_BYTES = 1 << 30
#: Shards aim at a power of two up to this many, as TFDS does; beyond, multiples of it.
PREFERRED_MAX_SHARDS = 1024
#: Framing plus the small features each record carries besides the image.
RECORD_OVERHEAD_BYTES = 120
#: A split is "big enough" to be spread over every worker when it has this many rows
#: per worker; below that, start-up costs more than the parallelism gains.
MIN_ROWS_PER_SHARD_FOR_PARALLELISM = 64


@dataclasses.dataclass(slots=True)
class Row:
    """One validated row: where it goes and what it holds besides the image."""

    row: Any                       # CSV line number or DataFrame index label
    split: str
    image_uri: str | None          # resolved path, or None for tables without images
    features: dict[str, bytes]     # encoded non-image features
    values: tuple                  # the row's original values, for the errors file
    labels: tuple[int, ...] = ()   # label ids, counted per split in the manifest
    merged: tuple = ()             # (row, values) of other input rows merged into this record


@dataclasses.dataclass
class ShardTask:
    """One output file and the rows that go into it, in order."""

    split: str
    index: int
    count: int
    filename: str
    rows: list[Row]


def shard_count(total_bytes: int, num_rows: int, workers: int = 1) -> int:
    """How many shards a split of ``num_rows`` rows and about ``total_bytes`` gets.

    Every shard stays at most 1 GiB and, where possible, at least 64 MiB; within that
    range the count is the largest power of two up to 1024 (above 1024 shards, the
    smallest multiple of 1024 that keeps shards under 1 GiB). There are never fewer
    shards than ``workers`` when the split has enough rows to keep them all busy, and
    never more shards than rows.
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
    if num_rows >= workers * MIN_ROWS_PER_SHARD_FOR_PARALLELISM:
        n = max(n, workers)
    return max(1, min(n, num_rows))


def permutation(n: int, seed: int, split: str):
    """The seeded order of a split's ``n`` rows: position j holds row ``permutation[j]``.

    RandomState's stream is frozen by NumPy's compatibility policy, so the order stays
    the same across NumPy versions and machines.
    """
    import numpy as np

    key = (seed * 1_000_003 + zlib.crc32(split.encode())) % (2**32)
    return np.random.RandomState(key).permutation(n)


def shuffled(rows: Sequence[Row], seed: int, split: str) -> list[Row]:
    """``rows`` in a seeded random order; the same rows and seed give the same order."""
    return [rows[i] for i in permutation(len(rows), seed, split)]


def boundaries(num_rows: int, num_shards: int) -> list[int]:
    """End offsets of each shard when ``num_rows`` are cut into ``num_shards``."""
    return [round(num_rows * (i + 1) / num_shards) for i in range(num_shards)]


def plan(
    rows: Sequence[Row],
    *,
    name: str,
    gzip: bool = False,
    num_shards: int | Mapping[str, int] = 0,
    bytes_per_split: Mapping[str, int] | None = None,
    workers: int = 1,
    seed: int = 0,
) -> list[ShardTask]:
    """Shard tasks for ``rows``, split by split in the order train, validation, test.

    ``num_shards`` 0 sizes shards automatically from ``bytes_per_split``; a number
    (or a number per split) fixes the count, capped at the split's row count.
    """
    by_split: dict[str, list[Row]] = {}
    for row in rows:
        by_split.setdefault(row.split, []).append(row)
    tasks = []
    for split in sorted(by_split, key=split_order):
        split_rows = shuffled(by_split[split], seed, split)
        n = len(split_rows)
        wanted = num_shards.get(split, 0) if isinstance(num_shards, Mapping) else num_shards
        if wanted:
            count = max(1, min(int(wanted), n))
        else:
            count = shard_count((bytes_per_split or {}).get(split, 0), n, workers)
        start = 0
        for index, end in enumerate(boundaries(n, count)):
            filename = str(ShardName(name, split, index, count, gzip))
            tasks.append(ShardTask(split, index, count, filename, split_rows[start:end]))
            start = end
    return tasks

