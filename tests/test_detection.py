"""AutoML object-detection tables (a box per row), end to end: boxes read back exactly,
and every bad box a schema problem."""

import numpy as np
import pytest

import tfrecorder
from tests.conftest import read_split, write_images


@pytest.fixture
def pics(tmp_path):
    return write_images(tmp_path, 4)


@pytest.mark.slow
def test_detection_boxes_read_back_exactly(tf, tmp_path, pics):
    csv_path = tmp_path / "boxes.csv"
    csv_path.write_text(
        f"TRAIN,{pics[0]},car,0.1,0.2,,,0.5,0.6,,\n"
        f"TRAIN,{pics[0]},person,0.3,0.1,0.9,0.1,0.9,0.4,0.3,0.4\n"
        f"TRAIN,{pics[1]},car,0,0,,,1,1,,\n"
        f"TEST,{pics[2]},,,,,,,,,\n")
    out = tmp_path / "out"
    result = tfrecorder.convert(str(csv_path), str(out))
    assert result.labels == ["car", "person"] and result.rows_written == 4
    assert result.rows_per_split == {"train": 2, "test": 1}
    assert open(out / "objects-label.labels.txt").read() == "car\nperson\n"
    got = {}
    for e in read_split(tf, out):
        got[e["image_name"][0]] = (np.array(e["objects/bbox"], np.float32).reshape(-1, 4),
                                   e["objects/label"])
    f32 = lambda *v: np.array(v, np.float32).reshape(-1, 4)  # noqa: E731
    np.testing.assert_array_equal(got[b"0.jpg"][0], f32(0.2, 0.1, 0.6, 0.5, 0.1, 0.3, 0.4, 0.9))
    assert got[b"0.jpg"][1] == [0, 1]
    np.testing.assert_array_equal(got[b"1.jpg"][0], f32(0, 0, 1, 1))
    assert got[b"2.jpg"][1] == [] and got[b"2.jpg"][0].shape == (0, 4)
    (ex,) = [e for e in tfrecorder.load(str(out), split="test")]
    assert ex["objects/bbox"].shape == (0, 4)
    batch = next(iter(tfrecorder.load(str(out), split="train", batch_size=2, image_size=(8, 8))))
    assert sorted(len(b) for b in batch["objects/bbox"].to_list()) == [1, 2]


def test_bad_boxes_are_schema_problems(tmp_path, pics):
    csv_path = tmp_path / "boxes.csv"
    csv_path.write_text(
        f"TRAIN,{pics[0]},car,0.1,0.2,,,1.5,0.6,,\n"      # x_max outside [0, 1]
        f"TRAIN,{pics[1]},car,0.7,0.2,,,0.5,0.6,,\n"      # x_min above x_max
        f"TRAIN,{pics[2]},,0.1,0.2,,,0.5,0.6,,\n")        # a box without a label
    with pytest.raises(tfrecorder.SchemaError) as e:
        tfrecorder.convert(str(csv_path), str(tmp_path / "out"))
    assert sorted((p.row, p.column) for p in e.value.problems) == [
        (1, "x_max"), (2, "x_min"), (3, "label")]
