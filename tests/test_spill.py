"""The one row path (``spill``): every kind of table, read in chunks and grouped in
buckets, gives exactly what it gives read whole."""

import os

import pandas as pd
import pytest

import tfrecorder
from tfrecorder._inputs import labels, schema, spill
from tfrecorder._folder import ledger, metadata
from tfrecorder._folder.lock import LOCK_TTL, acquire
from tests.conftest import SAMPLES, check_table, encode, timeless


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Chunks of 7 rows and buckets of 5 images, so that a small table spans many."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    monkeypatch.setattr(spill, "BUCKET_ROWS", 5)


def _pictures(tmp_path, n):
    paths = []
    for i in range(n):
        p = tmp_path / f"img{i:03d}.jpg"
        p.write_bytes(encode(size=(8, 6), seed=i))
        paths.append(str(p))
    return paths


def _files(out):
    # (but for the time a version was published, and the images' times: ``timeless``)
    return {str(p.relative_to(out)): timeless(p) for p in sorted(out.rglob("*"))
            if p.is_file()}


def _tables(tmp_path):
    """One table of every kind the driver reads, each spanning many tiny chunks."""
    paths = _pictures(tmp_path, 40)
    splits = ["TRAIN", "TEST", "", "VALIDATION"]
    tables = {}
    plain = tmp_path / "plain.csv"
    plain.write_text("".join(f"{splits[i % 4]},{p},c{i % 3}\n" for i, p in enumerate(paths)))
    tables["csv"] = str(plain)
    tables["dataframe"] = pd.DataFrame({"split": [splits[i % 4] for i in range(40)],
                                        "image_uri": paths, "label": [i % 5 for i in range(40)]})
    # multi-label: images listed again far below, with other labels
    multi = tmp_path / "multi.csv"
    multi.write_text("".join(f"{splits[(i % 25) % 4]},{paths[i % 25]},m{i % 4}\n"
                             for i in range(60)))
    tables["multi-label rows"] = str(multi)
    wide = tmp_path / "wide.csv"
    wide.write_text("".join(f"TRAIN,{p},a{i % 3},b{i % 2}\n" for i, p in enumerate(paths)))
    tables["multi-label wide rows"] = str(wide)
    tables["multi-label lists"] = pd.DataFrame({
        "split": "TRAIN", "image_uri": paths, "label": [[f"x{i % 3}", f"y{i % 4}"]
                                                         for i in range(40)]})
    det = tmp_path / "det.csv"
    det.write_text("".join(
        f"{splits[(i % 30) % 4]},{paths[i % 30]},d{i % 3},0.{i % 5},0.1,,,0.9,0.{5 + i % 4},,\n"
        for i in range(70)) + f"TEST,{paths[35]},,,,,,,,,\n")
    tables["detection"] = str(det)
    tree = tmp_path / "tree"
    for i, p in enumerate(paths):
        folder = tree / ["train", "test"][i % 2] / f"k{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        os.link(p, folder / f"{i}.jpg")
    tables["image directory"] = str(tree)
    return tables


@pytest.mark.slow  # a conversion end to end
@pytest.mark.parametrize("kind", ["csv", "dataframe", "multi-label rows",
                                  "multi-label wide rows", "multi-label lists", "detection",
                                  "image directory"])
def test_chunks_and_buckets_write_the_bytes_of_the_whole_table(tmp_path, monkeypatch, kind):
    source = _tables(tmp_path)[kind]
    whole = tfrecorder.convert(source, str(tmp_path / "whole"), num_shards=2)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    monkeypatch.setattr(spill, "BUCKET_ROWS", 5)
    chunked = tfrecorder.convert(source, str(tmp_path / "chunked"), num_shards=2)
    assert whole.rows_written == chunked.rows_written > 0
    assert _files(tmp_path / "whole") == _files(tmp_path / "chunked")


def test_grouped_records_come_in_the_order_of_their_images_first_rows(tmp_path, tiny_chunks):
    paths = _pictures(tmp_path, 12)
    # image i first appears on row i; its other rows come much later, in other chunks
    # and other buckets
    rows = [(paths[i], f"l{i % 2}") for i in range(12)] + [
        (paths[i], "extra") for i in (11, 0, 6, 3)]
    df = pd.DataFrame({"split": "TRAIN", "image_uri": [p for p, _ in rows],
                       "label": [v for _, v in rows]})
    checked = check_table(df, schema.IMAGE_CSV_SCHEMA, multi_label=True)
    assert [r.row for r in checked.rows] == list(range(12))
    assert [r.merged for r in checked.rows if r.merged] == [
        ((13, ("TRAIN", paths[0], "extra")),), ((15, ("TRAIN", paths[3], "extra")),),
        ((14, ("TRAIN", paths[6], "extra")),), ((12, ("TRAIN", paths[11], "extra")),)]
    extra = checked.vocabularies["label"].index("extra")
    assert [r.labels for r in checked.rows][:2] == [
        tuple(sorted((checked.vocabularies["label"].index("l0"), extra))),
        (checked.vocabularies["label"].index("l1"),)]


def test_a_detection_image_in_two_splits_is_named_and_nothing_is_written(tmp_path,
                                                                         tiny_chunks):
    paths = _pictures(tmp_path, 10)
    lines = [f"TRAIN,{p},cat,0.1,0.1,,,0.5,0.5,," for p in paths]
    lines.append(f"TEST,{paths[2]},cat,0.2,0.2,,,0.6,0.6,,")  # image 2 again, other split
    lines.append(f"TRAIN,{paths[4]},dog,0.7,0.1,,,0.5,0.5,,")  # x_min above x_max
    csv = tmp_path / "det.csv"
    csv.write_text("\n".join(lines) + "\n")
    with pytest.raises(tfrecorder.SchemaError) as e:
        tfrecorder.convert(str(csv), str(tmp_path / "out"))
    assert [(p.row, p.column) for p in e.value.problems] == [(12, "x_min"), (3, "image_uri")]
    assert "splits ['test', 'train'] on rows [3, 11]" in e.value.problems[1].reason
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a conversion end to end
def test_an_image_directory_is_listed_as_a_stream(tmp_path, tiny_chunks):
    tables = _tables(tmp_path)
    result = tfrecorder.convert(tables["image directory"], str(tmp_path / "out"))
    assert result.rows_in == result.rows_written == 40
    assert result.labels == ["k0", "k1", "k2"]


@pytest.mark.parametrize("keys,names,multi", [
    (["a", "b", "a"], ["x", "y", "x"], False),            # an image twice, one label
    (["a", "b", " a "], ["x", "y", "z"], True),           # " a " is image "a"
    (["a", "b", "a"], ["1", "y", "01"], False),           # "1" and "01" are one label
    (["a", None, "a", ""], ["x", "y", None, "z"], False),  # nulls are not compared
    (["a", None, "a"], ["x", "y", "z"], True),            # found among nulls too
])
def test_the_tally_finds_an_image_with_two_labels_across_chunks(keys, names, multi):
    from tfrecorder._inputs.table import ColumnFrame, Table

    chunks = [Table(ColumnFrame(
        {"split": ["TRAIN"], "image_uri": [k], "label": [v]}, 1), [i], None, "csv")
        for i, (k, v) in enumerate(zip(keys, names))]
    found = labels.tally(iter(chunks), schema.IMAGE_CSV_SCHEMA)
    assert found.multi is multi
    # per row, the first row of its image (nulls and blanks are one "no image" key)
    first = {}
    expected = [first.setdefault((k.strip() if isinstance(k, str) else None) or None, i)
                for i, k in enumerate(keys)]
    assert found.firsts.tolist() == expected


@pytest.mark.parametrize("names,multi", [
    (["x", "y", "x", "z"], False),
    (["x", ["y", "z"], "x", None], True),  # a list cell: multi-label by itself
])
def test_the_tally_keeps_no_first_rows_when_every_image_is_named_once(names, multi):
    from tfrecorder._inputs.table import ColumnFrame, Table

    chunks = [Table(ColumnFrame(
        {"split": ["TRAIN"] * 2, "image_uri": [f"gs://b/{i}.jpg", f"gs://b/{i} .jpg"],
         "label": names[2 * i:2 * i + 2]}, 2), [2 * i, 2 * i + 1], None, "csv")
        for i in range(2)]
    found = labels.tally(iter(chunks), schema.IMAGE_CSV_SCHEMA)
    assert found.multi is multi
    # a table that is grouped has every row's first row: its own
    assert (found.firsts is None) if not multi else found.firsts.tolist() == [0, 1, 2, 3]


@pytest.mark.slow  # a conversion end to end
def test_vocabularies_are_decided_over_the_whole_table(tmp_path, tiny_chunks):
    paths = _pictures(tmp_path, 30)
    # Whole numbers in the first chunks, a name in the last: the column is a vocabulary,
    # and "zebra", seen only at the end, still sorts after the numbers.
    labels = [str(i % 4) for i in range(29)] + ["zebra"]
    df = pd.DataFrame({"split": "TRAIN", "image_uri": paths, "label": labels})
    result = tfrecorder.convert(df, str(tmp_path / "out"))
    assert result.labels == ["0", "1", "2", "3", "zebra"]
    ints = pd.DataFrame({"split": "TRAIN", "image_uri": paths, "label": [i % 4 for i in range(30)]})
    assert tfrecorder.convert(ints, str(tmp_path / "o2")).labels == ["0", "1", "2", "3"]


def test_problems_of_every_chunk_are_reported_together_and_capped(tmp_path, tiny_chunks):
    rows = ["split,image_uri,label"]
    for i in range(1503):
        split = "HOLDOUT" if i >= 3 else "TRAIN"
        rows.append(f"{split},gs://b/{i}.jpg,x")
    rows[5] = "TRAIN,gs://b/ragged.jpg"  # a ragged row, among the bad splits
    path = tmp_path / "big.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(tfrecorder.SchemaError) as e:
        tfrecorder.convert(str(path), str(tmp_path / "out"))
    assert [p.row for p in e.value.problems] == [6]  # the table's shape first
    rows[5] = "TRAIN,gs://b/fixed.jpg,x"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(tfrecorder.SchemaError) as e:
        tfrecorder.convert(str(path), str(tmp_path / "out"))
    assert len(e.value.problems) == 1000 and e.value.problems[0].row == 5
    assert sum(e.value.unlisted.values()) == 1500 - 1 - 1000
    assert "1499 problem(s)" in str(e.value) and "more not listed" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_one_image_with_labels_in_different_chunks_is_one_record(tmp_path, tiny_chunks):
    paths = _pictures(tmp_path, 20)
    df = pd.DataFrame({"split": "TRAIN", "image_uri": paths + [paths[0]],
                       "label": ["a"] * 20 + ["b"]})  # the last row: image 0 again, "b"
    result = tfrecorder.convert(df, str(tmp_path / "out"), multi_label=True)
    assert (result.rows_in, result.rows_written, result.rows_per_split) == (21, 21, {"train": 20})
    assert metadata.read_manifest(str(tmp_path / "out")).features["label"].shape is None


@pytest.mark.slow  # a conversion end to end
def test_nothing_is_left_of_the_spill(tmp_path, monkeypatch, tiny_chunks):
    import tempfile

    spill_root = tmp_path / "tmp"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    csv, out = os.path.join(SAMPLES, "data.csv"), str(tmp_path / "out")
    tfrecorder.convert(csv, out)
    with pytest.raises(tfrecorder.SchemaError):
        tfrecorder.convert(pd.DataFrame({"split": ["NOPE"] * 9, "image_uri": "a.jpg",
                                         "label": "x"}), str(tmp_path / "o2"))
    assert os.listdir(spill_root) == []
    # refused after the table was read and spilled: the target holds an output, or is busy
    with pytest.raises(tfrecorder.OutputExistsError):
        tfrecorder.convert(csv, out)
    assert os.listdir(spill_root) == []
    lock = acquire(out, ledger.new_run_id(), "DirectRunner", LOCK_TTL)
    try:
        with pytest.raises(tfrecorder.OutputBusyError):
            tfrecorder.convert(csv, out, mode="overwrite")
    finally:
        lock.release()
    assert os.listdir(spill_root) == []
