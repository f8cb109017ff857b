"""Training-input throughput: tfrecorder.load() against the usual alternatives.

    python bench/make_corpus.py /tmp/corpus --images 10000
    python bench/read_bench.py /tmp/corpus [--epochs 3]

Some shared machines slow down for minutes at a time; interleaving spreads that over all
three pipelines, and the best epoch of each is printed beside the median.

Reads the train split of the corpus (decoded, resized to 224x224, batches of 32) with:

  load      tfrecorder.load(out, "train", batch_size=32, image_size=(224, 224))
  plain     TFRecordDataset(files).map(parse_single_example + decode_jpeg + resize).batch(32)
  directory tf.keras.utils.image_dataset_from_directory on the original JPEG files

after converting the corpus with tfrecorder's defaults (kept in CORPUS/tfrecords). Each
pipeline runs one warm-up epoch, then the epochs are interleaved (load, plain, directory,
load, ...) so that drift in the machine's speed hits all three alike. Prints images/s per
epoch, the medians, and the ratios of load() to the others.

    python bench/read_bench.py /tmp/corpus --presize 256

compares pre-sized images instead: the corpus is also converted with
``shorter_side=256`` (kept in CORPUS/tfrecords-256; both conversions are timed and their
sizes printed), and the pipelines are

  load      tfrecorder.load() of the pre-sized conversion, as above
  plain     the plain pipeline over the original-bytes conversion, as above
  original  tfrecorder.load() of the original-bytes conversion
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SIZE = (224, 224)
BATCH = 32


def _convert(corpus: str, shorter_side: int | None = None) -> str:
    """The corpus converted (once; the conversion's seconds are kept beside it)."""
    import tfrecorder

    out = os.path.join(corpus, "tfrecords" + (f"-{shorter_side}" if shorter_side else ""))
    if not os.path.exists(os.path.join(out, "tfrecorder.json")):
        start = time.perf_counter()
        tfrecorder.convert(os.path.join(corpus, "data.csv"), out, overwrite=True,
                           shorter_side=shorter_side, progress=False)
        with open(out + ".seconds", "w") as f:
            f.write(f"{time.perf_counter() - start:.1f}")
    return out


def _describe(out: str) -> str:
    import tfrecorder

    m = tfrecorder.info(out)
    size = sum(s.num_bytes for s in m.splits.values())
    seconds = open(out + ".seconds").read() if os.path.exists(out + ".seconds") else "?"
    return f"{os.path.basename(out)}: {m.rows_written} rows, {size / 2**20:.0f} MiB, converted in {seconds} s"


def _label_tree(corpus: str, out: str) -> str:
    """A DIR/<label>/<file> tree of symlinks to the train images, for the directory reader."""
    import pandas as pd

    tree = os.path.join(corpus, "train_by_label")
    if not os.path.isdir(tree):
        df = pd.read_csv(os.path.join(corpus, "data.csv"))
        df = df[df.split.str.upper() == "TRAIN"].drop_duplicates("image_uri")
        for uri, label in zip(df.image_uri, df.label):
            os.makedirs(os.path.join(tree, label), exist_ok=True)
            os.symlink(uri, os.path.join(tree, label, os.path.basename(uri)))
    return tree


def pipelines(tf, out: str, tree: str | None, presized: str | None = None) -> dict:
    import tfrecorder

    files = sorted(tf.io.gfile.glob(os.path.join(out, "*-train.tfrecord-*")))
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    def plain_map(raw):
        ex = tf.io.parse_single_example(raw, spec)
        img = tf.io.decode_jpeg(ex["image"], channels=3)
        return tf.image.resize(img, SIZE), ex["label"]

    def load(folder):
        return lambda: tfrecorder.load(folder, "train", batch_size=BATCH, image_size=SIZE,
                                       as_supervised=True)

    plain = lambda: tf.data.TFRecordDataset(files).map(plain_map).batch(BATCH)  # noqa: E731
    if presized is not None:
        return {"load": load(presized), "plain": plain, "original": load(out)}
    return {
        "load": load(out),
        "plain": plain,
        "directory": lambda: tf.keras.utils.image_dataset_from_directory(
            tree, image_size=SIZE, batch_size=BATCH, shuffle=False, verbose=False),
    }


def epoch(ds) -> tuple[int, float]:
    n = 0
    start = time.perf_counter()
    for images, _ in ds:
        n += int(images.shape[0])
    return n, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="folder made by bench/make_corpus.py")
    ap.add_argument("--epochs", type=int, default=3, help="measured epochs per pipeline")
    ap.add_argument("--presize", type=int, metavar="N",
                    help="compare load() of a shorter_side=N conversion with the plain "
                         "pipeline over the original bytes")
    args = ap.parse_args()

    import tensorflow as tf

    out = _convert(args.corpus)
    if args.presize:
        presized = _convert(args.corpus, args.presize)
        print(_describe(out))
        print(_describe(presized))
        made = {name: make() for name, make in pipelines(tf, out, None, presized).items()}
    else:
        tree = _label_tree(args.corpus, out)
        made = {name: make() for name, make in pipelines(tf, out, tree).items()}
    counts = {}
    for name, ds in made.items():  # warm-up: tracing, thread pools, page cache
        counts[name], _ = epoch(ds)
    if len(set(counts.values())) != 1:
        sys.exit(f"the pipelines read different numbers of images: {counts}")
    rates: dict[str, list[float]] = {name: [] for name in made}
    for e in range(args.epochs):
        for name, ds in made.items():
            n, secs = epoch(ds)
            rates[name].append(n / secs)
            print(f"epoch {e + 1} {name:<10} {n} images in {secs:6.2f} s = {n / secs:7.0f} images/s",
                  flush=True)
    med = {name: statistics.median(r) for name, r in rates.items()}
    best = {name: max(r) for name, r in rates.items()}
    print(f"\n{counts['load']} train images, {SIZE[0]}x{SIZE[1]}, batch {BATCH}, "
          f"{os.cpu_count()} cores; {args.epochs} epochs each:")
    print(f"  {'pipeline':<10} {'median':>8} {'best':>8}  images/s")
    for name in made:
        print(f"  {name:<10} {med[name]:8.0f} {best[name]:8.0f}")
    for other in [n for n in made if n != "load"]:
        per_round = [a / b for a, b in zip(rates["load"], rates[other])]
        print(f"  load / {other:<9}: median {med['load'] / med[other]:.2f}x, best "
              f"{best['load'] / best[other]:.2f}x, per-round ratios "
              f"{', '.join(f'{r:.2f}' for r in per_round)}")


if __name__ == "__main__":
    main()
