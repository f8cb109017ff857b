import os
import subprocess
import sys

import pytest

from tfrecorder._folder import example


def _tf_example(tf, features):
    return tf.train.Example(features=tf.train.Features(feature=features))


def test_serialized_example_equals_the_one_tensorflow_builds(tf):
    ours = example.serialize({
        "image": example.bytes_feature([b"\x00\xff" * 300]),
        "name": example.bytes_feature(["héllo", b""]),
        "label": example.int64_feature([3, -1, 2**40]),
        "x": example.float_feature([1.5, -2.0]),
        "empty_i": example.int64_feature([]),
        "empty_f": example.float_feature([]),
        "empty_b": example.bytes_feature([]),
    })
    expected = _tf_example(tf, {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\x00\xff" * 300])),
        "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=["héllo".encode(), b""])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[3, -1, 2**40])),
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5, -2.0])),
        "empty_i": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
        "empty_f": tf.train.Feature(float_list=tf.train.FloatList(value=[])),
        "empty_b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[])),
    })
    assert tf.train.Example.FromString(ours) == expected


@pytest.mark.parametrize("key,feature,tf_feature", [
    ("b", lambda: example.bytes_feature([b"ab", b"c"]),
     lambda tf: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"ab", b"c"]))),
    ("i", lambda: example.int64_feature([0, 127, 128, -5]),
     lambda tf: tf.train.Feature(int64_list=tf.train.Int64List(value=[0, 127, 128, -5]))),
    ("f", lambda: example.float_feature([0.25, 3e9]),
     lambda tf: tf.train.Feature(float_list=tf.train.FloatList(value=[0.25, 3e9]))),
])
def test_single_feature_bytes_equal_protobuf_deterministic_serialization(tf, key, feature, tf_feature):
    ours = example.serialize({key: feature()})
    theirs = _tf_example(tf, {key: tf_feature(tf)}).SerializeToString(deterministic=True)
    assert ours == theirs


def test_parse_single_example_reads_our_bytes(tf):
    raw = example.serialize({"label": example.int64_feature([7]),
                             "image": example.bytes_feature([b"abc"]),
                             "w": example.float_feature([0.5])})
    parsed = tf.io.parse_single_example(raw, {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "image": tf.io.FixedLenFeature([], tf.string),
        "w": tf.io.FixedLenFeature([], tf.float32),
    })
    assert parsed["label"].numpy() == 7
    assert parsed["image"].numpy() == b"abc"
    assert parsed["w"].numpy() == 0.5


def test_key_order_does_not_change_the_bytes():
    a = {"z": example.int64_feature([1]), "a": example.bytes_feature([b"x"])}
    b = {"a": example.bytes_feature([b"x"]), "z": example.int64_feature([1])}
    assert example.serialize(a) == example.serialize(b)


def test_int64_out_of_range_is_refused():
    with pytest.raises(OverflowError):
        example.int64_feature([2**63])


def test_parse_reads_what_tensorflow_serializes(tf):
    ex = tf.train.Example(features=tf.train.Features(feature={
        "b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x", b""])),
        "i": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, -2, 2**62])),
        "f": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5, -1.25])),
        "e": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
    }))
    assert example.parse(ex.SerializeToString()) == {
        "b": ("bytes", [b"x", b""]), "i": ("int64", [1, -2, 2**62]),
        "f": ("float", [0.5, -1.25]), "e": ("int64", [])}


def test_parse_inverts_serialize():
    feats = {"image": example.bytes_feature([b"\xff" * 1000]), "label": example.int64_feature([9])}
    assert example.parse(example.serialize(feats)) == {
        "image": ("bytes", [b"\xff" * 1000]), "label": ("int64", [9])}


def test_large_bytes_feature_serializes_like_bytes_feature():
    value = bytes(range(256)) * 300
    small = {"label": example.int64_feature([1]), "name": example.bytes_feature(["x"])}
    a = example.serialize({**small, "image": example.bytes_feature([value])})
    segments = example.serialize_segments({**small, "image": example.LargeBytesFeature(value)})
    assert b"".join(segments) == a
    assert any(p is value for p in segments)  # the value is not copied
    assert len(segments) == 3  # the small bytes before and after it are one segment each


def test_parse_only_some_keys_gives_those_as_the_full_parse_does():
    raw = example.serialize({"image": example.bytes_feature([b"\x01" * 500]),
                             "label": example.int64_feature([4]),
                             "name": example.bytes_feature(["a.jpg"]),
                             "w": example.float_feature([0.5])})
    full = example.parse(raw)
    assert list(full) == ["image", "label", "name", "w"]  # sorted, as serialize writes
    assert example.parse(raw, only={"label", "image", "absent"}) == {
        "image": full["image"], "label": full["label"]}
    assert example.parse(raw, skip={"image"}, only={"image", "w"}) == {"w": ("float", [0.5])}
    assert example.parse(raw, only=set()) == {}


def _field(number: int, wire: int, body: bytes | int) -> bytes:
    tag = bytes([number << 3 | wire])
    if wire == 0:
        return tag + example._varint(body)
    return tag + example._varint(len(body)) + body


def test_parse_reads_unpacked_ints_and_a_feature_without_a_kind():
    # Other writers may send int64 values one field each (unpacked), and a Feature with
    # no list set at all.
    ints = _field(3, 2, _field(1, 0, 5) + _field(1, 0, (1 << 64) - 3))  # 5, -3
    entries = (_field(1, 2, _field(1, 2, b"i") + _field(2, 2, ints))
               + _field(1, 2, _field(1, 2, b"none") + _field(2, 2, b"")))
    raw = _field(1, 2, entries)
    assert example.parse(raw) == {"i": ("int64", [5, -3]), "none": ("bytes", [])}


@pytest.mark.parametrize("raw", [b"\x0a\x05abc", b"\xff\xff\xff", b"\x0a\x03\x0a\x01"])
def test_bytes_that_are_no_example_are_a_value_error(raw):
    with pytest.raises(ValueError, match="not a serialized tf.train.Example"):
        example.parse(raw)


def test_parsing_leaves_tensorflows_example_alone(tf):
    raw = example.serialize({"label": example.int64_feature([1])})
    assert example.parse(raw) == {"label": ("int64", [1])}
    assert tf.train.Example.FromString(raw).features.feature["label"].int64_list.value == [1]
    assert tf.train.Example.DESCRIPTOR.full_name == "tensorflow.Example"


@pytest.mark.slow  # another Python process
def test_threads_parsing_first_at_once_share_one_declaration():
    code = """
import threading
from tfrecorder._folder import example as e
raw = e.serialize({"x": e.int64_feature([1])})
go, got = threading.Barrier(16), []
def parse():
    go.wait()
    got.append((e.parse(raw), id(e.declare())))
threads = [threading.Thread(target=parse) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(got), len({i for _, i in got}), all(p == {"x": ("int64", [1])} for p, _ in got))
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": root}, check=True)
    assert done.stdout.split() == ["16", "1", "True"]


def test_message_classes_outlive_a_collection_between_parses():
    # Protobuf's upb backend makes a nested message's class on demand and frees it with
    # the last message of it; a collection in one thread freeing one that a parse in
    # another had just taken crashed a Grain reader's threads. Every class is kept.
    import gc
    import weakref

    raw = example.serialize({"b": example.bytes_feature([b"x"]),
                             "f": example.float_feature([1.0]),
                             "i": example.int64_feature([1])})
    message, _ = example.declare()
    parsed = message.FromString(raw)
    entries = list(parsed.features.feature)
    values = [e.value for e in entries]
    made = [type(parsed.features), type(entries[0]), type(values[0])] + [
        type(v.bytes_list[0] if v.bytes_list else v.float_list[0] if v.float_list
             else v.int64_list[0]) for v in values]
    kept = [weakref.ref(c) for c in made]
    assert len({c.__name__ for c in made}) == 6
    del parsed, entries, values, made
    gc.collect()
    assert all(r() is not None for r in kept)
    assert example.parse(raw) == {"b": ("bytes", [b"x"]), "f": ("float", [1.0]),
                                  "i": ("int64", [1])}


# --- a Feature of another kind, or of several lists: read as TensorFlow reads it, or refused

def _entry(key: str, feature: bytes) -> bytes:
    return example._field(0x0A, example._field(0x0A, key.encode()) + example._field(0x12, feature))


def _record(*entries: bytes) -> bytes:
    return example._field(0x0A, b"".join(entries))


_LISTS = {"bytes": lambda n: example.bytes_feature([bytes([65 + i]) * 2 for i in range(n)]),
          "int64": lambda n: example.int64_feature(range(2, 2 + n)),
          "float": lambda n: example.float_feature([0.5 * i for i in range(n)])}


class _Spec:
    def __init__(self, dtype):
        self.dtype = dtype


def _tf_values(tf, raw: bytes, dtype: str):
    """``label`` as TensorFlow's parser reads it declared a list of ``dtype``, or None
    where it refuses the record."""
    spec = {"label": tf.io.VarLenFeature({"bytes": tf.string, "int64": tf.int64,
                                          "float": tf.float32}[dtype])}
    try:
        return tf.io.parse_single_example(raw, spec)["label"].values.numpy().tolist()
    except tf.errors.InvalidArgumentError:
        return None


def _ours(raw: bytes, dtype: str):
    try:
        return example.parse(raw, specs={"label": _Spec(dtype)})["label"][1]
    except example.CorruptRecordError:
        return None


def test_a_label_of_two_lists_or_of_another_kind_is_refused_as_tensorflow_reads_it(tf):
    int_then_bytes = _record(_entry("label", _LISTS["int64"](1) + _LISTS["bytes"](1)))
    assert _tf_values(tf, int_then_bytes, "int64") == [2]  # TensorFlow reads the first list
    with pytest.raises(example.CorruptRecordError, match="'label' holds 1 bytes, 0 float and "
                                                        "1 int64 lists, where a Feature holds one"):
        example.parse(int_then_bytes)
    for kind in ("float", "bytes"):
        raw = _record(_entry("label", _LISTS[kind](1)))
        assert _tf_values(tf, raw, "int64") is None
        with pytest.raises(example.CorruptRecordError,
                           match=f"'label' holds a {kind} list where the manifest declares int64"):
            example.parse(raw, specs={"label": _Spec("int64")})
        assert example.parse(raw)["label"][0] == kind  # nothing declared: nothing checked
    twice = _record(_entry("label", _LISTS["int64"](1)), _entry("label", b""))
    with pytest.raises(example.CorruptRecordError, match="'label' is given 2 times"):
        example.parse(twice)


@pytest.mark.slow  # TensorFlow's parser, a hundred records
def test_every_crafted_label_reads_as_tensorflow_reads_it_or_is_refused(tf):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    kinds = st.sampled_from(sorted(_LISTS))
    feature = st.lists(st.tuples(kinds, st.integers(0, 2)), max_size=3)  # its lists, in order
    entries = st.lists(feature, min_size=1, max_size=2)  # the key given once or twice

    @settings(max_examples=120, deadline=None, derandomize=True)
    @given(entries, kinds)
    def check(given_entries, declared):
        raw = _record(*(_entry("label", b"".join(_LISTS[k](n) for k, n in lists))
                        for lists in given_entries))
        theirs, ours = _tf_values(tf, raw, declared), _ours(raw, declared)
        if ours is not None:
            assert ours == theirs  # what we read, TensorFlow reads
        # We refuse where TensorFlow does, where it would read only the first list, and
        # a key given twice.
        assert (ours is None) == (theirs is None or len(given_entries) > 1
                                  or len(given_entries[0]) > 1)

    check()
