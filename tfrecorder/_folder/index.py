"""Shard index files: where each record of a shard starts, and how long it is.

The format is the text format of NVIDIA DALI's ``tfrecord2idx``, so DALI reads our
shards with our index files as they are: one line per record, ``OFFSET LENGTH``, where
``OFFSET`` is the byte at which the record's framing starts and ``LENGTH`` is the whole
framed record (8 length bytes, 4 CRC bytes, the data, 4 CRC bytes)::

    0 1040
    1040 998
    2038 1113

The index of shard ``OUT/S`` is ``OUT/index/S.idx`` (``name``); it sits in a folder of
its own so that a glob over the shard names (``OUT/data-train.tfrecord-*``) matches
shards only. This module is the only place that writes or parses the format.

A conversion writes each index with its shard (``shard.write``), from the framed
lengths it wrote; ``indexing.build_index`` writes them for a directory that has none,
from the shards' length fields (``records.scan``).
gzip shards have no index: a gzip stream cannot be entered at a byte offset, so there
is nothing a reader could do with one.
"""

from __future__ import annotations

from typing import Iterable

from tfrecorder import _storage as storage
from tfrecorder._folder import layout, records
from tfrecorder._errors import CorruptRecordError

#: The folder of index files, inside the output directory.
DIR = layout.INDEX_DIR
SUFFIX = layout.INDEX_SUFFIX


def name(shard_file: str) -> str:
    """``data-train.tfrecord-00000-of-00002`` -> ``index/data-train.tfrecord-00000-of-00002.idx``:
    the index file's name relative to the output directory."""
    return f"{DIR}/{shard_file}{SUFFIX}"


def format(entries: Iterable[tuple[int, int]]) -> bytes:
    """The text of an index file listing ``(offset, length)`` per record."""
    return "".join(f"{offset} {length}\n" for offset, length in entries).encode("ascii")


def offsets(record_lengths: Iterable[int]) -> list[tuple[int, int]]:
    """``(offset, length)`` of each record, from the framed length of each in file order."""
    out, at = [], 0
    for length in record_lengths:
        out.append((at, length))
        at += length
    return out


def parse(data: bytes, where: str = "<index>", *, count: int | None = None,
          size: int | None = None, gaps: bool = False) -> list[tuple[int, int]]:
    """The ``(offset, length)`` entries of an index file's text; CorruptRecordError
    naming ``where`` and the line when a line is not two whole numbers, when the
    records do not follow each other, when a record ends past ``size`` (the shard's
    bytes, from the manifest), or when there are not ``count`` entries. A damaged line
    is thus refused here, before any reader sizes a buffer from it.

    ``gaps=True`` reads a version's live index, which lists only the version's live
    records: a record may start after the previous one's end (the retired ones
    between), never before it."""
    quick = _parse_whole(data, count=count, size=size, gaps=gaps)
    if quick is not None:
        return quick
    # Something is wrong: line by line, to name the line.
    entries, at = [], 0
    for number, line in enumerate(data.decode("ascii", "replace").splitlines(), 1):
        pair = line.split()
        if not pair:
            continue
        try:
            offset, length = (int(p) for p in pair)
        except ValueError:
            raise CorruptRecordError(
                f"{where}, line {number}: {line!r} is not 'OFFSET LENGTH'; rebuild the "
                f"index with `tfrecorder index`") from None
        if (offset < at if gaps else offset != at) or length < records.FRAMING:
            raise CorruptRecordError(
                f"{where}, line {number}: a record at byte {offset} of length {length}, "
                f"where the previous one ends at byte {at}; " + _REBUILD[gaps])
        if size is not None and offset + length > size:
            raise CorruptRecordError(
                f"{where}, line {number}: a record at byte {offset} of length {length} "
                f"ends past the shard's {size} bytes; the index file is damaged: "
                + _REBUILD[gaps])
        entries.append((offset, length))
        at = offset + length
    if count is not None and len(entries) != count:
        raise CorruptRecordError(
            f"{where}: lists {len(entries)} records where the manifest says the shard "
            + (f"keeps {count} live; " + _REBUILD[True] if gaps else
               f"holds {count} (an index cut short, or another shard's); rebuild it with "
               f"`tfrecorder index`"))
    return entries


#: Bytes that ``str.splitlines`` ends a line at, besides ``\n``: an index holding one is
#: read line by line, as it always was.
_OTHER_LINE_ENDS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")


def _parse_whole(data: bytes, *, count: int | None, size: int | None,
                 gaps: bool) -> list[tuple[int, int]] | None:
    """``parse``'s entries of a sound index, without decoding it or numbering its lines
    (several times quicker, which a reader opening a large split feels); None where
    any check fails, for ``parse`` to find the line at fault. It accepts exactly what
    ``parse``'s line-by-line reading accepts."""
    if any(end in data for end in _OTHER_LINE_ENDS):
        return None
    fields = []
    for line in data.split(b"\n"):
        pair = line.split()
        if pair:
            if len(pair) != 2:
                return None
            fields += pair
    try:
        numbers = list(map(int, fields))
    except ValueError:
        return None
    offsets, lengths = numbers[0::2], numbers[1::2]
    if lengths and min(lengths) < records.FRAMING:
        return None
    at = 0
    for offset, length in zip(offsets, lengths):
        if offset < at if gaps else offset != at:
            return None
        at = offset + length
    if (size is not None and at > size) or (count is not None and len(offsets) != count):
        return None
    return list(zip(offsets, lengths))


#: What to do about a damaged index file, or a damaged live index (which lists a
#: version's live records: nothing else knows them).
_REBUILD = {False: "rebuild the index with `tfrecorder index`",
            True: "the version's live index is damaged; read another version, or convert "
                  "again with mode='overwrite'"}
#: What to do about a damaged live index.
LIVE_DAMAGED = _REBUILD[True]


def path(output_dir: str, shard_file: str) -> str:
    """The index file of ``shard_file`` in ``output_dir``."""
    return storage.join(output_dir, name(shard_file))


def read(output_dir: str, shard_file: str, *, count: int | None = None,
         size: int | None = None) -> list[tuple[int, int]]:
    """The entries of the index of ``shard_file``; CorruptRecordError naming the index
    file when it is missing or damaged (``count`` and ``size``: see ``parse``)."""
    where = path(output_dir, shard_file)
    try:
        data = storage.read_bytes(where)
    except FileNotFoundError:
        raise CorruptRecordError(
            f"{where}: the index file of {shard_file} is missing; rebuild the indexes with "
            f"`tfrecorder index {output_dir}`") from None
    return parse(data, where, count=count, size=size)


def check(entries: list[tuple[int, int]], framed: list[int], where: str) -> None:
    """CorruptRecordError naming index file ``where`` when its ``entries`` do not
    describe records of the ``framed`` lengths, in order."""
    if len(entries) != len(framed):
        raise CorruptRecordError(
            f"{where}: lists {len(entries)} records, the shard holds {len(framed)}; rebuild "
            f"the index with `tfrecorder index`")
    for number, ((offset, length), actual) in enumerate(zip(entries, offsets(framed)), 1):
        if (offset, length) != actual:
            raise CorruptRecordError(
                f"{where}, line {number}: {offset} {length}, but that record is at byte "
                f"{actual[0]} with length {actual[1]}; rebuild the index with "
                f"`tfrecorder index`")


# --- a version's live records ------------------------------------------------------

def live_positions(output_dir: str, shard, pending: str | None = None) -> list[int]:
    """Positions (record numbers in file order) of the live records of ``shard`` (a
    manifest's ShardInfo); a live index not yet published is read from ``pending``, the
    run's folder, where it is."""
    return live_entries(output_dir, shard, pending)[0]


def live_entries(output_dir: str, shard, pending: str | None = None) -> tuple:
    """``(live_positions, the shard's index entries)``; the entries only where a live
    index was read through them (None where every record is live)."""
    if not shard.live_index:
        return list(range(shard.num_examples)), None
    full = parse(storage.read_bytes(storage.inside(output_dir, shard.index)), shard.index)
    where = {entry: i for i, entry in enumerate(full)}
    path = storage.inside(output_dir, shard.live_index)
    if pending is not None and storage.exists(storage.join(pending, shard.live_index)):
        path = storage.join(pending, shard.live_index)
    live = parse(storage.read_bytes(path), path, count=shard.live, gaps=True)
    try:
        return [where[entry] for entry in live], full
    except KeyError as e:
        offset, length = e.args[0]
        raise CorruptRecordError(
            f"{path}: lists a record at byte {offset} of length {length}, which "
            f"{shard.index} does not; " + LIVE_DAMAGED) from None
