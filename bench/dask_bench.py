"""Rows/s of a conversion on a real Dask cluster with 1 and 2 worker processes, against
the DirectRunner in the same script.

    python bench/make_corpus.py /tmp/corpus --images 10000
    python bench/dask_bench.py /tmp/corpus/data.csv [--shards 8]

For each worker count, starts a Dask scheduler and that many single-threaded worker
processes on 127.0.0.1 (``python -m distributed.cli.dask_scheduler`` / ``dask_worker``,
as a user's ``dask scheduler`` / ``dask worker``), converts the CSV with
``runner="DaskRunner"``, and stops them. The baseline is the same conversion on the
DirectRunner with default options. Wall time includes planning and staging in this
process and the last step; cluster start-up is not included. Prints rows/s of each and
the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster(workers: int, folder: str):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                               "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              env=env, cwd=folder, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    address = f"tcp://127.0.0.1:{port}"
    for i in range(workers):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
             "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
             "--local-directory", os.path.join(folder, f"w{i}")],
            env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(workers, timeout=120)
    return address, procs


def _stop(procs) -> None:
    import signal

    for p in procs:
        p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--shards", type=int, default=8)
    args = ap.parse_args()

    import tfrecorder

    work = tempfile.mkdtemp(prefix="dask-bench-")
    figures = {}
    try:
        def timed(label, **kw):
            out = os.path.join(work, label)
            start = time.perf_counter()
            result = tfrecorder.convert(args.csv, out, num_shards=args.shards, progress=False,
                                        **kw)
            seconds = time.perf_counter() - start
            figures[label] = result.rows_written / seconds
            print(f"{label:>14}: {result.rows_written} rows in {seconds:6.1f} s, "
                  f"{figures[label]:6.0f} rows/s")
            shutil.rmtree(out)

        timed("DirectRunner")
        for n in (1, 2):
            address, procs = _cluster(n, work)
            try:
                timed(f"Dask {n} worker" + ("s" if n > 1 else ""), runner="DaskRunner",
                      pipeline_options={"dask_client_address": address})
            finally:
                _stop(procs)
        one, two = figures["Dask 1 worker"], figures["Dask 2 workers"]
        print(f"Dask 2 workers / 1 worker: {two / one:.2f}x; "
              f"Dask 2 workers / DirectRunner: {two / figures['DirectRunner']:.2f}x; "
              f"cores: {os.cpu_count()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
