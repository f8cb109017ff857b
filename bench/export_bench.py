"""The Parquet export against a raw pyarrow write of the same image bytes, same run.

    python bench/export_bench.py CSV --runs 5 [--work DIR]

The CSV (split,image_uri,label; bench/make_corpus.py writes one) is converted once.
Then, interleaved, ``runs`` times each:

- ``export``: ``tfrecorder.export(out, dest)``: the records read from the shards, their
  features parsed, one Parquet file per shard with Hugging Face's features, the card and
  croissant.json (each file's SHA-256);
- ``raw``: the floor: each source image file read and written with pyarrow as
  Hugging Face's ``Image`` struct ``{bytes, path}`` and the label id, one file per split,
  nothing else.

Prints each run's seconds and the ratio of the medians (export / raw).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time


def raw(table, dest: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(dest)
    names = sorted(set(table["label"]))
    ids = {n: i for i, n in enumerate(names)}
    for split, rows in table.groupby("split", sort=True):
        data = []
        for uri in rows["image_uri"]:
            with open(uri, "rb") as f:
                data.append(f.read())
        image = pa.StructArray.from_arrays(
            [pa.array(data, pa.binary()),
             pa.array([os.path.basename(u) for u in rows["image_uri"]], pa.string())],
            names=["bytes", "path"])
        labels = pa.array([ids[n] for n in rows["label"]], pa.int64())
        pq.write_table(pa.table({"image": image, "label": labels}),
                       os.path.join(dest, f"{split.lower()}.parquet"),
                       compression="snappy", use_dictionary=["label"],
                       write_statistics=["label"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", default=None, help="a folder for the files (default: a temporary one)")
    args = parser.parse_args()

    import pandas as pd

    import tfrecorder

    work = args.work or tempfile.mkdtemp(prefix="export-bench-")
    table = pd.read_csv(args.csv, keep_default_na=False)
    base = os.path.dirname(os.path.abspath(args.csv))
    table["image_uri"] = [u if os.path.isabs(u) else os.path.join(base, u)
                          for u in table["image_uri"]]
    out = os.path.join(work, "out")
    if not os.path.exists(os.path.join(out, "tfrecorder.json")):
        tfrecorder.convert(table, out, progress=False)
    times = {"export": [], "raw": []}
    for run in range(args.runs):
        for name in ("export", "raw"):
            dest = os.path.join(work, f"{name}-{run}")
            shutil.rmtree(dest, ignore_errors=True)
            start = time.perf_counter()
            if name == "export":
                tfrecorder.export(out, dest)
            else:
                raw(table, dest)
            times[name].append(time.perf_counter() - start)
            shutil.rmtree(dest)
    for name, seconds in times.items():
        print(f"{name:7s} " + " ".join(f"{s:.3f}" for s in seconds)
              + f"  median {statistics.median(seconds):.3f} s")
    ratio = statistics.median(times["export"]) / statistics.median(times["raw"])
    print(f"export / raw: {ratio:.2f}x ({len(table)} rows)")
    if not args.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
