"""Builds a benchmark corpus: N synthetic photo-like JPEGs (or small PNGs) and a CSV.

    python bench/make_corpus.py /tmp/corpus --images 10000              # ~60 KB JPEGs
    python bench/make_corpus.py /tmp/corpus --images 10000 --repeat 10  # 100,000-row CSV
    python bench/make_corpus.py /tmp/tiny --images 10000 --kind png64 --repeat 100
    python bench/make_corpus.py /tmp/phone --images 2000 --kind phone   # ~1-2.5 MP photos

JPEGs have a shorter side of 256-640 px, an aspect ratio up to 1.6, quality 85-95, and
gradients, blotches, shapes and sensor-like noise, so they compress like photographs
(about 60 KB on average). ``--kind phone`` makes phone-sized ones: a shorter side of
1000-1400 px, aspect 4:3 to 16:9, a quarter of them stored sideways with an EXIF
orientation, as phones do. Images are split 80/10/10 and labelled with 10 classes. Every
image is seeded by its index: the same command makes the same files. Existing images
are kept, so a second run only rewrites the CSV.

The CSV is written as `data.csv` (header `split,image_uri,label`, absolute paths); with
`--repeat R` every image is listed R times (rows differ only in their position).
"""

from __future__ import annotations

import argparse
import csv
import io
import multiprocessing
import os
import random

import numpy as np
from PIL import Image, ImageDraw

LABELS = [f"class_{i}" for i in range(10)]


def photo(index: int, shorter=(256, 640), ratios=(1.0, 1.6), rotated=0.0) -> bytes:
    rng = random.Random(index)
    nrng = np.random.default_rng(index)
    short = rng.randint(*shorter)
    ratio = rng.uniform(*ratios)
    w, h = (int(short * ratio), short) if rng.random() < 0.6 else (short, int(short * ratio))
    y = np.linspace(0, 1, h)[:, None, None]
    x = np.linspace(0, 1, w)[None, :, None]
    img = (nrng.uniform(0, 255, 3) * (1 - y) + nrng.uniform(0, 255, 3) * y
           + nrng.uniform(-80, 80, 3) * x)
    blotches = nrng.normal(0, 1, (h // 8 + 1, w // 8 + 1, 3)).repeat(8, 0).repeat(8, 1)
    img = img + blotches[:h, :w] * 18 + nrng.normal(0, 7, (h, w, 3))
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for _ in range(rng.randint(3, 9)):
        cx, cy, r = rng.randrange(w), rng.randrange(h), rng.randint(10, short // 3)
        draw.ellipse([cx - r, cy - r, cx + r, cy + r],
                     fill=tuple(rng.randrange(256) for _ in range(3)))
    out = io.BytesIO()
    save = {}
    if rng.random() < rotated:  # stored sideways, shown upright by its EXIF orientation
        im = im.transpose(Image.Transpose.ROTATE_90)
        exif = Image.Exif()
        exif[0x0112] = 6
        save["exif"] = exif.tobytes()
    im.save(out, "JPEG", quality=rng.randint(85, 95), **save)
    return out.getvalue()


def phone(index: int) -> bytes:
    return photo(index, shorter=(1000, 1400), ratios=(4 / 3, 16 / 9), rotated=0.25)


def png64(index: int) -> bytes:
    nrng = np.random.default_rng(index)
    base = nrng.integers(0, 256, (8, 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
    out = io.BytesIO()
    Image.fromarray(base).save(out, "PNG")
    return out.getvalue()


KINDS = {"photo": (photo, "jpg"), "phone": (phone, "jpg"), "png64": (png64, "png")}


def _write(args) -> int:
    kind, index, path = args
    if not os.path.exists(path):
        data = KINDS[kind][0](index)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return os.path.getsize(path)


def split_of(index: int) -> str:
    """80/10/10 by index."""
    return "TRAIN" if index % 10 < 8 else "VALIDATION" if index % 10 == 8 else "TEST"


def build(root: str, images: int, kind: str = "photo", repeat: int = 1,
          processes: int | None = None) -> tuple[str, int]:
    """Makes the corpus under ``root``; returns (csv path, total image bytes)."""
    folder = os.path.join(os.path.abspath(root), "images")
    os.makedirs(folder, exist_ok=True)
    ext = KINDS[kind][1]
    paths = [os.path.join(folder, f"{i // 1000:03d}", f"img_{i:07d}.{ext}") for i in range(images)]
    for d in sorted({os.path.dirname(p) for p in paths}):
        os.makedirs(d, exist_ok=True)
    with multiprocessing.Pool(processes or os.cpu_count()) as pool:
        sizes = pool.map(_write, [(kind, i, p) for i, p in enumerate(paths)], chunksize=64)
    csv_path = os.path.join(os.path.abspath(root), "data.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["split", "image_uri", "label"])
        for _ in range(repeat):
            for i, p in enumerate(paths):
                w.writerow([split_of(i), p, LABELS[i % len(LABELS)]])
    return csv_path, sum(sizes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="folder for images/ and data.csv")
    ap.add_argument("--images", type=int, default=10000, help="distinct images (default 10000)")
    ap.add_argument("--kind", choices=sorted(KINDS), default="photo")
    ap.add_argument("--repeat", type=int, default=1, help="list every image this many times")
    args = ap.parse_args()
    csv_path, total = build(args.root, args.images, args.kind, args.repeat)
    print(f"{args.images} images, {total / 2**20:.0f} MiB, average {total / args.images / 1024:.1f} KiB;"
          f" {args.images * args.repeat} rows in {csv_path}")


if __name__ == "__main__":
    main()
