"""COCO object-detection files (``instances_train2017.json``) as detection tables.

A COCO file lists ``images`` (``id``, ``file_name``, ``width``, ``height``),
``categories`` (``id``, ``name``) and ``annotations`` (``id``, ``image_id``,
``category_id``, ``bbox`` as ``[x, y, width, height]`` in pixels, ``iscrowd``). Its
rows are those of an AutoML detection table, one per annotation, in
``detection.COLUMNS``, ``is_crowd`` and ``image_id``: the box divided by its image's
width and height (the relative corners AutoML's CSVs give), the category's name as the
label, the image's id (-1 for an id that is not a whole number: torchvision and COCO's
evaluator number images). An image
without annotations is one row without a box, a record without boxes (TFDS keeps them
too). An image's annotations come in the order of their ids, as TFDS's COCO builder
takes them.
"""

from __future__ import annotations

import json
import logging
import ntpath
import os
import posixpath
from typing import Iterator, Mapping, Sequence

from tfrecorder import _storage as storage
from tfrecorder._inputs import annotations as reported, detection, keypoints, masks
from tfrecorder._inputs.annotations import Annotations
from tfrecorder._errors import Problem, Problems, SchemaError

log = logging.getLogger(__name__)

#: The keys of each section of a COCO file that its records hold.
USED = {"": ("images", "annotations", "categories"),
        "images[].": ("id", "file_name", "width", "height"),
        "annotations[].": ("id", "image_id", "category_id", "bbox", "iscrowd",
                           "segmentation", "keypoints", "num_keypoints"),
        "categories[].": ("id", "name", "keypoints", "skeleton")}
COLUMNS = detection.COLUMNS + ["is_crowd", masks.COLUMN, keypoints.COLUMN, "image_id"]
#: How far (in pixels) a box may end past its image's edge and still be inside it: the
#: rounding of the tool that wrote the file (640.004 for 640), not a real overshoot.
#: Such a box is cut at the edge.
EDGE = 0.01
#: How many of a file's images are looked for, spread over the order it lists them (its
#: first among them), to tell the folder they are in before any pipeline runs: the first
#: one found ends the search. Spread, so that a file whose first images are missing is
#: not taken for one whose folder is wrong.
PROBED = 20


def load(path: str) -> dict:
    """The parsed COCO file at ``path``; SchemaError when it is not JSON or not COCO."""
    try:
        data = json.loads(storage.read_bytes(path).decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as e:
        hint = ("; a file of one JSON object per line is JSON Lines: name it .jsonl"
                if getattr(e, "msg", "") == "Extra data" else "")
        raise SchemaError([Problem(path, None, None, f"not a JSON file ({e}){hint}")]) from None
    except RecursionError:  # Python's parser recurses per level: past about 1,000, here
        raise SchemaError([Problem(path, None, None, (
            "JSON nested too deep to read (more than about 1,000 levels); a COCO file is "
            "an object of images, categories and annotations lists, a few levels "
            "deep"))]) from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise SchemaError([Problem(path, "images", None, (
            "not a COCO file: it has no 'images' list (a COCO object-detection file, such "
            "as instances_train2017.json, lists images, categories and annotations)"))])
    for section in ("annotations", "categories"):
        if not isinstance(data.get(section, []), list):
            raise SchemaError([Problem(path, section, None, f"'{section}' is not a list")])
    if data.get("annotations") and "categories" not in data:
        raise SchemaError([Problem(path, "categories", None,
                                   "annotations but no 'categories' list naming them")])
    return data


def rows(data: dict, path: str, split: str | None, folder: str,
         problems: Problems, counts: Annotations | None = None) -> tuple[list, list]:
    """The table rows of one parsed COCO file (``COLUMNS``) and their ids (``"<path>
    annotation <id>"``, or ``"<path> image <id>"`` for an image without annotations).
    Image paths are ``file_name`` seen from ``folder`` (``storage.within``). A box of
    zero area is reported to ``counts``, not written. In a file where annotations have
    a ``segmentation``, each box carries its own (``masks.column_value``); one without
    any, or whose mask is not one of its image, is reported. In a file where annotations
    have ``keypoints``, each box carries its own (``keypoints.column_value``), and
    ``counts.keypoints`` gets the categories' names and skeletons."""
    counts = counts if counts is not None else Annotations()
    images, listed = _images(data["images"], path, problems)
    names, named = _categories(data.get("categories", []), path, problems)
    masked = any(isinstance(a, dict) and a.get("segmentation")
                 for a in data.get("annotations", []))
    if masked:
        masks.require(path)
    schemas = keypoints.schemas(data.get("categories", []))
    keyed = any(isinstance(a, dict) and a.get("keypoints")
                for a in data.get("annotations", []))
    if keyed:
        counts.keypoints.update(schemas)
    by_image: dict = {}
    for i, a in enumerate(data.get("annotations", [])):
        if not isinstance(a, dict):
            problems.add(f"{path} annotations[{i}]", None, None, "not an annotation object")
            continue
        where = f"{path} annotation {a.get('id', f'[{i}]')}"
        counts.read += 1
        image = images.get(_key(a.get("image_id")))
        if image is None:
            if _key(a.get("image_id")) not in listed:  # else: its entry's problem is told
                problems.add(where, "image_id", a.get("image_id"),
                             "no image with this id in the file's images")
            continue
        if _key(a.get("category_id")) in named - set(names):
            continue  # its category's entry has a problem, told already
        found = _annotation(a, where, image, names, problems)
        if found is not None and (found[1][2] <= found[1][0] or found[1][3] <= found[1][1]):
            counts.report(where, reported.ZERO_AREA, f"bbox {a.get('bbox')}")
            found = None
        if found is not None:
            found = (*found, {})
        if found is not None and masked:
            found = _with_mask(found, a, image, where, counts)
        if found is not None and keyed:
            found = _with_keypoints(found, a, image, where, counts, schemas)
        if found is not None:
            by_image.setdefault(_key(a.get("image_id")), []).append((a.get("id"), where, found))
    out, ids = [], []
    for key, name in names.items():  # kept for the model_garden layout (garden)
        if key[0] == "n" and key[1] == int(key[1]):
            counts.class_ids.setdefault(name, int(key[1]))
    for key, image in images.items():
        uri = storage.within(folder, image["file_name"])
        counts.image_ids[uri] = image["id"]
        counts.image_sizes[uri] = (image["width"], image["height"])
        number = _whole(image["id"])
        annotations = by_image.get(key)
        if not annotations:
            out.append((split, uri, None, None, None, None, None, None, None, None, number))
            ids.append(f"{path} image {image['id']}")
            continue
        annotations.sort(key=lambda t: _order(t[0]))
        for _, where, (label, box, crowd, geometry) in annotations:
            out.append((split, uri, label, *box, crowd, geometry.get(masks.COLUMN),
                        geometry.get(keypoints.COLUMN), number))
            ids.append(where)
    return out, ids


def _with_mask(found: tuple, a: dict, image: dict, where: str, counts: Annotations):
    """``found`` with the annotation's mask, or None (reported) without a mask of its
    image."""
    height, width = int(image["height"]), int(image["width"])
    wrong = masks.problem(a.get("segmentation"), height, width)
    if wrong is not None:
        counts.report(where, *wrong)
        return None
    counts.shapes.add(masks.COLUMN)
    found[3][masks.COLUMN] = masks.column_value(a["segmentation"], height, width)
    return found


def _with_keypoints(found: tuple, a: dict, image: dict, where: str, counts: Annotations,
                    schemas: dict):
    """``found`` with the annotation's keypoints, or None (reported) where they are not
    those of its category."""
    count = len(schemas.get(found[0], {}).get("keypoints", []))
    value, why = keypoints.column_value(a, count, float(image["width"]),
                                        float(image["height"]))
    if value is None:
        counts.report(where, reported.MALFORMED, why)
        return None
    counts.shapes.add(keypoints.COLUMN)
    found[3][keypoints.COLUMN] = value
    return found


def _key(value):
    """An id as a dict key: 3 and 3.0 are one id, "3" another (as JSON tells them)."""
    return ("n", float(value)) if isinstance(value, (int, float)) and not isinstance(
        value, bool) else ("s", str(value))


def _whole(value) -> int:
    """An image id as the ``image_id`` feature stores it: a whole number, or -1."""
    key = _key(value)
    return int(key[1]) if key[0] == "n" and key[1] == int(key[1]) else -1


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
        if _outside(name):
            problems.add(where, "file_name", name,
                         "an absolute path, or one that climbs out of the images' folder "
                         "(..); give the image's path relative to images_dir= "
                         "(--images-dir), the folder its images are in")
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


def _outside(name: str) -> bool:
    """Whether a ``file_name`` would reach a file outside the images' folder: an
    absolute path (``/x``, ``C:\\x``, ``~/x``), a URI, or one climbing out with ``..``
    (``\\`` counted as a separator too, as the Windows tools that write it mean it)."""
    if ("://" in name or name.startswith(("/", "\\")) or ntpath.splitdrive(name)[0]
            or os.path.expanduser(name) != name):
        return True
    return posixpath.normpath(name.replace("\\", "/")).split("/")[0] == ".."


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
    """The keys of a COCO file that its records do not hold, as ``section[].key``."""
    found = {k for k in data if k not in USED[""]}
    for section in ("images", "annotations", "categories"):
        prefix = f"{section}[]."
        for entry in data.get(section) or []:
            if isinstance(entry, dict):
                found.update(prefix + k for k in entry if k not in USED[prefix])
    return found


def read(files: Sequence[tuple[str, str | None]], size: int | None, problems: Problems,
         images_dir: str | Mapping[str, str] | None = None,
         notes: list | None = None,
         counts: Annotations | None = None) -> Iterator[tuple[str, dict, list]]:
    """The COCO files ``files`` (paths, each with its split or None) as detection tables
    of at most ``size`` rows (all in one when None): ``("detection", columns, row ids)``.

    Image files are found under ``images_dir`` (one folder, or one per split), else in
    the JSON file's folder. ``notes`` gets the keys that no record holds, in one line;
    ``counts`` the annotations read, and those of zero area, reported.
    """
    counts = counts if counts is not None else Annotations()
    counts.reset()
    unused: set[str] = set()
    found_in: list[str] = []
    pending: list = []
    pending_ids: list = []
    for path, split in files:
        data = load(path)
        given = images_dir.get(split) if isinstance(images_dir, Mapping) else images_dir
        folder = _folder(data["images"], path, given, problems, found_in)
        found, ids = rows(data, path, split, folder, problems, counts)
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
        notes[:] = found_in + ([f"COCO keys not converted: {', '.join(sorted(unused))}"]
                               if unused else [])
        for n in notes:
            log.info("%s", n)


def _folder(images: list, path: str, given: str | None, problems: Problems,
            found_in: list) -> str:
    """The folder the ``file_name``s of the COCO file at ``path`` start from: ``given``
    (``images_dir``), else the file's own folder, else the one folder where the common
    exporters put the images (``_layouts``), found by looking for the file's first images
    (``PROBED``), so that a folder without them is told before any pipeline runs rather
    than as every row quarantined after it. Where it is none of them, a problem naming
    ``images_dir=`` is added; a folder found is noted in ``found_in``."""
    names = [n for n in (i.get("file_name") for i in images if isinstance(i, dict))
             if isinstance(n, str) and n.strip() and not _outside(n)]
    step = max(1, len(names) / PROBED)
    names = list(dict.fromkeys(names[int(k * step)] for k in range(min(PROBED, len(names)))))
    beside = storage.parent(path)
    folder = beside if given is None else given
    if not names or _holds(folder, names):
        return folder
    tried = [f for f in [beside, *_layouts(path)] if f != folder]
    others = [f for f in tried if _holds(f, names)]
    if given is None and len(others) == 1:
        found_in.append(f"images of {path} found in {others[0]}, where its exporter puts "
                        f"them; images_dir= (--images-dir) names another folder")
        return others[0]
    missing = f"{storage.within(folder, names[0])} is not there"
    if given is None:
        missing += f", nor is any of them in {', '.join(tried)}"
    fix = (f"they are in {' and in '.join(others)}: name the folder as images_dir= "
           f"(--images-dir)" if others else
           "give the folder they are in as images_dir= (--images-dir)")
    problems.add(path, "images_dir", folder,
                 f"none of {len(names)} images the file lists (its first, and others spread "
                 f"over it) is in "
                 f"{'images_dir ' if given is not None else 'its folder '}{folder or '.'} "
                 f"({missing}); {fix}")
    return folder


def _holds(folder: str, names: list[str]) -> bool:
    """Whether one of the ``file_name``s ``names`` is a file seen from ``folder``."""
    return any(storage.exists(storage.within(folder, n)) for n in names)


def _layouts(path: str) -> list[str]:
    """The folders where labelling tools put the images of the COCO file at ``path``:
    ``images/`` beside it (Label Studio's ``result.json``), and, for
    ``annotations/instances_<subset>.json``, ``images/<subset>/`` (Datumaro, CVAT),
    ``images/`` (CVAT's older exports) and ``<subset>/`` (COCO 2017's own
    ``train2017/``) beside ``annotations/``."""
    beside = storage.parent(path)
    out = [storage.join(beside, "images")]
    if storage.basename(beside) != "annotations":
        return out
    root = storage.parent(beside)
    stem = storage.basename(path).rsplit(".", 1)[0]
    subset = stem[len("instances_"):] if stem.startswith("instances_") else ""
    images = storage.join(root, "images")
    if subset:
        out.append(storage.join(images, subset))
    out.append(images)
    if subset:
        out.append(storage.join(root, subset))
    return out


def _table(rows_: list, ids: list) -> tuple[str, dict, list]:
    return "detection", {c: [r[i] for r in rows_] for i, c in enumerate(COLUMNS)}, list(ids)
