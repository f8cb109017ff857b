"""Pascal VOC datasets (one XML file per image) as detection tables.

Two layouts: the devkit's (``Annotations/``, ``JPEGImages/``, and
``ImageSets/Main/{train,val,test}.txt`` listing each split's image ids) and the flat
one labelling tools export (``images/`` beside ``annotations/``, no splits). An XML
file gives its image (``filename``), its ``size`` and its ``object``\\ s: ``name``,
``bndbox`` (``xmin``, ``ymin``, ``xmax``, ``ymax``: 1-based pixels, both ends inside
the box), ``difficult`` and ``truncated``.

Rows become those of an AutoML detection table (``detection.COLUMNS``) with
``is_difficult`` and ``is_truncated``, one per box. Following the devkit, the box
covers the pixels ``xmin`` to ``xmax``: relative ``(xmin - 1) / width`` to
``xmax / width`` (the same for y). A size that is missing or 0 is read from the image
file's header. An image without objects is a record without boxes; an object that
cannot be a box is reported to ``Annotations`` with its reason.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ElementTree
from typing import Iterator

from tfrecorder import _storage as storage
from tfrecorder._inputs import annotations as reasons, detection, splits
from tfrecorder._errors import Problems
from tfrecorder._inputs.annotations import Annotations
from tfrecorder._inputs.image_tree import is_litter

COLUMNS = detection.COLUMNS + ["is_difficult", "is_truncated"]
#: The devkit's split lists, by file name.
SPLIT_LISTS = {"train": "train", "val": "validation", "test": "test"}
#: How far (in pixels) a box may pass an edge and still be inside the image: tools
#: disagree on whether VOC's pixels start at 0 or 1. Such a box is cut at the edge.
EDGE = 1.0


def find(source) -> tuple[str, str, str] | None:
    """``(annotations folder, images folder, devkit root or None)`` of a Pascal VOC
    folder; None for any other source."""
    if not isinstance(source, str) or not storage.isdir(source):
        return None
    devkit = (storage.join(source, "Annotations"), storage.join(source, "JPEGImages"))
    if all(storage.isdir(p) for p in devkit):
        return devkit[0], devkit[1], source
    flat = (storage.join(source, "annotations"), storage.join(source, "images"))
    if all(storage.isdir(p) for p in flat) and any(
            n.lower().endswith(".xml") for n in storage.listdir(flat[0])):
        return flat[0], flat[1], None
    return None


def read(found: tuple[str, str, str | None], size: int | None, problems: Problems,
         counts: Annotations | None = None,
         notes: list | None = None) -> Iterator[tuple[str, dict, list]]:
    """The VOC dataset ``found`` (``find``'s) as detection tables of at most ``size``
    rows (all in one when None): ``("detection", columns, row ids)``; row ids are
    ``<xml file> object <n>``, or the XML file for an image without boxes."""
    counts = counts if counts is not None else Annotations()
    counts.reset()
    folder, images, root = found
    files = sorted(n for n in storage.listdir(folder)
                   if n.lower().endswith(".xml") and not is_litter(n))
    split_of = _split_lists(root, problems) if root else {}
    stems = {n.rsplit(".", 1)[0] for n in files}
    for stem in sorted(set(split_of) - stems):
        problems.add(storage.join(root, "ImageSets", "Main"), split_of[stem], stem,
                     f"an image id the split lists name with no {stem}.xml in {folder}")
    unlisted = 0
    rows: list = []
    ids: list = []
    for name in files:
        path = storage.join(folder, name)
        stem = name.rsplit(".", 1)[0]
        split = split_of.get(stem)
        unlisted += bool(split_of) and split is None
        try:
            tree = ElementTree.fromstring(storage.read_bytes(path))
        except ElementTree.ParseError as e:
            problems.add(path, None, None, f"not an XML file ({e})")
            continue
        image = storage.join(images, _text(tree, "filename") or f"{stem}.jpg")
        boxes = _boxes(tree, path, image, counts)
        if not boxes:
            rows.append((split, image, None, None, None, None, None, None, None))
            ids.append(path)
        for where, label, box, flags in boxes:
            rows.append((split, image, label, *box, *flags))
            ids.append(where)
        while size and len(rows) >= size:
            yield _table(rows[:size], ids[:size])
            del rows[:size], ids[:size]
    if not files:
        problems.add(folder, None, None, "no .xml files: a Pascal VOC folder holds one "
                                         "XML file per image")
    if rows:
        yield _table(rows, ids)
    if notes is not None:
        notes[:] = ([f"{unlisted} image(s) of {folder} are in no ImageSets/Main list "
                     f"(train, val, test): split by a hash of the image"] if unlisted else [])


def _split_lists(root: str, problems: Problems) -> dict[str, str]:
    """Image id -> split, from ``ImageSets/Main/{train,val,test}.txt``."""
    out: dict[str, str] = {}
    for name, split in SPLIT_LISTS.items():
        path = storage.join(root, "ImageSets", "Main", f"{name}.txt")
        if not storage.exists(path):
            continue
        for line in storage.read_bytes(path).decode("utf-8-sig").splitlines():
            if not line.split():
                continue
            stem = line.split()[0]  # a class's list adds " 1" / " -1"
            if stem in out and out[stem] != split:
                problems.add(path, "split", stem, f"an image id of the {out[stem]} list too")
            out[stem] = splits.canonical(split)
    return out


def _text(node, tag: str) -> str | None:
    found = node.find(tag)
    text = found.text.strip() if found is not None and found.text else ""
    return text or None


def _size(tree, image: str) -> tuple[float, float] | None:
    """The image's width and height: its ``size``, else its file's header."""
    try:
        width, height = (float(_text(tree, f"size/{k}") or 0) for k in ("width", "height"))
    except ValueError:
        width = height = 0
    if width > 0 and height > 0:
        return width, height
    from PIL import Image

    try:
        with Image.open(io.BytesIO(storage.read_bytes(image))) as img:
            return float(img.width), float(img.height)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


def _boxes(tree, path: str, image: str, counts: Annotations) -> list:
    """``(where, label, (x_min, y_min, x_max, y_max), (difficult, truncated))`` of the
    objects of one XML file that are boxes; the others reported to ``counts``."""
    objects = tree.findall("object")
    if not objects:
        return []
    size = _size(tree, image)
    out = []
    for n, obj in enumerate(objects, 1):
        counts.read += 1
        where = f"{path} object {n}"
        label = _text(obj, "name")
        try:
            corners = [float(_text(obj, f"bndbox/{k}")) for k in ("xmin", "ymin", "xmax", "ymax")]
            flags = tuple(int(float(_text(obj, k) or 0)) for k in ("difficult", "truncated"))
        except (TypeError, ValueError):
            counts.report(where, reasons.MALFORMED, "bndbox not four numbers, or a flag "
                          "that is not a number")
            continue
        if label is None or any(f not in (0, 1) for f in flags):
            counts.report(where, reasons.MALFORMED, "no name" if label is None
                          else "difficult or truncated not 0 or 1")
            continue
        if size is None:
            counts.report(where, reasons.MALFORMED, f"no size, and {image} gives none")
            continue
        width, height = size
        x0, y0, x1, y1 = corners[0] - 1, corners[1] - 1, corners[2], corners[3]
        if x0 < -EDGE or y0 < -EDGE or x1 > width + EDGE or y1 > height + EDGE:
            counts.report(where, reasons.OUTSIDE, f"{corners} in an image of "
                          f"{width:g} x {height:g} pixels")
            continue
        box = tuple(min(max(v, 0.0), 1.0) for v in (x0 / width, y0 / height,
                                                    x1 / width, y1 / height))
        if box[2] <= box[0] or box[3] <= box[1]:
            counts.report(where, reasons.ZERO_AREA, f"{corners}")
            continue
        out.append((where, label, box, flags))
    return out


def _table(rows: list, ids: list) -> tuple[str, dict, list]:
    return "detection", {c: [r[i] for r in rows] for i, c in enumerate(COLUMNS)}, list(ids)
