"""A run, from what was given to a published version: the arguments checked, the table
read, the files planned, the folder locked, the run's folder and settings, the rows
over budget stopped, the tasks staged, and the run handed to its runner.

A conversion (``_convert``) and an update (``_versions.update``) are two stories over
these same steps: the one creates a folder's first version, the other decides the
version it updates and writes only what changed. Every run ends the one way, through
``execute``: its runner runs the steps (``steps``, wrapped by ``pipeline`` on Beam),
whose last one publishes (``publishing.finish``). Its own module because both stories
need every step and neither may import the other.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os

from tfrecorder import _storage as storage
from tfrecorder._folder import garden, index, layout, ledger, removal, rows
from tfrecorder._folder import split_names, survey
from tfrecorder._folder.lock import DATAFLOW_LOCK_TTL, LOCK_TTL, Lock, acquire
from tfrecorder._inputs import arguments, sources, spill
from tfrecorder._inputs.labels import label_feature
from tfrecorder._errors import ConfigError
from tfrecorder._writer import cluster, dataflow, direct, image, orientation, plan, publishing
from tfrecorder._writer import runners, shard, staging
from tfrecorder._writer import run_metadata as metadata
from tfrecorder._writer.result import ConversionResult


@dataclasses.dataclass
class Given:
    """What the call gave, checked before the table is read: the options, the schema,
    the output folder, the label vocabulary; ``local_uris``, the first images a Dataflow
    run could not read (found as the table is read)."""

    opts: object
    schema: object
    output_dir: str
    vocabulary: list | None
    local_uris: list = dataclasses.field(default_factory=list)

    def read(self, source, header, names, *, vocabulary=None, extend: bool = False,
             stored=None, look: bool | None = None) -> spill.Spilled:
        """The table, read, checked and spilled to local files (every problem at once),
        then what only the read table can show checked (``check_read``). An update
        gives the ``vocabulary`` and ``stored`` splits of the version it updates."""
        opts = self.opts
        self.schema = sources.schema_of(source, self.schema, header, names)
        table = spill.read(source, self.schema, header, names,
                           label_vocabulary=self.vocabulary if vocabulary is None else vocabulary,
                           split_fractions=opts.split_fractions,
                           per_chunk=self._local_images if _cloud(opts) else None,
                           multi_label=opts.multi_label, images_dir=opts.images_dir,
                           extend_vocabulary=extend, stored_splits=stored,
                           look=looks(opts) if look is None else look)
        try:
            check_read(opts, table, self.output_dir, self.local_uris)
        except BaseException:
            table.remove()
            raise
        return table

    def _local_images(self, row_ids, uris):  # a Dataflow worker cannot read this machine
        if not storage.all_on_gcs(uris):
            self.local_uris.extend((r, u) for r, u in zip(row_ids, uris)
                                   if u is not None and not u.startswith("gs://"))
            del self.local_uris[5:]


def _cloud(opts) -> bool:
    return opts.runner == "DataflowRunner"


def check_given(opts, schema, output_dir) -> Given:
    """The checks of what was given: none reads the table or writes anything. A runner
    that cannot start fails now, in one line."""
    cluster.check(opts)
    schema = arguments.as_schema(schema)
    output_dir = arguments.output_path(output_dir)
    vocabulary = arguments.vocabulary(opts.label_vocabulary)
    named = f"name={arguments.shortened(opts.name)!r} ({len(opts.name)} characters)"
    longest = layout.ShardName(opts.name, max(split_names.SPLITS, key=len), 0, 1,
                               opts.compression == "gzip")
    arguments.check_file_names([str(longest)], [], named)
    if _cloud(opts):
        dataflow.check_dataflow(opts, output_dir, [])
    return Given(opts, schema, output_dir, vocabulary)


def check_read(opts, table: spill.Spilled, output_dir: str, local_uris) -> None:
    """What can be checked only once the table is read: ``key`` is one of its columns;
    on Dataflow, every image is on gs:// (``local_uris``: the first that are not)."""
    if opts.key != rows.DEFAULT_KEY and opts.key not in table.columns:
        raise ConfigError(
            f"key={opts.key!r} is not a column of the table as read; give one of "
            f"{list(table.columns)}, or, for a column of the file that the schema "
            f"leaves out, add it to the schema (schema=, CLI --schema)")
    if _cloud(opts):
        dataflow.check_dataflow(opts, output_dir, local_uris)


@dataclasses.dataclass(frozen=True)
class Planned:
    """What a run writes: its shard plans, their shard names, every file it writes, and
    what it declares (a dead run's ledger may name its files where the folder holds no
    manifest yet)."""

    plans: list
    shards: list
    files: list
    declared: layout.Declared


def planned(opts, table: spill.Spilled, version: int = 1, also: tuple = (),
            tag: str = "") -> Planned:
    """The plan of writing ``table`` as version ``version`` (a conversion's is 1): shards
    per split from the row counts (and a sample's bytes), their names, checked for
    length, and every file the run writes; ``also``: the files an update writes besides
    (its live index files); ``tag``: an update's run tag, in its names."""
    gzip = opts.compression == "gzip"
    plans = plan.split_plans(table.counts, num_shards=opts.num_shards,
                             bytes_per_split=table.bytes_per_split(),
                             parallel=runners.parallel_shards(opts), seed=opts.seed)
    shards = plan.shard_names(plans, opts.name, gzip, version, tag)
    labels_files = [layout.labels_file(k) for k in table.vocabularies]
    named = f"name={arguments.shortened(opts.name)!r} ({len(opts.name)} characters)"
    arguments.check_file_names(shards, [], named)
    arguments.check_file_names([], labels_files, "a label column's name")
    indexes = [index.name(f) for f in shards if opts.write_index and not gzip]
    # A later version copies the folder's latest files into versions/.
    copies = ([layout.version_copy(version, n, tag) for n in layout.LATEST_FILES]
              if version > 1 else [])
    files = [*shards, *indexes, *map(layout.rows_file, shards), *also, *labels_files,
             layout.version_manifest(version), *copies, layout.QUALITY,
             layout.MANIFEST, layout.ERRORS, layout.DATASET_INFO, layout.FEATURES]
    declared = layout.Declared(opts.name, frozenset(p.split for p in plans),
                               frozenset(table.vocabularies))
    return Planned(plans, shards, files, declared)


def lock(output_dir: str, opts) -> Lock:
    """Creates the output folder and takes its lock, for a ``with`` block."""
    arguments.makedirs(output_dir)
    run_id = ledger.new_run_id()
    ttl = DATAFLOW_LOCK_TTL if _cloud(opts) else LOCK_TTL
    try:
        # Creating the lock is the first write: it shows a folder we cannot write to
        # where permission bits do not (a read-only mount, an ACL).
        # Any runner but the DirectRunner runs the job elsewhere, which may go on
        # without this process.
        return acquire(output_dir, run_id, opts.runner, ttl,
                       detached=opts.runner != "DirectRunner")
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        why = "a read-only file system" if e.errno == errno.EROFS else "no permission"
        raise arguments.not_writable(output_dir, why) from None


def create(opts, held: Lock, before: survey.Survey, table: spill.Spilled, planned: Planned,
           schema, source, log: logging.Logger, in_process_max: int | None = None):
    """A folder's first version (or, with ``overwrite``, a new first version in place
    of what it holds) written from ``table`` and published, in ``held``'s ``with``
    block; ``before``: the folder surveyed with the lock held. The table is removed
    once its rows are staged."""
    output_dir = before.output_dir
    run_id = held.holder["run_id"]
    survey.check_target(before, opts.overwrite, planned.files, run_id, update=opts.updates)
    removal.clear_leftovers(before, run_id)
    run = prepare(opts, output_dir, run_id, before, table, planned.shards, schema, source,
                  in_process_max=in_process_max)
    ledger.write_ledger(run.settings.run.folder, planned.files)
    stop_over_budget(run, table)
    # The rows go to the staged task files; the spill is removed before the run.
    staging.stage(table, planned.plans, run.task_dir, name=opts.name,
                  gzip=opts.compression == "gzip")
    table.remove()
    return execute(run, held, log)


def execute(run: runners.Run, held: Lock, log: logging.Logger):
    """Runs the staged ``run`` in ``held``'s ``with`` block, the one way every run ends:
    its steps write the shards and the last one publishes (``publishing.finish``). On
    Dataflow the submitted job takes the lock over (``dataflow.run_dataflow``); a run
    from this process releases it in its last step, and the block again, however the
    run ends. ``log``: the story's logger, which says what a local run writes."""
    opts = run.opts
    if _cloud(opts) and not run.without_beam:
        return dataflow.run_dataflow(run, held)
    if run.shards:
        log.info("converting %d records into %d shards in %s", run.records, len(run.shards),
                 run.output_dir)
    else:
        log.info("retiring records in %s: no shard to write", run.output_dir)
    try:
        job_id = direct.run_direct(run)
    except BaseException:
        runners.after_failure(run)
        raise
    return ConversionResult.from_output(run.output_dir, opts.runner, job_id)


def looks(opts) -> bool:
    """Whether the image files are looked for before the run: always, but in a Dataflow
    dry run (``--dry_run``), which only builds the job and reads no image."""
    return (opts.flag_value("dry_run") or "false").lower() in ("false", "0")


def stop_over_budget(run: runners.Run, table: spill.Spilled) -> None:
    """Fails ``run`` before it reads any image when the rows whose image file is
    missing (``table.missing``, found as the table was checked) are already over its
    error budget: the last step's own check, errors file and message, for those rows,
    without a pipeline. Below the budget they go through the pipeline as every row
    does, and are quarantined there."""
    spec = run.spec
    if not table.missing_rows or metadata.over_budget(spec, table.missing_rows, [],
                                                      "") is None:
        return
    bad = []
    for split, at in table.missing.items():
        wanted = set(at)
        bad += [q for i, row in enumerate(table.rows(split)) if i in wanted
                for q in shard.missing_file(row, table.columns)]
    try:
        # Raises the error (a Dataflow run's spec says so); else it is read back.
        publishing.finish(run.settings.run, spec, [], bad)
        raise runners.explained(publishing.budget_failure(run.settings.run, spec),
                                run.settings.run)
    except BaseException:
        runners.after_failure(run)
        raise


def noted(result, notes: list[str], counts=None):
    """``result`` (a ConversionResult or a DataflowJob) with what reading left out, and
    what became of the source's annotations (``counts``; a line of a job's notes)."""
    if counts is not None:
        if isinstance(result, ConversionResult):
            result = dataclasses.replace(result, annotations=counts)
        else:
            notes = [str(counts), *notes]
    return dataclasses.replace(result, notes=list(notes)) if notes else result


def source_name(source) -> str:
    """What a version's manifest says it was made from: a file's or folder's name (never
    where it lies: the same table elsewhere gives the same files), else the kind of
    object given (``DataFrame``)."""
    if isinstance(source, (str, os.PathLike)):
        return os.path.basename(str(source).rstrip("/")) or str(source)
    if isinstance(source, (list, tuple)) and source and all(
            isinstance(x, (str, os.PathLike)) for x in source):
        return ", ".join(os.path.basename(str(x).rstrip("/")) for x in source)
    return type(source).__name__


def row_settings(opts, table: spill.Spilled, schema) -> dict:
    """The fields of WriteSettings that say what a row's record and rows-file line
    hold: where its image's value is, its label names, its key, its other features."""
    image_column = schema.column("image")
    label_column = schema.column("label")
    # A mask's path stays one of the "other features": an update tells a row whose
    # mask is another file by it.
    roles = {schema.column(r) for r in ("image", "split", "label")}
    columns = list(table.columns)
    return dict(
        image_column=columns.index(image_column) if image_column in columns else None,
        label_names=tuple(table.vocabularies.get(
            label_feature(table.features, label_column), []) if label_column else ()),
        key_column=(columns.index(opts.key)
                    if opts.key != rows.DEFAULT_KEY and opts.key in columns else None),
        feature_columns=tuple(i for i, c in enumerate(columns) if c not in roles))


def _layout_settings(opts, table: spill.Spilled) -> dict:
    """The fields of WriteSettings that say which keys the records are written under
    (``garden``): for ``layout="model_garden"``, each label id's class id (a COCO
    source's own category ids) and the source's image ids."""
    if opts.layout == garden.DEFAULT:
        return {}
    key = next((k for k, f in table.features.items() if f.role == "label"), None)
    names = table.vocabularies.get(key, []) if key else []
    found = table.annotations
    ids = garden.class_ids(names, garden.is_detection(table.features),
                           getattr(found, "class_ids", None))
    return dict(layout=opts.layout, class_ids=ids, label_key=key,
                source_ids=dict(getattr(found, "image_ids", None) or {}) or None)


#: Features holding pixels drawn at their image's size, which pre-sizing would leave
#: behind (``shorter_side`` turns the image, not them).
SIZED_FEATURES = ("objects/mask", layout.SEGMENTATION_MASK)


def _refuse_resized_masks(opts, table: spill.Spilled) -> None:
    """ConfigError where ``shorter_side`` would resize images whose masks it cannot."""
    held = [f for f in SIZED_FEATURES if f in table.features]
    if opts.shorter_side is not None and held:
        raise ConfigError(
            f"shorter_side={opts.shorter_side} resizes the images, but the source's masks "
            f"({', '.join(held)}) are drawn at each image's own size and would no longer "
            f"fit it; leave shorter_side out and resize images and masks together after "
            f"reading them")


def prepare(opts, output_dir: str, run_id: str, before: survey.Survey,
            table: spill.Spilled, shards: list[str], schema, source,
            update=None, rows_in: int | None = None,
            in_process_max: int | None = None) -> runners.Run:
    """Where the run stages, writes and publishes, and how many workers write: below
    ``in_process_max`` records (None: ``runners.IN_PROCESS_MAX_ROWS``, read at each run so
    that a test may lower it), the DirectRunner's one worker in this process."""
    _refuse_resized_masks(opts, table)
    cloud = _cloud(opts)
    # On Dataflow the shard tasks are staged under the temp location, read by workers.
    task_dir = (storage.join(dataflow.temp_location(opts, output_dir), f"tasks-{run_id}")
                if cloud else None)
    # On an object store, shards go straight to their final names when no previous
    # output is there to keep; otherwise into the run's folder, moved at the end.
    folder = ledger.RunFolder(
        output_dir, run_id, moved=not (storage.is_remote(output_dir) and before.manifest is None),
        cleanup=(task_dir,) if cloud else ())
    task_dir = task_dir or storage.join(folder.folder, "tasks")
    image_options = ({"shorter_side": opts.shorter_side, "jpeg_quality": opts.jpeg_quality}
                     if opts.shorter_side is not None else {})
    laid = _layout_settings(opts, table)
    spec = metadata.DatasetSpec(
        name=opts.name, compression=opts.compression, features=table.features,
        vocabularies=table.vocabularies,
        rows_in=table.rows_in if rows_in is None else rows_in,
        max_error_fraction=opts.max_error_fraction, image_options=image_options,
        fail_in_pipeline=cloud, near_duplicates=opts.near_duplicates,
        near_distance=opts.near_distance,
        # Version 1 starts a folder's history whether it replaced one or not: "create"
        # (so the same table gives the same manifest into a new folder or over one).
        source=source_name(source), mode="create" if opts.mode == "overwrite" else opts.mode,
        key=opts.key,
        update=update, layout=opts.layout, class_ids=laid.get("class_ids", ()),
        keypoints=getattr(table, "keypoints", None))
    sizing = (image.Sizing(opts.shorter_side, opts.jpeg_quality)
              if opts.shorter_side is not None else None)
    records = sum(table.counts.values())
    workers = runners.local_workers(opts)
    if in_process_max is None:
        in_process_max = runners.IN_PROCESS_MAX_ROWS
    in_process = records < in_process_max or workers == 1 or len(shards) == 1
    settings = shard.WriteSettings(
        folder, table.columns, check=opts.check,
        max_image_bytes=opts.max_image_bytes, sizing=sizing, write_index=opts.write_index,
        near_duplicates=opts.near_duplicates, near_distance=opts.near_distance,
        **row_settings(opts, table, schema),
        # Pre-sizing and the report's small decodes are CPU work that Pillow does without
        # the GIL: a run in the calling process has its shard writer use every worker as
        # a thread, rather than Beam's multi-threaded mode.
        work_threads=workers if in_process and opts.runner == "DirectRunner" else 1,
        upright=orientation.has_geometry(table.features),
        source_sizes=dict(getattr(table.annotations, "image_sizes", None) or {}) or None,
        **laid)
    return runners.Run(opts, task_dir, tuple(shards), settings, spec, records,
                       1 if in_process else workers, update=update is not None)
