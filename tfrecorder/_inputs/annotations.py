"""What became of a source's annotations: read, written into its table, or reported
(left out of the records, with the reason).

Its own module: the COCO, YOLO and Pascal VOC readers each count into one
``Annotations``, which the result shows in a line (``annotations: 120 in, 117 written,
3 reported (2 outside the image, 1 zero area)``). An annotation is never left out
without being counted here under its reason.
"""

from __future__ import annotations

import dataclasses

#: Reasons an annotation is reported, worded once so that they count together.
MALFORMED = "malformed"
UNKNOWN_CLASS = "unknown class"
OUTSIDE = "outside the image"
ZERO_AREA = "zero area"
#: How many reported annotations the result names one by one (the rest are counted).
SHOWN = 5


@dataclasses.dataclass
class Annotations:
    """The annotations of a source: ``read``, ``reported`` per reason (left out of the
    records), and ``written`` (the rest). ``first``: ``where: reason (detail)`` of the
    first ones reported. ``as_boxes``: annotations of another shape written as their
    bounding box (YOLO's polygon rows), per shape. ``shapes``: the geometry columns
    beside the boxes that some annotation has (``mask``, ``keypoints``), which every
    record then holds; ``keypoints``: category name -> its keypoint names and
    skeleton."""

    read: int = 0
    reported: dict = dataclasses.field(default_factory=dict)
    first: list = dataclasses.field(default_factory=list)
    as_boxes: dict = dataclasses.field(default_factory=dict)
    #: The source's own ids, where it has them (COCO's): label name -> class id, and an
    #: image's value in the table -> its image id. The model_garden layout writes them
    #: (``garden``), so that the records match the source's annotation file.
    class_ids: dict = dataclasses.field(default_factory=dict)
    image_ids: dict = dataclasses.field(default_factory=dict)
    shapes: set = dataclasses.field(default_factory=set)
    keypoints: dict = dataclasses.field(default_factory=dict)
    #: An image's value in the table -> (width, height) as the source gives them
    #: (COCO's): a photo's EXIF orientation is applied or not by them (orientation.py).
    image_sizes: dict = dataclasses.field(default_factory=dict)

    @property
    def written(self) -> int:
        return self.read - sum(self.reported.values())

    def report(self, where: str, reason: str, detail: str = "") -> None:
        """Counts one annotation left out of the records, at ``where``, for ``reason``."""
        self.reported[reason] = self.reported.get(reason, 0) + 1
        if len(self.first) < SHOWN:
            self.first.append(f"{where}: {reason}" + (f" ({detail})" if detail else ""))

    def reset(self) -> None:
        """Forgets every count: a source read again counts afresh."""
        self.read = 0
        self.reported.clear()
        self.first.clear()
        self.as_boxes.clear()
        self.class_ids.clear()
        self.image_ids.clear()
        self.shapes.clear()
        self.keypoints.clear()
        self.image_sizes.clear()

    def __str__(self) -> str:
        n = sum(self.reported.values())
        text = f"annotations: {self.read} in, {self.written} written, {n} reported"
        if n:
            text += " (" + ", ".join(f"{k} {reason}" for reason, k in sorted(
                self.reported.items(), key=lambda kv: (-kv[1], kv[0]))) + ")"
        for shape, k in sorted(self.as_boxes.items()):
            text += f"; {k} {shape} written as {'its' if k == 1 else 'their'} bounding box"
        return text
