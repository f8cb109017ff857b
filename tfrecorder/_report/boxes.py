"""What one detection record's boxes show: the box problems of the data report.

Each is a record's problem, one row per record and problem in the report's ``issues``
with its worst box's ``score`` (0..1, lower is worse), and a name ``--fail-on`` takes:

- ``no_boxes``: an image without annotations (a record with no box; such images are
  kept, as TFDS keeps them, and are negatives for a detector);
- ``degenerate_box``: a box of no width or no height in pixels (under 1 pixel);
- ``tiny_box``: a box with a side under ``TINY`` pixels of its stored image, too small
  for most detectors' anchors (COCO's "small" objects are under 32 x 32);
- ``box_outside``: a box reaching outside its image (a coordinate outside [0, 1]);
- ``duplicate_box``: two boxes of the same label over one another, with an
  intersection over union above ``SAME_IOU`` (an object annotated twice);
- ``mask_box_mismatch``: a box whose instance mask's pixels do not fill it: the mask's
  own bounding box is empty or differs from the box by more than ``MASK_SLACK`` pixels
  on a side.

Pure functions on plain values (the record's features as ``example.parse`` gives
them): the shard writer calls ``problems`` per record (``looker.Looker.add_boxes``).
"""

from __future__ import annotations

import io
from typing import Mapping

#: The box problems, in the order the report lists them.
ISSUES = ("no_boxes", "degenerate_box", "tiny_box", "box_outside", "duplicate_box",
          "mask_box_mismatch")
#: A box with a side under this many pixels is tiny.
TINY = 4.0
#: Two boxes of one label with an intersection over union above this are one object.
SAME_IOU = 0.95
#: How far (pixels) a mask's bounding box may lie from its box: rasterising rounds.
MASK_SLACK = 2.0

BBOX, LABEL, MASK = "objects/bbox", "objects/label", "objects/mask"


def problems(values: Mapping, height: int, width: int) -> dict[str, float]:
    """``{problem: score}`` of one record from its parsed values (``objects/bbox``
    relative ``ymin, xmin, ymax, xmax`` flattened, ``objects/label``, ``objects/mask``
    where held) and its stored image's size; the score is its worst box's."""
    flat = list(values.get(BBOX, ()))
    boxes = [[float(v) for v in flat[i:i + 4]] for i in range(0, len(flat) - 3, 4)]
    if not boxes:
        return {"no_boxes": 0.0}
    labels = list(values.get(LABEL, ()))
    found: dict[str, float] = {}

    def worse(name: str, score: float) -> None:
        score = round(max(0.0, min(1.0, score)), 4)
        found[name] = min(found.get(name, 1.0), score)

    pixels = [(x0 * width, y0 * height, x1 * width, y1 * height)
              for y0, x0, y1, x1 in boxes]
    for (y0, x0, y1, x1), (px0, py0, px1, py1) in zip(boxes, pixels):
        side = min(px1 - px0, py1 - py0)
        if side < 1.0:
            worse("degenerate_box", max(side, 0.0))
        elif side < TINY:
            worse("tiny_box", side / TINY)
        if min(y0, x0) < 0.0 or max(y1, x1) > 1.0:
            worse("box_outside", 0.0)
    for i in range(len(pixels)):
        for j in range(i):
            if i < len(labels) and j < len(labels) and labels[i] != labels[j]:
                continue
            iou = _iou(pixels[i], pixels[j])
            if iou > SAME_IOU:
                worse("duplicate_box", 1.0 - iou)
    masks = list(values.get(MASK, ()))
    if masks and len(masks) == len(pixels):
        for data, box in zip(masks, pixels):
            score = _mask_fit(data, box, height, width)
            if score is not None:
                worse("mask_box_mismatch", score)
    return found


def _iou(a: tuple, b: tuple) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _mask_fit(data: bytes, box: tuple, height: int, width: int) -> float | None:
    """None where the mask's pixels fill its box (within MASK_SLACK on each side), else
    the intersection over union of the mask's bounding box and the box (0: empty)."""
    import numpy as np

    from tfrecorder._folder.image_headers import pil

    with pil().open(io.BytesIO(data)) as png:
        pixels = np.asarray(png.convert("L")) != 0
    rows, cols = np.flatnonzero(pixels.any(axis=1)), np.flatnonzero(pixels.any(axis=0))
    if not len(rows):
        return 0.0
    # The mask's own box in the box's pixels of the stored image (the same size).
    sy, sx = height / pixels.shape[0], width / pixels.shape[1]
    own = (cols[0] * sx, rows[0] * sy, (cols[-1] + 1) * sx, (rows[-1] + 1) * sy)
    if max(abs(p - q) for p, q in zip(own, box)) <= MASK_SLACK:
        return None
    return _iou(own, box)
