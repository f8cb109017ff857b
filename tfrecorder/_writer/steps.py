"""The conversion's steps as plain functions, and a run of them in this process.

``pipeline`` wraps each step in a Beam transform; ``run_here`` calls the same functions
in order, for an update small enough to run in this process, where starting Beam would
cost more than the update itself (docs/versions.md, "What an update costs"). No Beam
here: what a step computes does not depend on who calls it.

A step's element is what Beam passes between the transforms: a shard number, then one
``(ShardStats, [Quarantined])`` per shard, then the records keyed by what may match them,
then ``("shard" | "exact" | "near", ...)`` gathered under one key for the last step.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterable

from tfrecorder._folder import ledger
from tfrecorder._writer import kept as kept_shards
from tfrecorder._writer import publishing
from tfrecorder._writer import progress, run_metadata, shard, staging
from tfrecorder._report import matching


def write_shard(number: int, task_dir: str, settings: shard.WriteSettings,
                progress_dir: str | None = None, rows_read: dict | None = None):
    """Shard number ``number`` -> its ``(ShardStats, [Quarantined])``: the staged task
    written into its shard, or, for a number past the tasks, a shard an update keeps,
    whose records' digests the data report compares the new ones with (from its rows
    file, or its entries in ``rows_read`` where the update read them already)."""
    tasks = _tasks(task_dir)
    if number >= len(tasks):
        split, number, kept = _kept(task_dir)[number - len(tasks)]
        s = settings
        return kept_shards.kept_look(s.run.output_dir, split, number, kept, s.label_names,
                                         s.near_duplicates, pending=s.run.folder,
                                         entries=(rows_read or {}).get(kept.rows),
                                         distance=s.near_distance)
    task = staging.read_task(tasks[number])
    return shard.write(task, settings, progress.reporter(progress_dir, task.filename))


@functools.lru_cache(maxsize=4)
def _kept(task_dir: str) -> list:
    return staging.read_kept(task_dir)


@functools.lru_cache(maxsize=4)
def _tasks(task_dir: str) -> tuple[str, ...]:
    # Listed once per worker process, not once per shard: on an object store a listing
    # is a request per thousand names.
    return tuple(staging.list_tasks(task_dir))


def match_keys(written, buckets: int = 1):
    """A shard's element keyed by the shard, then its records keyed by what may match
    them (``matching.keyed``, in ``buckets`` groups of digests); the records leave the
    shard's element."""
    stats, bad = written
    look = stats.look
    if look is not None:
        # only the ends of its sizes can be odd: the rest stay here (``Looker.extremes``)
        stats = dataclasses.replace(stats, look=dataclasses.replace(
            look, seen=[], sizes=look.extremes()))
    yield ("s", stats.split, stats.number), (stats, bad)
    if look is not None:
        yield from matching.keyed(look.seen, look.near, buckets, look.distance)


def matches(group):
    """``(key, members)`` of one key -> ``("shard", written)`` per shard, or the
    matches that key's records make (``matching.found``)."""
    key, members = group
    if key[0] == "s":
        for written in members:
            yield ("shard", written)
    else:
        yield from matching.found(key, members)


def matched(keyed: Iterable) -> list:
    """``match_keys``' elements of every shard -> ``matches``' elements, grouped here in
    memory (``run_here``): what the pipeline's grouping between the two steps does."""
    groups: dict = {}
    for key, value in keyed:
        groups.setdefault(key, []).append(value)
    return [m for group in groups.items() for m in matches(group)]


def finish(elements, run: ledger.RunFolder, spec: run_metadata.DatasetSpec) -> str:
    """Every shard's and every match's element -> the run published
    (``publishing.finish``); its output folder."""
    written, exact, near = [], [], []
    for e in elements:
        if e[0] == "shard":
            written.append(e[1])
        elif e[0] == "exact":
            exact.append(e[1:])
        else:
            near.append(e[1:])
    publishing.finish(run, spec, [s for s, _ in written],
                      [q for _, bad in written for q in bad], matches=(exact, near))
    return run.output_dir


def run_here(task_dir: str, shards: int, settings: shard.WriteSettings,
             spec: run_metadata.DatasetSpec, progress_dir: str | None = None,
             kept: int = 0, rows_read: dict | None = None) -> str:
    """The steps of ``pipeline.build`` run in this process, in order: every shard
    written (its images prepared in ``settings.work_threads`` threads, as on Beam's
    one in-process worker), the records grouped by key, the run published.
    ``rows_read``: the kept shards' rows files as the update read them."""
    buckets = matching.exact_buckets(spec.rows_in)
    found = matched(kv for i in range(shards + kept) for kv in match_keys(
        write_shard(i, task_dir, settings, progress_dir, rows_read), buckets))
    return finish(found, settings.run, spec)
