"""One shard task reading its images from gs:// with a per-request delay: reads in flight
against one at a time.

    python bench/make_corpus.py /tmp/corpus --images 10000
    python bench/gcs_reads_bench.py /tmp/corpus/data.csv [--images 300] [--delay-ms 30]

Starts a local GCS emulator (gcp-storage-emulator, in memory), uploads the first
``--images`` images of the CSV, and puts ``bench/latency_proxy.py`` in front of it, so
that every request waits ``--delay-ms`` as it would against Cloud Storage from a worker.
Then writes one shard of those images (``shard.write``, the shard step of the pipeline)
with ``shard.REMOTE_READ_THREADS`` set to 1 (the baseline: one read at a time) and to
the shipped setting, and prints images/s of each and the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

BUCKET = "bench"
# gcsfs probes a bucket's type over gRPC, which the emulator does not serve.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("the GCS emulator did not start")
            time.sleep(0.05)


#: The emulator's command (gcp-storage-emulator's own entry point), with a deeper queue of
#: connections waiting to be accepted. It serves one request at a time on Python's
#: HTTPServer, whose queue holds 5: a reader with 48 ranged requests in flight had some
#: connections dropped by the kernel, and each such client waited a second to try again,
#: a stall that no bucket of Cloud Storage has.
_EMULATOR = ("import http.server, sys\n"
             "http.server.HTTPServer.request_queue_size = 256\n"
             "from gcp_storage_emulator.__main__ import main\n"
             "sys.argv[0] = 'gcp-storage-emulator'\n"
             "sys.exit(main())")


@contextlib.contextmanager
def emulator(prefix: str):
    """A GCS emulator on a free port with the bench's bucket, and a scratch folder:
    ``(port, a gcsfs client straight to it, the folder)``; both gone at the end."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-c", _EMULATOR, "start", "--host", "127.0.0.1",
                               "--port", str(port), "--in-memory"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        _wait(port)
        import gcsfs

        direct = gcsfs.GCSFileSystem(token="anon", endpoint_url=f"http://127.0.0.1:{port}",
                                     skip_instance_cache=True)
        direct.mkdir(BUCKET)
        yield port, direct, work
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--delay-ms", type=float, default=30.0)
    args = ap.parse_args()

    with open(args.csv, newline="") as f:
        paths = [r["image_uri"] for r in csv.DictReader(f)][:args.images]
    proxy_port = _free_port()
    with emulator("gcs-reads-bench-") as (port, direct, work):
        uris = []
        for i, path in enumerate(paths):
            key = f"{BUCKET}/images/{i:06d}.jpg"
            direct.pipe(key, open(path, "rb").read())
            uris.append(f"gs://{key}")

        import latency_proxy

        proxy = latency_proxy.serve(f"127.0.0.1:{port}", proxy_port, args.delay_ms)
        os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{proxy_port}"

        from tfrecorder._writer import plan, shard
        from tfrecorder._folder import example
        from tfrecorder._folder import ledger
        from tfrecorder._inputs.block import Row

        rows = [Row(i, "train", uri, {"label": example.int64_feature([0])}, ("TRAIN", uri, 0))
                for i, uri in enumerate(uris)]
        task = plan.ShardTask("train", 0, 1, "bench-train.tfrecord-00000-of-00001", rows)
        shipped = shard.REMOTE_READ_THREADS
        figures = {}
        for threads in (1, shipped):
            shard.REMOTE_READ_THREADS = threads
            settings = shard.WriteSettings(
                ledger.RunFolder(os.path.join(work, f"out{threads}"), "bench"),
                ("split", "image_uri", "label"))
            start = time.perf_counter()
            stats, bad = shard.write(task, settings)
            seconds = time.perf_counter() - start
            assert stats.num_examples == len(uris) and not bad, (stats, bad)
            figures[threads] = len(uris) / seconds
            print(f"reads in flight {threads:>2}: {len(uris)} images in {seconds:6.2f} s, "
                  f"{figures[threads]:7.1f} images/s")
        shard.REMOTE_READ_THREADS = shipped
        proxy.shutdown()
        print(f"delay {args.delay_ms:g} ms per request; {shipped} in flight / 1 at a time: "
              f"{figures[shipped] / figures[1]:.1f}x")


if __name__ == "__main__":
    main()
