"""Conversion benchmark: tfrecorder against the hand-written loop, whole processes.

    python bench/make_corpus.py /tmp/corpus --images 10000
    python bench/convert_bench.py /tmp/corpus/data.csv [--runs 3] [--skip-baseline]
                                  [--index-cost] [-- extra tfrecorder convert flags]

Runs, interleaved on the same CSV, `tfrecorder convert CSV OUT` (default options,
DirectRunner) and `bench/baseline_loop.py CSV OUT` (TensorFlow's tutorial loop), each as
a fresh process, `--runs` times each. Before every run the output folder is removed
and the file system is synced, so no run pays for another's writes. Prints, per writer,
the medians of wall time, rows/s and peak memory (the sum of the resident memory of the
process and all its children, sampled every 20 ms), the output/input bytes, and the
ratios ours/baseline. ``--index-cost`` also runs ``tfrecorder convert --no-index`` in
the same rounds and prints what writing the index files costs (ours / no index).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))


def input_stats(csv_path: str) -> tuple[int, int]:
    """(rows, bytes of the image files counted once per row)."""
    sizes: dict[str, int] = {}
    rows = total = 0
    with open(csv_path, newline="") as f:
        for r in csv.DictReader(f):
            uri = r["image_uri"]
            if uri not in sizes:
                sizes[uri] = os.path.getsize(uri)
            rows += 1
            total += sizes[uri]
    return rows, total


def data_bytes(out: str) -> int:
    if not os.path.isdir(out):
        return 0
    return sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out)
               if ".tfrecord" in n)


def index_work(out: str) -> float:
    """Seconds to do again, in this process, what writing the index files of ``out`` adds
    to a conversion: a list of framed lengths per shard, turned into offsets and text,
    written beside the shards. Machine noise hides it in whole-process timings."""
    from tfrecorder import _storage as storage
    from tfrecorder._folder import index, metadata

    m = metadata.read_manifest(out)
    lengths = {s.file: [n for _, n in index.read(out, s.file)]
               for info in m.splits.values() for s in info.shards}
    scratch = tempfile.mkdtemp(prefix="tfr-index-")
    start = time.perf_counter()
    for file, framed in lengths.items():
        kept = []
        for n in framed:
            kept.append(n)
        storage.write_atomic(os.path.join(scratch, file + ".idx"),
                             index.format(index.offsets(kept)))
    seconds = time.perf_counter() - start
    shutil.rmtree(scratch)
    return seconds


def run(cmd: list[str], env: dict | None = None) -> tuple[float, int]:
    """(wall seconds, peak resident bytes of the whole process tree); ``env``: the
    process's environment (this one's by default)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr.read().decode()[-3000:]}")
    return wall, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="data.csv made by bench/make_corpus.py")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-baseline", action="store_true", help="measure tfrecorder only")
    ap.add_argument("--floor", action="store_true",
                    help="also run bench/io_floor.py: read + CRC32C + write, nothing else")
    ap.add_argument("--index-cost", action="store_true",
                    help="also run tfrecorder with --no-index: the cost of the index files")
    ap.add_argument("--work", default=None, help="folder for the outputs (default: a temp dir)")
    ap.add_argument("extra", nargs="*", help="extra flags for `tfrecorder convert` (after --)")
    args = ap.parse_args()

    rows, in_bytes = input_stats(args.csv)
    work = args.work or tempfile.mkdtemp(prefix="tfr-bench-")
    writers = {
        "tfrecorder": lambda out: [sys.executable, "-m", "tfrecorder", "convert", args.csv, out,
                                   "--overwrite", *args.extra],
    }
    if args.index_cost:
        writers["no index"] = lambda out: [sys.executable, "-m", "tfrecorder", "convert",
                                           args.csv, out, "--overwrite", "--no-index",
                                           *args.extra]
    if not args.skip_baseline:
        writers["baseline"] = lambda out: [sys.executable, os.path.join(HERE, "baseline_loop.py"),
                                           args.csv, out]
    if args.floor:
        writers["io floor"] = lambda out: [sys.executable, os.path.join(HERE, "io_floor.py"),
                                           args.csv, out]
    results: dict[str, list[tuple[float, int, int]]] = {w: [] for w in writers}
    for i in range(args.runs):
        for name, cmd in writers.items():
            out = os.path.join(work, name.replace(" ", "_"))
            shutil.rmtree(out, ignore_errors=True)
            os.sync()
            wall, peak = run(cmd(out))
            results[name].append((wall, peak, data_bytes(out)))
            print(f"run {i + 1} {name:<10} {wall:7.2f} s  {rows / wall:8.0f} rows/s  "
                  f"peak {peak / 2**20:7.0f} MiB", flush=True)
        for name in writers:
            if name != "tfrecorder":
                shutil.rmtree(os.path.join(work, name.replace(" ", "_")), ignore_errors=True)

    print(f"\n{rows} rows, {in_bytes / 2**20:.0f} MiB of images, {os.cpu_count()} cores; "
          f"medians of {args.runs} runs:")
    print(f"  {'writer':<10} {'wall s':>8} {'rows/s':>9} {'peak MiB':>9} {'out/in':>7}")
    med = {}
    for name, rs in results.items():
        wall = statistics.median(r[0] for r in rs)
        peak = statistics.median(r[1] for r in rs)
        ratio = rs[-1][2] / in_bytes if rs[-1][2] else float("nan")
        med[name] = (wall, peak)
        print(f"  {name:<10} {wall:8.2f} {rows / wall:9.0f} {peak / 2**20:9.0f} {ratio:7.3f}")
    if "baseline" in med:
        w_ours, w_base = med["tfrecorder"][0], med["baseline"][0]
        print(f"  ours/baseline: wall {w_ours / w_base:.2f}x, rows/s {w_base / w_ours:.2f}x, "
              f"peak memory {med['tfrecorder'][1] / med['baseline'][1]:.2f}x")
    if "no index" in med:
        per_round = [a[0] / b[0] for a, b in zip(results["tfrecorder"], results["no index"])]
        print(f"  with index files / without: wall {med['tfrecorder'][0] / med['no index'][0]:.3f}x"
              f", median of the per-round ratios {statistics.median(per_round):.3f}x"
              f" (per round {', '.join(f'{r:.3f}' for r in per_round)})")
        extra = index_work(os.path.join(work, "tfrecorder"))
        print(f"  the index files' own work (framed lengths -> offsets -> text -> files): "
              f"{extra * 1000:.1f} ms = {extra / med['no index'][0]:.2%} of the conversion")
    shutil.rmtree(os.path.join(work, "tfrecorder"), ignore_errors=True)


if __name__ == "__main__":
    main()
