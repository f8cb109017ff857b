"""Keypoints: a COCO annotation's ``keypoints`` checked and made relative like its box.

COCO gives a category's keypoints by name (``categories[].keypoints``) with the pairs
drawn between them (``skeleton``, 1-based), and each annotation of it ``keypoints``,
``[x1, y1, v1, x2, y2, v2, ...]`` in pixels, one triple per name, where ``v`` is 0 (not
labelled: x and y are 0), 1 (labelled, not visible) or 2 (labelled and visible), and
``num_keypoints``, how many have ``v > 0``.

A record holds ``objects/keypoints``: every box's triples, flattened in box order, x
and y divided by the image's width and height as boxes are, v as COCO gives it; and
``objects/num_keypoints``, one count per box. How many triples a box has is its
category's keypoint count (0 for a category without keypoints), which the manifest
gives with the names and skeleton (``Manifest.keypoints``), so the flat list splits
back per box.
"""

from __future__ import annotations

import json

#: The features of an object-detection record holding keypoints.
KEYPOINTS = "objects/keypoints"
NUM_KEYPOINTS = "objects/num_keypoints"
#: The table column carrying a box's keypoints (JSON text) until its record is built.
COLUMN = "keypoints"


def schemas(entries: list) -> dict[str, dict]:
    """Category name -> ``{"keypoints": names, "skeleton": pairs}`` of the COCO
    ``categories`` entries that name keypoints."""
    out = {}
    for c in entries:
        if isinstance(c, dict) and isinstance(c.get("keypoints"), list) and c["keypoints"] \
                and isinstance(c.get("name"), str):
            out[c["name"].strip()] = {"keypoints": [str(k) for k in c["keypoints"]],
                                      "skeleton": [list(p) for p in c.get("skeleton") or []]}
    return out


def column_value(annotation: dict, count: int, width: float,
                 height: float) -> tuple[str | None, str | None]:
    """``(column value, None)`` for an annotation of a category with ``count`` keypoints
    on an image of ``width`` x ``height`` pixels, or ``(None, why)`` where its keypoints
    are not that. An annotation without keypoints has them all unlabelled (v 0), as
    COCO writes them."""
    given = annotation.get("keypoints")
    if given in (None, []):
        given = [0] * (3 * count)
    if not (isinstance(given, list) and len(given) == 3 * count and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
            for v in given)):
        return None, (f"keypoints {str(given)[:60]} are not x, y, v for each of the "
                      f"category's {count} keypoints")
    flags = given[2::3]
    if any(v not in (0, 1, 2) for v in flags):
        return None, "a keypoint's v is not 0, 1 or 2"
    visible = annotation.get("num_keypoints", sum(1 for v in flags if v > 0))
    if not isinstance(visible, int) or isinstance(visible, bool) or visible < 0:
        return None, f"num_keypoints {visible!r} is not a count"
    flat = []
    for x, y, v in zip(given[0::3], given[1::3], flags):
        flat += [x / width, y / height, v]
    return json.dumps([visible, *flat], separators=(",", ":")), None


def values(value: str) -> tuple[int, list[float]]:
    """``(num_keypoints, flat x, y, v)`` of a ``column_value``."""
    visible, *flat = json.loads(value)
    return visible, flat


def relative_value(flat: list) -> str:
    """The column value of keypoints given relative already (YOLO's), as flat x, y, v
    triples with v 0, 1 or 2."""
    visible = sum(1 for v in flat[2::3] if v > 0)
    return json.dumps([visible, *flat], separators=(",", ":"))
