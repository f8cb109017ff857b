"""COCO object-detection files (``instances_train2017.json``) as detection tables.

A COCO file lists ``images`` (``id``, ``file_name``, ``width``, ``height``),
``categories`` (``id``, ``name``) and ``annotations`` (``id``, ``image_id``,
``category_id``, ``bbox`` as ``[x, y, width, height]`` in pixels, ``iscrowd``). Its
rows are those of an AutoML detection table, one per annotation, in
``detection.COLUMNS`` and ``is_crowd``: the box divided by its image's width and height
(the relative corners AutoML's CSVs give), the category's name as the label. An image
without annotations is one row without a box, a record without boxes (TFDS keeps them
too). An image's annotations come in the order of their ids, as TFDS's COCO builder
takes them.
"""

from __future__ import annotations

import json
import logging
from typing import Iterator, Mapping, Sequence

from tfrecorder import _detection as detection, _storage as storage
from tfrecorder._errors import Problem, Problems, SchemaError

log = logging.getLogger(__name__)

#: The keys of each part of a COCO file that its records hold.
USED = {"": ("images", "annotations", "categories"),
        "images[].": ("id", "file_name", "width", "height"),
        "annotations[].": ("id", "image_id", "category_id", "bbox", "iscrowd"),
        "categories[].": ("id", "name")}
COLUMNS = detection.COLUMNS + ["is_crowd"]
#: How far (in pixels) a box may end past its image's edge and still be inside it: the
#: rounding of the tool that wrote the file (640.004 for 640), not a real overshoot.
#: Such a box is cut at the edge.
EDGE = 0.01


def load(path: str) -> dict:
    """The parsed COCO file at ``path``; SchemaError when it is not JSON or not COCO."""
    try:
        data = json.loads(storage.read_bytes(path).decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as e:
        hint = ("; a file of one JSON object per line is JSON Lines: name it .jsonl"
                if getattr(e, "msg", "") == "Extra data" else "")
        raise SchemaError([Problem(path, None, None, f"not a JSON file ({e}){hint}")]) from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise SchemaError([Problem(path, "images", None, (
            "not a COCO file: it has no 'images' list (a COCO object-detection file, such "
            "as instances_train2017.json, lists images, categories and annotations)"))])
    for part in ("annotations", "categories"):
        if not isinstance(data.get(part, []), list):
            raise SchemaError([Problem(path, part, None, f"'{part}' is not a list")])
    if data.get("annotations") and "categories" not in data:
        raise SchemaError([Problem(path, "categories", None,
                                   "annotations but no 'categories' list naming them")])
    return data


def rows(data: dict, path: str, split: str | None, folder: str,
         problems: Problems) -> tuple[list, list]:
    """The table rows of one parsed COCO file (``COLUMNS``) and their ids (``"<path>
    annotation <id>"``, or ``"<path> image <id>"`` for an image without annotations).
    Image paths are ``file_name`` seen from ``folder`` (``storage.within``)."""
    images, listed = _images(data["images"], path, problems)
    names, named = _categories(data.get("categories", []), path, problems)
    by_image: dict = {}
    for i, a in enumerate(data.get("annotations", [])):
        if not isinstance(a, dict):
            problems.add(f"{path} annotations[{i}]", None, None, "not an annotation object")
            continue
        where = f"{path} annotation {a.get('id', f'[{i}]')}"
        image = images.get(_key(a.get("image_id")))
        if image is None:
            if _key(a.get("image_id")) not in listed:  # else: its entry's problem is told
                problems.add(where, "image_id", a.get("image_id"),
                             "no image with this id in the file's images")
            continue
        if _key(a.get("category_id")) in named - set(names):
            continue  # its category's entry has a problem, told already
        found = _annotation(a, where, image, names, problems)
        if found is not None:
            by_image.setdefault(_key(a.get("image_id")), []).append((a.get("id"), where, found))
    out, ids = [], []
    for key, image in images.items():
        uri = storage.within(folder, image["file_name"])
        annotations = by_image.get(key)
        if not annotations:
            out.append((split, uri, None, None, None, None, None, None))
            ids.append(f"{path} image {image['id']}")
            continue
        annotations.sort(key=lambda t: _order(t[0]))
        for _, where, (label, box, crowd) in annotations:
            out.append((split, uri, label, *box, crowd))
            ids.append(where)
    return out, ids


def _key(value):
    """An id as a dict key: 3 and 3.0 are one id, "3" another (as JSON tells them)."""
    return ("n", float(value)) if isinstance(value, (int, float)) and not isinstance(
        value, bool) else ("s", str(value))


def _order(value):
    return (0, float(value), "") if isinstance(value, (int, float)) else (1, 0.0, str(value))


def _images(entries: list, path: str, problems: Problems) -> tuple[dict, set]:
    """Image id key -> its entry, of those with a file name and a size; and the keys of
    every image listed."""
    out: dict = {}
    listed: set = set()
    files: dict = {}
    for i, image in enumerate(entries):
        if not isinstance(image, dict) or "id" not in image:
            problems.add(f"{path} images[{i}]", None, None, "not an image object with an id")
            continue
        where = f"{path} image {image['id']}"
        key = _key(image["id"])
        if key in listed:
            problems.add(where, "id", image["id"], "a second image with this id")
            continue
        listed.add(key)
        name = image.get("file_name")
        if not isinstance(name, str) or not name.strip():
            problems.add(where, "file_name", name, "no file_name; give the image's file name")
            continue
        if name in files:
            problems.add(where, "file_name", name,
                         f"the file of image {files[name]} too; give each image its own file")
            continue
        sizes = [image.get("width"), image.get("height")]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                   for v in sizes):
            problems.add(where, "width", sizes,
                         "width and height are not positive numbers; give the image's size "
                         "in pixels (boxes are divided by it)")
            continue
        files[name] = image["id"]
        out[key] = image
    return out, listed


def _categories(entries: list, path: str, problems: Problems) -> tuple[dict, set]:
    """Category id key -> its name; and the keys of every category listed."""
    out: dict = {}
    listed: set = set()
    for i, category in enumerate(entries):
        if not isinstance(category, dict) or "id" not in category:
            problems.add(f"{path} categories[{i}]", None, None, "not a category object with an id")
            continue
        where = f"{path} category {category['id']}"
        listed.add(_key(category["id"]))
        name = category.get("name")
        if not isinstance(name, str) or not name.strip():
            problems.add(where, "name", name, "no name; give the category its name")
            continue
        key = _key(category["id"])
        if key in out and out[key] != name.strip():
            problems.add(where, "id", category["id"],
                         f"a second category with this id ({out[key]!r}, then {name!r})")
            continue
        out[key] = name.strip()
    return out, listed


def _annotation(a: dict, where: str, image: dict, names: dict, problems: Problems):
    """``(label, (x_min, y_min, x_max, y_max) relative, iscrowd)`` of one annotation,
    or None (its problems added)."""
    label = names.get(_key(a.get("category_id")))
    ok = True
    if label is None:
        problems.add(where, "category_id", a.get("category_id"),
                     "no category with this id in the file's categories")
        ok = False
    bbox = a.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox)):
        problems.add(where, "bbox", bbox, "not [x, y, width, height], four numbers in pixels")
        return None
    x, y, w, h = map(float, bbox)
    width, height = float(image["width"]), float(image["height"])
    if w < 0 or h < 0:
        problems.add(where, "bbox", bbox, "a negative width or height")
        return None
    if x < -EDGE or y < -EDGE or x + w > width + EDGE or y + h > height + EDGE:
        problems.add(where, "bbox", bbox,
                     f"outside image {image['id']} ({image['width']} x {image['height']} "
                     f"pixels, as its images entry gives them)")
        return None
    crowd = a.get("iscrowd", 0)
    if crowd not in (0, 1):
        problems.add(where, "iscrowd", crowd, "not 0 or 1")
        return None
    if not ok:
        return None
    box = tuple(min(max(v, 0.0), 1.0) for v in (x / width, y / height, (x + w) / width,
                                                 (y + h) / height))
    return label, box, crowd


def unused_keys(data: dict) -> set[str]:
    """The keys of a COCO file that its records do not hold, as ``part[].key``."""
    found = {k for k in data if k not in USED[""]}
    for part in ("images", "annotations", "categories"):
        prefix = f"{part}[]."
        for entry in data.get(part) or []:
            if isinstance(entry, dict):
                found.update(prefix + k for k in entry if k not in USED[prefix])
    return found


def read(files: Sequence[tuple[str, str | None]], size: int | None, problems: Problems,
         images_dir: str | Mapping[str, str] | None = None,
         notes: list | None = None) -> Iterator[tuple[str, dict, list]]:
    """The COCO files ``files`` (paths, each with its split or None) as detection tables
    of at most ``size`` rows (all in one when None): ``("detection", columns, row ids)``.

    Image files are found under ``images_dir`` (one folder, or one per split), else in
    the JSON file's folder. ``notes`` gets the keys that no record holds, in one line.
    """
    unused: set[str] = set()
    pending: list = []
    pending_ids: list = []
    for path, split in files:
        data = load(path)
        folder = (images_dir.get(split) if isinstance(images_dir, Mapping) else images_dir)
        if folder is None:
            folder = storage.parent(path)
        found, ids = rows(data, path, split, folder, problems)
        if not data["images"]:
            problems.add(path, "images", None, "no images; a COCO file lists its images")
        unused |= unused_keys(data)
        del data
        pending += found
        pending_ids += ids
        while size and len(pending) >= size:
            yield _table(pending[:size], pending_ids[:size])
            del pending[:size], pending_ids[:size]
    if pending:
        yield _table(pending, pending_ids)
    if notes is not None:
        notes[:] = ([f"COCO keys not converted: {', '.join(sorted(unused))}"]
                    if unused else [])
        for n in notes:
            log.info("%s", n)


def _table(rows_: list, ids: list) -> tuple[str, dict, list]:
    return "detection", {c: [r[i] for r in rows_] for i, c in enumerate(COLUMNS)}, list(ids)
