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

    python bench/export_bench.py CSV --update [--changed 0.01] [--num-shards K]
                                     [--format parquet] [--edit mixed|append]

``--update``: what exporting again after an update rewrites. The CSV is converted (into
``K`` shards per split if given) and exported; the table is then edited in ``changed``
of its rows, as bench/update_bench.py edits it (``mixed``: a third new rows, a third
removed, a third relabelled; ``append``: only the new rows), the folder updated with it,
and exported again into the same folder. Prints the bytes the second export wrote
against the export's bytes, and the files it wrote and reused.
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


def update(args, table, work: str) -> None:
    import csv
    import sys

    import tfrecorder

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from update_bench import edit

    os.makedirs(work, exist_ok=True)
    original, edited = os.path.join(work, "original.csv"), os.path.join(work, "edited.csv")
    table.to_csv(original, index=False)
    kinds = edit(original, edited, args.changed)
    if args.edit == "append":  # the original rows as they were, and the new ones
        with open(original, newline="") as f, open(edited, newline="") as g:
            rows = list(csv.reader(f))
            rows += [r for r in list(csv.reader(g))[1:] if "/new_images/" in r[1]]
        with open(edited, "w", newline="") as f:
            csv.writer(f).writerows(rows)
        kinds = {"added": kinds["added"]}
    out, dest = os.path.join(work, "updated"), os.path.join(work, "export")
    for path in (out, dest):
        shutil.rmtree(path, ignore_errors=True)
    options = {"num_shards": args.num_shards} if args.num_shards else {}
    tfrecorder.convert(original, out, progress=False, **options)
    first = tfrecorder.export(out, dest, format=args.format)
    tfrecorder.convert(edited, out, mode="update", progress=False)
    again = tfrecorder.export(out, dest, format=args.format)
    total = again.bytes_written + again.bytes_reused
    import json

    with open(os.path.join(dest, "tfrecorder-export.json")) as f:
        sizes = {n: f["bytes"] for n, f in json.load(f)["files"].items()}
    data = sum(sizes[n] for n in again.written)
    print(f"{len(table)} rows, {args.format}, {len(first.files)} files; "
          f"the edit: {kinds}")
    print(f"first export: {first.bytes_written / 2**20:.2f} MiB in {len(first.files)} files")
    print(f"after the update: {len(again.written)} files written, {len(again.reused)} "
          f"reused; {again.bytes_written / 2**20:.2f} MiB of {total / 2**20:.2f} MiB "
          f"written: {again.bytes_written / total:.1%} of the export's bytes")
    print(f"  of which data files {data / 2**20:.2f} MiB ({data / sum(sizes.values()):.1%} "
          f"of the data files' bytes), the rest the card, croissant.json or indexes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", default=None, help="a folder for the files (default: a temporary one)")
    parser.add_argument("--update", action="store_true",
                        help="measure what exporting again after an update rewrites")
    parser.add_argument("--changed", type=float, default=0.01, help="share of rows edited")
    parser.add_argument("--num-shards", type=int, default=None)
    parser.add_argument("--format", default="parquet", choices=["parquet", "webdataset"])
    parser.add_argument("--edit", default="mixed", choices=["mixed", "append"])
    args = parser.parse_args()

    import pandas as pd

    import tfrecorder

    work = args.work or tempfile.mkdtemp(prefix="export-bench-")
    table = pd.read_csv(args.csv, keep_default_na=False)
    base = os.path.dirname(os.path.abspath(args.csv))
    table["image_uri"] = [u if os.path.isabs(u) else os.path.join(base, u)
                          for u in table["image_uri"]]
    if args.update:
        update(args, table, work)
        if not args.work:
            shutil.rmtree(work)
        return
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
