"""Precision and recall of the data report's near-duplicate hash on copies made by others.

    python bench/near_duplicates_eval.py [--cache DIR] [--max-distance 12] [--list]
        [--small-side N] [--only pillow,wallpapers,...]
        [--pillow FILE] [--wallpapers FILE] [--matplotlib FILE] [--skimage FILE]

The report calls two images near duplicates when the 64-bit difference hashes of their
small decodes (``tfrecorder._quality.small`` then ``dhash``) differ in at most
``MAX_DISTANCE`` bits. This measures, at every distance from 0 to ``--max-distance``,
how many pairs of files that their makers published as one picture are found (true
positives), how many pairs of different pictures are found (false positives) and how
many copies are missed (false negatives), on material whose copies nobody made for
this test: each is a published package, fetched from its registry into ``--cache``
(once; later runs reuse it), or read from the archive given with its option.

The materials, and where their ground truth comes from:

``pillow``: Pillow 13.0.0's source distribution (PyPI, ``pip download --no-binary
    :all: pillow==13.0.0``), its ``Tests/images``, photographs only. Pillow's tests
    keep one photograph, Grace Hopper's portrait, as ``hopper.*`` and ``hopper_*`` in
    about eighty files: every format Pillow reads, 8- and 16-bit, grey, 2- and 4-bit
    grey, bilevel, float, palette, EXIF-rotated copies, a 64 px GIF, 16 px icons.
    Every file whose name starts with ``hopper`` is that picture, except those the
    names or the pixels show to be edits rather than copies (``PILLOW_NOT_COPIES``:
    embossed, turned 45 degrees, masks, drawn over, a tighter crop, a grey ramp,
    garbled pixels, false colours). Beside it: ``flower`` (``flower.jpg``, ``.webp``,
    ``flower_thumbnail.png``, which the JPEG tests compare with a thumbnail of
    ``flower.jpg``, and the two YCbCr JPEG-in-TIFF files the libtiff tests compare
    with ``flower.jpg``), ``flower2`` (the same, with ``flower2.jpg``), ``sugarshack``
    (four MPO/JPEG files), ``iptc`` (``iptc.jpg``, ``iptc_roundUp.jpg``), ``tv``
    (``tv.rgb``, ``tv16.sgi``) and ten photographs of other names, one picture each.
    Files of other names are left out, even where they hold one of these pictures
    under a name that does not say so (``jpeg_ff00_header.jpg`` holds ``flower2``).
``wallpapers``: Debian's ``plasma-workspace-wallpapers`` (KDE Plasma 5.27's
    wallpapers; ``apt-get download``), ``usr/share/wallpapers/NAME/contents``. Each
    wallpaper folder is one picture: its landscape image(s) under ``images/`` and its
    ``screenshot.*``, the preview the makers made of it (400-440 px wide; for the
    3840x2160 ones a 16:10 crop of a 16:9 picture) are copies; its portrait
    recomposition (``images/1080x1920.*`` etc.) and its dark edition
    (``images_dark/``) are variants: a pair with a variant counts neither way. The
    other resolutions are symbolic links to one file in the package (byte-identical
    copies, which the report lists as exact duplicates) and are not read. About a
    third are photographs (BytheWater, EveningGlow, FallenLeaf, Path, ...), the rest
    digital art.
``matplotlib``: matplotlib 3.11.2's wheel, ``mpl-data/images``: the toolbar icons as
    ``NAME.png`` (24 px) and ``NAME_large.png`` (48 px), one picture per NAME, and
    the three raster pictures of ``mpl-data/sample_data``, one picture each. Icons:
    black glyphs on a transparent background, which the RGB decode drops.
``skimage``: scikit-image 0.26.0's wheel, ``skimage/data``: 29 image files, mostly
    photographs, one picture per file, except ``chessboard_GRAY.png`` and
    ``chessboard_RGB.png`` (one picture; the only pair of copies) and the two views
    of the stereo pair ``motorcycle_left/right.png`` (variants of one scene).

Positives: pairs of copies of one picture. Negatives: pairs of files of two different
pictures. Not counted: pairs with a variant of the same picture, and pairs of byte-
identical files (the report finds them by their SHA-256 and never compares their
hashes). Left out, and listed with ``--list``: files Pillow cannot open or decode
(animations count by their first frame), and files Pillow decodes but for which
``small`` returns None (palette and bilevel images whose shorter side is at least
twice ``SMALL_SIDE``: Pillow's ``Image.reduce`` refuses those modes), counted apart as
positives the report cannot find at any distance. Pairs are counted over all pairs, so
a picture with n copies weighs n(n-1)/2 (Pillow's portrait, about 3,000 pairs,
outweighs the rest): read the materials apart. The ``files`` column is the share of
copies that have at least one other copy of their picture within the distance. Takes
about 10 s once the material is fetched (about 170 MB, the wallpapers 94 MB of it).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import io
import itertools
import lzma
import os
import re
import subprocess
import sys
import tarfile
import warnings
import zipfile
from typing import Callable, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tfrecorder import _quality as q  # noqa: E402

RASTER = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".ico")

# --- labels ---------------------------------------------------------------------------

COPY, VARIANT = "copy", "variant"

#: hopper files that are not a copy of the portrait, and why.
PILLOW_NOT_COPIES = {
    "hopper_emboss_3x3.bmp": "embossed",
    "hopper_emboss_5x5.bmp": "embossed",
    "hopper_45.png": "turned 45 degrees, black corners",
    "hopper_mask.ico": "a mask",
    "hopper_mask.png": "a mask",
    "hopper_draw.ico": "drawn over",
    "hopper_256x256.ico": "a tighter crop of the portrait",
    "hopper_rle8_grayscale.bmp": "a 256x10 grey ramp",
    "hopper_bad_exif.jpg": "garbled pixels",
    "hopper.pcd": "Pillow's Photo CD decoder gives false colours",
}
#: Families of Pillow's test photographs named otherwise than by a common prefix.
PILLOW_FAMILIES = {
    "flower": ["flower.jpg", "flower.webp", "flower_thumbnail.png",
               "tiff_strip_ycbcr_jpeg_2x2_sampling.tif",
               "tiff_tiled_ycbcr_jpeg_2x2_sampling.tif"],
    "flower2": ["flower2.jpg", "flower2.webp", "tiff_strip_ycbcr_jpeg_1x1_sampling.tif",
                "tiff_tiled_ycbcr_jpeg_1x1_sampling.tif"],
    "sugarshack": ["sugarshack.mpo", "sugarshack_bad_mpo_header.jpg",
                   "sugarshack_ifd_offset.mpo", "sugarshack_no_data.mpo"],
    "iptc": ["iptc.jpg", "iptc_roundUp.jpg"],
    "tv": ["tv.rgb", "tv16.sgi"],
}
#: Pillow's other test photographs, one picture each.
PILLOW_SINGLE = ["fujifilm.mpo", "frozenpond.mpo", "balloon.jpf", "exif_typeerror.jpg",
                 "junk_jpeg_header.jpg", "xmp_test.jpg", "icc_profile_big.jpg",
                 "exif-72dpi-int.jpg", "app13-multiple.jpg", "avif/rot0mir0.avif"]


def label_pillow(path: str):
    """``(picture, kind)``, a reason string to leave the file out, or None to ignore it."""
    m = re.search(r"/Tests/images/(.+)$", path)
    if not m:
        return None
    rel = m.group(1)
    base = rel.rsplit("/", 1)[-1]
    if base.startswith("hopper"):
        return PILLOW_NOT_COPIES.get(base, ("hopper", COPY))
    for picture, names in PILLOW_FAMILIES.items():
        if rel in names:
            return picture, COPY
    if rel in PILLOW_SINGLE:
        return rel, COPY
    return None


def label_wallpapers(path: str):
    m = re.search(r"usr/share/wallpapers/([^/]+)/contents/(.+)$", path)
    if not m or not m.group(2).lower().endswith(RASTER):
        return None
    name, rel = m.groups()
    if rel.startswith("screenshot."):
        return name, COPY
    size = re.match(r"images(_dark)?/(\d+)x(\d+)\.", rel)
    if not size:
        return None
    dark, w, h = size.group(1), int(size.group(2)), int(size.group(3))
    return name, (VARIANT if dark or h > w else COPY)


def label_matplotlib(path: str):
    m = re.search(r"mpl-data/(images|sample_data)/([^/]+)$", path)
    if not m or not m.group(2).lower().endswith(RASTER):
        return None
    folder, base = m.groups()
    if folder == "images":
        return "icon " + re.sub(r"(_large)?\.png$", "", base), COPY
    return base, COPY


def label_skimage(path: str):
    m = re.search(r"skimage/data/([^/]+)$", path)
    if not m or not m.group(1).lower().endswith(RASTER):
        return None
    base = m.group(1)
    if base.startswith("chessboard_"):
        return "chessboard", COPY
    if base.startswith("motorcycle_"):
        return "motorcycle", VARIANT
    return base, COPY


# --- fetching and reading -------------------------------------------------------------

def pip_fetch(cache: str, requirement: str, pattern: str, sdist: bool) -> str:
    found = sorted(glob.glob(os.path.join(cache, pattern)))
    if not found:
        kind = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *kind,
                        requirement, "-d", cache], check=True, stdout=subprocess.DEVNULL)
        found = sorted(glob.glob(os.path.join(cache, pattern)))
    return found[-1]


def apt_fetch(cache: str, package: str) -> str:
    pattern = os.path.join(cache, f"{package}_*.deb")
    if not glob.glob(pattern):
        subprocess.run(["apt-get", "download", package], cwd=cache, check=True,
                       stdout=subprocess.DEVNULL)
    return sorted(glob.glob(pattern))[-1]


def read_tar(tf: tarfile.TarFile, want: Callable[[str], bool]) -> Iterator[tuple]:
    for m in tf:
        if m.issym() or m.islnk():
            if want(m.name):
                yield m.name, None
        elif m.isfile() and want(m.name):
            yield m.name, tf.extractfile(m).read()


def members(archive: str, want: Callable[[str], bool]) -> Iterator[tuple]:
    """``(path, bytes)`` of the files of a .tar.gz, .whl/.zip or .deb whose path ``want``
    accepts; bytes is None for a link."""
    if archive.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if want(name):
                    yield name, z.read(name)
    elif archive.endswith(".deb"):
        with open(archive, "rb") as f:
            if f.read(8) != b"!<arch>\n":
                raise ValueError(f"{archive}: not a Debian package")
            while True:
                header = f.read(60)
                if len(header) < 60:
                    raise ValueError(f"{archive}: no data.tar member")
                name = header[:16].decode().strip().rstrip("/")
                size = int(header[48:58])
                if name.startswith("data.tar"):
                    blob = f.read(size)
                    if name.endswith(".xz"):
                        blob = lzma.decompress(blob)
                    elif not name.endswith((".tar", ".gz")):
                        raise ValueError(f"{archive}: cannot unpack {name}")
                    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tf:
                        yield from read_tar(tf, want)
                    return
                f.seek(size + size % 2, os.SEEK_CUR)
    else:
        with tarfile.open(archive, "r:*") as tf:
            yield from read_tar(tf, want)


@dataclasses.dataclass
class Material:
    key: str
    title: str
    fetch: Callable[[str], str]
    label: Callable[[str], object]


MATERIALS = [
    Material("pillow", "Pillow sdist, Tests/images (photographs)",
             lambda c: pip_fetch(c, "pillow==13.0.0", "pillow-13.0.0.tar.gz", True),
             label_pillow),
    Material("wallpapers", "Debian plasma-workspace-wallpapers (images vs previews)",
             lambda c: apt_fetch(c, "plasma-workspace-wallpapers"), label_wallpapers),
    Material("matplotlib", "matplotlib wheel, toolbar icons 24/48 px + sample_data",
             lambda c: pip_fetch(c, "matplotlib==3.11.2", "matplotlib-3.11.2-*.whl",
                                 False), label_matplotlib),
    Material("skimage", "scikit-image wheel, skimage/data",
             lambda c: pip_fetch(c, "scikit-image==0.26.0", "scikit_image-0.26.0-*.whl",
                                 False), label_skimage),
]

# --- hashing and counting -------------------------------------------------------------


@dataclasses.dataclass
class Item:
    path: str
    picture: str
    kind: str
    sha: str
    hash: int | None


def decodes(data: bytes) -> str | None:
    """Pillow's mode for the image, or None when Pillow cannot decode it."""
    from PIL import Image
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return im.mode
    except Exception:
        return None


def collect(material: Material, archive: str) -> tuple[list, list]:
    """The labelled items with their hashes, and ``(path, reason)`` of files left out."""
    items, out = [], []
    for path, data in members(archive, lambda p: material.label(p) is not None):
        label = material.label(path)
        if isinstance(label, str):
            out.append((path, f"not a copy: {label}"))
            continue
        if data is None:
            out.append((path, "a link to another file of the package"))
            continue
        img = q.small(data)
        if img is None:
            mode = decodes(data)
            if mode is None:
                out.append((path, "does not decode"))
                continue
            out.append((path, f"no hash: small() returned None (mode {mode})"))
            items.append(Item(path, label[0], label[1], q.digest(data), None))
            continue
        items.append(Item(path, label[0], label[1], q.digest(data), q.dhash(img)))
    return items, out


@dataclasses.dataclass
class Counts:
    images: int = 0
    pictures: int = 0
    positives: list = dataclasses.field(default_factory=list)   # distances
    negatives: list = dataclasses.field(default_factory=list)   # distances
    unhashed_positives: int = 0
    not_counted: int = 0
    byte_identical: int = 0
    far: list = dataclasses.field(default_factory=list)         # (d, a, b)
    close: list = dataclasses.field(default_factory=list)       # (d, a, b), negatives
    nearest: dict = dataclasses.field(default_factory=dict)     # copy -> nearest copy


def pairs(items: list, max_distance: int) -> Counts:
    c = Counts()
    hashed = [i for i in items if i.hash is not None]
    c.images = len(hashed)
    c.pictures = len({i.picture for i in hashed})
    for a, b in itertools.combinations(items, 2):
        if a.picture == b.picture and VARIANT in (a.kind, b.kind):
            c.not_counted += 1
            continue
        if a.sha == b.sha:
            c.byte_identical += 1
            continue
        if a.hash is None or b.hash is None:
            c.unhashed_positives += a.picture == b.picture
            continue
        d = (a.hash ^ b.hash).bit_count()
        if a.picture == b.picture:
            c.positives.append(d)
            for x in (a.path, b.path):
                c.nearest[x] = min(d, c.nearest.get(x, 64))
            if d > max_distance:
                c.far.append((d, a.path, b.path))
        else:
            c.negatives.append(d)
            if d <= max_distance:
                c.close.append((d, a.path, b.path))
    return c


def table(c: Counts, max_distance: int, indent: str = "  ") -> list[str]:
    """Per distance: true and false positives, false negatives, precision, recall, the
    share of negative pairs found (FP/neg) and of copies found with at least one other
    copy of their picture (files)."""
    rows = [f"{indent}{'d':>2} {'TP':>6} {'FP':>5} {'FN':>6} {'precision':>9} "
            f"{'recall':>6} {'FP/neg':>7} {'files':>5}"]
    for t in range(max_distance + 1):
        tp = sum(d <= t for d in c.positives)
        fp = sum(d <= t for d in c.negatives)
        fn = len(c.positives) - tp
        prec = f"{tp / (tp + fp):.3f}" if tp + fp else "-"
        rec = f"{tp / len(c.positives):.3f}" if c.positives else "-"
        rate = f"{fp / len(c.negatives):.5f}" if c.negatives else "-"
        files = (f"{sum(d <= t for d in c.nearest.values()) / len(c.nearest):.3f}"
                 if c.nearest else "-")
        mark = "  <- MAX_DISTANCE" if t == q.MAX_DISTANCE else ""
        rows.append(f"{indent}{t:>2} {tp:>6} {fp:>5} {fn:>6} {prec:>9} {rec:>6} "
                    f"{rate:>7} {files:>5}{mark}")
    return rows


def summary(name: str, c: Counts) -> str:
    return (f"{name}: {c.images} images hashed, {c.pictures} pictures; "
            f"{len(c.positives)} positive pairs, {len(c.negatives)} negative pairs; "
            f"not counted: {c.not_counted} pairs with a variant, {c.byte_identical} "
            f"byte-identical; {c.unhashed_positives} positive pairs with a file that "
            f"got no hash")


def merge(counts: list[Counts]) -> Counts:
    m = Counts()
    for c in counts:
        m.images += c.images
        m.pictures += c.pictures
        m.positives += c.positives
        m.negatives += c.negatives
        m.unhashed_positives += c.unhashed_positives
        m.not_counted += c.not_counted
        m.byte_identical += c.byte_identical
        m.nearest.update(c.nearest)
    return m


def listing(out: list, c: Counts) -> None:
    """The files left out (links only counted), the copies whose nearest other copy is
    farther than MAX_DISTANCE, and the negative pairs within --max-distance."""
    def short(p: str) -> str:
        return p.split("wallpapers/", 1)[1] if "wallpapers/" in p else p.rsplit("/", 1)[-1]

    for path, why in out:
        if not why.startswith("a link"):
            print(f"     left out {short(path)}: {why}")
    missed = sorted((d, p) for p, d in c.nearest.items() if d > q.MAX_DISTANCE)
    for d, p in missed:
        print(f"     copy whose nearest other copy is at d={d}: {short(p)}")
    far = {}
    for d, a, b in c.far:
        for p in (a, b):
            far[p] = far.get(p, 0) + 1
    for p, n in sorted(far.items(), key=lambda kv: -kv[1])[:10]:
        print(f"     {n} positive pairs farther than --max-distance with {short(p)}")
    for d, a, b in sorted(c.close):
        print(f"     negative pair at d={d}: {short(a)} ~ {short(b)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                    "near_duplicates_eval"),
                    help="where the packages are downloaded (reused when present)")
    ap.add_argument("--max-distance", type=int, default=12)
    ap.add_argument("--only", default="", help="comma-separated materials to run")
    ap.add_argument("--small-side", type=int, default=None,
                    help="hash from small decodes of this side instead of "
                         "tfrecorder._quality.SMALL_SIDE")
    ap.add_argument("--list", action="store_true",
                    help="also list the files left out and the positives farther apart "
                         "than --max-distance")
    for m in MATERIALS:
        ap.add_argument(f"--{m.key}", metavar="FILE",
                        help=f"the {m.key} archive, instead of downloading it")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None
    os.makedirs(args.cache, exist_ok=True)
    only = {k for k in args.only.split(",") if k}
    if args.small_side is not None:
        q.SMALL_SIDE = args.small_side
    print(f"hash {q.HASH} of small() decodes, SMALL_SIDE={q.SMALL_SIDE}, "
          f"MAX_DISTANCE={q.MAX_DISTANCE}\n")

    results = []
    for m in MATERIALS:
        if only and m.key not in only:
            continue
        archive = getattr(args, m.key)
        if archive is None:
            try:
                archive = m.fetch(args.cache)
            except (subprocess.CalledProcessError, FileNotFoundError, IndexError) as e:
                print(f"== {m.key}: skipped, could not fetch it ({e}); "
                      f"give the archive with --{m.key}\n")
                continue
        items, out = collect(m, archive)
        c = pairs(items, args.max_distance)
        results.append((m.key, c))
        print(f"== {m.key}: {m.title}\n   {os.path.basename(archive)}")
        print("   " + summary("counted", c))
        reasons: dict[str, int] = {}
        for _, why in out:
            key = why.split(" (")[0] if why.startswith("no hash") else why
            key = "not a copy" if key.startswith("not a copy") else key
            reasons[key] = reasons.get(key, 0) + 1
        if reasons:
            print("   left out: " + "; ".join(f"{n} {k}" for k, n in reasons.items()))
        print("\n".join(table(c, args.max_distance)))
        if args.list:
            listing(out, c)
        print()

    if len(results) > 1:
        groups = [("overall", [c for _, c in results])]
        photos = [c for k, c in results if k != "matplotlib"]
        if len(photos) not in (0, len(results)):
            groups.append(("overall without the matplotlib icons", photos))
        for name, cs in groups:
            c = merge(cs)
            print(f"== {name}\n   " + summary("counted", c))
            print("\n".join(table(c, args.max_distance)))
            print()


if __name__ == "__main__":
    main()
