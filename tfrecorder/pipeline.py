"""The Beam pipeline: shard task files -> shards -> metadata. It builds, never runs.

Every step only wires code that lives elsewhere: ``staging`` lists and reads the staged
shard tasks, ``shard.write`` writes a shard, ``output.finish`` publishes the run. The row table is never inlined in the job graph: the graph holds only the folder
of the staged tasks.
"""

from __future__ import annotations

import contextlib

import apache_beam as beam
import apache_beam.pipeline as beam_pipeline

from tfrecorder import metadata, output, progress, shard, staging

STATS = "stats"
QUARANTINED = "quarantined"


class _WriteShardFn(beam.DoFn):
    def __init__(self, settings: shard.WriteSettings, progress_dir: str | None = None):
        self._settings = settings
        self._progress_dir = progress_dir

    def process(self, task_path: str):
        task = staging.read_task(task_path)
        stats, bad = shard.write(task, self._settings,
                                 progress.reporter(self._progress_dir, task.filename))
        yield beam.pvalue.TaggedOutput(STATS, stats)
        for q in bad:
            yield beam.pvalue.TaggedOutput(QUARANTINED, q)


class WriteShards(beam.PTransform):
    """Task file paths -> one shard file each; outputs ShardStats and Quarantined rows."""

    def __init__(self, settings: shard.WriteSettings, progress_dir: str | None = None):
        super().__init__()
        self._fn = _WriteShardFn(settings, progress_dir)

    def expand(self, task_paths):
        return (
            task_paths
            # str: a task file path; spread them so every worker gets shards
            | "Spread" >> beam.Reshuffle()
            # -> tagged ShardStats (one per shard) and Quarantined (one per bad row)
            | "Write" >> beam.ParDo(self._fn).with_outputs(STATS, QUARANTINED)
        )


def _finish(_, output_dir, spec, stats, quarantined):
    output.finish(output_dir, spec, stats, quarantined)
    return output_dir


class WriteMetadata(beam.PTransform):
    """After every shard: the shards moved into place, errors file, labels, TFDS
    metadata, and the manifest last (``output.finish``)."""

    def __init__(self, output_dir: str, spec: metadata.DatasetSpec):
        super().__init__()
        self._output_dir = output_dir
        self._spec = spec

    def expand(self, written):
        # written: (PCollection of ShardStats, PCollection of Quarantined)
        stats, bad = (beam.pvalue.AsList(pc) for pc in written)
        return (
            written[0].pipeline
            | "Once" >> beam.Create([None])
            # None -> output_dir, once every shard's stats and bad rows are in
            | "Finish" >> beam.Map(_finish, self._output_dir, self._spec, stats, bad)
        )


def build(p: beam.Pipeline, task_dir: str, settings: shard.WriteSettings,
          spec: metadata.DatasetSpec, progress_dir: str | None = None):
    """Adds the conversion to pipeline ``p``; returns the PCollection of the final step.

    The job graph holds only ``task_dir``, never the tasks or their rows, so its size
    is the same for ten rows or ten million.
    """
    with _labels_as_given():
        return _build(p, task_dir, settings, spec, progress_dir)


@contextlib.contextmanager
def _labels_as_given():
    """Applies our steps without Beam's IPython label hook.

    Inside IPython, Beam prefixes each top-level step's label with the cell number, and
    to do that imports its interactive environment, which imports ``apache_beam.dataframe``
    -- a module that fails to import with pandas 3 (it wraps ``DataFrame`` methods that
    pandas 3 removed). Our labels need no cell numbers, so for the steps we apply the hook
    is a no-op, and pandas 3 works in notebooks too.
    """
    hook = beam_pipeline.alter_label_if_ipython
    beam_pipeline.alter_label_if_ipython = lambda transform, pvalueish: None
    try:
        yield
    finally:
        beam_pipeline.alter_label_if_ipython = hook


def _build(p, task_dir, settings, spec, progress_dir):
    written = (
        p
        | "TaskFolder" >> beam.Create([task_dir])
        # str: the folder -> str: one task file path per shard
        | "ListShards" >> beam.FlatMap(staging.list_tasks)
        | "WriteShards" >> WriteShards(settings, progress_dir)
    )
    return (written[STATS], written[QUARANTINED]) | "WriteMetadata" >> WriteMetadata(
        settings.output_dir, spec)
