"""The ``model_garden`` layout: the feature keys TF Model Garden's decoders and the TF
Object Detection API read (``image/encoded``, ``image/object/bbox/xmin``, ...).

A record is built in our own layout first (``image``, ``objects/bbox``, ...) and renamed
here just before it is serialized, so there is one writer whatever the layout; the
manifest keeps our feature specs and says ``"layout": "model_garden"``, and
``stored_specs`` gives the keys a reader finds in the records instead.

Class ids: image classification keeps our label ids (line i of the labels file is id
i), as Model Garden's classification decoder reads them. Detection boxes are numbered
from 1, because 0 is the background class of the detectors that read them; a COCO
source keeps its own category ids, so that Model Garden's COCO evaluator matches its
annotation file. ``label_map`` writes the same numbers in the OD API's ``.pbtxt`` form.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

from tfrecorder._folder.layout import (
    IMAGE, IMAGE_FORMAT, IMAGE_HEIGHT, IMAGE_NAME, IMAGE_WIDTH, LABEL_MAP_SUFFIX,
    SEGMENTATION_MASK, SEGMENTATION_MASK_FORMAT, FeatureSpec, escape)
from tfrecorder._folder import example

DEFAULT = "tfrecorder"
MODEL_GARDEN = "model_garden"
LAYOUTS = (DEFAULT, MODEL_GARDEN)

# Our keys -> Model Garden's, for the features both have.
_IMAGE_KEYS = {
    IMAGE: "image/encoded",
    IMAGE_FORMAT: "image/format",
    IMAGE_HEIGHT: "image/height",
    IMAGE_WIDTH: "image/width",
    IMAGE_NAME: "image/filename",
    # A semantic segmentation record's mask, which Model Garden keeps beside its image
    # (``segmentation_input.Decoder`` reads the PNG of class ids).
    SEGMENTATION_MASK: "image/segmentation/class/encoded",
    SEGMENTATION_MASK_FORMAT: "image/segmentation/class/format",
}
SOURCE_ID = "image/source_id"
CLASS_LABEL = "image/class/label"
# Detection's keys (``_inputs.detection``): written here by name, as the format owns them.
_BBOX, _LABEL, _CROWD = "objects/bbox", "objects/label", "objects/is_crowd"
IMAGE_ID = "image_id"  # COCO's image id, which image/source_id carries here
BOX_KEYS = ("image/object/bbox/ymin", "image/object/bbox/xmin",
            "image/object/bbox/ymax", "image/object/bbox/xmax")  # our bbox order
OBJECT_LABEL = "image/object/class/label"
OBJECT_TEXT = "image/object/class/text"
OBJECT_CROWD = "image/object/is_crowd"
OBJECT_AREA = "image/object/area"
#: One PNG per object (0 and 1), as Model Garden's ``create_coco_tf_record`` writes it.
OBJECT_MASK = "image/object/mask"
_MASK = "objects/mask"


def label_map_file(feature: str) -> str:
    """``objects/label`` -> ``objects-label.label_map.pbtxt``: the OD API's label map of
    a labelled feature, beside its ``.labels.txt``."""
    return escape(feature) + LABEL_MAP_SUFFIX


def is_detection(features: Mapping) -> bool:
    """True for the features (or specs) of a detection record."""
    return _BBOX in features


def class_ids(names: Sequence[str], detection: bool,
              source_ids: Mapping[str, int] | None = None) -> tuple[int, ...]:
    """The class id each of our label ids is written as: itself for classification; for
    boxes, the source's own id where it has one (COCO's category ids), else id + 1."""
    if not detection:
        return tuple(range(len(names)))
    source_ids = source_ids or {}
    if names and all(n in source_ids for n in names):
        return tuple(int(source_ids[n]) for n in names)
    return tuple(i + 1 for i in range(len(names)))


def source_id(image: str, given=None) -> str:
    """``image/source_id``: the source's image id where it has one (COCO's), else a
    number taken from the image's value in the table: the same image, the same id."""
    if given is not None:
        return str(given)
    digest = hashlib.blake2b(image.encode("utf-8", "surrogateescape"), digest_size=6)
    return str(int.from_bytes(digest.digest(), "big"))


def features(ours: Mapping, ids: Sequence[int], names: Sequence[str], source: str,
             label_key: str | None = None) -> dict:
    """The features of one record in Model Garden's keys, from its features in ours
    (``shard.image_features`` and the source's): the image's bytes are carried over
    uncopied; boxes become four lists of relative coordinates, with their class ids
    (``ids[label id]``), names, crowd flags and areas (in pixels, as COCO gives them);
    a classification's ``label_key`` becomes ``image/class/label``. Other features keep
    their keys."""
    out = {MG: ours[key] for key, MG in _IMAGE_KEYS.items() if key in ours}
    out[SOURCE_ID] = example.bytes_feature([source])
    # the image and a mask are never parsed
    small = {k: v for k, v in ours.items() if k not in (IMAGE, SEGMENTATION_MASK)}
    values = {k: list(v) for k, (_, v) in example.parse(example.serialize(small)).items()}
    if _BBOX in values:
        flat = values[_BBOX]
        boxes = [flat[i:i + 4] for i in range(0, len(flat), 4)]
        label_ids = values.get(_LABEL, [])
        for k, key in enumerate(BOX_KEYS):
            out[key] = example.float_feature([b[k] for b in boxes])
        out[OBJECT_LABEL] = example.int64_feature([ids[i] for i in label_ids])
        out[OBJECT_TEXT] = example.bytes_feature([names[i] for i in label_ids])
        out[OBJECT_CROWD] = example.int64_feature(values.get(_CROWD, [0] * len(boxes)))
        height, width = (float(values.get(k, [0])[0]) for k in (IMAGE_HEIGHT, IMAGE_WIDTH))
        out[OBJECT_AREA] = example.float_feature(
            [(b[2] - b[0]) * height * (b[3] - b[1]) * width for b in boxes])
        mapped = {*_IMAGE_KEYS, _BBOX, _LABEL, _CROWD, IMAGE_ID}
        if _MASK in small:  # the PNGs as they are, uncopied
            out[OBJECT_MASK] = small[_MASK]
            mapped.add(_MASK)
    else:
        mapped = set(_IMAGE_KEYS)
        if label_key in values:
            out[CLASS_LABEL] = example.int64_feature(values[label_key])
            mapped.add(label_key)
    for key, value in small.items():
        if key not in mapped:
            out[key] = value
    return out


def stored_specs(specs: Mapping[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """The keys and specs a reader finds in a ``model_garden`` record whose manifest
    lists ``specs`` (our layout's)."""
    out = {MG: specs[key] for key, MG in _IMAGE_KEYS.items() if key in specs}
    out[SOURCE_ID] = FeatureSpec(example.BYTES, [], "image_info")
    mapped = set(_IMAGE_KEYS)
    if is_detection(specs):
        for key in BOX_KEYS:
            out[key] = FeatureSpec(example.FLOAT, None, "bbox")
        out[OBJECT_LABEL] = FeatureSpec(example.INT64, None, "label")
        out[OBJECT_TEXT] = FeatureSpec(example.BYTES, None, "feature")
        out[OBJECT_CROWD] = FeatureSpec(example.INT64, None, "feature")
        out[OBJECT_AREA] = FeatureSpec(example.FLOAT, None, "feature")
        mapped |= {_BBOX, _LABEL, _CROWD, IMAGE_ID}
        if _MASK in specs:
            out[OBJECT_MASK] = specs[_MASK]
            mapped.add(_MASK)
    for key, spec in specs.items():
        if spec.role == "label" and key not in mapped:
            out[CLASS_LABEL] = spec
        elif key not in mapped:
            out[key] = spec
    return out


def label_map(names: Sequence[str], ids: Sequence[int]) -> str:
    """The OD API's ``label_map.pbtxt`` text: one ``item`` per class, its id and name."""
    items = []
    for name, i in zip(names, ids):
        quoted = name.replace("\\", "\\\\").replace('"', '\\"')
        items.append(f'item {{\n  id: {i}\n  name: "{quoted}"\n}}\n')
    return "".join(items)
