"""Hostile inputs, failure budgets, killed runs, damaged records, and no escapes."""

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import tfrecorder
from tfrecorder._folder import layout, metadata
from tfrecorder._folder import records
from tests.conftest import SAMPLES, encode, read_split, timeless


def _save(img, fmt, **kw) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **kw)
    return out.getvalue()


def _animated_gif() -> bytes:
    frames = [Image.new("P", (20, 12), i) for i in (1, 2, 3)]
    for f in frames:
        f.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255] * 64)
    return _save(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)


def _exif_rotated() -> bytes:
    img = Image.new("RGB", (40, 20), (200, 10, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 when displayed
    return _save(img, "JPEG", exif=exif.tobytes())


def _bomb() -> bytes:
    # 15,000 x 15,000 one-bit pixels: 225 million, over twice Pillow's limit, in ~30 KB.
    return _save(Image.new("1", (15000, 15000)), "PNG")


def _hundred_megapixels() -> bytes:
    # 10,000 x 10,000: as many pixels as a 108 MP phone photo; Pillow only warns.
    return _save(Image.new("1", (10000, 10000)), "PNG")


def _motion_photo() -> bytes:
    # A JPEG followed by a video, as Google's Motion Photos are.
    return encode(size=(32, 24), seed=9) + b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 64


def _fifty_megabytes() -> bytes:
    rng = np.random.default_rng(0)
    return _save(Image.fromarray(rng.integers(0, 256, (4000, 4200, 3), dtype=np.uint8)), "BMP")


# name -> (file name, bytes or None for "do not create", expected outcome)
# outcome: ("written", channels) or ("quarantined", words of the reason)
HOSTILE = {
    "truncated jpeg": ("trunc.jpg", lambda: encode(size=(64, 64))[:-100], ("quarantined", "truncated JPEG")),
    "zero bytes": ("zero.jpg", lambda: b"", ("quarantined", "empty file")),
    "text named .jpg": ("text.jpg", lambda: b"name,value\n1,2\n", ("quarantined", "not a readable image")),
    "cmyk jpeg": ("cmyk.jpg", lambda: encode("CMYK", fmt="JPEG"), ("written", 3)),
    "16-bit png": ("deep.png", lambda: encode("I;16", fmt="PNG"), ("written", 1)),
    "palette png with transparency": ("pal.png", lambda: encode("P", fmt="PNG", transparency=0), ("written", 4)),
    "grey+alpha png": ("la.png", lambda: encode("LA", fmt="PNG"), ("written", 2)),
    "animated gif": ("anim.gif", _animated_gif, ("written", 3)),
    "exif-rotated jpeg": ("rotated.jpg", _exif_rotated, ("written", 3)),
    "1x1 image": ("dot.png", lambda: encode("RGB", size=(1, 1), fmt="PNG"), ("written", 3)),
    "decompression bomb": ("bomb.png", _bomb, ("quarantined", "decompression bomb")),
    "100-megapixel image": ("huge.png", _hundred_megapixels, ("written", 1)),
    "motion photo": ("motion.jpg", _motion_photo, ("written", 3)),
    "missing file": ("missing.jpg", None, ("quarantined", "not found")),
    "directory as image": ("a_directory.jpg", "dir", ("quarantined", "is a directory")),
    "odd path": ('we ird, "quoted" ñame é.jpg', lambda: encode(seed=5), ("written", 3)),
    "50 MB image": ("big.bmp", _fifty_megabytes, ("written", 3)),
}


#: Bytes that follow the image itself in a hostile file.
APPENDED = {"motion.jpg": len(b"\x00\x00\x00\x18ftypmp42") + 256 * 64}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, tf):
    root = tmp_path_factory.mktemp("hostile")
    (root / "img").mkdir()
    rows, expected = [], {}
    for case, (name, make, outcome) in HOSTILE.items():
        path = root / "img" / name
        if make == "dir":
            path.mkdir()
        elif make is not None:
            path.write_bytes(make())
        rows.append(["TRAIN", f"img/{name}", case])
        expected[f"img/{name}"] = outcome
    rows.append(["TEST", "img/dot.png", "1x1 image"])  # the same image listed twice
    with open(root / "data.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    out = root / "out"
    result = tfrecorder.convert(str(root / "data.csv"), str(out), max_error_fraction=1.0)
    return root, out, result, expected, len(rows)


@pytest.mark.slow  # a conversion end to end
def test_every_hostile_row_is_written_or_quarantined_with_its_reason(tf, hostile):
    root, out, result, expected, n_rows = hostile
    assert result.rows_in == n_rows == result.rows_written + result.rows_quarantined
    errors = {os.path.relpath(e["image_uri"], root): e
              for e in map(json.loads, open(out / "errors.jsonl", encoding="utf-8"))}
    written = {}
    for ex in read_split(tf, out):
        written.setdefault(ex["image_name"][0].decode(), []).append(ex)
    for uri, (kind, detail) in expected.items():
        name = os.path.basename(uri)
        if kind == "quarantined":
            assert uri in errors and name not in written, uri
            assert detail in errors[uri]["reason"], (uri, errors[uri]["reason"])
        else:
            assert uri not in errors, (uri, errors.get(uri))
            for ex in written[name]:
                decoded = tf.io.decode_image(ex["image"][0], expand_animations=False)
                shape = [ex["image_height"][0], ex["image_width"][0], ex["image_channels"][0]]
                assert decoded.shape.as_list() == shape, uri
                assert shape[2] == detail, uri
                raw = open(root / uri, "rb").read()
                kept = len(raw) - APPENDED.get(name, 0)  # what follows an image is not kept
                assert ex["image"][0] == raw[:kept]
    assert len(written["dot.png"]) == 2  # a duplicate row is written twice


@pytest.mark.slow  # a conversion end to end
def test_exif_orientation_is_not_applied(tf, hostile):
    # TensorFlow ignores EXIF orientation, so the stored size is the file's own 40x20.
    root, out, *_ = hostile
    exs = read_split(tf, out, "train")
    (rot,) = [e for e in exs if e["image_name"] == [b"rotated.jpg"]]
    assert (rot["image_width"], rot["image_height"]) == ([40], [20])


@pytest.mark.slow  # a conversion end to end
def test_every_written_file_passes_a_full_checksummed_read(tf, hostile):
    _, out, result, *_ = hostile
    v = tfrecorder.verify(str(out))
    assert v.records == result.rows_written
    m = metadata.read_manifest(str(out))
    for split in m.splits:
        assert len(read_split(tf, out, split)) == m.splits[split].num_examples


@pytest.mark.slow  # a conversion end to end
def test_a_flipped_byte_is_reported_by_file_name(tf, tmp_path, image_table):
    paths = [image_table(f"{i}.jpg", encode(seed=i)) for i in range(5)]
    out = tmp_path / "out"
    tfrecorder.convert(_frame(paths), str(out))
    (shard,) = metadata.read_manifest(str(out)).files("train")
    data = bytearray((out / shard).read_bytes())
    data[len(data) // 2] ^= 0x40
    (out / shard).write_bytes(bytes(data))
    with pytest.raises(tfrecorder.CorruptRecordError, match=shard):
        tfrecorder.verify(str(out))
    with pytest.raises(tf.errors.DataLossError):  # TensorFlow's reader refuses it too
        for _ in tf.data.TFRecordDataset(str(out / shard)):
            pass


def _frame(paths, split="TRAIN"):
    import pandas as pd

    return pd.DataFrame({"split": split, "image_uri": paths, "label": "x"})


@pytest.mark.slow  # a conversion end to end
def test_failure_budget_fails_the_run_and_leaves_no_manifest(tmp_path, image_table):
    good = [image_table(f"{i}.jpg", encode(seed=i)) for i in range(7)]
    bad = [str(tmp_path / f"gone{i}.jpg") for i in range(3)]
    out = tmp_path / "out"
    with pytest.raises(tfrecorder.ConversionError,
                       match=r"3 of 10 rows.*max_error_fraction=0.2.*image file not found"):
        tfrecorder.convert(_frame(good + bad), str(out), max_error_fraction=0.2)
    assert not (out / "tfrecorder.json").exists()
    assert len((out / "errors.jsonl").read_text().splitlines()) == 3
    with pytest.raises(tfrecorder.IncompleteOutputError):
        tfrecorder.load(str(out))
    result = tfrecorder.convert(_frame(good + bad), str(out), max_error_fraction=0.3,
                                mode="overwrite")
    assert result.rows_quarantined == 3


@pytest.mark.slow
def test_a_run_that_failed_its_budget_is_replaced_by_the_fixed_run_without_overwrite(
        tmp_path, image_table):
    # Its errors file and its own folder are the failed run's, not an output to keep:
    # the same command with the fix runs into the folder as into an empty one. A file
    # of the user's there still makes the folder one that holds data.
    good = [image_table(f"{i}.jpg", encode(seed=i)) for i in range(7)]
    broken = [image_table(f"broken{i}.jpg", b"not an image") for i in range(3)]
    out = tmp_path / "out"
    with pytest.raises(tfrecorder.ConversionError, match="3 of 10 rows"):
        tfrecorder.convert(_frame(good + broken), str(out), max_error_fraction=0.2)
    assert sorted(os.listdir(out)) == [layout.TMP_DIR, "errors.jsonl"]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(tfrecorder.OutputExistsError, match="notes.txt"):
        tfrecorder.convert(_frame(good), str(out))
    (out / "notes.txt").unlink()
    result = tfrecorder.convert(_frame(good), str(out))  # the bad rows taken out
    assert result.rows_written == 7 and result.rows_quarantined == 0
    assert not (out / layout.TMP_DIR).exists() and (out / "errors.jsonl").read_text() == ""


@pytest.mark.slow  # a conversion end to end
def test_half_written_files_of_ours_are_removed_and_the_users_kept(tmp_path, image_table):
    # What a run killed inside a write leaves: a temporary file beside each file of ours
    # it was replacing (``storage.temp_name``). The next run removes them, wherever they
    # are in the folder, and never a file of the user's whose name merely looks alike.
    good = [image_table(f"{i}.jpg", encode(seed=i)) for i in range(4)]
    out = tmp_path / "out"
    tfrecorder.convert(_frame(good), str(out))
    half = ["quality.json.0123456789ab.tmp", "tfrecorder.json.0123456789ab.tmp",
            "versions/00002.json.0123456789ab.tmp", "rows/x.0123456789ab.tmp",
            "data-train.tfrecord-00000-of-00001.abcdefabcdef.tmp"]
    theirs = ["notes.txt.0123456789ab.tmp", "rows/notes.0123456789ab.tmp"]
    for name in half + theirs:
        (out / name).write_bytes(b"half")
    holder = json.dumps({"host": "elsewhere", "pid": 1, "runner": "DirectRunner",
                         "expires": 0})
    (out / ".tfrecorder.lock.0123456789ab.tmp").write_text(holder)  # a live maker's, maybe
    result = tfrecorder.convert(_frame(good[:3]), str(out), mode="overwrite")
    assert result.rows_written == 3
    left = {p.relative_to(out).as_posix() for p in out.rglob("*.tmp")}
    assert left == {"rows/x.0123456789ab.tmp", *theirs, ".tfrecorder.lock.0123456789ab.tmp"}


# The run signals on a pipe once it has written records into a shard that is not
# finished, then waits to be killed: the test waits on that signal, not on the clock.
_KILL_SCRIPT = """
import os, sys, threading, tfrecorder
from tfrecorder._folder import records
signal_fd, written = int(sys.argv[3]), []
real = records.write_record_segments
def write_then_signal(file, parts, *rest):
    n = real(file, parts, *rest)
    written.append(n)
    if len(written) == 100:
        os.write(signal_fd, b"x")
        threading.Event().wait()
    return n
records.write_record_segments = write_then_signal
tfrecorder.convert(sys.argv[1], sys.argv[2], num_shards=4, mode="overwrite", progress=False)
"""


def _tree(out):
    """Every file below ``out`` (index files included), by relative path."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def _final_shards(out):
    return sorted(n for n in os.listdir(out) if layout.ShardName.parse(n))


@pytest.mark.slow
@pytest.mark.parametrize("previous", [False, True], ids=["empty directory", "over an output"])
def test_a_killed_run_leaves_nothing_that_looks_complete(tmp_path, image_table, previous):
    # 1,200 rows of ~200 KB images: long enough to be caught while shards are written.
    rng = np.random.default_rng(1)
    pics = [image_table(f"p{i}.bmp", _save(Image.fromarray(
        rng.integers(0, 256, (240, 280, 3), dtype=np.uint8)), "BMP")) for i in range(12)]
    csv_path = tmp_path / "data.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["split", "image_uri", "label"])
        for i in range(1200):
            w.writerow(["TRAIN" if i % 5 else "TEST", pics[i % 12], f"l{i % 3}"])
    clean = tmp_path / "clean"
    tfrecorder.convert(str(csv_path), str(clean), num_shards=4)

    out = tmp_path / "killed"
    if previous:  # a complete output of another table is there before the killed run
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out))
        before = {n: (out / n).read_bytes() for n in _tree(out)}
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(csv_path), str(out),
                             str(write_end)], pass_fds=(write_end,))
    os.close(write_end)
    signalled = os.read(read_end, 1)  # blocks until the run is inside a shard
    os.close(read_end)
    assert signalled == b"x", "the run ended before it signalled"
    (run,) = (out / layout.TMP_DIR).iterdir()  # the run's own folder
    assert any(n.endswith(".part") for n in os.listdir(run))  # a shard is half written
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    if previous:  # the previous output is whole and readable, as it was
        for name, data in before.items():
            assert (out / name).read_bytes() == data, name
        assert tfrecorder.verify(str(out)).records == 36
    else:
        assert not (out / "tfrecorder.json").exists()
        with pytest.raises(tfrecorder.IncompleteOutputError):
            tfrecorder.load(str(out))
        assert _final_shards(out) == []  # shards get their names only when the run ends
    tfrecorder.convert(str(csv_path), str(out), num_shards=4, mode="overwrite")
    assert sorted(os.listdir(out)) == sorted(os.listdir(clean))
    assert _tree(out) == _tree(clean)
    for name in _tree(clean):  # (but for the time each was published)
        assert timeless(out / name) == timeless(clean / name), name


@pytest.mark.slow  # a conversion end to end
def test_nothing_is_written_outside_the_output_directory(tmp_path, image_table):
    inside = image_table("data/a.jpg", encode(seed=1))
    outside = image_table("elsewhere/b.jpg", encode(seed=2))
    uris = [inside, os.path.join(str(tmp_path), "data", "..", "elsewhere", "b.jpg"),
            "../../../../../../etc/passwd", os.path.join(str(tmp_path), "data", "..", "..")]
    before = {p: os.path.getmtime(p) for p in _all_files(tmp_path)}
    out = tmp_path / "data" / "out"
    result = tfrecorder.convert(_frame(uris), str(out), max_error_fraction=1.0)
    assert result.rows_written == 2 and result.rows_quarantined == 2
    after = _all_files(tmp_path)
    new_or_changed = {p for p in after if p not in before or os.path.getmtime(p) != before[p]}
    assert new_or_changed and all(p.startswith(str(out) + os.sep) for p in new_or_changed)
    assert open(outside, "rb").read() == encode(seed=2)


def test_column_names_cannot_become_paths(tmp_path):
    from tfrecorder import types

    for bad in ("../labels", "/etc/x", ".hidden", ""):
        with pytest.raises(tfrecorder.ConfigError, match="column name"):
            tfrecorder.input_schema.Schema({bad: types.CategoricalInput})
    with pytest.raises(tfrecorder.ConfigError, match="share the file name 'a-b.labels.txt'"):
        tfrecorder.input_schema.Schema({"a/b": types.CategoricalInput, "a-b": types.StringInput})
    # A slash is a valid key (TensorFlow's "image/encoded" style); in a file name it is escaped.
    df = pd.DataFrame({"split": ["TRAIN", "TEST"], "kind/../x": ["p", "q"], "n": [1, 2]})
    schema = {"split": types.SplitKey, "kind/../x": types.CategoricalInput, "n": types.IntegerInput}
    tfrecorder.convert(df, str(tmp_path / "out"), schema=schema)
    assert "kind-..-x.labels.txt" in os.listdir(tmp_path / "out")
    out = tmp_path / "out"
    folders = ("index", "rows", "versions")
    assert {p for p in _all_files(tmp_path)} == {
        str(out / n) for n in os.listdir(out) if n not in folders} | {
        str(out / d / n) for d in folders for n in os.listdir(out / d)}


def _all_files(root):
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.slow
def test_json_of_ours_nested_too_deep_is_told_by_its_file_not_a_recursion(
        tmp_path, image_table, run_cli):
    # JSON nested a hundred thousand deep in place of each file of ours that is read as
    # JSON (the manifests, a lock, a dead run's ledger, TFDS's features): a one-line
    # error of ours, or the file taken as damaged, never Python's RecursionError.
    good = [image_table(f"{i}.jpg", encode(seed=i)) for i in range(4)]
    csv_path = tmp_path / "data.csv"
    _frame(good).to_csv(csv_path, index=False)
    base = tmp_path / "base"
    tfrecorder.convert(_frame(good), str(base))
    tfrecorder.convert(_frame(good[:3]), str(base), mode="update")
    deep = b'{"a":' * 100_000
    for name in ("tfrecorder.json", "versions/00001.json", ".tfrecorder.lock",
                 ".tfrecorder-tmp/0123456789ab/ledger.json", "features.json"):
        out = tmp_path / name.replace("/", "_")
        shutil.copytree(base, out)
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(deep)
        for args in (("convert", csv_path, out, "--update", "--no-progress"),
                     ("vacuum", out, "--keep", "1"), ("report", out)):
            done = run_cli(*args)
            assert "RecursionError" not in done.stderr and "Traceback" not in done.stderr, (
                name, args, done.stderr[-300:])
    (tmp_path / "deep.json").write_bytes(deep)
    done = run_cli("convert", csv_path, tmp_path / "o", "--schema", tmp_path / "deep.json")
    assert done.returncode == 2 and "nested too deep" in done.stderr


@pytest.mark.slow  # a conversion end to end
def test_a_damaged_errors_file_is_shown_as_far_as_it_can_be(tmp_path, image_table):
    good = [image_table(f"{i}.jpg", encode(seed=i)) for i in range(9)]
    out = tmp_path / "out"
    result = tfrecorder.convert(_frame(good + [str(tmp_path / "gone.jpg")]), str(out))
    assert result.rows_quarantined == 1
    (out / "errors.jsonl").write_text('{"row": 1, "reason": {"x": "<b>"}}\n[]\nnot json\n')
    again = tfrecorder.convert(_frame(good + [str(tmp_path / "gone.jpg")]), str(out),
                               mode="update")
    assert again.unchanged
    assert "&lt;b&gt;" in again._repr_html_()  # the reason shown as text, escaped


def test_the_lock_is_released_however_its_block_ends_unless_handed_on(tmp_path):
    from tfrecorder._folder import lock as _lock

    lock_file = tmp_path / layout.LOCK
    for ending in (KeyboardInterrupt, ValueError):
        with pytest.raises(ending):
            with _lock.acquire(str(tmp_path), "run-a", "DirectRunner"):
                assert lock_file.exists()
                raise ending()
        assert not lock_file.exists()
    # A submitted job goes on without this process: its last step removes the lock.
    with _lock.acquire(str(tmp_path), "run-b", "DataflowRunner", detached=True) as lock:
        lock.hand_over(job_id="job-1")
    assert json.loads(lock_file.read_text())["job_id"] == "job-1"
