"""A detection record's annotations as torchvision's detection target, in NumPy.

torchvision's detection models (Faster and Mask R-CNN, RetinaNet, Keypoint R-CNN) and
its ``transforms.v2`` take ``(image, target)``, where ``target`` holds ``boxes``
(float32 ``[N, 4]``, corners ``x1, y1, x2, y2`` in pixels of the decoded image),
``labels`` (int64 ``[N]``, from 1: 0 is the background class those models add),
``image_id`` (an int), ``area`` (float32 ``[N]``),
``iscrowd`` (int64 ``[N]``), and where the data has them ``masks`` (uint8
``[N, H, W]``) and ``keypoints`` (float32 ``[N, K, 3]``: x, y in pixels, visibility).
Our records hold boxes relative, ``ymin, xmin, ymax, xmax``, flattened; this module
turns one record's plain values (``access.values``) into those arrays. Its own module,
free of torch, so that it is tested on plain values and any reader may give it.
"""

from __future__ import annotations

import io
from typing import Mapping

import numpy as np

from tfrecorder._errors import ConfigError, CorruptRecordError

# Our detection features (``_inputs.detection`` writes them; named here as the format
# owns them, since a reader does not import the input wing).
BBOX = "objects/bbox"
LABEL = "objects/label"
CROWD = "objects/is_crowd"
MASK = "objects/mask"            # one PNG per box, 1 on the object and 0 elsewhere
KEYPOINTS = "objects/keypoints"  # per box, K times (x, y relative, visibility)
IMAGE_ID = "image_id"            # COCO's image id
#: A semantic segmentation record's mask: a PNG of class ids (``layout.SEGMENTATION_MASK``).
SEGMENTATION_MASK = "segmentation_mask"

#: The target forms a detection reader gives: torchvision's, or the record's plain dict.
FORMATS = ("torchvision", "dict")


def is_segmentation(specs: Mapping) -> bool:
    """True for the feature specs (or features) of a semantic segmentation record."""
    return SEGMENTATION_MASK in specs


def class_ids(png: bytes, height: int, width: int) -> np.ndarray:
    """A segmentation mask's class ids as int64 ``[height, width]`` (torchvision's
    segmentation target), from its PNG; CorruptRecordError where it is not of the
    image's size."""
    from tfrecorder._folder.image_headers import pil

    with pil().open(io.BytesIO(png)) as found:
        ids = np.asarray(found, dtype=np.int64)
    if ids.shape != (height, width):
        raise CorruptRecordError(f"{SEGMENTATION_MASK!r} is {ids.shape[-1]} x {ids.shape[0]} "
                                 f"pixels, its image {width} x {height}")
    return ids


def is_detection(specs: Mapping) -> bool:
    """True for the feature specs (or features) of a detection record."""
    return BBOX in specs


def check_format(value: str) -> str:
    """``value``, a name of FORMATS; ConfigError naming both otherwise."""
    if value not in FORMATS:
        raise ConfigError(f"target_format={value!r}; give 'torchvision' ((image, target) "
                          f"with boxes in pixels, torchvision's detection convention) or "
                          f"'dict' (the record's features as a dict of plain values)")
    return value


def target(values: Mapping, height: int, width: int, image_id: int) -> dict:
    """torchvision's target of one record from its plain values, for its image decoded
    at ``height`` x ``width`` pixels; ``image_id``: the record's, where it holds none
    (COCO's is kept as ``image_id``). ``area`` is the mask's pixel count where the
    record has masks (as COCO's area is the segmentation's), else the box's area.
    CorruptRecordError where the per-box features do not have one value per box."""
    flat = np.asarray(values.get(BBOX, ()), dtype=np.float32).reshape(-1, 4)
    n = len(flat)
    scale = np.array([width, height, width, height], dtype=np.float32)
    boxes = flat[:, [1, 0, 3, 2]] * scale  # ymin, xmin, ymax, xmax -> x1, y1, x2, y2
    out = {
        "boxes": boxes,
        # Our ids count from 0; torchvision's detectors take 0 as the background and
        # leave its boxes out of the box and mask losses: label k is our id k - 1.
        "labels": _per_box(values, LABEL, n, np.int64) + 1,
        "image_id": int(values.get(IMAGE_ID, image_id)),
        "iscrowd": (_per_box(values, CROWD, n, np.int64) if CROWD in values
                    else np.zeros(n, dtype=np.int64)),
    }
    if MASK in values:
        out["masks"] = masks(values[MASK], n, height, width)
        out["area"] = out["masks"].sum(axis=(1, 2), dtype=np.float32)
    else:
        out["area"] = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).astype(
            np.float32)
    if KEYPOINTS in values:
        points = np.asarray(values[KEYPOINTS], dtype=np.float32).reshape(-1)
        if (points.size % (3 * n) if n else points.size):
            raise CorruptRecordError(f"{KEYPOINTS!r} holds {points.size} values for "
                                     f"{n} boxes; it holds K x 3 per box")
        points = points.reshape(n, points.size // (3 * n) if n else 0, 3).copy()
        points[..., 0] *= width
        points[..., 1] *= height
        out["keypoints"] = points
    return out


def masks(pngs, n: int, height: int, width: int) -> np.ndarray:
    """The instance masks of one record as uint8 ``[n, height, width]``, from its PNGs
    (one per box); CorruptRecordError where there is not one per box or one is not of
    the image's size."""
    from tfrecorder._folder.image_headers import pil

    if len(pngs) != n:
        raise CorruptRecordError(f"{MASK!r} holds {len(pngs)} masks for {n} boxes; it "
                                 f"holds one PNG per box")
    out = np.zeros((n, height, width), dtype=np.uint8)
    Image = pil()
    for k, data in enumerate(pngs):
        with Image.open(io.BytesIO(data)) as png:
            pixels = np.asarray(png.convert("L") if png.mode not in ("L", "1") else png)
        if pixels.shape != (height, width):
            raise CorruptRecordError(f"mask {k} of {MASK!r} is {pixels.shape[1]} x "
                                     f"{pixels.shape[0]} pixels, its image {width} x "
                                     f"{height}")
        out[k] = pixels != 0
    return out


def _per_box(values: Mapping, key: str, n: int, dtype) -> np.ndarray:
    found = np.asarray(values.get(key, ()), dtype=dtype).reshape(-1)
    if len(found) != n:
        raise CorruptRecordError(f"{key!r} holds {len(found)} values for {n} boxes; it "
                                 f"holds one per box")
    return found
