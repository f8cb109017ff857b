import json
import os

import pytest

from tfrecorder import layout, metadata
from tfrecorder.errors import ConversionError, IncompleteOutputError
from tfrecorder.layout import FeatureSpec
from tfrecorder.shard import Quarantined, ShardStats

FEATURES = {"image": FeatureSpec("bytes", [], "image"), "label": FeatureSpec("int64", [], "label"),
            "image_name": FeatureSpec("bytes", [], "image_info")}


def _spec(rows_in=5, budget=1.0):
    return metadata.DatasetSpec("d", None, FEATURES, {"label": ["cat", "dog"]}, rows_in, budget)


def _stats():
    return [ShardStats("train", 1, 2, "d-train.tfrecord-00001-of-00002", 2, 200, rows=2,
                       source_bytes=150, channels={3: 2}, labels={0: 1, 1: 1}),
            ShardStats("test", 0, 1, "d-test.tfrecord-00000-of-00001", 1, 90, rows=1,
                       source_bytes=80, channels={3: 1}, labels={1: 1}),
            ShardStats("train", 0, 2, "d-train.tfrecord-00000-of-00002", 1, 100, rows=1,
                       source_bytes=70, channels={3: 1}, labels={1: 1})]


def _bad():
    return [Quarantined(9, "train", "/x/9.jpg", {"label": "dog"}, "read", "image file not found")]


def test_finalize_writes_every_file_sorted_and_deterministic(tmp_path):
    out = str(tmp_path)
    os.makedirs(tmp_path / layout.TMP_DIR)
    m = metadata.finalize(out, _spec(), _stats(), _bad())
    assert list(m.splits) == ["train", "test"]
    assert m.files("train") == ["d-train.tfrecord-00000-of-00002", "d-train.tfrecord-00001-of-00002"]
    assert (m.rows_written, m.rows_quarantined) == (4, 1)
    assert m.splits["train"].label_counts == {"cat": 1, "dog": 2}
    assert sorted(os.listdir(out)) == ["dataset_info.json", "errors.jsonl", "features.json",
                                       "label.labels.txt", "tfrecorder.json"]
    assert open(tmp_path / "label.labels.txt").read() == "cat\ndog\n"
    (line,) = open(tmp_path / "errors.jsonl").read().splitlines()
    assert json.loads(line) == {"row": 9, "split": "train", "image_uri": "/x/9.jpg",
                                "values": {"label": "dog"}, "stage": "read",
                                "reason": "image file not found", "merged_rows": []}
    info = json.load(open(tmp_path / "dataset_info.json"))
    assert [(s["name"], s["shardLengths"]) for s in info["splits"]] == [
        ("train", ["1", "2"]), ("test", ["1"])]
    first = {f: open(tmp_path / f, "rb").read() for f in os.listdir(out)}
    metadata.finalize(out, _spec(), list(reversed(_stats())), _bad())
    assert first == {f: open(tmp_path / f, "rb").read() for f in os.listdir(out)}
    assert metadata.read_manifest(out) == m


def test_over_the_error_budget_no_manifest_is_written(tmp_path):
    with pytest.raises(ConversionError, match="1 of 5 rows.*max_error_fraction=0.1.*not found"):
        metadata.finalize(str(tmp_path), _spec(budget=0.1), _stats(), _bad())
    assert not os.path.exists(tmp_path / layout.MANIFEST)
    assert os.path.exists(tmp_path / layout.ERRORS)
    with pytest.raises(IncompleteOutputError, match="overwrite=True"):
        metadata.read_manifest(str(tmp_path))


@pytest.mark.parametrize("counts,expected", [({3: 5}, 3), ({1: 2}, 1), ({4: 1, 0: 0}, 4),
                                             ({3: 1, 4: 1}, 3), ({2: 3}, 3)])
def test_tfds_image_channels(counts, expected):
    assert metadata.image_channels(counts) == expected
