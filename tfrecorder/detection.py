"""Object-detection tables, as AutoML Vision writes them: reading and validation.

One CSV row per bounding box, ``split,image_uri,label`` and eight coordinate fields,
either the two-vertex form ``x_min,y_min,,,x_max,y_max,,`` or all four vertices. The
rows of one image become one record with ``objects/bbox`` (ymin, xmin, ymax, xmax per
box, relative coordinates, flattened) and ``objects/label`` (ids).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from tfrecorder import example, labels, layout, splits, storage
from tfrecorder.errors import Problems
from tfrecorder.layout import FeatureSpec
from tfrecorder.plan import Row
from tfrecorder.validation import Checked

#: Columns of an object-detection table, one row per box.
COLUMNS = ["split", "image_uri", "label", "x_min", "y_min", "x_max", "y_max"]
BBOX = "objects/bbox"
LABEL = "objects/label"


def _number(text) -> bool:
    try:
        float(text)
        return True
    except (TypeError, ValueError):
        return False


def is_detection_row(fields: list) -> bool:
    """AutoML Vision object detection: 11 fields, the last 8 numbers or empty."""
    return len(fields) == 11 and all(f is None or _number(f) for f in fields[3:])


def rows_of(records: list[tuple[int, list]]) -> tuple[list[list], list[int]]:
    """CSV records ``(line, fields)`` -> rows of ``COLUMNS`` and their line numbers."""
    rows, ids = [], []
    problems = Problems()
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
    problems.raise_if_any()
    return rows, ids


def validate(
    frame,
    row_ids: Sequence,
    *,
    base_dir: str | None = None,
    label_vocabulary: Sequence[str] | None = None,
    split_fractions: Mapping[str, float] = splits.DEFAULT_FRACTIONS,
):
    """Checks a detection table (one row per box) and groups it per image.

    Coordinates outside [0, 1], a minimum above its maximum, boxes without a label and
    labels without a box are problems, all raised together in one SchemaError.
    """
    problems = Problems()
    columns = tuple(frame.columns)
    keys: list[str | None] = []
    row_splits, boxes = [], []
    values = list(zip(*(frame[c].tolist() for c in columns)))
    for rid, row in zip(row_ids, values):
        split, uri, label, *box = row
        try:
            row_splits.append(splits.canonical(split))
        except splits.UnknownSplit as e:
            problems.add(rid, "split", split, str(e))
            row_splits.append(None)
        if labels.is_null(uri):
            problems.add(rid, "image_uri", None, "empty image URI")
            keys.append(None)
            boxes.append(None)
            continue
        keys.append(uri.strip())
        boxes.append(_box(rid, label, box, problems))

    names = list(label_vocabulary) if label_vocabulary is not None else labels.vocabulary_of(
        [b[0] for b in boxes if b and b[0] is not None])
    index = {n: i for i, n in enumerate(names)}
    for rid, b in zip(row_ids, boxes):
        if b and b[0] is not None and b[0] not in index:
            problems.add(rid, "label", b[0], "label not in label_vocabulary")
    fractions = splits.check_fractions(split_fractions)
    rows = []
    for key, members, split in splits.group_by_image(keys, row_splits, row_ids, "image_uri",
                                                     fractions, problems):
        found = [boxes[i] for i in members if boxes[i] is not None and boxes[i][0] in index]
        ids = [index[b[0]] for b in found]
        feats = {
            BBOX: example.float_feature([c for b in found for c in b[1]]),
            LABEL: example.int64_feature(ids),
        }
        first = members[0]
        rows.append(Row(row_ids[first], split, storage.resolve(key, base_dir), feats,
                        tuple(labels.jsonable(v) for v in values[first]), tuple(ids),
                        tuple((row_ids[i], tuple(labels.jsonable(v) for v in values[i]))
                              for i in members[1:])))
    problems.raise_if_any()
    features = layout.image_feature_specs()
    features[BBOX] = FeatureSpec(example.FLOAT, [-1, 4], "bbox")
    features[LABEL] = FeatureSpec(example.INT64, None, "label")
    return Checked(rows, columns, features, {LABEL: names})


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
