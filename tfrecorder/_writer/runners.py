"""Running a planned conversion on a Beam runner: the only code of the driver that
imports Beam.

- ``run_direct``: the embedded DirectRunner (Beam's FnApiRunner in this process or in
  one worker process per core) or any other runner a user names, with a progress bar;
- ``run_dataflow``: a Dataflow job, with a wheel of this very tfrecorder (``build_wheel``);
- ``check``: what runners other than the embedded one need to start, checked before
  anything is written. A runner that cannot start fails here in one line (a ConfigError
  naming what is missing), not minutes later inside Beam: Flink and Spark without a
  cluster would download a job server jar and start a JVM; a job endpoint nobody answers
  would be retried for minutes; a Dask Client given the dashboard's address would wait
  for the scheduler's handshake forever.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import socket
import sys
import threading
import uuid
import zipfile
from urllib.parse import urlsplit

from tfrecorder import _storage as storage
from tfrecorder._folder import layout, metadata, output
from tfrecorder._writer import plan, shard
from tfrecorder._errors import ConfigError, TFRecorderError

log = logging.getLogger(__name__)

#: Beam's Dask runner, which Beam does not list among its runner names.
DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"
#: Seconds to wait for a cluster endpoint to accept a connection.
CONNECT_TIMEOUT = 5.0
#: Flink's and Spark's "run a cluster inside this process" masters.
_LOCAL_FLINK = ("[auto]", "[local]")


def beam_runner(name: str) -> str:
    """The runner argument for ``beam.Pipeline`` of tfrecorder's runner ``name``."""
    return DASK if name == "DaskRunner" else name


def known_runners() -> list[str]:
    """The names of every runner Beam knows, Dask's included."""
    from apache_beam.options.pipeline_options import StandardOptions

    return sorted({*(p.rsplit(".", 1)[-1] for p in StandardOptions.ALL_KNOWN_RUNNERS),
                   "DaskRunner"})


def unknown_flags(flags: list[str]) -> tuple[list[str], list[str]]:
    """``(flags no registered Beam option takes, every option Beam knows)``."""
    import argparse

    from apache_beam.options.pipeline_options import PipelineOptions

    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    for cls in PipelineOptions.__subclasses__():
        cls._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(flags)
    return ([u for u in unknown if u.startswith("-")],
            [o for a in parser._actions for o in a.option_strings])


def check(opts) -> None:
    """Raises ConfigError if runner ``opts.runner`` cannot start as configured."""
    name = opts.runner
    if name == "DaskRunner":
        _check_dask(opts)
        return
    if name not in ("FlinkRunner", "SparkRunner", "PortableRunner"):
        return
    endpoint = opts.flag_value("job_endpoint")
    if endpoint == "embed":
        return  # Beam's job service inside this process
    if endpoint:
        _reachable(name, "job_endpoint", endpoint, None,
                   "start the runner's job server there (Flink's or Spark's), or give "
                   "job_endpoint='embed' to run in this process")
        return
    if name == "PortableRunner":
        raise ConfigError(
            "runner='PortableRunner' needs job_endpoint='host:port' (a running Flink or "
            "Spark job server) or job_endpoint='embed' (Beam's, in this process); give it "
            "in pipeline_options")
    if name == "FlinkRunner":
        master = opts.flag_value("flink_master") or "[auto]"
        if master in _LOCAL_FLINK:
            _local_jar(name, "flink_master='host:8081' (a Flink cluster's REST endpoint) "
                       "or job_endpoint='host:8099' (a Flink job server)",
                       opts.flag_value("flink_job_server_jar"), "flink_job_server_jar")
            return
        _reachable(name, "flink_master", master, 8081,
                   "give the REST endpoint of a running Flink cluster")
        return
    master = opts.flag_value("spark_master_url") or "local[4]"
    if master.startswith("local"):
        _local_jar(name, "spark_master_url='spark://host:7077' (a Spark master) or "
                   "job_endpoint='host:8099' (a Spark job server)",
                   opts.flag_value("spark_job_server_jar"), "spark_job_server_jar")
        return
    _reachable(name, "spark_master_url", master, 7077,
               "give the master URL of a running Spark cluster")


def _local_jar(name: str, wanted: str, jar: str | None, flag: str) -> None:
    """A runner that would start its own job server from a jar: only from a jar file
    given here, with Java installed; never a download inside a conversion."""
    import shutil

    if jar and os.path.isfile(jar) and shutil.which("java"):
        return
    missing = (f"{flag}={jar!r} is not a file" if jar and not os.path.isfile(jar) else
               "no java on PATH" if jar else "no cluster given")
    raise ConfigError(
        f"runner={name!r} has {missing}: give {wanted} in pipeline_options (or, for a "
        f"cluster in this process, a local {flag} file and Java)")


def _reachable(name: str, option: str, address: str, default_port: int | None,
               fix: str) -> None:
    host, port = _host_port(address, default_port)
    if host is None:
        raise ConfigError(f"runner={name!r}: {option}={address!r} is not host:port; {fix}")
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConfigError(
            f"runner={name!r}: nothing answers at {option}={address!r} ({reason}); "
            f"{fix}") from None


def _host_port(address: str, default_port: int | None) -> tuple[str | None, int]:
    text = address.strip()
    if "://" not in text:
        text = f"tcp://{text}"
    try:
        parts = urlsplit(text)
        port = parts.port or default_port
    except ValueError:
        return None, 0
    if not parts.hostname or port is None:
        return None, 0
    return parts.hostname, port


# --- Dask -----------------------------------------------------------------------------

#: The port a Dask scheduler listens on unless told otherwise; its dashboard is on 8787.
DASK_SCHEDULER_PORT = 8786


def _check_dask(opts) -> None:
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        raise ConfigError("runner='DaskRunner' needs Dask: pip install 'tfrecorder[dask]' "
                          "(dask[distributed])") from None
    address = opts.flag_value("dask_client_address")
    if address:
        _reachable("DaskRunner", "dask_client_address", address, DASK_SCHEDULER_PORT,
                   "start a scheduler there (`dask scheduler`) or give the address of "
                   "a running one")
        _dask_scheduler(address)


def _dask_scheduler(address: str) -> None:
    """ConfigError unless ``address`` answers as a Dask scheduler within CONNECT_TIMEOUT.

    Accepting a connection is not enough: the dashboard (port 8787) or any other server
    accepts one too, and a ``dask.distributed.Client`` given its address waits forever
    for Dask's handshake, inside the run, with the output folder locked. The scheduler's
    own ``identity`` call is asked for here, bounded, in a thread of its own (the
    caller's thread may be running an event loop: a notebook's)."""
    import asyncio
    import threading

    host, port = _host_port(address, DASK_SCHEDULER_PORT)
    given = address.strip()
    kind = given.split("://", 1)[0] if "://" in given else "tcp"
    target = f"{kind}://{f'[{host}]' if ':' in host else host}:{port}"
    outcome: dict = {}

    def probe():
        try:
            outcome["identity"] = asyncio.run(
                asyncio.wait_for(_dask_identity(target), CONNECT_TIMEOUT))
        except (asyncio.TimeoutError, OSError, ValueError) as e:
            outcome["error"] = e

    thread = threading.Thread(target=probe, name="tfrecorder-dask-check", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT + 1)
    identity = outcome.get("identity")
    server = identity.get("type") if isinstance(identity, dict) else None
    if server == "Scheduler":
        return
    error = outcome.get("error")
    if identity is not None:
        reason = f"it is a Dask {server or 'server'}, not the scheduler"
    elif error is None or isinstance(error, asyncio.TimeoutError):
        reason = (f"no Dask handshake within {CONNECT_TIMEOUT:g} s: a server of another "
                  f"kind, such as the Dask dashboard on port 8787")
    else:
        reason = str(error) or type(error).__name__
    raise ConfigError(
        f"runner='DaskRunner': dask_client_address={address!r} accepts a connection but "
        f"does not answer as a Dask scheduler ({reason}); give the scheduler's address, "
        f"tcp://host:{DASK_SCHEDULER_PORT} unless it was started with another --port "
        f"(`dask scheduler` prints it as 'Scheduler at:')")


async def _dask_identity(address: str) -> dict:
    from distributed.comm import connect
    from distributed.core import send_recv
    from distributed.security import Security

    # The Client's own connection arguments (TLS from Dask's configuration).
    comm = await connect(address, timeout=CONNECT_TIMEOUT,
                         **Security().get_connection_args("client"))
    try:
        return await send_recv(comm, op="identity")
    finally:
        comm.abort()


def dask_arguments(opts) -> tuple[list[str], dict]:
    """The flags and keyword options of a run on Beam's Dask runner.

    Dask's options given as a dict become flags: Beam's Dask options take keywords by
    other names (``address``, not ``dask_client_address``), and would drop them silently.
    Without ``dask_client_address``, the scheduler of a ``dask.distributed.Client``
    already connected in this process is used; without either, Beam starts a local
    cluster. Each shard is a Dask partition of its own (Beam's Dask runner spreads work
    by the partitions of the first step only), unless partitions are set explicitly.
    """
    flags = opts.beam_flags()
    keywords = {}
    for key, value in opts.beam_keywords().items():
        if key.startswith("dask_"):
            flags.append(f"--{key}={value}")
        else:
            keywords[key] = value
    given = {f.lstrip("-").partition("=")[0] for f in flags}
    if not given & {"dask_client_address", "dask_scheduler_file"}:
        address = _connected_scheduler()
        if address:
            flags.append(f"--dask_client_address={address}")
    if not given & {"dask_npartitions", "dask_partition_size"}:
        flags.append("--dask_partition_size=1")
    return flags, keywords


def _connected_scheduler() -> str | None:
    if "distributed" not in sys.modules:
        return None  # no Client can be connected: Dask was never imported
    from distributed import default_client

    try:
        return default_client().scheduler.address
    except ValueError:  # no client
        return None


@contextlib.contextmanager
def dask_in_notebooks():
    """Lets Beam's Dask runner run a pipeline from a notebook.

    Beam's Dask runner refuses to run inside a notebook, for want of support for Beam's
    interactive mode (``InteractiveRunner``, cached PCollections). A conversion uses
    none of it: it builds and runs one batch pipeline and waits for it, as from a
    script, and a notebook with a connected ``dask.distributed.Client`` is where Dask
    users work.
    """
    from apache_beam.runners.dask import dask_runner

    check = dask_runner.is_in_notebook
    dask_runner.is_in_notebook = lambda: False
    try:
        yield
    finally:
        dask_runner.is_in_notebook = check


@dataclasses.dataclass(frozen=True)
class Run:
    """Everything a runner needs to run one planned conversion."""

    opts: object                    # the run's Options
    task_dir: str                   # the staged shard tasks
    shards: tuple                   # their shard names, in plan order
    settings: shard.WriteSettings   # where and how shards are written
    spec: metadata.DatasetSpec      # what the last step writes
    records: int                    # records the tasks will write
    workers: int                    # DirectRunner workers (1: in this process)
    kept: int = 0                   # shards an update keeps, read for the data report
    update: bool = False            # an update (mode "update" or "append")
    #: The kept shards' rows files as the update read them (rows file -> entries), for
    #: an update run here (``without_beam``): not read twice.
    rows_read: dict | None = None

    @property
    def without_beam(self) -> bool:
        """An update the DirectRunner would run in this process on one worker, with no
        pipeline options of the user's: its steps run here without starting Beam
        (``steps.run_here``), whose start-up costs more than a small update's work."""
        return (self.update and self.opts.runner == "DirectRunner" and self.workers == 1
                and not self.opts.pipeline_options)

    @property
    def output_dir(self) -> str:
        return self.settings.run.output_dir


def after_failure(run: Run) -> None:
    """Removes what a failed local run wrote into its folder, but its ledger and errors."""
    folder = run.settings.run.folder
    for name in storage.listdir(folder):
        if name not in (output.LEDGER, layout.ERRORS):
            storage.remove(storage.join(folder, name))


def parallel_shards(opts) -> int:
    """The least shards a large enough split gets: the workers the options ask for
    (``num_workers``, Dataflow's ``max_num_workers``), else ``plan.PARALLEL_SHARDS``.
    Never this machine's core count: the same options give the same files anywhere."""
    value = opts.flag_value("max_num_workers") or opts.flag_value("num_workers")
    given = int(value) if value and value.isdigit() else None
    return opts.num_workers or given or plan.PARALLEL_SHARDS


def local_workers(opts) -> int:
    """Workers the DirectRunner runs (one per core, unless ``num_workers`` says)."""
    return opts.num_workers or os.cpu_count() or 1


# --- Dataflow -------------------------------------------------------------------------


def check_dataflow(opts, output_dir: str, rows) -> None:
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


def temp_location(opts, output_dir: str) -> str:
    if opts.temp_location:
        return opts.temp_location.rstrip("/")
    bucket = output_dir[len("gs://"):].split("/", 1)[0]
    return f"gs://{bucket}/tfrecorder-tmp"


def run_dataflow(run: Run, lock: output.Lock):
    """Submits the job and hands ``lock`` on to it: its last step publishes the directory
    and removes the lock. A job not submitted (a failure, a dry run) leaves the lock to
    the caller's ``with`` block, which releases it."""
    import shutil
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

    from tfrecorder._writer import pipeline
    from tfrecorder._writer.result import DataflowJob

    opts = run.opts
    p = None
    # A wheel built here is uploaded when the job is submitted, then no longer needed.
    wheel_dir = None if opts.tfrecorder_wheel else tempfile.mkdtemp(prefix="tfrecorder-")
    try:
        wheel = opts.tfrecorder_wheel or build_wheel(wheel_dir)
        flags = [f"--project={opts.project}", f"--region={opts.region}",
                 f"--temp_location={temp_location(opts, run.output_dir)}",
                 f"--extra_packages={wheel}"]
        if opts.num_workers and opts.flag_value("num_workers") is None:
            flags.append(f"--num_workers={opts.num_workers}")
        if opts.job_label and opts.flag_value("job_name") is None:
            label = re.sub(r"[^a-z0-9-]", "-", opts.job_label.lower()).strip("-")[:40] or "tfrecorder"
            flags.append(f"--job_name={label}-{uuid.uuid4().hex[:8]}")
        beam_options = PipelineOptions([*flags, *opts.beam_flags()], runner="DataflowRunner",
                                       **opts.beam_keywords())
        p = beam.Pipeline(options=beam_options)
        pipeline.build(p, run.task_dir, len(run.shards), run.settings, run.spec,
                       kept=run.kept)
        result = p.run()
    finally:
        if p is not None:
            _remove_local_tempdir(p)
        if wheel_dir is not None:
            shutil.rmtree(wheel_dir, ignore_errors=True)
    if beam_options.view_as(TestOptions).dry_run:  # nothing will run
        return DataflowJob(run.output_dir, None, None, pipeline_result=result)
    job_id = result.job_id()
    lock.hand_over(job_id=job_id)
    url = console_url(opts.project, opts.region, job_id)
    log.info("submitted Dataflow job %s: %s", job_id, url)
    job = DataflowJob(run.output_dir, job_id, url, pipeline_result=result)
    return job.wait() if opts.wait else job


# --- DirectRunner ---------------------------------------------------------------------

def run_direct(run: Run) -> str:
    """Runs the conversion from this process (the DirectRunner, or any Beam runner but
    Dataflow), with a progress bar where one shows."""
    import shutil
    import tempfile

    from tfrecorder._writer import progress

    go = _run_here if run.without_beam else _run_beam
    # Shard writers report progress to a folder on this machine: other runners' workers
    # may run elsewhere.
    if run.opts.runner != "DirectRunner" or not progress.wanted(run.opts.progress):
        return go(run, None)
    folder = tempfile.mkdtemp(prefix="tfrecorder-progress-")  # local, even for gs:// output
    try:
        return progress.watch(lambda: go(run, folder), run.records, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_here(run: Run, progress_dir: str | None) -> str:
    """The steps of the pipeline run in this process, without Beam (``Run.without_beam``);
    a failed run's error budget is explained as Beam's runs explain it."""
    from tfrecorder._writer import steps

    steps.run_here(run.task_dir, len(run.shards), run.settings, run.spec, progress_dir,
                   kept=run.kept, rows_read=run.rows_read)
    failure = output.budget_failure(run.settings.run, run.spec)
    if failure is not None:
        raise explained(failure, run.settings.run)
    return f"here-{uuid.uuid4().hex[:12]}"


def _run_beam(run: Run, progress_dir: str | None) -> str:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecorder._writer import pipeline

    name = run.opts.runner
    extra = {}
    if name == "DirectRunner":
        extra["direct_num_workers"] = run.workers
        if run.workers > 1:
            extra["direct_running_mode"] = "multi_processing"
    flags, keywords = run.opts.beam_flags(), run.opts.beam_keywords()
    if name == "DaskRunner":
        flags, keywords = dask_arguments(run.opts)
    beam_options = PipelineOptions(flags, runner=name, **{**keywords, **extra})
    job_id = f"{name.rsplit('.', 1)[-1].lower().replace('runner', '')}-{uuid.uuid4().hex[:12]}"
    # Any other runner (Dask, Flink, Spark, Portable, Prism...) runs the same pipeline;
    # the shard tasks are staged under the output folder, which its workers must reach.
    runner = (_local_runner(beam_options) if name == "DirectRunner"
              else beam_runner(name))
    p = beam.Pipeline(runner=runner, options=beam_options)
    try:
        try:
            # The pipeline runs when ``p`` exits, inside the other context.
            with (dask_in_notebooks() if name == "DaskRunner"
                  else short_sampler_ticks(run.opts.beam_sampler_ms)
                  if name == "DirectRunner" and run.opts.beam_sampler_ms is not None
                  else contextlib.nullcontext()), p:
                pipeline.build(p, run.task_dir, len(run.shards), run.settings, run.spec,
                               progress_dir, kept=run.kept)
        finally:
            # Beam's Dask runner connects a Client of its own and leaves it open.
            client = getattr(getattr(p, "result", None), "client", None)
            if client is not None:
                client.close()
        failure = output.budget_failure(run.settings.run, run.spec)  # from its errors file
        if failure is not None:
            raise explained(failure, run.settings.run)
    except TFRecorderError:
        raise
    except Exception:
        # The runner wraps a failed step in its own exception (from a worker process, as
        # text). The error budget's failure is recognised by the files the step left;
        # Beam's chain of frames around it says nothing a user can act on.
        failure = output.budget_failure(run.settings.run, run.spec)
        if failure is not None:
            raise explained(failure, run.settings.run) from None
        raise
    finally:
        _remove_local_tempdir(p)
    return job_id


@contextlib.contextmanager
def beam_quiet():
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


def explained(failure: Exception, run: output.RunFolder) -> Exception:
    """``failure``, with how relative image paths were resolved when images were not
    found: the one fact a wrong working directory hides."""
    hint = _resolution_hint(run)
    if hint is None:
        return failure
    return type(failure)(f"{failure} {hint}")


def _resolution_hint(run: output.RunFolder) -> str | None:
    for folder in (run.folder, run.output_dir):
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


_sampler = threading.Lock()
_sampler_asked: list[int] = []  # the periods asked by the runs in progress
_sampler_beams: tuple = ()  # Beam's own default, while they run


@contextlib.contextmanager
def short_sampler_ticks(ms: int):
    """Beam's state sampler ticks at most every ``ms`` while this runs (the user's
    ``beam_sampler_ms``).

    Each bundle Beam runs in this process starts a thread that samples which step is
    running, sleeping 2 ms between samples at first, then 1.2 times longer each time, up
    to 200 ms; when the bundle ends, Beam waits for that sleep to end. The conversion's
    writing step lasts about a second, by which time the sleep is 200 ms: it waited 0 to
    200 ms for nothing, 100 ms on average (docs/performance.md). Beam has no option for
    the period: the default of ``StateSampler``'s constructor is set for the run, to the
    least period the runs in progress asked for, and put back by the last of them. That
    changes it for every pipeline of the process meanwhile, which is why it is only done
    when asked. A Beam whose sampler takes its period some other way is left as it is.
    Worker processes (``num_workers`` > 1, Dataflow) keep Beam's period.
    """
    global _sampler_beams
    try:
        from apache_beam.runners.worker import statesampler
        init = statesampler.StateSampler.__init__
        code, beams = init.__code__, init.__defaults__
        known = (isinstance(beams, tuple) and len(beams) == 1 and type(beams[0]) is int
                 and code.co_varnames[code.co_argcount - 1] == "sampling_period_ms")
    except (ImportError, AttributeError):
        known = False
    if known:
        with _sampler:
            if not _sampler_asked:
                _sampler_beams = init.__defaults__
            _sampler_asked.append(ms)
            init.__defaults__ = (min(*_sampler_asked, _sampler_beams[0]),)
    try:
        yield
    finally:
        if known:
            with _sampler:
                _sampler_asked.remove(ms)
                init.__defaults__ = ((min(*_sampler_asked, _sampler_beams[0]),)
                                     if _sampler_asked else _sampler_beams)


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

# --- the wheel ------------------------------------------------------------------------
# Built from the installed package's own files (whatever way it was installed: a wheel,
# a source tree, an editable install), so a Dataflow job always runs the same code as
# the process that submitted it, and users never build one by hand. Its metadata
# requires only what the workers use (Pillow, google-crc32c, gcsfs, NumPy): a worker
# writes shards and never imports TensorFlow or pandas, so installing them there would
# cost minutes per worker for nothing.

#: Requirements of the code that runs on workers (shard, image, example, records, storage).
WORKER_REQUIREMENTS = ("pillow>=10.0", "google-crc32c>=1.5", "gcsfs>=2024.2", "numpy>=1.24")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


#: The distribution's name (setup.py): the package index's "tfrecorder" is another project.
DISTRIBUTION = "tfrecorder-tables"


def build_wheel(dest_dir: str) -> str:
    """Writes ``tfrecorder_tables-<version>-py3-none-any.whl`` into ``dest_dir``; returns
    its path."""
    from tfrecorder._version import __version__ as version

    package_dir = os.path.dirname(os.path.abspath(__file__))
    stem = f"{DISTRIBUTION.replace('-', '_')}-{version}"
    dist_info = f"{stem}.dist-info"
    files: list[tuple[str, bytes]] = []
    for root, dirs, names in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                arcname = os.path.relpath(path, os.path.dirname(package_dir)).replace(os.sep, "/")
                with open(path, "rb") as f:
                    files.append((arcname, f.read()))
    metadata = "\n".join([
        "Metadata-Version: 2.1", f"Name: {DISTRIBUTION}", f"Version: {version}",
        "Summary: tfrecorder, as staged to remote workers",
        *(f"Requires-Dist: {r}" for r in WORKER_REQUIREMENTS), "", ""]).encode()
    wheel = b"Wheel-Version: 1.0\nGenerator: tfrecorder\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files += [(f"{dist_info}/METADATA", metadata), (f"{dist_info}/WHEEL", wheel)]
    record = "\n".join([_record_line(n, d) for n, d in files] + [f"{dist_info}/RECORD,,", ""])
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, f"{stem}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in [*files, (f"{dist_info}/RECORD", record.encode())]:
            # A fixed date: the same sources give the same wheel. A ZipInfo is stored
            # uncompressed unless told otherwise, whatever the ZipFile's default.
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    return path
