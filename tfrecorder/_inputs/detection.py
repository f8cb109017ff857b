"""Object-detection tables, as AutoML Vision writes them: reading and validation.

One CSV row per bounding box, ``split,image_uri,label`` and eight coordinate fields,
either the two-vertex form ``x_min,y_min,,,x_max,y_max,,`` or all four vertices. The
rows of one image become one record with ``objects/bbox`` (ymin, xmin, ymax, xmax per
box, relative coordinates, flattened) and ``objects/label`` (ids). Vertex AI's JSON
Lines (``vertex``), COCO files (``coco``), YOLO datasets (``yolo``) and Pascal VOC
folders (``voc``) are read into the same table, a COCO one with a per-box column more
(``is_crowd``, written as ``objects/is_crowd``), a VOC one with two (``is_difficult``,
``is_truncated``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from tfrecorder._folder import example
from tfrecorder._inputs import keypoints, labels, masks, splits
from tfrecorder._folder import split_names
from tfrecorder._folder import layout
from tfrecorder._errors import Problems
from tfrecorder._folder.layout import BBOX, LABEL, FeatureSpec
# The columns of an object-detection table, one row per box, are the format's: a rows
# file keeps a record's boxes in their order.
from tfrecorder._folder.layout import DETECTION_COLUMNS as COLUMNS

#: Per-box whole-number columns a table may have beside COLUMNS, and the feature each
#: becomes (one value per box, like ``objects/label``): COCO's ``iscrowd`` and Pascal
#: VOC's ``difficult`` and ``truncated``, under TFDS's names for them. Values are 0 or 1.
BOX_FLAGS = {"is_crowd": "objects/is_crowd", "is_difficult": "objects/is_difficult",
             "is_truncated": "objects/is_truncated"}
#: Per-box geometry columns beside the box (a COCO segmentation), and the feature each
#: becomes. A table holds one only where some annotation of the source has it
#: (``Annotations.shapes``); then every box must.
GEOMETRY = {masks.COLUMN: masks.MASK, keypoints.COLUMN: keypoints.KEYPOINTS}
#: Per-image whole-number columns, the same on every row of an image, and the feature
#: each becomes (one value per record): COCO's image id, so that a record can be matched
#: to its annotation file (COCO's evaluator, torchvision's ``image_id``).
IMAGE_COLUMNS = {"image_id": "image_id"}


def columns(frame, shapes=()) -> list[str]:
    """The columns of a detection table ``frame``: COLUMNS, its BOX_FLAGS columns, its
    GEOMETRY columns named in ``shapes``, then its IMAGE_COLUMNS."""
    return (COLUMNS + [c for c in BOX_FLAGS if c in frame.columns]
            + [c for c in GEOMETRY if c in shapes and c in frame.columns]
            + [c for c in IMAGE_COLUMNS if c in frame.columns])


def _number(text) -> bool:
    try:
        float(text)
        return True
    except (TypeError, ValueError):
        return False


def is_detection_row(fields: list) -> bool:
    """AutoML Vision object detection: 11 fields, the last 8 numbers or empty."""
    return len(fields) == 11 and all(f is None or _number(f) for f in fields[3:])


def rows_of(records: list[tuple[int, list]], problems: Problems) -> tuple[dict, list]:
    """CSV records ``(line, fields)`` -> the columns of ``COLUMNS`` and the rows' line
    numbers; records that are not detection rows go to ``problems``."""
    rows, ids = [], []
    for lineno, f in records:
        if not is_detection_row(f):
            problems.add(lineno, None, ",".join(x or "" for x in f),
                         "not an object-detection row (split,image_uri,label and 8 "
                         "coordinate fields, as AutoML Vision writes them)")
            continue
        coords = f[3:]
        present = [c is not None for c in coords]
        if not any(present):
            box = [None] * 4
        elif present == [True, True, False, False, True, True, False, False]:
            box = [float(coords[0]), float(coords[1]), float(coords[4]), float(coords[5])]
        elif all(present):
            xs = [float(c) for c in coords[0::2]]
            ys = [float(c) for c in coords[1::2]]
            box = [min(xs), min(ys), max(xs), max(ys)]
        else:
            problems.add(lineno, None, ",".join(x or "" for x in f),
                         "coordinates in neither AutoML form: give x_min,y_min,,,"
                         "x_max,y_max,, or all four vertices")
            continue
        rows.append([f[0], f[1], f[2], *box])
        ids.append(lineno)
    return {c: [r[i] for r in rows] for i, c in enumerate(COLUMNS)}, ids


def vocabulary(distinct: set, label_vocabulary: Sequence[str] | None) -> list[str]:
    """The names of the box labels (line i = id i): ``label_vocabulary``, or the sorted
    distinct labels of the rows that have a box."""
    return list(label_vocabulary) if label_vocabulary is not None else labels.vocabulary_of(distinct)


def check(frame, row_ids: Sequence, id_of: Mapping[str, int], problems: Problems,
          shapes=()):
    """The rows of a detection chunk (one row per box), checked: ``(split or None, image
    key, (label name, box, flags, geometry) or None, values)`` per row, as columns.
    Coordinates outside [0, 1], a minimum above its maximum, boxes without a label,
    labels without a box, labels not in ``id_of``, flags other than 0 or 1 and boxes
    without the geometry (``shapes``) that others have go to ``problems``."""
    names = columns(frame, shapes)
    flag_names = [c for c in names[len(COLUMNS):] if c in BOX_FLAGS]
    geometry = [c for c in names[len(COLUMNS):] if c in GEOMETRY]
    values = list(zip(*(frame[c].tolist() for c in names)))
    row_splits, keys, boxes = [], [], []
    for rid, row in zip(row_ids, values):
        split, uri, label, *box = row[:len(COLUMNS)]
        try:
            row_splits.append(splits.canonical(split))
        except split_names.UnknownSplit as e:
            problems.add(rid, "split", split, str(e))
            row_splits.append(None)
        if labels.is_null(uri):
            problems.add(rid, "image_uri", None, "empty image URI")
            keys.append(None)
            boxes.append(None)
            continue
        keys.append(uri.strip())
        found = _box(rid, label, box, problems)
        if found is not None:
            extra = dict(zip(names[len(COLUMNS):], row[len(COLUMNS):]))
            found += (_flags(rid, flag_names, [extra[c] for c in flag_names], problems),
                      tuple(extra[c] for c in geometry))
            for c in geometry:
                if labels.is_null(extra[c]):
                    problems.add(rid, c, None, (
                        f"a box without {c}, where other boxes of the source have one; "
                        f"give every box one, or none"))
        boxes.append(found)
    for rid, b in zip(row_ids, boxes):
        if b and b[0] is not None and b[0] not in id_of:
            problems.add(rid, "label", b[0], "label not in label_vocabulary")
    jsonable = [tuple(labels.jsonable(v) for v in row) for row in values]
    return row_splits, keys, boxes, jsonable


def record(members: Sequence[int], boxes: Sequence, id_of: Mapping[str, int],
           names: Sequence[str] = COLUMNS, values: Sequence | None = None):
    """The features and label ids of one image's record from its rows' boxes (in row
    order; boxes whose label has no id are left out); ``names``: the table's columns,
    ``values``: their values, one sequence per column, where IMAGE_COLUMNS are read
    (from the image's first row)."""
    found = [boxes[i] for i in members if boxes[i] is not None and boxes[i][0] in id_of]
    ids = tuple(id_of[b[0]] for b in found)
    features = {
        BBOX: example.float_feature([c for b in found for c in b[1]]),
        LABEL: example.int64_feature(ids),
    }
    flag_names = [c for c in names[len(COLUMNS):] if c in BOX_FLAGS]
    for k, name in enumerate(flag_names):
        features[BOX_FLAGS[name]] = example.int64_feature([b[2][k] for b in found])
    for k, name in enumerate(c for c in names[len(COLUMNS):] if c in GEOMETRY):
        if name == masks.COLUMN:
            features[masks.MASK] = example.bytes_feature([masks.png(b[3][k]) for b in found])
        elif name == keypoints.COLUMN:
            points = [keypoints.values(b[3][k]) for b in found]
            features[keypoints.KEYPOINTS] = example.float_feature(
                [v for _, flat in points for v in flat])
            features[keypoints.NUM_KEYPOINTS] = example.int64_feature([n for n, _ in points])
    for name in (c for c in names[len(COLUMNS):] if c in IMAGE_COLUMNS):
        features[IMAGE_COLUMNS[name]] = example.int64_feature(
            [int(values[names.index(name)][members[0]])])
    return features, ids


def feature_specs(names: Sequence[str] = COLUMNS) -> dict[str, FeatureSpec]:
    """Every feature a detection record of a table with columns ``names`` holds."""
    features = layout.image_feature_specs()
    features[BBOX] = FeatureSpec(example.FLOAT, [-1, 4], "bbox")
    features[LABEL] = FeatureSpec(example.INT64, None, "label")
    for name in names[len(COLUMNS):]:
        if name in BOX_FLAGS:
            features[BOX_FLAGS[name]] = FeatureSpec(example.INT64, None, "feature")
        elif name == masks.COLUMN:
            features[masks.MASK] = FeatureSpec(example.BYTES, None, "feature")
        elif name == keypoints.COLUMN:
            features[keypoints.KEYPOINTS] = FeatureSpec(example.FLOAT, None, "feature")
            features[keypoints.NUM_KEYPOINTS] = FeatureSpec(example.INT64, None, "feature")
        elif name in IMAGE_COLUMNS:
            features[IMAGE_COLUMNS[name]] = FeatureSpec(example.INT64, [], "feature")
    return features


def _flags(rid, names: Sequence[str], values: Sequence, problems: Problems) -> tuple:
    """The BOX_FLAGS values of one box, 0 or 1 each (a missing one is 0)."""
    out = []
    for name, v in zip(names, values):
        flag = (0 if labels.is_null(v) else int(v) if isinstance(v, bool)
                else labels.as_whole_number(v))
        if flag not in (0, 1):
            problems.add(rid, name, labels.jsonable(v), "not 0 or 1")
            flag = 0
        out.append(flag)
    return tuple(out)


def _box(rid, label, box, problems: Problems):
    """``(label name or None, (ymin, xmin, ymax, xmax))`` of one row, or None without a box."""
    if all(b is None for b in box):
        if not labels.is_null(label):
            problems.add(rid, "label", label, "a label without a box")
        return None
    if labels.is_null(label):
        problems.add(rid, "label", None, "a box without a label")
    elif labels.has_line_break(labels.name_of(label)):
        problems.add(rid, "label", label, labels.LINE_BREAK)
    x_min, y_min, x_max, y_max = box
    for name, v in zip(("x_min", "y_min", "x_max", "y_max"), box):
        if not 0.0 <= v <= 1.0:
            problems.add(rid, name, v, "relative coordinate outside [0, 1]")
    if x_min > x_max:
        problems.add(rid, "x_min", x_min, f"x_min is above x_max ({x_max})")
    if y_min > y_max:
        problems.add(rid, "y_min", y_min, f"y_min is above y_max ({y_max})")
    return (labels.name_of(label) if not labels.is_null(label) else None,
            (y_min, x_min, y_max, x_max))
