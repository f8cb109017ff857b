"""Running a conversion from this process: Beam's DirectRunner (its FnApiRunner in this
process or in one worker process per core), any other Beam runner but Dataflow driven
from here, or an update's steps run here without Beam; with a progress bar where one
shows. Its own module because only these runs watch progress and pick Beam's local
runner.
"""

from __future__ import annotations

import contextlib
import uuid

from tfrecorder._errors import TFRecorderError
from tfrecorder._writer import publishing, sampler
from tfrecorder._writer.cluster import dask_arguments, dask_in_notebooks
from tfrecorder._writer.runners import Run, beam_runner, explained, remove_local_tempdir


def run_direct(run: Run) -> str | None:
    """Runs the conversion from this process (the DirectRunner, or any Beam runner but
    Dataflow), with a progress bar where one shows."""
    import shutil
    import tempfile

    from tfrecorder._writer import progress

    go = _run_here if run.without_beam else _run_beam
    # Shard writers report progress to a folder on this machine: other runners' workers
    # may run elsewhere. A run that writes no shard has no progress to show.
    if (run.opts.runner != "DirectRunner" or not run.shards
            or not progress.wanted(run.opts.progress)):
        return go(run, None)
    folder = tempfile.mkdtemp(prefix="tfrecorder-progress-")  # local, even for gs:// output
    try:
        return progress.watch(lambda: go(run, folder), run.records, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_here(run: Run, progress_dir: str | None) -> str | None:
    """The steps of the pipeline run in this process, without Beam (``Run.without_beam``);
    a failed run's error budget is explained as Beam's runs explain it."""
    from tfrecorder._writer import steps

    steps.run_here(run.task_dir, len(run.shards), run.settings, run.spec, progress_dir,
                   kept=run.kept, rows_read=run.rows_read)
    failure = publishing.budget_failure(run.settings.run, run.spec)
    if failure is not None:
        raise explained(failure, run.settings.run)
    # A run that wrote no shard (an update that only retires records) ran no job to name.
    return f"here-{uuid.uuid4().hex[:12]}" if run.shards else None


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
        if run.workers > 1 and not run.opts.flag_value(WORKER_LOG_LEVEL):
            extra[WORKER_LOG_LEVEL] = _worker_log_level()
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
                  else contextlib.nullcontext()), sampler.while_beam_runs(), p:
                pipeline.build(p, run.task_dir, len(run.shards), run.settings, run.spec,
                               progress_dir, kept=run.kept)
        finally:
            # Beam's Dask runner connects a Client of its own and leaves it open.
            client = getattr(getattr(p, "result", None), "client", None)
            if client is not None:
                client.close()
        failure = publishing.budget_failure(run.settings.run, run.spec)  # from its errors file
        if failure is not None:
            raise explained(failure, run.settings.run)
    except TFRecorderError:
        raise
    except Exception:
        # The runner wraps a failed step in its own exception (from a worker process, as
        # text). The error budget's failure is recognised by the files the step left;
        # Beam's chain of frames around it says nothing a user can act on.
        failure = publishing.budget_failure(run.settings.run, run.spec)
        if failure is not None:
            raise explained(failure, run.settings.run) from None
        raise
    finally:
        remove_local_tempdir(p)
    return job_id


#: Beam's option for the root level of its worker processes' logging (INFO if unset).
WORKER_LOG_LEVEL = "default_sdk_harness_log_level"


def _worker_log_level() -> str:
    """The level of the DirectRunner's worker processes: they are the run's, started for
    it, and Beam relays what they log into this process's ``apache_beam`` logger, at
    every start ("No semi_persistent_directory found", flags a worker discards). INFO
    when this process's ``apache_beam`` logger would show INFO (its user asked), else
    ERROR. This process's own logging is its user's and is left as it is."""
    import logging

    return "INFO" if logging.getLogger("apache_beam").isEnabledFor(logging.INFO) else "ERROR"


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
