"""A chunk of a table checked against a schema, before any pipeline exists.

``check_columns`` checks every row of a chunk, with the vocabularies decided over the
whole table beforehand (``labels.fix_vocabularies``), and reports every problem at once
in one SchemaError. What it returns, column by column, is everything the writers need:
per row the split, the resolved image path and the non-image features already encoded.
``spill`` runs it over every chunk; object-detection chunks are checked by
``detection.check`` instead.
"""

from __future__ import annotations

import dataclasses
import decimal
import numbers
import operator
import re
from typing import Mapping, Sequence

from tfrecorder import _storage as storage, types
from tfrecorder._folder import example
from tfrecorder._inputs import labels, splits
from tfrecorder._folder import split_names
from tfrecorder._folder import layout
from tfrecorder._errors import Problem, Problems, SchemaError
from tfrecorder._folder.layout import FeatureSpec
from tfrecorder._inputs.schema import Schema

_INT = re.compile(r"\s*[+-]?\d+\s*")


@dataclasses.dataclass
class _Columns:
    """The table taken apart column by column, on its way to Rows."""

    row_ids: Sequence
    names: tuple[str, ...]                   # schema columns: the order of Row.values
    raw: dict[str, list]                     # column -> its values
    splits: list[str | None]                 # canonical split per row; None: unassigned
    uris: list[str | None]                   # resolved image path per row
    keys: list[str]                          # image_uri as written: groups
    labels: list[tuple[int, ...]]            # label ids per row
    # feature -> its encoded value in every row (None where the row has a problem)
    encoded: dict[str, list] = dataclasses.field(default_factory=dict)
    features: dict[str, FeatureSpec] = dataclasses.field(default_factory=dict)
    vocabularies: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    plain: bool = False                      # every cell is None or non-blank text

    def assign_splits(self, fractions: Mapping[str, float],
                      stored: splits.StoredSplit | None = None) -> None:
        """A split for every unassigned row: the one ``stored`` holds its image in, else
        one from where its image is (``splits.hashed_name``), else from its row id."""
        if None in self.splits:
            self.splits = [
                s or (u is not None and stored is not None and stored(k, u))
                or splits.assign(splits.hashed_name(u) if u is not None else str(rid),
                                 fractions)
                for s, k, u, rid in zip(self.splits, self.keys, self.uris, self.row_ids)]

    def value_columns(self) -> list[list]:
        """Per column, every row's value as ``values(i)`` gives it; a column of plain
        text (None or non-blank strings) is the column itself."""
        out = []
        for c in self.names:
            raw = self.raw[c]
            if self.plain or all(v is None or (v.__class__ is str and v and not v.isspace())
                                 for v in raw):
                out.append(raw)
            else:
                out.append([labels.jsonable(v) for v in raw])
        return out

def check_columns(frame, row_ids: Sequence, schema: Schema, *, base_dir: str | None,
                  split_fractions: Mapping[str, float], fixed: Mapping[str, labels.Fixed],
                  multi: bool = False, stored: splits.StoredSplit | None = None) -> _Columns:
    """Checks a chunk of a table whose label and categorical columns all have a
    vocabulary in ``fixed``, left as columns. ``multi``: the label column may hold lists
    and one image several rows; such rows keep no split of their own (the image's rows,
    grouped, decide it). ``stored``: where an update writes, the splits its folder holds
    images in, which unassigned rows keep. Raises SchemaError listing every problem
    found, with row, column, value and reason."""
    cols = _check(frame, row_ids, schema, base_dir=base_dir, fixed=fixed, multi=multi)
    fractions = splits.check_fractions(split_fractions)
    if not multi:
        cols.assign_splits(fractions, stored)
    return cols


#: Names tables often give the columns of each role, most likely first.
_ROLE_NAMES = {
    "image": ("path", "image", "image_path", "filepath", "file_path", "filename", "file",
              "uri", "url", "image_url", "gcs_path", "img"),
    "label": ("class", "category", "class_name", "label_name", "labels", "target", "y"),
    "split": ("set", "subset", "fold", "partition", "ml_use", "data_split"),
}


def _missing_columns(missing: list[str], have: list, schema: Schema) -> list[Problem]:
    """One Problem per missing column: the columns the table has, and for each missing
    one the table's column that most likely means it."""
    import difflib

    listed = ", ".join(repr(str(c)) for c in have) or "no columns"
    taken = {c.lower() for c in schema}
    spare = [str(c) for c in have if str(c).strip().lower() not in taken]
    renames = {}
    for col in missing:
        role = schema[col].role
        known = [c for n in _ROLE_NAMES.get(role, ()) for c in spare if c.strip().lower() == n]
        close = known or difflib.get_close_matches(col, spare, n=1, cutoff=0.5)
        if close and close[0] not in renames:
            renames[close[0]] = col
    problems = []
    for col in missing:
        guess = next((have_col for have_col, want in renames.items() if want == col), None)
        hint = (f"; did you mean {guess!r}?" if guess is not None else
                f"; add a {col!r} column")
        problems.append(Problem(None, col, None,
                                f"missing column; the table's columns are {listed}{hint}"))
    if renames:
        problems.append(Problem(None, None, None, (
            f"rename the columns to the schema's names ({', '.join(map(repr, schema))}): "
            f"df.rename(columns={renames!r}) for a DataFrame, or the CSV's header line")))
    return problems


def _check(frame, row_ids: Sequence, schema: Schema, *, base_dir, fixed, multi) -> _Columns:
    """Every column checked and encoded. Raises SchemaError."""
    n = len(frame)
    if n == 0:
        raise SchemaError([Problem(None, None, None, "the table has no rows; give it at least one")])
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        have = getattr(frame, "given", None) or getattr(frame, "attrs", {}).get(
            "given_columns") or list(frame.columns)
        raise SchemaError(_missing_columns(missing, have, schema))
    problems = Problems()
    names = tuple(schema)
    cols = _Columns(row_ids, names, {c: frame[c].tolist() for c in names}, [None] * n,
                    [None] * n, [""] * n, [()] * n, plain=getattr(frame, "plain", False))
    _check_splits(cols, schema.column("split"), problems)
    image_col = schema.column("image")
    if image_col is not None:
        _check_uris(cols, image_col, base_dir, problems)
        cols.features.update(layout.image_feature_specs())
    for col, kind in schema.items():
        if kind.role == "label" and multi:
            _encode_fixed_lists(cols, col, fixed[col], problems)
        elif kind.role == "label":
            _encode_fixed_labels(cols, col, fixed[col], problems)
        elif kind.role == "mask":
            _check_masks(cols, col, base_dir, problems, fixed.get(col))
        elif kind.role not in ("split", "image"):
            encode_column(cols, col, kind, problems, fixed.get(col))
    problems.raise_if_any()
    return cols


def _check_splits(cols: _Columns, split_col: str | None, problems: Problems) -> None:
    if split_col is None:
        cols.splits = ["train"] * len(cols.row_ids)
        return
    values = cols.raw[split_col]
    known: dict = {}  # a table has a handful of distinct split values
    try:
        for v in set(values):
            known[v] = splits.canonical(v)
    except (TypeError, split_names.UnknownSplit):
        known = {}  # unhashable or unknown values: row by row, naming each
    else:
        cols.splits = list(map(known.__getitem__, values))
        return
    for i, (rid, v) in enumerate(zip(cols.row_ids, values)):
        try:
            found = known.get(v, known) if v.__class__ is str else known
            if found is known:
                found = splits.canonical(v)
                if v.__class__ is str:
                    known[v] = found
            cols.splits[i] = found
        except split_names.UnknownSplit as e:
            problems.add(rid, split_col, v, str(e))


_LAST = operator.itemgetter(-1)


def _check_uris(cols: _Columns, image_col: str, base_dir: str | None,
                problems: Problems) -> None:
    values = cols.raw[image_col]
    if storage.all_on_gcs(values) and not any(map(str.isspace, map(_LAST, values))):
        cols.keys = cols.uris = values  # the common case at scale: nothing to resolve
        return
    resolved = (storage.resolve_all(values, base_dir)  # plain relative paths
                if set(map(type, values)) == {str} else None)
    if resolved is not None:
        cols.keys, cols.uris = values, resolved
        return
    for i, (rid, v) in enumerate(zip(cols.row_ids, values)):
        if v.__class__ is str and v.startswith("gs://") and not v[-1:].isspace():
            cols.keys[i] = cols.uris[i] = v  # the common case at scale: nothing to resolve
            continue
        path = _path(rid, image_col, v, "image", problems)
        if path is not None:
            cols.keys[i] = path
            cols.uris[i] = storage.resolve(path, base_dir)


#: What a path column's cells point at: the word of its messages, and the file.
_POINTS_AT = {"image": "its image", "mask": "its mask PNG"}


def _path(rid, col: str, v, kind: str, problems: Problems) -> str | None:
    """The path or gs:// URI a cell of ``col`` gives (stripped), or None with a problem
    naming the row, the value and the fix (``kind``: "image" or "mask")."""
    if labels.is_null(v) or not isinstance(v, str):
        reason = (f"empty {kind} URI; give every row the path or gs:// URI of "
                  f"{_POINTS_AT[kind]}" if labels.is_null(v)
                  else "not a string; give a path or gs:// URI")
        problems.add(rid, col, labels.jsonable(v), reason)
        return None
    reason = storage.check_scheme(v.strip())
    if reason is not None:
        problems.add(rid, col, v, reason)
        return None
    return v.strip()


def _check_masks(cols: _Columns, col: str, base_dir: str | None, problems: Problems,
                 fixed: labels.Fixed | None) -> None:
    """Each row's mask path, resolved as image paths are, in ``layout.SEGMENTATION_MASK``
    until the writer reads the file there and stores its bytes instead; ``fixed``: the
    class names of the mask's ids (``label_vocabulary``), where given."""
    paths = cols.encoded[layout.SEGMENTATION_MASK] = [None] * len(cols.row_ids)
    for i, (rid, v) in enumerate(zip(cols.row_ids, cols.raw[col])):
        path = _path(rid, col, v, "mask", problems)
        if path is not None:
            paths[i] = storage.resolve(path, base_dir)
    cols.features[layout.SEGMENTATION_MASK] = FeatureSpec(example.BYTES, [], "mask")
    cols.features[layout.SEGMENTATION_MASK_FORMAT] = FeatureSpec(example.BYTES, [], "feature")
    if fixed is not None:
        cols.vocabularies[layout.SEGMENTATION_MASK] = list(fixed.names)


def _encode_fixed_labels(cols: _Columns, col: str, fixed: labels.Fixed,
                         problems: Problems) -> None:
    """Label ids from a vocabulary fixed over the whole table (single-label only)."""
    ids, encoded = fixed.ids, {}
    for value, found in ids.items():
        if isinstance(found, int):
            encoded[value] = ((found,), example.int64_feature([found]))
    values = cols.raw[col]
    try:
        hits = list(map(encoded.get, values))
    except TypeError:  # unhashable cells: row by row
        hits = [None]
    cols.vocabularies[col] = fixed.names
    cols.features[col] = FeatureSpec(example.INT64, [], "label")
    if None not in hits:  # every value has an id
        cols.labels = list(map(operator.itemgetter(0), hits))
        cols.encoded[col] = list(map(operator.itemgetter(1), hits))
        return
    column = cols.encoded[col] = [None] * len(values)
    for i, (rid, v) in enumerate(zip(cols.row_ids, values)):
        hit = encoded.get(v)
        if hit is not None:
            cols.labels[i] = hit[0]
            column[i] = hit[1]
        elif labels.is_null(v):
            problems.add(rid, col, None, "null label; give every row a label")
        else:
            found = ids.get(v)
            problems.add(rid, col, labels.jsonable(v), found if isinstance(found, str) else
                         "label not in label_vocabulary; add it there or fix the row")



def _encode_fixed_lists(cols: _Columns, col: str, fixed: labels.Fixed,
                        problems: Problems) -> None:
    """Label ids of a multi-label column: each cell a label or a list of them (nulls in
    a list left out), its ids sorted and distinct."""
    ids, cache = fixed.ids, {}
    column = cols.encoded[col] = [None] * len(cols.row_ids)
    empty = []
    for i, (rid, v) in enumerate(zip(cols.row_ids, cols.raw[col])):
        items = labels.as_list(v)
        if items is None:
            items = [] if labels.is_null(v) else [v]
        found = set()
        for x in items:
            if labels.is_null(x):
                continue
            hit = ids.get(x)
            if isinstance(hit, int):
                found.add(hit)
            else:
                problems.add(rid, col, labels.jsonable(x), hit if isinstance(hit, str) else
                             "label not in label_vocabulary; add it there or fix the row")
        if not any(not labels.is_null(x) for x in items):
            empty.append(rid)
        key = tuple(sorted(found))
        if key not in cache:
            cache[key] = example.int64_feature(key)
        cols.labels[i] = key
        column[i] = cache[key]
    for rid in empty:
        problems.add(rid, col, None, "no label; give every row a label")
    cols.vocabularies[col] = fixed.names
    cols.features[col] = FeatureSpec(example.INT64, None, "label")


def encode_column(cols: _Columns, col: str, kind: types.ColumnType, problems: Problems,
                  fixed: labels.Fixed | None = None) -> None:
    """Encodes a plain feature column into ``cols.encoded``; problems are collected."""
    dtype = kind.dtype
    values = cols.raw[col]
    if isinstance(kind, types.CategoricalInput):
        names = fixed.names if fixed is not None else labels.vocabulary_of(values)
        for rid, v in zip(cols.row_ids, values):
            if not labels.is_null(v) and labels.has_line_break(labels.name_of(v)):
                problems.add(rid, col, labels.jsonable(v), labels.LINE_BREAK)
        cols.vocabularies[col] = names
        id_of = {name: i for i, name in enumerate(names)}
        convert = lambda v: id_of[labels.name_of(v)]  # noqa: E731
    elif dtype == example.INT64:
        convert = _to_int
    elif dtype == example.FLOAT:
        convert = _to_float
    else:
        convert = lambda v: v if isinstance(v, (str, bytes)) else str(v)  # noqa: E731
    varlen = kind.optional and kind.default is None  # a missing value is an empty list
    cols.features[col] = FeatureSpec(dtype, None if varlen else [], "feature")
    encoded = cols.encoded[col] = [None] * len(values)
    for i, (rid, v) in enumerate(zip(cols.row_ids, values)):
        if labels.is_null(v):
            if kind.default is not None:
                v = kind.default
            elif kind.optional:
                encoded[i] = example.feature(dtype, [])
                continue
            else:
                problems.add(rid, col, None, "null value; fill it in or declare the column optional")
                continue
        try:
            encoded[i] = example.feature(dtype, [convert(v)])
        except (ValueError, OverflowError) as e:
            problems.add(rid, col, labels.jsonable(v), str(e))


def comparable(dtype: str, value):
    """A value of a plain column of ``dtype`` as its record holds it, for telling whether
    a stored row changed: 3, "3" and 3.0 (pandas' ints beside a null) are the int 3 in
    an IntegerInput column, "0.5" and 0.5 the float in a FloatInput one; text as it is,
    other values as the text their record holds. A value that does not convert (a
    category's name, a null) stays as it is."""
    if value is None or isinstance(value, str) and dtype not in (example.INT64, example.FLOAT):
        return value
    try:
        if dtype == example.INT64:
            return _to_int(value)
        if dtype == example.FLOAT:
            return _to_float(value)
    except (ValueError, OverflowError):
        return value
    return value if isinstance(value, (list, dict)) else str(value)


def _to_float(v) -> float:
    if isinstance(v, bool):
        raise ValueError("not a number (FloatInput)")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError("not a number (FloatInput)") from None


def _to_int(v) -> int:
    """An int for IntegerInput; whole floats (pandas' ints with nulls) are accepted."""
    if isinstance(v, bool):
        raise ValueError("a boolean in an IntegerInput column; use 0 or 1")
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, (numbers.Real, decimal.Decimal)):
        if float(v).is_integer():
            return int(v)
        raise ValueError("not a whole number (IntegerInput); declare the column FloatInput")
    if isinstance(v, str) and _INT.fullmatch(v):
        return int(v)
    raise ValueError("not a whole number (IntegerInput)")
