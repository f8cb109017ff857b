"""read(): records back to the table they came from, and that table converted again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

import tfrecorder
from tfrecorder._folder import example
from tfrecorder._folder import records
from tfrecorder._readers import read as read_module
from tfrecorder import access, types
from tfrecorder.input_schema import Schema
from tests.conftest import SAMPLES, encode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _records(out) -> dict[str, list[bytes]]:
    """Every record of every split, as sorted serialized examples."""
    got = {}
    for split in tfrecorder.info(str(out)).splits:
        reader = access.Reader(str(out), split)
        got[split] = sorted(reader.records(range(len(reader))))
        reader.close()
    return got


def _errors(out) -> list[dict]:
    with open(os.path.join(str(out), "errors.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _by(df, *keys):
    return df.sort_values(list(keys)).reset_index(drop=True)


@pytest.fixture(scope="module")
def samples_out(samples_converted):
    return samples_converted(num_shards=3)[0]  # read only


# --- image tables ---------------------------------------------------------------------------


@pytest.mark.slow
def test_an_image_csv_reads_back_as_its_rows_less_the_quarantined_ones(tmp_path):
    # samples/data.csv with its relative paths, beside two rows that are quarantined
    os.symlink(os.path.join(SAMPLES, "images"), tmp_path / "images")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    lines = open(os.path.join(SAMPLES, "data.csv")).read().splitlines()
    lines += ["TRAIN,images/missing.jpg,circle", "TEST,broken.png,square"]
    csv = tmp_path / "data.csv"
    csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result = tfrecorder.convert(str(csv), str(out), max_error_fraction=0.5)
    assert result.rows_quarantined == 2

    table = pd.read_csv(csv, keep_default_na=False)
    table.index = table.index + 2  # the CSV line of each row (the header is line 1)
    expected = table.drop([e["row"] for e in _errors(out)])
    got = tfrecorder.read(str(out))
    assert list(got.columns) == ["split", "image_uri", "label"]
    assert list(got.split.unique()) == ["train", "validation", "test"]  # manifest order
    assert len(got) == len(table) - 2 == len(expected)
    merged = expected.merge(got, on=["image_uri", "label"], how="outer", indicator=True)
    assert (merged._merge == "both").all()
    given = merged.split_x != ""
    assert (merged.split_x[given].str.lower() == merged.split_y[given]).all()
    assert set(merged.split_y[~given]) <= {"train", "validation", "test"}  # assigned

    # Its image paths are the table's, relative: written beside it, it converts again
    # to the same records.
    got.to_csv(tmp_path / "again.csv", index=False)
    again = tmp_path / "again"
    tfrecorder.convert(str(tmp_path / "again.csv"), str(again), label_vocabulary=result.labels)
    assert _records(again) == _records(out)
    assert _by(tfrecorder.read(str(again)), "image_uri").equals(_by(got, "image_uri"))


@pytest.mark.slow  # a conversion end to end
def test_multi_label_records_read_back_as_lists_of_names(tmp_path, image_table):
    pics = [image_table(f"img/{i}.jpg", encode(seed=i)) for i in range(3)]
    missing = str(tmp_path / "img" / "missing.jpg")
    df = pd.DataFrame({"split": ["TRAIN", "TRAIN", "TRAIN", "TEST", "TRAIN"],
                       "image_uri": [pics[0], pics[1], pics[0], pics[2], missing],
                       "label": ["dog", "cat", "bird", "cat", "dog"]})
    out = tmp_path / "out"
    result = tfrecorder.convert(df, str(out), max_error_fraction=0.5, multi_label=True)
    assert [e["row"] for e in _errors(out)] == [4]
    got = _by(tfrecorder.read(str(out)), "image_uri")
    assert got.to_dict("list") == {
        "split": ["train", "train", "test"], "image_uri": pics,
        "label": [["bird", "dog"], ["cat"], ["cat"]]}

    again = tmp_path / "again"
    got.tensorflow.to_tfrecord(str(again), label_vocabulary=result.labels)
    assert _records(again) == _records(out)


@pytest.mark.slow  # a conversion end to end
def test_detection_records_read_back_as_boxes(tmp_path, image_table):
    pics = [image_table(f"{i}.jpg", encode(seed=i)) for i in range(3)]
    csv = tmp_path / "boxes.csv"
    csv.write_text(f"TRAIN,{pics[0]},car,0.1,0.2,,,0.5,0.6,,\n"
                   f"TRAIN,{pics[0]},person,0.3,0.1,0.9,0.1,0.9,0.4,0.3,0.4\n"
                   f"TRAIN,{pics[1]},car,0,0,,,1,1,,\n"
                   f"TEST,{pics[2]},,,,,,,,,\n")
    out = tmp_path / "out"
    tfrecorder.convert(str(csv), str(out))
    got = _by(tfrecorder.read(str(out)), "image_uri")
    assert got.to_dict("list") == {
        "split": ["train", "train", "test"], "image_uri": pics,
        "boxes": [[("car", 0.1, 0.2, 0.5, 0.6), ("person", 0.3, 0.1, 0.9, 0.4)],
                  [("car", 0.0, 0.0, 1.0, 1.0)], []]}

    # Back to AutoML's CSV, one row per box (an image without boxes: a row without one).
    rows = []
    for r in got.itertuples():
        for label, *box in r.boxes or [("", None, None, None, None)]:
            x0, y0, x1, y1 = ("" if v is None else repr(v) for v in box)
            rows.append(f"{r.split},{r.image_uri},{label},{x0},{y0},,,{x1},{y1},,")
    again_csv = tmp_path / "again.csv"
    again_csv.write_text("\n".join(rows) + "\n")
    tfrecorder.convert(str(again_csv), str(tmp_path / "again"))
    assert _records(tmp_path / "again") == _records(out)


# --- tabular tables -------------------------------------------------------------------------

TABLE = Schema({
    "split": types.SplitKey,
    "Survived": types.IntegerLabel,
    "Pclass": types.IntegerInput,
    "Siblings": types.IntegerInput(optional=True),
    "Name": types.StringInput,
    "Sex": types.CategoricalInput,
    "Age": types.FloatInput(optional=True),
    "Fare": types.FloatInput,
    "Deck": types.StringInput(optional=True),
    "image_uri": types.StringInput,  # no ImageUri column: a column like any other
})


def _table():
    return pd.DataFrame({
        "split": ["TRAIN", "TRAIN", "TEST", "VALIDATION", "TRAIN"],
        "Survived": [0, 1, 1, 0, 2],
        "Pclass": [3, 1, 2, 3, -(2**40)],
        "Siblings": pd.array([1, None, 0, 4, None], dtype="Int64"),
        "Name": ["Braund, Mr. Owen", "Cumings, Mrs. John", "Heikkinen, Miss Laina",
                 "Allen, Mr. William", "Ünïcode, Ms. Zoë"],
        "Sex": ["male", "female", "female", "male", "female"],
        "Age": [22.0, None, 26.5, 0.1, float("nan")],
        "Fare": [7.25, 71.2833, 7.925, 1e-8, 53.1],
        "Deck": ["C85", None, None, "E46", "A"],
        "image_uri": ["a", "b", "c", "d", "e"],
    })


@pytest.mark.slow  # a conversion end to end
def test_a_tabular_table_reads_back_with_its_values_and_dtypes(tmp_path):
    df = _table()
    out = tmp_path / "out"
    df.tensorflow.to_tfrecord(str(out), schema=TABLE)
    got = tfrecorder.read(str(out))
    assert list(got.columns) == ["split", "Survived", "Age", "Deck", "Fare", "Name",
                                 "Pclass", "Sex", "Siblings", "image_uri"]
    assert {c: str(t) for c, t in got.dtypes.items()} == {
        "split": "str", "Survived": "int64", "Age": "float64", "Deck": "str",
        "Fare": "float64", "Name": "str", "Pclass": "int64", "Sex": "str",
        "Siblings": "Int64", "image_uri": "str"}
    expected = df.assign(split=df.split.str.lower())[list(got.columns)]
    pd.testing.assert_frame_equal(_by(got, "Name"), _by(expected, "Name"), check_dtype=False,
                                  check_exact=True)

    again = tmp_path / "again"
    got.tensorflow.to_tfrecord(str(again), schema=TABLE)
    assert _records(again) == _records(out)


def test_a_column_named_split_in_a_table_without_a_split_key_keeps_its_values(tmp_path):
    schema = Schema({"split": types.StringInput, "x": types.FloatInput})
    out = str(tmp_path / "out")
    tfrecorder.convert(pd.DataFrame({"split": ["a", "b"], "x": [1.5, 2.5]}), out,
                       schema=schema)
    got = _by(tfrecorder.read(out), "x")
    assert got.to_dict("list") == {"split": ["a", "b"], "x": [1.5, 2.5]}


# --- images, chunks -----------------------------------------------------------------------------


def test_images_are_the_bytes_the_reader_gives(samples_out):
    got = tfrecorder.read(samples_out, images=True)
    assert list(got.columns) == ["split", "image_uri", "label", "image"]
    expected = [access.Reader(samples_out, split).features(i)["image"]
                for split, n in tfrecorder.info(samples_out).splits.items()
                for i in range(n.num_examples)]
    assert got.image.tolist() == expected and len(expected) == 36
    assert open(os.path.join(SAMPLES, got.image_uri[0]), "rb").read() == got.image[0]
    assert "image" not in tfrecorder.read(samples_out).columns


def test_one_split_by_any_of_its_names(samples_out):
    whole = tfrecorder.read(samples_out)
    test = tfrecorder.read(samples_out, split="TEST")
    assert len(test) == tfrecorder.info(samples_out).splits["test"].num_examples > 0
    assert test.equals(whole[whole.split == "test"].reset_index(drop=True))


def test_chunks_are_read_as_they_are_asked_for(samples_out, monkeypatch):
    asked = []
    records = access.Reader.records
    monkeypatch.setattr(access.Reader, "records",
                        lambda self, indices: asked.append(len(indices)) or records(self, indices))
    chunks = tfrecorder.read(samples_out, chunksize=4)
    assert asked == []  # nothing read before the first chunk is asked for
    first = next(chunks)
    assert len(first) == 4 and sum(asked) == 4
    frames = [first, *chunks]
    assert all(0 < len(f) <= 4 and f.split.nunique() == 1 for f in frames)
    assert len(frames) == 7 + 2 + 1  # 27 train, 6 validation, 3 test records
    whole = tfrecorder.read(samples_out)
    assert pd.concat(frames, ignore_index=True).equals(whole)

    monkeypatch.setattr(read_module, "BATCH", 5)  # a whole read is bounded too
    asked.clear()
    assert tfrecorder.read(samples_out, images=True).drop(columns="image").equals(whole)
    assert max(asked) == 5 and sum(asked) == 36


@pytest.mark.parametrize("chunksize", [0, -1, 2.5, True, "10"])
def test_a_chunksize_that_is_no_row_count_is_refused(samples_out, chunksize):
    with pytest.raises(tfrecorder.ConfigError, match="chunksize="):
        tfrecorder.read(samples_out, chunksize=chunksize)


# --- what cannot be read ------------------------------------------------------------------------


def test_an_unknown_split_is_refused_naming_the_splits(samples_out):
    for chunksize in (None, 10):  # at the call, not at the first chunk
        with pytest.raises(tfrecorder.ConfigError,
                           match=r"split 'bogus' is not in .*\['test', 'train', 'validation'\]"):
            tfrecorder.read(samples_out, split="bogus", chunksize=chunksize)


def test_a_folder_without_a_conversion_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(tfrecorder.IncompleteOutputError, match="no tfrecorder.json"):
        tfrecorder.read(str(tmp_path))
    with pytest.raises(tfrecorder.IncompleteOutputError, match="does not exist"):
        tfrecorder.read(str(tmp_path / "nowhere"), chunksize=5)
    for split in (None, "train"):
        with pytest.raises(tfrecorder.ConfigError, match="is a file, not the folder"):
            tfrecorder.read(os.path.join(SAMPLES, "data.csv"), split=split)


def test_gzip_shards_are_refused_with_the_fix(samples_converted):
    out = samples_converted(compression="gzip")[0]  # read only
    with pytest.raises(tfrecorder.ConfigError, match="compression=None"):
        tfrecorder.read(out)


def _as_written_before_image_uri(out):
    """``out`` as conversions wrote it before records held ``image_uri``: each record
    without it, the manifest without it, no index files (readers scan the shards)."""
    path = os.path.join(out, "tfrecorder.json")
    manifest = json.load(open(path))
    del manifest["features"]["image_uri"]
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            file = os.path.join(out, shard["file"])
            with open(file, "rb") as f:
                old = list(records.read_records(f))
            with open(file, "wb") as f:
                for raw in old:
                    feats = example.parse(raw)
                    del feats["image_uri"]
                    records.write_record(f, example.serialize(
                        {k: example.feature(d, v) for k, (d, v) in feats.items()}))
            os.remove(os.path.join(out, shard.pop("index")))
            shard["num_bytes"] = os.path.getsize(file)
    with open(path, "w") as f:
        json.dump(manifest, f)
    # nor versions or rows files (format 1): readers read tfrecorder.json itself
    shutil.rmtree(os.path.join(out, "versions"))
    shutil.rmtree(os.path.join(out, "rows"))


def test_a_conversion_written_before_records_held_their_uri_gives_the_file_names(
        tmp_path, samples_converted):
    out = str(tmp_path / "out")
    shutil.copytree(samples_converted()[0], out)  # a conversion of its own: changed below
    now = tfrecorder.read(out)
    _as_written_before_image_uri(out)
    before = tfrecorder.read(out)
    assert list(before.columns) == ["split", "image_name", "label"]
    assert before.image_name.tolist() == [os.path.basename(u) for u in now.image_uri]
    assert before.label.tolist() == now.label.tolist()


@pytest.mark.slow
def test_read_never_imports_tensorflow(samples_out):
    code = ("import sys, tfrecorder; df = tfrecorder.read(sys.argv[1], images=True); "
            "n = sum(len(f) for f in tfrecorder.read(sys.argv[1], chunksize=7)); "
            "print('tensorflow' in sys.modules, len(df), n)")
    done = subprocess.run([sys.executable, "-c", code, samples_out], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    assert done.stdout.split() == ["False", "36", "36"]
