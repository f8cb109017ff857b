"""Detection benchmarks: COCO instance masks against Model Garden's converter, and a YOLO
dataset against the same annotations in one COCO file. Whole processes, interleaved.

    python bench/detection_bench.py --coco-masks /tmp/det-masks --runs 5 \\
        [--photos /tmp/debs/usr/share]         # photos to crop from; else synthetic ones
    python bench/detection_bench.py --yolo-vs-coco /tmp/det-yolo --runs 5
    mkdir /tmp/before && git archive REV tfrecorder | tar -x -C /tmp/before
    python bench/detection_bench.py ... --before /tmp/before   # also the package at REV

``--coco-masks ROOT`` makes, once, 300 photos of about 640 x 480 under ``ROOT/images``
(crops of the JPEGs and PNGs found under ``--photos``, scaled down to 640 px on their
longer side, as COCO's are; without ``--photos``, ``make_corpus``'s synthetic photos)
and ``ROOT/instances.json``: 10 categories with COCO-like sparse ids, 2 to 6 objects a
photo, each a polygon of 8 to 20 points (a quarter of them in two parts), and a crowd
(an uncompressed RLE, as COCO gives crowds) on every eighth photo. Then, in each round
and in turn: ``tfrecorder convert instances.json OUT`` (our layout), the same with
``--layout model_garden``, and Model Garden's ``create_coco_tf_record`` with
``--include_masks`` (its process pool: one process per core), each a fresh process.

``--yolo-vs-coco ROOT`` makes, once, 10,000 small JPEGs (64 x 48) with 1 to 5 boxes each,
written as a YOLO dataset (``ROOT/yolo``: ``data.yaml``, ``images/{train,val,test}``,
one label file per image) and as one COCO file (``ROOT/coco/instances.json`` over the
same image files, ``--images-dir ROOT/yolo``). Each round converts both with
``tfrecorder convert``.

Before every run its output folder is removed and the file system synced. Prints per
writer the median wall time and peak memory (the whole process tree, sampled every 20
ms), the median of the per-round ratios, and each round's figures.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import statistics
import sys

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from convert_bench import run  # noqa: E402
from make_corpus import photo, split_of  # noqa: E402

#: COCO-like category ids: sparse, as COCO 2017's 80 classes are numbered up to 90.
CATEGORIES = [(1, "person"), (3, "car"), (17, "cat"), (18, "dog"), (44, "bottle"),
              (62, "chair"), (64, "potted plant"), (72, "tv"), (84, "book"), (90, "toothbrush")]


def _sources(folder: str) -> list[str]:
    """Image files under ``folder`` at least 480 px on their shorter side, sorted."""
    out = []
    for base, _, names in os.walk(folder):
        for name in sorted(names):
            if name.lower().endswith((".jpg", ".jpeg", ".png")):
                path = os.path.join(base, name)
                try:
                    with Image.open(path) as im:
                        if min(im.size) >= 480:
                            out.append(path)
                except OSError:
                    continue
    return sorted(out)


def _cropped(path: str, index: int) -> bytes:
    """A seeded crop (60-100% of each side) of the image at ``path``, scaled to 640 px
    on its longer side, as JPEG."""
    rng = random.Random(index)
    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        cw, ch = int(w * rng.uniform(0.6, 1)), int(h * rng.uniform(0.6, 1))
        x, y = rng.randrange(w - cw + 1), rng.randrange(h - ch + 1)
        im = im.crop((x, y, x + cw, y + ch))
        scale = 640 / max(im.size)
        im = im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))),
                       Image.Resampling.LANCZOS)
    out = io.BytesIO()
    im.save(out, "JPEG", quality=rng.randint(85, 95))
    return out.getvalue()


def _polygon(rng: random.Random, cx: float, cy: float, r: float, w: int, h: int) -> list:
    """A blob of 8-20 points around (cx, cy), inside the image, as COCO's flat list."""
    n = rng.randint(8, 20)
    out = []
    for k in range(n):
        a = 2 * np.pi * k / n
        d = r * rng.uniform(0.55, 1.0)
        out += [round(min(max(cx + d * np.cos(a), 0), w - 1), 2),
                round(min(max(cy + d * np.sin(a), 0), h - 1), 2)]
    return out


def _crowd_rle(rng: random.Random, w: int, h: int) -> dict:
    """An ellipse as an uncompressed RLE: runs over the pixels in column order, starting
    with a run of zeros, as COCO's crowds are given."""
    cx, cy = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * h
    rx, ry = rng.uniform(0.1, 0.3) * w, rng.uniform(0.1, 0.3) * h
    ys, xs = np.mgrid[0:h, 0:w]
    mask = (((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2 <= 1).astype(np.uint8)
    flat = mask.flatten(order="F")
    edges = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat[0] == 1:
        counts = [0] + counts
    return {"size": [h, w], "counts": counts}


def make_masks(root: str, count: int, photos: str | None) -> str:
    """The photos and ``instances.json`` of ``--coco-masks``; returns the file's path."""
    from pycocotools import mask as coco_mask

    path = os.path.join(root, "instances.json")
    if os.path.exists(path):
        return path
    folder = os.path.join(root, "images")
    os.makedirs(folder, exist_ok=True)
    sources = _sources(photos) if photos else []
    images, annotations = [], []
    for i in range(count):
        name = f"{i + 1:012d}.jpg"
        data = (_cropped(sources[i % len(sources)], i) if sources
                else photo(i, shorter=(427, 480), ratios=(1.33, 1.5)))
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
        rng = random.Random(i)
        objects = []
        for _ in range(rng.randint(2, 6)):
            r = rng.uniform(0.05, 0.2) * min(w, h)
            cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
            parts = [_polygon(rng, cx, cy, r, w, h)]
            if rng.random() < 0.25:  # an object cut in two, as occlusion leaves it
                parts.append(_polygon(rng, min(cx + 1.8 * r, w - 1), cy, r / 2, w, h))
            objects.append((parts, 0))
        if i % 8 == 0:
            objects.append((_crowd_rle(rng, w, h), 1))
        for segmentation, crowd in objects:
            rle = (coco_mask.merge(coco_mask.frPyObjects(segmentation, h, w)) if not crowd
                   else coco_mask.frPyObjects(segmentation, h, w))
            annotations.append({
                "id": len(annotations) + 1, "image_id": i + 1, "iscrowd": crowd,
                "category_id": CATEGORIES[rng.randrange(len(CATEGORIES))][0],
                "segmentation": segmentation, "area": float(coco_mask.area(rle)),
                "bbox": [round(float(v), 2) for v in coco_mask.toBbox(rle)]})
    data = {"images": images, "annotations": annotations,
            "categories": [{"id": k, "name": n, "supercategory": "thing"} for k, n in CATEGORIES]}
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)
    return path


def make_yolo(root: str, count: int) -> tuple[str, str]:
    """The tiny JPEGs, the YOLO dataset and the COCO file of ``--yolo-vs-coco``; returns
    (data.yaml, instances.json)."""
    yaml_path = os.path.join(root, "yolo", "data.yaml")
    coco_path = os.path.join(root, "coco", "instances.json")
    if os.path.exists(yaml_path) and os.path.exists(coco_path):
        return yaml_path, coco_path
    yolo = os.path.join(root, "yolo")
    names = [n for _, n in CATEGORIES]
    images, annotations = [], []
    w, h = 64, 48
    for i in range(count):
        split = {"TRAIN": "train", "VALIDATION": "val", "TEST": "test"}[split_of(i)]
        rel = f"images/{split}/{i:07d}.jpg"
        for sub in ("images", "labels"):
            os.makedirs(os.path.join(yolo, sub, split), exist_ok=True)
        nrng = np.random.default_rng(i)
        pixels = nrng.integers(0, 256, (6, 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
        Image.fromarray(pixels).save(os.path.join(yolo, rel), "JPEG", quality=90)
        images.append({"id": i + 1, "file_name": rel, "width": w, "height": h})
        rng = random.Random(i)
        lines = []
        for _ in range(rng.randint(1, 5)):
            bw, bh = rng.randint(4, 32), rng.randint(4, 24)
            x, y = rng.randint(0, w - bw), rng.randint(0, h - bh)
            cls = rng.randrange(len(names))
            lines.append(f"{cls} {(x + bw / 2) / w:.6f} {(y + bh / 2) / h:.6f} "
                         f"{bw / w:.6f} {bh / h:.6f}")
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                "category_id": CATEGORIES[cls][0], "iscrowd": 0,
                                "bbox": [x, y, bw, bh], "area": bw * bh})
        with open(os.path.join(yolo, "labels", split, f"{i:07d}.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
    with open(yaml_path, "w") as f:
        f.write("path: .\ntrain: images/train\nval: images/val\ntest: images/test\n")
        f.write("names:\n" + "".join(f"  {k}: {n}\n" for k, n in enumerate(names)))
    os.makedirs(os.path.dirname(coco_path), exist_ok=True)
    data = {"images": images, "annotations": annotations,
            "categories": [{"id": k, "name": n} for k, n in CATEGORIES]}
    with open(coco_path, "w") as f:
        json.dump(data, f)
    return yaml_path, coco_path


def rounds(writers: dict, work: str, runs: int, against: str, before: str | None) -> None:
    """Runs ``writers`` (name -> command of an output folder) in turn, ``runs`` times;
    prints medians and the per-round ratios to ``against``."""
    results: dict[str, list[tuple[float, int]]] = {w: [] for w in writers}
    for i in range(runs):
        for name, cmd in writers.items():
            out = os.path.join(work, name.replace(" ", "_"))
            shutil.rmtree(out, ignore_errors=True)
            os.sync()
            env = None
            if name.startswith("before"):  # the package as it was, from --before
                env = dict(os.environ, PYTHONPATH=before)
            results[name].append(run(cmd(out), env))
        print(f"round {i + 1}: " + ", ".join(
            f"{n} {r[-1][0]:.2f} s" for n, r in results.items()), flush=True)
    print(f"\n{'writer':<28}{'wall (median)':>14}{'peak':>10}{'/ ' + against:>22}")
    for name, res in results.items():
        ratios = [a[0] / b[0] for a, b in zip(res, results[against])]
        print(f"{name:<28}{statistics.median(r[0] for r in res):>12.2f} s"
              f"{statistics.median(r[1] for r in res) / 2**20:>7.0f} MiB"
              f"{statistics.median(ratios):>14.3f}x ({min(ratios):.3f}-{max(ratios):.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--coco-masks", metavar="ROOT", help="COCO masks against Model Garden")
    which.add_argument("--yolo-vs-coco", metavar="ROOT", help="YOLO label files against COCO")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--images", type=int, default=None,
                    help="images (default 300 for --coco-masks, 10000 for --yolo-vs-coco)")
    ap.add_argument("--photos", default=None, help="folder of photos to crop from")
    ap.add_argument("--only", default=None, help="comma-separated writers to run")
    ap.add_argument("--before", default=None, help=(
        "a folder holding an earlier tfrecorder package (git archive REV tfrecorder | tar -x "
        "-C DIR): its first writer runs with it too, in the same rounds"))
    args = ap.parse_args()
    ours = [sys.executable, "-m", "tfrecorder", "convert"]
    if args.coco_masks:
        root = os.path.abspath(args.coco_masks)
        coco = make_masks(root, args.images or 300, args.photos)
        work = os.path.join(root, "out")
        writers = {
            "tfrecorder": lambda out: [*ours, coco, out],
            "tfrecorder model_garden": lambda out: [*ours, coco, out, "--layout", "model_garden"],
            "create_coco_tf_record": lambda out: [
                sys.executable, "-m", "official.vision.data.create_coco_tf_record",
                f"--image_dir={os.path.join(root, 'images')}",
                f"--object_annotations_file={coco}", f"--output_file_prefix={out}/train",
                "--num_shards=8", "--include_masks"],
        }
        against = "create_coco_tf_record"
    else:
        root = os.path.abspath(args.yolo_vs_coco)
        yaml_path, coco = make_yolo(root, args.images or 10000)
        work = os.path.join(root, "out")
        writers = {"coco": lambda out: [*ours, coco, out, "--images-dir",
                                         os.path.dirname(yaml_path)],
                   "yolo": lambda out: [*ours, yaml_path, out]}
        against = "coco"
    if args.only:
        keep = args.only.split(",")
        writers = {k: v for k, v in writers.items() if k in keep or k == against}
    os.makedirs(work, exist_ok=True)
    if args.before:
        first = next(iter(writers))
        writers = {f"before {first}": writers[first], **writers}
    rounds(writers, work, args.runs, against, args.before)


if __name__ == "__main__":
    main()
