"""Random access to the records of one split, without TensorFlow: the reader under the
PyTorch, Grain and DALI adapters (``tfrecorder.torch``, ``tfrecorder.grain``).

``Reader(output_dir, split)`` lists the split's shards from the manifest and each
record's place from the shards' index files (``index/<shard>.idx``, see ``index``);
a shard without an index file is scanned once in memory instead (its length fields
only), and nothing is written. Record ``i`` is the ``i``-th record of the split in file
order; reading it is one ranged read, local or ``gs://``, with both checksums checked::

    reader = Reader("out/", "train")
    len(reader)                 # records in the split, from the manifest
    reader.record(7)            # the serialized tf.train.Example
    reader.features(7)          # {"image": b"...", "label": 2, ...}
    order = permutation(len(reader), seed=0, epoch=3)
    mine = part(order, rank=1, world_size=4)

Local shards stay open, one file descriptor each, read with ``os.pread`` (no shared
file position, so threads may share a reader); a process forked from the one that
opened them opens its own. A reader pickles without its open files, so it can be sent
to spawned worker processes.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
from typing import Sequence

import numpy as np

from tfrecorder import (
    _example as example, _index as index, _layout as layout, _metadata as metadata,
    _records as records, _splits as splits, _storage as storage)
from tfrecorder._errors import ConfigError, CorruptRecordError, OutputChangedError
from tfrecorder._manifest import Manifest

_HEADER = 12  # length (8) and its checksum (4) before a record's data


class Reader:
    """The records of split ``split`` of the conversion in ``output_dir``.

    ConfigError when the split is not there, or the shards are gzip-compressed (a gzip
    stream cannot be entered at a record's offset: convert again without compression);
    IncompleteOutputError when the directory has no manifest.
    """

    def __init__(self, output_dir: str, split: str = "train"):
        self.output_dir = str(output_dir)
        self._generation = _generation(self.output_dir)
        self.manifest = metadata.read_manifest(self.output_dir)
        self.split = _split_name(split, self.manifest, self.output_dir)
        if self.manifest.compression:
            raise ConfigError(
                f"{self.output_dir} holds {self.manifest.compression}-compressed shards; "
                f"records cannot be read at random from a {self.manifest.compression} "
                f"stream. Convert again with compression=None (the default) to read it "
                f"with tfrecorder.access, .torch or .grain, or use tfrecorder.load().")
        info = self.manifest.splits[self.split]
        self.shards = list(info.shards)
        if any(s.num_examples < 0 for s in self.shards):  # TFRecorder 2.0: no counts
            raise ConfigError(
                f"{self.output_dir} was written by TFRecorder 2.0 and its manifest has no "
                f"record counts; convert the data again with tfrecorder to read it at random.")
        #: Path of each shard of the split, in file order.
        self.files = [storage.join(self.output_dir, s.file) for s in self.shards]
        counts = [s.num_examples for s in self.shards]
        self._starts = [0]
        for n in counts:
            self._starts.append(self._starts[-1] + n)
        self._entries: list[list[tuple[int, int]] | None] = [None] * len(self.shards)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()

    def __getstate__(self):
        state = dict(self.__dict__)
        for key in ("_fds", "_lock", "_pid"):
            del state[key]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def __del__(self, _getpid=os.getpid, _close=os.close):
        # Bound as defaults: at interpreter exit the os module may be gone already.
        if getattr(self, "_pid", None) == _getpid():
            self.close(_close)

    def close(self, _close=os.close) -> None:
        """Closes the open shard files (reading again opens them again)."""
        fds, self._fds = dict(getattr(self, "_fds", {})), {}
        for fd in fds.values():
            _close(fd)

    def __len__(self) -> int:
        return self._starts[-1]

    @property
    def index_files(self) -> list[str]:
        """The index file of each shard (``OUT/index/<shard>.idx``), in file order, for
        readers that take them (DALI's ``fn.readers.tfrecord(index_path=...)``); a
        directory converted before index files existed has none until
        ``tfrecorder.build_index`` writes them."""
        return [storage.join(self.output_dir, getattr(s, "index", None) or index.name(s.file))
                for s in self.shards]

    def locate(self, i: int) -> tuple[str, int, int]:
        """``(shard path, offset, framed length)`` of record ``i``, as the index lists it."""
        shard, j = self._position(i)
        offset, length = self._shard_entries(shard)[j]
        return self.files[shard], offset, length

    def record(self, i: int) -> bytes:
        """Record ``i``'s data: the serialized ``tf.train.Example``. CorruptRecordError
        naming the shard and offset when a checksum or a length is wrong."""
        shard, j = self._position(i)
        offset, length = self._shard_entries(shard)[j]
        path = self.files[shard]
        if storage.is_remote(path):
            framed = storage.read_range(path, offset, length)
        else:
            framed = os.pread(self._fd(shard), length, offset)
        return _unframe(framed, length, f"{path}, record at byte {offset}")

    def features(self, i: int) -> dict:
        """Record ``i``'s features as plain values (see ``values``)."""
        return values(self.record(i), self.manifest.features)

    def _position(self, i: int) -> tuple[int, int]:
        n = len(self)
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"record index {i!r}: give an int")
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} of split {self.split!r}, which has {n} records")
        shard = bisect.bisect_right(self._starts, i) - 1
        return shard, i - self._starts[shard]

    def _shard_entries(self, shard: int) -> list[tuple[int, int]]:
        entries = self._entries[shard]
        if entries is None:
            self._check_generation(shard)
            entries = self._entries[shard] = self._read_index(shard)
        return entries

    def _read_index(self, shard: int) -> list[tuple[int, int]]:
        info, path, where = self.shards[shard], self.files[shard], self.index_files[shard]
        try:
            entries = index.parse(storage.read_bytes(where), where)
        except FileNotFoundError:
            # Written before index files existed: the shard's length fields, read once.
            where = path
            with storage.open_file(path, "rb") as f:
                entries = list(index.scan(f, path))
        if len(entries) != info.num_examples:
            raise CorruptRecordError(
                f"{where}: lists {len(entries)} records, the manifest "
                f"{layout.MANIFEST} says {info.num_examples} for {info.file}; rebuild the "
                f"index files with tfrecorder.build_index({self.output_dir!r})")
        return entries

    def _check_generation(self, shard: int) -> None:
        if self._generation is None:
            return
        try:
            now = _generation(self.output_dir)
        except FileNotFoundError:
            now = "none (the manifest is gone)"
        if now != self._generation:
            raise OutputChangedError(
                f"{self.output_dir} was written again while it was being read: its manifest "
                f"was generation {self._generation} when this reader opened it and is "
                f"{now} now, so {self.shards[shard].file} may be another conversion's. "
                f"Open the directory again (a new reader, dataset or data source).")

    def _fd(self, shard: int) -> int:
        if self._pid != os.getpid():  # forked: open our own files, close the copies
            self.close()
            self._reset()
        fd = self._fds.get(shard)
        if fd is None:
            with self._lock:
                fd = self._fds.get(shard)
                if fd is None:
                    fd = self._fds[shard] = os.open(storage._local(self.files[shard]), os.O_RDONLY)
        return fd


def _generation(output_dir: str):
    """The manifest's ``generation`` field, or None when it has none (or no manifest:
    a TFRecorder 2.0 directory)."""
    try:
        data = storage.read_bytes(storage.join(output_dir, layout.MANIFEST))
    except FileNotFoundError:
        return None
    try:
        return json.loads(data).get("generation")
    except (ValueError, AttributeError):
        return None  # read_manifest says what is wrong with it


def _split_name(split: str, manifest: Manifest, output_dir: str) -> str:
    try:
        name = splits.canonical(split)
    except splits.UnknownSplit:
        name = str(split).strip().lower()
    if name not in manifest.splits:
        raise ConfigError(f"split {split!r} is not in {output_dir}; it has "
                          f"{sorted(manifest.splits)}")
    return name


def _unframe(framed: bytes, length: int, where: str) -> bytes:
    if len(framed) != length:
        raise CorruptRecordError(f"{where}: the shard ends {length - len(framed)} bytes "
                                 f"early; the shard or its index file is damaged")
    size = int.from_bytes(framed[:8], "little")
    if records.masked_crc32c(framed[:8]) != int.from_bytes(framed[8:_HEADER], "little"):
        raise CorruptRecordError(f"{where}: bad length checksum (is the index file the "
                                 f"shard's own?)")
    if size + index.FRAMING != length:
        raise CorruptRecordError(f"{where}: a record of {size} bytes where the index says "
                                 f"{length - index.FRAMING}; rebuild the index files")
    data = framed[_HEADER:_HEADER + size]
    if records.masked_crc32c(data) != int.from_bytes(framed[-4:], "little"):
        raise CorruptRecordError(f"{where}: bad data checksum")
    return data


def values(data: bytes, specs: dict[str, layout.FeatureSpec]) -> dict:
    """A serialized ``tf.train.Example`` as plain values, shaped by the manifest's
    feature ``specs``: a scalar bytes feature is ``bytes``, a scalar int64 or float
    feature an ``int`` or ``float``; a list feature is a NumPy array (``object`` of
    bytes, ``int64`` or ``float32``) of the declared shape, variable-length first
    dimension included (``[-1, 4]`` boxes -> shape ``(n, 4)``). Features the record
    holds but the manifest does not declare are returned as lists."""
    out = {}
    for key, (dtype, vals) in example.parse(data).items():
        spec = specs.get(key)
        if spec is None:
            out[key] = vals
        elif spec.shape == []:
            if len(vals) != 1:
                raise CorruptRecordError(f"feature {key!r} holds {len(vals)} values where "
                                         f"its manifest declares one")
            out[key] = vals[0]
        else:
            array = np.array(vals, dtype=_NUMPY[spec.dtype])
            shape = [-1 if d is None else d for d in (spec.shape or [-1])]
            out[key] = array.reshape(shape) if shape.count(-1) <= 1 else array
    return out


_NUMPY = {example.BYTES: object, example.INT64: np.int64, example.FLOAT: np.float32}


def permutation(size: int, seed: int, epoch: int) -> np.ndarray:
    """The order of epoch ``epoch``: a permutation of ``range(size)`` that depends only on
    ``(size, seed, epoch)``, on every machine and NumPy version (NumPy's frozen legacy
    generator), so a job that restarts at an epoch reads that epoch's order again."""
    for name, v in (("seed", seed), ("epoch", epoch)):
        if not isinstance(v, (int, np.integer)) or not 0 <= v < 1 << 32:
            raise ConfigError(f"{name}={v!r}; give an integer in [0, 2**32)")
    return np.random.RandomState([int(seed), int(epoch)]).permutation(size)


def part(indices: Sequence[int] | int, rank: int, world_size: int):
    """The part of ``indices`` (or of ``range(indices)``) that process ``rank`` of
    ``world_size`` reads: consecutive positions, parts disjoint, together every index
    once, their sizes differing by at most one (nothing is repeated to even them out)."""
    if not (isinstance(world_size, int) and isinstance(rank, int)
            and world_size >= 1 and 0 <= rank < world_size):
        raise ConfigError(f"rank={rank!r}, world_size={world_size!r}; give "
                          f"0 <= rank < world_size")
    if isinstance(indices, (int, np.integer)):
        indices = range(int(indices))
    n = len(indices)
    return indices[n * rank // world_size:n * (rank + 1) // world_size]
