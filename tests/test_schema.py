import os

import pandas as pd
import pytest

from tfrecorder._inputs import schema as schemas
from tests.conftest import validate
from tfrecorder import types
from tfrecorder._errors import ConfigError, SchemaError
from tfrecorder.input_schema import Schema


def _validate(df, **kw):
    return validate(df, list(df.index), schemas.IMAGE_CSV_SCHEMA, **kw)


def _frame(rows):
    return pd.DataFrame(rows, columns=["split", "image_uri", "label"])


def test_every_problem_is_reported_at_once_with_rows_values_and_reasons():
    df = _frame([
        ["TRAIN", "a.jpg", "cat"],
        ["HOLDOUT", "b.jpg", "dog"],     # unknown split
        ["TRAIN", "", "dog"],            # empty uri
        ["TEST", None, "cat"],           # null uri
        ["TRAIN", "e.jpg", None],        # null label
        ["VALIDATE", "f.jpg", "cat"],
        ["TRAIN", "g.jpg", float("nan")],  # NaN label, as pandas gives a missing cell
    ])
    with pytest.raises(SchemaError) as e:
        _validate(df)
    got = {(p.row, p.column) for p in e.value.problems}
    assert got == {(1, "split"), (2, "image_uri"), (3, "image_uri"), (4, "label"), (6, "label")}
    message = str(e.value)
    assert "5 problem(s)" in message
    assert "row 6, column 'label': null label" in message
    assert "row 1, column 'split': value 'HOLDOUT'" in message
    assert "null label" in message
    frame = e.value.to_frame()
    assert list(frame.columns) == ["row", "column", "value", "reason"] and len(frame) == 5


def test_missing_columns_are_named():
    with pytest.raises(SchemaError, match="'label': missing column") as e:
        _validate(pd.DataFrame({"split": ["TRAIN"], "image_uri": ["a.jpg"]}))
    assert [p.column for p in e.value.problems] == ["label"]


def test_empty_table_is_refused():
    with pytest.raises(SchemaError, match="no rows"):
        _validate(_frame([]))


def test_string_labels_get_a_sorted_vocabulary():
    checked = _validate(_frame([["TRAIN", "a.jpg", "dog"], ["TEST", "b.jpg", "cat"],
                                ["TRAIN", "c.jpg", "dog"]]))
    assert checked.vocabularies == {"label": ["cat", "dog"]}
    from tfrecorder._folder import example
    assert {r.row: r.features["label"] for r in checked.rows} == {
        0: example.int64_feature([1]), 1: example.int64_feature([0]),
        2: example.int64_feature([1])}


def test_integer_labels_pass_through_unchanged():
    checked = _validate(_frame([["TRAIN", "a.jpg", 3], ["TEST", "b.jpg", 0]]))
    assert checked.vocabularies == {"label": ["0", "1", "2", "3"]}
    from tfrecorder._folder import example
    assert checked.rows[0].features["label"] == example.int64_feature([3])


def test_explicit_vocabulary_orders_ids_and_flags_unknown_labels():
    df = _frame([["TRAIN", "a.jpg", "dog"], ["TRAIN", "b.jpg", "cow"]])
    with pytest.raises(SchemaError) as e:
        _validate(df, label_vocabulary=["dog", "cat"])
    (p,) = e.value.problems
    assert (p.row, p.value) == (1, "cow") and "label_vocabulary" in p.reason
    checked = _validate(df.iloc[:1], label_vocabulary=["dog", "cat"])
    assert checked.vocabularies["label"] == ["dog", "cat"]


def test_unassigned_rows_are_assigned_by_uri_hash_and_a_train_split_is_not_required():
    df = _frame([["UNASSIGNED", f"img{i}.jpg", "a"] for i in range(50)]
                + [["TEST", "t.jpg", "a"]])
    a = {r.row: r.split for r in _validate(df).rows}
    b = {r.row: r.split for r in _validate(df.iloc[::-1]).rows}
    assert a == b  # a row's split does not depend on the row order
    assert {a[i] for i in range(50)} == {"train", "validation", "test"} and a[50] == "test"
    only_test = _validate(_frame([["TEST", "a.jpg", "x"]]))
    assert [r.split for r in only_test.rows] == ["test"]


def test_relative_paths_resolve_against_the_base_dir(tmp_path):
    checked = _validate(_frame([["TRAIN", "images/a.jpg", "x"], ["TRAIN", "gs://b/c.jpg", "x"]]),
                        base_dir=str(tmp_path))
    assert checked.rows[0].image_uri == os.path.join(str(tmp_path), "images", "a.jpg")
    assert checked.rows[1].image_uri == "gs://b/c.jpg"


def test_row_values_are_kept_for_the_errors_file():
    checked = _validate(_frame([["TRAIN", "a.jpg", "x"]]))
    assert checked.columns == ("split", "image_uri", "label")
    assert checked.rows[0].values == ("TRAIN", "a.jpg", "x")


def test_schema_mistakes_name_the_column():
    with pytest.raises(ConfigError, match="'a'.*'b'.*image role"):
        Schema({"a": types.ImageUri, "b": types.ImageUri})
    with pytest.raises(ConfigError, match="column 'x'"):
        Schema({"x": int})
    with pytest.raises(ConfigError, match="image_name"):
        Schema({"image_uri": types.ImageUri, "image_name": types.StringInput})


def test_huge_whole_numbers_are_not_taken_as_class_ids():
    checked = _validate(_frame([["TRAIN", "a.jpg", 3], ["TRAIN", "b.jpg", 10**12]]))
    assert checked.vocabularies["label"] == ["1000000000000", "3"]
    with pytest.raises(SchemaError, match="from 0 to 1000000"):
        validate(_frame([["TRAIN", "a.jpg", 10**12]]), [0], Schema(
            {"split": types.SplitKey, "image_uri": types.ImageUri, "label": types.IntegerLabel}))
