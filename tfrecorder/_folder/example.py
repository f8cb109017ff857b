"""``tf.train.Example`` serialization, without importing TensorFlow.

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
import threading
from typing import Collection, Iterable, Mapping

from tfrecorder._errors import CorruptRecordError

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
#
# Parsing goes through protobuf's compiled parser (upb, the default since protobuf 4.21):
# about 2x faster than walking the wire format in Python for a whole record of eight
# features, 3x for the two a training reader wants. (Protobuf's pure-Python backend,
# PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, is about 10x slower than upb.) The four
# messages are declared here, in a descriptor pool of our own, so that TensorFlow need
# not be imported and its own ``tensorflow.Example``, where it is, is left alone.

_EXAMPLE = None  # (the Example message class, protobuf's DecodeError) once declared
_EXAMPLE_LOCK = threading.Lock()
_CLASSES: list = []  # every message class declared, kept alive (see declare)


def declare():
    """``(Example message class, protobuf's DecodeError)``, the messages declared once
    per process (under a lock: a reader's threads make their first parse at once); a
    process forked after that has them too. ``access.Reader``
    calls it when made, so that DataLoader workers do not each declare them."""
    global _EXAMPLE
    with _EXAMPLE_LOCK:
        if _EXAMPLE is not None:
            return _EXAMPLE
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from google.protobuf.message import DecodeError

        field = descriptor_pb2.FieldDescriptorProto
        proto = descriptor_pb2.FileDescriptorProto(
            name="tfrecorder/example.proto", package="tfrecorder.wire", syntax="proto3")

        def message(name, *fields):
            m = proto.message_type.add(name=name)
            for fname, number, kind, label, type_name in fields:
                f = m.field.add(name=fname, number=number, type=kind, label=label)
                if type_name:
                    f.type_name = ".tfrecorder.wire." + type_name
            return m

        one, many = field.LABEL_OPTIONAL, field.LABEL_REPEATED
        message("BytesList", ("value", 1, field.TYPE_BYTES, many, None))
        message("FloatList", ("value", 1, field.TYPE_FLOAT, many, None))
        message("Int64List", ("value", 1, field.TYPE_INT64, many, None))
        # Feature's lists are declared repeated, not as TensorFlow's oneof (the same wire
        # format): a oneof keeps the last list of a Feature that holds several, where
        # TensorFlow's parser reads the first, so such a Feature must be seen to be refused.
        message("Feature", ("bytes_list", 1, field.TYPE_MESSAGE, many, "BytesList"),
                ("float_list", 2, field.TYPE_MESSAGE, many, "FloatList"),
                ("int64_list", 3, field.TYPE_MESSAGE, many, "Int64List"))
        # The map is declared as its wire form, repeated entries: a map keeps the last
        # entry of a key given twice, and TensorFlow's parser does not always (an empty
        # last entry it skips), so such a record must be seen to be refused.
        features = message("Features",
                           ("feature", 1, field.TYPE_MESSAGE, many, "Features.FeatureEntry"))
        entry = features.nested_type.add(name="FeatureEntry")
        entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=one)
        entry.field.add(name="value", number=2, type=field.TYPE_MESSAGE, label=one,
                        type_name=".tfrecorder.wire.Feature")
        message("Example", ("features", 1, field.TYPE_MESSAGE, one, "Features"))
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        # Every message class is made here and kept for the process (_CLASSES). Protobuf's
        # upb backend otherwise makes a nested message's class when a parse first reaches
        # it and lets the cyclic garbage collector free it once no message of it is left,
        # to make it again on the next parse: a class freed by a collection in one thread
        # while a reader's other thread took it from upb's cache crashed the process
        # (a segmentation fault in Grain's prefetch threads).
        declared = list(pool.FindFileByName(proto.name).message_types_by_name.values())
        declared += [nested for d in declared for nested in d.nested_types]
        _CLASSES[:] = [message_factory.GetMessageClass(d) for d in declared]
        _EXAMPLE = (message_factory.GetMessageClass(
            pool.FindMessageTypeByName("tfrecorder.wire.Example")), DecodeError)
    return _EXAMPLE


def parse(data: bytes, skip: Collection[str] = frozenset(),
          only: Collection[str] | None = None,
          specs: Mapping | None = None) -> dict[str, tuple[str, list]]:
    """A serialized ``tf.train.Example`` -> {key: (dtype, values)}, keys sorted (the
    order ``serialize`` writes them in); the inverse of ``serialize``. A feature with no
    list is ``(declared dtype, [])`` (BYTES where none is declared). ValueError for
    bytes that are not an Example.

    Features whose key is in ``skip``, or not in ``only`` where it is given, are left
    out: their values never become Python objects (an image a caller does not want),
    and they are not checked.

    CorruptRecordError for a feature read that holds more than one list, and for one
    of another kind than ``specs`` (key -> FeatureSpec: the manifest's) declares: both
    read otherwise through TensorFlow's parser (the first list; a refusal), so every
    reader refuses them; so is a record that gives a key twice, which the two
    parsers read differently where its last entry holds no list."""
    message, decode_error = _EXAMPLE or declare()
    try:
        entries = message.FromString(data).features.feature
    except decode_error as e:
        raise ValueError(f"not a serialized tf.train.Example: {e}") from None
    feature_map = {e.key: e.value for e in entries}
    if len(feature_map) != len(entries):
        keys = [e.key for e in entries]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise CorruptRecordError(
            f"feature {twice[0]!r} is given {keys.count(twice[0])} times, where a record "
            f"holds each key once (protobuf reads the last, TensorFlow's parser the last "
            f"that holds a list); the record was not written so by tfrecorder")
    out: dict[str, tuple[str, list]] = {}
    for key in sorted(feature_map) if only is None else sorted(only):
        feature = feature_map.get(key)
        if feature is None or key in skip:
            continue
        b, f, i = feature.bytes_list, feature.float_list, feature.int64_list
        if len(b) + len(f) + len(i) == 1:
            kind, values = (BYTES, b[0].value) if b else (FLOAT, f[0].value) if f else (
                INT64, i[0].value)
        elif b or f or i:
            raise CorruptRecordError(
                f"feature {key!r} holds {len(b)} bytes, {len(f)} float and {len(i)} int64 "
                f"lists, where a Feature holds one (TensorFlow's parser reads only the "
                f"first); the record was not written so by tfrecorder")
        else:
            kind, values = None, ()
        declared = specs.get(key) if specs else None
        if declared is not None:
            if kind is None:
                kind = declared.dtype
            elif kind != declared.dtype:
                raise CorruptRecordError(
                    f"feature {key!r} holds a {kind} list where the manifest declares "
                    f"{declared.dtype} (TensorFlow's parser refuses it too); the record "
                    f"was not written so by tfrecorder")
        out[key] = (kind or BYTES, list(values))
    return out
