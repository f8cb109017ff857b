"""What one shard's images showed (``Looker``): each record's digest and hash, and the
shard's sizes, colour sums and image problems, taken as the shard is written.

Its own module because it is the state one shard writer keeps, record by record,
between the per-image figures (``measures``) and the pipeline that matches records
(``matching``) and builds the report from every shard's (``quality``).
"""

from __future__ import annotations

import dataclasses
import math

from tfrecorder._report import boxes
from tfrecorder._report.matching import MAX_PAIRS
from tfrecorder._report.measures import (
    MAX_DISTANCE,
    blur_view,
    channel_sums,
    dhash,
    digest,
    entropy,
    fingerprint,
    grey16,
    header_issues,
    pixel_issues,
    reduced,
    small,
)

#: Records of each end of a shard's sizes held as ``odd_size`` candidates.
SIZE_EXTREMES = 1000


@dataclasses.dataclass
class Looker:
    """What one shard's images showed: per record its digest (and hash), and the
    shard's size and colour statistics. ``seen`` holds one tuple per record:
    ``(sha256, (dhash, thumbnail or None) or None, ref)`` with ``ref = (split, shard
    number, position in the shard, row, image_uri, label ids)``; a thumbnail of None is
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
            # the writer's own: left untouched
            full = bits = view = None
            if img is not None:
                full, bits, view = img.size, entropy(img), blur_view(img)
            img = small(data) if img is None else reduced(img)
            if img is not None:
                grey = grey16(img)  # for the thumbnail and the detail both
                if self.near:
                    h = (dhash(img), fingerprint(img, grey))
                sums = channel_sums(img)
                problems = pixel_issues(img, grey, full, bits, view)
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
        ``pixel_issues`` where measured), but ``odd_size``, which ``quality.build`` tells."""
        self.widths[width] = self.widths.get(width, 0) + 1
        self.heights[height] = self.heights.get(height, 0) + 1
        size = round(math.sqrt(width * height))
        self.areas[size] = self.areas.get(size, 0) + 1
        self.sizes.append((size, ref))
        for issue, score in problems.items():
            self.issue_counts[issue] = self.issue_counts.get(issue, 0) + 1
            if self.issue_counts[issue] <= MAX_PAIRS:
                self.issues.append((issue, score, ref))

    def add_boxes(self, ref: tuple, values: dict, width: int, height: int) -> dict:
        """One detection record's box problems (``boxes.problems`` of its parsed
        ``values``, for its stored image of ``width`` x ``height``), counted and listed
        as its image's problems are; returned, for its rows file, so that an update
        keeping the record keeps them (``add_size`` takes them back)."""
        found = boxes.problems(values, height, width)
        for issue, score in found.items():
            self.issue_counts[issue] = self.issue_counts.get(issue, 0) + 1
            if self.issue_counts[issue] <= MAX_PAIRS:
                self.issues.append((issue, score, ref))
        return found

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
