"""A table is multi-label when it says so: list cells, many images under several labels,
or multi_label=True. A single-label table with a few images repeated under another label
is refused with those rows, not silently turned into lists."""

import pandas as pd
import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._folder import metadata
from tests.conftest import read_split, write_images
from tests.test_spill import _pictures


def _photos(folder, n):
    folder.mkdir(exist_ok=True)
    return _pictures(folder, n)


def _csv(tmp_path, rows):
    csv = tmp_path / "data.csv"
    csv.write_text("split,image_uri,label\n" + "".join(f"TRAIN,{u},{l}\n" for u, l in rows))
    return str(csv)


@pytest.fixture
def stray(tmp_path):
    """88 photos with one label each, and 10 of them listed again under another label:
    98 rows, a single-label table but for 10 images."""
    paths = _photos(tmp_path / "img", 88)
    rows = [(p, f"c{i % 4}") for i, p in enumerate(paths)]
    rows += [(paths[i], f"c{(i + 1) % 4}") for i in range(0, 80, 8)]
    return _csv(tmp_path, rows), rows


def test_a_few_images_under_a_second_label_are_refused_with_their_rows(tmp_path, stray):
    csv, rows = stray
    out = tmp_path / "out"
    with pytest.raises(tfrecorder.SchemaError) as e:
        tfrecorder.convert(csv, str(out))
    # CSV line numbers (the header is line 1): each repeated image's first row and its
    # second-label row
    expected = sorted([i + 2 for i in range(0, 80, 8)] + [88 + k + 2 for k in range(10)])
    assert sorted(p.row for p in e.value.problems) == expected
    assert "10 of 88 images are listed under several labels" in str(e.value)
    assert "multi_label=True" in str(e.value)
    assert all("listed under several labels" in p.reason for p in e.value.problems)
    assert not out.exists()


def test_multi_label_true_merges_them_and_the_summary_says_so(tmp_path, stray):
    csv, rows = stray
    out = str(tmp_path / "out")
    result = tfrecorder.convert(csv, out, multi_label=True)
    reader = access.Reader(out, "train")
    assert len(reader) == 88
    assert result.rows_in == 98
    assert "multi-label" in str(result) and "88 records" in str(result)
    label_sets = sorted(len(reader.features(i)["label"]) for i in range(len(reader)))
    assert label_sets == [1] * 78 + [2] * 10


def test_multi_label_false_refuses_any_image_under_two_labels(tmp_path):
    paths = _photos(tmp_path / "img", 4)
    rows = [(p, "a") for p in paths] + [(p, "b") for p in paths]  # every image: 2 labels
    csv = _csv(tmp_path, rows)
    assert len(access.Reader(tfrecorder.convert(csv, str(tmp_path / "o1")).output_dir,
                             "train")) == 4  # a multi-label table: taken as one
    with pytest.raises(tfrecorder.SchemaError, match="multi_label=False") as e:
        tfrecorder.convert(csv, str(tmp_path / "o2"), multi_label=False)
    assert len(e.value.problems) == 8


def test_multi_label_true_on_a_single_label_table_stores_lists(tmp_path):
    paths = _photos(tmp_path / "img", 3)
    out = str(tmp_path / "out")
    tfrecorder.convert(pd.DataFrame({"split": "TRAIN", "image_uri": paths,
                                     "label": ["a", "b", "a"]}), out, multi_label=True)
    manifest = tfrecorder.info(out)
    assert manifest.features["label"].shape is None  # a list per record
    reader = access.Reader(out, "train")
    assert sorted(list(reader.features(i)["label"]) for i in range(3)) == [[0], [0], [1]]


def test_list_cells_with_multi_label_false_are_a_config_error(tmp_path):
    paths = _photos(tmp_path / "img", 2)
    df = pd.DataFrame({"split": "TRAIN", "image_uri": paths, "label": [["a", "b"], ["a"]]})
    with pytest.raises(tfrecorder.ConfigError, match="multi_label=False"):
        tfrecorder.convert(df, str(tmp_path / "out"), multi_label=False)
    with pytest.raises(tfrecorder.ConfigError, match="multi_label='yes'"):
        tfrecorder.convert(df, str(tmp_path / "out"), multi_label="yes")


@pytest.mark.slow
def test_the_command_line_flag(tmp_path, stray, run_cli):
    csv, _ = stray
    refused = run_cli("convert", csv, str(tmp_path / "a"))
    assert refused.returncode != 0 and "--multi-label" in refused.stderr
    done = run_cli("convert", csv, str(tmp_path / "b"), "--multi-label")
    assert done.returncode == 0, done.stderr
    assert len(access.Reader(str(tmp_path / "b"), "train")) == 88


# --- end to end: wide rows, merged rows, list cells --------------------------------


@pytest.fixture
def pics(tmp_path):
    return write_images(tmp_path, 4)


@pytest.mark.slow  # a conversion end to end
def test_wide_automl_rows_give_a_variable_length_label(tf, tmp_path, pics):
    csv_path = tmp_path / "multi.csv"
    csv_path.write_text(f"TRAIN,{pics[0]},cat,dog\nTRAIN,{pics[1]},dog,,\nTEST,{pics[2]},bird,cat,dog\n")
    out = tmp_path / "out"
    result = tfrecorder.convert(str(csv_path), str(out))
    assert result.labels == ["bird", "cat", "dog"]
    m = metadata.read_manifest(str(out))
    assert m.features["label"].shape is None
    got = {e["image_name"][0]: e["label"] for e in read_split(tf, out)}
    assert got == {b"0.jpg": [1, 2], b"1.jpg": [2], b"2.jpg": [0, 1, 2]}
    batch = next(iter(tfrecorder.load(str(out), split="train", batch_size=2, image_size=(8, 8))))
    assert sorted(batch["label"].to_list()) == [[1, 2], [2]]


@pytest.mark.slow  # a conversion end to end
def test_rows_of_one_image_with_different_labels_are_merged(tf, tmp_path, pics):
    df = pd.DataFrame({"split": ["TRAIN", "TRAIN", "", "TEST"],
                       "image_uri": [pics[0], pics[1], pics[0], pics[2]],
                       "label": ["cat", "dog", "dog", "cat"]})
    out = tmp_path / "out"
    result = tfrecorder.convert(df, str(out), multi_label=True)
    assert (result.rows_in, result.rows_written, result.rows_quarantined) == (4, 4, 0)
    assert result.rows_per_split == {"train": 2, "test": 1}  # records: one per image
    got = {e["image_name"][0]: e["label"] for e in read_split(tf, out, "train")}
    assert got == {b"0.jpg": [0, 1], b"1.jpg": [1]}


@pytest.mark.slow  # a conversion end to end
def test_list_labels_and_conflicting_splits(tmp_path, pics):
    df = pd.DataFrame({"split": ["TRAIN", "TEST", "TRAIN"],
                       "image_uri": [pics[0], pics[0], pics[1]],
                       "label": [["cat"], ["dog"], ["cat", "dog"]]})
    with pytest.raises(tfrecorder.SchemaError, match=r"splits \['test', 'train'\]"):
        tfrecorder.convert(df, str(tmp_path / "out"))
    df.loc[1, "split"] = "TRAIN"
    result = tfrecorder.convert(df, str(tmp_path / "out"))
    assert result.rows_per_split == {"train": 2} and result.rows_written == 3
