import io

import pytest

from tfrecorder._folder import index, layout
from tfrecorder._folder import records
from tfrecorder._errors import CorruptRecordError


def test_frame_matches_tensorflow_writer_byte_for_byte(tf, tmp_path):
    payloads = [b"", b"a", b"hello world" * 100, bytes(range(256))]
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for p in payloads:
            w.write(p)
    ours = io.BytesIO()
    for p in payloads:
        records.write_record(ours, p)
    assert ours.getvalue() == open(path, "rb").read()


def test_golden_empty_record():
    # Length 0, the masked CRC32C of those 8 bytes, no data, and the masked CRC32C of
    # b"" (CRC 0, so just the mask delta 0xa282ead8), all little endian.
    assert records.frame(b"") == bytes.fromhex("0000000000000000" "29039807" "d8ea82a2")


def test_read_records_round_trip():
    buf = io.BytesIO()
    data = [b"x" * n for n in (0, 1, 1000)]
    for d in data:
        records.write_record(buf, d)
    buf.seek(0)
    assert list(records.read_records(buf)) == data


@pytest.mark.parametrize("position", [3, 10, 14, 30])
def test_a_flipped_byte_is_reported_with_the_file_name(position):
    buf = bytearray(records.frame(b"some record data") + records.frame(b"more"))
    buf[position] ^= 0x01
    with pytest.raises(CorruptRecordError, match="shard-7"):
        list(records.read_records(io.BytesIO(bytes(buf)), "shard-7"))


def test_truncated_file_is_reported():
    data = records.frame(b"abcdef")[:-3]
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(records.read_records(io.BytesIO(data), "f"))


def test_shard_name_formats_and_parses():
    name = layout.ShardName("flowers", "train", 2, 8)
    assert str(name) == "flowers-train.tfrecord-00002-of-00008"
    assert layout.ShardName.parse(str(name)) == name
    gz = layout.ShardName("data", "test", 0, 1, gzip=True)
    assert str(gz) == "data-test.tfrecord-00000-of-00001.gz"
    assert layout.ShardName.parse(str(gz)) == gz


@pytest.mark.parametrize("name", [
    "tfrecorder.json", "data-train.tfrecord-00000-of-00001.part",
    ".data-train.tfrecord-00000-of-00001", "data-Train.tfrecord-00000-of-00001",
    "1data-train.tfrecord-00000-of-00001", "data-train.tfrecord-0-of-1",
])
def test_non_shard_names_do_not_parse(name):
    assert layout.ShardName.parse(name) is None


def test_record_parts_are_framed_like_one_record():
    segments = [b"abc", b"", b"x" * 5000, b"z"]
    buf = io.BytesIO()
    n = records.write_record_segments(buf, segments)
    assert buf.getvalue() == records.frame(b"".join(segments)) and n == len(buf.getvalue())


# --- the records of a file from their length fields (what an index file lists) ---------

def _framed(datas):
    buf = io.BytesIO()
    for d in datas:
        records.write_record(buf, d)
    return buf


def test_scan_gives_the_offset_and_framed_length_of_every_record():
    datas = [b"a" * 5, b"", b"xyz" * 100]
    entries = list(records.scan(_framed(datas)))
    assert entries == [(0, 21), (21, 16), (37, 316)]
    assert entries == index.offsets([records.framed_length(d) for d in datas])


def test_scan_refuses_a_truncated_shard_and_a_bad_length():
    data = _framed([b"abc", b"defg"]).getvalue()
    with pytest.raises(CorruptRecordError, match="truncated record at byte 19"):
        list(records.scan(io.BytesIO(data[:-2])))
    broken = bytearray(data)
    broken[0] ^= 1
    with pytest.raises(CorruptRecordError, match="bad length checksum at byte 0"):
        list(records.scan(io.BytesIO(bytes(broken))))
