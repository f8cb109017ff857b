"""Which records of a split each of several input pipelines reads: arithmetic on counts.

Input pipeline ``i`` of ``n`` (tf.distribute's word; ``load(shard=(i, n))``) gets the
records at positions ``[total * i // n, total * (i + 1) // n)`` of the split: the parts
are disjoint, together hold every record once, and their sizes differ by at most one,
whatever the number of shard files (three files serve eight input pipelines). Without a
shuffle the positions are the records in file order, so each part is one extent
(records back to back) per file it touches, read with one seek per extent
(``extents``); with ``shuffle="global"`` they are positions in a seeded
permutation of the whole split.
"""

from __future__ import annotations

from typing import Sequence

from tfrecorder._errors import ConfigError


def check_shard(shard) -> tuple[int, int]:
    """``(number, count)`` of ``load(shard=...)`` (tf.data's ``Dataset.shard(count, index)``
    word in the message); ConfigError unless ``0 <= number < count``."""
    try:
        number, count = shard
        ok = all(isinstance(x, int) and not isinstance(x, bool) for x in (number, count))
    except (TypeError, ValueError):
        ok = False
    if not ok or count < 1 or not 0 <= number < count:
        raise ConfigError(f"shard={shard!r}; give (index, count) with 0 <= index < count, "
                          f"e.g. shard=(0, 8) for the first of 8 input pipelines")
    return number, count


def span(total: int, number: int, count: int) -> tuple[int, int]:
    """``[start, end)``: the positions input pipeline ``number`` of ``count`` reads of
    ``total``."""
    return total * number // count, total * (number + 1) // count


def extents(counts: Sequence[int], start: int, end: int) -> list[tuple[int, int, int]]:
    """``(file, first, n)`` for each file holding records of positions ``[start, end)`` of
    the files' concatenation (``counts`` records each): ``n`` records from record
    ``first`` of file number ``file``."""
    out, at = [], 0
    for file, n in enumerate(counts):
        lo, hi = max(start, at), min(end, at + n)
        if lo < hi:
            out.append((file, lo - at, hi - lo))
        at += n
    return out


def pieces(extent_list: list[tuple[int, int, int]], most: int,
           least: int) -> list[tuple[int, int, int]]:
    """``extent_list`` cut into up to ``most`` extents of at least ``least`` records each, so
    that an input pipeline whose part lies in one or two files still reads several places at
    once. The records and their order within each file are unchanged."""
    total = sum(n for _, _, n in extent_list)
    want = max(len(extent_list), min(most, total // max(1, least)))
    if want <= len(extent_list):
        return list(extent_list)
    out = []
    for file, first, n in extent_list:
        k = max(1, round(want * n / total))
        for j in range(k):
            lo, hi = first + n * j // k, first + n * (j + 1) // k
            if hi > lo:
                out.append((file, lo, hi - lo))
    return out
