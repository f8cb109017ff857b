"""A CSV file (local or ``gs://``) read as Tables, streamed chunk by chunk.

CSV files follow AutoML Vision: with or without a header. Without one, fields are taken
by position in schema order; for the default image schema a 2-field row
``image_uri,label`` is an UNASSIGNED row; an object-detection CSV is told by its first
rows. Relative image paths resolve against the CSV's own folder (or, when none is found
there, the working directory). Its own module: the header rules, the record stream and
its encoding errors concern CSV files alone.
"""

from __future__ import annotations

import csv
import io
import logging
import operator
import os
import re
from typing import Iterator

from tfrecorder import _storage as storage
from tfrecorder._inputs import detection
from tfrecorder._folder import split_names
from tfrecorder._errors import ConfigError, Problem, Problems, SchemaError
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA, Schema
from tfrecorder._inputs.table import ColumnFrame, Table, match_columns

log = logging.getLogger(__name__)


def _is_header(fields: list, schema: Schema) -> bool:
    names = {c.lower() for c in schema}
    return any((f or "").strip().lower() in names for f in fields)


_WORD = re.compile(r"[A-Za-z_][\w ]*")


def _looks_like_header(fields: list, schema: Schema) -> bool:
    """A first row of plain words whose split field is not a split: a foreign header."""
    split_col = schema.column("split")
    if split_col is None or not all(f and _WORD.fullmatch(f.strip()) for f in fields):
        return False
    position = list(schema).index(split_col)
    first = (fields[position] if len(fields) == len(schema) else fields[0]).strip().lower()
    return first not in split_names.ALIASES


def from_csv(path: str, schema: Schema = IMAGE_CSV_SCHEMA, header="infer", names=None) -> Table:
    """A CSV file as a Table; row ids are the line numbers where records start.

    ``header="infer"`` recognises a header by its names; ``None`` reads every line as
    data; a number ``k`` takes the k-th non-empty line as the header (lines before it
    are skipped). ``names`` gives the column names, by position. As in pandas.
    """
    problems = Problems()
    (table,) = csv_chunks(path, schema, header, names, None, problems)
    problems.raise_if_any()
    return table


def csv_chunks(path: str, schema: Schema, header, names, size: int | None,
               problems: Problems) -> Iterator[Table]:
    """The CSV at ``path`` as Tables of at most ``size`` rows (one Table when None), read
    as a stream: only one chunk's records are in memory at a time.

    Problems of the rows (ragged rows) go to ``problems``, for the caller to raise once
    every chunk is read; problems of the whole file raise at once. The chunks of an
    object-detection CSV (told by its first rows) are of kind "detection".
    """
    import itertools

    if header != "infer" and header is not None and (
            isinstance(header, bool) or not isinstance(header, int) or header < 0):
        raise ConfigError(f"header={header!r}; use 'infer', None or a line number (0 for "
                          f"the first line)")
    records = _csv_records(path)
    first = list(itertools.islice(records, (header if isinstance(header, int) else 0) + 1))
    if not first:
        raise SchemaError([Problem(None, None, None, f"{path} has no rows")])
    if header not in ("infer", None):
        if header >= len(first):
            raise SchemaError([Problem(None, None, None, f"header={header}, but {path} has "
                                                         f"{len(first)} lines")])
        header_names = names or [(h or "").strip() for h in first[header][1]]
        first = []
    elif names is not None or (header == "infer" and _is_header(first[0][1], schema)):
        header_names = names or [(h or "").strip() for h in first[0][1]]
        first = first if names is not None else []
    else:
        header_names = None
        if header == "infer" and _looks_like_header(first[0][1], schema):
            raise SchemaError([Problem(
                first[0][0], None, ",".join(first[0][1]),
                f"looks like a header, but none of its names is a column of the schema "
                f"({', '.join(schema)}); rename the columns, or remove the line")])
    records = itertools.chain(first, records)
    choose_base = _base_dir(path)
    base = None
    kind = "csv"
    while True:
        batch = list(itertools.islice(records, size)) if size else list(records)
        if not batch:
            if base is None and header_names is not None:  # no batch yet: only a header
                raise SchemaError([Problem(None, None, None,
                                           f"{path} has no rows, only a header line; add "
                                           f"the table's rows")])
            return
        if header_names is not None:
            frame, ids = _named(batch, [str(n) for n in header_names], schema, problems)
        elif kind == "detection" or (schema is IMAGE_CSV_SCHEMA and base is None and any(
                detection.is_detection_row(f) for _, f in batch)):
            kind = "detection"  # decided on the first rows, as the header is
            data, ids = detection.rows_of(batch, problems)
            frame = ColumnFrame(data, len(ids), given=list(detection.COLUMNS))
            if base is None:
                base = choose_base(frame, "image_uri")
            yield Table(frame, ids, base, kind)
            if not size:
                return
            continue
        else:
            frame, ids = _positional(batch, schema, problems)
        if base is None:  # decided once per table, on its first rows
            base = choose_base(frame, schema.column("image"))
        yield Table(frame, ids, base, kind)
        if not size:
            return


#: Bytes read at a time from a CSV on an object store.
REMOTE_READ_BYTES = 1 << 20


def _csv_records(path: str) -> Iterator[tuple[int, list]]:
    """``(line number, fields)`` of every non-empty record of the CSV, streamed.

    An empty field is a missing value (None), as pandas reads it.
    """
    with storage.open_file(path, "rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        if storage.is_remote(path):
            # Large reads: each read of a file on an object store costs a round trip
            # through gcsfs's event loop (8 KiB at a time took 2 s per million rows).
            text._CHUNK_SIZE = REMOTE_READ_BYTES
        csv_lines = csv.reader(text)
        line = 1
        try:
            for fields in csv_lines:
                values = [x if x and not x.isspace() else None for x in fields]
                if any(values):
                    yield line, values
                line = csv_lines.line_num + 1
        except UnicodeDecodeError:
            raise _not_utf8(path) from None
        except csv.Error as e:
            raise SchemaError([Problem(
                line, None, None,
                f"{path} cannot be read as CSV from here on ({e}); a field this long is "
                f"most often a quote (\") that is never closed: check the quoting from this "
                f"line")]) from None


def _not_utf8(path: str) -> SchemaError:
    """The error for a CSV that is not UTF-8, naming the line and byte of the first bad
    byte (found by reading the file once more: only on this error)."""
    raw = storage.read_bytes(path)
    try:
        raw.decode("utf-8-sig")
        start = len(raw)
    except UnicodeDecodeError as e:
        start = e.start
    line = raw[:start].count(b"\n") + 1
    near = raw[max(0, start - 20):start + 20].decode("latin-1")
    byte = f"0x{raw[start]:02x}" if start < len(raw) else "?"
    return SchemaError([Problem(
        line, None, near,
        f"{path} is not UTF-8 text (byte {byte} at offset {start}); save it as UTF-8, e.g. "
        f"pandas.read_csv(path, encoding='latin-1').to_csv(path, index=False)")])


def _named(records, header: list[str], schema: Schema, problems: Problems):
    """Rows of fields named by ``header`` -> a frame of the schema's columns present."""
    columns = list(schema)
    renames = match_columns(header, schema)
    positions = {renames[h]: i for i, h in enumerate(header) if h in renames}
    present = [c for c in columns if c in positions]
    width = len(header)
    ids = list(map(operator.itemgetter(0), records))
    good = list(map(operator.itemgetter(1), records))
    if set(map(len, good)) != {width}:
        ids, good = [], []
        for lineno, fields in records:
            if len(fields) != width:
                problems.add(lineno, None, ",".join(x or "" for x in fields),
                             f"{len(fields)} fields, the header has {width}")
                continue
            good.append(fields)
            ids.append(lineno)
    data = {c: list(map(operator.itemgetter(positions[c]), good)) for c in present}
    return ColumnFrame(data, len(ids), plain=True, given=[str(h) for h in header]), ids


def _positional(records, schema: Schema, problems: Problems):
    """Rows of fields in schema order -> a frame; AutoML's 2-field and wide rows too."""
    columns = list(schema)
    image_csv = schema is IMAGE_CSV_SCHEMA
    rows, ids = [], []
    plain = True
    for lineno, fields in records:
        if image_csv and len(fields) == 2:
            fields = [None, *fields]  # image_uri,label: UNASSIGNED
        elif image_csv and len(fields) > 3:
            plain = False
            # AutoML multi-label: split,image_uri,label1,label2,...
            fields = [fields[0], fields[1], [x.strip() for x in fields[2:] if x]]
        if len(fields) != len(columns):
            expected = ("3 fields (split,image_uri,label) or 2 (image_uri,label)"
                        if image_csv else f"{len(columns)} fields ({','.join(columns)})")
            problems.add(lineno, None, ",".join(x or "" for x in fields if isinstance(x, str)),
                         f"{len(fields)} fields; expected {expected}")
            continue
        rows.append(fields)
        ids.append(lineno)
    data = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    return ColumnFrame(data, len(ids), plain=plain), ids


#: Relative image paths looked up to choose the folder they resolve against.
BASE_SAMPLE = 32


def _base_dir(csv_path: str):
    """A function choosing, once per table, the folder its relative image paths resolve
    against: the CSV's own folder, or, when none of them is found there but some are
    found under the working directory, the working directory (TFRecorder's rule)."""

    def choose(frame, image_col: str | None) -> str:
        csv_dir = storage.dirname(csv_path)
        if image_col is None or image_col not in frame.columns or storage.is_remote(csv_dir):
            return csv_dir
        relative = [v.strip() for v in frame[image_col].tolist()
                    if isinstance(v, str) and v.strip() and not storage.is_remote(v)
                    and not os.path.isabs(os.path.expanduser(v.strip()))][:BASE_SAMPLE]
        if not relative:
            return csv_dir
        cwd = os.getcwd()
        if any(os.path.exists(os.path.join(csv_dir, v)) for v in relative):
            log.info("relative image paths of %s resolve against its folder %s", csv_path, csv_dir)
            return csv_dir
        if any(os.path.exists(os.path.join(cwd, v)) for v in relative):
            log.warning("relative image paths of %s are not under its folder; they resolve "
                        "against the working directory %s", csv_path, cwd)
            return cwd
        return csv_dir

    return choose
