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
A polygon row (a segment, or an oriented box's four corners) is its bounding box and
an instance mask (``masks``): the polygon in pixels of its image, whose size is read
from the image's header (``sizes``), rasterised by pycocotools as a COCO segmentation
is. In a dataset with polygon rows, a box row has no mask and is reported (``no
segmentation``), as a COCO annotation without a segmentation is in a file where others
have one. A pose row (``kpt_shape`` [K, 2 or 3] in the YAML) is its box and its K
keypoints (``keypoints``), relative as written, their visibility as written (3 values)
or 2 where labelled and 0 at (0, 0) (2 values); a box row of a pose dataset has its
keypoints all unlabelled, as COCO writes them. An image without a label file, or with
an empty one, is one row without a box: a record without boxes (YOLO's background
images). A row that cannot be a box is reported to ``Annotations`` with its reason,
never dropped without a word.
"""

from __future__ import annotations

import json
import math
import os
from typing import Iterator

from tfrecorder import _storage as storage

from tfrecorder._inputs import (annotations as notes_of, detection, keypoints, masks, sizes,
                                splits)
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
#: The reason a polygon row is reported where its image's size cannot be read.
UNREADABLE = "image size unreadable"


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
    ``size`` rows (all in one when None): ``("detection", COLUMNS, row ids)``; row ids
    are ``<label file>:<line>``, or the image's path for an image without boxes."""
    counts = counts if counts is not None else Annotations()
    counts.reset()
    config = _load(path)
    names = _names(config, path)
    kpt = _keypoint_shape(config, path)
    root = _root(config, path)
    if all(config.get(key) in (None, "", []) for key in SPLIT_KEYS):
        raise SchemaError([Problem(path, "train", None, (
            "no train, val or test; give each split's images (train: images/train), as "
            "Ultralytics needs them too"))])
    # Every label file is read before the first row: whether the dataset has polygon
    # rows decides whether a box row is written or reported (without a mask), and a
    # table's geometry columns are those of all its rows.
    listed = []
    for key in SPLIT_KEYS:
        if config.get(key) in (None, "", []):
            continue
        images = _images(config[key], key, root, path, problems)
        texts = storage.each(_text, [label_path(i) for i in images],
                             at_once=storage.is_remote(root))
        listed.append((splits.canonical(key), images, texts))
    masked = any(text and _has_polygon(text, kpt) for _, _, texts in listed
                 for _, text in texts)
    if masked:
        masks.require(path)
    if kpt is not None:
        counts.keypoints.update(_keypoint_schemas(config, names, kpt[0]))
    rows: list = []
    ids: list = []
    for split, images, texts in listed:
        shaped = [i for i, (_, t) in zip(images, texts) if masked and t and _has_polygon(t, kpt)]
        measured = dict(zip(shaped, storage.each(sizes.of_file, shaped,
                                                 at_once=storage.is_remote(root))))
        for image, (label_file, text) in zip(images, texts):
            found = (_boxes(text, label_file, names, kpt, counts,
                            masked, measured.get(image)) if text else [])
            if not found:
                rows.append((split, image, None, None, None, None, None, None, None))
                ids.append(image)
            for where, label, box, mask, points in found:
                rows.append((split, image, label, *box, mask, points))
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


def _keypoint_shape(config: dict, path: str) -> tuple[int, int] | None:
    """``kpt_shape``: (keypoints per pose row, values per keypoint: 2 or 3)."""
    shape = config.get("kpt_shape")
    if shape is None:
        return None
    if not (isinstance(shape, list) and len(shape) == 2 and all(
            _whole(v) is not None and _whole(v) > 0 for v in shape)) or shape[1] not in (2, 3):
        raise SchemaError([Problem(path, "kpt_shape", shape,
                                   "give [keypoints, values per keypoint (2 or 3)]")])
    return int(shape[0]), int(shape[1])


def _keypoint_schemas(config: dict, names: dict[int, str], count: int) -> dict:
    """Class name -> its keypoints' names and skeleton (the manifest's ``keypoints``):
    ``kpt_names`` where data.yaml gives them (a list for every class, or ``{class id:
    list}``), else the keypoints' numbers; YOLO gives no skeleton."""
    given = config.get("kpt_names")
    out = {}
    for cid, name in names.items():
        listed = given.get(cid) if isinstance(given, dict) else given
        if not (isinstance(listed, list) and len(listed) == count):
            listed = range(count)
        out[name] = {"keypoints": [str(k) for k in listed], "skeleton": []}
    return out


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


def _shape(coords: list, kpt: tuple[int, int] | None) -> str | None:
    """What a row's values after its class are: "box", "pose", "polygon", or None."""
    if len(coords) == 4:
        return "box"
    if kpt is not None and len(coords) == 4 + kpt[0] * kpt[1]:
        return "pose"
    if len(coords) >= 6 and len(coords) % 2 == 0:
        return "polygon"
    return None


def _has_polygon(text: str, kpt: tuple[int, int] | None) -> bool:
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 5 and _shape(fields[1:], kpt) == "polygon":
            return True
    return False


def _boxes(text: str, label_file: str, names: dict[int, str], kpt: tuple[int, int] | None,
           counts: Annotations, masked: bool = False,
           size: tuple[int, int] | None = None) -> list[tuple]:
    """``(where, label, (x_min, y_min, x_max, y_max), mask, keypoints)`` of the rows of a
    label file that are written (``mask``: ``masks.column_value`` where ``masked``,
    ``keypoints``: ``keypoints.relative_value`` where ``kpt``); the others reported to
    ``counts``. ``size``: the image's (width, height), read where it has polygons."""
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
        shape = _shape(coords, kpt)
        if shape in ("box", "pose"):
            x, y, w, h = coords[:4]
        elif shape == "polygon":
            xs, ys = coords[0::2], coords[1::2]
            x, y = (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2
            w, h = max(xs) - min(xs), max(ys) - min(ys)
        else:
            pose = (f", a pose row {5 + kpt[0] * kpt[1]} (kpt_shape {list(kpt)})"
                    if kpt else "")
            counts.report(where, notes_of.MALFORMED, (
                f"{len(fields)} fields; a box row has 5 (class x_center y_center width "
                f"height), a polygon row an odd number from 7{pose}"))
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
        mask = points = None
        if masked:
            mask, why = _mask(coords if shape == "polygon" else None, size)
            if mask is None:
                counts.report(where, *why)
                continue
        if kpt is not None:
            points, why = _keypoints(coords[4:] if shape == "pose" else None, kpt)
            if points is None:
                counts.report(where, notes_of.MALFORMED, why)
                continue
            counts.shapes.add(keypoints.COLUMN)
        if mask is not None:
            counts.shapes.add(masks.COLUMN)
        out.append((where, names[int(cls)], box, mask, points))
    return out


def _mask(polygon: list | None, size: tuple[int, int] | None):
    """``(masks.column_value, None)`` of a polygon row on an image of ``size``, or
    ``(None, (reason, detail))``."""
    if polygon is None:
        return None, (masks.NO_MASK, "a box row, where other rows of the dataset are "
                                     "polygons")
    if size is None:
        return None, (UNREADABLE, "its image's size cannot be read from its header")
    width, height = size
    pixels = [v * (width if i % 2 == 0 else height) for i, v in enumerate(polygon)]
    return masks.column_value([pixels], height, width), None


def _keypoints(values: list | None, kpt: tuple[int, int]):
    """``(keypoints.relative_value, None)`` of a pose row's keypoint values (None: a row
    without them, all unlabelled), or ``(None, why)``."""
    count, per = kpt
    if values is None:
        return keypoints.relative_value([0.0] * (3 * count)), None
    flat = []
    for k in range(count):
        x, y = values[k * per], values[k * per + 1]
        if per == 3:
            v = values[k * per + 2]
            if v not in (0, 1, 2):
                return None, f"keypoint {k}'s visibility {v:g} is not 0, 1 or 2"
        else:  # no visibility: Ultralytics takes (0, 0) for a keypoint not labelled
            v = 0 if x == 0 and y == 0 else 2
        flat += [x, y, int(v)]
    return keypoints.relative_value(flat), None


#: The columns of a YOLO table: a detection table's, its masks and keypoints (empty but
#: where the dataset has polygon rows or ``kpt_shape``: ``Annotations.shapes``).
COLUMNS = detection.COLUMNS + [masks.COLUMN, keypoints.COLUMN]


def _table(rows: list, ids: list) -> tuple[str, dict, list]:
    return "detection", {c: [r[i] for r in rows] for i, c in enumerate(COLUMNS)}, list(ids)
