"""The one orchestrator: source -> table -> checks -> plan -> pipeline -> result."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import re
import uuid
from typing import Callable, Mapping

from tfrecorder import (detection, image, index, labels, layout, metadata, output, plan,
                        runners, shard, sources, splits, staging, storage, stream, validation)
from tfrecorder import schema as schemas
from tfrecorder.errors import ConfigError, TFRecorderError
from tfrecorder.options import Options
from tfrecorder.result import ConversionResult

log = logging.getLogger(__name__)

#: Rows below which the DirectRunner runs in this process: starting worker processes
#: (each imports Beam, about 2 s) costs more than it saves below this (docs/performance.md).
IN_PROCESS_MAX_ROWS = 20_000


@dataclasses.dataclass(frozen=True)
class _Run:
    """Everything a runner needs to run one planned conversion."""

    opts: Options
    task_dir: str                   # the staged shard tasks
    shards: tuple                   # their shard names, in plan order
    settings: shard.WriteSettings   # where and how shards are written
    spec: metadata.DatasetSpec      # what the last step writes
    records: int                    # records the tasks will write
    workers: int                    # DirectRunner workers (1: in this process)
    threads: bool = False           # workers are threads of this process, not processes

    @property
    def output_dir(self) -> str:
        return self.settings.output_dir


def convert(source, output_dir: str = "./tfrecords", schema=None, header="infer", names=None,
            runner: str = "DirectRunner", project: str | None = None,
            region: str | None = None, tfrecorder_wheel: str | None = None,
            dataflow_options=None, job_label: str | None = None,
            compression: str | None = None, num_shards=0, **options):
    """Converts ``source`` to sharded TFRecord files in ``output_dir``.

    ``source`` is a pandas DataFrame, a CSV path (local or ``gs://``), or an image
    directory. ``schema`` defaults to AutoML's ``split, image_uri, label``. ``header`` and
    ``names`` read a CSV as ``pandas.read_csv`` does. The positional order is TFRecorder
    2.0's; the other options are those of ``tfrecorder.Options``, by keyword.

    Returns a ConversionResult (a DataflowJob on Dataflow). Raises SchemaError (every
    problem in the table, before anything runs), ConfigError, OutputExistsError
    (OutputBusyError while another conversion writes there), or ConversionError; bad
    images do not raise, their rows are quarantined. Every check runs before anything is
    written or removed, and a run that fails leaves a previous complete output in
    ``output_dir`` as it was.
    """
    if dataflow_options is not None:
        options["dataflow_options"] = dataflow_options
    opts = Options.from_kwargs(
        runner=runner, project=project, region=region, tfrecorder_wheel=tfrecorder_wheel,
        job_label=job_label, compression=compression, num_shards=num_shards, **options)
    runners.check(opts)  # a runner that cannot start fails now, in one line
    schema = _as_schema(schema)
    output_dir = _output_path(output_dir)
    vocabulary = _vocabulary(opts.label_vocabulary)
    cloud = opts.runner == "DataflowRunner"
    workers = opts.num_workers or (_dataflow_workers(opts) if cloud else os.cpu_count() or 1)
    # The longest shard name this dataset name can give, before the table is read.
    longest = layout.ShardName(opts.name, max(splits.SPLITS, key=len), 0, 1,
                               opts.compression == "gzip")
    named = f"name={_shortened(opts.name)!r} ({len(opts.name)} characters)"
    _check_file_names([str(longest)], [], named)
    table = _read(source, schema, header, names, opts, vocabulary, output_dir, workers)
    try:
        labels_files = [layout.labels_file(k) for k in table.vocabularies]
        _check_file_names(table.shards, [], named)
        _check_file_names([], labels_files, "a label column's name")
        indexes = [index.name(f) for f in table.shards
                   if opts.write_index and not f.endswith(".gz")]
        files = [*table.shards, *indexes, *labels_files,
                 layout.MANIFEST, layout.ERRORS, layout.DATASET_INFO, layout.FEATURES]
        before = output.survey(output_dir)
        output.check_target(before, opts.overwrite, files)

        # Nothing has been written so far. From here on the directory is this run's.
        _makedirs(output_dir)
        run_id = output.new_run_id()
        try:
            # Creating the lock is the first write: it shows a folder we cannot write to
            # where permission bits do not (a read-only mount, an ACL).
            lock = output.acquire(output_dir, run_id, opts.runner,
                                  output.DATAFLOW_LOCK_TTL if cloud else output.LOCK_TTL)
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            why = "a read-only file system" if e.errno == errno.EROFS else "no permission"
            raise _not_writable(output_dir, why) from None
        try:
            # With the lock held the directory cannot change under us: check it again,
            # as another run may have finished there since the first look.
            before = output.survey(output_dir)
            output.check_target(before, opts.overwrite, files, run_id)
            output.clear_leftovers(before, run_id)
            run = _plan_run(opts, output_dir, run_id, before, table, workers)
            output.write_ledger(run.settings.run_dir, files)
            table.stage(run.task_dir)
        except BaseException:
            lock.release()
            raise
    finally:
        table.discard()  # the spilled rows, whatever happened
    # The rows now live in the staged task files; holding them here while the workers
    # run would double the memory a large table needs.
    shards = len(table.shards)
    del table
    if cloud:
        with _beam_quiet():
            return _run_dataflow(run, lock)
    log.info("converting %d records into %d shards in %s", run.records, shards, output_dir)
    try:
        with lock.renewing(), _beam_quiet():
            job_id = _run_direct(run)
    except BaseException:
        _after_failure(run)
        raise
    finally:
        lock.release()
    return ConversionResult.from_output(output_dir, opts.runner, job_id)


@dataclasses.dataclass
class _Planned:
    """A checked table and its shard plan: in memory, or spilled to local files
    (``stream``); ``stage`` writes its shard tasks, ``discard`` frees what it holds."""

    columns: tuple
    features: dict
    vocabularies: dict
    rows_in: int
    records: int
    shards: list[str]                   # shard file names, in plan order
    stage: Callable[[str], object]
    discard: Callable[[], None] = lambda: None


def _read(source, schema, header, names, opts: Options, vocabulary, output_dir: str,
          workers: int) -> _Planned:
    """Reads, checks and plans ``source``: streamed for CSV files and DataFrames (the
    driver holds one chunk at a time), in memory for image directories, object
    detection and multi-label tables."""
    cloud = opts.runner == "DataflowRunner"
    local_uris: list = []

    def check_chunk(row_ids, uris):
        if cloud and not storage.all_on_gcs(uris):
            local_uris.extend((rid, u) for rid, u in zip(row_ids, uris)
                              if u is not None and not u.startswith("gs://"))
            del local_uris[5:]

    if cloud:
        _check_dataflow(opts, output_dir, [])
    spilled = stream.read(source, schema, header, names, label_vocabulary=vocabulary,
                          split_fractions=opts.split_fractions, per_chunk=check_chunk)
    if spilled is not None:
        try:
            if cloud:
                _check_dataflow(opts, output_dir, local_uris)
            estimate = _bytes_per_split(
                spilled.samples,
                spilled.counts)
            plans = stream.layouts(spilled, num_shards=opts.num_shards,
                                   bytes_per_split=estimate, workers=workers, seed=opts.seed)
        except BaseException:
            spilled.remove()
            raise
        gzip = opts.compression == "gzip"
        shards = [str(layout.ShardName(opts.name, p.split, i, p.count, gzip))
                  for p in plans for i in range(p.count)]
        return _Planned(
            spilled.columns, spilled.features, spilled.vocabularies, spilled.rows_in,
            sum(spilled.counts.values()), shards,
            lambda folder: stream.stage(spilled, plans, folder, name=opts.name, gzip=gzip),
            spilled.remove)

    table = sources.read(source, schema, header, names)
    if table.kind == "detection":
        checked = detection.validate(
            table.frame, table.row_ids, base_dir=table.base_dir, label_vocabulary=vocabulary,
            split_fractions=opts.split_fractions)
    else:
        checked = validation.validate(
            table.frame, table.row_ids, schema, base_dir=table.base_dir,
            label_vocabulary=vocabulary, split_fractions=opts.split_fractions)
    if cloud:
        _check_dataflow(opts, output_dir, [(r.row, r.image_uri) for r in checked.rows])
    by_split: dict[str, list] = {}
    for row in checked.rows:
        by_split.setdefault(row.split, []).append(row)
    samples = {}
    for split, split_rows in by_split.items():
        step = max(1, len(split_rows) // stream.SAMPLE_ROWS)
        samples[split] = [(r.image_uri, r.features)
                          for r in split_rows[::step][:stream.SAMPLE_ROWS]]
    tasks = plan.plan(
        checked.rows, name=opts.name, gzip=opts.compression == "gzip",
        num_shards=opts.num_shards,
        bytes_per_split=_bytes_per_split(samples, {s: len(r) for s, r in by_split.items()}),
        workers=workers, seed=opts.seed)
    return _Planned(checked.columns, checked.features, checked.vocabularies,
                    len(table.row_ids), len(checked.rows), [t.filename for t in tasks],
                    lambda folder: staging.stage_tasks(tasks, folder))


def _plan_run(opts: Options, output_dir: str, run_id: str, before: output.Survey,
              table: _Planned, workers: int) -> _Run:
    cloud = opts.runner == "DataflowRunner"
    run_dir = output.run_dir(output_dir, run_id)
    # On an object store, shards go straight to their final names when no previous
    # output is there to keep; otherwise into the run's folder, moved at the end.
    staged = not (storage.is_remote(output_dir) and before.manifest is None)
    # On Dataflow the shard tasks are staged under the temp location, read by workers.
    task_dir = (storage.join(_temp_location(opts, output_dir), f"tasks-{run_id}")
                if cloud else storage.join(run_dir, "tasks"))
    spec = metadata.DatasetSpec(
        name=opts.name, compression=opts.compression, features=table.features,
        vocabularies=table.vocabularies, rows_in=table.rows_in,
        max_error_fraction=opts.max_error_fraction, cleanup=(task_dir,) if cloud else (),
        run_id=run_id, run_dir=run_dir, staged=staged, image_options=_image_options(opts),
        fail_in_pipeline=cloud)
    sizing = (image.Sizing(opts.shorter_side, opts.jpeg_quality)
              if opts.shorter_side is not None else None)
    settings = shard.WriteSettings(output_dir, run_dir, table.columns, check=opts.check,
                                   max_image_bytes=opts.max_image_bytes, staged=staged,
                                   sizing=sizing, index=opts.write_index)
    records = table.records
    shards = tuple(table.shards)
    in_process = records < IN_PROCESS_MAX_ROWS or workers == 1 or len(table.shards) == 1
    if sizing is not None and len(table.shards) > 1:
        # Resizing is CPU work that Pillow does without the GIL: threads use every core
        # from a few rows on, without starting worker processes.
        return _Run(opts, task_dir, shards, settings, spec, records, workers,
                    threads=in_process)
    return _Run(opts, task_dir, shards, settings, spec, records,
                1 if in_process else workers)


def _image_options(opts: Options) -> dict:
    if opts.shorter_side is None:
        return {}
    return {"shorter_side": opts.shorter_side, "jpeg_quality": opts.jpeg_quality}


def _after_failure(run: _Run) -> None:
    """Removes what a failed local run wrote into its folder, but its ledger and errors."""
    folder = run.settings.run_dir
    for name in storage.listdir(folder):
        if name not in (output.LEDGER, layout.ERRORS):
            storage.remove(storage.join(folder, name))


def _output_path(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"output_dir={path!r}; give a folder path or a gs:// URI")
    path = str(path)
    reason = storage.check_scheme(path)
    if reason is not None:
        raise ConfigError(f"output directory {path}: {reason}")
    return storage.resolve(path)


#: Bytes a file name may have on the usual local file systems (ext4, XFS, APFS; NTFS
#: allows 255 UTF-16 units); an output written to gs:// stays copyable to a disk.
MAX_FILE_NAME_BYTES = 255


def _check_file_names(shards: list[str], others: list[str], what: str) -> None:
    """A ConfigError naming ``what`` to shorten when a file a run writes would have a
    name over MAX_FILE_NAME_BYTES: a shard gets a longer name on its way (its staged
    task, its temporary ``.part``) and an index file beside it."""
    temp = storage.TEMP_SUFFIX_BYTES  # files written whole get a temporary name first
    extra = max(len(staging.TASK_SUFFIX) + temp, len(shard.part_name("")),
                len(index.SUFFIX) + temp)
    for name, limit in [*((n, MAX_FILE_NAME_BYTES - extra) for n in shards),
                        *((n, MAX_FILE_NAME_BYTES - temp) for n in others)]:
        size = len(name.encode("utf-8"))
        if size > limit:
            suffix = (f" ({MAX_FILE_NAME_BYTES} less {extra} for the suffix a shard file "
                      f"gets while it is written)" if limit < MAX_FILE_NAME_BYTES else "")
            raise ConfigError(
                f"{what} is too long for a file name: {_shortened(name)!r} has {size} "
                f"bytes, and may have {limit}{suffix}; shorten it by {size - limit} "
                f"or more bytes")


def _shortened(text: str, keep: int = 60) -> str:
    return text if len(text) <= keep else f"{text[:keep // 2]}...{text[-keep // 2:]}"


def _not_writable(output_dir: str, why: str) -> ConfigError:
    return ConfigError(f"output directory {output_dir} cannot be written ({why}); give a "
                       f"folder you can write to")


def _makedirs(output_dir: str) -> None:
    try:
        storage.makedirs(output_dir)
    except (NotADirectoryError, FileExistsError):
        raise ConfigError(f"output directory {output_dir}: a part of the path is a file, not "
                          f"a folder; give a path under a folder") from None
    except PermissionError:
        raise ConfigError(f"output directory {output_dir} cannot be created or written (no "
                          f"permission); give a folder you can write to") from None
    except OSError as e:
        raise ConfigError(f"output directory {output_dir} cannot be created ({e.strerror or e}); "
                          f"give a folder you can write to") from None
    if not storage.is_remote(output_dir) and not os.access(output_dir, os.W_OK | os.X_OK):
        raise _not_writable(output_dir, "no permission")


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
        path = str(value)
        try:
            # utf-8-sig, as the CSV is read: Notepad and Excel start UTF-8 with a BOM.
            names = labels.parse_labels_file(storage.read_bytes(path).decode("utf-8-sig"))
        except FileNotFoundError:
            raise ConfigError(f"label_vocabulary file {path!r} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"label_vocabulary {path!r} is a folder; give a file with one "
                              f"label per line") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"label_vocabulary file {path!r} is not UTF-8 text ({e.reason} "
                              f"at byte {e.start}); save it as UTF-8") from None
        except OSError as e:
            raise ConfigError(f"label_vocabulary file {path!r} cannot be read: {e}") from None
    elif isinstance(value, (list, tuple)):
        names = [labels.name_of(v) for v in value]
    else:
        raise ConfigError(f"label_vocabulary={value!r}; give a list of names or a file path")
    broken = [n for n in names if "\n" in n or "\r" in n]
    if broken:
        raise ConfigError(f"label_vocabulary name {broken[0]!r} holds a line break; a labels "
                          f"file has one name per line")
    return names


def _bytes_per_split(samples: Mapping[str, list], counts: Mapping[str, int]) -> dict[str, int]:
    """Bytes per split, from a sample of ``(image_uri, features)`` of each split: the
    image files' sizes, else the features'."""
    out = {}
    for split, sample in samples.items():
        sizes = []
        for uri, features in sample:
            size = sum(len(f) for f in features.values())
            if uri is not None:
                try:
                    size += storage.size(uri)
                except OSError:
                    continue
            sizes.append(size)
        out[split] = int(sum(sizes) / len(sizes) * counts[split]) if sizes else 0
    return out


# --- Dataflow -------------------------------------------------------------------------

#: Workers assumed for shard planning on Dataflow when no --max_num_workers is given.
DATAFLOW_DEFAULT_WORKERS = 8


def _check_dataflow(opts: Options, output_dir: str, rows) -> None:
    """Everything DataflowRunner needs, checked before anything is written; ``rows``
    are ``(row id, image_uri)`` of the rows (or the first of them) whose image is not on
    gs://."""
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
    local = [(rid, uri) for rid, uri in rows if uri is not None and not uri.startswith("gs://")]
    if local:
        shown = "; ".join(f"row {rid}: {uri}" for rid, uri in local[:5])
        raise ConfigError(
            f"runner='DataflowRunner' reads images from gs:// only, and rows point to local "
            f"files ({shown}). Copy the images to a bucket and use gs:// URIs.")


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


def _run_dataflow(run: _Run, lock: output.Lock):
    """Submits the job; its last step publishes the directory and releases the lock."""
    import shutil
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

    from tfrecorder import pipeline
    from tfrecorder.result import DataflowJob

    opts = run.opts
    p = None
    # A wheel built here is uploaded when the job is submitted, then no longer needed.
    wheel_dir = None if opts.tfrecorder_wheel else tempfile.mkdtemp(prefix="tfrecorder-")
    try:
        wheel = opts.tfrecorder_wheel or staging.build_wheel(wheel_dir)
        flags = [f"--project={opts.project}", f"--region={opts.region}",
                 f"--temp_location={_temp_location(opts, run.output_dir)}",
                 f"--extra_packages={wheel}"]
        if opts.num_workers and opts.flag_value("num_workers") is None:
            flags.append(f"--num_workers={opts.num_workers}")
        if opts.job_label and opts.flag_value("job_name") is None:
            label = re.sub(r"[^a-z0-9-]", "-", opts.job_label.lower()).strip("-")[:40] or "tfrecorder"
            flags.append(f"--job_name={label}-{uuid.uuid4().hex[:8]}")
        beam_options = PipelineOptions([*flags, *opts.beam_flags()], runner="DataflowRunner",
                                       **opts.beam_keywords())
        p = beam.Pipeline(options=beam_options)
        pipeline.build(p, run.task_dir, len(run.shards), run.settings, run.spec)
        result = p.run()
    except BaseException:
        lock.release()
        raise
    finally:
        if p is not None:
            _remove_local_tempdir(p)
        if wheel_dir is not None:
            shutil.rmtree(wheel_dir, ignore_errors=True)
    if beam_options.view_as(TestOptions).dry_run:
        lock.release()  # nothing will run
        return DataflowJob(run.output_dir, None, None, pipeline_result=result)
    job_id = result.job_id()
    lock.holder["job_id"] = job_id
    lock.write()
    url = console_url(opts.project, opts.region, job_id)
    log.info("submitted Dataflow job %s: %s", job_id, url)
    job = DataflowJob(run.output_dir, job_id, url, pipeline_result=result)
    return job.wait() if opts.wait else job


# --- DirectRunner ---------------------------------------------------------------------

def _run_direct(run: _Run) -> str:
    """Runs the conversion from this process (the DirectRunner, or any Beam runner but
    Dataflow), with a progress bar where one shows."""
    import shutil
    import tempfile

    from tfrecorder import progress

    # Shard writers report progress to a folder on this machine: other runners' workers
    # may run elsewhere.
    if run.opts.runner != "DirectRunner" or not progress.wanted(run.opts.progress):
        return _run_beam(run, None)
    folder = tempfile.mkdtemp(prefix="tfrecorder-progress-")  # local, even for gs:// output
    try:
        return progress.watch(lambda: _run_beam(run, folder), run.records, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_beam(run: _Run, progress_dir: str | None) -> str:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecorder import pipeline

    name = run.opts.runner
    extra = {}
    if name == "DirectRunner":
        extra["direct_num_workers"] = run.workers
        if run.workers > 1:
            extra["direct_running_mode"] = ("multi_threading" if run.threads
                                            else "multi_processing")
    flags, keywords = run.opts.beam_flags(), run.opts.beam_keywords()
    if name == "DaskRunner":
        flags, keywords = runners.dask_arguments(run.opts)
    beam_options = PipelineOptions(flags, runner=name, **{**keywords, **extra})
    job_id = f"{name.rsplit('.', 1)[-1].lower().replace('runner', '')}-{uuid.uuid4().hex[:12]}"
    # Any other runner (Dask, Flink, Spark, Portable, Prism...) runs the same pipeline;
    # the shard tasks are staged under the output folder, which its workers must reach.
    runner = (_local_runner(beam_options) if name == "DirectRunner"
              else runners.beam_runner(name))
    p = beam.Pipeline(runner=runner, options=beam_options)
    try:
        try:
            # The pipeline runs when ``p`` exits, inside the other context.
            with (runners.dask_in_notebooks() if name == "DaskRunner"
                  else contextlib.nullcontext()), p:
                pipeline.build(p, run.task_dir, len(run.shards), run.settings, run.spec,
                               progress_dir)
        finally:
            # Beam's Dask runner connects a Client of its own and leaves it open.
            client = getattr(getattr(p, "result", None), "client", None)
            if client is not None:
                client.close()
        failure = metadata.budget_failure(run.spec)  # the last step left its errors file
        if failure is not None:
            raise _explained(failure, run.spec)
    except TFRecorderError:
        raise
    except Exception:
        # The runner wraps a failed step in its own exception (from a worker process, as
        # text). The error budget's failure is recognised by the files the step left;
        # Beam's chain of frames around it says nothing a user can act on.
        failure = metadata.budget_failure(run.spec)
        if failure is not None:
            raise _explained(failure, run.spec) from None
        raise
    finally:
        _remove_local_tempdir(p)
    return job_id


@contextlib.contextmanager
def _beam_quiet():
    """Keeps Beam's own logging off the user's stderr while it runs our pipeline.

    A failing step is logged by Beam with its traceback (more than once), then raised;
    our exception already says it. Only at the default level (the root logger at WARNING
    or above, Beam's loggers unset) is Beam's logger raised, and it is restored after: a
    user who asked for INFO sees Beam's messages. ``PipelineOptions`` calls
    ``logging.basicConfig()``; a library must not configure logging, so a root handler
    added while Beam ran is taken back.
    """
    beam_log = logging.getLogger("apache_beam")
    unset = beam_log.level == logging.NOTSET and logging.root.level >= logging.WARNING
    handlers = list(logging.root.handlers)
    if unset:
        beam_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        if unset:
            beam_log.setLevel(logging.NOTSET)
        for h in list(logging.root.handlers):
            if h not in handlers:
                logging.root.removeHandler(h)


def _explained(failure: Exception, spec: metadata.DatasetSpec) -> Exception:
    """``failure``, with how relative image paths were resolved when images were not
    found: the one fact a wrong working directory hides."""
    hint = _resolution_hint(spec)
    if hint is None:
        return failure
    return type(failure)(f"{failure} {hint}")


def _resolution_hint(spec: metadata.DatasetSpec) -> str | None:
    for folder in (spec.run_dir, storage.dirname(storage.dirname(spec.run_dir))):
        try:
            with storage.open_file(storage.join(folder, layout.ERRORS), "rb") as f:
                lines = [line for line, _ in zip(f, range(1000))]
            break
        except FileNotFoundError:
            continue
    else:
        return None
    for line in lines:
        q = json.loads(line)
        uri = q.get("image_uri") or ""
        if not q.get("reason", "").startswith("image file not found"):
            continue
        for value in q.get("values", {}).values():
            given = value.strip() if isinstance(value, str) else ""
            tail = re.sub(r"^(\./)+", "", given)
            if (tail and given != uri and uri.endswith("/" + tail) and ".." not in tail.split("/")
                    and not os.path.isabs(given) and not storage.is_remote(given)):
                base = uri[:len(uri) - len(tail)].rstrip("/") or "/"
                return (f"Relative image paths such as {given!r} were resolved against "
                        f"{base} (a DataFrame's against the current directory, a CSV's "
                        f"against its own folder): run from the folder they are relative "
                        f"to, or make them absolute.")
    return None


def _remove_local_tempdir(p) -> None:
    """Beam leaves a pipeline's local temporary folder behind inside IPython (it expects
    its interactive mode to clean up); nothing of ours may stay in TMPDIR."""
    import shutil

    shutil.rmtree(getattr(p, "local_tempdir", ""), ignore_errors=True)


def _local_runner(beam_options):
    """Beam's FnApiRunner, which the DirectRunner runs our pipeline on.

    Since Beam 2.6x the DirectRunner first tries the Prism runner, a binary it downloads
    from GitHub on first use and runs beside this process; here that would mean a
    network download inside a conversion, temporary folders left behind, and a runner our
    design and measurements do not cover. The FnApiRunner runs in this process, or in
    one worker process per core with ``direct_running_mode="multi_processing"``.
    """
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(beam_options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def create_tfrecords(input_data, output_dir: str = "./tfrecords", **kwargs):
    """TFRecorder 1.x's name of ``convert``: ``create_tfrecords(input_data=..., output_dir=...)``."""
    return convert(input_data, output_dir, **kwargs)


def convert_and_load(*args, load_options=None, **kwargs):
    """Converts like ``convert`` (same arguments), then returns
    ``load(output_dir, **load_options)``: every split's dataset."""
    from tfrecorder.loading import load

    result = convert(*args, **kwargs)
    return load(result["tfrecord_dir"], **(load_options or {}))
