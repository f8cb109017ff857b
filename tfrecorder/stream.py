"""The driver's streaming path: a large table checked and planned without holding it.

A CSV (local or gs://) or a DataFrame is read in chunks, twice:

1. ``survey``: the distinct values of the label and categorical columns (so that
   vocabularies and ids are decided over the whole table, exactly as for a table in
   memory), and a hash of each row's image and label, which shows a multi-label table
   (one image with several labels: such a table takes the in-memory path).
2. ``check``: every chunk validated with those vocabularies, problems collected (and
   capped) over all chunks, the valid rows spilled to one local file per split.

Shards are then planned from the counts alone: a seeded permutation of each split's row
indices (an int array; the same permutation ``plan.shuffled`` uses, so the files are the
ones the in-memory path writes) and the shard boundaries. ``stage`` streams each split's
spill once more and writes, per spill block, one part file holding that block's rows
grouped by shard; each shard's task file lists its byte ranges in the parts. The driver
holds one chunk, the vocabularies and a few int arrays, whatever the table's size.
"""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass
class Spilled:
    """A checked table on local disk: one file of pickled row blocks per split."""

    folder: str
    counts: dict[str, int]
    samples: dict[str, list]           # the first rows of each split, to size shards
    columns: tuple
    features: dict
    vocabularies: dict
    rows_in: int

    def blocks(self, split: str) -> Iterator[list[tuple]]:
        with open(os.path.join(self.folder, split), "rb") as f:
            while True:
                try:
                    yield pickle.load(f)
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
            for v in frame[col].tolist():
                if isinstance(v, (list, tuple)) or getattr(v, "ndim", 0):
                    return distinct, True  # list cells: multi-label
                if not labels.is_null(v):
                    distinct[col].add(v)
        if label_col in frame.columns and image_col in frame.columns:
            keys, names = [], []
            label_hash: dict = {}  # per distinct label value
            for k, v in zip(frame[image_col].tolist(), frame[label_col].tolist()):
                if k.__class__ is not str or labels.is_null(k) or labels.is_null(v):
                    continue
                h = label_hash.get(v)
                if h is None:
                    whole = labels.as_whole_number(v)
                    h = label_hash[v] = hash(labels.name_of(v) if whole is None else whole)
                keys.append(hash(k.strip()))
                names.append(h)
            key_hashes.append(np.array(keys, np.int64))
            label_hashes.append(np.array(names, np.int64))
    if key_hashes:
        keys, names = np.concatenate(key_hashes), np.concatenate(label_hashes)
        order = np.lexsort((names, keys))
        keys, names = keys[order], names[order]
        same_key = keys[1:] == keys[:-1]
        if bool(np.any(same_key & (names[1:] != names[:-1]))):
            return distinct, True  # one image with different labels
    return distinct, False


def check(chunks: Iterator, schema, *, fixed: Mapping, split_fractions,
          label_vocabulary: Sequence[str] | None, per_chunk=None) -> Spilled:
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
                checked = validation.validate(
                    table.frame, table.row_ids, schema, base_dir=table.base_dir,
                    label_vocabulary=label_vocabulary, split_fractions=split_fractions,
                    fixed=fixed)
            except SchemaError as e:
                problems.extend(e)
                continue
            if problems:
                continue  # nothing will be written: only look for more problems
            first = first or checked
            if per_chunk is not None:
                per_chunk(checked.rows)
            by_split: dict[str, list] = {}
            for r in checked.rows:
                by_split.setdefault(r.split, []).append(
                    (r.row, r.split, r.image_uri, r.features, r.values, r.labels, r.merged))
            for split, block in by_split.items():
                if split not in files:
                    files[split] = open(os.path.join(folder, split), "wb")
                pickle.dump(block, files[split], protocol=pickle.HIGHEST_PROTOCOL)
                counts[split] = counts.get(split, 0) + len(block)
                sample = samples.setdefault(split, [])
                sample.extend(block[:max(0, SAMPLE_ROWS - len(sample))])
        problems.raise_if_any()
    except BaseException:
        for f in files.values():
            f.close()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    for f in files.values():
        f.close()
    return Spilled(folder, counts, samples, first.columns, first.features,
                   first.vocabularies, rows_in)


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
    import numpy as np

    from tfrecorder import staging

    storage.makedirs(folder)
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
                                     [block[i] for i in picked.tolist()]),
                                    protocol=pickle.HIGHEST_PROTOCOL)
                refs[shard].append((part, at, len(blob)))
                data.append(blob)
                at += len(blob)
            storage.write_bytes(storage.join(folder, part), b"".join(data))
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
                     label_vocabulary=label_vocabulary, per_chunk=per_chunk)
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
                             table.row_ids, table.base_dir, table.kind), f,
                            protocol=pickle.HIGHEST_PROTOCOL)
                yield table

    def replay(self) -> Iterator:
        from tfrecorder import sources

        with open(self.path, "rb") as f:
            while True:
                try:
                    data, n, plain, ids, base, kind = pickle.load(f)
                except EOFError:
                    return
                yield sources.Table(sources.ColumnFrame(data, n, plain), ids, base, kind)

    def remove(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)
