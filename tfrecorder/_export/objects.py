"""A detection record's objects as the Hugging Face Hub's detection sets hold them.

The Hub's detection sets (``cppe-5``, ``detection-datasets/coco``) hold an image with
``image_id``, ``width`` and ``height``, and its boxes as one ``objects`` struct of
lists, one value per box in each: ``id``, ``area``, ``bbox`` in COCO's pixels ``[x, y,
width, height]`` and ``category`` (a ``ClassLabel``). Our records hold the boxes as
relative corners (``objects/bbox``: ymin, xmin, ymax, xmax) beside the image's stored
size, so the pixels are made back from them; the per-box features we hold follow, under
the Hub's (COCO's) names where they have one:

- ``objects/is_crowd`` -> ``iscrowd``, ``objects/is_difficult`` -> ``is_difficult``,
  ``objects/is_truncated`` -> ``is_truncated`` (booleans);
- ``objects/mask`` -> ``mask``: the PNG of each box, as stored (0 and 1 pixels);
- ``objects/keypoints`` -> ``keypoints``: each box's COCO triples ``[x, y, v, ...]``
  in pixels (as many as its category names), ``objects/num_keypoints`` ->
  ``num_keypoints``.

``id`` is the box's place among its image's boxes (we keep no annotation id), and
``area`` the box's area in pixels, or where masks are held the mask's count of object
pixels, as COCO's ``area`` is the segment's. ``image_id`` is the record's stored
``image_id`` where it has one; otherwise a number made from the shard the record is in
(the version that wrote it and its place in the split) and the record's place in it,
the same in every export, unique within a split (``image_id``).

These are plain functions on one record's values; the Parquet and WebDataset writers
lay them out in their own ways.
"""

from __future__ import annotations

import io

import numpy as np

from tfrecorder._errors import ConfigError, CorruptRecordError
from tfrecorder._folder import layout
from tfrecorder._folder.manifest import Manifest
from tfrecorder._folder.layout import BBOX, LABEL
from tfrecorder._inputs.detection import BOX_FLAGS
from tfrecorder._inputs.keypoints import KEYPOINTS, NUM_KEYPOINTS
from tfrecorder._inputs.masks import MASK

#: The record's own image id, where a conversion stored one (COCO's).
IMAGE_ID = "image_id"
#: Our per-box feature -> its name in ``objects``, in the order they follow
#: ``id``, ``area``, ``bbox`` and ``category``.
PER_BOX = {BOX_FLAGS["is_crowd"]: "iscrowd", BOX_FLAGS["is_difficult"]: "is_difficult",
           BOX_FLAGS["is_truncated"]: "is_truncated", MASK: "mask", KEYPOINTS: "keypoints",
           NUM_KEYPOINTS: "num_keypoints"}
#: Features the image-level columns ``width`` and ``height`` come from.
SIZE = (layout.IMAGE_WIDTH, layout.IMAGE_HEIGHT)
#: Shard numbers and record places fit these many decimal digits of ``image_id``.
_NUMBER_DIGITS, _PLACE_DIGITS = 6, 8


def is_detection(manifest: Manifest) -> bool:
    """Whether ``manifest``'s records hold boxes."""
    return BBOX in manifest.features


def taken(manifest: Manifest) -> list[str]:
    """Our features that the image-level columns and ``objects`` hold."""
    keys = [BBOX, LABEL, *SIZE, IMAGE_ID, *PER_BOX]
    return [k for k in keys if k in manifest.features]


def check(manifest: Manifest, where: str) -> None:
    """ConfigError where the records hold a per-box feature no export knows, or lack
    what the pixels are made from."""
    unknown = sorted(k for k in manifest.features
                     if k.startswith("objects/") and k not in (BBOX, LABEL, *PER_BOX))
    if unknown:
        raise ConfigError(
            f"{where} holds per-box features {', '.join(map(repr, unknown))} that no "
            f"export writes yet; read the records with tfrecorder.read({where!r}) instead")
    clash = sorted(k for k in ("width", "height", "objects") if k in manifest.features)
    if clash:
        raise ConfigError(
            f"{where} holds features named {', '.join(map(repr, clash))}, the names of "
            f"the columns a detection export makes; convert with those columns renamed")
    missing = [k for k in (LABEL, *SIZE) if k not in manifest.features]
    if missing:
        raise ConfigError(
            f"{where} holds boxes without {', '.join(map(repr, missing))}, from which an "
            f"export makes COCO's pixel boxes and categories; convert the source again "
            f"to store them")


def fields(manifest: Manifest) -> dict[str, dict]:
    """``objects``' fields as Hugging Face's ``Features.to_dict()`` writes each (a
    ``List`` of one value per box)."""
    def each(feature):
        return {"feature": feature, "_type": "List"}

    out = {"id": each({"dtype": "int64", "_type": "Value"}),
           "area": each({"dtype": "float32", "_type": "Value"}),
           "bbox": each({"feature": {"dtype": "float32", "_type": "Value"}, "length": 4,
                         "_type": "List"}),
           "category": each({"names": list(manifest.vocabularies.get(LABEL) or []),
                             "_type": "ClassLabel"})}
    for key, name in PER_BOX.items():
        if key not in manifest.features:
            continue
        out[name] = each(
            {"_type": "Image"} if key == MASK
            else {"feature": {"dtype": "float32", "_type": "Value"}, "_type": "List"}
            if key == KEYPOINTS
            else {"dtype": "int64", "_type": "Value"} if key == NUM_KEYPOINTS
            else {"dtype": "bool", "_type": "Value"})
    return out


def image_id(shard_file: str, index: int, place: int) -> int:
    """The ``image_id`` of the ``place``-th live record of our shard ``shard_file``
    (the ``index``-th of its split) where the record stores none: ``VVVVV NNNNNN
    PPPPPPPP`` in decimal, the version that wrote the shard, its number and the place;
    an older shard name's version counts as 0 and its index as its number."""
    parsed = layout.ShardName.parse(shard_file.rsplit("/", 1)[-1])
    version, number = (0, index) if parsed is None else (parsed.version, parsed.number)
    return (version * 10 ** _NUMBER_DIGITS + number) * 10 ** _PLACE_DIGITS + place


def record(values: dict, manifest: Manifest, given_id: int, where: str) -> dict:
    """One record's ``{"image_id", "width", "height", "objects"}``, ``objects`` a dict
    of lists in ``fields``' order: boxes in COCO pixels (float32 values as Python
    floats), categories as ids. ``given_id`` is the ``image_id`` of a record that
    stores none."""
    width, height = (values.get(k) for k in SIZE)
    if width is None or height is None:
        raise CorruptRecordError(f"{where}: a record without its {SIZE[0]} and "
                                 f"{SIZE[1]}, which its manifest declares")
    corners = np.asarray(values.get(BBOX, np.zeros((0, 4))), dtype=np.float64).reshape(-1, 4)
    labels = [int(i) for i in np.asarray(values.get(LABEL, [])).ravel()]
    n = len(corners)
    if len(labels) != n:
        raise CorruptRecordError(f"{where}: a record of {n} boxes and {len(labels)} "
                                 f"labels; each box has one")
    ymin, xmin, ymax, xmax = corners.T if n else (np.zeros(0),) * 4
    pixels = np.stack([xmin * width, ymin * height, (xmax - xmin) * width,
                       (ymax - ymin) * height], axis=1).astype(np.float32)
    objects = {"id": list(range(n)), "area": None, "bbox": pixels.tolist(),
               "category": labels}
    for key, name in PER_BOX.items():
        if key not in manifest.features:
            continue
        got = list(np.asarray(values.get(key, [])).ravel())
        if key == KEYPOINTS:
            objects[name] = _keypoints(got, labels, manifest, width, height, where)
            continue
        if len(got) != n:
            raise CorruptRecordError(f"{where}: a record of {n} boxes and {len(got)} "
                                     f"values of {key!r}; each box has one")
        objects[name] = ([bytes(v) for v in got] if key == MASK
                         else [int(v) for v in got] if key == NUM_KEYPOINTS
                         else [bool(v) for v in got])
    if "mask" in objects:  # the segment's area, as COCO's area is
        objects["area"] = [float(_pixels(m, where)) for m in objects["mask"]]
    else:
        objects["area"] = [float(np.float32(w * h)) for w, h in pixels[:, 2:].tolist()]
    stored = values.get(IMAGE_ID)
    return {"image_id": int(given_id if stored is None else stored),
            "width": int(width), "height": int(height), "objects": objects}


def _keypoints(flat: list, labels: list[int], manifest: Manifest, width: int, height: int,
               where: str) -> list[list[float]]:
    """The flat triples of a record split per box, by each box's category's keypoint
    count (``Manifest.keypoints``), x and y made pixels again."""
    names = manifest.vocabularies.get(LABEL) or []
    schema = manifest.keypoints or {}
    out, at = [], 0
    for label in labels:
        name = names[label] if 0 <= label < len(names) else None
        count = 3 * len(schema.get(name, {}).get("keypoints", []))
        if at + count > len(flat):
            break  # told below
        triples = np.asarray(flat[at:at + count], dtype=np.float64).reshape(-1, 3)
        triples[:, 0] *= width
        triples[:, 1] *= height
        out.append(triples.astype(np.float32).ravel().tolist())
        at += count
    if len(out) != len(labels) or at != len(flat):
        raise CorruptRecordError(
            f"{where}: a record holds {len(flat)} keypoint values that its boxes' "
            f"categories do not split into triples; the manifest's keypoints are not "
            f"those it was written with")
    return out


def _pixels(png: bytes, where: str) -> int:
    """The object pixels (non-zero) of a mask PNG."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(png)) as image:
            return int(np.count_nonzero(np.asarray(image)))
    except OSError as e:
        raise CorruptRecordError(f"{where}: a mask that is not a PNG ({e})") from None
