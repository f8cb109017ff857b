"""Ultralytics YOLO datasets (a ``data.yaml``, its images and their label files) as
detection tables.

``data.yaml`` gives the dataset's root (``path``: absolute, or relative to the YAML
file's folder; missing, that folder), its splits (``train``, ``val``, ``test``: each a
folder of images, a ``.txt`` file listing images, or a list of those, relative to the
root) and its class names (``names``: a list, or an ``{id: name}`` map). An image's
labels are in the file that mirrors its path, the last ``images`` folder of the path
made ``labels`` and its extension ``.txt`` (Ultralytics' rule): one row per object,
``class x_center y_center width height``, relative to the image.

Rows become those of an AutoML detection table (``detection.COLUMNS``), one per box.
A polygon row (a segment, or an oriented box's four corners) becomes its bounding box,
as Ultralytics does when it trains a detector on segment labels; a pose row
(``kpt_shape`` in the YAML) its box, its keypoints left out; both are counted. An
image without a label file, or with an empty one, is one row without a box: a record
without boxes (YOLO's background images). A row that cannot be a box is reported to
``Annotations`` with its reason, never dropped without a word.
"""

from __future__ import annotations

import math
import os
from typing import Iterator

from tfrecorder import _storage as storage
from tfrecorder._inputs import annotations as notes_of, detection, splits
from tfrecorder._errors import Problem, Problems, SchemaError
from tfrecorder._inputs.annotations import Annotations
from tfrecorder._inputs.image_tree import IMAGE_EXTENSIONS, is_litter

#: The names a folder's YAML file may have for the folder to be a YOLO dataset.
YAML_NAMES = ("data.yaml", "data.yml")
#: data.yaml's split keys, in the order their rows are read.
SPLIT_KEYS = ("train", "val", "test")
#: How far a coordinate may pass an edge of the image and still be taken for rounding:
#: coordinates are written with 5 or 6 decimals, and a corner is a centre plus half a
#: size, each rounded. Such a corner is cut at the edge.
EDGE = 1e-5


def find(source) -> str | None:
    """The ``data.yaml`` of a YOLO source: a ``.yaml``/``.yml`` file, or a folder holding
    ``data.yaml``; None for any other source."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    path = os.fspath(source)
    if path.lower().endswith((".yaml", ".yml")) and storage.exists(path):
        return path
    if storage.isdir(path):
        for name in YAML_NAMES:
            if storage.exists(storage.join(path, name)):
                return storage.join(path, name)
    return None


def read(path: str, size: int | None, problems: Problems,
         counts: Annotations | None = None) -> Iterator[tuple[str, dict, list]]:
    """The YOLO dataset of ``data.yaml`` at ``path`` as detection tables of at most
    ``size`` rows (all in one when None): ``("detection", columns, row ids)``; row ids
    are ``<label file>:<line>``, or the image's path for an image without boxes."""
    counts = counts if counts is not None else Annotations()
    counts.reset()
    config = _load(path)
    names = _names(config, path)
    kpt = _keypoint_values(config, path)
    root = _root(config, path)
    if all(config.get(key) in (None, "", []) for key in SPLIT_KEYS):
        raise SchemaError([Problem(path, "train", None, (
            "no train, val or test; give each split's images (train: images/train), as "
            "Ultralytics needs them too"))])
    rows: list = []
    ids: list = []
    for key in SPLIT_KEYS:
        if config.get(key) in (None, "", []):
            continue
        split = splits.canonical(key)
        images = _images(config[key], key, root, path, problems)
        labels = storage.each(_text, [label_path(i) for i in images],
                              at_once=storage.is_remote(root))
        for image, (label_file, text) in zip(images, labels):
            found = _boxes(text, label_file, names, kpt, counts) if text else []
            if not found:
                rows.append((split, image, None, None, None, None, None))
                ids.append(image)
            for where, label, box in found:
                rows.append((split, image, label, *box))
                ids.append(where)
            while size and len(rows) >= size:
                yield _table(rows[:size], ids[:size])
                del rows[:size], ids[:size]
    if rows:
        yield _table(rows, ids)


def label_path(image: str) -> str:
    """The label file of ``image``: its path with the last ``images`` folder made
    ``labels`` and the extension ``.txt`` (beside the image, where no ``images`` folder
    is on its path)."""
    head, sep, tail = image.replace("\\", "/").rpartition("/images/")
    mirrored = f"{head}/labels/{tail}" if sep else image
    return mirrored.rsplit(".", 1)[0] + ".txt"


def _load(path: str) -> dict:
    import yaml  # PyYAML (setup.py), imported when a YOLO source is read

    try:
        config = yaml.safe_load(storage.read_bytes(path).decode("utf-8-sig"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise SchemaError([Problem(path, None, None, f"not a YAML file ({e})")]) from None
    if not isinstance(config, dict) or "names" not in config:
        raise SchemaError([Problem(path, "names", None, (
            "not a YOLO data.yaml: it has no 'names' (a YOLO dataset's YAML gives path, "
            "train, val, test and the class names)"))])
    return config


def _names(config: dict, path: str) -> dict[int, str]:
    """Class id -> name, from ``names`` as a list or an ``{id: name}`` map."""
    given = config["names"]
    pairs = (list(enumerate(given)) if isinstance(given, list)
             else list(given.items()) if isinstance(given, dict) else None)
    if pairs is None:
        raise SchemaError([Problem(path, "names", given, (
            "give the class names as a list ([cat, dog]) or an {id: name} map"))])
    out: dict[int, str] = {}
    problems = Problems()
    for key, name in pairs:
        number = _whole(key)
        if number is None or number < 0:
            problems.add(path, "names", key, "a class id that is not a whole number >= 0")
        elif not isinstance(name, (str, int)) or not str(name).strip():
            problems.add(path, f"names[{key}]", name, "give the class a name")
        elif str(name).strip() in out.values():
            problems.add(path, f"names[{key}]", name, "the name of another class id too; "
                         "give each class its own name")
        else:
            out[number] = str(name).strip()
    if "nc" in config and _whole(config["nc"]) != len(pairs):
        problems.add(path, "nc", config["nc"], f"not the number of names ({len(pairs)})")
    problems.raise_if_any()
    return out


def _whole(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _keypoint_values(config: dict, path: str) -> int | None:
    """The values of a pose row's keypoints (``kpt_shape`` [keypoints, 2 or 3])."""
    shape = config.get("kpt_shape")
    if shape is None:
        return None
    if not (isinstance(shape, list) and len(shape) == 2 and all(
            _whole(v) is not None and _whole(v) > 0 for v in shape)) or shape[1] not in (2, 3):
        raise SchemaError([Problem(path, "kpt_shape", shape,
                                   "give [keypoints, values per keypoint (2 or 3)]")])
    return shape[0] * shape[1]


def _root(config: dict, path: str) -> str:
    """The dataset's root: ``path``, seen from the YAML's folder (else, as Ultralytics
    reads it, from the current one); the YAML's folder when not given."""
    beside = storage.resolve(storage.parent(path) or ".")
    given = config.get("path")
    if given in (None, ""):
        return beside
    given = str(given)
    if storage.is_remote(given) or os.path.isabs(given):
        return given.rstrip("/")
    for base in (beside, os.getcwd()):
        candidate = storage.resolve(given, base)
        if storage.isdir(candidate):
            return candidate
    raise SchemaError([Problem(path, "path", given, (
        f"no such folder beside the YAML file ({beside}) or in the current one; give the "
        f"dataset's root folder"))])


def _images(entry, key: str, root: str, path: str, problems: Problems) -> list[str]:
    """The images of one split's entry: folders (every image below them), ``.txt``
    files listing images, or a list of those; sorted within each."""
    out: list[str] = []
    for item in entry if isinstance(entry, list) else [entry]:
        if not isinstance(item, str) or not item.strip():
            problems.add(path, key, item, "give a folder of images or a .txt list of them")
            continue
        where = item if storage.is_remote(item) or os.path.isabs(item) else storage.resolve(
            item, root)
        if storage.isdir(where):
            found = sorted(p for p in storage.walk_files(where)
                           if p.lower().endswith(IMAGE_EXTENSIONS)
                           and not any(is_litter(c) for c in p.replace("\\", "/").split("/")))
            if not found:
                problems.add(path, key, item, f"no images in {where}")
            out += found
        elif where.lower().endswith(".txt") and storage.exists(where):
            out += _listed(where)
        else:
            problems.add(path, key, item, f"{where} is neither a folder of images nor a "
                                          f".txt list of them; give the split's images")
    return list(dict.fromkeys(out))


def _listed(list_file: str) -> list[str]:
    """The images a ``.txt`` list names, one a line; relative ones (``./images/x.jpg``)
    start from the list's folder."""
    folder = storage.parent(list_file)
    text = storage.read_bytes(list_file).decode("utf-8-sig")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return [line if storage.is_remote(line) or os.path.isabs(line)
            else storage.resolve(line, folder) for line in lines]


def _text(label_file: str) -> tuple[str, str | None]:
    """``(label_file, its text)``; the text is None where there is no such file."""
    try:
        return label_file, storage.read_bytes(label_file).decode("utf-8-sig")
    except FileNotFoundError:
        return label_file, None


def _boxes(text: str, label_file: str, names: dict[int, str], kpt: int | None,
           counts: Annotations) -> list[tuple[str, str, tuple]]:
    """``(where, label, (x_min, y_min, x_max, y_max))`` of the rows of a label file that
    are boxes; the others reported to ``counts``."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        counts.read += 1
        where = f"{label_file}:{lineno}"
        try:
            values = [float(f) for f in fields]
        except ValueError:
            counts.report(where, notes_of.MALFORMED, f"not numbers: {line.strip()[:60]!r}")
            continue
        if not all(math.isfinite(v) for v in values):
            counts.report(where, notes_of.MALFORMED, "a value that is not a finite number")
            continue
        cls, coords = values[0], values[1:]
        shape = None
        if len(coords) == 4:
            x, y, w, h = coords
        elif kpt is not None and len(coords) == 4 + kpt:
            (x, y, w, h), shape = coords[:4], "pose row(s)"
        elif len(coords) >= 6 and len(coords) % 2 == 0:
            xs, ys = coords[0::2], coords[1::2]
            x, y = (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2
            w, h = max(xs) - min(xs), max(ys) - min(ys)
            shape = "polygon row(s)"
        else:
            counts.report(where, notes_of.MALFORMED, (
                f"{len(fields)} fields; a box row has 5 (class x_center y_center width "
                f"height), a polygon row an odd number from 7"))
            continue
        if w < 0 or h < 0:
            counts.report(where, notes_of.MALFORMED, "a negative width or height")
            continue
        if not cls.is_integer() or int(cls) not in names:
            counts.report(where, notes_of.UNKNOWN_CLASS,
                          f"class id {fields[0]} is not one of data.yaml's names")
            continue
        box = (x - w / 2, y - h / 2, x + w / 2, y + h / 2)
        if any(v < -EDGE or v > 1 + EDGE for v in box):
            counts.report(where, notes_of.OUTSIDE, "corners " + ", ".join(
                f"{v:.6g}" for v in box) + " past [0, 1]")
            continue
        box = tuple(min(max(v, 0.0), 1.0) for v in box)
        if box[2] <= box[0] or box[3] <= box[1]:
            counts.report(where, notes_of.ZERO_AREA)
            continue
        if shape:
            counts.as_boxes[shape] = counts.as_boxes.get(shape, 0) + 1
        out.append((where, names[int(cls)], box))
    return out


def _table(rows: list, ids: list) -> tuple[str, dict, list]:
    return "detection", {c: [r[i] for r in rows] for i, c in enumerate(detection.COLUMNS)}, list(ids)
