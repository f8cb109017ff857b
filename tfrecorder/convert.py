"""The one orchestrator: source -> table -> checks -> plan -> pipeline -> result."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import uuid
from typing import Mapping

from tfrecorder import detection, labels, layout, metadata, plan, sources, staging, storage
from tfrecorder import schema as schemas
from tfrecorder import validation
from tfrecorder.errors import ConfigError, OutputExistsError
from tfrecorder.options import Options
from tfrecorder.result import ConversionResult

log = logging.getLogger(__name__)

#: Rows below which the DirectRunner runs in this process: starting worker processes
#: (each imports Beam, about 2 s) costs more than it saves below this (docs/performance.md).
IN_PROCESS_MAX_ROWS = 20_000
#: Image files whose size is looked up per split to estimate the split's bytes.
SIZE_SAMPLE = 64


@dataclasses.dataclass(frozen=True)
class _Run:
    """Everything a runner needs to run one planned conversion."""

    opts: Options
    output_dir: str
    task_dir: str       # the staged shard tasks
    tmp_dir: str        # temporary shards, inside the output directory
    spec: metadata.DatasetSpec
    columns: tuple      # names of each row's values, for the errors file
    records: int        # records the tasks will write
    workers: int        # DirectRunner worker processes (1: in this process)


def convert(source, output_dir: str, *, schema=None, **options) -> ConversionResult:
    """Converts ``source`` to sharded TFRecord files in ``output_dir``.

    ``source`` is a pandas DataFrame, a CSV path (local or ``gs://``), or an image
    directory. ``schema`` defaults to AutoML's ``split, image_uri, label``. The options
    are those of ``tfrecorder.Options``. Raises SchemaError (every problem in the table,
    before anything runs), ConfigError, OutputExistsError, or ConversionError; bad
    images do not raise, their rows are quarantined.
    """
    opts = Options.from_kwargs(**options)
    schema = _as_schema(schema)
    table = sources.read(source, schema)
    vocabulary = _vocabulary(opts.label_vocabulary)
    if table.kind == "detection":
        checked = detection.validate(
            table.frame, table.row_ids, base_dir=table.base_dir, label_vocabulary=vocabulary,
            split_fractions=opts.split_fractions)
    else:
        checked = validation.validate(
            table.frame, table.row_ids, schema, base_dir=table.base_dir,
            label_vocabulary=vocabulary, split_fractions=opts.split_fractions)
    output_dir = storage.resolve(str(output_dir))
    cloud = opts.runner == "DataflowRunner"
    if cloud:
        _check_dataflow(opts, output_dir, checked.rows)
    _prepare_output(output_dir, opts.overwrite)

    workers = opts.num_workers or (_dataflow_workers(opts) if cloud else os.cpu_count() or 1)
    tasks = plan.plan(
        checked.rows, name=opts.name, gzip=opts.compression == "gzip",
        num_shards=opts.num_shards, bytes_per_split=_estimate_bytes(checked.rows),
        workers=workers, seed=opts.seed,
    )
    tmp_dir = storage.join(output_dir, layout.TMP_DIR)
    # On Dataflow the shard tasks are staged under the temp location, read by workers.
    task_dir = (storage.join(_temp_location(opts, output_dir), f"tasks-{uuid.uuid4().hex[:12]}")
                if cloud else storage.join(tmp_dir, "tasks"))
    spec = metadata.DatasetSpec(
        name=opts.name, compression=opts.compression, features=checked.features,
        vocabularies=checked.vocabularies, rows_in=len(table.row_ids),
        max_error_fraction=opts.max_error_fraction, cleanup=(task_dir,) if cloud else (),
    )
    staging.stage_tasks(tasks, task_dir)
    records, shards = len(checked.rows), len(tasks)
    in_process = records < IN_PROCESS_MAX_ROWS or workers == 1 or shards == 1
    run = _Run(opts, output_dir, task_dir, tmp_dir, spec, checked.columns, records,
               1 if in_process else workers)
    # The rows now live in the staged task files; holding them here while the workers
    # run would double the memory a large table needs.
    del table, checked, tasks
    if cloud:
        return _run_dataflow(run)
    log.info("converting %d records into %d shards in %s", records, shards, output_dir)
    return ConversionResult.from_output(output_dir, opts.runner, _run_direct(run))


def _as_schema(schema) -> schemas.Schema:
    if schema is None:
        return schemas.IMAGE_CSV_SCHEMA
    if isinstance(schema, schemas.Schema):
        return schema
    if isinstance(schema, Mapping):
        if all(isinstance(v, (str, Mapping)) for v in schema.values()):
            return schemas.from_json(dict(schema))
        return schemas.Schema(schema)
    if isinstance(schema, (str, os.PathLike)):
        return schemas.from_json(str(schema))
    raise ConfigError(f"schema={schema!r}; give a tfrecorder.input_schema.Schema or a dict")


def _vocabulary(value) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        try:
            return labels.parse_labels_file(storage.read_bytes(str(value)).decode("utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"label_vocabulary file {value!r} does not exist") from None
    return [labels.name_of(v) for v in value]


def _prepare_output(output_dir: str, overwrite: bool) -> None:
    """Refuses a non-empty output directory unless ``overwrite``; then clears our files."""
    if storage.exists(output_dir) and not storage.isdir(output_dir):
        raise ConfigError(f"output directory {output_dir} is a file; give a directory path")
    entries = storage.listdir(output_dir)
    if entries and not overwrite:
        shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
        raise OutputExistsError(
            f"output directory {output_dir} already holds {len(entries)} entries ({shown}). "
            f"Pass overwrite=True (--overwrite in the CLI) to replace tfrecorder's files there, "
            f"or give an empty directory."
        )
    # The manifest goes first: from here on the directory reads as incomplete.
    if layout.MANIFEST in entries:
        storage.remove(storage.join(output_dir, layout.MANIFEST))
    for name in entries:
        if layout.is_own_file(name):
            storage.remove(storage.join(output_dir, name))
    storage.makedirs(output_dir)


def _estimate_bytes(rows) -> dict[str, int]:
    """Bytes per split: image sizes from a sample of each split's files, else features."""
    by_split: dict[str, list] = {}
    for row in rows:
        by_split.setdefault(row.split, []).append(row)
    out = {}
    for split, split_rows in by_split.items():
        step = max(1, len(split_rows) // SIZE_SAMPLE)
        sizes = []
        for row in split_rows[::step][:SIZE_SAMPLE]:
            size = sum(len(f) for f in row.features.values())
            if row.image_uri is not None:
                try:
                    size += storage.size(row.image_uri)
                except OSError:
                    continue
            sizes.append(size)
        out[split] = int(sum(sizes) / len(sizes) * len(split_rows)) if sizes else 0
    return out


# --- Dataflow -------------------------------------------------------------------------

#: Workers assumed for shard planning on Dataflow when no --max_num_workers is given.
DATAFLOW_DEFAULT_WORKERS = 8


def _check_dataflow(opts: Options, output_dir: str, rows) -> None:
    """Everything DataflowRunner needs, checked before anything is written."""
    missing = [n for n in ("project", "region") if not getattr(opts, n)]
    if missing:
        raise ConfigError(
            f"runner='DataflowRunner' needs {' and '.join(f'{n}=' for n in missing)} "
            f"(your Google Cloud project id and a Dataflow region such as 'us-central1')")
    if not output_dir.startswith("gs://"):
        raise ConfigError(f"runner='DataflowRunner' writes to gs:// only; output directory "
                          f"{output_dir} is local. Give a gs://bucket/path.")
    if opts.temp_location and not opts.temp_location.startswith("gs://"):
        raise ConfigError(f"temp_location={opts.temp_location!r}: give a gs:// folder")
    local = [r for r in rows if r.image_uri is not None and not r.image_uri.startswith("gs://")]
    if local:
        shown = "; ".join(f"row {r.row}: {r.image_uri}" for r in local[:5])
        raise ConfigError(
            f"runner='DataflowRunner' reads images from gs:// only, and {len(local)} rows point "
            f"to local files ({shown}). Copy the images to a bucket and use gs:// URIs.")


def console_url(project: str, region: str, job_id: str) -> str:
    """The Cloud Console page of a Dataflow job."""
    return f"https://console.cloud.google.com/dataflow/jobs/{region}/{job_id}?project={project}"


def _temp_location(opts: Options, output_dir: str) -> str:
    if opts.temp_location:
        return opts.temp_location.rstrip("/")
    bucket = output_dir[len("gs://"):].split("/", 1)[0]
    return f"gs://{bucket}/tfrecorder-tmp"


def _dataflow_workers(opts: Options) -> int:
    value = opts.flag_value("max_num_workers") or opts.flag_value("num_workers")
    return int(value) if value and value.isdigit() else DATAFLOW_DEFAULT_WORKERS


def _run_dataflow(run: _Run):
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

    from tfrecorder import pipeline
    from tfrecorder.result import DataflowJob

    opts = run.opts
    wheel = opts.tfrecorder_wheel or staging.build_wheel(tempfile.mkdtemp(prefix="tfrecorder-"))
    flags = [f"--project={opts.project}", f"--region={opts.region}",
             f"--temp_location={_temp_location(opts, run.output_dir)}",
             f"--extra_packages={wheel}"]
    if opts.num_workers and opts.flag_value("num_workers") is None:
        flags.append(f"--num_workers={opts.num_workers}")
    if opts.job_label and opts.flag_value("job_name") is None:
        label = re.sub(r"[^a-z0-9-]", "-", opts.job_label.lower()).strip("-")[:40] or "tfrecorder"
        flags.append(f"--job_name={label}-{uuid.uuid4().hex[:8]}")
    beam_options = PipelineOptions([*flags, *opts.beam_flags()], runner="DataflowRunner")
    p = beam.Pipeline(options=beam_options)
    pipeline.build(p, run.task_dir, output_dir=run.output_dir, tmp_dir=run.tmp_dir,
                   spec=run.spec, columns=run.columns, check=opts.check)
    result = p.run()
    if beam_options.view_as(TestOptions).dry_run:
        return DataflowJob(run.output_dir, None, None, pipeline_result=result)
    job_id = result.job_id()
    url = console_url(opts.project, opts.region, job_id)
    log.info("submitted Dataflow job %s: %s", job_id, url)
    job = DataflowJob(run.output_dir, job_id, url, pipeline_result=result)
    return job.wait() if opts.wait else job


# --- DirectRunner ---------------------------------------------------------------------

def _run_direct(run: _Run) -> str:
    """Runs the conversion on this machine, with a progress bar where one shows."""
    import shutil
    import tempfile

    from tfrecorder import progress

    if not progress.wanted(run.opts.progress):
        return _run_beam(run, None)
    folder = tempfile.mkdtemp(prefix="tfrecorder-progress-")
    try:
        return progress.watch(lambda: _run_beam(run, folder), run.records, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_beam(run: _Run, progress_dir: str | None) -> str:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecorder import pipeline

    extra = {"direct_num_workers": run.workers}
    if run.workers > 1:
        extra["direct_running_mode"] = "multi_processing"
    beam_options = PipelineOptions(run.opts.beam_flags(), runner="DirectRunner", **extra)
    job_id = f"direct-{uuid.uuid4().hex[:12]}"
    try:
        with beam.Pipeline(options=beam_options) as p:
            pipeline.build(p, run.task_dir, output_dir=run.output_dir, tmp_dir=run.tmp_dir,
                           spec=run.spec, columns=run.columns, check=run.opts.check,
                           progress_dir=progress_dir)
    except Exception as e:
        # The runner wraps a failed step in its own exception (from a worker process, as
        # text). The error budget's failure is recognised by what the directory holds.
        failure = metadata.budget_failure(run.output_dir, run.spec)
        if failure is not None:
            raise failure from e
        raise
    return job_id


def convert_and_load(source, output_dir: str, *, schema=None, load_options=None, **options):
    """Converts ``source`` like ``convert``, then returns ``load(output_dir, **load_options)``."""
    from tfrecorder.loading import load

    result = convert(source, output_dir, schema=schema, **options)
    return load(result.output_dir, **(load_options or {}))
