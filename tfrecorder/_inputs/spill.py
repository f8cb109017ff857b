"""The driver's one row path: any table, read in chunks, checked and spilled.

Every source (a CSV on disk or gs://, a DataFrame, an image directory, an AutoML
object-detection CSV, Vertex AI JSON Lines, a COCO file) is read by ``sources.chunks``
in chunks of ``CHUNK_ROWS`` rows, twice:

1. ``labels.tally``: the distinct values of the label and categorical columns (so that
   vocabularies are decided over the whole table, ``labels.fix_vocabularies``), whether
   one image has several labels, and per row the first row naming the same image.
2. the check: every chunk validated with those vocabularies, problems collected (and
   capped) over all chunks, the valid rows spilled, as columns (``Block``), to one
   local file per split.

Where several rows become one record (a multi-label table, one box per row of a
detection table), the check spills each row into the bucket of its image's first row
(``BUCKET_ROWS`` first rows a bucket), and each bucket in turn is grouped in memory:
records come out in the order of their image's first row, whatever the chunk sizes. A
CSV is parsed once: its chunks are kept in a local file for the second pass. The driver
holds one chunk or one bucket, the vocabularies and a few int arrays, whatever the
table's size.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
import shutil
import tempfile
from typing import Callable, Iterator

from tfrecorder import _storage as storage
from tfrecorder._inputs import detection, labels, sources, splits, validation
from tfrecorder._folder import example
from tfrecorder._folder import layout
from tfrecorder._errors import ConfigError, Problems, SchemaError
from tfrecorder._inputs.annotations import Annotations
from tfrecorder._inputs.table import ColumnFrame, Table
from tfrecorder._inputs.block import Block, Row

#: Rows read, checked and spilled at a time.
CHUNK_ROWS = 50_000
#: Rows of each split whose image sizes estimate the split's bytes (its first ones).
SAMPLE_ROWS = 64
#: Images (by their first row) grouped at a time in a multi-label or detection table.
BUCKET_ROWS = 50_000


@dataclasses.dataclass
class Spilled:
    """A checked table on local disk: one file of pickled ``Block`` columns per split."""

    folder: str
    counts: dict[str, int]
    samples: dict[str, list]           # (image_uri, features) of the first rows per split
    columns: tuple
    features: dict
    vocabularies: dict
    rows_in: int
    #: What reading the source left out, one line each (keys of a JSON file that no
    #: record holds), for the result to show.
    notes: list = dataclasses.field(default_factory=list)
    #: What became of the source's annotations (COCO, YOLO, Pascal VOC); None for
    #: other sources.
    annotations: Annotations | None = None
    #: Where the image files were looked for as the rows were spilled (``read``'s
    #: ``look``): per split, the positions (in spill order) of the records whose image
    #: file is missing, and the input rows they hold (a merged record's each).
    missing: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    missing_rows: int = 0
    #: Category name -> its keypoint names and skeleton, where records hold keypoints
    #: (COCO's); None otherwise.
    keypoints: dict | None = None

    def blocks(self, split: str) -> Iterator[Block]:
        with open(os.path.join(self.folder, split), "rb") as f:
            while True:
                try:
                    yield Block.from_tuple(pickle.load(f))
                except EOFError:
                    return

    def rows(self, split: str) -> Iterator[Row]:
        """The split's rows, in the order they were spilled."""
        for block in self.blocks(split):
            yield from block.rows(split)

    def bytes_per_split(self) -> dict[str, int]:
        """Each split's bytes, estimated from its sample: the image files' sizes (else
        the features') times the split's rows."""
        out = {}
        for split, sample in self.samples.items():
            sizes = []
            for uri, features in sample:
                size = sum(len(f) for f in features.values())
                if uri is not None:
                    try:
                        size += storage.size(uri)
                    except OSError:
                        continue
                sizes.append(size)
            out[split] = int(sum(sizes) / len(sizes) * self.counts[split]) if sizes else 0
        return out

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def subset(table: Spilled, picked: dict, look: bool = False) -> Spilled:
    """A new spill of the rows of ``table`` at ``picked`` (split -> set of row numbers
    within the split, in spill order), in their order; ``rows_in`` counts their input
    rows (a merged record's each). ``look``: as ``read``'s."""
    writer = _Writer(look)
    rows_in = 0
    try:
        for split in table.counts:
            wanted = picked.get(split)
            if not wanted:
                continue
            at = 0
            for block in table.blocks(split):
                here = [i for i in range(len(block)) if at + i in wanted]
                at += len(block)
                if not here:
                    continue
                taken = block.take(here)
                writer.write(split, taken)
                merged = taken.merged
                rows_in += len(here) + (sum(len(m) for m in merged) if merged is not None else 0)
    except BaseException:
        writer.discard()
        raise
    out = writer.spilled(table.columns, table.features, table.vocabularies, rows_in)
    out.keypoints = table.keypoints
    return out


class _Writer:
    """Appends Blocks to the split files of a new spill folder, counting rows and
    keeping the first rows of each split as its sample; with ``look``, also where the
    rows' image files are missing (``Spilled.missing``)."""

    def __init__(self, look: bool = False):
        self.folder = tempfile.mkdtemp(prefix="tfrecorder-spill-")
        self.files: dict[str, object] = {}
        self.counts: dict[str, int] = {}
        self.samples: dict[str, list] = {}
        self.look = look
        self.missing: dict[str, list[int]] = {}
        self.missing_rows = 0
        self.listed: dict[str, set[str]] = {}  # object-store folders listed so far

    def write(self, split: str, block: Block) -> None:
        if self.look:
            gone = storage.missing(block.uris, self.listed)
            if gone:
                at = self.counts.get(split, 0)
                self.missing.setdefault(split, []).extend(at + i for i in gone)
                merged = block.merged
                self.missing_rows += len(gone) + (
                    sum(len(merged[i]) for i in gone) if merged is not None else 0)
        if split not in self.files:
            self.files[split] = open(os.path.join(self.folder, split), "wb")
        pickle.dump(block.as_tuple(), self.files[split], protocol=pickle.HIGHEST_PROTOCOL)
        self.counts[split] = self.counts.get(split, 0) + len(block)
        sample = self.samples.setdefault(split, [])
        for row in itertools.islice(block.rows(split), SAMPLE_ROWS - len(sample)):
            sample.append((row.image_uri, row.features))

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def spilled(self, names, features, vocabularies, rows_in: int) -> Spilled:
        self.close()
        return Spilled(self.folder, self.counts, self.samples, names, features,
                       vocabularies, rows_in, missing=self.missing,
                       missing_rows=self.missing_rows)

    def discard(self) -> None:
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def read(source, schema, header="infer", names=None, *, label_vocabulary=None,
         split_fractions=splits.DEFAULT_FRACTIONS, per_chunk=None,
         multi_label: bool | None = None, images_dir=None,
         extend_vocabulary: bool = False, stored_splits: splits.StoredSplit | None = None,
         look: bool = False) -> Spilled:
    """``source`` checked and spilled, split by split; one SchemaError with every problem.

    ``look``: each record's image file is looked for as it is spilled (a ``stat``
    locally, a listing per folder on gs://, ``storage.missing``), and the records whose
    file is missing are noted (``Spilled.missing``), so that a conversion can stop
    before reading any image when they already exceed its error budget.
    ``per_chunk(row_ids, uris)`` sees the image URIs of each checked chunk;
    ``images_dir``: where relative image paths resolve (``sources.chunks``).
    ``extend_vocabulary``: ``label_vocabulary`` is a stored one (an update's), whose
    ids stay; the table's other labels get the next ids, in sorted order.
    ``stored_splits``: an update's, the splits its folder holds images in, which
    unassigned rows of those images keep (``splits.StoredSplit``).
    """
    return _read(source, schema, header, names, label_vocabulary=label_vocabulary,
                 split_fractions=split_fractions, per_chunk=per_chunk,
                 multi_label=multi_label, images_dir=images_dir,
                 extend_vocabulary=extend_vocabulary, stored_splits=stored_splits,
                 look=look)


#: A table whose images listed under several labels are fewer than this share of its
#: images is taken for a single-label table with stray rows, unless multi_label=True.
FEW_REPEATED = 0.5


def _extended(stored: list[str], distinct) -> list[str] | None:
    """``stored`` label names followed by the new names of ``distinct`` values, sorted;
    None for integer labels that pass through as ids ("0", "1", ... stored)."""
    values = [v for v in distinct if not labels.is_null(v)]
    if (stored == labels.integer_names(range(len(stored)))
            and all(labels.as_whole_number(v) is not None for v in values)):
        return None
    known = set(stored)
    return list(stored) + sorted({labels.name_of(v) for v in values} - known)


def _read(source, schema, header, names, *, label_vocabulary, split_fractions, per_chunk,
          multi_label=None, images_dir=None, extend_vocabulary=False, stored_splits=None,
          look=False):
    notes: list[str] = []
    counts = Annotations()
    chunks = sources.chunks(source, schema, header, names, CHUNK_ROWS, images_dir=images_dir,
                            notes=notes, annotations=counts)
    fractions = splits.check_fractions(split_fractions)
    reading = Problems()
    cache = _ChunkCache(chunks)
    try:
        found = labels.tally(cache.record(reading), schema)
        reading.raise_if_any()  # ragged rows and the like, all at once
        if found.kind != "detection":
            found = _decide_multi(found, multi_label, cache, schema)
        if found.kind == "detection":
            distinct = found.distinct[schema.column("label")]
            if extend_vocabulary and label_vocabulary is not None:  # an update's names
                label_vocabulary = list(label_vocabulary) + sorted(
                    {labels.name_of(v) for v in distinct if not labels.is_null(v)}
                    - set(label_vocabulary))
            names_ = detection.vocabulary(distinct, label_vocabulary)
            check = _detection_check(names_, counts.shapes)
        else:
            label_col = schema.column("label")
            if extend_vocabulary and label_vocabulary is not None and label_col in found.distinct:
                label_vocabulary = _extended(list(label_vocabulary), found.distinct[label_col])
            fixed = labels.fix_vocabularies(schema, found.distinct, label_vocabulary)
            mask_col = schema.column("mask")
            if mask_col is not None and label_col is None and label_vocabulary is not None:
                # A segmentation table's classes: the names of the mask's ids 0..N-1.
                fixed[mask_col] = labels.Fixed(list(label_vocabulary), {})
            check = _table_check(schema, fixed, fractions, found.multi, stored_splits)
        if found.kind != "detection" and not found.multi:
            spilled = _spill(cache.replay(), check, per_chunk, _Writer(look))
        else:
            spilled = _spill_grouped(cache.replay(), check, found.firsts, fractions,
                                     per_chunk, schema.column("image") or "image_uri",
                                     _Writer(look), stored_splits)
        spilled.notes = list(notes)
        spilled.annotations = counts if counts.read or counts.reported else None
        if "keypoints" in counts.shapes:
            spilled.keypoints = dict(sorted(counts.keypoints.items()))
        return spilled
    finally:
        cache.remove()


def _decide_multi(found, multi_label, cache, schema):
    """``found`` with ``multi`` as ``multi_label`` says; SchemaError listing the rows of
    the images given several labels when a table is single-label but for a few of them
    (or has any, with ``multi_label=False``)."""
    if multi_label is True and not found.multi:
        firsts = found.firsts
        if firsts is None:  # every image on one row: each row is its own first
            import numpy as np

            firsts = np.arange(sum(len(t.row_ids) for t in cache.replay()))
        return dataclasses.replace(found, multi=True, firsts=firsts)
    if not found.by_rows or multi_label is True:
        if multi_label is False and found.multi:
            raise ConfigError(
                "multi_label=False, but the label column holds lists of labels; give "
                "one label per cell, or multi_label=True")
        return found
    few = found.repeated_images < FEW_REPEATED * found.images
    if multi_label is None and not few:
        return found
    label_col, image_col = schema.column("label"), schema.column("image")
    wanted = iter(found.repeated.tolist())
    problems, at, next_row = Problems(), 0, next(wanted, None)
    for table in cache.replay():
        n = len(table.row_ids)
        if next_row is not None and next_row < at + n:
            values = table.frame[label_col].tolist()
            uris = table.frame[image_col].tolist()
            while next_row is not None and next_row < at + n:
                i = next_row - at
                problems.add(table.row_ids[i], label_col, values[i],
                             f"image {str(uris[i]).strip()!r} is listed under several "
                             f"labels")
                next_row = next(wanted, None)
        at += n
    try:
        problems.raise_if_any()
    except SchemaError as e:
        error = e
    share = f"{found.repeated_images} of {found.images} images"
    if multi_label is False:
        error.args = (f"multi_label=False, but {share} are listed under several labels; "
                      f"fix those rows, or give multi_label=True\n{error}",)
    else:
        error.args = (f"{share} are listed under several labels, which would make the "
                      f"whole table multi-label (every label a list); fix those rows, or "
                      f"give multi_label=True (--multi-label) if the table is "
                      f"multi-label\n{error}",)
    raise error


@dataclasses.dataclass
class _Chunk:
    """One chunk checked: its rows as columns, and what every chunk of a table has alike."""

    block: Block
    splits: list                  # per row its split; None where the group decides
    keys: list                    # per row its image key as written (groups)
    names: tuple                  # schema columns: the order of Row.values
    features: dict                # feature specs
    vocabularies: dict
    base_dir: str | None
    # Where rows of one image become one record: (members, the rows' Block) -> (features,
    # label ids); and whether a detection table, whose groups are checked even when
    # rows have problems (a multi-label table with problems is not grouped).
    group: Callable | None = None
    detection: bool = False


def _table_check(schema, fixed, fractions, multi: bool, stored=None):
    """The check of a chunk of a CSV, DataFrame or image directory."""
    label_col = schema.column("label")

    def check(table, problems: Problems) -> _Chunk | None:
        try:
            cols = validation.check_columns(
                table.frame, table.row_ids, schema, base_dir=table.base_dir,
                split_fractions=fractions, fixed=fixed, multi=multi, stored=stored)
        except SchemaError as e:
            problems.extend(e)
            return None
        names = list(cols.encoded)
        block = Block(cols.row_ids, cols.uris, names, [cols.encoded[c] for c in names],
                      cols.value_columns(), cols.labels)
        group = _multi_label(label_col) if multi else None
        return _Chunk(block, cols.splits, cols.keys, cols.names, cols.features,
                      cols.vocabularies, table.base_dir, group)

    return check


def _multi_label(label_col: str):
    """The record of an image's rows in a multi-label table: the first row's features,
    with the labels of every row (as AutoML merges them)."""
    cache: dict[tuple, bytes] = {}

    def group(members, block: Block):
        ids = tuple(sorted({x for i in members for x in block.labels[i]}))
        if ids not in cache:
            cache[ids] = example.int64_feature(ids)
        first = members[0]
        features = {name: column[first]
                    for name, column in zip(block.feature_names, block.features)}
        features[label_col] = cache[ids]
        return features, ids

    return group


def _detection_check(names: list[str], shapes=frozenset()):
    """The check of a chunk of an object-detection table (AutoML's CSV, Vertex AI's JSON
    Lines, COCO), one row per box; ``shapes``: the geometry columns of the source
    (``Annotations.shapes``), decided over all of it by the first pass."""
    id_of = {n: i for i, n in enumerate(names)}
    shapes = frozenset(shapes)

    def check(table, problems: Problems) -> _Chunk:
        # COCO's have is_crowd too, and masks where some annotation has one
        columns = tuple(detection.columns(table.frame, shapes))
        row_splits, keys, boxes, values = detection.check(table.frame, table.row_ids,
                                                          id_of, problems, shapes)
        # Boxes travel in the labels column until the image's rows are grouped.
        block = Block(table.row_ids, keys, [], [], [list(c) for c in zip(*values)] or
                      [[] for _ in columns], boxes)
        return _Chunk(block, row_splits, keys, columns, detection.feature_specs(columns),
                      {layout.LABEL: names}, table.base_dir,
                      lambda members, b: detection.record(members, b.labels, id_of, columns,
                                                         b.values),
                      True)

    return check


def _spill(chunks: Iterator, check, per_chunk, writer: _Writer) -> Spilled:
    """Checks every chunk and spills its rows to their split's file with ``writer``."""
    problems = Problems()
    first = None
    rows_in = 0
    try:
        for table in chunks:
            rows_in += len(table.row_ids)
            chunk = check(table, problems)
            if chunk is None or problems:
                continue  # nothing will be written: only look for more problems
            first = first or chunk
            if per_chunk is not None:
                per_chunk(chunk.block.row_ids, chunk.block.uris)
            for split in sorted(set(chunk.splits), key=layout.split_order):
                picked = list(itertools.compress(itertools.count(),
                                                 map(split.__eq__, chunk.splits)))
                writer.write(split, chunk.block.take(picked))
        problems.raise_if_any()
    except BaseException:
        writer.discard()
        raise
    return writer.spilled(first.names, first.features, first.vocabularies, rows_in)


def _spill_grouped(chunks: Iterator, check, firsts, fractions, per_chunk,
                   image_col: str, writer: _Writer, stored=None) -> Spilled:
    """Checks every chunk, spills each row into the bucket of its image's first row,
    then groups the buckets in order with ``writer``: one record per image."""
    import numpy as np

    buckets: dict[int, object] = {}
    problems = Problems()
    first = None
    rows_in = 0
    try:
        for table in chunks:
            start, rows_in = rows_in, rows_in + len(table.row_ids)
            chunk = check(table, problems)
            if chunk is None or (problems and not chunk.detection):
                continue  # a multi-label table with problems is not grouped
            first = first or chunk
            if per_chunk is not None:
                per_chunk(chunk.block.row_ids, chunk.block.uris)
            owner = firsts[start:rows_in] // BUCKET_ROWS
            for bucket in np.unique(owner).tolist():
                picked = np.flatnonzero(owner == bucket).tolist()
                if bucket not in buckets:
                    buckets[bucket] = open(os.path.join(writer.folder, f"bucket-{bucket}"), "wb")
                piece = (chunk.block.take(picked).as_tuple(),
                         [chunk.splits[i] for i in picked], [chunk.keys[i] for i in picked])
                pickle.dump(piece, buckets[bucket], protocol=pickle.HIGHEST_PROTOCOL)
        for f in buckets.values():
            f.close()
        if first is not None and not (problems and not first.detection):
            for bucket in sorted(buckets):
                _group_bucket(os.path.join(writer.folder, f"bucket-{bucket}"), first,
                              fractions, image_col, writer, problems, stored)
        problems.raise_if_any()
    except BaseException:
        for f in buckets.values():
            f.close()
        writer.discard()
        raise
    return writer.spilled(first.names, first.features, first.vocabularies, rows_in)


def _group_bucket(path: str, chunk: _Chunk, fractions, image_col: str, writer: _Writer,
                  problems: Problems, stored=None) -> None:
    """The records of the images whose first row falls in one bucket, in the order of
    those first rows, spilled split by split."""
    pieces, row_splits, keys = [], [], []
    with open(path, "rb") as f:
        while True:
            try:
                columns, piece_splits, piece_keys = pickle.load(f)
            except EOFError:
                break
            pieces.append(Block.from_tuple(columns))
            row_splits += piece_splits
            keys += piece_keys
    os.remove(path)
    rows = _concatenated(pieces)
    del pieces
    by_split: dict[str, list] = {}

    def locate(key: str) -> str:  # where the image of a key as written is
        return storage.resolve(key, chunk.base_dir)

    for key, members, split in splits.group_by_image(keys, row_splits, rows.row_ids,
                                                     image_col, fractions, problems,
                                                     locate, stored):
        by_split.setdefault(split, []).append((key, members))
    if problems:
        return
    for split in sorted(by_split, key=layout.split_order):
        groups = by_split[split]
        records = [chunk.group(members, rows) for _, members in groups]
        heads = [members[0] for _, members in groups]
        merged = [tuple((rows.row_ids[i], tuple(v[i] for v in rows.values))
                        for i in members[1:]) for _, members in groups]
        if chunk.detection:  # the key as written, resolved
            uris = [locate(key) for key, _ in groups]
        else:  # the first row's image
            uris = [rows.uris[h] for h in heads]
        names = list(records[0][0])
        block = Block([rows.row_ids[h] for h in heads], uris, names,
                      [[features[n] for features, _ in records] for n in names],
                      [[v[h] for h in heads] for v in rows.values],
                      [ids for _, ids in records], merged)
        writer.write(split, block)


def _concatenated(blocks: list[Block]) -> Block:
    """One Block of the rows of ``blocks``, in order."""
    def joined(columns):
        return [x for c in columns for x in c]

    first = blocks[0]
    return Block(joined(b.row_ids for b in blocks), joined(b.uris for b in blocks),
                 first.feature_names,
                 [joined(b.features[k] for b in blocks) for k in range(len(first.features))],
                 [joined(b.values[k] for b in blocks) for k in range(len(first.values))],
                 joined(b.labels for b in blocks))


class _ChunkCache:
    """The chunks of one pass kept in a local file for the next, so that a source is
    parsed once (DataFrame chunks, which cost nothing to take again, are not kept)."""

    def __init__(self, chunks):
        self._chunks = chunks
        fd, self.path = tempfile.mkstemp(prefix="tfrecorder-chunks-")
        os.close(fd)
        self._kept = False

    def record(self, problems: Problems) -> Iterator:
        with open(self.path, "wb") as f:
            for table in self._chunks(problems):
                if table.kind != "dataframe":
                    self._kept = True
                    frame = table.frame
                    pickle.dump((frame.data, len(frame), frame.plain, frame.given,
                                 table.row_ids, table.base_dir, table.kind), f,
                                protocol=pickle.HIGHEST_PROTOCOL)
                yield table

    def replay(self) -> Iterator:
        if not self._kept:
            yield from self._chunks(Problems())
            return
        with open(self.path, "rb") as f:
            while True:
                try:
                    data, n, plain, given, ids, base, kind = pickle.load(f)
                except EOFError:
                    return
                yield Table(ColumnFrame(data, n, plain, given), ids, base, kind)

    def remove(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)
