"""Writes one shard: a ShardTask -> one TFRecord file, its statistics, and the rows that
could not be written with their reasons. No Beam: the pipeline only calls ``write``.

A shard is written into the run's own folder, under a temporary name renamed when the
shard is complete (locally), and the run's last step moves every shard into place
(``publishing.finish``). On an object store, into a directory that held no previous output,
a shard is uploaded under its final name directly: the store makes an object visible
only once its upload is complete, and a rename there would copy the whole shard. Either
way a file with a shard name is always whole, and a retried shard writes its file again.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import gzip
import hashlib
import os
import re
import threading
from typing import Any, Callable, Iterator, Mapping

from tfrecorder import _storage as storage
from tfrecorder._writer import class_mask, image, orientation
from tfrecorder._folder.image_headers import ImageInfo, ImageProblem
from tfrecorder._folder import example
from tfrecorder._folder import records
from tfrecorder._folder import garden, index, layout, rows
from tfrecorder._report import looker, measures
from tfrecorder._writer.run_metadata import strict_json
from tfrecorder._folder.ledger import RunFolder
from tfrecorder._writer.plan import ShardTask

#: Reads kept in flight per shard for remote images, so per-object latency overlaps.
REMOTE_READ_THREADS = 8
#: Rows between two progress reports of a shard.
REPORT_EVERY = 256


@dataclasses.dataclass
class ShardStats:
    """What one written shard holds."""

    split: str
    number: int             # the shard's number in its split (ShardName.number)
    count: int
    filename: str
    num_examples: int
    num_bytes: int
    rows: int = 0           # input rows in this shard's records (merged rows count each)
    source_bytes: int = 0
    channels: dict[int, int] = dataclasses.field(default_factory=dict)
    labels: dict[int, int] = dataclasses.field(default_factory=dict)
    formats: dict[str, int] = dataclasses.field(default_factory=dict)  # image_format -> records
    #: Images re-encoded to be readable (``ImageInfo.source_format``): their format ->
    #: [images, their files' bytes, the bytes stored].
    reencoded: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    #: JPEGs turned upright by their EXIF orientation (``orientation``): [images, the
    #: bytes they would have been stored as, the bytes stored, and the photos kept in
    #: the sensor's frame instead, their tag set to 1, as their source sizes them so].
    turned: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0, 0])
    digest: str = ""        # of every record's length and checksum (Manifest.generation)
    index_file: str | None = None  # its index file (index.name); None when none is written
    rows_file: str | None = None   # its rows file (layout.rows_file); None when none is written
    look: looker.Looker | None = None  # what its images showed, for the data report
    #: A shard of an earlier version whose live records an update keeps: read from its
    #: rows file for the data report only, never written or listed again.
    kept: bool = False


@dataclasses.dataclass
class Quarantined:
    """A row that was not written, and why. One line of ``errors.jsonl``."""

    row: Any
    split: str
    image_uri: str | None
    values: dict
    failed_at: str    # "read" (the file) or "image" (its content)
    reason: str

    def to_json(self) -> dict:
        """The errors.jsonl line, whose key for ``failed_at`` is ``stage``."""
        d = dataclasses.asdict(self)
        d["stage"] = d.pop("failed_at")
        return d


def quarantined(row, columns: tuple, failed_at: str, reason: str) -> list[Quarantined]:
    """The lines of ``row`` (a ``block.Row``) in the errors file: one per input row, as
    rows merged into one record (an image listed with several labels) are quarantined
    each with its values."""
    return [Quarantined(rid, row.split, row.image_uri, dict(zip(columns, values)), failed_at,
                        reason) for rid, values in ((row.row, row.values), *row.merged)]


def missing_file(row, columns: tuple) -> list[Quarantined]:
    """``quarantined`` for a row whose image file is not there, as a read finds it."""
    return quarantined(row, columns, "read", _read_reason(FileNotFoundError(),
                                                           row.image_uri))


#: Images larger than this are quarantined unread (Options.max_image_bytes).
MAX_IMAGE_BYTES = 256 << 20


@dataclasses.dataclass(frozen=True)
class WriteSettings:
    """How every shard of a run is written."""

    run: RunFolder                   # where the run writes its shards
    columns: tuple                   # names of each row's values, for the errors file
    check: str = "header"            # image.CHECKS
    max_image_bytes: int = MAX_IMAGE_BYTES
    sizing: image.Sizing | None = None  # pre-sizing, or None to store images as they are
    write_index: bool = True         # an index file per uncompressed shard (index.py)
    # Where a row's values hold its image column: its value as the table wrote it is
    # stored as image_uri. None: the resolved path is stored.
    image_column: int | None = None
    near_duplicates: bool = False    # hash every image for the data report's near pairs
    near_distance: int = measures.MAX_DISTANCE  # ... within this many bits
    # The rows file of each shard (rows.py): the label names of the ids, where the match
    # key is in a row's values (None: the image's value as stored in image_uri), and
    # which values are other features of the row (written under "features").
    rows: bool = True
    label_names: tuple = ()
    key_column: int | None = None
    feature_columns: tuple = ()
    # Images prepared at once where preparing is CPU work (pre-sizing, a full decode, the
    # report's small decode), which Pillow does without the GIL: the workers of a run
    # in the calling process; one where each worker is a process of its own.
    work_threads: int = 1
    # The records' feature keys (garden.LAYOUTS); for "model_garden", the class id each
    # label id is written as, the label's feature, and the source's image ids by the
    # image's value in the table (COCO's), where it has them.
    layout: str = "tfrecorder"
    class_ids: tuple = ()
    label_key: str | None = None
    source_ids: Mapping | None = None
    # Records place geometry on their pixels (boxes, ...): a JPEG with an EXIF
    # orientation is stored turned as it is shown, without the tag (orientation.py).
    upright: bool = False
    # The source's (width, height) by the image's value in the table (COCO's), where it
    # gives them: a photo it sizes in the sensor's frame has its boxes there too.
    source_sizes: Mapping | None = None

    def reader(self) -> Callable[[str], tuple]:
        """Reads an image: ``(bytes, size, stamp)`` (``storage.read_file_stamped``)."""
        return functools.partial(storage.read_file_stamped, max_bytes=self.max_image_bytes,
                                 stamped=self.rows)


def _read(uri: str, read=storage.read_bytes, then=None):
    try:
        data = read(uri)
    except OSError as e:
        return e
    return data if then is None else then(data)


def read_all(uris: list[str | None], threads: int, read=storage.read_bytes,
             then: Callable[[Any], Any] | None = None) -> Iterator[Any]:
    """What ``read`` gives for each uri (or the OSError), in order, with ``threads``
    reads in flight; with ``then``, ``then(what read gave)`` computed in the same thread
    instead.

    ``read`` fetches one uri; remote object stores answer each read after a latency,
    so overlapping a few keeps a shard from waiting on them one by one. ``then`` is the
    CPU work on an image (decoding, resizing), which Pillow does without the GIL.
    """
    if threads <= 1:
        for uri in uris:
            yield None if uri is None else _read(uri, read, then)
        return
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        window: collections.deque = collections.deque()
        for uri in uris:
            window.append(None if uri is None else pool.submit(_read, uri, read, then))
            if len(window) >= 2 * threads:
                f = window.popleft()
                yield None if f is None else f.result()
        while window:
            f = window.popleft()
            yield None if f is None else f.result()


def _digest_all(batch: list) -> list[str]:
    return [measures.digest(data) for data in batch]


class _Digests:
    """The SHA-256 of a shard's images (``measures.digest``), taken beside the writing
    in a thread of its own: hashlib lets go of the GIL while it hashes, so the writer's
    Python and the hashing share two cores. ``add`` gives each image its number;
    ``results`` the digests in that order. Images go over in batches: a hand-over per
    image would cost about what hashing a photo does."""

    BATCH = 32

    def __init__(self):
        self._batch: list = []
        self._done: list = []
        self._count = 0

    def add(self, data: bytes) -> int:
        self._batch.append(data)
        if len(self._batch) >= self.BATCH:
            self._send()
        self._count += 1
        return self._count - 1

    def _send(self) -> None:
        if self._batch:
            # The pool each time: one an interrupted submit shut down is replaced.
            self._done.append(storage.submit_kept(_digest_pool(), _forget_digest_pool,
                                                  _digest_all, self._batch))
            self._batch = []

    def results(self) -> list[str]:
        self._send()
        return [sha for done in self._done for sha in done.result()]

    def close(self) -> None:
        """Drops what is still to hash (a shard that failed); the thread stays, for the
        next shard."""
        for done in self._done:
            done.cancel()
        self._batch = []


_pool: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _digest_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The thread that hashes shards' images: one per process, kept from shard to
    shard (started and joined per shard, it cost 17 ms of a 24-shard conversion). A
    process forked from this one starts its own: the parent's thread is not in it."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(),
                     concurrent.futures.ThreadPoolExecutor(1, "tfrecorder-digests"))
        return _pool[1]


def _forget_digest_pool(pool: concurrent.futures.ThreadPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is not None and _pool[1] is pool:
            _pool = None


def _read_reason(err: OSError, uri: str) -> str:
    if isinstance(err, FileNotFoundError):
        return f"image file not found: {uri}"
    if isinstance(err, (IsADirectoryError, storage.NotAFileError)):
        return f"not a regular image file: {err}"
    if isinstance(err, storage.FileTooLargeError):
        return f"image file too large: {err} (raise max_image_bytes if it is genuine)"
    if isinstance(err, PermissionError):
        return "no permission to read the image file"
    return f"cannot read the image file ({type(err).__name__}: {err})"


def _named(reason: str, uri: str) -> str:
    """``reason`` with the file it is about where Pillow names only its buffer
    (``<_io.BytesIO object at 0x...>``)."""
    return re.sub(r"<_io\.BytesIO object at 0x[0-9a-fA-F]+>", lambda _: uri, reason)


@functools.lru_cache(maxsize=4096)
def _small_feature(kind: str, value) -> example.Feature:
    # Heights, widths, channel counts and formats repeat across images: encode each once.
    return example.feature(kind, [value])


def image_features(data: bytes, info: ImageInfo, uri: str,
                   written: str | None = None) -> dict:
    """The image features of one record: ``layout.IMAGE_FEATURES``, each set, from the
    image read from ``uri``; ``image_uri`` is ``written``, the table's value (``uri``
    when None). The table's own value, not the resolved path: where the table lies
    must not show in the output, and a relative path resolves again beside it."""
    return {
        layout.IMAGE: example.LargeBytesFeature(data),
        layout.IMAGE_FORMAT: _small_feature(example.BYTES, info.format),
        layout.IMAGE_NAME: example.bytes_feature([os.path.basename(uri.rstrip("/"))]),
        # A local file name that is not UTF-8 (os.listdir gives its bytes as surrogates)
        # is stored as its bytes, and read back as the same str.
        layout.IMAGE_URI: example.bytes_feature(
            [(uri if written is None else written).encode("utf-8", "surrogateescape")]),
        layout.IMAGE_HEIGHT: _small_feature(example.INT64, info.height),
        layout.IMAGE_WIDTH: _small_feature(example.INT64, info.width),
        layout.IMAGE_CHANNELS: _small_feature(example.INT64, info.channels),
    }


def open_for_write(path: str, gzipped: bool):
    """``(stream to write records to, the file under it)``: the same for a plain shard;
    for a gzip shard, a gzip stream whose header holds no name and no time."""
    raw = storage.open_file(path, "wb")
    if not gzipped:
        return raw, raw
    # mtime=0 and no file name in the header: the same records give the same bytes.
    return gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6), raw


def write(task: ShardTask, settings: WriteSettings,
          progress: Callable[[int], None] | None = None) -> tuple[ShardStats, list[Quarantined]]:
    """Writes ``task`` as one shard file; returns its stats and bad rows.

    Expected per-row failures (unreadable file, broken image) are returned as
    Quarantined rows; anything else raises and fails the shard. ``progress``, if
    given, is called now and then with the number of rows done so far.
    """
    columns = tuple(settings.columns)
    gzipped = task.filename.endswith(".gz")
    folder = settings.run.shard_folder
    final = storage.join(folder, task.filename)
    if storage.is_remote(final):
        # An object store creates an object only when its upload completes: writing the
        # final name directly is already all-or-nothing.
        tmp = final
    else:
        storage.makedirs(folder)
        tmp = storage.join(folder, layout.shard_temp_name(task.filename))
    uris = [row.image_uri for row in task.rows]
    first = next((u for u in uris if u is not None), None)
    threads = REMOTE_READ_THREADS if first is not None and storage.is_remote(first) else 1

    stats = ShardStats(task.split, task.number, task.count, task.filename, 0, 0)
    # The report's statistics need pixels where the images are decoded anyway (pre-sizing)
    # or hashed; each is then seen small, never decoded twice at full size.
    look = stats.look = looker.Looker(near=settings.near_duplicates,
                                       distance=settings.near_distance,
                                       pixels=settings.sizing is not None)
    wants_image = look.wants_image()
    if settings.sizing is not None or wants_image or settings.check == "decode":
        threads = max(threads, settings.work_threads)
    # Read and prepared here, in this thread: the digests are taken beside it.
    digests = _Digests() if threads <= 1 and not wants_image else None
    quality = (settings.sizing.jpeg_quality if settings.sizing is not None
               else orientation.QUALITY)

    def prepared(got):
        """In a reading thread: the bytes to store, what they decode to, the report's
        measure, the source's size and the file's (size, stamp); or the ImageProblem.
        ``got`` is ``(bytes, size, stamp)`` from ``settings.reader()``; a reader given
        through the seam may give the bytes alone (no stamp, then)."""
        data, file_size, file_stamp = got if isinstance(got, tuple) else (got, len(got), None)
        decoded: list = []
        try:
            stored, info = image.prepare(data, settings.check, settings.sizing,
                                         seen=decoded.append if wants_image else None)
            turned_from = None
            if (settings.upright and info.format == "jpeg"
                    and orientation.of_jpeg(stored) != 1):
                turned_from = (stored, info)
                stored, info = orientation.upright(stored, quality)
        except ImageProblem as e:
            return e
        measured = ((digests.add(data), None, None, {}) if digests is not None
                    else look.measure(data, decoded[0] if decoded else None))
        return stored, info, measured, len(data), file_size, file_stamp, turned_from

    bad: list[Quarantined] = []
    digest = hashlib.blake2b(digest_size=16)
    framed: list[int] = []  # each record's framed length: the index, without a second pass
    lines: list[dict] = []  # the rows file, one entry per record
    names = settings.label_names
    out, raw = open_for_write(tmp, gzipped)
    try:
        for done, (row, ready) in enumerate(zip(task.rows, read_all(
                uris, threads, settings.reader(), then=prepared))):
            if progress is not None and done % REPORT_EVERY == 0:
                progress(done)
            features = row.features
            seen: dict = {}
            if row.image_uri is not None:
                reason, failed_at = None, "read"
                if isinstance(ready, OSError):
                    reason = _read_reason(ready, row.image_uri)
                elif isinstance(ready, ImageProblem):
                    reason, failed_at = _named(str(ready), row.image_uri), "image"
                if reason is not None:
                    bad.extend(quarantined(row, columns, failed_at, reason))
                    continue
                stored, info, measured, source_size, file_size, file_stamp, turned_from = ready
                written = (None if settings.image_column is None
                           else row.values[settings.image_column].strip())
                if turned_from is not None:
                    unturned, unturned_info = turned_from
                    given = (settings.source_sizes or {}).get(
                        row.image_uri if written is None else written)
                    if orientation.in_sensor_frame(given, unturned_info, info):
                        # Its boxes were made relative to the sensor's frame: that frame,
                        # told as upright, is what every decoder must see.
                        stored, info = orientation.without_tag(unturned), unturned_info
                        stats.turned[3] += 1
                    else:
                        stats.turned[:3] = [stats.turned[0] + 1, stats.turned[1] + len(unturned),
                                            stats.turned[2] + len(stored)]
                features = {**features, **image_features(stored, info, row.image_uri, written)}
                mask = features.get(layout.SEGMENTATION_MASK)
                if isinstance(mask, str):  # the mask's path (validation): its file's bytes
                    found, stage, reason = class_mask.read(mask, info.width, info.height,
                                                           settings.max_image_bytes)
                    if found is None:
                        bad.extend(quarantined(row, columns, stage, reason))
                        continue
                    features.update(found)
                ref = (row.split, task.number, stats.num_examples, row.row,
                       row.image_uri if written is None else written, tuple(row.labels))
                sha, phash, sums, problems = look.add(ref, info.width, info.height, measured,
                                                      info.channels)
                if _BOXES in features:  # a detection record: its boxes' problems too
                    problems = {**problems, **look.add_boxes(
                        ref, _box_values(features), info.width, info.height)}
                seen = dict(size=file_size, stamp=file_stamp, sha256=sha, phash=phash,
                            width=info.width, height=info.height, fmt=info.format,
                            hashed=look.near, px=sums, measured=wants_image,
                            issues=problems)
                stats.source_bytes += source_size
                stats.channels[info.channels] = stats.channels.get(info.channels, 0) + 1
                stats.formats[info.format] = stats.formats.get(info.format, 0) + 1
                if info.source_format is not None:
                    cost = stats.reencoded.setdefault(info.source_format, [0, 0, 0])
                    cost[0] += 1
                    cost[1] += source_size
                    cost[2] += len(stored)
            if settings.layout == garden.MODEL_GARDEN:
                features = _in_garden_keys(features, row, settings, written if seen else None)
            framed.append(records.write_record_segments(out, example.serialize_segments(features),
                                                     digest))
            if settings.rows:
                lines.append(_rows_entry(row, settings, written if seen else None, names,
                                         seen))
            stats.num_examples += 1
            stats.rows += 1 + len(row.merged)
            for label in row.labels:
                stats.labels[label] = stats.labels.get(label, 0) + 1
        if digests is not None:  # each record's place holds its digest's number till now
            shas = digests.results()
            look.seen[:] = [(shas[sha], h, ref) for sha, h, ref in look.seen]
            for line in lines:
                if "sha256" in line:
                    line["sha256"] = shas[line["sha256"]]
    finally:
        out.close()
        if raw is not out:
            raw.close()
        if digests is not None:
            digests.close()
    if progress is not None:
        progress(len(task.rows))
    stats.num_bytes = storage.size(tmp)
    stats.digest = digest.hexdigest()
    if tmp != final:
        storage.rename(tmp, final)
    if settings.write_index and not gzipped:
        # After the shard: an index never names a shard that is not whole. A gzip stream
        # has no byte offsets to give (index.py).
        stats.index_file = index.name(task.filename)
        index_dir = storage.join(folder, index.DIR)
        if not storage.is_remote(index_dir):
            storage.makedirs(index_dir)
        storage.write_atomic(storage.join(folder, stats.index_file),
                             index.format(index.offsets(framed)))
    if settings.rows:
        stats.rows_file = layout.rows_file(task.filename)
        rows_dir = storage.join(folder, layout.ROWS_DIR)
        if not storage.is_remote(rows_dir):
            storage.makedirs(rows_dir)
        storage.write_atomic(storage.join(folder, stats.rows_file), rows.encode(lines))
    return stats, bad


_BOXES = "objects/bbox"  # a detection record's feature (_inputs.detection)


def _box_values(features: dict) -> dict:
    """A detection record's box features parsed (``looker.Looker.add_boxes``): the
    image is left out of the parse."""
    small = {k: v for k, v in features.items() if k.startswith("objects/")}
    return {k: list(v) for k, (_, v) in example.parse(example.serialize(small)).items()}


def _in_garden_keys(features: dict, row, settings: WriteSettings, written: str | None) -> dict:
    """A record's features in Model Garden's keys (``garden``); its source id is the
    source's image id where it gives one, else taken from the image's value."""
    image = written if written is not None else (row.image_uri or str(row.row))
    given = (settings.source_ids or {}).get(image)
    return garden.features(features, settings.class_ids, settings.label_names,
                           garden.source_id(image, given), settings.label_key)


def _rows_entry(row, settings: WriteSettings, written: str | None, names: tuple,
                seen: dict) -> dict:
    """The rows file's line of one written record (rows.py)."""
    values = row.values
    if settings.key_column is not None:
        key = rows.key_text(strict_json(values[settings.key_column]))
    else:
        key = (written if written is not None else row.image_uri) if seen else None
    features = rows.features(row, settings.columns, settings.feature_columns, strict_json)
    labels = [names[i] if 0 <= i < len(names) else str(i) for i in row.labels]
    uri = None
    if settings.key_column is not None and seen:  # the key is not the image: say which
        uri = written if written is not None else row.image_uri
    return rows.entry(row=strict_json(row.row), key=key, split=row.split, labels=labels,
                      features=features, image_uri=uri, rows=1 + len(row.merged), **seen)
