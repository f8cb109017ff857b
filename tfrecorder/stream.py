"""The driver's streaming path: a large table checked and planned without holding it.

A CSV (local or gs://) or a DataFrame is read in chunks, twice:

1. ``survey``: the distinct values of the label and categorical columns (so that
   vocabularies and ids are decided over the whole table, exactly as for a table in
   memory), and a hash of each row's image and label, which shows a multi-label table
   (one image with several labels: such a table takes the in-memory path).
2. ``check``: every chunk validated with those vocabularies, problems collected (and
   capped) over all chunks, the valid rows spilled, as columns (``Block``), to one
   local file per split.

Shards are then planned from the counts alone: a seeded permutation of each split's row
indices (an int array; the same permutation ``plan.shuffled`` uses, so the files are the
ones the in-memory path writes) and the shard boundaries. ``stage`` streams each split's
spill once more and writes, per spill block, one part file holding that block's rows
grouped by shard; each shard's task file lists its byte ranges in the parts. The driver
holds one chunk, the vocabularies and a few int arrays, whatever the table's size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import operator
import os
import pickle
import shutil
import tempfile
from typing import Iterator, Mapping, Sequence

from tfrecorder import labels, layout, plan, splits, storage, validation
from tfrecorder.errors import Problems, SchemaError

#: Rows read, checked and spilled at a time.
CHUNK_ROWS = 50_000
#: Rows of each split whose image sizes estimate the split's bytes (the first ones here).
SAMPLE_ROWS = 64


@contextlib.contextmanager
def gc_paused():
    """Python's cycle collector off for a while. Reading a table makes millions of
    short-lived tuples and lists, none of them in a cycle (reference counting frees
    them); each few hundred allocations would otherwise start a collection, which took
    about a third of the driver's time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclasses.dataclass
class Block:
    """Rows of one split as columns, as they are spilled and staged: the fields of
    ``plan.Row`` but the split, one sequence each (``features`` one per feature,
    ``values`` one per schema column)."""

    row_ids: Sequence
    uris: Sequence
    feature_names: list[str]
    features: list[Sequence]
    values: list[Sequence]
    labels: Sequence

    def __len__(self) -> int:
        return len(self.row_ids)

    def take(self, picked: list[int]) -> "Block":
        """The rows at indices ``picked``, in that order."""
        if len(picked) == len(self.row_ids) and picked == list(range(len(picked))):
            return self
        if len(picked) < 2:  # itemgetter of one index gives the item, not a tuple
            gather = lambda column: [column[i] for i in picked]  # noqa: E731
        else:
            gather = operator.itemgetter(*picked)
        taken: dict[int, Sequence] = {}

        def get(column):  # a column held twice (image_uri as value and uri) is taken once
            if id(column) not in taken:
                taken[id(column)] = gather(column)
            return taken[id(column)]

        return Block(get(self.row_ids), get(self.uris), self.feature_names,
                     [get(f) for f in self.features], [get(v) for v in self.values],
                     get(self.labels))

    def as_tuple(self) -> tuple:
        """The columns to pickle; a value column that is the ``uris`` column itself (the
        image column, which needed no resolving) is written once, as None."""
        values = [None if v is self.uris else v for v in self.values]
        return (self.row_ids, self.uris, self.feature_names, self.features, values,
                self.labels)

    @classmethod
    def from_tuple(cls, columns: tuple) -> "Block":
        row_ids, uris, feature_names, features, values, labels = columns
        return cls(row_ids, uris, feature_names, features,
                   [uris if v is None else v for v in values], labels)

    def rows(self, split: str) -> Iterator:
        """``plan.Row`` of each row; rows with the same features share one dict."""
        features = validation.feature_dicts(self.feature_names, self.features, len(self))
        return map(plan.Row, self.row_ids, itertools.repeat(split), self.uris, features,
                   zip(*self.values), self.labels)


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

    def blocks(self, split: str) -> Iterator[Block]:
        with open(os.path.join(self.folder, split), "rb") as f:
            while True:
                try:
                    yield Block.from_tuple(pickle.load(f))
                except EOFError:
                    return

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def survey(chunks: Iterator, schema) -> tuple[dict[str, set], bool]:
    """``(distinct values per label/categorical column, multi-label)`` over every chunk."""
    import numpy as np

    from tfrecorder import types

    vocab_cols = [c for c, t in schema.items()
                  if t.role == "label" or isinstance(t, types.CategoricalInput)]
    label_col, image_col = schema.column("label"), schema.column("image")
    distinct: dict[str, set] = {c: set() for c in vocab_cols}
    key_hashes, label_hashes = [], []
    for table in chunks:
        frame = table.frame
        for col in vocab_cols:
            if col not in frame.columns:
                continue
            try:
                found = set(frame[col].tolist())
            except TypeError:
                return distinct, True  # unhashable cells (lists, arrays): multi-label
            for v in found:
                if isinstance(v, (list, tuple)) or getattr(v, "ndim", 0):
                    return distinct, True  # list cells: multi-label
                if not labels.is_null(v):
                    distinct[col].add(v)
        if label_col in frame.columns and image_col in frame.columns:
            keys, names = _hashed_pairs(frame[image_col].tolist(), frame[label_col].tolist())
            key_hashes.append(keys)
            label_hashes.append(names)
    if key_hashes:
        # One image with different labels: more distinct (image, label) pairs than
        # distinct images. Counted one int array at a time, sorted in place.
        pairs = [k.astype(np.uint64) * np.uint64(_MIX) + n.astype(np.uint64)
                 for k, n in zip(key_hashes, label_hashes)]
        del label_hashes
        if _distinct(pairs) > _distinct(key_hashes):
            return distinct, True
    return distinct, False


#: An odd 64-bit constant (2**64 / golden ratio) mixing an image's hash with its label's.
_MIX = 0x9E3779B97F4A7C15


def _distinct(arrays: list) -> int:
    """The number of distinct values in ``arrays`` (a list of int arrays, emptied)."""
    import numpy as np

    values = np.concatenate(arrays)
    arrays.clear()
    values.sort()
    return int(np.count_nonzero(values[1:] != values[:-1])) + (len(values) > 0)


def _hashed_pairs(keys: list, values: list):
    """Int64 arrays of hash(image key) and hash(label) of the rows that have both (a
    label is hashed as ``validation`` compares labels: "0", "00" and 0 are one)."""
    import numpy as np

    label_hash: dict = {}  # per distinct label value; None: a null label
    for v in set(values):
        if labels.is_null(v):
            label_hash[v] = None
        else:
            label_hash[v] = hash(labels.identity(v))
    if set(map(type, keys)) == {str}:
        stripped = list(map(str.strip, keys))
        if "" not in stripped and None not in label_hash.values():  # no nulls: all at once
            return (np.fromiter(map(hash, stripped), np.int64, len(stripped)),
                    np.fromiter(map(label_hash.__getitem__, values), np.int64, len(values)))
    pairs = [(hash(k.strip()), label_hash[v]) for k, v in zip(keys, values)
             if k.__class__ is str and not labels.is_null(k) and label_hash[v] is not None]
    return (np.array([k for k, _ in pairs], np.int64), np.array([h for _, h in pairs], np.int64))


def check(chunks: Iterator, schema, *, fixed: Mapping, split_fractions,
          per_chunk=None) -> Spilled:
    """Validates every chunk and spills its rows; one SchemaError with every problem."""
    folder = tempfile.mkdtemp(prefix="tfrecorder-spill-")
    files: dict[str, object] = {}
    problems = Problems()
    counts: dict[str, int] = {}
    samples: dict[str, list] = {}
    first = None
    rows_in = 0
    try:
        for table in chunks:
            rows_in += len(table.row_ids)
            try:
                cols = validation.check_columns(
                    table.frame, table.row_ids, schema, base_dir=table.base_dir,
                    split_fractions=split_fractions, fixed=fixed)
            except SchemaError as e:
                problems.extend(e)
                continue
            if problems:
                continue  # nothing will be written: only look for more problems
            # what every chunk has alike: column names, feature specs, vocabularies
            first = first or (cols.names, cols.features, cols.vocabularies)
            if per_chunk is not None:
                per_chunk(cols.row_ids, cols.uris)
            names = list(cols.encoded)
            whole = Block(cols.row_ids, cols.uris, names, [cols.encoded[c] for c in names],
                          cols.value_columns(), cols.labels)
            for split in sorted(set(cols.splits), key=layout.split_order):
                picked = list(itertools.compress(itertools.count(),
                                                 map(split.__eq__, cols.splits)))
                block = whole.take(picked)
                if split not in files:
                    files[split] = open(os.path.join(folder, split), "wb")
                pickle.dump(block.as_tuple(), files[split], protocol=pickle.HIGHEST_PROTOCOL)
                counts[split] = counts.get(split, 0) + len(block)
                sample = samples.setdefault(split, [])
                for row in itertools.islice(block.rows(split), SAMPLE_ROWS - len(sample)):
                    sample.append((row.image_uri, row.features))
        problems.raise_if_any()
    except BaseException:
        for f in files.values():
            f.close()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    for f in files.values():
        f.close()
    return Spilled(folder, counts, samples, *first, rows_in)


@dataclasses.dataclass(frozen=True)
class SplitLayout:
    """How one split's rows go to its shards, from its row count alone."""

    split: str
    count: int                # shards
    inverse: object           # numpy int array: row index -> position in the shuffled order
    ends: object              # numpy int array: end position of each shard


def layouts(spilled: Spilled, *, num_shards, bytes_per_split, workers: int,
            seed: int) -> list[SplitLayout]:
    """The shard layout of every split, in the order train, validation, test."""
    import numpy as np

    out = []
    for split in sorted(spilled.counts, key=layout.split_order):
        n = spilled.counts[split]
        wanted = num_shards.get(split, 0) if isinstance(num_shards, Mapping) else num_shards
        count = (max(1, min(int(wanted), n)) if wanted else
                 plan.shard_count(bytes_per_split.get(split, 0), n, workers))
        order = plan.permutation(n, seed, split)
        inverse = np.empty(n, np.int64)
        inverse[order] = np.arange(n)
        out.append(SplitLayout(split, count, inverse,
                               np.array(plan.boundaries(n, count), np.int64)))
    return out


def stage(spilled: Spilled, plans: list[SplitLayout], folder: str, *, name: str,
          gzip: bool) -> list[str]:
    """Writes the task files of every shard under ``folder`` by streaming the spill."""
    with gc_paused():
        return _stage(spilled, plans, folder, name=name, gzip=gzip)


def _stage(spilled: Spilled, plans: list[SplitLayout], folder: str, *, name: str,
           gzip: bool) -> list[str]:
    import numpy as np

    from tfrecorder import staging

    storage.makedirs(folder, private=True)
    shard_names = []
    for lay in plans:
        refs: list[list] = [[] for _ in range(lay.count)]
        starts = np.concatenate([[0], lay.ends[:-1]])
        offset = 0
        for k, block in enumerate(spilled.blocks(lay.split)):
            positions = lay.inverse[offset:offset + len(block)]
            shards = np.searchsorted(lay.ends, positions, side="right")
            offset += len(block)
            order = np.argsort(shards, kind="stable")
            cuts = np.searchsorted(shards[order], np.arange(lay.count + 1))
            part = f"{lay.split}.part-{k:05d}"
            data, at = [], 0
            for shard in range(lay.count):
                picked = order[cuts[shard]:cuts[shard + 1]]
                if not len(picked):
                    continue
                # (positions within the shard, rows): the worker sorts rows by position
                blob = pickle.dumps(((positions[picked] - starts[shard]).tolist(),
                                     block.take(picked.tolist()).as_tuple()),
                                    protocol=pickle.HIGHEST_PROTOCOL)
                refs[shard].append((part, at, len(blob)))
                data.append(blob)
                at += len(blob)
            storage.write_bytes(storage.join(folder, part), b"".join(data), private=True)
        for index in range(lay.count):
            filename = str(layout.ShardName(name, lay.split, index, lay.count, gzip))
            staging.stage_refs(folder, lay.split, index, lay.count, filename, refs[index])
            shard_names.append(filename)
    return shard_names


def sources_chunks(source, schema, header, names, size: int | None = None):
    """A function giving a fresh iterator of chunks of ``source`` each time it is called,
    and the problems of reading it, or None when the source takes the in-memory path."""
    import pandas as pd

    from tfrecorder import sources

    size = size or CHUNK_ROWS
    if isinstance(source, pd.DataFrame):
        if names is not None:
            missing = [n for n in names if n not in source.columns]
            if missing:
                return None
            source = source[list(names)]
        frame = source

        def frames(_problems):
            for start in range(0, max(len(frame), 1), size):
                yield sources.from_frame(frame.iloc[start:start + size], schema)

        return frames
    if hasattr(source, "__fspath__"):
        source = str(source.__fspath__())
    if not isinstance(source, str) or not storage.exists(source) or storage.isdir(source):
        return None
    path = source

    def csv(problems):
        yield from sources.csv_chunks(path, schema, header, names, size, problems)

    return csv


def read(source, schema, header, names, *, label_vocabulary, split_fractions,
         per_chunk=None) -> Spilled | None:
    """The checked, spilled table, or None when ``source`` takes the in-memory path
    (an image directory, an object-detection CSV, or a multi-label table)."""
    with gc_paused():
        return _read(source, schema, header, names, label_vocabulary=label_vocabulary,
                     split_fractions=split_fractions, per_chunk=per_chunk)


def _read(source, schema, header, names, *, label_vocabulary, split_fractions, per_chunk):
    chunks = sources_chunks(source, schema, header, names)
    if chunks is None:
        return None
    first = next(iter(chunks(Problems())), None)
    if first is None or first.kind not in ("csv", "dataframe"):
        return None
    reading = Problems()
    # A CSV is parsed once: its chunks are kept in a local file for the second pass.
    cache = _ChunkCache() if first.kind == "csv" else None
    try:
        passing = cache.record(chunks(reading)) if cache else chunks(reading)
        distinct, multi = survey(passing, schema)
        if multi:
            return None
        reading.raise_if_any()  # ragged rows and the like, all at once
        fixed = validation.fix_vocabularies(schema, distinct, label_vocabulary)
        again = cache.replay() if cache else chunks(Problems())
        return check(again, schema, fixed=fixed, split_fractions=split_fractions,
                     per_chunk=per_chunk)
    finally:
        if cache is not None:
            cache.remove()


class _ChunkCache:
    """Parsed chunks of a CSV in a local file, written by one pass, read by the next."""

    def __init__(self):
        fd, self.path = tempfile.mkstemp(prefix="tfrecorder-chunks-")
        os.close(fd)

    def record(self, chunks: Iterator) -> Iterator:
        with open(self.path, "wb") as f:
            for table in chunks:
                pickle.dump((table.frame.data, len(table.frame), table.frame.plain,
                             table.frame.given, table.row_ids, table.base_dir, table.kind), f,
                            protocol=pickle.HIGHEST_PROTOCOL)
                yield table

    def replay(self) -> Iterator:
        from tfrecorder import sources

        with open(self.path, "rb") as f:
            while True:
                try:
                    data, n, plain, given, ids, base, kind = pickle.load(f)
                except EOFError:
                    return
                yield sources.Table(sources.ColumnFrame(data, n, plain, given), ids, base, kind)

    def remove(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)
