"""The submitting process at scale: wall time and peak memory to stage a big table for Dataflow.

    python bench/driver_bench.py                       # 200,000 / 1,000,000 / 2,000,000 rows
    python bench/driver_bench.py --rows 200000 10000000
    python bench/driver_bench.py --dataframe          # the same tables as DataFrames
    python bench/driver_bench.py --quoted             # every CSV field in quotes
    python bench/driver_bench.py --gcs-csv            # the CSV read from gs://

For each size, a CSV of that many rows of gs:// image URIs (10 splits' worth of files per
split, 1,000 labels) is converted with runner="DataflowRunner" and Beam's --dry_run (the
job is built, nothing is submitted) against a local GCS emulator, in a fresh process, so
that its peak resident memory is the driver's own. Prints rows, driver wall seconds, peak
RSS (MiB), the job graph's size in bytes, and the ratio of each peak to the first size's.
The baseline is the first size: the driver's memory should not grow with the table.

With ``--dataframe`` each table is read into a pandas DataFrame first, and the figure is
what the conversion adds on top of it: the peak resident memory during the conversion
(Linux's VmHWM, reset once the frame is built) minus the resident memory with the frame,
against the frame's own ``memory_usage(deep=True)``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("NO_GCE_CHECK", "true")

BUCKET = "bench"

_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
import tfrecorder
csv_path, out = sys.argv[1], sys.argv[2]
job = tfrecorder.convert(csv_path, out, runner="DataflowRunner", project="bench",
                         region="us-central1", overwrite=True,
                         pipeline_options={"dry_run": True, "no_auth": True})
wall = time.perf_counter() - start
graph = len(job.job.proto_pipeline.SerializeToString())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall": wall, "peak_mib": peak, "graph_bytes": graph}))
"""

_CHILD_FRAME = """
import gc, json, sys, time
import pandas as pd
import tfrecorder

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024

df = pd.read_csv(sys.argv[1])
frame_mib = df.memory_usage(deep=True).sum() / 2**20
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak (VmHWM) to the current resident memory
base = status("VmRSS")
start = time.perf_counter()
job = df.tensorflow.to_tfrecord(sys.argv[2], runner="DataflowRunner", project="bench",
                                region="us-central1", overwrite=True,
                                pipeline_options={"dry_run": True, "no_auth": True})
wall = time.perf_counter() - start
added = status("VmHWM") - base
print(json.dumps({"wall": wall, "frame_mib": frame_mib, "added_mib": added,
                  "peak_mib": status("VmHWM"), "graph_bytes": 0}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_csv(path: str, rows: int, quoted: bool = False) -> None:
    """The benchmark's CSV; ``quoted``: every field in quotes (as R's write.csv and
    csv.QUOTE_ALL write them), which the csv module reads instead of the fast reader."""
    splits = ["TRAIN"] * 8 + ["VALIDATION", "TEST"]
    q = '"' if quoted else ""
    with open(path, "w") as f:
        f.write(f"{q}split{q},{q}image_uri{q},{q}label{q}\n")
        for i in range(rows):
            f.write(f"{q}{splits[i % 10]}{q},{q}gs://{BUCKET}/photos/{i // 1000:05d}/"
                    f"{i:09d}.jpg{q},{q}label_{i % 1000:04d}{q}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000, 1_000_000, 2_000_000])
    ap.add_argument("--dataframe", action="store_true",
                    help="convert DataFrames: the memory added on top of the frame")
    ap.add_argument("--quoted", action="store_true",
                    help="every CSV field in quotes (read by Python's csv module)")
    ap.add_argument("--gcs-csv", action="store_true",
                    help="the CSV itself on gs:// (the emulator), streamed from there")
    args = ap.parse_args()

    port = _free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "gcp-storage-emulator")
    emulator = subprocess.Popen([exe, "start", "--host", "127.0.0.1", "--port", str(port),
                                 "--in-memory"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    env = {**os.environ, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("the GCS emulator did not start")
                time.sleep(0.1)
        os.environ.update(env)
        import gcsfs

        gcsfs.GCSFileSystem(token="anon").mkdir(BUCKET)
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            for rows in args.rows:
                csv_path = os.path.join(tmp, f"rows-{rows}.csv")
                write_csv(csv_path, rows, args.quoted)
                source = csv_path
                if args.gcs_csv:
                    source = f"gs://{BUCKET}/tables/rows-{rows}.csv"
                    gcsfs.GCSFileSystem(token="anon").put_file(csv_path, source)
                proc = subprocess.run(
                    [sys.executable, "-c", _CHILD_FRAME if args.dataframe else _CHILD,
                     source, f"gs://{BUCKET}/out-{rows}"],
                    env=env, capture_output=True, text=True)
                if proc.returncode:
                    sys.exit(proc.stderr[-3000:])
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                results.append((rows, r))
                if args.dataframe:
                    print(f"{rows:>11,} rows: conversion {r['wall']:6.1f} s, the frame "
                          f"{r['frame_mib']:6.0f} MiB, added on top {r['added_mib']:6.0f} MiB "
                          f"({r['added_mib'] / r['frame_mib']:.2f}x the frame)", flush=True)
                else:
                    print(f"{rows:>11,} rows: driver {r['wall']:6.1f} s, peak RSS "
                          f"{r['peak_mib']:7.0f} MiB, job graph {r['graph_bytes']:,} bytes",
                          flush=True)
                os.remove(csv_path)
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)
    if args.dataframe:
        return
    base = results[0][1]["peak_mib"]
    print(f"\n| rows | driver wall | driver peak RSS | vs {results[0][0]:,} rows | job graph bytes |")
    print("|---|---|---|---|---|")
    for rows, r in results:
        print(f"| {rows:,} | {r['wall']:.1f} s | {r['peak_mib']:,.0f} MiB | "
              f"{r['peak_mib'] / base:.2f}x | {r['graph_bytes']:,} |")


if __name__ == "__main__":
    main()
