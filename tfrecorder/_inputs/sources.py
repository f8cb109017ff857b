"""Sources -> a Table: a pandas DataFrame, a CSV file (local or ``gs://``), an image
directory laid out ``DIR/<split>/<label>/<file>`` (or ``DIR/<label>/<file>``), Vertex
AI's JSON Lines files (``vertex``), COCO files (``coco``), a YOLO dataset's
``data.yaml`` (``yolo``) or a Pascal VOC folder (``voc``).

The one way in: ``chunks`` tells the source's kind and hands it to its reader
(``csv_file``, ``image_tree``, ``json_files`` with ``vertex`` and ``coco``), reading a
DataFrame itself; ``images_dir`` is checked here for every kind. Relative image paths in
a CSV resolve against the CSV's own folder, in a DataFrame against the current
directory. ``create_image_csv`` writes an image directory's rows as an AutoML CSV.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
from typing import Callable, Iterator, Mapping

from tfrecorder import _storage as storage
from tfrecorder._inputs import coco, json_files, splits, vertex, voc, yolo
from tfrecorder._folder import split_names
from tfrecorder._errors import ConfigError, Problems
from tfrecorder._inputs.annotations import Annotations
from tfrecorder._inputs.csv_file import csv_chunks
from tfrecorder._inputs.image_tree import directory_chunks
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA, SEGMENTATION_CSV_SCHEMA, Schema
from tfrecorder._inputs.table import ColumnFrame, Table, match_columns


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


#: The column that makes a table given without a schema a segmentation table.
MASK_COLUMN = "mask_uri"
#: Bytes of a CSV read to see its header.
HEADER_BYTES = 1 << 16


def schema_of(source, schema: Schema, header="infer", names=None) -> Schema:
    """The schema ``source`` is read in: ``schema``, except that a CSV file (its header)
    or a DataFrame with a ``mask_uri`` column and no ``label`` one, given the default
    schema, is a segmentation table (``SEGMENTATION_CSV_SCHEMA``)."""
    import pandas as pd

    if schema is not IMAGE_CSV_SCHEMA:
        return schema
    if names is not None:
        given = list(names)
    elif isinstance(source, pd.DataFrame):
        given = list(source.columns)
    elif (header == "infer" and isinstance(source, (str, os.PathLike))
            and storage.exists(os.fspath(source)) and not storage.isdir(os.fspath(source))
            and yolo.find(source) is None and json_files.find(source) is None):
        with storage.open_file(os.fspath(source), "rb") as f:
            first = f.read(HEADER_BYTES).decode("utf-8-sig", "replace").splitlines()[:1]
        given = next(csv.reader(first), [])
    else:
        return schema
    found = {str(c).strip().lower() for c in given}
    return SEGMENTATION_CSV_SCHEMA if MASK_COLUMN in found and "label" not in found else schema


def chunks(source, schema: Schema = IMAGE_CSV_SCHEMA, header="infer", names=None,
           size: int | None = None, images_dir=None,
           notes: list | None = None,
           annotations: Annotations | None = None) -> Callable[[Problems], Iterator[Table]]:
    """The one way every source (or a Table read already) is read: a function that, each
    time it is called, reads ``source`` afresh as Tables of at most ``size`` rows (one Table when None), putting
    the problems of single rows (ragged CSV rows, image files too deep in a tree) into
    the Problems it is given. A source that cannot be read at all raises at once.

    ``images_dir``: the folder relative image paths resolve against (for COCO files
    given per split, a folder per split), instead of the source file's folder (the
    current one for a DataFrame). ``notes`` gets what reading the source left out;
    ``annotations``, for a source of annotations (COCO, YOLO, Pascal VOC), what became
    of them.
    """
    import pandas as pd

    if isinstance(source, Table):  # read already
        return lambda _problems: iter([source])
    found = _annotated(source, schema, names, size, images_dir, notes, annotations)
    if found is not None:
        return found
    json_source = json_files.find(source)
    if json_source is not None:
        return _json_chunks(*json_source, schema, names, size, images_dir, notes,
                            annotations)
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


def _annotated(source, schema: Schema, names, size: int | None, images_dir, notes,
               counts: Annotations | None) -> Callable[[Problems], Iterator[Table]] | None:
    """Tables of a YOLO dataset or a Pascal VOC folder; None for another source."""
    source = os.fspath(source) if isinstance(source, os.PathLike) else source
    yaml_file = yolo.find(source)
    found = voc.find(source) if yaml_file is None else None
    if yaml_file is None and found is None:
        return None
    what = "a YOLO dataset" if yaml_file else "a Pascal VOC folder"
    if schema is not IMAGE_CSV_SCHEMA or names is not None:
        raise ConfigError(f"{what} is read in its own schema; leave schema= and names= out")
    if images_dir is not None:
        where = ("its data.yaml says" if yaml_file
                 else "its layout says (JPEGImages/ or images/)")
        raise ConfigError(f"images_dir={images_dir!r}: where the images of {what} are, "
                          f"{where}; leave images_dir out")

    def tables(problems: Problems) -> Iterator[Table]:
        read = (yolo.read(yaml_file, size, problems, counts) if yaml_file
                else voc.read(found, size, problems, counts, notes))
        for kind, data, ids in read:
            yield Table(ColumnFrame(data, len(ids), given=list(data)), ids, None, kind)

    return tables


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


def _json_chunks(kind: str, files: list, schema: Schema, names, size: int | None,
                 images_dir, notes: list | None,
                 counts: Annotations | None = None) -> Callable[[Problems], Iterator[Table]]:
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
        except split_names.UnknownSplit:
            raise ConfigError(f"images_dir={dict(images_dir)!r}: give a folder per split "
                              f"(train, validation, test)") from None
        stray = sorted(set(images_dir) - given)
        if stray:
            raise ConfigError(f"images_dir names {stray}, which the dict of COCO files does "
                              f"not; give a folder for each of {sorted(given)}")
    elif images_dir is not None:
        images_dir = os.fspath(images_dir)
    def read_files(*args):
        return vertex.read(*args) if kind == "jsonl" else coco.read(*args, counts=counts)

    def tables(problems: Problems) -> Iterator[Table]:
        for table_kind, data, ids in read_files(files, size, problems, images_dir, notes):
            yield Table(ColumnFrame(data, len(ids), given=list(data)), ids, None, table_kind)

    return tables


def from_frame(df, schema: Schema = IMAGE_CSV_SCHEMA) -> Table:
    """A DataFrame as a Table; its columns are matched to the schema ignoring case."""
    renames = match_columns(df.columns, schema)
    frame = df[list(renames)].rename(columns=renames) if renames else df.iloc[:, :0]
    # The DataFrame's own names, for messages about missing columns.
    frame.attrs["given_columns"] = [str(c) for c in df.columns]
    return Table(frame, list(df.index), None, "dataframe")


def from_directory(root: str, schema: Schema = IMAGE_CSV_SCHEMA) -> Table:
    """An image tree as one Table: ``root/<split>/<label>/<file>`` or ``root/<label>/<file>``."""
    return read(root, schema)


def create_image_csv(image_dir: str | os.PathLike, csv_file: str | os.PathLike) -> int:
    """Writes an AutoML image CSV (no header: ``SPLIT,image_uri,label``) for an image tree.

    ``image_dir`` is laid out ``<split>/<label>/<file>`` or ``<label>/<file>`` (rows then
    UNASSIGNED). Paths are written absolute. Returns the number of rows written.
    ``csv_file`` must not exist: a file there (a conversion's ``tfrecorder.json``, a
    table) is someone's, and is left as it is (ConfigError).
    """
    table = from_directory(str(image_dir))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = [table.frame[c].tolist() for c in IMAGE_CSV_SCHEMA]
    for split, uri, label in zip(*columns):
        name = splits.canonical(split) if split else None
        writer.writerow([name.upper() if name else "UNASSIGNED", uri, label])
    path = str(os.fspath(csv_file))
    try:
        storage.create_exclusive(path, out.getvalue().encode("utf-8"))
    except FileExistsError:
        what = "a folder" if storage.isdir(path) else "a file"
        raise ConfigError(f"{path} is {what} there already; nothing was written over it. "
                          f"Give a CSV file name that is new") from None
    return len(table.frame)
