"""One view of a split's live records, for every reader.

Every reader (``load()``'s tf.data pipelines, ``access.Reader`` and the torch, Grain
and DALI adapters over it, ``read()``, ``inspect()``, ``verify()``) opens a folder
here, and the policies around reading live here once:

- which manifest: the latest version's (``tfrecorder.json``) or version ``k``'s
  (``versions/0000k.json``); a folder converted before versions existed has only
  version 1, its ``tfrecorder.json`` (docs/format.md, "Versions and the data report");
- which split: a name in any case, TFRecorder's aliases too, else a ConfigError
  listing the splits there are;
- which records: each shard's live records, from its live index where the version
  retired some (``live_index``), else from its index file, else from a scan of the
  shard's length fields (a folder converted before index files existed);
- which conversion: the version's manifest file and its ``generation``, which a
  reader pins and checks (``Version.pin``, ``stamp``, ``open_pin``; a ``Folder``'s
  verbs through ``Version.unchanged``).

A version is made from the one parse of its manifest (``Manifest.from_json``, whose
``ShardInfo`` is the one shard type, its format-2 fields ``live``, ``live_index`` and
``rows`` included); a view adds only where the files are and which records are live::

    version = open_version("out/", version=2)
    view = version.view("train")
    len(view), view.counts, view.entries(0)     # live records, per shard, (offset, length)
    view.index_files                            # live index where there is one (DALI)
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
import os

from tfrecorder import _storage as storage
from tfrecorder._folder import index, layout, legacy, metadata
from tfrecorder._folder import records
from tfrecorder._folder import split_names
from tfrecorder._errors import ConfigError, CorruptRecordError, OutputChangedError
from tfrecorder._folder.manifest import Manifest, ShardInfo, damaged, loads


@dataclasses.dataclass(frozen=True)
class Version:
    """One published version of a folder: its manifest and its shards' live records."""

    output_dir: str
    number: int
    manifest: Manifest        # splits' num_examples are live records
    #: The manifest file a reader pins: ``versions/KKKKK.json``, or ``tfrecorder.json``
    #: for a folder without versions (or one whose version file is not there).
    pin: str
    #: The manifest's generation ("" before it existed, None for TFRecorder 2.0).
    generation: str | None
    #: Every file the version lists, relative to the folder (shards, their index, live
    #: index and rows files, labels, metadata, its manifest files).
    files: frozenset = frozenset()

    def split_name(self, split) -> str:
        """The split's name on disk; ConfigError naming the splits there are."""
        try:
            name = split_names.canonical(split)
        except split_names.UnknownSplit:
            name = None
        if name is None:
            name = str(split).strip().lower()
        if name not in self.manifest.splits:
            raise ConfigError(f"split {split!r} is not in {self.output_dir}"
                              f"{self._which}; it has {sorted(self.manifest.splits)}")
        return name

    @property
    def _which(self) -> str:
        return f" (version {self.number})" if self.manifest.format_version >= 2 else ""

    def view(self, split) -> "View":
        return View(self, self.split_name(split))

    def unchanged(self) -> "Version":
        """This version, still the conversion it was opened as: ConfigError naming the
        versions there are when its manifest was removed since (``vacuum``, or an
        overwrite that published fewer versions); OutputChangedError when its manifest
        is another conversion's now (``mode="overwrite"`` starts again at version 1, so
        the same number can name other records). One read of the pinned manifest file:
        a version's own file is never rewritten but by an overwrite, and a conversion
        removes it before it touches any shard, so a check after reading proves that
        what was read was this version's. TFRecorder 2.0's folders, which have no
        manifest of ours, are not checked."""
        if self.generation is None and self.manifest.format_version == legacy.FORMAT_VERSION:
            return self
        try:
            data = storage.read_bytes(self.pin)
        except (FileNotFoundError, NotADirectoryError):
            raise missing(self.output_dir, self.number) from None
        now = generation_of(data)
        if now != self.generation:
            raise OutputChangedError(
                f"{self.output_dir} was written again since it was opened at version "
                f"{self.number}: {self.pin.rsplit('/', 1)[-1]} was generation "
                f"{self.generation} then and is {now} now, another conversion's (an "
                f"overwrite starts again at version 1). tfrecorder.open("
                f"{self.output_dir!r}) again reads what is there now.")
        return self

    def need_offsets(self, what: str) -> None:
        """ConfigError where the shards are compressed, saying that ``what`` needs to
        enter them at a record's offset: the one refusal of compressed shards."""
        compression = self.manifest.compression
        if compression:
            raise ConfigError(
                f"{self.output_dir} holds {compression}-compressed shards, which have no "
                f"index file: a {compression} stream cannot be entered at a record's byte "
                f"offset, which {what} needs. Convert again without compression "
                f"(compression=None, the default).")

    @property
    def label_names(self) -> list[str]:
        return self.manifest.label_names


class View:
    """The live records of one split of one version: ``len``, per shard counts and
    ``(offset, framed length)`` entries, and the index files a reader that knows
    nothing of us is handed. Record ``i`` is the split's ``i``-th live record in file
    order. Entries are read once per shard, when first asked for."""

    def __init__(self, version: Version, split: str):
        self.version = version
        self.split = split
        #: The split's shards as its manifest lists them, in file order.
        self.shards: list[ShardInfo] = list(version.manifest.splits[split].shards)
        #: Live records of each shard, in file order.
        self.counts = [s.live_examples for s in self.shards]
        self.starts = [0]
        for n in self.counts:
            self.starts.append(self.starts[-1] + n)
        self._entries: list = [None] * len(self.shards)

    @property
    def output_dir(self) -> str:
        return self.version.output_dir

    @property
    def manifest(self) -> Manifest:
        return self.version.manifest

    @property
    def files(self) -> list[str]:
        """The path of each shard (local or gs://)."""
        return [self.path(i) for i in range(len(self.shards))]

    def path(self, shard: int, name: str | None = None) -> str:
        """The path of shard ``shard``, or of the file ``name`` of the folder."""
        return storage.join(self.output_dir, self.shards[shard].file if name is None else name)

    @property
    def index_files(self) -> list[str]:
        """Per shard, the index file listing its live records (what DALI is given): the
        version's live index where it retired some, else the shard's index file."""
        return [self.path(i, s.live_index or index.name(s.file))
                for i, s in enumerate(self.shards)]

    @property
    def counts_known(self) -> bool:
        return all(s.num_examples >= 0 for s in self.shards)

    def need_counts(self, what: str) -> None:
        """ConfigError where a shard's record count is not recorded (TFRecorder 2.0),
        saying that ``what`` needs it: the one refusal of a folder without counts.
        Compressed shards are refused first (``need_offsets``): an index, which gives
        the counts, cannot be written for them."""
        if not self.counts_known:
            self.version.need_offsets(what)
            raise ConfigError(
                f"{self.output_dir} was written by TFRecorder 2.0 and has no record counts "
                f"per shard, which {what} needs; write index files with `tfrecorder index "
                f"{self.output_dir}`, which counts them.")

    @property
    def retired(self) -> bool:
        """True when some shard of the split has records this version does not read."""
        return any(s.live_index for s in self.shards)

    def __len__(self) -> int:
        return self.starts[-1]

    def position(self, i: int) -> tuple[int, int]:
        """``(shard, live record of it)`` of the split's live record ``i`` (0 <= i < len)."""
        shard = bisect.bisect_right(self.starts, i) - 1
        return shard, i - self.starts[shard]

    def where(self, i: int) -> str:
        """Where the split's live record ``i`` is, for an error about it: its shard and
        its place there (its byte offset where the entries were read); ``i`` < 0
        counts from the end, as a reader's positions do."""
        i = operator.index(i)
        i = i + len(self) if i < 0 else i
        if not self.counts_known or not 0 <= i < len(self):
            return f"{self.output_dir}, split {self.split!r}, record {i}"
        shard, k = self.position(i)
        known = self._entries[shard]
        at = f" at byte {known[k][0]}" if known is not None else ""
        live = " live" if self.shards[shard].live_index else ""
        return f"{self.path(shard)},{live} record {k}{at} (record {i} of split {self.split!r})"

    def entries(self, shard: int) -> list[tuple[int, int]]:
        """``(offset, framed length)`` of each live record of shard ``shard``."""
        got = self._entries[shard]
        if got is None:
            got = self._entries[shard] = self.read_entries(shard)
        return got

    def known(self, shard: int) -> list[tuple[int, int]] | None:
        """The entries of shard ``shard`` if they were read already, else None."""
        return self._entries[shard]

    def keep(self, shard: int, entries: list[tuple[int, int]]) -> None:
        """Keeps ``entries`` as shard ``shard``'s (read and checked by the caller)."""
        self._entries[shard] = entries

    def read_entries(self, shard: int) -> list[tuple[int, int]]:
        """The entries of shard ``shard``, read now (not cached): the live index where
        there is one, else the index file, else a scan of the shard's length fields.
        ConfigError for gzip shards and for shards without counts (TFRecorder 2.0)."""
        s = self.shards[shard]
        self.version.need_offsets("reading single records")
        self.need_counts("reading by position")
        size = s.num_bytes if s.num_bytes >= 0 else None
        if s.live_index:
            live_index = self.path(shard, s.live_index)
            try:
                data = storage.read_bytes(live_index)
            except FileNotFoundError:
                raise CorruptRecordError(
                    f"{live_index}: the live index of {s.file} in version "
                    f"{self.version.number} is missing; a version's files are never "
                    f"removed but by overwrite or vacuum: open another version") from None
            return index.parse(data, live_index, count=s.live_examples, size=size, gaps=True)
        where = self.path(shard, index.name(s.file))
        try:
            return index.parse(storage.read_bytes(where), where, count=s.num_examples,
                               size=size)
        except FileNotFoundError:
            # Written before index files existed: the shard's length fields, read once.
            path = self.path(shard)
            with storage.open_file(path, "rb") as f:
                entries = list(records.scan(f, path))
            if len(entries) != s.num_examples:
                raise CorruptRecordError(
                    f"{path}: holds {len(entries)} records, the manifest says "
                    f"{s.num_examples}; the shard was truncated or replaced") from None
            return entries

    def contiguous(self, shard: int, first: int, n: int) -> list[tuple[int, int]]:
        """Live records ``first`` to ``first + n`` of shard ``shard`` as extents the file
        holds back to back: ``(byte offset, records)`` each; a retired record between
        two live ones ends an extent."""
        entries = self.entries(shard)[first:first + n]
        out: list[list[int]] = []
        end = None
        for offset, length in entries:
            if offset == end:
                out[-1][1] += 1
            else:
                out.append([offset, 1])
            end = offset + length
        return [(at, k) for at, k in out]

    def refuse_retired(self, shard: int) -> None:
        """ConfigError when shard ``shard`` has retired records and cannot be entered at
        a record's offset (gzip): its live records cannot be told from the others."""
        if self.shards[shard].live_index:
            self.version.need_offsets(f"reading the live records of "
                                      f"{self.shards[shard].file} in version "
                                      f"{self.version.number}")


# --- opening a version ----------------------------------------------------------------

def versions(output_dir: str) -> list[int]:
    """The numbers of the versions ``output_dir`` holds: those of ``versions/*.json``,
    or ``[1]`` for a folder converted before versions existed."""
    return published(output_dir) or [1]


def published(output_dir: str, entries=None) -> list[int]:
    """The numbers of the version manifests ``versions/KKKKK.json`` in ``output_dir``,
    in order ([] where there are none): the one listing of a folder's versions.
    ``entries``: the folder's entries where the caller listed them already."""
    if entries is not None and layout.VERSIONS_DIR not in entries:
        return []
    folder = storage.join(output_dir, layout.VERSIONS_DIR)
    try:
        names = storage.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return sorted(k for n in names if (k := layout.parse_version_manifest(
        f"{layout.VERSIONS_DIR}/{n.rstrip('/').rsplit('/', 1)[-1]}")) is not None)


def read_version(output_dir: str, number: int) -> Version:
    """Version ``number`` from its own manifest ``versions/KKKKK.json``, which
    ``published`` listed: IncompleteOutputError (``damaged``) when it cannot be read or
    is not a manifest its conversion wrote."""
    try:
        path = storage.inside(output_dir, layout.version_manifest(number))
    except storage.UnsafePathError as e:  # versions/ a link: nothing outside is read
        raise ConfigError(str(e)) from None
    try:
        data = storage.read_bytes(path)
    except OSError as e:
        raise damaged(path, e) from None
    return _version(output_dir, data, path, number)


def check_version(version) -> int | None:
    """``version`` as an int, or None; ConfigError unless a whole number >= 1."""
    if version is None:
        return None
    try:
        if isinstance(version, bool) or type(version).__name__ == "bool_":
            raise TypeError
        number = operator.index(version)  # an int, or NumPy's
    except TypeError:
        number = 0
    if number < 1:
        raise ConfigError(f"version={version!r}; give a version number (1, 2, ...), or None "
                          f"for the latest")
    return number


def open_version(output_dir: str, version: int | None = None) -> Version:
    """Version ``version`` of ``output_dir`` (None: the latest, ``tfrecorder.json``).

    ConfigError for a version the folder does not hold (naming those it does);
    IncompleteOutputError when it holds no finished conversion."""
    # The manifest and its generation come from one read of one file (the pin), so
    # they are of one conversion; a reader checks the pin again after it reads data.
    return _open_once(str(output_dir), check_version(version))


def _open_once(output_dir: str, version: int | None) -> Version:
    latest = storage.join(output_dir, layout.MANIFEST)
    if version is not None:
        path = storage.join(output_dir, layout.version_manifest(version))
        try:
            own = storage.read_bytes(path)
        except (FileNotFoundError, NotADirectoryError):
            own = None
        if own is not None:  # (_version's IncompleteOutputError is a FileNotFoundError)
            return _version(output_dir, own, path, version)
        if version == 1:  # a folder converted before versions existed: tfrecorder.json
            try:
                data = storage.read_bytes(latest)
            except (FileNotFoundError, NotADirectoryError):
                data = None
            if data is None or _number(data) == 1:
                return _version(output_dir, data, latest, 1)
        elif not storage.exists(latest):
            metadata.read_manifest(output_dir)  # no conversion there: says so
        raise missing(output_dir, version)
    try:
        data = storage.read_bytes(latest)
    except (FileNotFoundError, NotADirectoryError):
        data = None
    number = _number(data) if data is not None else 1
    # The version's own file is what a reader pins: tfrecorder.json is replaced by the
    # next version, the version's file never is. Read where it may be, not looked for
    # first: on an object store a look is one more round trip (and a listing).
    pinned = storage.join(output_dir, layout.version_manifest(number))
    try:
        own = storage.read_bytes(pinned)
    except (FileNotFoundError, NotADirectoryError):
        own = None
    if own is not None and generation_of(own) == generation_of(data):
        return _version(output_dir, own, pinned, number)
    return _version(output_dir, data, latest, number)


def missing(output_dir: str, version: int) -> ConfigError:
    """The error for a version ``output_dir`` does not hold, naming those it does."""
    held = versions(output_dir)
    return ConfigError(
        f"{output_dir} has no version {version}; it has version"
        f"{'s' if len(held) > 1 else ''} {', '.join(map(str, held))}. Give "
        f"{'one of them' if len(held) > 1 else 'that one'}, or version=None for the "
        f"latest (on the command line, leave out --version)")


def _number(data: bytes) -> int:
    """The version number a manifest's text gives (1 when it has none)."""
    try:
        number = loads(data).get("version", 1)
    except (ValueError, AttributeError):
        return 1
    return number if isinstance(number, int) and not isinstance(number, bool) else 1


def _version(output_dir: str, data: bytes | None, pin: str, number: int) -> Version:
    """A Version from a manifest's text (None: no tfrecorder.json, which
    ``metadata.read_manifest`` explains, or reads as TFRecorder 2.0's)."""
    if data is None:
        manifest = metadata.read_manifest(output_dir)  # IncompleteOutputError, or legacy
        return Version(output_dir, 1, manifest, pin, None, frozenset(
            s.file for info in manifest.splits.values() for s in info.shards))
    try:
        d = loads(data)
        manifest = Manifest.from_json(d)
        if d.get("format_version", 1) >= 2 and d.get("version", number) != number:
            raise ValueError(f"it says it is version {d.get('version')!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise damaged(pin, e) from None
    files = _files(manifest)
    if pin.endswith(layout.version_manifest(number)):
        files = files | {layout.version_manifest(number)}
    generation = d.get("generation")  # what generation_of gives, from the one parse
    return Version(output_dir, number, manifest, pin, generation, files)


def _files(manifest: Manifest) -> frozenset:
    """Every file a manifest lists, relative to the folder: its shards and their index,
    live index and rows files, its labels, metadata and data report."""
    files = {layout.MANIFEST, layout.ERRORS, layout.DATASET_INFO, layout.FEATURES}
    for info in manifest.splits.values():
        for s in info.shards:
            files.update(v for v in (s.file, s.index, s.live_index, s.rows) if v)
    files.update(layout.labels_file(k) for k in manifest.vocabularies)
    if manifest.layout != "tfrecorder" and manifest.label_key:  # its label map (garden)
        files.add(layout.escape(manifest.label_key) + layout.LABEL_MAP_SUFFIX)
    if manifest.quality:
        files.add(manifest.quality)
    return frozenset(files)


# --- the conversion a reader pinned ---------------------------------------------------

def generation_of(data: bytes | None):
    """The ``generation`` field of a manifest's text, or None."""
    if data is None:
        return None
    try:
        return loads(data).get("generation")
    except (ValueError, AttributeError):
        return None  # the manifest's reader says what is wrong with it


def stamp(path: str):
    """What identifies the manifest file at ``path`` now: its inode, size and change
    time locally, its object generation on an object store; None when it is gone."""
    try:
        if storage.is_remote(path):
            fs = storage._fs(path)
            fs.invalidate_cache(path)
            info = fs.info(path)
            return info.get("generation"), info.get("size"), info.get("updated")
        st = os.stat(storage._local(path))
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
    except FileNotFoundError:
        return None


def open_pin(path: str):
    """``(open file or None, stamp, bytes)`` of the manifest file at ``path``, all of
    one file: locally it is opened, stamped from the open file and read from it; on
    an object store the stamp is taken before the read (a stamp older than the bytes
    is only checked again)."""
    if storage.is_remote(path):
        now = stamp(path)
        if now is None:
            raise FileNotFoundError(path)
        return None, now, storage.read_bytes(path)
    fd = os.open(storage._local(path), os.O_RDONLY)
    try:
        st = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return fd, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), \
            b"".join(chunks)
    except BaseException:
        os.close(fd)
        raise


