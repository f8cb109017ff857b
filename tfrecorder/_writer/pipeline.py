"""The Beam pipeline: shard tasks -> shards -> matches -> metadata. It builds, never runs.

Every step only wires code that lives elsewhere: ``steps`` holds what each step does
(a staged task written by ``shard.write``, its records keyed and matched by ``matching``
for the data report, the run published by ``publishing.finish``), and runs the same steps
without Beam for an update small enough to run in this process.

The pipeline uses only what every Beam runner supports, so that any of them runs it the
same way: one straight chain of steps, each with one input and one output, no tagged
outputs and no side inputs (Beam's Dask runner, for one, mixes the tagged outputs of a
step together). Each shard step emits one element, its statistics with its quarantined
rows and its records' digests; one grouping by digest (and by bands of the perceptual
hash) finds the matching records, and a group on one key brings the shards' statistics
and the matches to the last step.

The row table is never inlined in the job graph: the graph holds the folder of the staged
tasks and one number per shard, whatever the number of rows.
"""

from __future__ import annotations

import contextlib
import functools

import apache_beam as beam
import apache_beam.pipeline as beam_pipeline

from tfrecorder._folder import ledger
from tfrecorder._report import matching
from tfrecorder._writer import run_metadata, shard, steps


class _WriteShardFn(beam.DoFn):
    def __init__(self, task_dir: str, settings: shard.WriteSettings,
                 progress_dir: str | None = None):
        self._task_dir = task_dir
        self._settings = settings
        self._progress_dir = progress_dir

    def process(self, number: int):
        # One element per shard: (ShardStats, [Quarantined, ...])
        yield steps.write_shard(number, self._task_dir, self._settings, self._progress_dir)


class WriteShards(beam.PTransform):
    """Shard numbers (positions in the staged tasks' name order) -> one shard file each;
    emits ``(ShardStats, [Quarantined])`` per shard. ``spread=False`` leaves out the
    Reshuffle, for a pipeline that runs on one worker."""

    def __init__(self, task_dir: str, settings: shard.WriteSettings,
                 progress_dir: str | None = None, spread: bool = True):
        super().__init__()
        self._fn = _WriteShardFn(task_dir, settings, progress_dir)
        self._spread = spread

    def expand(self, numbers):
        if self._spread:
            # int: a shard number; spread them so every worker gets shards
            numbers = numbers | "Spread" >> beam.Reshuffle()
        # -> (ShardStats, [Quarantined]) of the written shard
        return numbers | "Write" >> beam.ParDo(self._fn)


def _one_worker(p: beam.Pipeline) -> bool:
    """True when ``p`` runs in this process on one worker: Beam's FnApiRunner with one
    DirectRunner worker, as ``convert`` runs small tables. A Reshuffle has nothing to
    spread the shards over there, and costs a shuffle step (0.1 s a run)."""
    from apache_beam.options.pipeline_options import DirectOptions
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    return (isinstance(p.runner, fn_runner.FnApiRunner)
            and p.options.view_as(DirectOptions).direct_num_workers == 1)


class FindMatches(beam.PTransform):
    """Every shard's ``(ShardStats, [Quarantined])`` -> the same, one per shard, as
    ``("shard", ...)``, and the matches between records: ``("exact", ...)`` per digest
    held by several records, ``("near", ...)`` per band with near pairs. ``records``:
    how many the shards hold, which sets how many groups the digests are put in."""

    def __init__(self, records: int):
        super().__init__()
        self._buckets = matching.exact_buckets(records)

    def expand(self, written):
        return (
            written
            # -> (("s", split, number), shard), (("x", group), the shard's digests and
            # positions in that group of digests, as bytes), (("n", ...), record) per band
            | "Key" >> beam.FlatMap(steps.match_keys, self._buckets)
            # -> (key, [shard] or [the records that key brings together])
            | "Group" >> beam.GroupByKey()
            # -> ("shard", shard), ("exact", ...), ("near", ...)
            | "Match" >> beam.FlatMap(steps.matches)
        )


def _one_key(element):
    return 0, element


def _finish(keyed, run: ledger.RunFolder, spec: run_metadata.DatasetSpec) -> str:
    _, elements = keyed
    return steps.finish(elements, run, spec)


class WriteMetadata(beam.PTransform):
    """After every shard and match: the shards moved into place, errors file, labels,
    TFDS metadata, the data report, and the manifest last (``publishing.finish``)."""

    def __init__(self, run: ledger.RunFolder, spec: run_metadata.DatasetSpec):
        super().__init__()
        self._run = run
        self._spec = spec

    def expand(self, written):
        return (
            written
            # ("shard" | "exact" | "near", ...) -> (0, the same): one key for all
            | "OneKey" >> beam.Map(_one_key)
            # -> (0, every shard and match), once all are written
            | "Gather" >> beam.GroupByKey()
            # -> output_dir, published
            | "Finish" >> beam.Map(_finish, self._run, self._spec)
        )


def build(p: beam.Pipeline, task_dir: str, shards: int, settings: shard.WriteSettings,
          spec: run_metadata.DatasetSpec, progress_dir: str | None = None, kept: int = 0):
    """Adds the conversion of the ``shards`` shard tasks staged in ``task_dir`` to
    pipeline ``p``; returns the PCollection of the final step. ``kept``: the shards an
    update keeps (``staging.stage_kept``), whose records the data report compares the
    new ones with; numbered after the new shards.

    The job graph holds ``task_dir`` and the numbers of the shards, never the tasks or
    their rows, so its size is the same for ten rows or ten million in as many shards.
    Each shard is an element of its own from the first step: runners that spread work
    by the first step's elements (Dask) spread the shards; a Reshuffle spreads them
    everywhere else, but on one worker in this process (``_one_worker``).
    """
    if shards < 1:
        raise ValueError("a conversion writes at least one shard")
    with _labels_as_given():
        return (
            p
            # int: one shard number per element (no Reshuffle of Create's own: the
            # next step spreads them, and the graph stays the same for 1 or n shards)
            | "Shards" >> beam.Create(range(shards + kept), reshuffle=False)
            | "WriteShards" >> WriteShards(task_dir, settings, progress_dir,
                                           spread=not _one_worker(p))
            | "FindMatches" >> FindMatches(spec.rows_in)
            | "WriteMetadata" >> WriteMetadata(settings.run, spec)
        )


def _labels_as_given():
    """Where Beam's IPython label hook would fail: our steps applied without it; anywhere
    else nothing is changed.

    Inside IPython, Beam prefixes each top-level step's label with the cell number, and
    to do that imports its interactive environment, which imports ``apache_beam.dataframe``
    -- a module that fails to import with pandas 3 (it wraps ``DataFrame`` methods that
    pandas 3 removed). Only there, where Beam could not build any pipeline, is the hook
    set aside while our steps are applied (our labels need no cell numbers), so that
    pandas 3 works in notebooks too. Outside IPython the hook does nothing, and a pandas
    that Beam's interactive environment imports with keeps Beam's own labels.
    """
    return _hook_set_aside() if _hook_would_fail() else contextlib.nullcontext()


def _hook_would_fail() -> bool:
    """In IPython, where Beam's interactive environment cannot be imported."""
    from apache_beam.utils.interactive_utils import is_in_ipython

    return is_in_ipython() and not _beams_notebook_support_imports()


@functools.cache
def _beams_notebook_support_imports() -> bool:
    """Asked once a process: a failed import is tried again at each attempt, and the
    answer does not change."""
    try:
        from apache_beam.runners.interactive import interactive_environment  # noqa: F401
    except Exception:  # pandas 3's AttributeError, or any other: Beam's hook would raise it
        return False
    return True


@contextlib.contextmanager
def _hook_set_aside():
    hook = beam_pipeline.alter_label_if_ipython
    beam_pipeline.alter_label_if_ipython = lambda transform, pvalueish: None
    try:
        yield
    finally:
        beam_pipeline.alter_label_if_ipython = hook
