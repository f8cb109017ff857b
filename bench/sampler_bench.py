"""What Beam's state sampler costs a conversion in this process, and what the shorter
ticks the ``tfrecorder convert`` command sets in its process
(``_writer.sampler.short_sampler_ticks``) give.

    python bench/make_corpus.py /tmp/corpus --images 10000
    python bench/sampler_bench.py /tmp/corpus/data.csv [--runs 10]

One process converts the CSV ``2 * runs + 1`` times (the first, a warm-up, is not
counted), alternating Beam's own ticks (at most 200 ms) with
shorter ones (``--short``, 20 ms by default: the command's), the output folder removed
and the file system synced before each. Prints both series of walls, their medians,
the median of the per-pair ratios (short / Beam's) and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="data.csv made by bench/make_corpus.py")
    ap.add_argument("--runs", type=int, default=10, help="conversions of each kind")
    ap.add_argument("--short", type=int, default=20, help="the shorter ticks, ms (default: 20)")
    ap.add_argument("--work", default=None, help="folder for the output (default: a temp dir)")
    args = ap.parse_args()

    import contextlib

    import tfrecorder
    from tfrecorder._writer.sampler import short_sampler_ticks

    short = args.short
    out = os.path.join(args.work or tempfile.mkdtemp(prefix="tfr-sampler-"), "out")
    walls: dict[int, list[float]] = {200: [], short: []}

    def convert(tick: int) -> float:
        shutil.rmtree(out, ignore_errors=True)
        os.sync()
        start = time.perf_counter()
        with (contextlib.nullcontext() if tick == 200 else short_sampler_ticks(tick)):
            tfrecorder.convert(args.csv, out, progress=False)
        return time.perf_counter() - start

    try:
        convert(short)  # imports, page cache
        for i in range(args.runs):
            for tick in ((200, short) if i % 2 == 0 else (short, 200)):
                walls[tick].append(convert(tick))
                print(f"run {i + 1} ticks <= {tick:3d} ms  {walls[tick][-1]:6.3f} s", flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"\n{args.runs} conversions each, in one process:")
    for tick, ws in walls.items():
        print(f"  ticks <= {tick:3d} ms: median {statistics.median(ws):.3f} s "
              f"({', '.join(f'{w:.2f}' for w in ws)})")
    ratios = [a / b for a, b in zip(walls[short], walls[200])]
    print(f"  short / Beam's: {statistics.median(ratios):.3f}x (median of pairs; "
          f"{', '.join(f'{r:.3f}' for r in ratios)}); "
          f"{statistics.median(walls[short]) / statistics.median(walls[200]):.3f}x "
          "of the medians")


if __name__ == "__main__":
    main()
