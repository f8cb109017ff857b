"""TFRecord framing: the byte-level half of the on-disk contract (file names are in ``layout``).

A TFRecord file is a sequence of records, each::

    uint64 length (little endian)
    uint32 masked CRC32C of the 8 length bytes
    bytes  data[length]
    uint32 masked CRC32C of data

Writer and reader both use this module, so they cannot disagree about the format: it
is the one place that frames a record or parses framing (as Beam's ``_TFRecordUtil``
serves its source and sink). ``read_records`` reads a stream whole, ``scan`` finds the
records of a file from their length fields alone (what an index file lists), and
``unframe`` checks one record read by its index entry.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterator

import google_crc32c

from tfrecorder._errors import CorruptRecordError

_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
#: Bytes of framing around a record's data: its length, the length's CRC, the data's CRC.
FRAMING = 16
#: Bytes before a record's data: its length and the length's CRC.
_HEADER = 12


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """CRC32C of ``data``, rotated and offset as TFRecord stores it."""
    return _mask(google_crc32c.value(data))


def frame(data: bytes) -> bytes:
    """One record: ``data`` with its length and both checksums."""
    header = _LENGTH.pack(len(data))
    return b"".join(
        (header, _CRC.pack(masked_crc32c(header)), data, _CRC.pack(masked_crc32c(data)))
    )


def write_record(file: BinaryIO, data: bytes) -> int:
    """Appends one record to ``file``; returns the bytes written."""
    record = frame(data)
    file.write(record)
    return len(record)


def write_record_segments(file: BinaryIO, segments: list[bytes], digest=None) -> int:
    """Appends one record whose data is ``b"".join(segments)``, without joining them.

    ``digest``, a ``hashlib`` object, is fed the record's length and data checksum: a
    fingerprint of a whole shard's content at no extra pass over its bytes.
    """
    crc = 0
    length = 0
    for segment in segments:
        crc = google_crc32c.extend(crc, segment)
        length += len(segment)
    header = _LENGTH.pack(length)
    footer = _CRC.pack(_mask(crc))
    file.write(header + _CRC.pack(masked_crc32c(header)))
    file.writelines(segments)
    file.write(footer)
    if digest is not None:
        digest.update(header + footer)
    return length + FRAMING


def framed_length(data: bytes) -> int:
    """The bytes ``data`` takes in a file as one record, framing included (what an
    index file lists as the record's length)."""
    return len(data) + FRAMING


def _length(header: bytes, where: str, at: int) -> int:
    """The data length a record's header gives; CorruptRecordError naming ``where`` and
    byte ``at`` when the header is cut short or its checksum is wrong."""
    if len(header) < _HEADER:
        raise CorruptRecordError(f"{where}: truncated record header at byte {at}")
    if _CRC.unpack_from(header, 8)[0] != masked_crc32c(header[:8]):
        raise CorruptRecordError(f"{where}: bad length checksum at byte {at}")
    return _LENGTH.unpack_from(header)[0]


def read_records(file: BinaryIO, name: str = "<stream>") -> Iterator[bytes]:
    """Yields every record of ``file``, checking both checksums of each.

    Raises CorruptRecordError naming ``name`` and the record's offset when a length,
    a checksum or the file's end is wrong.
    """
    offset = 0
    while True:
        header = file.read(_HEADER)
        if not header:
            return
        length = _length(header, name, offset)
        data = file.read(length)
        footer = file.read(4)
        if len(data) < length or len(footer) < 4:
            raise CorruptRecordError(f"{name}: truncated record at byte {offset}")
        if _CRC.unpack(footer)[0] != masked_crc32c(data):
            raise CorruptRecordError(f"{name}: bad data checksum at byte {offset}")
        offset += FRAMING + length
        yield data


def scan(file: BinaryIO, where: str = "<stream>") -> Iterator[tuple[int, int]]:
    """``(offset, framed length)`` of every record of an uncompressed TFRecord ``file``,
    read from the length fields alone (the data is skipped with seeks, not read): the
    entries of its index file. Each length field's checksum is checked, and a record
    that goes past the file's end is an error."""
    end = file.seek(0, 2)
    at = 0
    while at < end:
        file.seek(at)
        length = _length(file.read(_HEADER), where, at)
        if at + length + FRAMING > end:
            raise CorruptRecordError(f"{where}: truncated record at byte {at}")
        yield at, length + FRAMING
        at += length + FRAMING


def unframe(framed: bytes, length: int, where: str) -> bytes:
    """The data of one framed record read by its index entry (``length`` bytes asked
    for), both checksums checked; CorruptRecordError naming ``where`` when the read
    came back short, a checksum is wrong or the record's own length is not the
    entry's."""
    if len(framed) != length:
        raise CorruptRecordError(f"{where}: the shard ends {length - len(framed)} bytes "
                                 f"early; the shard or its index file is damaged")
    (size,) = _LENGTH.unpack_from(framed) if length >= _HEADER else (-1,)
    if length < _HEADER or _CRC.unpack_from(framed, 8)[0] != masked_crc32c(framed[:8]):
        raise CorruptRecordError(f"{where}: bad length checksum (is the index file the "
                                 f"shard's own?)")
    if size + FRAMING != length:
        raise CorruptRecordError(f"{where}: a record of {size} bytes where the index says "
                                 f"{length - FRAMING}; rebuild the index files")
    data = framed[_HEADER:_HEADER + size]
    if _CRC.unpack_from(framed, length - 4)[0] != masked_crc32c(data):
        raise CorruptRecordError(f"{where}: bad data checksum")
    return data
