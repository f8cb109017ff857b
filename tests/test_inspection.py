import csv
import os

import pytest

import tfrecorder
from tests.conftest import SAMPLES


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("insp") / "out"
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out))
    return str(out)


def test_inspect_writes_a_csv_and_the_original_image_files(out, tmp_path):
    result = tfrecorder.inspect(out, split="TRAIN", num_records=4, output_dir=str(tmp_path / "i"))
    rows = list(csv.DictReader(open(result.csv_path)))
    assert len(rows) == 4 == len(result.images)
    assert set(rows[0]) >= {"label", "label_name", "image_name", "image_file", "image_height"}
    for row in rows:
        written = open(tmp_path / "i" / row["image_file"], "rb").read()
        assert written == open(os.path.join(SAMPLES, "images", row["image_name"]), "rb").read()
        assert row["label_name"] in ("circle", "square", "triangle")
        assert row["label_name"] == row["image_name"].split("_")[0]
    assert result.split_counts == {"train": 27, "validation": 6, "test": 3}
    assert result.label_counts["validation"] == {"circle": 2, "square": 2, "triangle": 2}


def test_inspection_renders_thumbnails_and_counts(out):
    result = tfrecorder.inspect(out, split="test", num_records=10)
    html = result._repr_html_()
    assert html.count("<img src='data:image/") == 3
    assert "<th>label</th>" in html and "triangle" in html
    assert os.path.isdir(result.output_dir)
    assert "test 3" in str(result)


def test_inspect_refuses_unknown_splits(out):
    with pytest.raises(tfrecorder.ConfigError, match="it has"):
        tfrecorder.inspect(out, split="holdout")


@pytest.mark.parametrize("damage,error,words", [
    ("missing", tfrecorder.IncompleteOutputError, ["is missing", "overwrite=True"]),
    ("a folder", tfrecorder.CorruptRecordError, ["is a folder", "overwrite=True"]),
])
def test_verify_names_a_shard_that_is_missing_or_a_folder(out, tmp_path, damage, error, words):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = sorted(n for n in os.listdir(copy) if "-train.tfrecord-" in n)[0]
    os.remove(copy / shard)
    if damage == "a folder":
        os.mkdir(copy / shard)
    with pytest.raises(error) as e:
        tfrecorder.verify(str(copy))
    assert str(copy / shard) in str(e.value)
    for w in words:
        assert w in str(e.value)


#: Labels a spreadsheet would run as formulas if data.csv held them as they are.
FORMULAS = ["=cmd|' /C calc'!A0", "+SUM(1,2)", "-2+3", "@SUM(A1)"]


def test_inspect_csv_holds_no_cell_a_spreadsheet_would_run(tmp_path, image_table):
    import pandas as pd

    from tests.conftest import encode

    labels = [*FORMULAS, "plain"]
    df = pd.DataFrame({
        "split": ["TRAIN"] * len(labels),
        "image_uri": [image_table(f"{i}.jpg", encode(seed=i)) for i in range(len(labels))],
        "label": labels})
    df.loc[len(df)] = ["TRAIN", image_table("=HYPERLINK(1).png", encode(fmt="PNG")), "plain"]
    out = str(tmp_path / "out")
    tfrecorder.convert(df, out)
    result = tfrecorder.inspect(out, num_records=len(df), output_dir=str(tmp_path / "i"))
    rows = list(csv.DictReader(open(result.csv_path, newline="")))
    assert len(rows) == len(df)
    for row in rows:
        for column, cell in row.items():
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (column, cell)
    names = sorted(r["label_name"] for r in rows)
    assert names == sorted(["'" + f for f in FORMULAS] + ["plain", "plain"])
    assert "'=HYPERLINK(1).png" in {r["image_name"] for r in rows}
    # What inspect returns keeps the values as stored; numbers stay numbers in the file.
    assert sorted(r["label_name"] for r in result.rows) == sorted(labels + ["plain"])
    assert all(r["label"].isdigit() and r["image_height"] == "16" for r in rows)


@pytest.mark.parametrize("value,cell", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@x", "'@x"), ("\tx", "'\tx"),
    ("\rx", "'\rx"), ("a=b", "a=b"), ("", ""), (-3, -3), (2.5, 2.5), ([-1, 2], "[-1, 2]"),
])
def test_a_cell_that_would_start_a_formula_gets_a_quote(value, cell):
    from tfrecorder._inspection import _cell

    assert _cell(value) == cell
