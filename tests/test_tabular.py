"""Tabular tables (columns of numbers, strings and categories, no image), end to end."""

import json

import pandas as pd
import pytest

import tfrecorder
from tfrecorder import types
from tfrecorder._folder import metadata
from tfrecorder.input_schema import Schema
from tests.conftest import split_files

TITANIC = Schema({
    "split": types.SplitKey,
    "Survived": types.IntegerLabel,
    "Pclass": types.IntegerInput,
    "Name": types.StringInput,
    "Sex": types.CategoricalInput,
    "Age": types.FloatInput(optional=True),
    "Fare": types.FloatInput,
})


def _titanic():
    return pd.DataFrame({
        "split": ["TRAIN", "TRAIN", "TEST", "VALIDATION", "TRAIN"],
        "Survived": [0, 1, 1, 0, 1],
        "Pclass": [3, 1, 2, 3, 1],
        "Name": ["Braund, Mr. Owen", "Cumings, Mrs. John", "Heikkinen, Miss Laina",
                 "Allen, Mr. William", "Ünïcode, Ms. Zoë"],
        "Sex": ["male", "female", "female", "male", "female"],
        "Age": [22.0, None, 26.0, 35.0, float("nan")],
        "Fare": [7.25, 71.2833, 7.925, 8.05, 53.1],
    })


@pytest.mark.slow  # a conversion end to end
def test_tabular_table_reads_back_with_plain_tensorflow(tf, tmp_path):
    df = _titanic()
    out = tmp_path / "out"
    result = df.tensorflow.to_tfrecord(str(out), schema=TITANIC)
    assert result.rows_written == 5 and result.labels == ["0", "1"]
    m = metadata.read_manifest(str(out))
    assert m.vocabularies["Sex"] == ["female", "male"]
    assert open(out / "Sex.labels.txt").read() == "female\nmale\n"
    assert {k: (f.dtype, f.shape) for k, f in m.features.items()} == {
        "Survived": ("int64", []), "Pclass": ("int64", []), "Name": ("bytes", []),
        "Sex": ("int64", []), "Age": ("float", None), "Fare": ("float", [])}

    spec = {
        "Survived": tf.io.FixedLenFeature([], tf.int64), "Pclass": tf.io.FixedLenFeature([], tf.int64),
        "Name": tf.io.FixedLenFeature([], tf.string), "Sex": tf.io.FixedLenFeature([], tf.int64),
        "Age": tf.io.VarLenFeature(tf.float32), "Fare": tf.io.FixedLenFeature([], tf.float32),
    }
    got = {}
    for split in m.splits:
        for raw in tf.data.TFRecordDataset(split_files(out, split)):
            ex = tf.io.parse_single_example(raw, spec)
            got[ex["Name"].numpy().decode()] = (split, ex)
    assert len(got) == 5
    for _, row in df.iterrows():
        split, ex = got[row.Name]
        assert split == row.split.lower()
        assert int(ex["Survived"]) == row.Survived and int(ex["Pclass"]) == row.Pclass
        assert m.vocabularies["Sex"][int(ex["Sex"])] == row.Sex
        assert float(ex["Fare"]) == pytest.approx(row.Fare, rel=1e-6)
        age = tf.sparse.to_dense(ex["Age"]).numpy().tolist()
        assert age == ([] if pd.isna(row.Age) else [pytest.approx(row.Age)])


@pytest.mark.slow
def test_tabular_load_needs_no_feature_description(tmp_path):
    out = str(tmp_path / "out")
    _titanic().tensorflow.to_tfrecord(out, schema=TITANIC)
    rows = list(tfrecorder.load(out, split="train"))
    assert sorted(r["Name"].numpy().decode() for r in rows) == [
        "Braund, Mr. Owen", "Cumings, Mrs. John", "Ünïcode, Ms. Zoë"]
    batch = next(iter(tfrecorder.load(out, split="train", batch_size=3)))
    assert batch["Age"].shape[0] == 3  # variable length: a ragged batch
    assert sorted(len(a) for a in batch["Age"].to_list()) == [0, 0, 1]


def test_type_problems_are_reported_at_once(tmp_path):
    df = _titanic()
    df["Pclass"] = df["Pclass"].astype(object)
    df.loc[1, "Pclass"] = 1.5          # a float in an IntegerInput column
    df.loc[2, "Fare"] = None           # a null in a column that is not optional
    df = df.astype({"Fare": object})
    df.loc[3, "Fare"] = "cheap"        # not a number
    with pytest.raises(tfrecorder.SchemaError) as e:
        df.tensorflow.to_tfrecord(str(tmp_path / "out"), schema=TITANIC)
    assert sorted((p.row, p.column) for p in e.value.problems) == [
        (1, "Pclass"), (2, "Fare"), (3, "Fare")]


@pytest.mark.slow  # a conversion end to end
def test_optional_column_with_a_default(tmp_path):
    schema = Schema({"split": types.SplitKey, "x": types.FloatInput(optional=True, default=-1.0)})
    out = str(tmp_path / "out")
    tfrecorder.convert(pd.DataFrame({"split": ["TRAIN", "TRAIN"], "x": [2.5, None]}), out,
                       schema=schema)
    values = sorted(float(r["x"]) for r in tfrecorder.load(out, split="train"))
    assert values == [-1.0, 2.5]


def test_schema_from_a_json_file_and_its_mistakes(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"split": "SplitKey", "Fare": {"type": "FloatInput"},
                                "Age": {"type": "FloatInput", "optional": True}}))
    out = str(tmp_path / "out")
    r = tfrecorder.convert(_titanic()[["split", "Fare", "Age"]], out, schema=str(path))
    assert r.rows_written == 5
    with pytest.raises(tfrecorder.ConfigError, match="'Fare': unknown type 'Floaty'"):
        tfrecorder.convert(_titanic(), out, schema={"Fare": "Floaty"}, mode="overwrite")
    with pytest.raises(tfrecorder.ConfigError, match=r"\['a', 'b'\].*label role"):
        Schema({"a": types.StringLabel, "b": types.IntegerLabel})


@pytest.mark.slow  # a conversion end to end
def test_without_a_split_column_every_row_is_train(tmp_path):
    r = tfrecorder.convert(pd.DataFrame({"Fare": [1.0, 2.0]}), str(tmp_path / "o"),
                           schema={"Fare": "FloatInput"})
    assert r.rows_per_split == {"train": 2}
