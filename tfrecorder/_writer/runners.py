"""What every runner shares: the one ``Run`` a runner is given, the settings derived from
the options (shards, workers), Beam's names of runners and flags, and what follows a run
(a failure explained and cleaned up).

The runners themselves are modules of their own: ``direct`` (this process or its worker
processes, and any other runner driven from here), ``cluster`` (what Flink, Spark,
Portable and Dask need to start), ``dataflow`` (a Dataflow job) and ``wheel`` (the code
a Dataflow job ships). With ``pipeline``, these are the only modules of the driver that
import Beam.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from tfrecorder import _storage as storage
from tfrecorder._folder import layout, ledger
from tfrecorder._writer import plan, run_metadata, shard

#: Beam's Dask runner, which Beam does not list among its runner names.
DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"


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


@dataclasses.dataclass(frozen=True)
class Run:
    """Everything a runner needs to run one planned conversion."""

    opts: object                    # the run's Options
    task_dir: str                   # the staged shard tasks
    shards: tuple                   # their shard names, in plan order
    settings: shard.WriteSettings   # where and how shards are written
    spec: run_metadata.DatasetSpec  # what the last step writes
    records: int                    # records the tasks will write
    workers: int                    # DirectRunner workers (1: in this process)
    kept: int = 0                   # shards an update keeps, read for the data report
    update: bool = False            # an update (mode "update" or "append")
    #: The kept shards' rows files as the update read them (rows file -> entries), for
    #: an update run here (``without_beam``): not read twice.
    rows_read: dict | None = None

    @property
    def without_beam(self) -> bool:
        """A run the DirectRunner would run in this process on one worker, a conversion
        or an update, with no pipeline options of the user's: its steps run here without
        importing Beam (``steps.run_here``), whose import and start-up cost more than a
        small run's work. An update that writes no shard (it only retires records) runs
        here on any runner: no worker has anything to do."""
        return (self.update and not self.shards) or (
            self.opts.runner == "DirectRunner" and self.workers == 1
            and not self.opts.pipeline_options)

    @property
    def output_dir(self) -> str:
        return self.settings.run.output_dir


def after_failure(run: Run) -> None:
    """Removes what a failed local run wrote into its folder, but its ledger and errors."""
    folder = run.settings.run.folder
    for name in storage.listdir(folder):
        if name not in (ledger.LEDGER, layout.ERRORS):
            storage.remove(storage.join(folder, name))


def parallel_shards(opts) -> int:
    """The least shards a large enough split gets: the workers the options ask for
    (``num_workers``, Dataflow's ``max_num_workers``), else ``plan.PARALLEL_SHARDS``.
    Never this machine's core count: the same options give the same files anywhere."""
    value = opts.flag_value("max_num_workers") or opts.flag_value("num_workers")
    given = int(value) if value and value.isdigit() else None
    return opts.num_workers or given or plan.PARALLEL_SHARDS


#: Rows below which the DirectRunner runs in this process: starting worker processes
#: (each imports Beam, about 2 s) costs more than it saves below this (docs/performance.md).
IN_PROCESS_MAX_ROWS = 20_000


def local_workers(opts) -> int:
    """Workers the DirectRunner runs (one per core, unless ``num_workers`` says)."""
    return opts.num_workers or os.cpu_count() or 1


def explained(failure: Exception, run: ledger.RunFolder) -> Exception:
    """``failure``, with how relative image paths were resolved when images were not
    found: the one fact a wrong working directory hides."""
    hint = _resolution_hint(run)
    if hint is None:
        return failure
    parts = getattr(failure, "parts", None)
    if parts is None:
        return type(failure)(f"{failure} {hint}")
    # The hint is the fix, more exact than the message's own: it takes its place,
    # right after what happened and before the rows.
    head, _, rest = parts
    explained_failure = type(failure)(f"{head} {hint} {rest}")
    explained_failure.parts = (head, hint, rest)
    return explained_failure


def _resolution_hint(run: ledger.RunFolder) -> str | None:
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
                        f"against its own folder): give the folder they are relative to "
                        f"as images_dir= (--images-dir on the command line), run from "
                        f"it, or make them absolute.")
    return None


def remove_local_tempdir(p) -> None:
    """Beam leaves a pipeline's local temporary folder behind inside IPython (it expects
    its interactive mode to clean up); nothing of ours may stay in TMPDIR."""
    import shutil

    shutil.rmtree(getattr(p, "local_tempdir", ""), ignore_errors=True)
