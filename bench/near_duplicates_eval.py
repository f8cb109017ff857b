"""Precision and recall of the data report's near duplicates on a mixed set of real images.

    apt-get update && cd /tmp && apt-get download plasma-workspace-wallpapers \\
        ukui-wallpapers lomiri-wallpapers lomiri-wallpapers-20.04 desktop-base
    for d in /tmp/*.deb; do dpkg -x "$d" /tmp/debs; done
    python -m venv /tmp/cv && /tmp/cv/bin/pip install scikit-image    # its data images
    pip download --no-deps --no-binary :all: pillow==13.0.0 -d /tmp   # Tests/images

    python bench/near_duplicates_eval.py [--debs /tmp/debs] [--skimage DIR]
        [--pillow /tmp/pillow-13.0.0.tar.gz] [--max-distance 12] [--list]

Every source is optional: the set is built from those found (``--skimage`` defaults to
the ``skimage/data`` folder of any scikit-image below ``/tmp``). The images of all
sources are pooled, as a real table pools them, and every pair of the pool is judged:

- **copies** (positives): the images of one wallpaper folder
  (``usr/share/wallpapers/NAME/contents/images/WxH.*``, landscape) and the folder's
  ``screenshot.*``, the preview its makers made of it; the resolutions of one Debian logo
  (``logo-64.png``, ``logo-128.png``, ...); Pillow's portrait (``hopper.*``) in every
  file that decodes to 8-bit RGB, and its other photographs' copies (``flower.jpg``,
  ``flower.webp``, ...); scikit-image's two chessboards; and, made here for every
  picture of at least 128 px, a copy reduced to a third (JPEG, quality 85) and one
  re-encoded at full size (JPEG, quality 50).
- **variants** (neither way): a wallpaper's dark edition and portrait recomposition,
  a theme's other backgrounds (grub, login, lock screen), the logo with and without
  its text, the stereo pair of scikit-image's motorcycle, and, made here for every
  picture of at least 128 px, a dark edition (a fifth of the brightness) and a blurred
  one (a Gaussian blur of a fortieth of the shorter side). Each is compared with the
  other pictures only: the dark and blurred editions of two pictures are the hard
  negatives, images whose detail is mostly gone.
- **negatives**: every pair of two pictures of different families.

Byte-identical pairs are not counted (the report finds them by their SHA-256). For each
distance from 0 to ``--max-distance`` the script prints true and false positives, false
negatives, precision and recall three ways: ``hash`` (the difference hash alone, the
report before low-detail images were kept apart), ``detail`` (low-detail images left out
of matching, counted as missed where they have copies) and ``report`` (also each pair
confirmed by its thumbnails: what the report lists). ``--list`` names the false
positives and the copies missed at ``MAX_DISTANCE``.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import io
import itertools
import os
import re
import sys
import tarfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tfrecorder._report import measures as q  # noqa: E402

RASTER = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp")
COPY, VARIANT = "copy", "variant"


@dataclasses.dataclass
class Item:
    name: str
    picture: str     # copies of one picture are positives
    family: str      # images of one family that are not copies are not counted
    kind: str        # COPY or VARIANT
    data: bytes

    @property
    def sha(self) -> str:
        return q.digest(self.data)


def family_of(name: str) -> str:
    """A theme's name as its folders spell it: ``MoonlightLockScreen``, ``moonlight``,
    ``moonlight-theme`` and ``FuturePrototypeWithLogo`` name two families."""
    name = name.lower()
    for suffix in ("-theme", "lockscreen", "withlogo", "_wallpaper", "-inksplat", "inksplat"):
        name = name.removesuffix(suffix)
    return name


# --- the sources --------------------------------------------------------------------------

def debian(root: str) -> list[Item]:
    """Wallpapers, backgrounds and logos of the Debian packages unpacked under ``root``."""
    out = []
    for path in sorted(glob.glob(os.path.join(root, "usr/share/**/*"), recursive=True)):
        if not path.lower().endswith(RASTER) or os.path.islink(path) or "/icons/" in path \
                or "/plymouth/" in path:
            continue
        rel = os.path.relpath(path, root)
        data = open(path, "rb").read()
        m = re.match(r"usr/share/wallpapers/([^/]+)/contents/(.+)$", rel)
        if m:
            name, inner = m.groups()
            fam = family_of(name)
            size = re.match(r"images(_dark)?/(\d+)x(\d+)\.", inner)
            if inner.startswith("screenshot."):
                out.append(Item(rel, name, fam, COPY, data))
            elif size:
                dark, w, h = size.group(1), int(size.group(2)), int(size.group(3))
                out.append(Item(rel, name, fam, VARIANT if dark or h > w else COPY, data))
            continue
        m = re.match(r"usr/share/desktop-base/([^/]+)-theme/", rel)
        if m:
            out.append(Item(rel, rel, family_of(m.group(1)), VARIANT, data))
            continue
        m = re.match(r"usr/share/desktop-base/debian-logos/(logo[a-z-]*)-\d+\.png$", rel)
        if m:
            out.append(Item(rel, m.group(1), "debian-logo", COPY, data))
            continue
        if "/look-and-feel/" in rel:  # a desktop with its wallpaper: a variant of it
            out.append(Item(rel, rel, "emerald", VARIANT, data))
            continue
        out.append(Item(rel, rel, rel, COPY, data))
    return out


def skimage(folder: str) -> list[Item]:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*"))):
        base = os.path.basename(path)
        if not base.lower().endswith(RASTER) or base.startswith("multipage"):
            continue
        data = open(path, "rb").read()
        if base.startswith("chessboard_"):
            out.append(Item("skimage/" + base, "chessboard", "chessboard", COPY, data))
        elif base.startswith("motorcycle_"):
            out.append(Item("skimage/" + base, base, "motorcycle", VARIANT, data))
        else:
            out.append(Item("skimage/" + base, base, base, COPY, data))
    return out


#: Pillow's photographs kept in several files, and the files of one picture each.
PILLOW_FAMILIES = {
    "flower": ["flower.jpg", "flower.webp", "flower_thumbnail.png"],
    "flower2": ["flower2.jpg", "flower2.webp"],
    "sugarshack": ["sugarshack.mpo"],
    "iptc": ["iptc.jpg", "iptc_roundUp.jpg"],
    "fujifilm": ["fujifilm.mpo"], "frozenpond": ["frozenpond.mpo"],
    "xmp_test": ["xmp_test.jpg"], "exif-72dpi-int": ["exif-72dpi-int.jpg"],
}
#: hopper files that are edits of the portrait, not copies.
PILLOW_EDITS = ("emboss", "_45", "mask", "draw", "256x256", "rle8_grayscale", "bad_exif",
                ".pcd")  # Photo CD: Pillow's decoder gives false colours


def pillow(archive: str) -> list[Item]:
    """Pillow's photographs from its source distribution's ``Tests/images``: the portrait
    in every file that decodes to 8-bit RGB (a copy in another format), the others."""
    from PIL import Image

    out = []
    wanted = {n: p for p, names in PILLOW_FAMILIES.items() for n in names}
    with tarfile.open(archive) as tf:
        for m in tf:
            base = m.name.rsplit("/", 1)[-1]
            if not m.isfile() or "/Tests/images/" not in m.name or "/" in m.name.split(
                    "/Tests/images/", 1)[1]:
                continue
            if base in wanted:
                data = tf.extractfile(m).read()
                out.append(Item("pillow/" + base, wanted[base], wanted[base], COPY, data))
            elif base.startswith("hopper") and not any(e in base for e in PILLOW_EDITS):
                data = tf.extractfile(m).read()
                try:
                    with Image.open(io.BytesIO(data)) as im:
                        im.load()
                        if im.mode != "RGB" or min(im.size) < 64:
                            continue
                except Exception:
                    continue
                out.append(Item("pillow/" + base, "hopper", "hopper", COPY, data))
    return out


def pictures(items: list[Item]) -> list[tuple]:
    """``(picture, item, image)`` of each picture of at least 128 px, its largest copy
    decoded and upright, in the order of the pictures' names: what editions are made of."""
    from PIL import Image, ImageOps

    largest: dict[str, tuple] = {}
    for it in items:
        if it.kind != COPY:
            continue
        try:
            im = ImageOps.exif_transpose(Image.open(io.BytesIO(it.data)))
            im.load()
        except Exception:
            continue
        if min(im.size) >= 128 and (it.picture not in largest
                                    or im.size[0] > largest[it.picture][1].size[0]):
            largest[it.picture] = (it, im)
    return [(picture, it, im) for picture, (it, im) in sorted(largest.items())]


def jpeg(img, quality: int) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def made(items: list[Item]) -> list[Item]:
    """For each picture of at least 128 px (its largest copy): a copy reduced to a third
    and one re-encoded, its dark and its blurred editions."""
    from PIL import Image, ImageEnhance, ImageFilter

    out = []
    for picture, it, im in pictures(items):
        rgb = im.convert("RGB")
        small = rgb.resize((max(1, rgb.width // 3), max(1, rgb.height // 3)),
                           Image.Resampling.LANCZOS)
        out.append(Item(f"{it.name}@third.jpg", picture, it.family, COPY, jpeg(small, 85)))
        out.append(Item(f"{it.name}@q50.jpg", picture, it.family, COPY, jpeg(rgb, 50)))
        dark = ImageEnhance.Brightness(rgb).enhance(0.2)
        out.append(Item(f"{it.name}@dark.jpg", picture + "@dark", it.family, VARIANT,
                        jpeg(dark, 90)))
        blur = rgb.filter(ImageFilter.GaussianBlur(max(2, min(rgb.size) // 40)))
        out.append(Item(f"{it.name}@blur.jpg", picture + "@blur", it.family, VARIANT,
                        jpeg(blur, 90)))
    return out


def default_sources(debs: str = "/tmp/debs", skimage_dir: str | None = None,
                    pillow_archive: str | None = None) -> dict:
    if skimage_dir is None:
        found = glob.glob("/tmp/**/site-packages/skimage/data", recursive=True)
        skimage_dir = found[0] if found else None
    if pillow_archive is None:
        found = sorted(glob.glob("/tmp/**/pillow-*.tar.gz", recursive=True))
        pillow_archive = found[-1] if found else None
    return {"debs": debs if os.path.isdir(debs) else None, "skimage": skimage_dir,
            "pillow": pillow_archive}


def build_set(sources: dict) -> list[Item]:
    """The pooled set: every source found, its images and the ones made of them, one
    item per distinct file (the first of byte-identical ones)."""
    items: list[Item] = []
    if sources.get("debs"):
        items += debian(sources["debs"])
    if sources.get("skimage"):
        items += skimage(sources["skimage"])
    if sources.get("pillow"):
        items += pillow(sources["pillow"])
    items += made(items)
    seen, out = set(), []
    for it in items:
        if it.sha not in seen:
            seen.add(it.sha)
            out.append(it)
    return out


# --- judging -------------------------------------------------------------------------------

def truth(a: Item, b: Item) -> bool | None:
    """True for a pair of copies, False for two families, None: not counted."""
    if a.picture == b.picture and a.kind == b.kind == COPY:
        return True
    if a.family == b.family or a.picture == b.picture:
        return None
    return False


@dataclasses.dataclass
class Seen:
    item: Item
    hash: int | None
    print: object    # measures.fingerprint's, None for a low-detail image


def judge(items: list[Item], max_distance: int):
    """Per pair that counts: ``(truth, distance or None, low-detail, confirmed)``."""
    seen = []
    for it in items:
        img = q.small(it.data)
        fp = q.fingerprint(img) if img is not None else None
        seen.append(Seen(it, q.dhash(img) if img is not None else None, fp))
    out = []
    for a, b in itertools.combinations(seen, 2):
        t = truth(a.item, b.item)
        if t is None:
            continue
        if a.hash is None or b.hash is None:
            out.append((t, None, True, False, a, b))
            continue
        d = (a.hash ^ b.hash).bit_count()
        low = a.print is None or b.print is None
        ok = not low and d <= max_distance and q.confirmed(a.print, b.print)
        out.append((t, d, low, ok, a, b))
    return seen, out


def table(judged: list, max_distance: int) -> list[str]:
    pos = sum(1 for j in judged if j[0])
    rows = [f"  {'d':>2}  {'hash: precision, recall':>24}  {'detail':>14}  "
            f"{'report: TP':>10} {'FP':>3} {'FN':>4} {'precision':>9} {'recall':>6}"]
    for t in range(max_distance + 1):
        cells = []
        for how in ("hash", "detail", "report"):
            found = [j for j in judged if j[1] is not None and j[1] <= t and (
                how == "hash" or not j[2]) and (how != "report" or j[3])]
            tp = sum(1 for j in found if j[0])
            fp = len(found) - tp
            prec = tp / (tp + fp) if tp + fp else float("nan")
            cells.append((tp, fp, pos - tp, prec, tp / pos if pos else float("nan")))
        (_, _, _, p0, r0), (_, _, _, p1, r1), (tp, fp, fn, p2, r2) = cells
        mark = "  <- MAX_DISTANCE" if t == q.MAX_DISTANCE else ""
        rows.append(f"  {t:>2}  {p0:>11.3f}, {r0:>10.3f}  {p1:>6.3f}, {r1:>5.3f}  "
                    f"{tp:>10} {fp:>3} {fn:>4} {p2:>9.3f} {r2:>6.3f}{mark}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--debs", default="/tmp/debs",
                    help="where the Debian packages are unpacked (dpkg -x)")
    ap.add_argument("--skimage", default=None, help="scikit-image's skimage/data folder")
    ap.add_argument("--pillow", default=None, help="Pillow's source distribution (.tar.gz)")
    ap.add_argument("--max-distance", type=int, default=12)
    ap.add_argument("--list", action="store_true",
                    help="name the false positives and the copies missed at MAX_DISTANCE")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None
    sources = default_sources(args.debs, args.skimage, args.pillow)
    for k, v in sources.items():
        print(f"{k}: {v or 'not found, left out'}")
    items = build_set(sources)
    seen, judged = judge(items, args.max_distance)
    low = [s for s in seen if s.print is None]
    pos = sum(1 for j in judged if j[0])
    print(f"\n{len(items)} images ({sum(1 for i in items if '@' not in i.name)} files, "
          f"the rest made of them), {len({i.picture for i in items})} pictures; "
          f"{pos} positive pairs, {len(judged) - pos} negative pairs; "
          f"{len(low)} images of low detail (not matched)\n")
    print("\n".join(table(judged, args.max_distance)))
    if args.list:
        for s in low:
            print(f"  low detail: {s.item.name}")
        for t, d, lo, ok, a, b in judged:
            if d is not None and d <= q.MAX_DISTANCE and not t and not lo:
                print(f"  negative at d={d} ({'confirmed' if ok else 'refused'}): "
                      f"{a.item.name} ~ {b.item.name}")
            if t and not ok:
                print(f"  copies missed (d={d}{', low detail' if lo else ''}): "
                      f"{a.item.name} ~ {b.item.name}")


if __name__ == "__main__":
    main()
