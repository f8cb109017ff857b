"""Sources -> a Table: a pandas DataFrame, a CSV file (local or ``gs://``), an image
directory laid out ``DIR/<split>/<label>/<file>`` (or ``DIR/<label>/<file>``), Vertex
AI's JSON Lines files (``vertex``) or COCO files (``coco``).

CSV files follow AutoML Vision: with or without a header. Without one, fields are taken
by position in schema order; for the default image schema a 2-field row
``image_uri,label`` is an UNASSIGNED row. Relative image paths in a CSV resolve against
the CSV's own folder, in a DataFrame against the current directory.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import operator
import os
import re
from typing import Any, Callable, Iterator, Mapping

from tfrecorder import _storage as storage
from tfrecorder._inputs import coco, detection, splits, vertex
from tfrecorder._errors import ConfigError, Problem, Problems, SchemaError
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA, Schema

log = logging.getLogger(__name__)

#: File endings taken from an image directory (compared case-insensitively).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


class _Column:
    __slots__ = ("values",)

    def __init__(self, values: list):
        self.values = values

    def tolist(self) -> list:
        return self.values


class ColumnFrame:
    """A table as named columns of Python lists: the part of a DataFrame that
    validation reads (``columns``, ``len``, ``frame[c].tolist()``), without building
    one. CSV chunks are read into these; building DataFrames cost more than the rest."""

    __slots__ = ("data", "_n", "plain", "given")

    def __init__(self, data: dict[str, list], n: int, plain: bool = False,
                 given: list[str] | None = None):
        # plain: every cell is None or non-blank text, as the CSV reader fills them
        # (not the lists of AutoML's wide multi-label rows).
        self.data, self._n, self.plain = data, n, plain
        self.given = given  # the header's names, for messages about missing columns

    @property
    def columns(self) -> list[str]:
        return list(self.data)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, column: str) -> _Column:
        return _Column(self.data[column])


@dataclasses.dataclass
class Table:
    """A source read into memory: the frame, an id per row, and where paths resolve."""

    frame: Any                # pandas.DataFrame with the schema's column names
    row_ids: list             # CSV line numbers, DataFrame index labels, or relative paths
    base_dir: str | None      # relative image paths resolve against this
    kind: str                 # "dataframe", "csv", "directory", "jsonl" or "detection"


def read(source, schema: Schema = IMAGE_CSV_SCHEMA, header="infer", names=None) -> Table:
    """Reads ``source`` whole: a DataFrame, a CSV path, or an image directory path.

    ``header`` and ``names`` mean what they mean to ``pandas.read_csv`` (for a DataFrame,
    ``names`` selects columns, as TFRecorder did).
    """
    problems = Problems()
    tables = list(chunks(source, schema, header, names)(problems))
    problems.raise_if_any()
    (table,) = tables
    return table


def chunks(source, schema: Schema = IMAGE_CSV_SCHEMA, header="infer", names=None,
           size: int | None = None, images_dir=None,
           notes: list | None = None) -> Callable[[Problems], Iterator[Table]]:
    """The one way every source (or a Table read already) is read: a function that, each
    time it is called, reads ``source`` afresh as Tables of at most ``size`` rows (one Table when None), putting
    the problems of single rows (ragged CSV rows, image files too deep in a tree) into
    the Problems it is given. A source that cannot be read at all raises at once.

    ``images_dir``: the folder relative image paths resolve against (for COCO files
    given per split, a folder per split), instead of the source file's folder (the
    current one for a DataFrame). ``notes`` gets what reading the source left out.
    """
    import pandas as pd

    if isinstance(source, Table):  # read already
        return lambda _problems: iter([source])
    json_source = _json_files(source)
    if json_source is not None:
        return _json_chunks(*json_source, schema, names, size, images_dir, notes)
    if isinstance(images_dir, Mapping):
        raise ConfigError(f"images_dir={dict(images_dir)!r}: a folder per split is for COCO "
                          f"files given per split ({{'train': 'instances_train.json', ...}}); "
                          f"give one folder")
    base = _images_dir(images_dir)
    if base is not None:
        if isinstance(source, (str, os.PathLike)) and storage.isdir(os.fspath(source)):
            raise ConfigError(f"images_dir={images_dir!r}: the images of an image directory "
                              f"are its files; leave images_dir out")
        read_source = chunks(source, schema, header, names, size)
        return lambda problems: (dataclasses.replace(t, base_dir=base)
                                 for t in read_source(problems))
    if isinstance(source, pd.DataFrame):
        if names is not None:
            missing = [n for n in names if n not in source.columns]
            if missing:
                raise ConfigError(f"names={list(names)!r}: the DataFrame has no column "
                                  f"{missing[0]!r}; it has {list(source.columns)}")
            source = source[list(names)]
        frame = source
        step = size or max(len(frame), 1)

        def frames(_problems):
            for start in range(0, max(len(frame), 1), step):
                yield from_frame(frame.iloc[start:start + step], schema)

        return frames
    if hasattr(source, "__fspath__"):
        source = str(source.__fspath__())
    if not isinstance(source, str):
        raise ConfigError(
            f"source {source!r}: give a pandas DataFrame, a CSV path, an image directory, "
            f"Vertex AI JSON Lines files or a COCO file"
        )
    path = source
    if storage.isdir(path):
        if schema is not IMAGE_CSV_SCHEMA:
            raise ConfigError("an image directory source takes the default image schema only")
        return lambda problems: directory_chunks(path, size, problems)
    if not storage.exists(path):
        raise ConfigError(f"source {path!r} does not exist; give a CSV file or an image directory")
    return lambda problems: csv_chunks(path, schema, header, names, size, problems)


def _images_dir(images_dir) -> str | None:
    """``images_dir`` made absolute, checked to be a folder; None when not given."""
    if images_dir is None:
        return None
    folder = os.fspath(images_dir) if isinstance(images_dir, os.PathLike) else images_dir
    if not isinstance(folder, str) or not folder.strip():
        raise ConfigError(f"images_dir={images_dir!r}; give the folder of the images")
    if not storage.isdir(folder):
        raise ConfigError(f"images_dir={folder!r} is not a folder; give the folder the "
                          f"table's relative image paths start from")
    return storage.resolve(folder)


#: File names that say what a file holds; other files are told by their first byte.
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")


def _json_files(source) -> tuple[str, list] | None:
    """``("jsonl" or "coco", [(path, split or None)])`` for a source of JSON files:
    Vertex AI JSON Lines (a ``.jsonl`` file, a pattern, a list, a folder holding ``.jsonl``
    files, ``vertex.from_vertex()``) or COCO (a ``.json`` file, or a dict of one per
    split); None for any other source."""
    if isinstance(source, vertex.JsonLines):
        return "jsonl", [(path, split) for pattern, split in source.files
                         for path in _expanded(pattern, "JSON Lines")]
    if isinstance(source, Mapping):
        return "coco", _coco_splits(source)
    if isinstance(source, (list, tuple)):
        if not source:
            raise ConfigError("an empty list of files; give the JSON Lines files to read")
        paths = [p for item in source for p in _expanded(_path_of(item), "JSON Lines")]
        return "jsonl", [(p, None) for p in _json_lines(paths)]
    if not isinstance(source, (str, os.PathLike)):
        return None
    path = os.fspath(source)
    name = path.lower()
    if name.endswith(".csv"):
        return None
    if storage.is_pattern(path) and not storage.exists(path):
        return "jsonl", [(p, None) for p in _json_lines(_expanded(path, "JSON Lines"))]
    if storage.isdir(path):
        found = _json_lines_in(path)
        return ("jsonl", [(p, None) for p in found]) if found else None
    if name.endswith(".json") and storage.exists(path):
        return "coco", [(path, None)]
    if storage.exists(path) and _is_json_lines(path):
        return "jsonl", [(path, None)]
    return None


def _path_of(item) -> str:
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    raise ConfigError(f"{item!r} in the list of files; give paths (or patterns) of JSON Lines "
                      f"files")


def _expanded(pattern: str, kind: str) -> list[str]:
    """The files ``pattern`` names: itself, the files it matches, or a folder's
    ``.jsonl`` files. ConfigError when there are none."""
    if storage.is_pattern(pattern) and not storage.exists(pattern):
        found = storage.glob(pattern)
        if not found:
            raise ConfigError(f"{pattern!r} matches no file; give the {kind} files' pattern "
                              f"(e.g. gs://bucket/export/*.jsonl)")
        return found
    if storage.isdir(pattern):
        found = _json_lines_in(pattern)
        if not found:
            raise ConfigError(f"folder {pattern!r} is not a folder of .jsonl files (and no "
                              f"other folders); give the {kind} files")
        return found
    if not storage.exists(pattern):
        raise ConfigError(f"{pattern!r} does not exist; give the {kind} files")
    return [pattern]


def _json_lines_in(folder: str) -> list[str]:
    """The ``.jsonl`` files of a folder of JSON Lines files (an export's); [] for a folder
    with subfolders too: an image directory, which may hold a JSON Lines file of its own
    (Hugging Face's ``metadata.jsonl``) beside its label folders."""
    names = [n for n in storage.listdir(folder) if not is_litter(n)]
    found = [storage.join(folder, n) for n in names if n.lower().endswith(JSON_LINES_SUFFIXES)]
    if not found or any(storage.isdir(storage.join(folder, n)) for n in names
                        if not n.lower().endswith(JSON_LINES_SUFFIXES)):
        return []
    return found


def _is_json_lines(path: str) -> bool:
    """True for a file named ``.jsonl``, or one not named ``.csv`` whose first non-blank
    character is ``{`` (a custom training job's ``training-00000-of-00004``)."""
    name = path.lower()
    if name.endswith(JSON_LINES_SUFFIXES):
        return True
    if name.endswith((".csv", ".json", ".txt", ".tsv")):
        return False
    try:
        head = storage.read_range(path, 0, 4096)
    except OSError:
        return False
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{"


def _json_lines(paths: list[str]) -> list[str]:
    """``paths``, checked to be JSON Lines files (a list or pattern reads those only)."""
    other = [p for p in paths if not _is_json_lines(p)]
    if other:
        raise ConfigError(
            f"{other[0]!r} is not a JSON Lines file; a list of files, a pattern or a folder "
            f"of .jsonl files is read as Vertex AI JSON Lines (give one CSV on its own)")
    return paths


def _coco_splits(source: Mapping) -> list[tuple[str, str]]:
    """``[(path, split)]`` of a dict of COCO files per split."""
    out = []
    for key, value in source.items():
        try:
            split = splits.canonical(key)
        except (splits.UnknownSplit, TypeError):
            split = None
        if split is None:
            raise ConfigError(f"{key!r} in the dict of COCO files; give each file's split: "
                              f"train, validation or test")
        path = _path_of(value)
        if not path.lower().endswith(".json"):
            raise ConfigError(f"{split}: {path!r}; a dict of files maps each split to its "
                              f"COCO .json file (instances_train2017.json)")
        if not storage.exists(path):
            raise ConfigError(f"{split}: {path!r} does not exist")
        out.append((path, split))
    if not out:
        raise ConfigError("an empty dict of COCO files; give {'train': 'instances_train.json'}")
    return out


def _json_chunks(kind: str, files: list, schema: Schema, names, size: int | None,
                 images_dir, notes: list | None) -> Callable[[Problems], Iterator[Table]]:
    """Tables of the JSON files of a Vertex AI or COCO source; their image paths are
    written relative to the working directory, or absolute (base_dir None)."""
    what = "Vertex AI JSON Lines" if kind == "jsonl" else "COCO files"
    if schema is not IMAGE_CSV_SCHEMA or names is not None:
        raise ConfigError(f"{what} are read in their own schema; leave schema= and names= out")
    given = {split for _, split in files}
    if isinstance(images_dir, Mapping) and (kind == "jsonl" or None in given):
        raise ConfigError(f"images_dir={dict(images_dir)!r}: a folder per split is for COCO "
                          f"files given per split; give one folder")
    folders = images_dir.values() if isinstance(images_dir, Mapping) else [images_dir]
    for folder in folders:
        _images_dir(folder)
    if isinstance(images_dir, Mapping):
        try:
            images_dir = {splits.canonical(k): os.fspath(v) for k, v in images_dir.items()}
        except splits.UnknownSplit:
            raise ConfigError(f"images_dir={dict(images_dir)!r}: give a folder per split "
                              f"(train, validation, test)") from None
        stray = sorted(set(images_dir) - given)
        if stray:
            raise ConfigError(f"images_dir names {stray}, which the dict of COCO files does "
                              f"not; give a folder for each of {sorted(given)}")
    elif images_dir is not None:
        images_dir = os.fspath(images_dir)
    read_files = vertex.read if kind == "jsonl" else coco.read

    def tables(problems: Problems) -> Iterator[Table]:
        for table_kind, data, ids in read_files(files, size, problems, images_dir, notes):
            yield Table(ColumnFrame(data, len(ids), given=list(data)), ids, None, table_kind)

    return tables


def _match_columns(names, schema: Schema) -> dict[str, str]:
    """Maps the table's column names to the schema's, ignoring case and blanks.

    Two columns that match one schema column are a SchemaError naming them.
    """
    wanted = {c.lower(): c for c in schema}
    out: dict = {}
    seen: dict[str, list] = {}
    for name in names:
        key = str(name).strip().lower()
        if key in wanted:
            seen.setdefault(wanted[key], []).append(name)
            out.setdefault(name, wanted[key])
    twice = {c: found for c, found in seen.items() if len(found) > 1}
    if twice:
        raise SchemaError([
            Problem(None, c, [str(n) for n in found],
                    f"{len(found)} columns are named {c!r} (ignoring case); keep or rename "
                    f"all but one") for c, found in twice.items()])
    return out


def from_frame(df, schema: Schema = IMAGE_CSV_SCHEMA) -> Table:
    """A DataFrame as a Table; its columns are matched to the schema ignoring case."""
    renames = _match_columns(df.columns, schema)
    frame = df[list(renames)].rename(columns=renames) if renames else df.iloc[:, :0]
    # The DataFrame's own names, for messages about missing columns.
    frame.attrs["given_columns"] = [str(c) for c in df.columns]
    return Table(frame, list(df.index), None, "dataframe")


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
    return first not in splits.ALIASES


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
        reader = csv.reader(text)
        line = 1
        try:
            for fields in reader:
                values = [x if x and not x.isspace() else None for x in fields]
                if any(values):
                    yield line, values
                line = reader.line_num + 1
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
    renames = _match_columns(header, schema)
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



def from_directory(root: str, schema: Schema = IMAGE_CSV_SCHEMA) -> Table:
    """An image tree as one Table: ``root/<split>/<label>/<file>`` or ``root/<label>/<file>``."""
    return read(root, schema)


def directory_chunks(root: str, size: int | None, problems: Problems) -> Iterator[Table]:
    """An image tree as Tables of at most ``size`` rows, ``split, image_uri, label`` (the
    split None in a tree without split folders); its files are listed as a stream."""
    import itertools

    root = storage.resolve(root)
    top = [d for d in storage.listdir(root)
           if not is_litter(d) and storage.isdir(storage.join(root, d))]
    split_layout = _has_split_folders(root, top)
    depth = 3 if split_layout else 2
    layout = "DIR/<split>/<label>/<file>" if split_layout else "DIR/<label>/<file>"

    def rows():
        for path, rel, parts in _image_files(root):
            if len(parts) > depth:
                # No split and label the layout gives: skipping it would lose it silently.
                problems.add(rel, None, None,
                             f"image file deeper than the layout {layout}; move it into its "
                             f"label's folder, or list the images in a CSV")
            elif len(parts) == depth:
                yield rel, (parts[0] if split_layout else None), path, parts[-2]
            # else: not where the layout puts images

    found = rows()
    any_rows = False
    while True:
        batch = list(itertools.islice(found, size)) if size else list(found)
        if not batch:
            break
        any_rows = True
        ids, split_col, uris, label_col = map(list, zip(*batch))
        data = dict(zip(IMAGE_CSV_SCHEMA, (split_col, uris, label_col)))
        yield Table(ColumnFrame(data, len(ids), plain=True, given=list(IMAGE_CSV_SCHEMA)),
                    ids, root, "directory")
        if not size:
            break
    if not any_rows and not problems:
        raise SchemaError([Problem(None, None, root, f"no image files laid out as {layout}")])


#: Names that file managers, editors and archivers leave beside images; never data.
LITTER_NAMES = frozenset({"thumbs.db", "desktop.ini", "__macosx"})


def is_litter(name: str) -> bool:
    """True for what an OS or editor leaves in an image folder, never data: any dot-file
    or dot-folder (``.DS_Store``, macOS's ``._x.jpg``, ``.ipynb_checkpoints``, ``.git``),
    ``Thumbs.db``, ``desktop.ini`` and ``__MACOSX``."""
    return name.startswith(".") or name.lower() in LITTER_NAMES


def _image_files(root: str) -> Iterator[tuple[str, str, list[str]]]:
    """``(path, relative path, its parts)`` of every image file below ``root``, litter
    (anywhere on the path) left out."""
    prefix = len(root.rstrip("/")) + 1
    for path in storage.walk_files(root):
        rel = path[prefix:] if storage.is_remote(root) else os.path.relpath(path, root)
        parts = rel.replace("\\", "/").split("/")
        if any(is_litter(p) for p in parts) or not parts[-1].lower().endswith(IMAGE_EXTENSIONS):
            continue
        yield path, rel, parts


def _has_split_folders(root: str, top: list[str]) -> bool:
    """True when the folders of ``root`` are splits (``DIR/<split>/<label>/<file>``),
    False when none is (``DIR/<label>/<file>``).

    Some of each is refused: either layout would silently drop the images of the other
    folders (a stray ``previews`` folder beside ``train`` and ``test`` made every split
    folder a label folder, and only the stray folder's images were converted).
    """
    visible = [d for d in top if not d.startswith(".")]
    split_names = sorted(d for d in visible if d.strip().lower() in splits.ALIASES)
    others = sorted(d for d in visible if d not in split_names)
    if not split_names or not others:
        return bool(split_names)
    raise SchemaError([Problem(
        None, None, root,
        f"mixed layout: the folders {split_names} are split names but {others} "
        f"{'is' if len(others) == 1 else 'are'} not, so neither DIR/<split>/<label>/<file> "
        f"nor DIR/<label>/<file> takes every image; move {', '.join(others)} out of {root} "
        f"(or, if the split-named folders are labels, rename them)")])


def create_image_csv(image_dir: str | os.PathLike, csv_file: str | os.PathLike) -> int:
    """Writes an AutoML image CSV (no header: ``SPLIT,image_uri,label``) for an image tree.

    ``image_dir`` is laid out ``<split>/<label>/<file>`` or ``<label>/<file>`` (rows then
    UNASSIGNED). Paths are written absolute. Returns the number of rows written.
    """
    table = from_directory(str(image_dir))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = [table.frame[c].tolist() for c in IMAGE_CSV_SCHEMA]
    for split, uri, label in zip(*columns):
        name = splits.canonical(split) if split else None
        writer.writerow([name.upper() if name else "UNASSIGNED", uri, label])
    storage.write_bytes(str(csv_file), out.getvalue().encode("utf-8"))
    return len(table.frame)
