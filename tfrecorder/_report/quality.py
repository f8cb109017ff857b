"""The data report: duplicates, leaks between splits, label conflicts and statistics,
found in the conversion's own pass.

Each shard writer looks at every image it already holds (``Looker``): the SHA-256 of the
bytes read, and with ``near_duplicates`` a 64-bit difference hash of a small decode and
the 8x8 grey thumbnail that confirms it (``fingerprint``; none for an image with too
little detail to hash, which is never matched). The pipeline then keys every record by
its digest and by bands of its hash (``keyed``), so that one grouping brings together
the records that may match and nothing else (``found``, where a near pair counts only
when the thumbnails agree too); the last step turns the matches and the shards' statistics into
``quality.json`` (``build``). No step holds a row per record of the whole table.

Pure functions on plain values: no Beam here, the pipeline only wires them.
"""

from __future__ import annotations

import array
import dataclasses
import functools
import hashlib
import heapq
import io
import itertools
import math
from typing import Any, Iterable, Iterator

from tfrecorder._errors import shown_json
from tfrecorder._folder.layout import split_order

#: The perceptual hash of near duplicates: a difference hash of a 9x8 grey reduction.
HASH = "dhash-64"
#: Two images whose hashes differ in at most this many of their 64 bits are near
#: duplicate candidates (``Options.near_distance``; docs/quality.md has what it finds
#: at each distance).
MAX_DISTANCE = 6
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
#: Pairs written to quality.json at most; ``truncated`` counts the rest.
MAX_PAIRS = 10_000
#: Members of one group of matching records that are compared (a folder of blank
#: images hashes alike): the rest are counted in ``truncated``, never compared.
GROUP_LIMIT = 256
#: The side, in pixels, at least, of the small decode an image is hashed from: a JPEG
#: of 256 pixels or more is decoded at 1/8 scale, its DC coefficients only.
SMALL_SIDE = 32
#: Image problems, by CleanVision's names, in the order the report lists them, and
#: ``low_detail``, images the near search cannot tell apart. The first five need pixels (``pixel_issues``, where the run decodes images anyway); the
#: rest are told by the image's header (``Looker.add``) or, for ``odd_size``, by the
#: whole dataset's sizes (``build``).
ISSUES = ("dark", "light", "blurry", "low_information", "low_detail", "grayscale",
          "odd_aspect_ratio", "odd_size")
#: CleanVision 0.3's default thresholds, so that its users find the same images: the
#: 99th percentile of perceived brightness below DARK; the 5th above 1 - LIGHT ...
DARK, LIGHT = 0.32, 0.05
#: ... a grey-level entropy below this many bits (its score 0.3 at factor 0.1) ...
LOW_ENTROPY = 3.0
#: ... its blurriness score (edge strength and grey spread) below BLURRY ...
BLURRY = 0.29
#: ... the shorter side less than this share of the longer ...
ODD_ASPECT = 0.35
#: ... and a size (square root of the area) more than this many interquartile ranges
#: beyond the quartiles of the dataset's sizes.
ODD_SIZE_IQR = 3.0
#: Records of each end of a shard's sizes kept as ``odd_size`` candidates.
SIZE_EXTREMES = 1000
#: Vertex AI's dataset warnings: fewer images than this for a label ...
FEW_IMAGES = 10
#: ... and more than this ratio between the largest and the smallest label.
IMBALANCE = 100


def digest(data: bytes) -> str:
    """The SHA-256 of an image file's bytes, as read, before any re-encoding."""
    return hashlib.sha256(data).hexdigest()


def small(data: bytes):
    """``data`` decoded small and upright, RGB: a JPEG at the smallest DCT scale that
    keeps both sides at least ``SMALL_SIDE`` (Pillow's draft), anything else decoded and
    reduced. None when it does not decode. Its ``info["full_size"]`` is the upright
    image's whole size, which ``pixel_issues`` looks at it as."""
    from tfrecorder._writer.image import pil

    Image = pil()
    from PIL import ImageOps

    try:
        img = Image.open(io.BytesIO(data))
        full = img.size
        if img.format in ("JPEG", "MPO"):
            img.draft("RGB", (SMALL_SIDE, SMALL_SIDE))
        drafted = img.size
        img = ImageOps.exif_transpose(img)
        if img.size != drafted:  # turned a quarter
            full = full[::-1]
        out = _reduced(img)
        out.info["full_size"] = full
        return out
    except Exception:  # the image was checked already; a hash is not worth a failure
        return None


def _reduced(img):
    """``img`` in RGB, reduced (box filter, in C) to a shorter side of SMALL_SIDE to
    2 * SMALL_SIDE pixels where it is larger."""
    from tfrecorder._writer.image import _WIDE_GREY, _eight_bit

    if img.mode in _WIDE_GREY:  # 16-bit grey: as TensorFlow decodes it, not clipped white
        img = _eight_bit(img)
    elif img.mode not in ("L", "RGB", "RGBA", "LA"):  # palette, 1-bit, CMYK: reduce refuses
        img = img.convert("RGBA" if "transparency" in img.info or "A" in img.mode else "RGB")
    factor = min(img.size) // SMALL_SIDE
    if factor > 1:
        img = img.reduce(factor)
    return img.convert("RGB") if img.mode != "RGB" else img


def dhash(img) -> int:
    """The 64-bit difference hash of a PIL image: its grey 9x8 reduction, one bit per
    pair of horizontal neighbours, set where the left one is brighter."""
    from tfrecorder._writer.image import pil

    Image = pil()
    grey = img.convert("L").resize((9, 8), Image.Resampling.BOX)
    px = grey.tobytes()
    h = 0
    for y in range(8):
        row = px[9 * y: 9 * y + 9]
        for x in range(8):
            h = (h << 1) | (row[x] > row[x + 1])
    return h


def pixel_issues(img, grey=None, full_size: tuple | None = None) -> dict:
    """The image problems its small decode shows, ``{issue: score}`` (scores in 0..1,
    lower is worse, as CleanVision's): ``dark`` (the 99th percentile of perceived
    brightness), ``light`` (1 - the 5th), ``blurry``, ``low_information`` (grey-level
    entropy / 10) and ``low_detail`` (too little detail to hash, ``MIN_DETAIL``: never
    matched as a near duplicate; score: the detail in levels of 255). Measured on the
    small decode, not the whole image: a bright speck smaller than a pixel of it does not
    save a dark image; ``blurry`` at the size CleanVision looks at (at most 64 px across,
    from ``full_size``, else ``info["full_size"]`` as ``small`` gives it), since its
    score depends on the number of pixels. ``grey``: its ``grey16`` where the caller
    has it. A few tenths of a millisecond:
    NumPy on a few thousand pixels, no full sort."""
    import numpy as np
    from tfrecorder._writer.image import pil

    Image = pil()
    from PIL import ImageFilter

    rgb = img.convert("RGB") if img.mode != "RGB" else img
    pixels = np.asarray(rgb)  # one copy of its bytes: Python calls are the cost here
    grey_source = bool((pixels[..., 0] == pixels[..., 1]).all()
                       and (pixels[..., 1] == pixels[..., 2]).all())
    # perceived brightness squared, per pixel, from a table of squares: no float pow
    squares, weights = _tables()[:2]
    sq = squares[pixels] @ weights
    flat = sq.ravel()
    n = flat.size
    ranks = [(n - 1) * p for p in (0.05, 0.99)]
    at = sorted({math.floor(x) for x in ranks} | {math.ceil(x) for x in ranks})
    part = np.partition(flat, at)

    def percentile(x: float) -> float:  # NumPy's linear interpolation, of the roots
        lo, hi = math.floor(x), math.ceil(x)
        a, b_ = math.sqrt(part[lo]), math.sqrt(part[hi])
        return (a + (b_ - a) * (x - lo)) / 255

    p5, p99 = percentile(ranks[0]), percentile(ranks[1])
    out = {}
    if p99 < DARK:
        out["dark"] = round(p99, 4)
    if 1 - p5 < LIGHT:
        out["light"] = round(1 - p5, 4)
    detail = _detail(grey16(img) if grey is None else grey)
    grey = rgb.convert("L")
    # A grey image in RGB would count its histogram three times (log2(3) bits more).
    entropy = grey.entropy() if grey_source else rgb.entropy()
    if entropy < LOW_ENTROPY:
        out["low_information"] = round(entropy / 10, 4)
    if detail < MIN_DETAIL:
        out["low_detail"] = round(detail / 255, 4)
    width, height = full_size or img.info.get("full_size", img.size)
    scale = max(width, height) / 64  # CleanVision looks at the image at most 64 px across
    size = ((max(1, int(width // scale)), max(1, int(height // scale))) if scale > 1
            else (width, height))
    if grey.size != size:
        grey = grey.resize(size, Image.Resampling.BICUBIC)
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
    from tfrecorder._writer.image import pil

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
    least MIN_CORRELATION."""
    import numpy as np

    x = np.frombuffer(a, np.int8).astype(np.float64)
    y = np.frombuffer(b, np.int8).astype(np.float64)
    x -= x.mean()
    y -= y.mean()
    norm = math.sqrt(float(x @ x) * float(y @ y))
    return bool(norm) and float(x @ y) / norm >= MIN_CORRELATION


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


@dataclasses.dataclass
class Looker:
    """What one shard's images showed: per record its digest (and hash), and the
    shard's size and colour statistics. ``seen`` holds one tuple per record:
    ``(sha256, (dhash, thumbnail or None) or None, ref)`` with ``ref = (split, shard
    index, position in the shard, row, image_uri, label ids)``; a thumbnail of None is
    an image of too little detail to match (``fingerprint``), a hash of None one that
    did not decode small. ``distance``: the bits within which hashes are compared."""

    near: bool = False
    distance: int = MAX_DISTANCE
    pixels: bool = False
    seen: list = dataclasses.field(default_factory=list)
    widths: dict = dataclasses.field(default_factory=dict)
    heights: dict = dataclasses.field(default_factory=dict)
    sums: list | None = None          # [pixels, [sum per channel], [sum of squares]]
    #: Image records whose pixels nobody measured (a run that decodes nothing, a kept
    #: record written by one): their split's mean and std are not known.
    unmeasured: int = 0
    #: ``(issue, score, ref)`` of every image problem of its records but ``odd_size``,
    #: and how many of each (``issue_counts``).
    issues: list = dataclasses.field(default_factory=list)
    issue_counts: dict = dataclasses.field(default_factory=dict)
    #: Records per size (the square root of the area, rounded), and ``(size, ref)`` of
    #: every record: ``odd_size`` is told against the whole dataset's sizes in the last
    #: step, which receives the ends of each shard's only (``extremes``).
    areas: dict = dataclasses.field(default_factory=dict)
    sizes: list = dataclasses.field(default_factory=list)

    def wants_image(self) -> bool:
        """Whether ``measure`` needs the image decoded."""
        return self.near or self.pixels

    def measure(self, data: bytes, img=None) -> tuple:
        """What ``add`` keeps of one image, computed without touching the Looker (so
        any thread may): ``(sha256, (dhash, thumbnail) or None, channel sums or None,
        {issue: score} its pixels show)`` (``fingerprint``'s thumbnail,
        ``pixel_issues``). ``img`` is the writer's decode where it made one
        (pre-sizing); else the image is decoded small here when the report needs pixels."""
        h = sums = None
        problems: dict = {}
        if self.wants_image():
            full = None if img is None else img.size  # the writer's own: left untouched
            img = small(data) if img is None else _reduced(img)
            if img is not None:
                grey = grey16(img)  # for the thumbnail and the detail both
                if self.near:
                    h = (dhash(img), fingerprint(img, grey))
                sums = channel_sums(img)
                problems = pixel_issues(img, grey, full)
        return digest(data), h, sums, problems

    def add(self, ref: tuple, width: int, height: int, measured: tuple,
            channels: int = 3) -> tuple:
        """Takes in one record, in file order: its stored size and channels and its
        ``measure``. Returns the record's ``(sha256, (dhash, thumbnail) or None, channel
        sums or None, {issue: score})``, its pixels' problems and its header's."""
        sha, h, sums, problems = measured
        problems = {**problems, **header_issues(width, height, channels)}
        self.add_size(ref, width, height, problems)
        self.add_sums(sums, self.wants_image())
        self.seen.append((sha, h, ref))
        return sha, h, sums, problems

    def add_size(self, ref: tuple, width: int, height: int, problems: dict) -> None:
        """One image record's stored size and its problems (``header_issues``, and
        ``pixel_issues`` where measured), but ``odd_size``, which ``build`` tells."""
        self.widths[width] = self.widths.get(width, 0) + 1
        self.heights[height] = self.heights.get(height, 0) + 1
        size = round(math.sqrt(width * height))
        self.areas[size] = self.areas.get(size, 0) + 1
        self.sizes.append((size, ref))
        for issue, score in problems.items():
            self.issue_counts[issue] = self.issue_counts.get(issue, 0) + 1
            if self.issue_counts[issue] <= MAX_PAIRS:
                self.issues.append((issue, score, ref))

    def extremes(self) -> list:
        """The SIZE_EXTREMES smallest and largest of ``sizes``: the only records of the
        shard that can be of an odd size, whatever the rest of the dataset's are."""
        if len(self.sizes) <= 2 * SIZE_EXTREMES:
            return list(self.sizes)
        ordered = sorted(self.sizes, key=lambda s: s[0])
        return ordered[:SIZE_EXTREMES] + ordered[-SIZE_EXTREMES:]

    def add_sums(self, sums: tuple | None, measured: bool) -> None:
        """One image record's channel sums (``channel_sums``), or None: not decodable
        (``measured``), or never measured."""
        if sums is None:
            self.unmeasured += not measured
            return
        n, s, q = sums
        if self.sums is None:
            self.sums = [0, [0] * 3, [0] * 3]
        self.sums[0] += n
        self.sums[1] = [a + b for a, b in zip(self.sums[1], s)]
        self.sums[2] = [a + b for a, b in zip(self.sums[2], q)]


# --- matching, in the pipeline ----------------------------------------------------------

def bands(h: int, max_distance: int = MAX_DISTANCE) -> list[tuple[int, int]]:
    """``(band, value)`` of the ``max_distance + 1`` bands a 64-bit hash is cut into: two
    hashes within ``max_distance`` bits agree on at least one band (pigeonhole)."""
    n = max_distance + 1
    out, start = [], 0
    for b in range(n):
        width = 64 // n + (1 if b < 64 % n else 0)
        out.append((b, (h >> start) & ((1 << width) - 1)))
        start += width
    return out


#: Records per group of the exact search (``exact_buckets``).
EXACT_GROUP = 4096


def exact_buckets(records: int) -> int:
    """Into how many groups the exact search puts ``records`` records (by their digest):
    a few thousand records each, so that a grouping moves a few elements per shard, not
    one per record, and no group outgrows a worker whatever the dataset's size."""
    return max(1, records // EXACT_GROUP)


def keyed(seen: Iterable[tuple], near: bool, buckets: int = 1,
          distance: int = MAX_DISTANCE) -> Iterator[tuple]:
    """The grouping keys of one shard's records: ``(("x", bucket), (digests, split,
    shard, positions))`` for exact matches, the shard's records of each of ``buckets``
    groups of digests (``exact_buckets``) together (``digests``: their SHA-256 values,
    32 bytes each, one after the other; ``positions``: ``array("q")`` bytes, in the same
    order), and with ``near`` ``(("n", distance, band, value), (hash, sha, place,
    thumbnail))`` per band of ``distance``, for each record with enough detail to match.
    Bytes travel through a grouping for almost nothing; a tuple per record cost the
    decoding of each.

    A record is under ``distance + 1`` band keys: those carry only what matching needs,
    the hash, 64 bits of the digest (to leave out records of the same bytes), the
    record's place ``(split, shard, position)`` and its 64-byte thumbnail; the last step finds the rest of a pair's records
    in their rows files (``full_refs``). A grouping holds every key's values at once
    (the DirectRunner, in memory): the whole ref under each band key held four times
    as much."""
    by_bucket: dict[int, tuple[list, array.array]] = {}
    split = shard = None
    for sha, h, ref in seen:
        split, shard = ref[0], ref[1]  # the same for every record of the shard
        digests, positions = by_bucket.setdefault(int(sha[:15], 16) % buckets,
                                                  ([], array.array("q")))
        digests.append(sha)
        positions.append(ref[2])
        if near and h is not None and h[1] is not None:
            small = (h[0], sha[:16], ref[:3], h[1])
            for b, value in bands(h[0], distance):
                yield ("n", distance, b, value), small
    for bucket, (digests, positions) in by_bucket.items():
        yield ("x", bucket), (bytes.fromhex("".join(digests)), split, shard,
                              positions.tobytes())


def _ref_order(ref: tuple) -> tuple:
    # train before validation before test, then file order: the same pair, the same way
    return (split_order(ref[0]), ref[0], ref[1], ref[2])


def _pair_order(p: tuple) -> tuple:
    """Leaks first, exact before near, closest first, then by the two records' places."""
    d, kind, a, b = p
    return (a[0] == b[0], kind != "exact", d, _ref_order(a), _ref_order(b))


def _pair_counts(pairs: Iterable[tuple]) -> dict:
    counts = {"leaks": {"exact": 0, "near": 0}, "duplicates": {"exact": 0, "near": 0}}
    for _, kind, a, b in pairs:
        counts["leaks" if a[0] != b[0] else "duplicates"][kind] += 1
    return counts


def _bounded(members: list, ref_of) -> list:
    """The first GROUP_LIMIT of ``members`` (in ``_ref_order``), where the first member
    of every split the group spans is one: a group cut to the records of one split
    would count its leaks and list none of them."""
    if len(members) <= GROUP_LIMIT:
        return members
    firsts: dict[str, int] = {}
    for i, m in enumerate(members):
        firsts.setdefault(ref_of(m)[0], i)
    chosen = set(firsts.values())
    for i in range(len(members)):
        if len(chosen) >= GROUP_LIMIT:
            break
        chosen.add(i)
    return [members[i] for i in sorted(chosen)]


def _same_bytes(sha: str, refs: list) -> tuple:
    """``("exact", sha256, refs, counts)`` of records with the same bytes (``found``)."""
    refs.sort(key=_ref_order)
    per_split: dict[str, int] = {}
    for r in refs:
        per_split[r[0]] = per_split.get(r[0], 0) + 1
    k = len(refs)
    within = sum(n * (n - 1) // 2 for n in per_split.values())
    counts = {"leaks": {"exact": k * (k - 1) // 2 - within, "near": 0},
              "duplicates": {"exact": within, "near": 0},
              "members": max(0, k - GROUP_LIMIT)}
    return "exact", sha, _bounded(refs, lambda r: r), counts


def found(key: tuple, members: Iterable) -> Iterator[tuple]:
    """What one group holds, bounded whatever its size:

    - for a group of digests (``keyed``), ``("exact", sha256, refs, counts)`` per digest
      several records have: the first GROUP_LIMIT refs, and ``counts`` of every pair
      among all of them (``{"leaks": {"exact": n, ...}, "duplicates": {...},
      "members": left out}``);
    - ``("near", pairs, counts)`` for the records of a band: the pairs
      ``(distance, "near", ref_a, ref_b)`` within the key's distance whose bytes differ
      and whose thumbnails agree (``confirmed``), each found in the first band its two
      hashes agree on, at most MAX_PAIRS of them, and
      the counts of all that were found among the first GROUP_LIMIT members.
    """
    if key[0] == "x":
        by_sha: dict[bytes, list] = {}
        for digests, split, shard, positions in members:  # each shard's, of this group
            at = array.array("q")
            at.frombytes(positions)
            for i, pos in enumerate(at):
                by_sha.setdefault(digests[32 * i:32 * i + 32], []).append((split, shard, pos))
        for sha, refs in by_sha.items():
            if len(refs) > 1:
                yield _same_bytes(sha.hex(), refs)
        return
    members = list(members)
    if len(members) < 2:
        return
    distance, band = key[1], key[2]
    members.sort(key=lambda m: _ref_order(m[2]))
    skipped = max(0, len(members) - GROUP_LIMIT)
    members = _bounded(members, lambda m: m[2])
    pairs = []
    for (ha, sa, ra, ta), (hb, sb, rb, tb) in itertools.combinations(members, 2):
        d = (ha ^ hb).bit_count()
        if d > distance or sa == sb:
            continue
        first = next(b for (b, x), (_, y) in zip(bands(ha, distance), bands(hb, distance))
                     if x == y)
        # The thumbnails last: few pairs come this far.
        if first == band and confirmed(ta, tb):
            pairs.append((d, "near", ra, rb))
    if pairs or skipped:
        counts = _pair_counts(pairs)
        counts["members"] = skipped
        yield "near", heapq.nsmallest(MAX_PAIRS, pairs, key=_pair_order), counts


def full_refs(near: list, rows_of, exact: list = ()) -> tuple[list, list]:
    """The near pairs and exact groups ``found`` gives (each record a place ``(split,
    shard, position)``) with each record's whole ref, ``(split, shard, position, row,
    image_uri, label ids)``: ``(near, exact)``. ``rows_of(split, shard)`` gives a shard's
    records' ``(row, image_uri, label ids)`` by position (its rows file), or None where
    there is none (its records keep their places); each shard is asked once, and only
    shards that hold a record of a pair or group."""
    needed: dict[tuple, set] = {}
    places = [p for pairs, _ in near for _, _, a, b in pairs for p in (a, b)]
    places += [r for _, refs, _ in exact for r in refs]
    for place in places:
        needed.setdefault(place[:2], set()).add(place[2])
    whole: dict[tuple, tuple] = {}
    for (split, shard), positions in needed.items():
        found = rows_of(split, shard)
        if found is None:
            continue
        for pos in positions:
            whole[(split, shard, pos)] = (split, shard, pos, *found[pos])
    return ([([(d, kind, whole.get(a[:3], a), whole.get(b[:3], b)) for d, kind, a, b in pairs],
              counts) for pairs, counts in near],
            [(sha, [whole.get(r[:3], r) for r in refs], counts) for sha, refs, counts in exact])


def matches(shards: Iterable, near: bool) -> tuple[list, list]:
    """``(exact, near)`` as the pipeline finds them (``keyed``, a grouping, ``found``),
    in memory: for an update that writes no shard, whose last step runs on the driver."""
    groups: dict[tuple, list] = {}
    for s in shards:
        if s.look is not None:
            for key, value in keyed(s.look.seen, near, distance=s.look.distance):
                groups.setdefault(key, []).append(value)
    exact, pairs = [], []
    for key, members in groups.items():
        for e in found(key, members):
            (exact if e[0] == "exact" else pairs).append(e[1:])
    return exact, pairs


# --- the report, in the last step -------------------------------------------------------

def _median(counts: dict) -> list[int]:
    """[min, median, max] of the values a ``{value: count}`` histogram holds."""
    if not counts:
        return []
    items = sorted((int(k), n) for k, n in counts.items())
    total = sum(n for _, n in items)
    half, seen = (total - 1) // 2, 0
    median = items[-1][0]
    for value, n in items:
        seen += n
        if seen > half:
            median = value
            break
    return [items[0][0], median, items[-1][0]]


def _merge(into: dict, counts: dict) -> None:
    for k, n in counts.items():
        into[k] = into.get(k, 0) + n


def build(shards: list, exact: list, near: list, *, label_names: list[str],
          multi_label: bool, near_duplicates: bool, row_json, version: int = 1,
          near_distance: int = MAX_DISTANCE) -> dict:
    """quality.json's content from every shard's stats (with their ``Looker``), the
    ``found`` exact groups and near pairs. ``row_json`` turns a row id into strict JSON."""
    offsets: dict[tuple, int] = {}
    by_split: dict[str, list] = {}
    for s in sorted(shards, key=lambda s: s.index):
        by_split.setdefault(s.split, []).append(s)
    for split, ss in by_split.items():
        at = 0
        for s in ss:
            offsets[(split, s.index)] = at
            at += s.num_examples

    def side(ref) -> dict:
        # a place whose rows file was not there to read (``full_refs``): its place only
        split, shard, pos, row, uri, labels = ref if len(ref) == 6 else (*ref, None, None, ())
        names = [label_names[i] for i in labels if 0 <= i < len(label_names)]
        return {"split": split, "row": row_json(row), "image_uri": uri,
                "label": names if multi_label else (names[0] if names else None),
                "position": offsets.get((split, shard), 0) + pos}

    counts = {"leaks": {"exact": 0, "near": 0}, "duplicates": {"exact": 0, "near": 0},
              "conflicts": 0}
    members = 0
    conflicts = []
    # Groups come in the order the grouping handed the shards over, which worker
    # processes do not keep: in the order of their first record, as pairs are.
    exact = sorted(exact, key=lambda e: (_ref_order(e[1][0]), e[0]))
    for sha, refs, c in exact:
        if not multi_label and len({r[5] if len(r) == 6 else None for r in refs}) > 1:
            counts["conflicts"] += 1
            if len(conflicts) < MAX_PAIRS:
                # each record's whole set of labels: a detection image's boxes
                # [sky] against [sky, tree], where "label" names the first only
                conflicts.append({"sha256": sha, "rows": [
                    dict(side(r), labels=[label_names[i] for i in (r[5] if len(r) == 6 else ())
                                          if 0 <= i < len(label_names)]) for r in refs]})
    for c in [e[-1] for e in exact] + [e[-1] for e in near]:
        members += c["members"]
        for finding in ("leaks", "duplicates"):
            for kind in ("exact", "near"):
                counts[finding][kind] += c[finding][kind]

    def every_pair():
        for _, refs, _ in exact:
            for a, b in itertools.combinations(refs, 2):
                yield 0, "exact", a, b
        for pairs, _ in near:
            yield from pairs

    issues, counts["issues"] = _issues(shards, side)
    groups = _groups(exact, near, side)
    counts["groups"] = {k: sum(g["kind"] == k for g in groups) for k in ("exact", "near")}
    # The pairs listed: the first MAX_PAIRS in order, never all of them held at once.
    listed = heapq.nsmallest(MAX_PAIRS, every_pair(), key=_pair_order)
    total = sum(counts[f][k] for f in ("leaks", "duplicates") for k in ("exact", "near"))
    truncated = {"pairs": max(0, total - len(listed)), "members": members}
    written = [{"kind": kind, "distance": d, "a": side(a), "b": side(b)}
               for d, kind, a, b in listed]
    return {
        "version": version,
        "near_duplicates": ({"hash": HASH, "max_distance": near_distance,
                             "confirmed_by": f"{THUMB}x{THUMB} thumbnail correlation "
                                             f">= {MIN_CORRELATION}"}
                            if near_duplicates else None),
        "counts": counts,
        "pairs": written,
        "conflicts": conflicts,
        "groups": groups[:MAX_PAIRS],
        "issues": issues,
        "stats": _stats(by_split, label_names),
        "warnings": _warnings(by_split, label_names),
        "truncated": truncated,
    }


def _quartiles(areas: dict) -> tuple[float, float]:
    """The first and third quartiles of the sizes a ``{size: records}`` histogram holds,
    interpolated as NumPy's (and so CleanVision's) percentile."""
    items = sorted(areas.items())
    total = sum(n for _, n in items)

    def at(i: int) -> int:  # the i-th smallest size
        seen = 0
        for value, n in items:
            seen += n
            if i < seen:
                return value
        return items[-1][0]

    def percentile(p: float) -> float:
        x = (total - 1) * p
        lo = math.floor(x)
        return at(lo) + (at(min(lo + 1, total - 1)) - at(lo)) * (x - lo)

    return percentile(0.25), percentile(0.75)


def _issues(shards: list, side) -> tuple[list, dict]:
    """Every record's image problems (``Looker.issues``) and those of odd size among
    the ends of each shard's sizes, as CleanVision tells them: beyond ODD_SIZE_IQR
    interquartile ranges from the quartiles of every image's size (of any size but the
    middle one where all are alike). The listed ones, up to MAX_PAIRS in ISSUES order,
    then split and file order, and the count of each."""
    counts: dict = {}
    listed = []
    areas: dict = {}
    for s in shards:
        if s.look is None:
            continue
        _merge(counts, s.look.issue_counts)
        _merge(areas, s.look.areas)
        listed += s.look.issues
    if areas:
        q1, q3 = _quartiles(areas)
        lo, hi = q1 - ODD_SIZE_IQR * (q3 - q1), q3 + ODD_SIZE_IQR * (q3 - q1)
        mid, gap = (lo + hi) / 2, hi - lo

        def odd(size: int) -> bool:
            return size < lo or size > hi if gap else size != mid

        odd_count = sum(n for size, n in areas.items() if odd(size))
        if odd_count:
            counts["odd_size"] = odd_count
            for s in shards:
                if s.look is not None:
                    listed += [("odd_size", round(1 - min(1.0, abs(size - mid) / (gap or mid)), 4),
                                ref) for size, ref in s.look.extremes() if odd(size)]
    order = {name: i for i, name in enumerate(ISSUES)}
    listed = heapq.nsmallest(MAX_PAIRS, listed,
                             key=lambda x: (order.get(x[0], len(order)), _ref_order(x[2])))
    out = []
    for issue, score, ref in listed:
        entry = side(ref)
        entry.pop("labels", None)
        out.append({"issue": issue, "score": score, **entry})
    return out, {k: counts[k] for k in ISSUES if counts.get(k)}


def _groups(exact: list, near: list, side) -> list[dict]:
    """The records that are copies of one image, together: each set of records with the
    same bytes, joined with every near pair found between their records (a resized copy
    of an image stored twice makes one group of three). ``kind`` is ``"exact"`` where
    every member has the same bytes, else ``"near"``; ``size`` counts the members, also
    those of a very large group left out of ``rows`` (``GROUP_LIMIT``). In the order of
    their first record."""
    parent: dict = {}

    def root(p):
        while parent.setdefault(p, p) != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    refs: dict = {}
    skipped: dict = {}
    for _, members, c in exact:
        for r in members:
            refs[r[:3]] = r
            parent[root(r[:3])] = root(members[0][:3])
        skipped[members[0][:3]] = c["members"]
    linked = set()
    for pairs, _ in near:
        for _, _, a, b in pairs:
            refs.setdefault(a[:3], a)
            refs.setdefault(b[:3], b)
            ra, rb = root(a[:3]), root(b[:3])
            parent[ra] = rb
            linked.add(a[:3])
    by_root: dict = {}
    for place in refs:
        by_root.setdefault(root(place), []).append(place)
    near_roots = {root(p) for p in linked}
    out = []
    for r, places in by_root.items():
        places.sort(key=_ref_order)
        extra = sum(skipped.get(p, 0) for p in places)
        out.append({"kind": "near" if r in near_roots else "exact",
                    "size": len(places) + extra,
                    "rows": [side(refs[p]) for p in places]})
    out.sort(key=lambda g: (split_order(g["rows"][0]["split"]), g["rows"][0]["split"],
                            g["rows"][0]["position"]))
    return out


def _stats(by_split: dict, label_names: list[str]) -> dict:
    out = {}
    for split, ss in by_split.items():
        labels: dict[str, int] = {}
        formats: dict[str, int] = {}
        reencoded: dict[str, list[int]] = {}
        widths: dict = {}
        heights: dict = {}
        colours = Looker()  # the split's colour sums, added up as a shard's are
        unmeasured = 0
        for s in ss:
            for i, n in s.labels.items():
                name = label_names[int(i)] if 0 <= int(i) < len(label_names) else str(i)
                labels[name] = labels.get(name, 0) + n
            _merge(formats, s.formats)
            for fmt, cost in s.reencoded.items():
                reencoded[fmt] = [a + b for a, b in zip(reencoded.get(fmt, [0, 0, 0]), cost)]
            look = s.look
            if look is None:
                continue
            _merge(widths, look.widths)
            _merge(heights, look.heights)
            unmeasured += look.unmeasured
            if look.sums is not None:
                colours.add_sums(look.sums, True)
        entry: dict[str, Any] = {
            "rows": sum(s.rows for s in ss), "records": sum(s.num_examples for s in ss),
            "labels": dict(sorted(labels.items())), "formats": dict(sorted(formats.items())),
            "width": _median(widths), "height": _median(heights),
            "stored_bytes": sum(s.num_bytes for s in ss),
            "source_bytes": sum(s.source_bytes for s in ss)}
        if reencoded:  # images, their files' bytes, the bytes stored, per source format
            entry["reencoded"] = {f: dict(zip(("images", "source_bytes", "stored_bytes"), c))
                                  for f, c in sorted(reencoded.items())}
        sums = colours.sums
        if sums is not None and sums[0] and not unmeasured:
            # Only where every image record of the split was measured: the figures of
            # some of its records would pass for the split's.
            n = sums[0]
            mean = [v / (255 * n) for v in sums[1]]
            entry["mean"] = [round(m, 4) for m in mean]
            entry["std"] = [round(math.sqrt(max(0.0, q / (255 * 255 * n) - m * m)), 4)
                            for q, m in zip(sums[2], mean)]
        out[split] = entry
    return out


def _warnings(by_split: dict, label_names: list[str]) -> list[dict]:
    """Vertex AI's dataset warnings, over every split together."""
    totals = {name: 0 for name in label_names}
    for ss in by_split.values():
        for s in ss:
            for i, n in s.labels.items():
                if 0 <= int(i) < len(label_names):
                    totals[label_names[int(i)]] += n
    # Labels with rows only, as the imbalance below: a vocabulary's unused names (or the
    # ids between integer labels) are no label of the dataset's.
    out = [{"kind": "few_images", "label": name, "rows": n}
           for name, n in sorted(totals.items()) if 0 < n < FEW_IMAGES]
    present = {k: n for k, n in totals.items() if n}
    if len(present) > 1:
        largest = max(present, key=lambda k: (present[k], k))
        smallest = min(present, key=lambda k: (present[k], k))
        ratio = present[largest] / present[smallest]
        if ratio > IMBALANCE:
            out.append({"kind": "imbalance", "largest": largest, "smallest": smallest,
                        "ratio": round(ratio, 1)})
    return out


# --- quality.json read back -------------------------------------------------------------
# What ``build`` writes, field by field, so that a file that parses but holds another
# type anywhere (``"pairs": null``, a ``distance`` that is text) is told by its first
# wrong field when it is read back, not found as a TypeError in the middle of a report
# or as markup in the HTML one.

class _Obj:
    """An object's fields (each checked where present) and those it must have. Any
    other spec is ``[spec]`` (a list of), ``{"*": spec}`` (an object of names to), or
    ``(what it is, test)`` for a value."""

    def __init__(self, fields: dict, required: tuple = ()):
        self.fields, self.required = fields, required


def _int(v) -> bool:
    return type(v) is int  # noqa: E721 (a bool is no count)


def _num(v) -> bool:
    return type(v) in (int, float)  # noqa: E721


def _scalar(v) -> bool:
    return v is None or type(v) in (int, float, str, bool)  # noqa: E721


_COUNT = ("a whole number >= 0", lambda v: _int(v) and v >= 0)
_TEXT = ("text", lambda v: isinstance(v, str))
_SIDE = _Obj({
    "split": _TEXT,
    "row": ("a row number or index label", lambda v: _scalar(v) or (
        isinstance(v, list) and all(map(_scalar, v)))),
    "image_uri": ("text or null", lambda v: v is None or isinstance(v, str)),
    "label": ("a label name, a list of them, or null", lambda v: v is None or isinstance(
        v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))),
    "position": ("a whole number >= 0 or null", lambda v: v is None or (_int(v) and v >= 0)),
    "labels": ("a list of label names", lambda v: isinstance(v, list) and all(
        isinstance(x, str) for x in v)),
}, required=("split", "row", "label"))
_BOTH = _Obj({"exact": _COUNT, "near": _COUNT})
_KIND = ("'exact' or 'near'", lambda v: v in ("exact", "near"))
_SIZES = ("[min, median, max] in pixels", lambda v: isinstance(v, list) and len(v) in (
    0, 3) and all(map(_int, v)))
_CHANNELS = ("a list of numbers", lambda v: isinstance(v, list) and all(map(_num, v)))
_FILE = _Obj({
    "version": _COUNT,
    "near_duplicates": ("null or an object", lambda v: v is None or isinstance(v, dict)),
    "counts": _Obj({"leaks": _BOTH, "duplicates": _BOTH, "conflicts": _COUNT,
                    "groups": _BOTH, "issues": {"*": _COUNT}}),
    "pairs": [_Obj({"kind": _KIND,
                    "distance": _COUNT, "a": _SIDE, "b": _SIDE},
                   required=("kind", "distance", "a", "b"))],
    "conflicts": [_Obj({"sha256": _TEXT, "rows": [_SIDE]}, required=("sha256", "rows"))],
    "groups": [_Obj({"kind": _KIND, "size": _COUNT, "rows": [_SIDE]},
                    required=("kind", "size", "rows"))],
    "stats": {"*": _Obj({
        "rows": _COUNT, "records": _COUNT, "labels": {"*": _COUNT}, "formats": {"*": _COUNT},
        "width": _SIZES, "height": _SIZES, "stored_bytes": _COUNT, "source_bytes": _COUNT,
        "mean": _CHANNELS, "std": _CHANNELS,
        "reencoded": {"*": _Obj({"images": _COUNT, "source_bytes": _COUNT,
                                 "stored_bytes": _COUNT},
                                required=("images", "source_bytes", "stored_bytes"))}})},
    "warnings": [_Obj({"kind": _TEXT, "label": _TEXT, "rows": _COUNT, "largest": _TEXT,
                       "smallest": _TEXT,
                       "ratio": ("a number", _num)}, required=("kind",))],
    "truncated": _Obj({"pairs": _COUNT, "members": _COUNT}),
    "issues": [_Obj({**_SIDE.fields, "issue": _TEXT, "score": ("a number", _num)},
                    required=("issue", "score", "split", "row", "label"))],
}, required=("counts", "pairs", "conflicts", "stats", "warnings", "truncated"))


def wrong(data) -> str | None:
    """The first field of a parsed ``quality.json`` that is not what ``build`` writes,
    as ``pairs[3].distance: '<b>' is not a whole number >= 0``; None when it is whole."""
    return _wrong(data, _FILE, "")


def _wrong(value, spec, at: str) -> str | None:
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{at}: {shown_json(value)} is not a list"
        for i, v in enumerate(value):
            found = _wrong(v, spec[0], f"{at}[{i}]")
            if found:
                return found
        return None
    if isinstance(spec, dict):  # {"*": spec}: every value of an object keyed by names
        if not isinstance(value, dict):
            return f"{at}: {shown_json(value)} is not an object"
        for k, v in value.items():
            found = _wrong(v, spec["*"], f"{at}.{k}")
            if found:
                return found
        return None
    if isinstance(spec, _Obj):
        if not isinstance(value, dict):
            return f"{at or 'the file'}: {shown_json(value)} is not an object"
        missing = [k for k in spec.required if k not in value]
        if missing:
            return f"{at + ': ' if at else ''}no {', '.join(missing)}"
        for k, s in spec.fields.items():
            if k in value:
                found = _wrong(value[k], s, f"{at}.{k}" if at else k)
                if found:
                    return found
        return None
    what, ok = spec
    return None if ok(value) else f"{at}: {shown_json(value)} is not {what}"

