"""``tf.train.Example`` serialization in plain Python, without importing TensorFlow.

Importing TensorFlow costs seconds and most of a gigabyte per process, and a writer only
needs the wire format of four small messages::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                       Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }   FloatList / Int64List: packed repeated

Keys are written in sorted order, which is what protobuf's deterministic serialization
does, so the same features always give the same bytes.

A feature value is encoded once with ``bytes_feature``/``int64_feature``/``float_feature``
and can then be reused for many examples (labels, for instance).
"""

from __future__ import annotations

import struct
from typing import Iterable, Mapping

BYTES = "bytes"
INT64 = "int64"
FLOAT = "float"
DTYPES = (BYTES, INT64, FLOAT)

_U64 = (1 << 64) - 1


def _varint_uncached(n: int) -> bytes:
    if n < 0:
        n &= _U64  # int64 two's complement: always 10 bytes
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Every varint of one or two bytes, built at import (a few milliseconds).
_VARINTS = ([bytes((i,)) for i in range(0x80)]
            + [bytes((i & 0x7F | 0x80, i >> 7)) for i in range(0x80, 1 << 14)])


def _varint(n: int) -> bytes:
    """Protobuf varint of ``n`` (int64 two's complement for negatives)."""
    if 0 <= n < 16384:
        return _VARINTS[n]
    if 0 <= n < 1 << 21:  # three bytes: the length of every image up to 2 MiB
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    return _varint_uncached(n)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field; ``tag`` is (field_number << 3) | 2."""
    return bytes((tag,)) + _varint(len(payload)) + payload


class Feature(bytes):
    """The serialized bytes of one ``tf.train.Feature`` message."""


class LargeBytesFeature:
    """A one-value BytesList feature whose value is kept apart, never copied.

    ``serialize_segments`` emits the value as its own segment, so a record holding a
    60 KB image is checksummed and written without building a second copy of it.
    """

    __slots__ = ("prefix", "value")

    def __init__(self, value: bytes):
        item = b"\x0a" + _varint(len(value))
        bytes_list_len = len(item) + len(value)
        self.prefix = b"\x0a" + _varint(bytes_list_len) + item
        self.value = value

    def __len__(self) -> int:
        return len(self.prefix) + len(self.value)

    def __bytes__(self) -> bytes:
        return self.prefix + self.value

    def __eq__(self, other) -> bool:
        return bytes(self) == bytes(other)


def bytes_feature(values: Iterable[bytes | str]) -> Feature:
    """A BytesList feature; str values are encoded as UTF-8."""
    items = []
    for v in values:
        if isinstance(v, str):
            v = v.encode("utf-8")
        items.append(_field(0x0A, v))
    return Feature(_field(0x0A, b"".join(items)))


def int64_feature(values: Iterable[int]) -> Feature:
    """An Int64List feature (packed); values must fit in a signed 64-bit integer."""
    packed = []
    for v in values:
        v = int(v)
        if not -(1 << 63) <= v < (1 << 63):
            raise OverflowError(f"{v} does not fit in int64")
        packed.append(_varint(v))
    body = b"".join(packed)
    return Feature(_field(0x1A, _field(0x0A, body) if body else b""))


def float_feature(values: Iterable[float]) -> Feature:
    """A FloatList feature (packed, 32-bit floats)."""
    vals = [float(v) for v in values]
    body = struct.pack(f"<{len(vals)}f", *vals)
    return Feature(_field(0x12, _field(0x0A, body) if body else b""))


_ENCODERS = {BYTES: bytes_feature, INT64: int64_feature, FLOAT: float_feature}


def feature(dtype: str, values: Iterable) -> Feature:
    """The feature of ``dtype`` (one of DTYPES) holding ``values``."""
    return _ENCODERS[dtype](values)


_KEY_PREFIXES: dict[str, bytes] = {}


def serialize_segments(features: Mapping[str, "Feature | LargeBytesFeature"]) -> list[bytes]:
    """The serialized ``tf.train.Example`` as a list of segments, keys in sorted order.

    ``b"".join(segments)`` is the Example. Each large value (LargeBytesFeature) is a segment of
    its own, never copied; the small bytes between two large values are joined into one
    segment, so callers checksum and write a record in a few calls.
    """
    segments: list = []
    small: list[bytes] = []  # small bytes since the last large value
    total = 0
    for key in sorted(features):
        f = features[key]
        prefix = _KEY_PREFIXES.get(key)
        if prefix is None:
            kb = key.encode("utf-8")
            prefix = _KEY_PREFIXES[key] = b"\x0a" + _varint(len(kb)) + kb + b"\x12"
        n = len(f)
        inner = prefix + _varint(n)
        head = b"\x0a" + _varint(len(inner) + n)
        total += len(head) + len(inner) + n
        if isinstance(f, LargeBytesFeature):
            small += (head, inner, f.prefix)
            segments.append(small)
            segments.append(f.value)
            small = []
        else:
            small += (head, inner, f)
    segments.append(small)
    # The Example's own header, its length known now, starts the first segment.
    segments[0].insert(0, b"\x0a" + _varint(total))
    if not small:  # the last value was a large one
        segments.pop()
    return [b"".join(p) if isinstance(p, list) else p for p in segments]


def serialize(features: Mapping[str, "Feature | LargeBytesFeature"]) -> bytes:
    """The serialized ``tf.train.Example`` holding ``features``, keys in sorted order."""
    return b"".join(serialize_segments(features))


# --- parsing ----------------------------------------------------------------------------


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterable[tuple[int, int, object]]:
    """(field number, wire type, value) of each field; LEN values are bytes."""
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            value = buf[pos:pos + length]
            if len(value) < length:
                raise ValueError("truncated field")
            pos += length
        elif wire == 5:
            value = buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            value = buf[pos:pos + 8]
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= (1 << 63) else n


def _parse_feature(buf: bytes) -> tuple[str, list]:
    for number, _, body in _fields(buf):
        values: list = []
        if number == 1:
            values = [bytes(v) for n, _, v in _fields(body) if n == 1]
            return BYTES, values
        if number == 2:
            for n, _wire, v in _fields(body):
                if n == 1:
                    values.extend(struct.unpack(f"<{len(v) // 4}f", v))
            return FLOAT, values
        if number == 3:
            for n, wire, v in _fields(body):
                if n == 1 and wire == 0:
                    values.append(_signed(v))
                elif n == 1:
                    pos = 0
                    while pos < len(v):
                        x, pos = _read_varint(v, pos)
                        values.append(_signed(x))
            return INT64, values
    return BYTES, []  # a Feature with no kind set


def parse(data: bytes, skip: frozenset | set = frozenset()) -> dict[str, tuple[str, list]]:
    """A serialized ``tf.train.Example`` -> {key: (dtype, values)}; the inverse of ``serialize``.

    Features whose key is in ``skip`` are left out unparsed (their values never copied:
    an image a caller does not want)."""
    out: dict[str, tuple[str, list]] = {}
    # Fields are views into ``data``: a large image is copied once, into its value.
    for number, _, features in _fields(memoryview(data)):
        if number != 1:
            continue
        for n, _, entry in _fields(features):
            if n != 1:
                continue
            key, feature = "", b""
            for m, _, v in _fields(entry):
                if m == 1:
                    key = bytes(v).decode("utf-8")
                elif m == 2:
                    feature = v
            if key not in skip:
                out[key] = _parse_feature(feature)
    return out
