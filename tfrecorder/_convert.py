"""One conversion, as one story: source -> checks -> plan -> stage -> run -> result.

Every table takes the same way: ``spill.read`` reads, checks and spills it, chunk by
chunk; ``plan.split_plans`` cuts each split into shards from its row count; ``staging.stage``
writes the shard tasks the workers read; a runner (``direct``, ``dataflow``) runs the
Beam pipeline; its last step publishes the output folder (``publishing``).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
from tfrecorder._inputs import arguments
from tfrecorder._writer import cluster, dataflow, direct, image, orientation, plan, runners
from tfrecorder._folder import garden, index, layout, ledger, metadata, removal, survey
from tfrecorder._writer import publishing
from tfrecorder._folder.lock import DATAFLOW_LOCK_TTL, LOCK_TTL, Lock, acquire
from tfrecorder._folder.manifest import loads
from tfrecorder._report import matching
from tfrecorder import _storage as storage
from tfrecorder._folder import rows
from tfrecorder._versions import updating
from tfrecorder._versions import stored_records
from tfrecorder._versions import compatibility
from tfrecorder._writer import shard, staging
from tfrecorder._writer import kept as kept_shards
from tfrecorder._inputs import spill
from tfrecorder._folder import split_names
from tfrecorder._errors import ConfigError, IncompleteOutputError
from tfrecorder._options import Options
from tfrecorder._writer.result import ConversionResult

log = logging.getLogger(__name__)

#: Rows below which the DirectRunner runs in this process: starting worker processes
#: (each imports Beam, about 2 s) costs more than it saves below this (docs/performance.md).
IN_PROCESS_MAX_ROWS = 20_000


def convert(source, output_dir: str = "./tfrecords", schema=None, header="infer", names=None,
            runner: str | None = None, project: str | None = None,
            region: str | None = None, tfrecorder_wheel: str | None = None,
            dataflow_options=None, job_label: str | None = None,
            compression: str | None = None, num_shards=None, *,
            options: Options | None = None, **kwargs):
    """Converts ``source`` to sharded TFRecord files in ``output_dir``.

    ``source`` is a pandas DataFrame, a CSV path (local or ``gs://``), an image
    directory, Vertex AI JSON Lines (a ``.jsonl`` file, a pattern, a list of them, a
    folder of them, or ``tfrecorder.from_vertex()`` in a custom training job) or a COCO
    file (``instances_train.json``, or a dict of one per split). ``schema`` defaults to
    AutoML's ``split, image_uri, label``. ``header`` and ``names`` read a CSV as
    ``pandas.read_csv`` does. The positional order is TFRecorder 2.0's; the other
    options are those of ``tfrecorder.Options``, by keyword, or all of them in one
    ``options=Options(...)`` (then no other option may be given; None means not given).

    ``mode`` says what happens to what ``output_dir`` holds: ``"create"`` (the default)
    refuses a folder with data, ``"overwrite"`` (``overwrite=True``) replaces it,
    ``"update"`` compares the table with the latest version (by ``key``) and publishes a
    new version holding only what changed, ``"append"`` only adds rows with a new key
    (docs/versions.md).

    Returns a ConversionResult (a DataflowJob on Dataflow). Raises SchemaError (every
    problem in the table, before anything runs), ConfigError, OutputExistsError
    (OutputBusyError while another conversion writes there), or ConversionError; bad
    images do not raise, their rows are quarantined. Every check runs before anything is
    written or removed, and a run that fails leaves a previous complete output in
    ``output_dir`` as it was.
    """
    opts = _options(options, dict(
        runner=runner, project=project, region=region, tfrecorder_wheel=tfrecorder_wheel,
        dataflow_options=dataflow_options, job_label=job_label, compression=compression,
        num_shards=num_shards), kwargs)
    # The checks of what was given: none reads the table or writes anything.
    cluster.check(opts)  # a runner that cannot start fails now, in one line
    schema = arguments.as_schema(schema)
    output_dir = arguments.output_path(output_dir)
    vocabulary = arguments.vocabulary(opts.label_vocabulary)
    cloud = opts.runner == "DataflowRunner"
    named = f"name={arguments.shortened(opts.name)!r} ({len(opts.name)} characters)"
    longest = layout.ShardName(opts.name, max(split_names.SPLITS, key=len), 0, 1,
                               opts.compression == "gzip")
    arguments.check_file_names([str(longest)], [], named)
    local_uris: list = []
    if cloud:
        dataflow.check_dataflow(opts, output_dir, [])

        def local_images(row_ids, uris):  # a Dataflow worker cannot read this machine
            if not storage.all_on_gcs(uris):
                local_uris.extend((r, u) for r, u in zip(row_ids, uris)
                                  if u is not None and not u.startswith("gs://"))
                del local_uris[5:]

    def read(parent=None):
        table, stored = _read(source, schema, header, names, opts, vocabulary,
                              local_images if cloud else None, output_dir, parent)
        _check_read(opts, table, output_dir, local_uris)
        return table, stored

    # A new conversion reads and checks its table first: a table with problems leaves
    # no folder behind, and a folder that holds data is refused before the lock is
    # taken. An update reads its table with the stored label ids and splits of the
    # version it updates, which it picks once, with the folder locked. An update of a
    # folder with no version yet is a first conversion, and goes as one.
    table = planned = None
    updates = opts.updates
    if updates:
        found = survey.survey(output_dir)
        updates = found.latest is not None or bool(found.damaged)
    try:
        if not updates:
            table, _ = read()
            planned = _planned(opts, table)
            survey.check_target(survey.survey(output_dir, planned.declared), opts.overwrite,
                                planned.files, update=opts.updates)
        # Nothing has been written so far. From here on the directory is this run's.
        with _lock(output_dir, opts) as lock:
            run_id = lock.holder["run_id"]
            # With the lock held the directory cannot change under us: look (again, for
            # a conversion, as another run may have finished there since the first look).
            before = survey.survey(output_dir, planned.declared if planned else None)
            if updates:
                if before.damaged:
                    # Its versions cannot be trusted: nothing to update, nor to convert over.
                    raise IncompleteOutputError(
                        f"{output_dir} cannot be updated: {before.damaged}")
                parent = before.latest
                table, stored = read(parent)
                if parent is not None:
                    compatibility.check_updatable(output_dir, parent, opts, table.features,
                                                  table.vocabularies, schema.column("label"))
                    notes = [*table.notes, *_near_dropped(output_dir, parent, opts)]
                    return _noted(_update(opts, lock, before, parent, table, schema, source,
                                          stored), notes, table.annotations)
                # A folder with no version yet: the update is a first conversion.
                planned = _planned(opts, table)
                before = survey.survey(output_dir, planned.declared)
            survey.check_target(before, opts.overwrite, planned.files, run_id,
                                update=opts.updates)
            removal.clear_leftovers(before, run_id)
            run = _run(opts, output_dir, run_id, before, table, planned.shards, schema, source)
            ledger.write_ledger(run.settings.run.folder, planned.files)
            _stop_over_budget(run, table)
            # The rows go to the staged task files; the spill is removed before the run.
            staging.stage(table, planned.plans, run.task_dir, name=opts.name,
                          gzip=opts.compression == "gzip")
            notes, counts = list(table.notes), table.annotations
            table.remove()
            return _noted(_execute(run, lock, opts), notes, counts)
    finally:
        if table is not None:
            table.remove()


def _options(options, flat: dict, kwargs: dict) -> Options:
    """The run's Options: ``options`` as given, or built from the keywords. Keywords
    beside ``options`` are refused: which of the two would hold is not obvious."""
    given = {**{k: v for k, v in flat.items() if v is not None}, **kwargs}
    if options is None:
        return Options.from_kwargs(**given)
    if not isinstance(options, Options):
        raise ConfigError(f"options={options!r}; give a tfrecorder.Options(...)")
    if given:
        names = ", ".join(f"{k}=" for k in given)
        raise ConfigError(
            f"options= and {names} given together; give every option in one of them, e.g. "
            f"options=dataclasses.replace(options, {next(iter(given))}=...)")
    return options


def _read(source, schema, header, names, opts: Options, vocabulary, per_chunk,
          output_dir: str, parent=None):
    """The table, read, checked and spilled to local files (every problem at once), and
    the stored splits it was read with: ``(table, StoredSplits or None)``. An update of
    ``parent`` reads it with the stored label ids, new labels after them, and its
    unassigned rows of images the folder holds keep the split they are stored in. A
    conversion looks for every image file as it goes (an update, for the rows it writes
    only, once it knows them)."""
    label_column = schema.column("label")
    stored = None
    extend = False
    if parent is not None:
        extend = vocabulary is None
        vocabulary = compatibility.label_vocabulary(parent, label_column, vocabulary)
        stored = stored_records.StoredSplits(output_dir, parent)
    table = spill.read(source, schema, header, names, label_vocabulary=vocabulary,
                       split_fractions=opts.split_fractions, per_chunk=per_chunk,
                       multi_label=opts.multi_label, images_dir=opts.images_dir,
                       extend_vocabulary=extend, stored_splits=stored,
                       look=parent is None and _looks(opts))
    return table, stored


def _check_read(opts: Options, table: spill.Spilled, output_dir: str, local_uris) -> None:
    """What can be checked only once the table is read: ``key`` is one of its columns;
    on Dataflow, every image is on gs:// (``local_uris``: the first that are not)."""
    if opts.key != rows.DEFAULT_KEY and opts.key not in table.columns:
        raise ConfigError(
            f"key={opts.key!r} is not a column of the table as read; give one of "
            f"{list(table.columns)}, or, for a column of the file that the schema "
            f"leaves out, add it to the schema (schema=, CLI --schema)")
    if opts.runner == "DataflowRunner":
        dataflow.check_dataflow(opts, output_dir, local_uris)


@dataclasses.dataclass(frozen=True)
class _Planned:
    """What a run writes: its shard plans, their shard names, every file it writes, and
    what it declares (a dead run's ledger may name its files where the folder holds no
    manifest yet)."""

    plans: list
    shards: list
    files: list
    declared: layout.Declared


def _planned(opts: Options, table: spill.Spilled, version: int = 1,
             also: tuple = (), tag: str = "") -> _Planned:
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
    return _Planned(plans, shards, files, declared)


def _execute(run, lock, opts: Options):
    """Runs the staged conversion ``run`` in ``lock``'s ``with`` block: on Dataflow, the
    submitted job takes the lock over (``dataflow.run_dataflow``); a local run's last step
    releases it, and the block again, however the run ends."""
    output_dir = run.output_dir
    if opts.runner == "DataflowRunner":
        return dataflow.run_dataflow(run, lock)
    log.info("converting %d records into %d shards in %s", run.records, len(run.shards),
             output_dir)
    try:
        job_id = direct.run_direct(run)
    except BaseException:
        runners.after_failure(run)
        raise
    return ConversionResult.from_output(output_dir, opts.runner, job_id)


def _update(opts: Options, lock, before: survey.Survey, parent, table: spill.Spilled,
            schema, source, stored_splits: stored_records.StoredSplits):
    """The update of ``parent``, the latest version of the folder ``before`` surveyed with
    ``lock`` held, by ``table`` (``mode="update"`` or ``"append"``): the rows that changed
    go through the pipeline into new shards, the records they replace or that left the
    table are retired, and the new version is published; an update that changes nothing
    writes nothing. ``stored_splits``: what the table's unassigned rows were read with
    (``parent``'s rows files, read once)."""
    output_dir = before.output_dir
    run_id = lock.holder["run_id"]
    subset = None
    try:
        survey.check_target(before, True, [], run_id)
        removal.clear_leftovers(before, run_id)
        publishing.complete_latest(before)  # a run killed while it published
        version = max([k for k, _ in before.versions] + [parent.version or 1]) + 1
        # A version is written in its folder's layout, whatever the call's default.
        opts = dataclasses.replace(opts, layout=parent.layout)
        rows_of = _row_settings(opts, table, schema)
        decided = updating.plan(output_dir, parent, version, table,
                                shard.WriteSettings(None, table.columns, **rows_of), opts,
                                stored_splits.read)
        # New label names are a change even where no record is (an append's new label
        # on a stored row, a label_vocabulary that grew): the version lists them.
        if decided.unchanged and table.vocabularies == parent.vocabularies:
            result = ConversionResult.from_output(output_dir, opts.runner, None, parent)
            return _existing(dataclasses.replace(result, unchanged=True, changes={
                s: {"added": 0, "retired": 0, "kept": c["kept"]}
                for s, c in decided.update.changes.items()}), decided.update)
        subset = spill.subset(table, decided.picked, look=_looks(opts))
        planned = _planned(opts, subset, version, tuple(decided.update.live_indexes),
                           decided.update.tag)
        shards = planned.shards
        survey.check_target(before, True, planned.files, run_id)
        # The error budget is the whole table's: rows quarantined before are tried again
        # in every update, and must not make a small update fail.
        run = _run(opts, output_dir, run_id, before, subset, shards, schema, source,
                   update=decided.update, rows_in=table.rows_in)
        folder = run.settings.run.folder
        ledger.write_ledger(folder, planned.files)
        _stop_over_budget(run, subset)
        for name, data in decided.live_index_data.items():
            storage.write_into(storage.join(folder, name), data)
        rows.write_renumbered(folder, decided.renumbered)
        if not shards:
            # Only retirements: nothing for workers to write, the last step runs here.
            looks = [kept_shards.kept_look(output_dir, split, j - len(kept), info,
                                               run.settings.label_names, opts.near_duplicates,
                                               pending=folder, distance=opts.near_distance)[0]
                     for split, kept in decided.update.kept.items()
                     for j, info in enumerate(kept)]
            publishing.finish(run.settings.run, run.spec, looks, [],
                              matches=matching.matches(looks, opts.near_duplicates))
            return _existing(ConversionResult.from_output(output_dir, opts.runner, None),
                             decided.update)
        staging.stage(subset, planned.plans, run.task_dir, name=opts.name,
                      gzip=opts.compression == "gzip", version=version,
                      tag=decided.update.tag)
        # The shards it keeps are read too (their rows files), for the data report.
        run = dataclasses.replace(run, kept=staging.stage_kept(run.task_dir,
                                                               decided.update.kept))
        if run.without_beam:  # the kept shards' rows files, as read: not read again
            run = dataclasses.replace(run, rows_read=decided.rows_read)
        else:
            decided.rows_read.clear()
    finally:
        if subset is not None:
            subset.remove()
    result = _existing(_execute(run, lock, opts), decided.update)
    if isinstance(result, ConversionResult) and result.version == parent.version:
        # Nothing was published: every row the update tried was quarantined again.
        return dataclasses.replace(result, unchanged=True, changes={
            s: {"added": 0, "retired": 0, "kept": c["kept"]}
            for s, c in decided.update.changes.items()})
    return result


def _near_dropped(output_dir: str, parent, opts: Options) -> list[str]:
    """The note of an update without ``near_duplicates`` of a version whose data report
    has near duplicates: the new version's report has none, not even among the records
    it keeps. Not found again by itself: ``near_duplicates=False`` is also the default."""
    if opts.near_duplicates or not parent.quality:
        return []
    try:
        near = loads(storage.read_bytes(storage.join(output_dir, parent.quality)))
        near = near.get("near_duplicates") if isinstance(near, dict) else None
    except (OSError, ValueError):
        return []  # no report to compare with: nothing to say
    if not near:
        return []
    return [f"near duplicates not searched: version {parent.version or 1} was converted "
            f"with near_duplicates=True (--near-duplicates), this update without it, so its "
            f"data report lists none, of the records it keeps either, and a later update "
            f"with it is refused (these new records have no hash). To have them again, "
            f"convert the whole table with --near-duplicates --overwrite; give it to every "
            f"update to keep them"]


def _looks(opts: Options) -> bool:
    """Whether the image files are looked for before the run: always, but in a Dataflow
    dry run (``--dry_run``), which only builds the job and reads no image."""
    return (opts.flag_value("dry_run") or "false").lower() in ("false", "0")


def _stop_over_budget(run: runners.Run, table: spill.Spilled) -> None:
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


def _existing(result, update: updating.Update):
    """``result`` with the rows an append left out because their key was stored, and
    how many of them differ from what is stored, in what."""
    if not isinstance(result, ConversionResult) or not update.existing_count:
        return result
    return dataclasses.replace(result, existing_count=update.existing_count,
                               existing_keys=list(update.existing),
                               existing_differ=update.existing_differ,
                               existing_differ_in=list(update.differ_in))


def _noted(result, notes: list[str], counts=None):
    """``result`` (a ConversionResult or a DataflowJob) with what reading left out, and
    what became of the source's annotations (``counts``; a line of a job's notes)."""
    if counts is not None:
        if isinstance(result, ConversionResult):
            result = dataclasses.replace(result, annotations=counts)
        else:
            notes = [str(counts), *notes]
    return dataclasses.replace(result, notes=list(notes)) if notes else result


def _lock(output_dir: str, opts: Options) -> Lock:
    """Creates the output folder and takes its lock, for a ``with`` block."""
    arguments.makedirs(output_dir)
    run_id = ledger.new_run_id()
    ttl = DATAFLOW_LOCK_TTL if opts.runner == "DataflowRunner" else LOCK_TTL
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


def _row_settings(opts: Options, table: spill.Spilled, schema) -> dict:
    """The fields of WriteSettings that say what a row's record and rows-file line
    hold: where its image's value is, its label names, its key, its other features."""
    image_column = schema.column("image")
    label_column = schema.column("label")
    roles = {schema.column(r) for r in ("image", "split", "label")}
    columns = list(table.columns)
    return dict(
        image_column=columns.index(image_column) if image_column in columns else None,
        label_names=tuple(table.vocabularies.get(
            compatibility.label_feature(table.features, label_column), []) if label_column else ()),
        key_column=(columns.index(opts.key)
                    if opts.key != rows.DEFAULT_KEY and opts.key in columns else None),
        feature_columns=tuple(i for i, c in enumerate(columns) if c not in roles))


def _layout_settings(opts: Options, table: spill.Spilled) -> dict:
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
SIZED_FEATURES = ("objects/mask",)


def _refuse_resized_masks(opts: Options, table: spill.Spilled) -> None:
    """ConfigError where ``shorter_side`` would resize images whose masks it cannot."""
    held = [f for f in SIZED_FEATURES if f in table.features]
    if opts.shorter_side is not None and held:
        raise ConfigError(
            f"shorter_side={opts.shorter_side} resizes the images, but the source's masks "
            f"({', '.join(held)}) are drawn at each image's own size and would no longer "
            f"fit it; leave shorter_side out and resize images and masks together after "
            f"reading them")


def _run(opts: Options, output_dir: str, run_id: str, before: survey.Survey,
         table: spill.Spilled, shards: list[str], schema, source,
         update=None, rows_in: int | None = None) -> runners.Run:
    """Where the run stages, writes and publishes, and how many workers write."""
    _refuse_resized_masks(opts, table)
    cloud = opts.runner == "DataflowRunner"
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
        source=source_name(source), mode=opts.mode if opts.updates else "convert",
        key=opts.key,
        update=update, layout=opts.layout, class_ids=laid.get("class_ids", ()),
        keypoints=getattr(table, "keypoints", None))
    sizing = (image.Sizing(opts.shorter_side, opts.jpeg_quality)
              if opts.shorter_side is not None else None)
    records = sum(table.counts.values())
    workers = runners.local_workers(opts)
    in_process = records < IN_PROCESS_MAX_ROWS or workers == 1 or len(shards) == 1
    settings = shard.WriteSettings(
        folder, table.columns, check=opts.check,
        max_image_bytes=opts.max_image_bytes, sizing=sizing, write_index=opts.write_index,
        near_duplicates=opts.near_duplicates, near_distance=opts.near_distance,
        **_row_settings(opts, table, schema),
        # Pre-sizing and the report's small decodes are CPU work that Pillow does without
        # the GIL: a run in the calling process has its shard writer use every worker as
        # a thread, rather than Beam's multi-threaded mode.
        work_threads=workers if in_process and opts.runner == "DirectRunner" else 1,
        upright=orientation.has_geometry(table.features),
        source_sizes=dict(getattr(table.annotations, "image_sizes", None) or {}) or None,
        **laid)
    return runners.Run(opts, task_dir, tuple(shards), settings, spec, records,
                       1 if in_process else workers, update=update is not None)


def create_tfrecords(input_data, output_dir: str = "./tfrecords", **kwargs):
    """TFRecorder 1.x's name of ``convert``: ``create_tfrecords(input_data=..., output_dir=...)``."""
    return convert(input_data, output_dir, **kwargs)


def convert_and_load(*args, load_options=None, **kwargs):
    """Converts like ``convert`` (same arguments), then returns
    ``load(output_dir, **load_options)``: every split's dataset."""
    from tfrecorder._readers.loading import load

    result = convert(*args, **kwargs)
    return load(result["tfrecord_dir"], **(load_options or {}))
