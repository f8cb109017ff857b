"""How far the data report's image problems agree with CleanVision's on the same files.

    python -m venv /tmp/cv && /tmp/cv/bin/pip install cleanvision scikit-image
    python bench/cleanvision_agreement.py [--images DIR] [--cleanvision /tmp/cv/bin/python]
        [--work /tmp/cleanvision_agreement]

CleanVision (Apache-2.0) runs in its own environment, as a tool, never imported here.
``--images`` is any folder of images; without it the mixed set of
``bench/near_duplicates_eval.py`` (its Debian wallpapers, scikit-image and Pillow images,
and the copies, dark and blurred editions made of them) is written into ``--work``, with
editions made here of the same pictures (``editions``) so that every problem has images
to find: a light one of each (five times the brightness, as the dark one has a fifth),
and, of every sixth, a thumbnail (48 px on its longer side) and a scan-sized one (150
megapixels; grey, as a scanner gives it, which also keeps CleanVision, which measures
brightness in 64-bit copies of each band, under a few GB). A folder written before these
editions were made lacks them: remove it to have the set written again.
Both look at the same files: tfrecorder converts a table of them with
``near_duplicates=True`` (so that the pixel problems are measured) and its report's
``issues`` are compared, per problem (but ``low_detail``, the report's own), with CleanVision's ``find_issues`` at its default
thresholds. Printed per problem: the files each flags, those both flag, the share of
CleanVision's that the report flags too (the goal: 0.8 or more) and the share of the
report's that CleanVision does not flag (the goal: 0.2 or less).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

ISSUES = ["dark", "light", "blurry", "low_information", "grayscale", "odd_aspect_ratio",
          "odd_size"]

CLEANVISION = """
import json, sys
from cleanvision import Imagelab
lab = Imagelab(data_path=sys.argv[1])
lab.find_issues({k: {} for k in %r})
out = {}
for k in %r:
    col = f"is_{k}_issue"
    out[k] = sorted(str(p) for p in lab.issues.index[lab.issues[col]])
json.dump(out, open(sys.argv[2], "w"))
""" % (ISSUES, ISSUES)


#: Of every this many pictures (in name order), a thumbnail and a scan-sized edition.
ODD_EVERY = 6
#: The thumbnail's longer side and the scan-sized edition's pixels.
THUMB_SIDE, SCAN_PIXELS = 48, 150_000_000


def editions(items: list) -> list:
    """What the set of ``near_duplicates_eval`` lacks for two problems, made of its own
    pictures (their largest copy) the way its dark editions are: of each, a light edition
    (the brightness five times, clipped: over-exposed), which CleanVision calls light or
    not by its own measure; of every ODD_EVERY-th, a thumbnail of THUMB_SIDE px and a
    grey edition enlarged to SCAN_PIXELS, sizes far from the set's usual ones."""
    import math

    import near_duplicates_eval as ev
    from PIL import Image, ImageEnhance

    out = []
    for i, (picture, it, im) in enumerate(ev.pictures(items)):
        rgb = im.convert("RGB")
        light = ImageEnhance.Brightness(rgb).enhance(5.0)
        out.append(ev.Item(f"{it.name}@light.jpg", picture + "@light", it.family, ev.VARIANT,
                           ev.jpeg(light, 90)))
        if i % ODD_EVERY:
            continue
        w, h = rgb.size
        k = THUMB_SIDE / max(w, h)
        thumb = rgb.resize((max(1, round(w * k)), max(1, round(h * k))),
                           Image.Resampling.LANCZOS)
        out.append(ev.Item(f"{it.name}@thumb.jpg", picture, it.family, ev.COPY,
                           ev.jpeg(thumb, 85)))
        k = math.sqrt(SCAN_PIXELS / (w * h))
        scan = rgb.convert("L").resize((round(w * k), round(h * k)), Image.Resampling.BICUBIC)
        out.append(ev.Item(f"{it.name}@scan.jpg", picture, it.family, ev.COPY,
                           ev.jpeg(scan, 90)))
    return out


def write_set(folder: str) -> None:
    import near_duplicates_eval as ev

    os.makedirs(folder, exist_ok=True)
    items = ev.build_set(ev.default_sources())
    for i, it in enumerate(items + editions(items)):
        ext = os.path.splitext(it.name)[1].lower() or ".img"
        with open(os.path.join(folder, f"{i:04d}{ext}"), "wb") as f:
            f.write(it.data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", default=None, help="a folder of images (default: the "
                    "mixed set of near_duplicates_eval.py, written into --work)")
    ap.add_argument("--cleanvision", default="/tmp/cv/bin/python",
                    help="a Python that has cleanvision installed")
    ap.add_argument("--work", default="/tmp/cleanvision_agreement")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None
    import tfrecorder

    images = args.images
    if images is None:
        images = os.path.join(args.work, "images")
        if not os.path.isdir(images):
            write_set(images)
    images = os.path.abspath(images)
    files = sorted(os.path.join(images, f) for f in os.listdir(images)
                   if f.lower().endswith((".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif",
                                          ".tif", ".tiff")))
    # CleanVision takes minutes: its answer on a folder is kept beside it
    flagged_cv = os.path.join(args.work, "cleanvision.json")
    if not os.path.exists(flagged_cv) or os.path.getmtime(flagged_cv) < os.path.getmtime(images):
        subprocess.run([args.cleanvision, "-c", CLEANVISION, images, flagged_cv], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cv = {k: set(v) for k, v in json.load(open(flagged_cv)).items()}
    out = os.path.join(args.work, "out")
    import pandas as pd

    table = pd.DataFrame({"split": "TRAIN", "image_uri": files, "label": "x"})
    tfrecorder.convert(table, out, near_duplicates=True, mode="overwrite",
                       max_error_fraction=0.5)
    report = tfrecorder.report(out)
    ours = {k: set(report.issues[report.issues["issue"] == k]["image_uri"]) for k in ISSUES}
    listed = len(report.issues) < sum(report.counts.get("issues", {}).values())
    print(f"{len(files)} files in {images}"
          + ("; the report lists only part of its issues" if listed else ""))
    print(f"  {'problem':<17} {'CleanVision':>11} {'report':>6} {'both':>5} "
          f"{'of CleanVision':>14} {'report only':>11}")
    for k in ISSUES:
        a, b = cv.get(k, set()), ours[k]
        both = len(a & b)
        found = f"{both / len(a):.2f}" if a else "-"
        extra = f"{len(b - a) / len(b):.2f}" if b else "-"
        print(f"  {k:<17} {len(a):>11} {len(b):>6} {both:>5} {found:>14} {extra:>11}")
    low = set(report.issues[report.issues["issue"] == "low_detail"]["image_uri"])
    print(f"  low_detail (the report's own, too plain to hash): {len(low)}, of which "
          f"CleanVision flags {len(low & cv['low_information'])} low_information, "
          f"{len(low & cv['dark'])} dark")


if __name__ == "__main__":
    main()
