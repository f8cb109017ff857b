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

    python bench/read_bench.py /tmp/corpus --readers

compares the ways of reading by record (index files) with the sequential load():

  load      tfrecorder.load(), as above (files in order)
  global    load(..., shuffle="global", seed=0): every record read by its offset, in a
            permutation of the whole split
  4 readers load(..., shard=(i, 4)) for i = 0..3, one after the other: the same records,
            read as each of 4 readers reads its part
  window    load(..., shuffle=True): files shuffled and a window of 1024 records

With ``--raw`` the images are not decoded (``decode_images=False``): JPEG decoding no
longer hides what reading by record costs.

    python bench/read_bench.py /tmp/corpus --presize 256

compares pre-sized images instead: the corpus is also converted with
``shorter_side=256`` (kept in CORPUS/tfrecords-256; both conversions are timed and their
sizes printed), and the pipelines are

  load      tfrecorder.load() of the pre-sized conversion, as above
  plain     the plain pipeline over the original-bytes conversion, as above
  original  tfrecorder.load() of the original-bytes conversion

    python bench/read_bench.py /tmp/corpus --torch [--presize 256] [--workers 16 --batch 256 --samples 14000]

measures PyTorch instead, without TensorFlow: every pipeline is a
``torch.utils.data.DataLoader(..., batch_size=32, num_workers=2)`` whose items are
decoded by Pillow to RGB and resized to 224x224 (bilinear) by the same function, so
only where the bytes come from differs:

  torch        tfrecorder.torch.Dataset over the conversion (``--presize N``: over the
               shorter_side=N conversion)
  imagefolder  torchvision.datasets.ImageFolder over the original JPEG files (``--presize
               N``: over the pre-sized conversion's own JPEG bytes, written out as files
               in CORPUS/train_by_label-N), or, where torchvision does not import, the
               same thing written here (a sorted CLASS/FILE listing opened with Pillow);
               the line printed says which

The workers are started anew each epoch (no ``persistent_workers``) and every epoch is
timed from ``iter(loader)``: worker start-up and the first batch's wait count. The
first batch's time is printed too. ``--samples N`` draws N positions per epoch with
replacement (``RandomSampler``, the same seed for both pipelines in a round) instead
of reading the split once in file order. ``--persistent-workers`` keeps the workers
from one epoch to the next (start-up then falls in the warm-up epoch), and
``--original-folder`` with ``--presize N`` gives ImageFolder the original files (what
pre-sizing gains, rather than what the container costs).
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
        tfrecorder.convert(os.path.join(corpus, "data.csv"), out, mode="overwrite",
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


def record_pipelines(out: str, raw: bool = False) -> dict:
    import functools

    import tfrecorder

    def load(**kw):
        if raw:
            return tfrecorder.load(out, "train", batch_size=BATCH, decode_images=False,
                                   as_supervised=True, **kw)
        return tfrecorder.load(out, "train", batch_size=BATCH, image_size=SIZE,
                               as_supervised=True, **kw)

    return {
        "load": load,
        "global": lambda: load(shuffle="global", seed=0),
        "4 readers": lambda: functools.reduce(
            lambda a, b: a.concatenate(b), [load(shard=(i, 4)) for i in range(4)]),
        "window": lambda: load(shuffle=True, seed=0),
    }


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


def epoch(ds) -> tuple[int, float, float]:
    """(images, seconds, seconds to the first batch) of one pass over ``ds``."""
    n, first = 0, None
    start = time.perf_counter()
    for images, _ in ds:
        if first is None:
            first = time.perf_counter() - start
        n += int(images.shape[0])
    return n, time.perf_counter() - start, first


def _resize(image):
    """The decode-and-resize of every torch pipeline: RGB, 224x224 bilinear, uint8 CHW."""
    import numpy as np
    import torch
    from PIL import Image

    image = image.convert("RGB").resize(SIZE[::-1], Image.Resampling.BILINEAR)
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


class _FolderDataset:
    """torchvision's ImageFolder, for where torchvision does not import: the files of
    ROOT/CLASS/, classes and files sorted, opened with Pillow."""

    def __init__(self, root, transform):
        self.classes = sorted(os.listdir(root))
        self.samples = [(os.path.join(root, c, f), i) for i, c in enumerate(self.classes)
                        for f in sorted(os.listdir(os.path.join(root, c)))]
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        from PIL import Image

        path, label = self.samples[i]
        with open(path, "rb") as f:
            image = Image.open(f)
            image.load()
        return self.transform(image), label


def _presized_tree(corpus: str, presized: str, shorter_side: int) -> str:
    """CORPUS/train_by_label-N/<label>/<k>.<format>: the pre-sized conversion's own image
    bytes as files, so that ImageFolder reads exactly the bytes the records hold. Made
    again when the conversion is another one (its generation is kept beside the tree)."""
    import shutil

    from tfrecorder import access

    tree = os.path.join(corpus, f"train_by_label-{shorter_side}")
    reader = access.Reader(presized, "train")
    stamp = f"{reader.manifest.generation}\n"
    if os.path.isdir(tree) and os.path.exists(tree + ".generation") \
            and open(tree + ".generation").read() == stamp:
        return tree
    m = reader.manifest
    names = m.label_names
    for old in (tree, tree + ".part"):
        shutil.rmtree(old, ignore_errors=True)
    for i in range(len(reader)):
        f = reader.features(i)
        label = names[f[m.label_key]] if names else str(f[m.label_key])
        kind = f.get(f"{m.image_key}_format", b"jpeg").decode()
        os.makedirs(os.path.join(tree + ".part", label), exist_ok=True)
        with open(os.path.join(tree + ".part", label, f"{i:06d}.{kind}"), "wb") as out:
            out.write(f[m.image_key])
    os.rename(tree + ".part", tree)
    with open(tree + ".generation", "w") as out:
        out.write(stamp)
    return tree


def torch_pipelines(out: str, tree: str, workers: int = 2, batch: int = BATCH,
                    samples: int | None = None, persistent: bool = False) -> tuple[dict, str]:
    import torch.utils.data

    import tfrecorder.torch

    try:
        from torchvision.datasets import ImageFolder

        folder, kind = ImageFolder(tree, transform=_resize), "torchvision.datasets.ImageFolder"
    except ImportError:  # torchvision builds that match torch 2.13 do not import beside it
        folder, kind = _FolderDataset(tree, _resize), "ImageFolder written in the bench"

    def loader(ds):
        sampler = None
        if samples is not None:  # the same draws for both pipelines, round by round
            generator = torch.Generator()
            generator.manual_seed(0)
            sampler = torch.utils.data.RandomSampler(ds, replacement=True,
                                                     num_samples=samples,
                                                     generator=generator)
        return torch.utils.data.DataLoader(ds, batch_size=batch, sampler=sampler,
                                           num_workers=workers,
                                           persistent_workers=persistent)

    made = {"torch": loader(tfrecorder.torch.Dataset(out, "train", transform=_resize)),
            "imagefolder": loader(folder)}
    return made, kind


def _main_torch(args) -> None:
    import torch

    out = _convert(args.corpus)
    source = _convert(args.corpus, args.presize) if args.presize else out
    tree = (_presized_tree(args.corpus, source, args.presize)
            if args.presize and not args.original_folder else _label_tree(args.corpus, out))
    print(_describe(source))
    made, kind = torch_pipelines(source, tree, args.workers, args.batch, args.samples,
                                 args.persistent_workers)
    print(f"torch {torch.__version__}; baseline: {kind} over {tree}; "
          f"{args.workers} {'persistent ' if args.persistent_workers else ''}workers, "
          f"batch {args.batch}, " + (f"{args.samples} samples drawn per epoch"
                                     if args.samples else "the split in file order"))
    _measure(made, args.epochs, "torch", args.batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="folder made by bench/make_corpus.py")
    ap.add_argument("--epochs", type=int, default=3, help="measured epochs per pipeline")
    ap.add_argument("--readers", action="store_true",
                    help="compare global shuffle and record-level readers with load()")
    ap.add_argument("--raw", action="store_true",
                    help="with --readers: records only, images not decoded")
    ap.add_argument("--presize", type=int, metavar="N",
                    help="compare load() of a shorter_side=N conversion with the plain "
                         "pipeline over the original bytes")
    ap.add_argument("--torch", action="store_true",
                    help="PyTorch DataLoaders: tfrecorder.torch.Dataset against ImageFolder")
    ap.add_argument("--workers", type=int, default=2, help="with --torch: DataLoader workers")
    ap.add_argument("--batch", type=int, default=BATCH, help="with --torch: batch size")
    ap.add_argument("--samples", type=int, metavar="N",
                    help="with --torch: N positions drawn per epoch, with replacement")
    ap.add_argument("--persistent-workers", action="store_true",
                    help="with --torch: keep the workers between epochs")
    ap.add_argument("--original-folder", action="store_true",
                    help="with --torch --presize: ImageFolder over the original files")
    args = ap.parse_args()
    if args.torch:
        _main_torch(args)
        return

    import tensorflow as tf

    out = _convert(args.corpus)
    if args.readers:
        made = {name: make() for name, make in record_pipelines(out, args.raw).items()}
    elif args.presize:
        presized = _convert(args.corpus, args.presize)
        print(_describe(out))
        print(_describe(presized))
        made = {name: make() for name, make in pipelines(tf, out, None, presized).items()}
    else:
        tree = _label_tree(args.corpus, out)
        made = {name: make() for name, make in pipelines(tf, out, tree).items()}
    _measure(made, args.epochs, "load")


def _measure(made: dict, epochs: int, ours: str, batch: int = BATCH) -> None:
    counts = {}
    for name, ds in made.items():  # warm-up: tracing, thread pools, page cache
        counts[name], _, _ = epoch(ds)
    if len(set(counts.values())) != 1:
        sys.exit(f"the pipelines read different numbers of images: {counts}")
    rates: dict[str, list[float]] = {name: [] for name in made}
    firsts: dict[str, list[float]] = {name: [] for name in made}
    for e in range(epochs):
        for name, ds in made.items():
            n, secs, first = epoch(ds)
            rates[name].append(n / secs)
            firsts[name].append(first)
            print(f"epoch {e + 1} {name:<10} {n} images in {secs:6.2f} s = {n / secs:7.0f} "
                  f"images/s, first batch {first:5.2f} s", flush=True)
    med = {name: statistics.median(r) for name, r in rates.items()}
    best = {name: max(r) for name, r in rates.items()}
    print(f"\n{counts[ours]} train images, {SIZE[0]}x{SIZE[1]}, batch {batch}, "
          f"{os.cpu_count()} cores; {epochs} epochs each:")
    print(f"  {'pipeline':<10} {'median':>8} {'best':>8}  images/s   first batch, median")
    for name in made:
        print(f"  {name:<10} {med[name]:8.0f} {best[name]:8.0f}  "
              f"{statistics.median(firsts[name]):8.2f} s")
    for other in [n for n in made if n != ours]:
        per_round = [a / b for a, b in zip(rates[ours], rates[other])]
        print(f"  {ours} / {other:<9}: median {med[ours] / med[other]:.2f}x, best "
              f"{best[ours] / best[other]:.2f}x, per-round ratios "
              f"{', '.join(f'{r:.2f}' for r in per_round)}")


if __name__ == "__main__":
    main()
