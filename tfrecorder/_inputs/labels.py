"""Label vocabularies: values -> int64 ids, and the ``<feature>.labels.txt`` files.

A vocabulary is sorted, so the same labels always get the same ids whatever the row
order. Line ``i`` of a labels file is the name of id ``i`` (TFDS's ClassLabel format).
A table read in chunks is tallied first (``tally``: the distinct values of its label
and categorical columns, and which rows name the same image), so that its vocabularies
are decided over the whole table (``fix_vocabularies``) before any chunk is checked.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
import numbers
import re
from typing import Iterator, Mapping, Sequence

from tfrecorder import types
from tfrecorder._errors import ConfigError, Problems

#: Integer labels are class ids; larger ones would make a labels file of that many lines.
MAX_INTEGER_LABEL = 1_000_000

_WHOLE = re.compile(r"\s*\+?\d+(\.0*)?\s*")


def is_null(value) -> bool:
    if value.__class__ is str:  # the common case first: CSV fields are strings
        return not value.strip()
    if value is None:
        return True
    if isinstance(value, bytes):
        return not value.strip()
    if isinstance(value, (list, tuple)):
        return False
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, str):
        return value.strip() == ""
    if isinstance(value, int):
        return False
    try:
        import pandas as pd

        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def jsonable(value):
    """A table cell as a JSON value (None for nulls), for problems and the errors file."""
    if value.__class__ is str:
        return value if value.strip() else None
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if getattr(value, "ndim", 0):  # a NumPy array: a list cell read back from Parquet
        return [jsonable(v) for v in value.tolist()]
    if is_null(value):
        return None
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, bytes):
        return _text(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def as_whole_number(value) -> int | None:
    """``value`` as a non-negative int when it is one (3, "3", 3.0, "3.0"), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value) if value >= 0 else None
    if isinstance(value, decimal.Decimal):  # pandas.read_sql's NUMERIC columns
        return (int(value) if value.is_finite() and value >= 0
                and value == value.to_integral_value() else None)
    if isinstance(value, bytes):  # a binary column
        return as_whole_number(_text(value))
    if isinstance(value, numbers.Real):
        return int(value) if float(value).is_integer() and value >= 0 else None
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        return int(float(value)) if "." in value else int(value)
    return None


def identity(value):
    """What two label values are compared by to tell whether they are one label: "0",
    "00" and 0 are one (a whole number), "cat" and " cat" are one (a name)."""
    whole = as_whole_number(value)
    return name_of(value) if whole is None else whole


def name_of(value) -> str:
    """The text a label value is known by in a vocabulary (bytes as the text they hold:
    ``b"cat"`` is ``cat``)."""
    if isinstance(value, bytes):
        value = _text(value)
    return value.strip() if isinstance(value, str) else str(value)


def _text(value: bytes) -> str:
    """Bytes as UTF-8 text; other bytes as ``\\xNN`` escapes, so no two differ silently."""
    return value.decode("utf-8", "backslashreplace")


def vocabulary_of(values) -> list[str]:
    """The sorted, distinct names of the non-null ``values``."""
    return sorted({name_of(v) for v in values if not is_null(v)})


def integer_names(ids) -> list[str]:
    """Names for integer labels that pass through: "0" .. str(max id)."""
    top = max(ids, default=-1)
    return [str(i) for i in range(top + 1)]


def label_feature(features: dict, label_column: str | None) -> str | None:
    """The feature that holds a table's labels: its label column's, or a detection
    table's boxes' labels (``objects/label``)."""
    if label_column is None or label_column in features:
        return label_column
    return next((k for k, f in features.items() if f.role == "label"), label_column)


def parse_labels_file(text: str) -> list[str]:
    """The names in a labels file, one per line (a trailing newline is optional).

    Only ``\\n`` (or ``\\r\\n``) ends a line, as TFDS's ClassLabel reads the file: a
    name may hold the characters ``str.splitlines`` also breaks at (U+2028, U+0085, form
    feed, record separator), and the file a run writes is read back with its names whole.
    """
    return [line.strip() for line in text.split("\n") if line.strip()]


def format_labels_file(names: list[str]) -> str:
    for name in names:
        if "\n" in name or "\r" in name:
            raise ValueError(f"label {name!r} contains a line break; labels files hold one per line")
    return "".join(f"{n}\n" for n in names)


def label_ids(column: str, kind: types.ColumnType, values: Sequence, row_ids: Sequence,
              vocabulary: Sequence[str] | None, problems: Problems):
    """``(id per row or None, names)`` for the values of a label column.

    Whole numbers are ids as they are (unless ``kind`` is StringLabel or a vocabulary is
    given); anything else gets an id in ``vocabulary`` or, without one, in the sorted
    vocabulary of the values. Nulls and unknown labels are added to ``problems``.
    """
    for rid, v in zip(row_ids, values):
        if is_null(v):
            problems.add(rid, column, None, "null label; give every row a label")
    if vocabulary is None and not isinstance(kind, types.StringLabel):
        whole = [as_whole_number(v) for v in values]
        whole = [None if w is not None and w > MAX_INTEGER_LABEL else w for w in whole]
        integer = isinstance(kind, types.IntegerLabel) or all(
            w is not None for w, v in zip(whole, values) if not is_null(v))
        if integer:
            for rid, v, w in zip(row_ids, values, whole):
                if w is None and not is_null(v):
                    problems.add(
                        rid, column, jsonable(v),
                        f"not a whole number from 0 to {MAX_INTEGER_LABEL} (IntegerLabel); "
                        f"declare the column StringLabel to map any values through a vocabulary")
            return whole, integer_names([w for w in whole if w is not None])
    names = list(vocabulary) if vocabulary is not None else vocabulary_of(values)
    if vocabulary is not None and len(set(names)) != len(names):
        raise ConfigError(f"label_vocabulary lists a name twice: {names}")
    id_of = {name: i for i, name in enumerate(names)}
    ids = []
    for rid, v in zip(row_ids, values):
        if is_null(v):
            ids.append(None)
            continue
        name = name_of(v)
        i = id_of.get(name)
        if i is None:
            problems.add(rid, column, jsonable(v),
                         "label not in label_vocabulary; add it there or fix the row")
        elif has_line_break(name):
            problems.add(rid, column, jsonable(v), LINE_BREAK)
            i = None
        ids.append(i)
    return ids, names


#: Why a name with a line break cannot be a label or category.
LINE_BREAK = ("a line break (\\n or \\r) inside a label; a labels file holds one name per "
              "line, so remove it from the value")


def has_line_break(name: str) -> bool:
    return "\n" in name or "\r" in name


# --- the first pass over a whole table ------------------------------------------------------

@dataclasses.dataclass
class Tally:
    """What a first pass over a table's chunks learns about the whole table."""

    kind: str                  # the chunks' kind: "csv", "dataframe", "directory", "detection"
    distinct: dict[str, set]   # label or categorical column -> its distinct non-null values
    multi: bool                # some image has several labels (list cells, or rows)
    # numpy int array: per row, the first row naming its image; None when no image is
    # named on two rows and the table is not grouped (every row is its own first)
    firsts: object
    by_rows: bool = False      # multi only because rows repeat an image under another label
    # Where by_rows: the number of images, the positions of the rows whose image is
    # listed under several labels, and how many such images there are.
    images: int = 0
    repeated: object = None
    repeated_images: int = 0


def tally(chunks: Iterator, schema) -> Tally:
    """The distinct values of the label and categorical columns over every chunk (list
    cells taken apart), whether the table is multi-label, and, where some image is named
    on several rows, per row the position of the first row with the same image key (rows
    of one image become one record when grouped).

    The labels of an object-detection table (chunks of kind "detection") are those of
    its rows with a box; such a table is always grouped.

    What is kept per row until the end of the pass is a hash of its image key and a
    small int naming its label (12 bytes); when every image is named once, as in most
    tables, the check that says so is one sorted copy of the hashes, and nothing per
    row outlives the pass.
    """
    import numpy as np

    vocab_cols = [c for c, t in schema.items()
                  if t.role == "label" or isinstance(t, types.CategoricalInput)]
    label_col, image_col = schema.column("label"), schema.column("image")
    distinct: dict[str, set] = {c: set() for c in vocab_cols}
    kind, multi = "", False
    key_hashes, label_codes = [], []
    codes: dict = {}  # a label, as validation compares labels -> a small int
    for table in chunks:
        frame = table.frame
        kind = kind or table.kind
        detection = kind == "detection"
        multi = multi or detection
        if detection:
            distinct[label_col].update(_box_labels(frame))
        else:
            for col in vocab_cols:
                if col in frame.columns and _add_distinct(distinct[col], frame[col].tolist()):
                    multi = True
        if image_col in frame.columns:
            label_values = (frame[label_col].tolist() if label_col in frame.columns
                            else [None] * len(frame))
            keys, coded = _hashed_rows(frame[image_col].tolist(), label_values, codes)
            key_hashes.append(keys)
            label_codes.append(coded)
    if not key_hashes:
        return Tally(kind, distinct, multi, None)
    if not multi and _all_distinct(key_hashes):
        # No image on two rows: none with two labels, and nothing to group.
        return Tally(kind, distinct, False, None)
    keys = _joined(key_hashes, np.int64)
    firsts = _first_rows(keys)
    del keys
    if multi:
        return Tally(kind, distinct, multi, firsts)
    several = _two_labels(firsts, _joined(label_codes, np.int32))  # per first row
    if not several.any():
        return Tally(kind, distinct, False, firsts)
    # The table is multi-label only because rows repeat an image under another label:
    # which rows (the caller may refuse a table where they are few).
    images = int(np.count_nonzero(firsts == np.arange(len(firsts), dtype=firsts.dtype)))
    return Tally(kind, distinct, True, firsts, by_rows=True, images=images,
                 repeated=np.flatnonzero(several[firsts]),
                 repeated_images=int(np.count_nonzero(several)))


def _joined(arrays: list, dtype):
    """One array of the items of ``arrays`` in order; the list is emptied as it is
    copied, so that the pieces and the whole are never all held at once."""
    import numpy as np

    out = np.empty(sum(map(len, arrays)), dtype)
    at = 0
    arrays.reverse()
    while arrays:
        piece = arrays.pop()
        out[at:at + len(piece)] = piece
        at += len(piece)
    return out


def _all_distinct(arrays: list) -> bool:
    """True when no value occurs twice in ``arrays`` (a list of int arrays, left as it
    is: one sorted copy)."""
    import numpy as np

    values = np.concatenate(arrays)
    values.sort()
    return not np.any(values[1:] == values[:-1])


def _two_labels(firsts, codes):
    """Per position, True where it is the first row of an image (the rows with one value
    in ``firsts``) whose rows have different labels (``codes``, -1 where a row has none):
    the least and the greatest label of the image's labelled rows differ."""
    import numpy as np

    labelled = codes >= 0
    images, named = firsts[labelled], codes[labelled]
    del labelled
    least = np.full(len(firsts), np.iinfo(np.int32).max, np.int32)
    greatest = np.full(len(firsts), -1, np.int32)
    np.minimum.at(least, images, named)
    np.maximum.at(greatest, images, named)
    return (greatest >= 0) & (least != greatest)


def _first_rows(keys):
    """Per row, the position of the first row with the same key (int32 while the table
    has fewer than 2**31 rows)."""
    import numpy as np

    n = len(keys)
    int_type = np.int32 if n < 2**31 else np.int64
    if n == 0:
        return np.empty(0, int_type)
    order = np.argsort(keys, kind="stable").astype(int_type)  # a key's rows, first row first
    ordered = keys[order]
    new = np.empty(n, bool)  # where a key's rows begin in ``order``
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    del ordered
    # Per position in ``order``, the position where its key's rows begin.
    head = np.where(new, np.arange(n, dtype=int_type), int_type(0))
    np.maximum.accumulate(head, out=head)
    firsts = np.empty(n, int_type)
    firsts[order] = order[head]
    return firsts


def _add_distinct(found: set, values: list) -> bool:
    """Adds the non-null values of a column to ``found``, the items of list cells one by
    one; True when the column holds list cells."""
    try:
        cells = set(values)
    except TypeError:  # unhashable cells: lists, arrays
        cells = None
    if cells is not None and not any(isinstance(v, tuple) for v in cells):
        found.update(v for v in cells if not is_null(v))
        return False
    lists = False
    for v in (values if cells is None else cells):
        items = as_list(v)
        if items is not None:
            lists = True
            found.update(x for x in items if not is_null(x))
        elif not is_null(v):
            found.add(v)
    return lists


def as_list(value) -> list | None:
    """The items of a list cell (a list, tuple or array of labels), or None for a scalar."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, str) and getattr(value, "ndim", 0):
        return value.tolist()
    return None


def _box_labels(frame) -> set:
    """The distinct names of the labels of detection rows that have a box."""
    coordinates = [frame[c].tolist() for c in ("x_min", "y_min", "x_max", "y_max")]
    return {name_of(label) for label, *box in zip(frame["label"].tolist(), *coordinates)
            if not is_null(label) and any(b is not None for b in box)}


def _hashed_rows(keys: list, values: list, codes: dict):
    """Per row, a hash of its image key (as written, blanks stripped; 0 for none), and
    a small int naming its label (int32; labels numbered in ``codes``, shared by every
    chunk, as validation compares them: "0", "00" and 0 are one), -1 where the row has
    no image key or no one label: a null, or a list cell, which makes a table
    multi-label by itself."""
    import numpy as np

    def code(v):
        if is_null(v) or as_list(v) is not None:
            return -1
        return codes.setdefault(identity(v), len(codes))

    try:
        found = {v: code(v) for v in set(values)}
        coded = list(map(found.__getitem__, values))
    except TypeError:  # list cells
        coded = list(map(code, values))
    if set(map(type, keys)) == {str}:
        stripped = list(map(str.strip, keys))
        key_array = np.fromiter(map(hash, stripped), np.int64, len(stripped))
    else:
        stripped = [k.strip() if k.__class__ is str else None for k in keys]
        key_array = np.fromiter((0 if k is None else hash(k) for k in stripped), np.int64,
                                len(stripped))
    code_array = np.fromiter(coded, np.int32, len(coded))
    if "" in stripped or None in stripped:
        code_array[[i for i, k in enumerate(stripped) if not k]] = -1
    return key_array, code_array


@dataclasses.dataclass(frozen=True)
class Fixed:
    """A column's vocabulary decided over the whole table: its names (line i = id i) and
    each distinct value's id, or the reason the value cannot be one."""

    names: list[str]
    ids: dict   # value -> int id, or str reason


def fix_vocabularies(schema, distinct: Mapping[str, set],
                     label_vocabulary: Sequence[str] | None) -> dict[str, Fixed]:
    """The vocabularies of the label and categorical columns from their distinct
    non-null values, decided exactly as they are for a whole table."""
    out = {}
    for col, values in distinct.items():
        kind = schema[col]
        values = sorted(values, key=lambda v: (type(v).__name__, str(v)))
        scratch = Problems(limit=len(values) + 1)
        if kind.role == "label":
            ids, names = label_ids(col, kind, values, range(len(values)),
                                   label_vocabulary, scratch)
            reasons = {p.row: p.reason for p in scratch}
            for i, v in enumerate(values):
                if i not in reasons and has_line_break(name_of(v)):
                    reasons[i] = LINE_BREAK
            out[col] = Fixed(names, {v: reasons.get(i, ids[i]) for i, v in enumerate(values)})
        else:
            names = vocabulary_of(values)
            id_of = {n: i for i, n in enumerate(names)}
            out[col] = Fixed(names, {v: id_of[name_of(v)] for v in values})
    return out
