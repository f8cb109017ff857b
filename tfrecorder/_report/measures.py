"""One image measured for the data report: the SHA-256 of its bytes, its small decode,
the 64-bit difference hash and the 8x8 thumbnail that confirms a near pair, its colour
sums, and the image problems its pixels and its header show.

Its own module because these are the per-image figures, on plain values (bytes or a
PIL image in, numbers out), that a shard writer takes of every record (``looker.Looker``)
and the rows files keep for updates; matching them across records
(``matching``) and the report built from them (``quality``) only use the results.
"""

from __future__ import annotations

import functools
import hashlib
import math

#: The perceptual hash of near duplicates: a difference hash of a 9x8 grey reduction.
HASH = "dhash-64"
#: Two images whose hashes differ in at most this many of their 64 bits are near
#: duplicate candidates (``Options.near_distance``; docs/quality.md has what it finds
#: at each distance).
MAX_DISTANCE = 8
#: The most bits ``near_distance`` may allow: beyond, a hash's bands are so narrow that
#: every record meets most others.
MAX_NEAR_DISTANCE = 16
#: Side of the grey thumbnail that confirms a near pair (``fingerprint``).
THUMB = 8
#: An image whose 16x16 grey reduction varies by less than this (standard deviation,
#: in levels of 255) once its best-fitting plane is taken away has too little detail to
#: hash: plain, a gradient, fine text or stripes that the reduction averages away, a
#: very dark photo. Its hash is noise, so it is never matched (bench/near_duplicates_eval.py).
MIN_DETAIL = 4.0
#: Two thumbnails whose correlation is below this are different pictures, whatever
#: their hashes say.
MIN_CORRELATION = 0.93
#: ... and so are two whose correlation, once each thumbnail's best-fitting plane is
#: taken away, is below this: two abstract wallpapers lit alike, light in one corner and
#: dark in the other, correlate by their gradient alone (0.931 at 2 bits); what tells a
#: copy is the detail beside it (0.84 for those two, 0.95 or more for copies).
MIN_DETAIL_CORRELATION = 0.9
#: The side, in pixels, at least, of the small decode an image is hashed from (``reduced``).
SMALL_SIDE = 32
#: The side, at least, a JPEG is decoded at for it (Pillow's draft): one of 512 pixels or
#: more at 1/8 scale, its DC coefficients only. Twice SMALL_SIDE, not SMALL_SIDE: a small
#: JPEG decoded to 32 pixels has its levels averaged over 8x8 blocks, which moves its
#: entropy by half a bit either way (a dark edition of 256 pixels: 2.94 bits whole, 3.57
#: at 1/8, 2.90 at 1/4), and saves nothing measurable (0.16 ms both, there).
DRAFT_SIDE = 64
#: Image problems, by CleanVision's names, in the order the report lists them, and
#: ``low_detail``, images the near search cannot tell apart. The first five need pixels (``pixel_issues``, where the run decodes images anyway); the
#: rest are told by the image's header (``looker.Looker.add``) or, for ``odd_size``, by the
#: whole dataset's sizes (``quality.build``).
ISSUES = ("dark", "light", "blurry", "low_information", "low_detail", "grayscale",
          "odd_aspect_ratio", "odd_size")
#: CleanVision 0.3's default thresholds, so that its users find the same images: the
#: 99th percentile of perceived brightness below DARK; the 5th above 1 - LIGHT ...
DARK, LIGHT = 0.32, 0.05
#: ... an entropy below this many bits (``entropy``; its score 0.3 at factor 0.1) ...
LOW_ENTROPY = 3.0
#: ... its blurriness score (edge strength and grey spread) below BLURRY ...
BLURRY = 0.29
#: ... taken, as CleanVision takes it, on the image resized to at most this many pixels
#: across (``blur_view``): the edges' strength depends on the number of pixels.
BLUR_SIDE = 64
#: ... and the shorter side less than this share of the longer (``odd_size``, told
#: against the whole dataset's sizes, is ``quality.ODD_SIZE_IQR``'s).
ODD_ASPECT = 0.35


def digest(data: bytes) -> str:
    """The SHA-256 of an image file's bytes, as read, before any re-encoding."""
    return hashlib.sha256(data).hexdigest()


def small(data: bytes):
    """``data`` decoded small and upright, RGB: a JPEG at the smallest DCT scale that
    keeps both sides at least ``DRAFT_SIDE`` (Pillow's draft), anything else decoded and
    reduced. None when it does not decode. Its ``info["full_size"]`` is the upright
    image's whole size, which ``pixel_issues`` looks at it as, its ``info["entropy"]``
    the ``entropy`` of the decode before it was reduced, and its ``info["blur_view"]``
    the ``blur_view`` of that decode."""
    from tfrecorder._folder.image_headers import open_stored, pil

    pil()  # Pillow imported by one thread, before ImageOps is looked up
    from PIL import ImageOps

    try:
        img = open_stored(data)
        full = img.size
        if img.format in ("JPEG", "MPO"):
            img.draft("RGB", (DRAFT_SIDE, DRAFT_SIDE))
        drafted = img.size
        img = ImageOps.exif_transpose(img)
        if img.size != drafted:  # turned a quarter
            full = full[::-1]
        levels = entropy(img)
        view = blur_view(img, full)
        out = reduced(img)
        out.info["full_size"] = full
        out.info["entropy"] = levels
        out.info["blur_view"] = view
        return out
    except Exception:  # the image was checked already; a hash is not worth a failure
        return None


def reduced(img):
    """``img`` in RGB, reduced (box filter, in C) to a shorter side of SMALL_SIDE to
    2 * SMALL_SIDE pixels where it is larger."""
    from tfrecorder._folder.image_headers import _WIDE_GREY, _eight_bit

    if img.mode in _WIDE_GREY:  # 16-bit grey: as TensorFlow decodes it, not clipped white
        img = _eight_bit(img)
    elif img.mode not in ("L", "RGB", "RGBA", "LA"):  # palette, 1-bit, CMYK: reduce refuses
        img = img.convert("RGBA" if "transparency" in img.info or "A" in img.mode else "RGB")
    factor = min(img.size) // SMALL_SIDE
    if factor > 1:
        img = img.reduce(factor)
    return img.convert("RGB") if img.mode != "RGB" else img


def blur_view(img, full_size: tuple | None = None):
    """What ``blurry`` is measured on: ``img`` (a decode of the whole picture at any scale
    of ``full_size``, its own size where None) resized, as CleanVision resizes the
    stored image (bicubic, then grey), to at most BLUR_SIDE pixels across, but never
    enlarged. Taken from the decode before ``reduced``, which for a large photo is
    about 45 px across: enlarged to 64 it was softened by an amount that depended on the
    file's size, and sharp wallpapers and their half-size copies were called blurry."""
    from tfrecorder._folder.image_headers import _WIDE_GREY, _eight_bit, pil

    Image = pil()
    width, height = full_size or img.size
    scale = max(width, height) / BLUR_SIDE
    size = ((max(1, int(width // scale)), max(1, int(height // scale))) if scale > 1
            else (width, height))
    if img.mode in _WIDE_GREY:  # 16-bit grey: as TensorFlow decodes it, not clipped white
        img = _eight_bit(img)
    elif img.mode not in ("L", "RGB", "RGBA", "LA"):  # palette, 1-bit, CMYK
        img = img.convert("RGBA" if "transparency" in img.info or "A" in img.mode else "RGB")
    if size[0] <= img.width and size[1] <= img.height and size != img.size:
        # a box reduction (in C) to twice the size first: a large decode costs little
        img = img.resize(size, Image.Resampling.BICUBIC, reducing_gap=2.0)
    return img.convert("L")


def entropy(img) -> float:
    """CleanVision's ``low_information`` figure: the entropy, in bits, of ``img``'s
    histogram in its own mode, its bands' histograms taken as one (Pillow's
    ``Image.entropy``). So it is not the grey levels': an RGB image has log2(3) bits
    more than its levels per band (a grey picture stored as RGB too), an RGBA one counts
    its alpha, a palette image its palette indices. Taken before ``reduced``: averaging
    pixels makes levels that were not there, or smooths away ones that were."""
    return float(img.entropy())


def dhash(img) -> int:
    """The 64-bit difference hash of a PIL image: its grey 9x8 reduction, one bit per
    pair of horizontal neighbours, set where the left one is brighter."""
    from tfrecorder._folder.image_headers import pil

    Image = pil()
    grey = img.convert("L").resize((9, 8), Image.Resampling.BOX)
    px = grey.tobytes()
    h = 0
    for y in range(8):
        row = px[9 * y: 9 * y + 9]
        for x in range(8):
            h = (h << 1) | (row[x] > row[x + 1])
    return h


def pixel_issues(img, grey=None, full_size: tuple | None = None,
                 bits: float | None = None, view=None) -> dict:
    """The image problems its small decode shows, ``{issue: score}`` (scores in 0..1,
    lower is worse, as CleanVision's): ``dark`` (the 99th percentile of perceived
    brightness), ``light`` (1 - the 5th), ``blurry``, ``low_information`` (``entropy`` /
    10, of the decode before its reduction: ``bits``, else ``info["entropy"]`` as
    ``small`` gives it, else ``img``'s own) and ``low_detail`` (too little detail to hash,
    ``MIN_DETAIL``: never matched as a near duplicate; score: the detail in levels of
    255). But for ``low_information``, measured on the
    small decode, not the whole image: a bright speck smaller than a pixel of it does not
    save a dark image; ``blurry`` on the ``blur_view`` of the decode before its
    reduction (``view``, else ``info["blur_view"]`` as ``small`` gives it, else
    ``img``'s own, at most BLUR_SIDE px across, from ``full_size``, else
    ``info["full_size"]``), never enlarged: its score depends on the number of pixels.
    ``grey``: its ``grey16`` where the caller has it. A few tenths of a millisecond:
    NumPy on a few thousand pixels, no full sort."""
    import numpy as np
    from tfrecorder._folder.image_headers import pil

    pil()  # Pillow imported by one thread, before ImageFilter is looked up
    from PIL import ImageFilter

    rgb = img.convert("RGB") if img.mode != "RGB" else img
    pixels = np.asarray(rgb)  # one copy of its bytes: Python calls are the cost here
    # perceived brightness squared, per pixel, from a table of squares: no float pow
    squares, weights = _tables()[:2]
    sq = squares[pixels] @ weights
    flat = sq.ravel()
    n = flat.size
    ranks = [(n - 1) * p for p in (0.05, 0.99)]
    at = sorted({math.floor(x) for x in ranks} | {math.ceil(x) for x in ranks})
    partitioned = np.partition(flat, at)

    def percentile(x: float) -> float:  # NumPy's linear interpolation, of the roots
        lo, hi = math.floor(x), math.ceil(x)
        a, b_ = math.sqrt(partitioned[lo]), math.sqrt(partitioned[hi])
        return (a + (b_ - a) * (x - lo)) / 255

    p5, p99 = percentile(ranks[0]), percentile(ranks[1])
    out = {}
    if p99 < DARK:
        out["dark"] = round(p99, 4)
    if 1 - p5 < LIGHT:
        out["light"] = round(1 - p5, 4)
    detail = _detail(grey16(img) if grey is None else grey)
    if bits is None:
        bits = img.info.get("entropy")
    if bits is None:
        bits = entropy(img)
    if bits < LOW_ENTROPY:
        out["low_information"] = round(bits / 10, 4)
    if detail < MIN_DETAIL:
        out["low_detail"] = round(detail / 255, 4)
    if view is None:
        view = img.info.get("blur_view")
    grey = view if view is not None else blur_view(
        rgb, full_size or img.info.get("full_size", img.size))
    # both from Pillow's histograms (in C): the edges' variance over their levels, and
    # the spread of the grey levels' counts
    edges = np.asarray(grey.filter(ImageFilter.FIND_EDGES).histogram(), np.float64)
    counts = np.asarray(grey.histogram(), np.float64)
    levels = _tables()[4]
    n = edges.sum()
    mean = float(edges @ levels) / n
    variance = max(0.0, float(edges @ (levels * levels)) / n - mean * mean)
    spread = math.sqrt(max(0.0, float(counts @ counts) / 256 - (n / 256) ** 2))
    spread = 1 - math.exp(-spread * 0.01)
    score = min(1.0, 1 - math.exp(-math.sqrt(variance) * 0.01)
                + (spread if spread > 0.18 else 0.0))
    if score < BLURRY:
        out["blurry"] = round(score, 4)
    return out


def header_issues(width: int, height: int, channels: int) -> dict:
    """The image problems its header tells: ``grayscale`` (one channel, score 0) and
    ``odd_aspect_ratio`` (score: the shorter side over the longer)."""
    out = {}
    if channels == 1:
        out["grayscale"] = 0.0
    if width and height:
        ratio = min(width / height, height / width)
        if ratio < ODD_ASPECT:
            out["odd_aspect_ratio"] = round(ratio, 4)
    return out


@functools.lru_cache(maxsize=1)
def _tables() -> tuple:
    """Made once, on first use (NumPy is imported only by runs that decode images): the
    squares of 0..255, CleanVision's (HSP) brightness weights, and the centred x and y
    of a 16x16 grid's cells, row by row, and the levels 0..255."""
    import numpy as np

    squares = np.arange(256, dtype=np.float32) ** 2
    weights = np.array([0.241, 0.691, 0.068], np.float32)
    c = np.arange(16, dtype=np.float64) - 7.5
    return (squares, weights, np.tile(c, 16), np.repeat(c, 16),
            np.arange(256, dtype=np.float64))


def grey16(img):
    """``img``'s 16x16 grey reduction (box filter), as 256 floats."""
    import numpy as np
    from tfrecorder._folder.image_headers import pil

    Image = pil()
    return np.asarray(img.convert("L").resize((16, 16), Image.Resampling.BOX),
                      np.float64).ravel()



def _detail(grey) -> float:
    """How much a 16x16 grey reduction (``grey16``) varies once its best-fitting plane
    (least squares: a gradient) is taken away: the standard deviation of the rest, in
    levels of 255; what a hash can tell an image by."""
    _, _, xc, yc, _ = _tables()
    sxx = 5440.0  # xc @ xc (and yc @ yc): 16 rows of the squares of -7.5 .. 7.5
    rest = grey - grey.mean()
    rest = rest - xc * (float(rest @ xc) / sxx) - yc * (float(rest @ yc) / sxx)
    return math.sqrt(float(rest @ rest) / 256)  # its mean is 0: the plane is centred


def fingerprint(img, grey=None) -> bytes | None:
    """What confirms a near pair found by the hash: the image's 8x8 grey reduction,
    normalised (mean 0, 32 steps per standard deviation, as signed bytes), 64 bytes; None
    when the image has too little detail (``MIN_DETAIL``) to be matched at all. A grey
    copy, a resize or a re-encode keeps it; two different pictures whose hashes agree by
    chance seldom have correlated thumbnails (``confirmed``). ``grey``: its ``grey16``
    where the caller has it."""
    import numpy as np

    grey = grey16(img) if grey is None else grey
    if _detail(grey) < MIN_DETAIL:
        return None
    small = grey.reshape(8, 2, 8, 2).mean(axis=(1, 3))
    z = (small - small.mean()) / (small.std() or 1.0) * 32
    return np.clip(np.round(z), -127, 127).astype(np.int8).tobytes()


def confirmed(a: bytes, b: bytes) -> bool:
    """Whether two ``fingerprint`` thumbnails show one picture: their correlation is at
    least MIN_CORRELATION, and at least MIN_DETAIL_CORRELATION once each one's
    best-fitting plane is taken away (taken from the stored thumbnails, so that those of
    older rows files are compared alike)."""
    import numpy as np

    x = np.frombuffer(a, np.int8).astype(np.float64)
    y = np.frombuffer(b, np.int8).astype(np.float64)
    if _correlation(x, y) < MIN_CORRELATION:
        return False
    c = np.arange(THUMB, dtype=np.float64) - (THUMB - 1) / 2
    xc, yc = np.tile(c, THUMB), np.repeat(c, THUMB)
    sxx = float(xc @ xc)  # and yc @ yc
    for v in (x, y):
        v -= v.mean()
        v -= xc * (float(v @ xc) / sxx) + yc * (float(v @ yc) / sxx)
    return _correlation(x, y) >= MIN_DETAIL_CORRELATION


def _correlation(x, y) -> float:
    """The correlation of two float vectors; 0 where either is flat."""
    x = x - x.mean()
    y = y - y.mean()
    norm = math.sqrt(float(x @ x) * float(y @ y))
    return float(x @ y) / norm if norm else 0.0


def channel_sums(img) -> tuple[int, list[int], list[int]]:
    """Pixels, and per channel (R, G, B, levels 0..255) the sum and the sum of squares,
    from the image's histogram (Pillow's, in C), summed as whole numbers by NumPy: the
    figures of Pillow's ImageStat, which sums the 768 bins in Python (a sixth of the
    report's cost per photo, and the GIL held meanwhile). Whole numbers add up to the
    same totals in any order: a version's statistics do not depend on which of its
    records an update kept (their sums are in the rows files) and which it wrote."""
    import numpy as np

    rgb = img.convert("RGB") if img.mode != "RGB" else img
    hist = np.asarray(rgb.histogram(), np.int64).reshape(3, 256)
    levels = np.arange(256, dtype=np.int64)
    count = int(hist[0].sum())
    return (count, [int(v) for v in hist @ levels],
            [int(v) for v in hist @ (levels * levels)])
