"""Vertex AI's JSON Lines files of image datasets, as tables; and the files a Vertex AI
custom training job is given.

Vertex AI imports and exports an image dataset as JSON Lines, one object per image::

    {"imageGcsUri": "gs://b/a.jpg",
     "classificationAnnotation": {"displayName": "cat"},
     "dataItemResourceLabels": {"aiplatform.googleapis.com/ml_use": "training"}}

A multi-label line has ``classificationAnnotations`` (a list of such annotations); an
object-detection line has ``boundingBoxAnnotations``: boxes with ``displayName`` and
``xMin``, ``yMin``, ``xMax``, ``yMax`` relative to the image. The lines become the
rows of AutoML's tables, so that they take the one way every table takes:
``split, image_uri, label`` (the label a list for a multi-label line), or one row per
box in ``detection.COLUMNS``.

A line's split is its ``ml_use`` label, else its file's: given (a custom training job's
``AIP_*_DATA_URI``), or told by a name that starts with ``training-``, ``validation-``
or ``test-`` (the names of a custom training job's files); else it is unassigned.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
from typing import Iterator, Mapping, Sequence

from tfrecorder import _storage as storage
from tfrecorder._inputs import detection, splits
from tfrecorder._folder import split_names
from tfrecorder._errors import ConfigError, Problems

log = logging.getLogger(__name__)

IMAGE = "imageGcsUri"
SINGLE = "classificationAnnotation"
MULTI = "classificationAnnotations"
BOXES = "boundingBoxAnnotations"
RESOURCE_LABELS = "dataItemResourceLabels"
#: The data item label that holds a line's split.
ML_USE = "aiplatform.googleapis.com/ml_use"
NAME = "displayName"
COORDINATES = ("xMin", "yMin", "xMax", "yMax")

#: The start of a file's name that gives its lines' split (a custom training job's files).
FILE_PREFIXES = (("training-", "train"), ("validation-", "validation"), ("test-", "test"))
#: The environment of a Vertex AI custom training job given a managed dataset: the
#: pattern of each split's files.
ENVIRONMENT = (("AIP_TRAINING_DATA_URI", "train"), ("AIP_VALIDATION_DATA_URI", "validation"),
               ("AIP_TEST_DATA_URI", "test"))
FORMAT_VARIABLE = "AIP_DATA_FORMAT"

#: Keys listed in a note at most; the rest are counted.
NOTED_KEYS = 12


@dataclasses.dataclass(frozen=True)
class JsonLines:
    """JSON Lines files in Vertex AI's image schemas, as ``(path or pattern, split)``
    pairs: the split (or None) is the files', for lines without an ``ml_use`` label."""

    files: tuple[tuple[str, str | None], ...]


def from_vertex(environ: Mapping[str, str] | None = None) -> JsonLines:
    """The dataset a Vertex AI custom training job is given, as a source for
    ``convert``: the files of ``AIP_TRAINING_DATA_URI``, ``AIP_VALIDATION_DATA_URI`` and
    ``AIP_TEST_DATA_URI`` (``gs://.../training-*``), as the train, validation and test
    splits. ``environ`` defaults to ``os.environ``.

    Raises ConfigError when ``AIP_DATA_FORMAT`` is not ``jsonl`` (an image dataset is
    exported as JSON Lines; ``csv`` and ``bigquery`` are a tabular dataset's formats) or
    no ``AIP_*_DATA_URI`` is set.
    """
    env = os.environ if environ is None else environ
    found = env.get(FORMAT_VARIABLE)
    if found is None:
        raise ConfigError(
            f"{FORMAT_VARIABLE} is not set: from_vertex() reads the dataset of a Vertex AI "
            f"custom training job, which Vertex AI describes in AIP_* environment variables; "
            f"outside one, give the JSON Lines files themselves (convert('gs://b/export/*.jsonl', ...))")
    if found.strip().lower() != "jsonl":
        raise ConfigError(
            f"{FORMAT_VARIABLE}={found!r}: tfrecorder reads the jsonl export of an image "
            f"dataset, not {found!r}; give the training job an image dataset (Vertex AI "
            f"exports those as jsonl)")
    files = tuple((env[name].strip(), split) for name, split in ENVIRONMENT
                  if env.get(name, "").strip())
    if not files:
        raise ConfigError(f"{FORMAT_VARIABLE} is jsonl but none of "
                          f"{', '.join(n for n, _ in ENVIRONMENT)} is set; "
                          f"the training job has no dataset")
    return JsonLines(files)


def file_split(path: str) -> str | None:
    """The split a file's name gives its lines (``training-00000-of-00004.jsonl``), or None."""
    name = storage.basename(path).lower()
    return next((split for prefix, split in FILE_PREFIXES if name.startswith(prefix)), None)


@dataclasses.dataclass
class Line:
    """One line read: its image as written, split, and annotations."""

    where: str                       # "path:line"
    image: str
    split: str | None                # from its ml_use label; None: none given
    kind: str | None                 # "classification", "detection", or None: none
    labels: str | list | None = None  # a name (single-label), or a list (multi-label)
    boxes: list = dataclasses.field(default_factory=list)  # (name, x_min, y_min, x_max, y_max)


class Unused:
    """The keys of the lines that no record holds, and on how many lines each was."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()

    def add(self, prefix: str, keys) -> None:
        self.counts.update(f"{prefix}{k}" for k in keys)

    def note(self) -> str | None:
        """The one line the result shows, or None when every key was used."""
        if not self.counts:
            return None
        shown = [f"{k} ({n} line{'s' if n != 1 else ''})"
                 for k, n in sorted(self.counts.items())[:NOTED_KEYS]]
        more = len(self.counts) - NOTED_KEYS
        return ("JSON Lines keys not converted: " + ", ".join(shown)
                + (f" and {more} more" if more > 0 else ""))


def parse(text: str, where: str, problems: Problems, unused: Unused) -> Line | None:
    """One line of a Vertex AI JSON Lines file, or None (its problems added)."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        problems.add(where, None, _shown(text),
                     f"not JSON ({e}); each line of a JSON Lines file is one JSON object")
        return None
    except RecursionError:  # Python's parser recurses per level: past about 1,000, here
        problems.add(where, None, _shown(text),
                     "JSON nested too deep to read (more than about 1,000 levels); each "
                     "line of a JSON Lines file is one flat JSON object describing an image")
        return None
    if not isinstance(obj, dict):
        problems.add(where, None, _shown(text),
                     f"a JSON {_json_kind(obj)}, not an object; each line describes one "
                     f"image as an object with {IMAGE}")
        return None
    unused.add("", [k for k in obj if k not in (IMAGE, SINGLE, MULTI, BOXES, RESOURCE_LABELS)])
    image = obj.get(IMAGE)
    if not isinstance(image, str) or not image.strip():
        problems.add(where, IMAGE, image if image is None or isinstance(image, str) else
                     _shown(json.dumps(image)),
                     (f"{IMAGE} is a JSON {_json_kind(image)}, not text; give"
                      if image is not None and not isinstance(image, str) else
                      f"no image: every line needs {IMAGE},")
                     + " the gs:// URI (or path) of its image")
        return None
    before = len(problems)
    line = Line(where, image.strip(), _ml_use(obj.get(RESOURCE_LABELS), where, problems, unused),
                None)
    if SINGLE in obj or MULTI in obj:
        line.kind = "classification"
        names = []
        if SINGLE in obj:
            names.append(_name(obj[SINGLE], SINGLE, where, problems, unused, SINGLE + "."))
        if MULTI in obj:
            annotations = obj[MULTI]
            if not isinstance(annotations, list):
                problems.add(where, MULTI, _shown(json.dumps(annotations)),
                             "not a list of annotations")
                annotations = []
            names += [_name(a, f"{MULTI}[{i}]", where, problems, unused, f"{MULTI}[].")
                      for i, a in enumerate(annotations)]
        line.labels = names[0] if SINGLE in obj and MULTI not in obj else names
    if BOXES in obj:
        if line.kind is not None:
            problems.add(where, BOXES, None,
                         f"both {BOXES} and classification annotations; a dataset is for "
                         f"classification or for object detection, not both")
        line.kind = "detection"
        boxes = obj[BOXES]
        if not isinstance(boxes, list):
            problems.add(where, BOXES, _shown(json.dumps(boxes)), "not a list of boxes")
            boxes = []
        line.boxes = [_box(b, i, where, problems, unused) for i, b in enumerate(boxes)]
    return line if len(problems) == before else None


def _shown(text: str, limit: int = 80) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _ml_use(resource_labels, where: str, problems: Problems, unused: Unused) -> str | None:
    if resource_labels is None:
        return None
    if not isinstance(resource_labels, dict):
        problems.add(where, RESOURCE_LABELS, _shown(json.dumps(resource_labels)),
                     "not an object of labels")
        return None
    unused.add(RESOURCE_LABELS + ".", [k for k in resource_labels if k != ML_USE])
    value = resource_labels.get(ML_USE)
    if value is None or isinstance(value, str):
        try:
            return splits.canonical(value)
        except split_names.UnknownSplit:
            pass
    problems.add(where, f"{RESOURCE_LABELS}.{ML_USE}", value,
                 "unknown ml_use; Vertex AI's are training, validation and test")
    return None


def _json_kind(value) -> str:
    """What JSON calls ``value``'s type: object, array, number, boolean."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array"}.get(type(value), type(value).__name__)


def _name(annotation, field: str, where: str, problems: Problems, unused: Unused,
          prefix: str) -> str | None:
    """The displayName of a classification annotation."""
    if not isinstance(annotation, dict):
        problems.add(where, field, _shown(json.dumps(annotation)),
                     f"not an annotation object with {NAME}")
        return None
    unused.add(prefix, [k for k in annotation if k != NAME])
    name = annotation.get(NAME)
    if not isinstance(name, str) or not name.strip():
        problems.add(where, f"{field}.{NAME}", name if isinstance(name, (str, type(None)))
                     else _shown(json.dumps(name)),
                     f"{NAME} is a JSON {_json_kind(name)}, not text; give the label's "
                     "name as a string" if name is not None and not isinstance(name, str)
                     else f"no label name; give the annotation its {NAME}")
        return None
    return name


def _box(box, i: int, where: str, problems: Problems, unused: Unused):
    """``(name, x_min, y_min, x_max, y_max)`` of one of a line's boxes.

    A missing ``xMin`` or ``yMin`` is 0: Vertex AI's exports leave zero values out, as
    protocol buffers' JSON does. A missing ``xMax`` or ``yMax`` is a problem (a box
    ending at 0 has no area: more likely a misspelt key)."""
    field = f"{BOXES}[{i}]"
    if not isinstance(box, dict):
        problems.add(where, field, _shown(json.dumps(box)),
                     f"not a box object with {NAME}, {', '.join(COORDINATES)}")
        return None
    unused.add(f"{BOXES}[].", [k for k in box if k != NAME and k not in COORDINATES])
    name = box.get(NAME)
    if not isinstance(name, str) or not name.strip():
        problems.add(where, f"{field}.{NAME}", name if isinstance(name, (str, type(None)))
                     else _shown(json.dumps(name)), f"a box without a label; give it its {NAME}")
    coordinates = []
    for key in COORDINATES:
        value = box.get(key)
        if value is None and key in ("xMin", "yMin"):
            value = 0.0
        number = _number(value)
        if number is None:
            problems.add(where, f"{field}.{key}", value if value is None or isinstance(
                value, (str, int, float)) else _shown(json.dumps(value)),
                f"no {key}; give the box's relative coordinates" if value is None else
                "not a number")
        coordinates.append(number)
    return (name, *coordinates)


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _lines(path: str, problems: Problems) -> Iterator[tuple[str, str]]:
    """``("path:line", text)`` of the non-blank lines of one file, streamed."""
    with storage.open_file(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            where = f"{path}:{number}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problems.add(where, None, None, f"not UTF-8 text (byte {raw[e.start]:#04x}); "
                                                f"save the file as UTF-8")
                continue
            if number == 1:
                text = text.lstrip("\ufeff")
            if text.strip():
                yield where, text


def read(files: Sequence[tuple[str, str | None]], size: int | None, problems: Problems,
         images_dir: str | None = None,
         notes: list | None = None) -> Iterator[tuple[str, dict, list]]:
    """The lines of ``files`` (paths, each with its split or None) as tables of at most
    ``size`` rows (all in one when None): ``(kind, columns, row ids)``, where kind is
    "detection" (one row per box, ``detection.COLUMNS``) or "jsonl" (``split, image_uri,
    label``). Row ids are ``path:line``.

    The table is a detection one when its first annotated line has boxes. Relative image
    paths are taken from ``images_dir``, else from their file's folder (``storage.within``).
    Problems of lines go to ``problems``; ``notes`` gets the keys no record holds, and
    the number of lines whose ml_use differs from their file's split.
    """
    unused = Unused()
    read_any = False
    kind = None
    pending: list[Line] = []
    rows: list = []
    ids: list = []
    differ = collections.Counter()

    def add(line: Line) -> None:
        if kind == "detection":
            if line.kind == "classification":
                problems.add(line.where, SINGLE if isinstance(line.labels, str) else MULTI,
                             line.labels,
                             f"a classification annotation in a table of {BOXES}; a dataset "
                             f"is for classification or for object detection, not both")
                return
            for box in line.boxes or [(None,) * 5]:
                rows.append((line.split, line.image, *box))
                ids.append(line.where)
            return
        if line.kind == "detection":
            problems.add(line.where, BOXES, None,
                         f"{BOXES} in a table of classification annotations; a dataset is "
                         f"for classification or for object detection, not both")
            return
        if line.kind is None:
            problems.add(line.where, None, None,
                         f"no label: the line has no {SINGLE} (or {MULTI}); give every "
                         f"image its label")
            return
        rows.append((line.split, line.image, line.labels))
        ids.append(line.where)

    def table():
        names = detection.COLUMNS if kind == "detection" else ["split", "image_uri", "label"]
        out = ("detection" if kind == "detection" else "jsonl",
               {c: [r[i] for r in rows] for i, c in enumerate(names)}, list(ids))
        rows.clear()
        ids.clear()
        return out

    for path, given in files:
        split = given or file_split(path)
        folder = images_dir if images_dir is not None else storage.parent(path)
        for where, text in _lines(path, problems):
            read_any = True
            line = parse(text, where, problems, unused)
            if line is None:
                continue
            line.image = storage.within(folder, line.image)
            if line.split is None:
                line.split = split
            elif split is not None and line.split != split:
                differ[(storage.basename(path), split)] += 1
            if kind is None:
                kind = line.kind
                if kind is None:  # no annotation yet: the table's kind is still open
                    pending.append(line)
                    continue
                for earlier in pending:
                    add(earlier)
                pending.clear()
            add(line)
            if size and len(rows) >= size:
                yield table()
    kind = kind or "classification"
    for earlier in pending:
        add(earlier)
    if rows:
        yield table()
    if not read_any:
        problems.add(None, None, None, f"no lines in {', '.join(p for p, _ in files)}; "
                                       f"give the files of a Vertex AI image dataset")
    if notes is not None:
        found = [unused.note()] + [
            f"{n} line(s) of {name} have an ml_use other than the file's split ({split}); "
            f"their ml_use gave their split" for (name, split), n in sorted(differ.items())]
        notes[:] = [n for n in found if n]
        for n in notes:
            log.info("%s", n)
