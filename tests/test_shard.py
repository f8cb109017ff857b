import os

import pytest

from tfrecorder._writer import shard
from tfrecorder._folder import example
from tfrecorder._folder import layout, ledger
from tfrecorder._writer.plan import ShardTask
from tfrecorder._inputs.block import Row
from tests.conftest import SAMPLES, encode, exits_after_interrupt, read_examples


def _settings(tmp_path, columns=("split", "image_uri", "label"), **kw):
    run = ledger.RunFolder(str(tmp_path / "out"), "r1")
    return shard.WriteSettings(run, columns, **kw)


def _written(tmp_path):
    """The folder a run's shards are written into."""
    return tmp_path / "out" / layout.TMP_DIR / "r1"


def _row(i, uri, label=0):
    return Row(i, "train", uri, {"label": example.int64_feature([label])}, ("TRAIN", uri, label),
               (label,))


def test_good_rows_are_written_and_bad_rows_returned_with_reasons(tf, tmp_path, image_table):
    good = image_table("a.jpg", encode("RGB", fmt="JPEG"))
    png = image_table("b.png", encode("RGBA", fmt="PNG", seed=1))
    broken = image_table("c.jpg", encode("RGB", fmt="JPEG")[:-30])
    os.makedirs(tmp_path / "dir.jpg")
    task = ShardTask("train", 0, 1, "d-train.tfrecord-00000-of-00001", [
        _row(1, good, 1), _row(2, str(tmp_path / "missing.jpg")), _row(3, broken),
        _row(4, png, 2), _row(5, str(tmp_path / "dir.jpg"))])
    out = _written(tmp_path)
    stats, bad = shard.write(task, _settings(tmp_path))

    assert stats.num_examples == 2 and stats.channels == {3: 1, 4: 1}
    assert stats.num_bytes == os.path.getsize(out / task.filename)
    assert [(q.row, q.failed_at) for q in bad] == [(2, "read"), (3, "image"), (5, "read")]
    assert "not found" in bad[0].reason and "truncated JPEG" in bad[1].reason
    assert "directory" in bad[2].reason
    assert bad[0].values == {"split": "TRAIN", "image_uri": str(tmp_path / "missing.jpg"), "label": 0}
    assert sorted(os.listdir(out)) == [task.filename, "index", "rows"]  # .part renamed
    # The index file, from the lengths the writer framed: the shard's own framing.
    from tfrecorder._folder import index
    from tfrecorder._folder import records

    assert stats.index_file == index.name(task.filename)
    with open(out / task.filename, "rb") as f:
        assert index.read(str(out), task.filename) == list(records.scan(f))

    ex = read_examples(tf, [str(out / task.filename)])
    assert [e["image"][0] for e in ex] == [open(good, "rb").read(), open(png, "rb").read()]
    assert [e["label"] for e in ex] == [[1], [2]]
    assert [e["image_name"] for e in ex] == [[b"a.jpg"], [b"b.png"]]


def test_the_rows_file_holds_one_line_per_record_in_file_order(tmp_path, image_table):
    import hashlib

    from tfrecorder._folder import rows

    good = image_table("a.jpg", encode("RGB", fmt="JPEG"))
    png = image_table("b.png", encode("RGBA", fmt="PNG", seed=1))
    task = ShardTask("train", 0, 1, "d-train.tfrecord-00000-of-00001", [
        _row(1, good, 1), _row(2, str(tmp_path / "missing.jpg")), _row(4, png, 0)])
    settings = _settings(tmp_path, image_column=1, label_names=("cat", "dog"),
                         near_duplicates=True)
    stats, bad = shard.write(task, settings)
    assert stats.rows_file == "rows/d-train.tfrecord-00000-of-00001.rows.jsonl.gz"
    lines = rows.read(str(_written(tmp_path) / stats.rows_file))
    assert [(e["row"], e["key"], e["label"]) for e in lines] == [(1, good, ["dog"]),
                                                                  (4, png, ["cat"])]
    for e, path in zip(lines, (good, png)):
        st = os.stat(path)
        assert (e["size"], e["stamp"]) == (st.st_size, st.st_mtime_ns)
        assert e["sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest()
        assert len(e["phash"]) == 16 and e["split"] == "train"
    assert (lines[0]["w"], lines[0]["h"], lines[0]["format"]) == (24, 16, "jpeg")
    assert lines[1]["format"] == "png" and "features" not in lines[0]


def test_gzip_shard_is_readable(tf, tmp_path, image_table):
    good = image_table("a.jpg", encode("RGB", fmt="JPEG"))
    task = ShardTask("train", 0, 1, "d-train.tfrecord-00000-of-00001.gz", [_row(1, good, 4)])
    stats, bad = shard.write(task, _settings(tmp_path))
    ex = read_examples(tf, [str(_written(tmp_path) / task.filename)], "GZIP")
    assert [e["label"] for e in ex] == [[4]] and not bad


def test_rows_without_images_keep_their_features(tf, tmp_path):
    row = Row(1, "train", None, {"x": example.float_feature([2.5])}, (2.5,))
    task = ShardTask("train", 0, 1, "t-train.tfrecord-00000-of-00001", [row])
    shard.write(task, _settings(tmp_path, columns=("x",)))
    assert read_examples(tf, [str(_written(tmp_path) / task.filename)]) == [{"x": [2.5]}]


def test_files_that_are_not_regular_or_too_large_are_quarantined_unread(tmp_path, image_table):
    import socket

    fifo = str(tmp_path / "fifo.jpg")
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "socket.jpg"))
    big = image_table("big.jpg", encode("RGB", size=(200, 200), fmt="JPEG"))
    small = image_table("small.jpg", encode("RGB", size=(8, 8), fmt="JPEG"))
    uris = ["/dev/zero", "/dev/urandom", fifo, str(tmp_path / "socket.jpg"), str(tmp_path), big,
            small]
    task = ShardTask("train", 0, 1, "d-train.tfrecord-00000-of-00001",
                     [_row(i, u) for i, u in enumerate(uris)])
    limit = os.path.getsize(small)
    try:
        stats, bad = shard.write(task, _settings(tmp_path, max_image_bytes=limit))
    finally:
        sock.close()
    reasons = {q.row: q.reason for q in bad}
    assert stats.num_examples == 1 and sorted(reasons) == [0, 1, 2, 3, 4, 5]
    assert "character device" in reasons[0] and "character device" in reasons[1]
    assert "FIFO" in reasons[2] and "socket" in reasons[3] and "directory" in reasons[4]
    assert "too large" in reasons[5] and "max_image_bytes" in reasons[5]


def test_read_all_prepares_images_in_its_threads_and_keeps_their_order():
    # Two jobs must be in flight at once to pass the barrier: with one thread it breaks.
    import threading

    barrier = threading.Barrier(2, timeout=10)
    threads_seen = set()

    def prepare(data: bytes) -> bytes:
        threads_seen.add(threading.get_ident())
        if data in (b"0", b"1"):
            barrier.wait()
        return data.upper()

    uris = ["0", "1", None, "x", "y"]
    got = list(shard.read_all(uris, 2, read=lambda u: u.encode(), then=prepare))
    assert got == [b"0", b"1", None, b"X", b"Y"]
    assert len(threads_seen) == 2


def test_a_pre_sized_shard_is_the_same_prepared_in_one_thread_or_several(tmp_path, image_table):
    from tfrecorder._writer import image

    uris = [image_table(f"{i}.jpg", encode("RGB", size=(90 + i, 60), fmt="JPEG", seed=i))
            for i in range(12)]
    broken = image_table("broken.jpg", encode("RGB", fmt="JPEG")[:-30])
    rows = [_row(i, u, i % 3) for i, u in enumerate(uris)] + [_row(20, broken)]
    written = {}
    for threads in (1, 3):
        task = ShardTask("train", 0, 1, f"t{threads}-train.tfrecord-00000-of-00001", rows)
        stats, bad = shard.write(task, _settings(
            tmp_path, sizing=image.Sizing(32, 90), near_duplicates=True, work_threads=threads))
        assert [q.row for q in bad] == [20]
        written[threads] = (stats.digest, stats.look.seen, stats.look.sums, stats.source_bytes)
    assert written[1] == written[3]
    assert len(written[1][1]) == 12 and all(h is not None for _, h, _ in written[1][1])


@pytest.mark.slow  # another Python process, a conversion
def test_a_conversion_interrupted_as_the_digest_thread_starts_lets_python_exit(tmp_path):
    rc, out, err = exits_after_interrupt("tfrecorder-digests", f"""
import tfrecorder
tfrecorder.convert({os.path.join(SAMPLES, "data.csv")!r}, {str(tmp_path / "out")!r},
                   progress=False)
""", f"""
import tfrecorder  # the process converts again: a thread of its own hashes the images
print(tfrecorder.convert({os.path.join(SAMPLES, "data.csv")!r}, {str(tmp_path / "again")!r},
                         progress=False).rows_written)
""")
    assert (rc, out.split()) == (0, ["interrupted", "36"]), err
