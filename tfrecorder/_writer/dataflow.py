"""A Dataflow job: what DataflowRunner needs, checked before anything is written; the
job's flags, with the wheel of this tfrecorder it ships; its submission, which hands the
output folder's lock on to the job. Its own module because a Dataflow run is submitted
and left to run elsewhere, where every other runner is driven from this process.
"""

from __future__ import annotations

import logging
import re
import uuid

from tfrecorder._errors import ConfigError
from tfrecorder._folder.lock import Lock
from tfrecorder._writer.runners import Run, remove_local_tempdir
from tfrecorder._writer.wheel import build_wheel

log = logging.getLogger(__name__)


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


def run_dataflow(run: Run, lock: Lock):
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
            remove_local_tempdir(p)
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
