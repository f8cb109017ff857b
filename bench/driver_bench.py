"""The submitting process at scale: wall time and peak memory to stage a big table for Dataflow.

    python bench/driver_bench.py                       # 200,000 / 1,000,000 / 2,000,000 rows
    python bench/driver_bench.py --rows 200000 10000000
    python bench/driver_bench.py --dataframe          # the same tables as DataFrames
    python bench/driver_bench.py --quoted             # every CSV field in quotes
    python bench/driver_bench.py --gcs-csv            # the CSV read from gs://
    python bench/driver_bench.py --table multi-label  # each image on two rows, two labels
    python bench/driver_bench.py --table detection    # AutoML detection rows, two boxes an image
    python bench/driver_bench.py --table directory --rows 20000 200000   # an image tree
    python bench/driver_bench.py --table classes --cli --rows 200000 2000000
    python bench/driver_bench.py --table classes --cli --against HEAD~1  # before and after

For each size, a CSV of that many rows of gs:// image URIs (10 splits' worth of files per
split, 1,000 labels) is converted with runner="DataflowRunner" and Beam's --dry_run (the
job is built, nothing is submitted) against a local GCS emulator, in a fresh process, so
that its peak resident memory is the driver's own. Prints rows, driver wall and CPU
seconds, peak RSS (MiB), the job graph's size in bytes, and the ratio of each peak to
the first size's. The baseline is the first size: the driver's memory should not grow
with the table.

``--table`` picks the kind of table: ``plain`` (one row per image, the default),
``classes`` (one row per image too, each in its class's folder:
``gs://bench/images/class_0123/img_00012345.jpg`` labelled ``class_0123``),
``multi-label`` (every image on two rows far apart, with two labels: the second half of
the table lists the first half's images again), ``detection`` (AutoML object-detection
rows, two boxes per image, far apart likewise) and ``directory`` (an image tree
``DIR/train/<label>/<file>`` of that many files, hard links of one small JPEG,
converted for real on the DirectRunner; the peak is the submitting process's, whose
workers are processes of their own).

``--cli`` runs the ``tfrecorder convert`` command instead of the Python call (``python -m
tfrecorder convert CSV gs://... --runner DataflowRunner ... --dry_run=True``), as a user
does from a shell; its peak is the command's own (``os.wait4``). The command checks
Beam's flags before it reads the table, so Beam (about 100 MiB) is already imported
while the table is read: the driver's own memory per row then adds to it, where the
Python call imports Beam only after the table is staged.

``--against REV`` measures each size twice, in turn: with the package as of git
revision ``REV`` of this checkout (extracted to a temporary folder), then with the
current one, and prints both. ``--runs N`` measures each N times, interleaved, and
prints the medians.

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
import statistics
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
                         region="us-central1", mode="overwrite",
                         pipeline_options={"dry_run": True, "no_auth": True})
wall = time.perf_counter() - start
graph = len(job.job.proto_pipeline.SerializeToString())
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
                  "peak_mib": usage.ru_maxrss / 1024, "graph_bytes": graph}))
"""

_CHILD_DIRECTORY = """
import json, resource, sys, time
start = time.perf_counter()
import tfrecorder
result = tfrecorder.convert(sys.argv[1], sys.argv[2], mode="overwrite", progress=False)
wall = time.perf_counter() - start
assert result.rows_written == int(sys.argv[3]), result
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
                  "peak_mib": usage.ru_maxrss / 1024, "graph_bytes": 0}))
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
                                region="us-central1", mode="overwrite",
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


def write_csv(path: str, rows: int, quoted: bool = False, table: str = "plain") -> None:
    """The benchmark's CSV; ``quoted``: every field in quotes (as R's write.csv and
    csv.QUOTE_ALL write them). ``table``: see the module's help."""
    splits = ["TRAIN"] * 8 + ["VALIDATION", "TEST"]
    q = '"' if quoted else ""
    half = rows // 2

    def image(i):
        return f"gs://{BUCKET}/photos/{i // 1000:05d}/{i:09d}.jpg"

    with open(path, "w") as f:
        if table in ("plain", "classes"):
            f.write(f"{q}split{q},{q}image_uri{q},{q}label{q}\n")
        for i in range(rows):
            if table == "classes":  # each image in its class's folder
                c = i % 1000
                f.write(f"{q}{splits[i % 10]}{q},{q}gs://{BUCKET}/images/class_{c:04d}/"
                        f"img_{i:08d}.jpg{q},{q}class_{c:04d}{q}\n")
                continue
            if table == "plain":
                f.write(f"{q}{splits[i % 10]}{q},{q}{image(i)}{q},{q}label_{i % 1000:04d}{q}\n")
                continue
            k = i % half  # the second half of the rows lists the first half's images again
            if table == "multi-label":
                f.write(f"{splits[k % 10]},{image(k)},label_{(k + (i >= half)) % 1000:04d}\n")
            else:  # detection: one box per row
                x = 0.1 + 0.4 * (i >= half)
                f.write(f"{splits[k % 10]},{image(k)},label_{(k + (i >= half)) % 100:03d},"
                        f"{x:.1f},0.2,,,{x + 0.3:.1f},0.7,,\n")


def write_tree(root: str, files: int) -> None:
    """An image tree ``root/tree/train/<label>/<file>`` of ``files`` hard links of one JPEG."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (90, 140, 200)).save(buf, "JPEG")
    os.makedirs(root, exist_ok=True)
    for i in range(files):
        if i % 50_000 == 0:  # a file takes at most 65,000 links on ext4
            one = os.path.join(root, f"one-{i}.jpg")
            with open(one, "wb") as f:
                f.write(buf.getvalue())
        folder = os.path.join(root, "tree", "train", f"label_{i % 100:03d}")
        if i < 100:
            os.makedirs(folder, exist_ok=True)
        os.link(one, os.path.join(folder, f"{i:09d}.jpg"))


def _package_at(rev: str, dest: str) -> str:
    """The tfrecorder package of git revision ``rev`` of this checkout, extracted under
    ``dest``; the folder to put first on PYTHONPATH."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    archive = subprocess.run(["git", "-C", repo, "archive", rev, "tfrecorder"],
                             capture_output=True, check=True).stdout
    os.makedirs(dest)
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest


def _measure(child: list[str], env: dict, cwd: str, cli: bool) -> dict:
    """One conversion in a fresh process: its figures (``_CHILD*``'s JSON line)."""
    if not cli:
        proc = subprocess.run([sys.executable, "-c", *child], env=env, cwd=cwd,
                              capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stderr[-3000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])
    source, out = child[1], child[2]
    command = [sys.executable, "-m", "tfrecorder", "convert", source, out,
               "--runner", "DataflowRunner", "--project", "bench", "--region",
               "us-central1", "--overwrite", "--dry_run=True", "--no_auth"]
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            sys.exit(err.read()[-3000:].decode(errors="replace"))
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
            "peak_mib": usage.ru_maxrss / 1024, "graph_bytes": 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000, 1_000_000, 2_000_000])
    ap.add_argument("--dataframe", action="store_true",
                    help="convert DataFrames: the memory added on top of the frame")
    ap.add_argument("--quoted", action="store_true",
                    help="every CSV field in quotes (read by Python's csv module)")
    ap.add_argument("--gcs-csv", action="store_true",
                    help="the CSV itself on gs:// (the emulator), streamed from there")
    ap.add_argument("--table", choices=["plain", "classes", "multi-label", "detection",
                                        "directory"],
                    default="plain", help="the kind of table (see above)")
    ap.add_argument("--cli", action="store_true",
                    help="run the tfrecorder convert command, not the Python call")
    ap.add_argument("--against", metavar="REV",
                    help="also measure the package as of git revision REV, in turn")
    ap.add_argument("--runs", type=int, default=1,
                    help="measure each size this many times, interleaved: the medians")
    args = ap.parse_args()
    if args.cli and (args.dataframe or args.table == "directory"):
        ap.error("--cli converts a CSV on Dataflow: not with --dataframe or "
                 "--table directory")

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
        results: dict[str, list] = {}
        with tempfile.TemporaryDirectory() as tmp:
            # The code measured: the current package, and REV's before it.
            codes = {"now": env}
            if args.against:
                before = _package_at(args.against, os.path.join(tmp, "before"))
                path = os.pathsep.join(p for p in (before, env.get("PYTHONPATH")) if p)
                codes = {args.against: {**env, "PYTHONPATH": path}, "now": env}
            # Children run in a folder of their own: `python -m` and `-c` put the working
            # directory first on sys.path, which would pick a checkout's package there.
            cwd = os.path.join(tmp, "cwd")
            os.makedirs(cwd)
            for code, code_env in codes.items():
                found = subprocess.run([sys.executable, "-c", "import tfrecorder; print("
                                        "tfrecorder.__file__)"], env=code_env, cwd=cwd,
                                       capture_output=True, text=True).stdout.strip()
                if args.against and (code == "now") == found.startswith(tmp):
                    sys.exit(f"{code}: would run the package at {found}")
                print(f"{code}: {found}", flush=True)
            for rows in args.rows:
                csv_path = os.path.join(tmp, f"rows-{rows}.csv")
                if args.table == "directory":
                    folder = os.path.join(tmp, f"tree-{rows}")
                    write_tree(folder, rows)
                    child = [_CHILD_DIRECTORY, os.path.join(folder, "tree"),
                             os.path.join(folder, "out"), str(rows)]
                else:
                    write_csv(csv_path, rows, args.quoted, args.table)
                    source = csv_path
                    if args.gcs_csv:
                        source = f"gs://{BUCKET}/tables/rows-{rows}.csv"
                        gcsfs.GCSFileSystem(token="anon").put_file(csv_path, source)
                    child = [_CHILD_FRAME if args.dataframe else _CHILD, source,
                             f"gs://{BUCKET}/out-{rows}"]
                runs: dict[str, list] = {}
                for run in range(args.runs):
                    for code, code_env in codes.items():
                        m = _measure(child, code_env, cwd, args.cli)
                        runs.setdefault(code, []).append(m)
                        if args.runs > 1:
                            print(f"  run {run + 1}, {code}, {rows:,} rows: "
                                  f"{m['wall']:.1f} s (CPU {m.get('cpu', 0):.1f} s), "
                                  f"{m['peak_mib']:.0f} MiB", flush=True)
                for code, measured in runs.items():
                    r = {k: statistics.median(m[k] for m in measured) for k in measured[0]}
                    results.setdefault(code, []).append((rows, r))
                    who = f"{code:>8}: " if args.against else ""
                    if args.dataframe:
                        print(f"{who}{rows:>11,} rows: conversion {r['wall']:6.1f} s, the "
                              f"frame {r['frame_mib']:6.0f} MiB, added on top "
                              f"{r['added_mib']:6.0f} MiB "
                              f"({r['added_mib'] / r['frame_mib']:.2f}x the frame)", flush=True)
                    else:
                        print(f"{who}{rows:>11,} rows: driver {r['wall']:6.1f} s (CPU "
                              f"{r['cpu']:5.1f} s), peak RSS {r['peak_mib']:7.0f} MiB, job "
                              f"graph {int(r['graph_bytes']):,} bytes", flush=True)
                if args.table == "directory":
                    import shutil

                    shutil.rmtree(folder)
                else:
                    os.remove(csv_path)
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)
    if args.dataframe:
        return
    first = args.rows[0]
    print(f"\n| code | rows | driver wall | CPU | driver peak RSS | vs {first:,} rows | "
          f"job graph bytes |")
    print("|---|---|---|---|---|---|---|")
    for code, measured in results.items():
        base = measured[0][1]["peak_mib"]
        for rows, r in measured:
            print(f"| {code} | {rows:,} | {r['wall']:.1f} s | {r['cpu']:.1f} s | "
                  f"{r['peak_mib']:,.0f} MiB | {r['peak_mib'] / base:.2f}x | "
                  f"{int(r['graph_bytes']):,} |")


if __name__ == "__main__":
    main()
