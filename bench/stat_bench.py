"""What looking for every image file costs the check of a table: ``spill.read`` with and
without ``look`` (a ``stat`` per row, ``storage.missing``), on the same table.

    python bench/stat_bench.py                    # 100,000 rows, 5 runs of each
    python bench/stat_bench.py --rows 1000000 --runs 3
    python bench/stat_bench.py --cold             # the page cache dropped before each run

The table is a DataFrame of ``--rows`` rows (three splits, 100 labels) whose images are
hard links of a small JPEG, 1,000 to a folder, on this machine's temporary folder;
every file is there, so each run checks, spills and stats every row. The two variants
run in turn, ``--runs`` times each, in this process (the check of a table is the
driver's own work, one core); prints the median wall seconds of each, the ratio of the
medians, and the stat pass's cost per row. ``--cold`` drops the kernel's caches
(``/proc/sys/vm/drop_caches``, root only) before each run: the first stat of a file
then reads its folder's entries from disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfrecorder._inputs import arguments, spill  # noqa: E402
from tests.conftest import encode  # noqa: E402


def _images(folder: str, n: int) -> list[str]:
    """``n`` hard links of a small JPEG, 1,000 to a folder (a file per 50,000 links:
    a file system caps the links to one file)."""
    data = encode()
    paths = []
    for i in range(n):
        sub = os.path.join(folder, f"{i // 1000:05d}")
        if i % 1000 == 0:
            os.makedirs(sub)
        if i % 50_000 == 0:
            first = os.path.join(folder, f"{i}.jpg")
            with open(first, "wb") as f:
                f.write(data)
        path = os.path.join(sub, f"{i:08d}.jpg")
        os.link(first, path)
        paths.append(path)
    return paths


def _drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()

    import pandas as pd

    folder = tempfile.mkdtemp(prefix="tfrecorder-stat-bench-")
    try:
        paths = _images(folder, args.rows)
        frame = pd.DataFrame({
            "split": [("TRAIN", "VALIDATION", "TEST")[i % 3] for i in range(args.rows)],
            "image_uri": paths,
            "label": [f"label_{i % 100:03d}" for i in range(args.rows)]})
        schema = arguments.as_schema(None)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.runs):
            for look in (False, True):
                if args.cold:
                    _drop_caches()
                start = time.perf_counter()
                table = spill.read(frame, schema, look=look)
                times[look].append(time.perf_counter() - start)
                assert table.missing_rows == 0 and sum(table.counts.values()) == args.rows
                table.remove()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    without, with_ = statistics.median(times[False]), statistics.median(times[True])
    print(f"rows {args.rows}, {args.runs} runs each{', caches dropped' if args.cold else ''}")
    print(f"  check without stat   {without:7.3f} s (median)")
    print(f"  check with stat      {with_:7.3f} s (median)")
    print(f"  ratio                {with_ / without:7.3f}x")
    print(f"  stat pass per row    {(with_ - without) / args.rows * 1e6:7.2f} us")


if __name__ == "__main__":
    main()
