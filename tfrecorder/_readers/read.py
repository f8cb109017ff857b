"""Records back to a table: ``read(tfrecord_dir)`` gives one pandas row per record, the
input table less its quarantined rows, in a form that converts again to the same
records. Records are read by ``access.Reader``, so no TensorFlow is imported::

    df = read("out/")                                   # every split, in split order
    df = read("out/", split="test", images=True)        # one split, with the image bytes
    for frame in read("out/", chunksize=10_000):        # frames of at most 10,000 rows
        ...

How each feature becomes a column is decided once per directory from its manifest
(``_columns``); each batch of records is then parsed and turned into cells column by
column.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

import numpy as np

from tfrecorder import _deprecation as deprecation
from tfrecorder._folder import example
from tfrecorder._folder import layout, stored_keys
from tfrecorder import access
from tfrecorder._folder import view
from tfrecorder._errors import ConfigError, CorruptRecordError
from tfrecorder._inputs.detection import BOX_FLAGS
from tfrecorder._inputs.keypoints import KEYPOINTS, NUM_KEYPOINTS
from tfrecorder._inputs.masks import MASK
from tfrecorder._folder.layout import FeatureSpec
from tfrecorder._folder.manifest import Manifest

#: The columns ``read`` makes itself (any other is a feature's, under its own key).
SPLIT = "split"
IMAGE_URI = layout.IMAGE_URI
IMAGE = layout.IMAGE
BOXES = "boxes"
#: Records read from the shards at a time: bounds the raw bytes (images included) held.
BATCH = 256

#: A record parsed by ``example.parse``: key -> (dtype, values).
Parsed = dict


@dataclasses.dataclass(frozen=True)
class _Column:
    """One column of the table: its name, its cells from parsed records, its dtype."""

    name: str
    cells: Callable[[list[Parsed]], list] | None  # None: the split's name
    dtype: str | None = None    # a pandas dtype; None lets pandas choose (text: its str)


@deprecation.renamed(output_dir="tfrecord_dir")
def read(tfrecord_dir: str, split: str | None = None, images: bool = False, *,
         chunksize: int | None = None, version: int | None = None,
         cache_dir: str | None = None, cache_limit: int | str | None = None):
    """The records of the conversion in ``tfrecord_dir`` as a pandas DataFrame, one row
    per record: ``split``, ``image_uri``, the label column (its name: ``label`` for image
    tables) holding the label name (a list of names when multi-label), ``boxes`` for
    object detection (a list of ``(label, x_min, y_min, x_max, y_max)``, relative), and
    every other feature under its column name; ``images=True`` adds ``image``, the
    stored bytes. Records come split after split (``split`` names one), each split in
    file order. ``chunksize=N`` returns an iterator of DataFrames of at most N rows (one
    split each) instead, read N records at a time. ``version=k`` reads version ``k`` of
    an updated folder (None: the latest): its live records, with its label names.
    From ``gs://``, shards are read through the shard cache in ``cache_dir`` within
    ``cache_limit`` (0: no cache; docs/bucket.md).

    ConfigError for an unknown split, gzip shards or a bad ``chunksize``;
    IncompleteOutputError when the directory holds no finished conversion;
    OutputChangedError when another conversion replaces it while it is read.
    """
    access._refuse_a_file(str(tfrecord_dir))  # the table given for the folder: as Reader says
    return read_version(view.open_version(str(tfrecord_dir), version), split, images,
                        chunksize=chunksize, cache_dir=cache_dir, cache_limit=cache_limit)


def read_version(opened: view.Version, split: str | None = None, images: bool = False, *,
                 chunksize: int | None = None, cache_dir: str | None = None,
                 cache_limit: int | str | None = None):
    """``read`` of the version ``opened`` (``Folder.read``): every split's reader is
    made from that one opening, so all read one conversion."""
    if chunksize is not None and (isinstance(chunksize, (bool, np.bool_)) or not isinstance(
            chunksize, (int, np.integer)) or chunksize < 1):
        raise ConfigError(f"chunksize={chunksize!r}; give a whole number of rows, 1 or more, "
                          f"or None for one DataFrame")
    names = [split] if split is not None else list(opened.manifest.splits)
    readers = [access.Reader.of(opened.view(name), cache_dir=cache_dir,
                                cache_limit=cache_limit) for name in names]
    columns = _columns(readers[0].manifest, bool(images)) if readers else []
    skip = frozenset() if images else frozenset({layout.IMAGE})
    if chunksize is not None:
        return _chunks(readers, columns, skip, int(chunksize))
    cells: dict[str, list] = {c.name: [] for c in columns}
    try:
        for reader in readers:
            for start in range(0, len(reader), BATCH):
                for name, values in _cells(reader, start, start + BATCH, columns, skip).items():
                    cells[name] += values
    finally:
        for reader in readers:
            reader.close()
    return _frame(cells, columns)


def _chunks(readers: list[access.Reader], columns: list[_Column], skip: frozenset,
            size: int) -> Iterator:
    try:
        for reader in readers:
            for start in range(0, len(reader), size):
                stop = min(start + size, len(reader))
                cells: dict[str, list] = {c.name: [] for c in columns}
                for at in range(start, stop, BATCH):
                    got = _cells(reader, at, min(at + BATCH, stop), columns, skip)
                    for name, values in got.items():
                        cells[name] += values
                yield _frame(cells, columns)
    finally:
        for reader in readers:
            reader.close()


def _cells(reader: access.Reader, start: int, stop: int, columns: list[_Column],
           skip: frozenset) -> dict[str, list]:
    """The cells of records ``start`` to ``stop`` (exclusive) of ``reader``'s split."""
    stop = min(stop, len(reader))
    manifest = reader.manifest
    parsed = []
    for i, raw in zip(range(start, stop), reader.records(range(start, stop))):
        try:
            parsed.append(stored_keys.parse(raw, manifest, skip))
        except CorruptRecordError as e:  # a feature of another kind than declared
            raise CorruptRecordError(f"{reader.view.where(i)}: {e}") from None
    try:
        return {c.name: [reader.split] * len(parsed) if c.cells is None else c.cells(parsed)
                for c in columns}
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{reader.output_dir}, split {reader.split!r}, one of records "
                                 f"{start} to {stop - 1}: {e}") from None


def _frame(cells: dict[str, list], columns: list[_Column]):
    import pandas as pd

    return pd.DataFrame({c.name: pd.Series(cells[c.name], dtype=c.dtype) for c in columns})


# --- columns from the manifest ------------------------------------------------------------


def _columns(m: Manifest, images: bool) -> list[_Column]:
    """How each feature of ``m`` becomes a column, in the order: split, image_uri, the
    label (or boxes), the other features by name, the image."""
    features = m.features
    out = []
    if SPLIT not in features:  # else a column of a table without a SplitKey: all train
        out.append(_Column(SPLIT, None))
    if m.image_key is not None:
        # Written before records held their source: the base name is what is left.
        uri = IMAGE_URI if IMAGE_URI in features else layout.IMAGE_NAME
        out.append(_Column(uri, _scalar(uri, _path)))
    bbox = next((k for k, f in features.items() if f.role == "bbox"), None)
    label = m.label_key
    if bbox is not None and label is not None:
        out.append(_Column(BOXES, _boxes(bbox, label, _names(m.vocabularies.get(label, [])))))
    elif label is not None:
        out.append(_label_column(label, features[label], m.vocabularies.get(label)))
    for key, spec in features.items():
        if spec.role == "feature" and bbox is not None and key in BOX_FLAGS.values():
            # one value per box (COCO's iscrowd), in the order of the boxes
            out.append(_Column(key, _lists(key, int), "object"))
        elif spec.role == "feature" and bbox is not None and key in _PER_BOX:
            # masks (PNG bytes, one per box) and keypoints: a list per record, even of
            # one value, never decoded as text
            out.append(_Column(key, _lists(key, _PER_BOX[key]), "object"))
        elif spec.role == "feature":
            out.append(_feature_column(key, spec, m.vocabularies.get(key)))
        elif spec.role == "mask":  # a segmentation mask: its PNG's bytes, never text
            out.append(_Column(key, _scalar(key, bytes), "object"))
    if images and m.image_key is not None:
        out.append(_Column(IMAGE, _scalar(m.image_key, lambda v: v)))
    return out


#: Per-box geometry features and how each value reads back: a mask's PNG as bytes, a
#: keypoint's x, y or v as the shortest decimal of its 32-bit float.
_PER_BOX = {MASK: bytes, KEYPOINTS: lambda v: float(str(np.float32(v))), NUM_KEYPOINTS: int}


def _names(vocabulary: list[str] | None) -> list | None:
    """What label id ``i`` reads back as: ``vocabulary[i]``, or the int ``i`` when the
    names are the ids themselves (``0``, ``1``, ...: whole-number labels pass through
    a conversion as ids, and convert again to the same ids)."""
    if not vocabulary:
        return None
    if vocabulary == [str(i) for i in range(len(vocabulary))]:
        return list(range(len(vocabulary)))
    return list(vocabulary)


def _label_column(key: str, spec: FeatureSpec, vocabulary) -> _Column:
    names = _names(vocabulary)
    if spec.shape == []:
        return _Column(key, _scalar(key, lambda i: _name(names, i, key)),
                       "int64" if names is None or isinstance(names[0], int) else None)
    # multi-label: a list of names, in id order, as the conversion sorted them
    return _Column(key, _lists(key, lambda i: _name(names, i, key)), "object")


def _feature_column(key: str, spec: FeatureSpec, vocabulary) -> _Column:
    if vocabulary is not None:  # CategoricalInput: the category's name
        names = list(vocabulary)
        return _Column(key, _optional(key, lambda i: _name(names, i, key), spec, None))
    if spec.dtype == example.FLOAT:
        return _Column(key, _floats(key, spec), "float64")
    if spec.dtype == example.INT64:
        return _Column(key, _optional(key, int, spec, None), "Int64" if spec.varlen else "int64")
    return _Column(key, _optional(key, _text, spec, None))


def _scalar(key: str, convert) -> Callable[[list[Parsed]], list]:
    def cells(parsed):
        try:
            return [convert(p[key][1][0]) for p in parsed]
        except (KeyError, IndexError):
            raise CorruptRecordError(f"a record without a value of {key!r}, which its "
                                     f"manifest declares for every record") from None
    return cells


def _optional(key: str, convert, spec: FeatureSpec, missing) -> Callable:
    """A column of one value per record, or of at most one when the feature is optional
    (variable length: no value reads back as ``missing``)."""
    if not spec.varlen:
        return _scalar(key, convert)

    def cells(parsed):
        out = []
        for p in parsed:
            values = p.get(key, (None, []))[1]
            out.append(convert(values[0]) if len(values) == 1 else
                       missing if not values else [convert(v) for v in values])
        return out
    return cells


def _lists(key: str, convert) -> Callable:
    return lambda parsed: [[convert(v) for v in p.get(key, (None, []))[1]] for p in parsed]


def _floats(key: str, spec: FeatureSpec) -> Callable:
    """Float cells as the shortest decimal of the stored 32-bit value (``0.1``, not
    ``0.10000000149``): the number the table held whenever it had 7 significant digits
    or fewer, and always one that is stored as the same 32-bit value again."""
    values = _optional(key, float, spec, float("nan"))
    return lambda parsed: _shortest(values(parsed))


def _shortest(values: list) -> list[float]:
    if not values:
        return []
    return np.asarray(values, np.float32).astype(str).astype(np.float64).tolist()


def _boxes(bbox: str, label: str, names) -> Callable:
    """``[(label, x_min, y_min, x_max, y_max), ...]`` of each record, from its
    ``objects/bbox`` (``y_min, x_min, y_max, x_max`` per box) and ``objects/label``."""
    def cells(parsed):
        out = []
        for p in parsed:
            coords = _shortest(p.get(bbox, (None, []))[1])
            ids = p.get(label, (None, []))[1]
            if len(coords) != 4 * len(ids):
                raise CorruptRecordError(
                    f"a record with {len(ids)} {label} values and {len(coords)} {bbox} "
                    f"coordinates, where 4 per box are written")
            boxes = []
            for n, i in enumerate(ids):
                y_min, x_min, y_max, x_max = coords[4 * n:4 * n + 4]
                boxes.append((_name(names, i, label), x_min, y_min, x_max, y_max))
            out.append(boxes)
        return out
    return cells


def _name(names, i: int, key: str):
    if names is None:
        return i
    if not 0 <= i < len(names):
        raise CorruptRecordError(f"a record with {key} id {i}, which its labels file "
                                 f"{layout.labels_file(key)} does not have ({len(names)} names)")
    return names[i]


def _text(value: bytes):
    """Stored text as str; bytes that are not UTF-8 (a StringInput column given such
    bytes) stay bytes, and convert again to the same bytes."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def _path(value: bytes) -> str:
    """A stored image path as the str it was (a local file name that is not UTF-8 was
    stored as its bytes: surrogates again, as ``os.listdir`` gives it)."""
    return value.decode("utf-8", "surrogateescape")
