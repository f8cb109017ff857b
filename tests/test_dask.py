"""Beam's Dask runner on a real Dask cluster: a scheduler and two worker processes started
as separate OS processes on 127.0.0.1, which import tfrecorder as any Dask worker would."""

import os
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

import tfrecorder
from tfrecorder._folder import layout
from tfrecorder._writer import cluster
from tests.conftest import SAMPLES, _free_port, timeless, write_images

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A cluster of scheduler and worker processes: seconds each.
pytestmark = pytest.mark.slow


class Cluster:
    def __init__(self, address: str, workers: list):
        self.address = address
        self.workers = workers


@pytest.fixture
def dask_cluster(tmp_path):
    """A cluster of the test's own (``_cluster``): one whose workers it kills or asks
    what they imported."""
    yield from _cluster(tmp_path)


@pytest.fixture(scope="module")
def dask_cluster_shared(tmp_path_factory):
    """A cluster (``_cluster``) for the tests that only convert on it or connect to it,
    none of which stops a worker or asks what a worker imported before it."""
    yield from _cluster(tmp_path_factory.mktemp("dask"))


def _cluster(tmp_path):
    """A scheduler and two single-threaded worker processes (no nanny: a killed worker
    stays dead); every process is stopped at the end, whatever happened."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    log = open(tmp_path / "dask.log", "wb")
    procs = []

    def start(*args):
        procs.append(subprocess.Popen([sys.executable, "-m", *args], env=env,
                                      cwd=str(tmp_path), stdout=log, stderr=log))
        return procs[-1]

    try:
        start("distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
              "--no-dashboard")
        workers = [start("distributed.cli.dask_worker", address, "--nthreads", "1",
                         "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                         "--local-directory", str(tmp_path / f"worker{i}"))
                   for i in range(2)]
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield Cluster(address, workers)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        # Most stop at once on it; one that is still closing its connections after a
        # moment is killed (waiting 10 s for each such process made up most of a test).
        deadline = time.monotonic() + 2
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


def _files(folder) -> dict:
    """Every file of a complete output (not the run folders), index, rows and versions
    files included, by relative path: its bytes, but for the time a manifest was
    published and the images' modification times in rows files (``timeless``)."""
    return {p.relative_to(folder).as_posix(): timeless(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.relative_to(folder).as_posix().startswith(".")}


def test_a_conversion_on_a_dask_cluster_equals_the_direct_runners(dask_cluster_shared,
                                                                   tmp_path):
    dask_cluster = dask_cluster_shared
    from distributed import Client

    csv = os.path.join(SAMPLES, "data.csv")
    out, direct = tmp_path / "out", tmp_path / "direct"
    result = tfrecorder.convert(csv, str(out), runner="daskrunner", num_shards=3,
                                pipeline_options={"dask_client_address": dask_cluster.address})
    tfrecorder.convert(csv, str(direct), num_shards=3)
    assert result.runner == "DaskRunner" and result.job_id.startswith("dask-")
    assert result.rows_written == 36
    assert _files(out) == _files(direct)  # byte for byte, manifest and errors included
    assert [n for n in os.listdir(out) if n.startswith(".")] == []  # no run folder left
    assert all(w.poll() is None for w in dask_cluster.workers)  # the cluster is still up
    with Client(dask_cluster.address) as client:  # the shards were written by its workers
        imported = client.run(lambda: (os.getpid(), "tfrecorder._writer.shard" in sys.modules))
    assert any(done for pid, done in imported.values())
    assert os.getpid() not in {pid for pid, _ in imported.values()}


def test_a_connected_client_is_the_cluster_used(dask_cluster_shared):
    dask_cluster = dask_cluster_shared
    from distributed import Client

    opts = tfrecorder.Options(runner="dask")
    with Client(dask_cluster.address):
        flags, _ = cluster.dask_arguments(opts)
        assert f"--dask_client_address={dask_cluster.address}" in flags
    flags, _ = cluster.dask_arguments(opts)
    assert not any(f.startswith("--dask_client_address") for f in flags)  # none connected
    given = tfrecorder.Options(runner="DaskRunner", pipeline_options={
        "dask_npartitions": 4, "dask_client_address": "tcp://h:1", "max_num_workers": 2})
    assert cluster.dask_arguments(given) == (
        ["--dask_npartitions=4", "--dask_client_address=tcp://h:1"], {"max_num_workers": 2})


def test_a_worker_killed_mid_run_gives_a_whole_output_or_a_clean_failure(dask_cluster,
                                                                         tmp_path):
    (tmp_path / "img").mkdir()
    paths = write_images(tmp_path / "img", 240)
    frame = pd.DataFrame({"split": "TRAIN", "image_uri": paths,
                          "label": [f"l{i % 3}" for i in range(len(paths))]})
    out, direct = tmp_path / "out", tmp_path / "direct"
    tfrecorder.convert(frame.iloc[:20], str(out), num_shards=2)  # a previous output
    before = _files(out)
    tfrecorder.convert(frame, str(direct), num_shards=24, check="decode")
    outcome = {}

    def run():
        try:
            outcome["result"] = tfrecorder.convert(
                frame, str(out), runner="DaskRunner", num_shards=24, check="decode",
                mode="overwrite",
                pipeline_options={"dask_client_address": dask_cluster.address})
        except Exception as e:  # the failure is part of what the test checks
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    victim = dask_cluster.workers[0]
    shards_at_kill = None
    deadline = time.monotonic() + 300
    while thread.is_alive() and time.monotonic() < deadline:
        tmp = out / layout.TMP_DIR
        written = [n for _, _, names in os.walk(tmp) for n in names
                   if ".tfrecord-" in n and not n.endswith((".part", ".task"))] if tmp.exists() else []
        if written:
            shards_at_kill = len(written)
            victim.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    thread.join(timeout=600)
    assert not thread.is_alive()
    assert shards_at_kill is not None and shards_at_kill < 24  # killed mid-run
    assert victim.wait(timeout=30) == -signal.SIGKILL
    if "error" in outcome:  # a clean failure: the previous output as it was
        assert _files(out) == before, outcome["error"]
        assert tfrecorder.verify(str(out)).records == 20
    else:  # a whole, correct output, the same as the DirectRunner's
        assert outcome["result"].rows_written == 240
        assert _files(out) == _files(direct)


@pytest.mark.slow
def test_from_a_notebook_with_a_connected_client(dask_cluster, tmp_path):
    """A notebook's connected Client is the cluster used, without naming its address."""
    import nbformat
    from nbclient import NotebookClient

    out, direct = tmp_path / "out", tmp_path / "direct"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(f"from distributed import Client\n"
                                  f"client = Client({dask_cluster.address!r})"),
        nbformat.v4.new_code_cell(
            f"import tfrecorder\n"
            f"result = tfrecorder.convert({os.path.join(SAMPLES, 'data.csv')!r}, "
            f"{str(out)!r}, runner='DaskRunner', num_shards=3, progress=False)\n"
            f"print(result.rows_written, result.runner)"),
        nbformat.v4.new_code_cell("import os, sys\n"
                                  "print(sorted(client.run(lambda: 'tfrecorder._writer.shard' in "
                                  "sys.modules).values()))"),
    ])
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    texts = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]
    assert texts[1].strip() == "36 DaskRunner"
    assert "True" in texts[2]  # the cluster's workers wrote the shards
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(direct), num_shards=3)
    assert _files(out) == _files(direct)


@pytest.mark.slow
def test_without_a_cluster_beam_starts_a_local_one_and_stops_it(tmp_path):
    import psutil

    def workers():
        return [p.pid for p in psutil.Process().children(recursive=True)
                if "multiprocessing.resource_tracker" not in " ".join(p.cmdline())]

    before = workers()
    out, direct = tmp_path / "out", tmp_path / "direct"
    result = tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), runner="dask",
                                num_shards=3)
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(direct), num_shards=3)
    assert result.rows_written == 36 and _files(out) == _files(direct)
    assert workers() == before  # the local cluster's worker processes are gone
