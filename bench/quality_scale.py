"""The data report at scale: a large table converted with and without
``--near-duplicates``, whole processes, wall time and peak memory of each, and what the
report found.

    python bench/make_corpus.py /tmp/tiny200k --images 10000 --kind png64 --repeat 20
    python bench/quality_scale.py /tmp/tiny200k/data.csv [--before CHECKOUT]

Every image of that table is listed 20 times, so the report has 10,000 groups of
identical images (1.9 million exact pairs counted, 10,000 listed): the case where
holding every pair, or every record's digest, in one place would show in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_bench import input_stats, run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--work", default=None)
    ap.add_argument("--before", default=None,
                    help="a checkout of the package before the data report, run first")
    args = ap.parse_args()
    rows, in_bytes = input_stats(args.csv)
    work = args.work or tempfile.mkdtemp(prefix="tfr-quality-scale-")
    print(f"{rows} rows, {in_bytes / 2**20:.0f} MiB of images, {os.cpu_count()} cores")
    variants = [("report", None, []), ("near", None, ["--near-duplicates"])]
    if args.before:
        variants.insert(0, ("before", args.before, []))
    for name, package, flags in variants:
        out = os.path.join(work, name)
        shutil.rmtree(out, ignore_errors=True)
        os.sync()
        env = [] if package is None else ["env", f"PYTHONPATH={package}"]
        wall, peak = run([*env, sys.executable, "-m", "tfrecorder", "convert", args.csv, out,
                          "--overwrite", *flags])
        if package is not None:
            print(f"  {name:<7} {wall:7.1f} s  peak {peak / 2**20:6.0f} MiB", flush=True)
            shutil.rmtree(out, ignore_errors=True)
            continue
        q = json.load(open(os.path.join(out, "quality.json")))
        size = os.path.getsize(os.path.join(out, "quality.json"))
        print(f"  {name:<7} {wall:7.1f} s  peak {peak / 2**20:6.0f} MiB  counts "
              f"{json.dumps(q['counts'])}  listed {len(q['pairs'])} pairs, truncated "
              f"{json.dumps(q['truncated'])}, quality.json {size / 2**20:.1f} MiB", flush=True)
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
