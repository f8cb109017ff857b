"""Any Beam runner: the same pipeline on Beam's PortableRunner and its embedded job
service (what Flink and Spark clusters are reached through), and runner names."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

import tfrecorder
from tests.conftest import SAMPLES, read_split, timeless


@pytest.mark.slow
def test_a_conversion_on_the_portable_runner_completes_and_verifies(tf, tmp_path):
    out = tmp_path / "out"
    result = tfrecorder.convert(
        os.path.join(SAMPLES, "data.csv"), str(out), runner="PortableRunner", num_shards=2,
        pipeline_options=["--job_endpoint=embed", "--environment_type=LOOPBACK"])
    assert result.rows_written == 36 and result.job_id.startswith("portable-")
    assert tfrecorder.verify(str(out)).records == 36
    direct = tmp_path / "direct"
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(direct), num_shards=2)
    files = [p.relative_to(direct) for p in direct.rglob("*") if p.is_file()]
    assert any(p.parts[0] == "index" for p in files)
    for name in files:  # the same bytes as on the DirectRunner, index files included
        # (the manifest's publishing time aside: the two runs may straddle a second)
        assert timeless(out / name) == timeless(direct / name), name
    assert len(read_split(tf, out, "train")) == 27


@pytest.mark.slow
def test_a_small_conversion_runs_its_steps_here_and_writes_what_beam_writes(tmp_path):
    import pandas as pd

    table = pd.read_csv(os.path.join(SAMPLES, "data.csv"))
    table["image_uri"] = SAMPLES + "/" + table["image_uri"]
    (tmp_path / "broken.jpg").write_bytes(b"not an image")  # one row for the quarantine
    table.loc[len(table)] = ["TRAIN", str(tmp_path / "broken.jpg"), table.label[0]]
    here = tfrecorder.convert(table, str(tmp_path / "here"), near_duplicates=True)
    # Any pipeline option runs the same conversion on Beam's DirectRunner, as asked.
    beam = tfrecorder.convert(table, str(tmp_path / "beam"), near_duplicates=True,
                              pipeline_options={"direct_num_workers": 1})
    assert here.job_id.startswith("here-") and beam.job_id.startswith("direct-")
    for r in (here, beam):
        assert (r.rows_written, r.rows_quarantined) == (36, 1)
    files = {p.relative_to(here.output_dir).as_posix()
             for p in (tmp_path / "here").rglob("*") if p.is_file()}
    assert files == {p.relative_to(beam.output_dir).as_posix()
                     for p in (tmp_path / "beam").rglob("*") if p.is_file()}
    assert {"quality.json", "errors.jsonl", "tfrecorder.json"} <= files
    for name in sorted(files):  # byte for byte, but the time published
        assert timeless(tmp_path / "here" / name) == timeless(tmp_path / "beam" / name), name


@pytest.mark.slow
def test_a_run_over_its_error_budget_fails_alike_here_and_on_beam(tmp_path):
    import pandas as pd

    from tests.conftest import encode

    paths = []
    for i in range(8):  # 3 of 8 are no images: found only as the shards are written
        paths.append(tmp_path / f"{i}.jpg")
        paths[-1].write_bytes(encode(seed=i) if i < 5 else b"not an image")
    table = pd.DataFrame({"split": "TRAIN", "image_uri": [str(p) for p in paths],
                          "label": ["a", "b"] * 4})
    said = {}
    for way, options in (("here", {}), ("beam", {"pipeline_options": {"direct_num_workers": 1}})):
        out = tmp_path / way
        with pytest.raises(tfrecorder.ConversionError) as e:
            tfrecorder.convert(table, str(out), **options)
        assert not (out / "tfrecorder.json").exists()  # nothing published
        said[way] = (str(e.value).replace(str(out), "OUT"),
                     (out / "errors.jsonl").read_text())
    assert said["here"] == said["beam"]
    assert said["here"][0].startswith("3 of 8 rows were quarantined: more than "
                                      "max_error_fraction=0.1")


@pytest.mark.slow
def test_a_small_conversion_imports_no_beam_in_a_library_call_or_the_command(tmp_path):
    code = ("import sys, tfrecorder\n"
            "from tfrecorder import _cli\n"
            f"r = tfrecorder.convert({os.path.join(SAMPLES, 'data.csv')!r}, "
            f"{str(tmp_path / 'lib')!r}, progress=False)\n"
            "print(r.job_id[:5], 'apache_beam' in sys.modules)\n"
            f"_cli.main(['convert', {os.path.join(SAMPLES, 'data.csv')!r}, "
            f"{str(tmp_path / 'cli')!r}, '--no-progress'])\n"
            "print('apache_beam' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=os.path.dirname(SAMPLES))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["here-", "False"] and lines[-1] == "False", done.stdout


@pytest.mark.parametrize("given,expected", [
    ("DirectRunner", "DirectRunner"), ("direct", "DirectRunner"),
    ("DataFlowRunner", "DataflowRunner"), ("flink", "FlinkRunner"),
    ("SparkRunner", "SparkRunner"), ("PortableRunner", "PortableRunner"),
    ("PrismRunner", "PrismRunner"), ("my.module.CustomRunner", "my.module.CustomRunner"),
])
def test_runner_names(given, expected):
    assert tfrecorder.Options(runner=given).runner == expected


def test_an_unknown_runner_is_named_with_a_suggestion():
    with pytest.raises(tfrecorder.ConfigError, match="'FlinkRuner' is not a Beam runner; did "
                                                     "you mean 'FlinkRunner'"):
        tfrecorder.Options(runner="FlinkRuner")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a conversion end to end
@pytest.mark.parametrize("runner,options,match", [
    ("FlinkRunner", {}, "runner='FlinkRunner' has no cluster given: give flink_master="),
    ("flink", {"flink_master": "127.0.0.1:{port}"},
     "nothing answers at flink_master='127.0.0.1:{port}'"),
    ("SparkRunner", {}, "runner='SparkRunner' has no cluster given: give spark_master_url="),
    ("PortableRunner", {}, "runner='PortableRunner' needs job_endpoint="),
    ("PortableRunner", {"job_endpoint": "127.0.0.1:{port}"},
     "nothing answers at job_endpoint='127.0.0.1:{port}'"),
    ("DaskRunner", {"dask_client_address": "tcp://127.0.0.1:{port}"},
     "nothing answers at dask_client_address='tcp://127.0.0.1:{port}'"),
])
def test_a_runner_that_cannot_start_fails_at_once_and_writes_nothing(tmp_path, runner,
                                                                     options, match):
    port = _closed_port()
    options = {k: v.format(port=port) for k, v in options.items()}
    out = tmp_path / "out"
    with pytest.raises(tfrecorder.ConfigError, match=re.escape(match.format(port=port))):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), runner=runner,
                           pipeline_options=options)
    assert not out.exists()  # the output folder untouched


@pytest.fixture
def dask_in_process():
    """A Dask scheduler and one worker, threads of this process, listening on tcp; the
    scheduler's HTTP server (the dashboard's: without bokeh it serves the rest of its
    pages) on a port of its own."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster:
        yield cluster


@pytest.mark.slow
def test_a_dask_address_that_is_not_the_scheduler_fails_in_seconds_and_locks_nothing(
        tmp_path, dask_in_process, request):
    # A Client given the dashboard's address (8787 for 8786) waits forever for Dask's
    # handshake, which a web server never sends: the conversion hung with its lock held.
    # Both kinds of web server: Dask's own dashboard, and any other.
    import http.server
    import subprocess
    import sys
    import threading

    from tfrecorder._writer import cluster

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    request.addfinalizer(web.shutdown)
    addresses = [f"tcp://127.0.0.1:{port}" for port in (
        dask_in_process.scheduler.http_server.port, web.server_address[1])]
    # In a process of its own: the old behaviour never returns. The same process then
    # converts into the same folder, while any lock it took would still be live.
    code = """
import json, os, sys, time
import tfrecorder
csv, out, *addresses = sys.argv[1:]
tried = []
for address in addresses:
    start = time.monotonic()
    try:
        tfrecorder.convert(csv, out, runner="DaskRunner", num_shards=2,
                           pipeline_options={"dask_client_address": address})
        error = None
    except tfrecorder.ConfigError as e:
        error = str(e)
    tried.append([error, time.monotonic() - start, os.path.exists(out)])
rows = tfrecorder.convert(csv, out, num_shards=2).rows_written
print(json.dumps([tried, rows]))
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(tfrecorder.__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", code, os.path.join(SAMPLES, "data.csv"),
                           str(out), *addresses], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    tried, rows = json.loads(done.stdout.splitlines()[-1])
    assert len(tried) == 2
    for address, (error, seconds, written) in zip(addresses, tried):
        assert error is not None and f"dask_client_address={address!r}" in error
        assert "does not answer as a Dask scheduler" in error and "tcp://host:8786" in error
        assert "dashboard on port 8787" in error
        # the check's bound, and the imports of a first conversion on a busy machine
        assert seconds < 3 * cluster.CONNECT_TIMEOUT
        assert not written
    assert rows == 36


def test_a_dask_workers_address_is_refused_naming_the_schedulers(dask_in_process):
    from tfrecorder._writer import cluster

    worker = next(iter(dask_in_process.workers.values())).address
    with pytest.raises(tfrecorder.ConfigError, match=re.escape(
            f"dask_client_address={worker!r} accepts a connection but does not answer as "
            f"a Dask scheduler (it is a Dask Worker, not the scheduler); give the "
            f"scheduler's address, tcp://host:8786")):
        cluster.check(tfrecorder.Options(runner="DaskRunner",
                                         pipeline_options={"dask_client_address": worker}))
    cluster.check(tfrecorder.Options(runner="DaskRunner", pipeline_options={
        "dask_client_address": dask_in_process.scheduler_address}))


def test_a_local_flink_needs_a_jar_file_given(tmp_path):
    with pytest.raises(tfrecorder.ConfigError, match="flink_job_server_jar='/no/such.jar' "
                                                     "is not a file"):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(tmp_path / "out"),
                           runner="FlinkRunner", pipeline_options=[
                               "--flink_master=[local]", "--flink_job_server_jar=/no/such.jar"])
    assert not (tmp_path / "out").exists()


def test_dask_runner_names():
    for given in ("DaskRunner", "dask", "DASKRUNNER",
                  "apache_beam.runners.dask.dask_runner.DaskRunner"):
        assert tfrecorder.Options(runner=given).runner == "DaskRunner"


def _sampling_periods(monkeypatch) -> list[int]:
    """The state sampler's period as each image is read, seen from inside the bundle as
    Beam runs it: the tracker of the step that reads the images."""
    from apache_beam.runners.worker import statesampler
    from tfrecorder import _storage as storage

    periods = []
    read = storage.read_file_stamped

    def reading(*args, **kwargs):
        periods.append(statesampler.get_current_tracker().sampling_period_ms)
        return read(*args, **kwargs)

    monkeypatch.setattr(storage, "read_file_stamped", reading)
    return periods


@pytest.mark.slow
def test_only_the_command_shortens_beams_state_sampler(tmp_path, monkeypatch):
    # The bundle that writes the shards would otherwise wait up to 200 ms at its end for
    # the sampler's sleep (docs/performance.md); shorter ticks change Beam's default for
    # every pipeline of the process, which only the command may do, in its own.
    from apache_beam.runners.worker import statesampler
    from tfrecorder import _cli

    beams = statesampler.StateSampler.__init__.__defaults__
    assert beams == (200,)
    periods = _sampling_periods(monkeypatch)
    try:
        # A pipeline option: the small conversion runs on Beam, not in this process.
        with pytest.warns(DeprecationWarning, match="beam_sampler_ms= has no effect"):
            tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(tmp_path / "lib"),
                               beam_sampler_ms=20, pipeline_options={"direct_num_workers": 1})
        assert len(periods) == 36 and set(periods) == {200}
        periods.clear()
        assert _cli.main(["convert", os.path.join(SAMPLES, "data.csv"),
                          str(tmp_path / "cli"), "--no-progress",
                          "--direct_num_workers=1"]) == 0
        assert len(periods) == 36 and set(periods) == {20}
        assert statesampler.StateSampler.__init__.__defaults__ == beams  # put back after
    finally:
        statesampler.StateSampler.__init__.__defaults__ = beams


def test_a_sampler_period_that_is_no_whole_number_of_ms_is_refused_by_the_command(capsys):
    from tfrecorder import _cli_parser

    parser = _cli_parser.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["convert", "a.csv", "out", "--beam-sampler-ms", "0"])
    assert "'0': give a whole number of ms from 1" in capsys.readouterr().err


def test_beam_sampler_ms_is_no_option_but_old_code_still_runs():
    from tfrecorder import _cli_parser

    parser = _cli_parser.build_parser()
    assert "beam_sampler_ms" not in {f.name for f in dataclasses.fields(tfrecorder.Options)}
    with pytest.warns(DeprecationWarning, match="beam_sampler_ms= has no effect"):
        assert tfrecorder.Options(beam_sampler_ms=20) == tfrecorder.Options()
    with pytest.warns(DeprecationWarning, match="beam_sampler_ms= has no effect"):
        tfrecorder.Options.from_kwargs(beam_sampler_ms=20)
    assert parser.parse_args(["convert", "a.csv", "out"]).beam_sampler_ms == 20
    assert parser.parse_args(["convert", "a.csv", "out", "--beam-sampler-ms", "50"]
                             ).beam_sampler_ms == 50


def test_a_beam_whose_sampler_takes_its_period_otherwise_is_left_as_it_is(monkeypatch):
    from apache_beam.runners.worker import statesampler
    from tfrecorder._writer.sampler import short_sampler_ticks

    class Other:  # one int default, but not the period's
        def __init__(self, prefix, counter_factory, sampling_period_ms, ratio=300):
            pass

    monkeypatch.setattr(statesampler, "StateSampler", Other)
    with short_sampler_ticks(20):
        assert Other.__init__.__defaults__ == (300,)
    assert Other.__init__.__defaults__ == (300,)


def test_the_commands_sampler_period_is_put_back_however_the_run_ends():
    from apache_beam.runners.worker import statesampler
    from tfrecorder._writer.sampler import short_sampler_ticks

    init = statesampler.StateSampler.__init__
    beams = init.__defaults__
    try:
        with pytest.raises(RuntimeError):
            with short_sampler_ticks(10):
                assert init.__defaults__ == (10,)
                raise RuntimeError("a run that fails")
        assert init.__defaults__ == beams
        with short_sampler_ticks(500):  # never longer than Beam's own
            assert init.__defaults__ == beams
        assert init.__defaults__ == beams
    finally:  # the rest of the session's conversions as Beam has them
        init.__defaults__ = beams
