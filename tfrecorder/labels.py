"""Label vocabularies: values -> int64 ids, and the ``<feature>.labels.txt`` files.

A vocabulary is sorted, so the same labels always get the same ids whatever the row
order. Line ``i`` of a labels file is the name of id ``i`` (TFDS's ClassLabel format).
"""

from __future__ import annotations

import decimal
import math
import numbers
import re
from typing import Sequence

from tfrecorder import types
from tfrecorder.errors import ConfigError, Problems

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
    index = {name: i for i, name in enumerate(names)}
    ids = []
    for rid, v in zip(row_ids, values):
        if is_null(v):
            ids.append(None)
            continue
        name = name_of(v)
        i = index.get(name)
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
