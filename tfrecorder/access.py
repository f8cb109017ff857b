"""Random access to the records of one split, without TensorFlow: the reader under the
PyTorch, Grain and DALI adapters (``tfrecorder.torch``, ``tfrecorder.grain``).

``Reader(tfrecord_dir, split, version=None)`` lists the split's shards from the manifest
of the version (the latest by default) and each live record's place from the shards'
index files (``index/<shard>.idx``, see ``index``), or the version's live index where
it retired records of a shard; a shard without an index file is scanned once in memory
instead (its length fields only), and nothing is written (``_view`` holds these
policies for every reader). Record ``i`` is the ``i``-th live record of the split in
file order; reading it is one ranged read, local or ``gs://``, with both checksums
checked::

    reader = Reader("out/", "train")
    len(reader)                 # live records in the split, from the manifest
    reader.record(7)            # the serialized tf.train.Example
    reader.features(7)          # {"image": b"...", "label": 2, ...}
    order = permutation(len(reader), seed=0, epoch=3)
    mine = part(order, rank=1, world_size=4)

A reader reads one conversion (one version of it), from its first record to its last,
even while another process converts into the same directory or publishes a newer
version (docs/reliability.md): it pins the version's own manifest file
(``versions/KKKKK.json``, or ``tfrecorder.json`` in a folder without versions) and
its generation. A local shard is
opened first and its conversion checked after (the manifest still the one the reader
opened): from then on the open file is that conversion's, whatever is renamed over its
name. At most ``max_open_files`` shards stay open (64 by default, the least recently
read closed first), read with ``os.pread`` (no shared file position, so threads may
share a reader). A process forked from the one that opened them, a reader after
``close()`` and one unpickled in a spawned worker open the shards again, each checked
again. On ``gs://`` an object cannot be held open: each read is followed by a look at
the manifest's object (one small request), and a record is returned only if it is
still the reader's conversion; ``records()`` checks once for many records.
"""

from __future__ import annotations

import collections
import operator
import os
import threading
import time
import weakref
from typing import Collection, Sequence

import numpy as np

from tfrecorder import _deprecation as deprecation
from tfrecorder import _storage as storage
from tfrecorder._readers import ahead, cache as _cache, keys as _keys, partition
from tfrecorder._folder import example
from tfrecorder._folder import records
from tfrecorder._folder import layout, stored_keys, view as _view
from tfrecorder._errors import ConfigError, CorruptRecordError, OutputChangedError

__all__ = ["Reader", "part", "permutation", "shard_order", "values", "window_for"]

#: Shards a reader fetches into its cache ahead of the furthest one it read, in file
#: order (``Reader.read_ahead``).
READ_AHEAD = 2


class Reader:
    """The live records of split ``split`` of version ``version`` (None: the latest)
    of the folder ``tfrecord_dir``.

    ConfigError when the split or the version is not there, or the shards are
    gzip-compressed (a gzip stream cannot be entered at a record's offset: convert
    again without compression); IncompleteOutputError when the directory has no
    manifest.
    """

    @deprecation.renamed(output_dir="tfrecord_dir")
    def __init__(self, tfrecord_dir: str, split: str = "train", *, version: int | None = None,
                 max_open_files: int = 64, cache_dir: str | None = None,
                 cache_limit: int | str | None = None):
        tfrecord_dir = str(tfrecord_dir)
        cache = _settings(tfrecord_dir, max_open_files, cache_dir, cache_limit)
        _refuse_a_file(tfrecord_dir)
        self._start(_view.open_version(tfrecord_dir, version).view(split), max_open_files,
                    cache)

    @classmethod
    def of(cls, view: "_view.View", *, max_open_files: int = 64, cache_dir: str | None = None,
           cache_limit: int | str | None = None) -> "Reader":
        """A reader of ``view``, a split of a version already opened
        (``tfrecorder.open(out).reader(split)``): the folder is not opened again."""
        cache = _settings(view.output_dir, max_open_files, cache_dir, cache_limit)
        reader = cls.__new__(cls)
        reader._start(view, max_open_files, cache)
        return reader

    def _start(self, view: "_view.View", max_open_files: int, cache) -> None:
        self.output_dir = view.output_dir
        self.max_open_files = max_open_files
        #: The split's live records in the version opened (``_view.View``).
        self.view = view
        self.manifest = self.view.manifest
        self.split = self.view.split
        #: The version read (1 for a folder converted before versions existed).
        self.version = self.view.version.number
        self._generation = self.view.version.generation
        what = "reading at random (tfrecorder.access, .torch, .grain)"
        self.view.version.need_offsets(what)
        self.view.need_counts(what)
        self.shards = self.view.shards
        #: Path of each shard of the split, in file order.
        self.files = self.view.files
        sizes = [s.num_bytes for s in self.view.shards]
        #: The shard cache reads go through (``_cache.Cache``): None for a local folder,
        #: for ``cache_limit=0`` and for a folder without a generation (written before
        #: there was one: its entries could not be told from another conversion's).
        self.cache = cache if self._generation and min(sizes, default=0) >= 0 else None
        #: The cache entry of each shard (``_keys.Keys``): the version that wrote it.
        self._keys = _keys.Keys(self.view) if self.cache is not None else None
        #: Shards fetched into the cache ahead of the furthest one read, in file order,
        #: in a thread of each process, where they fit beside those being read (0: none).
        #: A ``Sampler(order="shards")`` sets 0: it fetches ahead of its own order.
        self.read_ahead = READ_AHEAD
        example.declare()  # here, not in each DataLoader worker forked from this process
        self._reset()
        if self.cache is not None:
            self._read_every_index()

    def _reset(self, pin=None) -> None:
        self._pid = os.getpid()
        self._fds: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._kept: tuple[int, _cache.Pin] | None = None  # the one entry kept pinned
        self._kept_users = 0  # threads reading it now
        self._lock = threading.RLock()
        self._looked = -1.0  # when the last look that found the manifest ours began
        self._asked: set[int] = set()  # shards this process asked to be fetched ahead
        self._waiting: list[int] = []  # those its read-ahead thread has still to fetch
        self._fetcher: threading.Thread | None = None  # that thread, while it runs
        #: How the manifest looked when last found to be ours: ``(open file, stamp)``
        #: locally, ``(None, stamp)`` on an object store.
        self._pin = pin

    def _shared_pin(self):
        """``_pin`` where a copy of the reader may keep it: an object store's stamp (no
        open file), so that a worker's first check is one look at the manifest, not a
        look and a read; a local pin holds a file, which each process opens again."""
        pin = getattr(self, "_pin", None)
        return pin if pin is not None and pin[0] is None else None

    def __getstate__(self):
        state = dict(self.__dict__)
        for key in ("_fds", "_kept", "_kept_users", "_lock", "_pid", "_pin", "_asked",
                    "_waiting", "_fetcher"):
            del state[key]
        state["_pin_shared"] = self._shared_pin()
        return state

    def __setstate__(self, state):
        pin = state.pop("_pin_shared", None)
        self.__dict__.update(state)
        self._reset(pin)

    def __del__(self, _getpid=os.getpid, _close=os.close):
        # Bound as defaults: at interpreter exit the os module may be gone already.
        if getattr(self, "_pid", None) == _getpid():
            self.close(_close)

    def close(self, _close=os.close, _fresh=collections.OrderedDict) -> None:
        """Closes the open shard files (reading again opens them again, and checks
        again that the directory still holds the reader's conversion)."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:  # _fresh bound as a default: at exit collections may be gone
            fds, self._fds = list(self._fds.values()), _fresh()
            pin, self._pin = self._pin, None
            kept, self._kept = self._kept, None
        if pin is not None and pin[0] is not None:
            fds.append(pin[0])
        for fd in fds:
            _close(fd)
        if kept is not None:
            kept[1].close(_close)

    def _forked(self) -> None:
        """In a process forked from the one that opened the files: close the copies
        (without the lock, which a thread of the parent may have held at the fork) and
        open, and check, again."""
        fds = list(self._fds.values())
        if self._pin is not None and self._pin[0] is not None:
            fds.append(self._pin[0])
        kept = self._kept
        self._reset(self._shared_pin())
        for fd in fds:
            os.close(fd)
        if kept is not None:  # the copy only: the parent's pin stays held
            kept[1].close()

    def __len__(self) -> int:
        return len(self.view)

    @property
    def index_files(self) -> list[str]:
        """The index file of each shard, in file order, listing the records the version
        reads: the version's live index (``versions/KKKKK/index/<shard>.idx``) where it
        retired records of the shard, else the shard's own (``OUT/index/<shard>.idx``);
        for readers that take them (DALI's ``fn.readers.tfrecord(index_path=...)``),
        which then skip retired records by themselves. A directory converted before
        index files existed has none until ``tfrecorder.build_index`` writes them."""
        return self.view.index_files

    def locate(self, i: int) -> tuple[str, int, int]:
        """``(shard path, offset, framed length)`` of record ``i``, as the index lists it."""
        shard, j = self._position(i)
        offset, length = self._shard_entries(shard)[j]
        return self.files[shard], offset, length

    def record(self, i: int) -> bytes:
        """Record ``i``'s data: the serialized ``tf.train.Example``. CorruptRecordError
        naming the shard and offset when a checksum or a length is wrong;
        OutputChangedError when the directory holds another conversion than the one the
        reader opened and the record's shard is not open already."""
        return self.records([i])[0]

    def records(self, indices) -> list[bytes]:
        """The data of records ``indices``, in that order: ``record`` for many. From a
        cache, the shards they are in and not here yet are fetched together first; without
        one, on ``gs://``, one look at the manifest after them all instead of one per
        record."""
        if self._pid != os.getpid():
            self._forked()
        out, shard = [], 0
        cached = self.cache is not None
        remote = not cached and storage.is_remote(self.output_dir)
        try:
            places = [self._position(i) for i in indices]
            if cached:
                got: dict[tuple[int, int], bytes] = {}
                wanted: dict[int, list[int]] = {}
                for shard, j in places:
                    wanted.setdefault(shard, []).append(j)
                self._fetch_batch(list(wanted))
                for shard, js in wanted.items():
                    got.update(self._read_cached(shard, js))
                self._fetch_ahead(max(wanted, default=-1))
                out = [got[p] for p in places]
            else:
                for shard, j in places:
                    out.append(self._read(shard, j, remote))
        except (OSError, CorruptRecordError) as e:
            if not isinstance(e, OutputChangedError):
                self._check_generation(shard)  # a shard gone or cut: the directory replaced?
            raise
        if remote:  # read first, checked after: the data was the conversion's if still
            self._check_generation(shard)
        return out

    def _read(self, shard: int, j: int, remote: bool) -> bytes:
        offset, length = self._shard_entries(shard)[j]
        where = f"{self.files[shard]}, record at byte {offset}"
        if remote:
            return records.unframe(storage.read_range(self.files[shard], offset, length),
                                   length, where)
        return records.unframe(os.pread(self._fd(shard), length, offset), length, where)

    def _read_cached(self, shard: int, js: list[int]) -> dict[tuple[int, int], bytes]:
        """Records ``js`` of ``shard`` from its cache entry, pinned while they are read
        (``_use``)."""
        entries = self._shard_entries(shard)
        pin = self._use(shard)
        out = {}
        try:
            for j in js:
                offset, length = entries[j]
                where = f"{self.files[shard]}, record at byte {offset}"
                try:
                    out[shard, j] = records.unframe(os.pread(pin.fd, length, offset),
                                                    length, where)
                except CorruptRecordError:
                    # Damaged on this disk since it was fetched: fetched again, once; a
                    # record still bad then is bad in the bucket.
                    self.cache.drop(pin)
                    self._done(shard, pin, damaged=True)
                    pin = self._use(shard)
                    out[shard, j] = records.unframe(os.pread(pin.fd, length, offset),
                                                    length, f"{where} (fetched again)")
        finally:
            self._done(shard, pin)
        return out

    def _use(self, shard: int) -> _cache.Pin:
        """Shard ``shard``'s entry, pinned: the one this process kept from its last
        read, or pinned now. A process keeps one entry pinned between reads (the shard
        an order that streams is in the middle of), never more, so the cache holds at
        most its limit plus one shard per reading process (and thread), whatever the
        order."""
        with self._lock:
            kept = self._kept
            if kept is not None and kept[0] == shard:
                self._kept_users += 1
                return kept[1]
            if kept is not None and self._kept_users == 0:
                self._kept = None  # let go before another is pinned: one at a time
            else:
                kept = None
        if kept is not None:
            kept[1].close()
        return self._pin_entry(shard)

    def _done(self, shard: int, pin: _cache.Pin, damaged: bool = False) -> None:
        """``pin`` read: kept as the process's one pinned entry, in place of the one
        kept before unless that one is being read; else let go."""
        with self._lock:
            if self._kept is not None and self._kept[1] is pin:
                self._kept_users -= 1
                if not damaged:
                    return
                self._kept = None
            elif not damaged and self._kept_users == 0:
                pin, self._kept = (self._kept[1] if self._kept else None), (shard, pin)
        if pin is not None:
            pin.close()

    def _fetch_batch(self, shards: list[int]) -> None:
        """The shards of one batch that are not here, fetched at the same time where
        they fit in the limit beside the shards being read and the batch's others
        (``room_only``); those that do not fit are fetched one by one as they are
        read, each evicting what was read before it."""
        missing = [s for s in shards if not self.cache.holds(self._cache_key(s))]
        if len(missing) > 1:
            storage.each(lambda s: self.prefetch(s, room_only=True, keep=shards), missing,
                         at_once=True)

    def prefetch(self, shard: int, *, room_only: bool = False, keep=(),
                 wait: bool = True) -> bool:
        """Fetches shard ``shard`` into the cache, if there is one and it is not there
        (without keeping it open): reading ahead of an order. With ``room_only``, only
        if it fits in the cache's limit beside the shards being read and the shards
        ``keep`` (still to be read); False if not. With ``wait=False``, a shard that
        another thread or process is fetching is left to it."""
        if self.cache is None:
            return True
        return self.cache.fetch(self._cache_key(shard), self.files[shard],
                                self.view.shards[shard].num_bytes,
                                lambda: self._check_generation(shard), room_only=room_only,
                                keep=frozenset(self._cache_key(s) for s in keep), wait=wait)

    def _fetch_ahead(self, shard: int) -> None:
        """The ``read_ahead`` shards after ``shard`` handed to this process's read-ahead
        thread, each once: a reader going through the split in file order, as a
        DataLoader without shuffling does, finds the next shard fetched while it reads
        this one, not after. The thread runs while it has shards to fetch."""
        wanted = [s for s in range(shard + 1, min(len(self.files), shard + 1 + self.read_ahead))
                  if s not in self._asked]
        self._asked.update(wanted)
        # Those here already (a later epoch) cost a look at the folder, not a thread.
        wanted = [s for s in wanted if not self.cache.holds(self._cache_key(s))]
        if not wanted:
            return
        with self._lock:
            self._waiting.extend(wanted)
            if self._fetcher is None:
                self._fetcher = threading.Thread(target=ahead.fetch_waiting, daemon=True,
                                                 args=(weakref.ref(self),),
                                                 name="tfrecorder-read-ahead")
                self._fetcher.start()

    def _cache_key(self, shard: int) -> str:
        return self._keys(self.view.shards[shard])

    def _pin_entry(self, shard: int) -> _cache.Pin:
        """Shard ``shard``'s cache entry, open and pinned, fetched first if need be; its
        conversion is checked after a fetch, before the entry is cached."""
        return self.cache.pin(self._cache_key(shard), self.files[shard],
                              self.view.shards[shard].num_bytes,
                              lambda: self._check_generation(shard))

    def features(self, i: int) -> dict:
        """Record ``i``'s features as plain values (see ``values``)."""
        data = self.record(i)
        try:
            return values(data, self.manifest)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{self.view.where(i)}: {e}") from None

    def _position(self, i: int) -> tuple[int, int]:
        n = len(self)
        try:  # any integer: int, NumPy's, a one-element torch tensor (``__index__``)
            if isinstance(i, (bool, np.bool_)):
                raise TypeError
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"record position {i!r}: give an int") from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} of split {self.split!r}, which has {n} records")
        return self.view.position(i)

    def _shard_entries(self, shard: int) -> list[tuple[int, int]]:
        entries = self.view.known(shard)
        if entries is None:
            # Read, then checked: an index read from another conversion is refused here
            # (on gs:// the check after each read covers it).
            entries = self.view.read_entries(shard)
            if self.cache is not None or not storage.is_remote(self.files[shard]):
                self._check_generation(shard)
            self.view.keep(shard, entries)
        return entries

    def _read_every_index(self) -> None:
        """Every shard's entries, read now (requests in flight together) and checked
        once: a reader through the cache makes no other request once its shards are
        there, and DataLoader workers forked from it, or Grain's unpickled copies, get
        them with it instead of each asking the bucket again."""
        got = storage.each(self.view.read_entries, range(len(self.shards)), at_once=True)
        self._check_generation(0)
        for shard, entries in enumerate(got):
            self.view.keep(shard, entries)

    def _check_generation(self, shard: int) -> None:
        """OutputChangedError unless the manifest is still the one of the conversion the
        reader opened. Cheap when nothing changed: the manifest's file status (or, on
        gs://, its object generation) against the one last seen; its ``generation``
        field is read only when that differs (``tfrecorder index`` rewrites the manifest
        of the same conversion). Locally the manifest stays open, so its file cannot be
        deleted and its inode reused by another while the reader compares them."""
        if self._generation is None:
            return
        asked = time.monotonic()
        with self._lock:
            if self._looked >= asked:
                # A look that began after this call found the manifest unchanged: the
                # same evidence as one more look. Shards fetched together (a batch's,
                # in a shuffled order) wait for one or two looks, not one each.
                return
            where = self.view.version.pin
            looking = time.monotonic()
            if self._pin is not None and self._pin[1] == _view.stamp(where):
                self._looked = looking
                return
            now = "none (the manifest is gone)"
            try:
                pin = _view.open_pin(where)
            except FileNotFoundError:
                pin = None
            if pin is not None:
                now = _view.generation_of(pin[2])
                if now == self._generation:
                    self._looked = looking
                    old, self._pin = self._pin, pin[:2]
                    if old is not None and old[0] is not None:
                        os.close(old[0])
                    return
                if pin[0] is not None:
                    os.close(pin[0])
            raise OutputChangedError(
                f"{self.output_dir} was written again while it was being read: its manifest "
                f"was generation {self._generation} when this reader opened it and is "
                f"{now} now, so {self.shards[shard].file} may be another conversion's. "
                f"Open the directory again (a new reader, dataset or data source).")

    def _fd(self, shard: int) -> int:
        """The open file of ``shard``: opened first, then the conversion checked, so the
        file is the reader's conversion whatever replaces its name later."""
        with self._lock:
            fd = self._fds.get(shard)
            if fd is not None:
                self._fds.move_to_end(shard)
                return fd
            fd = os.open(storage._local(self.files[shard]), os.O_RDONLY)
            try:
                self._check_generation(shard)
            except BaseException:
                os.close(fd)
                raise
            self._fds[shard] = fd
            while len(self._fds) > self.max_open_files:
                os.close(self._fds.popitem(last=False)[1])
            return fd


def _settings(output_dir: str, max_open_files, cache_dir, cache_limit):
    """The shard cache of a reader of ``output_dir`` (``_cache.for_source``);
    ConfigError for a bad setting, before anything is read."""
    cache = _cache.for_source(output_dir, cache_dir, cache_limit)
    if not (isinstance(max_open_files, int) and max_open_files >= 1):
        raise ConfigError(f"max_open_files={max_open_files!r}; give an int >= 1")
    return cache


def _refuse_a_file(output_dir: str) -> None:
    """ConfigError when ``output_dir`` is a file (the CSV given for the output folder)."""
    if not storage.is_remote(output_dir) and os.path.isfile(storage._local(output_dir)):
        raise ConfigError(
            f"{output_dir} is a file, not the folder a conversion wrote; give the output "
            f"folder (the one that holds {layout.MANIFEST}), not the table it was made from")


def values(data: bytes, specs: "dict[str, layout.FeatureSpec] | _view.Manifest",
           keys: Collection[str] | None = None) -> dict:
    """A serialized ``tf.train.Example`` as plain values, shaped by the manifest's
    feature ``specs`` (or the Manifest, which reads a folder of either layout in our
    keys: ``stored_keys``): a scalar bytes feature is ``bytes``, a scalar int64 or float
    feature an ``int`` or ``float``; a list feature is a NumPy array (``object`` of
    bytes, ``int64`` or ``float32``) of the declared shape, variable-length first
    dimension included (``[-1, 4]`` boxes -> shape ``(n, 4)``). Features the record
    holds but the manifest does not declare are returned as lists. With ``keys``, only
    those features are parsed and returned (a reader that wants the image and the
    label skips the rest). CorruptRecordError for a feature of another kind than the
    manifest declares, or holding more than one list (``example.parse``)."""
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys={keys!r}: give a list of feature names, such as [{keys!r}]")
    out = {}
    # The kind of every feature read is checked against the manifest (example.parse).
    parsed = stored_keys.parse(data, specs, only=keys)
    specs = getattr(specs, "features", specs)  # a Manifest's: ours, whatever its layout
    for key, (dtype, vals) in parsed.items():
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
    ``(size, seed, epoch)``, on every machine and NumPy release (NumPy's frozen legacy
    generator), so a job that restarts at an epoch reads that epoch's order again."""
    for name, v in (("seed", seed), ("epoch", epoch)):
        if not isinstance(v, (int, np.integer)) or not 0 <= v < 1 << 32:
            raise ConfigError(f"{name}={v!r}; give an integer in [0, 2**32)")
    return np.random.RandomState([int(seed), int(epoch)]).permutation(size)


#: Shards whose records ``shard_order`` shuffles together.
WINDOW = 4


def shard_order(counts: Sequence[int], seed: int, epoch: int, window: int = WINDOW) -> np.ndarray:
    """The order of epoch ``epoch`` that streams: the shards (``counts`` records each, in
    file order) shuffled, then taken ``window`` at a time, the records of each window
    shuffled together. A permutation of ``range(sum(counts))`` that depends only on
    ``(counts, seed, epoch, window)``, as ``permutation``, so ``part`` and a restart at
    a position work alike; a reader needs about ``window`` shards at a time, not the
    split, so a cache smaller than the split fetches each shard about once an epoch."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ConfigError(f"window={window!r}; give the shards to shuffle together, an "
                          f"int >= 1")
    counts = [int(c) for c in counts]
    shards = permutation(len(counts), seed, epoch)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rng = np.random.RandomState([int(seed), int(epoch), 1])  # not permutation's stream
    windows = []
    for k in range(0, len(shards), int(window)):
        records = np.concatenate([np.arange(starts[s], starts[s + 1])
                                  for s in shards[k:k + int(window)]])
        windows.append(records[rng.permutation(len(records))])
    return np.concatenate(windows) if windows else np.zeros(0, np.int64)


def window_for(reader: Reader) -> int:
    """The ``shard_order`` window of a reader that gives none: ``WINDOW``, or, through a
    cache whose ``cache_limit`` was given, the largest window up to it of which two
    fit under the limit (the window being read and the next, which a DataLoader's
    batches in flight reach before the last ones of this window are done), counting
    the largest shard, at least 1. It depends on the settings and the shards only, not
    on the disk, so a job that restarts orders its epochs alike."""
    cache = reader.cache
    if cache is None or not cache.given:
        return WINDOW
    largest = max((s.num_bytes for s in reader.shards), default=1)
    return max(1, min(WINDOW, cache.fits(largest) // 2))


def part(indices: Sequence[int] | int, rank: int, world_size: int):
    """The part of ``indices`` (or of ``range(indices)``) that process ``rank`` of
    ``world_size`` reads: consecutive positions, parts disjoint, together every one
    once, their sizes differing by at most one (nothing is repeated to even them out)."""
    if not (isinstance(world_size, int) and isinstance(rank, int)
            and world_size >= 1 and 0 <= rank < world_size):
        raise ConfigError(f"rank={rank!r}, world_size={world_size!r}; give "
                          f"0 <= rank < world_size")
    if isinstance(indices, (int, np.integer)):
        indices = range(int(indices))
    start, end = partition.span(len(indices), rank, world_size)  # as load(shard=) cuts
    return indices[start:end]
