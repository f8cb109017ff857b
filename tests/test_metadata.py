import dataclasses
import json
import os

import pytest

from tfrecorder._folder import layout, ledger, metadata
from tfrecorder._writer import publishing, run_metadata
from tfrecorder._errors import ConversionError, IncompleteOutputError
from tfrecorder._folder.layout import FeatureSpec
from tfrecorder._writer.shard import Quarantined, ShardStats

FEATURES = {"image": FeatureSpec("bytes", [], "image"), "label": FeatureSpec("int64", [], "label"),
            "image_name": FeatureSpec("bytes", [], "image_info")}


def _spec(out, rows_in=5, budget=1.0):
    return run_metadata.DatasetSpec("d", None, FEATURES, {"label": ["cat", "dog"]}, rows_in, budget)


def _run(out):
    return ledger.RunFolder(out, "r1")


def _stage(out, stats):
    """Shard files in the run's folder, as the shard writers leave them, and the
    folder's lock, the run's (its last step removes nothing of another run's)."""
    run = os.path.join(out, layout.TMP_DIR, "r1")
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(out, layout.LOCK), "w") as f:
        json.dump({"run_id": "r1", "expires": 2e9}, f)
    for s in stats:
        with open(os.path.join(run, s.filename), "wb") as f:
            f.write(s.filename.encode())


def _stats():
    return [ShardStats("train", 1, 2, "d-train.tfrecord-00001-of-00002", 2, 200, rows=2,
                       source_bytes=150, channels={3: 2}, labels={0: 1, 1: 1}),
            ShardStats("test", 0, 1, "d-test.tfrecord-00000-of-00001", 1, 90, rows=1,
                       source_bytes=80, channels={3: 1}, labels={1: 1}),
            ShardStats("train", 0, 2, "d-train.tfrecord-00000-of-00002", 1, 100, rows=1,
                       source_bytes=70, channels={3: 1}, labels={1: 1})]


def _bad():
    return [Quarantined(9, "train", "/x/9.jpg", {"label": "dog"}, "read", "image file not found")]


def test_rows_of_one_id_are_in_the_same_order_whatever_order_the_shards_came_in(tmp_path):
    # a DataFrame index that repeats "r3": its quarantined rows come from two shards
    bad = [Quarantined("r3", "test", "/x/gone_5.jpg", {"label": "cat"}, "read",
                       "image file not found"),
           Quarantined("r3", "train", "/x/gone_2.jpg", {"label": "dog"}, "read",
                       "image file not found"),
           Quarantined(2, "train", "/x/2.png", {"label": "dog"}, "image", "not an image")]
    built = [run_metadata.build(_spec(str(tmp_path)), _stats(), order)
             for order in (bad, bad[::-1])]
    assert built[0].errors == built[1].errors
    assert built[0].first_reasons == built[1].first_reasons
    assert [json.loads(line)["image_uri"] for line in built[0].errors.splitlines()] == [
        "/x/2.png", "/x/gone_2.jpg", "/x/gone_5.jpg"]


def test_finish_publishes_every_file_sorted_and_deterministic(tmp_path):
    out = str(tmp_path)
    _stage(out, _stats())
    m = publishing.finish(_run(out), _spec(out), _stats(), _bad())
    assert list(m.splits) == ["train", "test"]
    assert m.files("train") == ["d-train.tfrecord-00000-of-00002", "d-train.tfrecord-00001-of-00002"]
    assert (m.rows_written, m.rows_quarantined) == (4, 1)
    assert m.splits["train"].label_counts == {"cat": 1, "dog": 2}
    shards = sorted(s.filename for s in _stats())
    assert sorted(os.listdir(out)) == sorted(
        ["dataset_info.json", "errors.jsonl", "features.json", "label.labels.txt", "quality.json",
         "tfrecorder.json", "versions", *shards])  # the run's folder is gone, its shards moved in
    assert open(tmp_path / "label.labels.txt").read() == "cat\ndog\n"
    (line,) = open(tmp_path / "errors.jsonl").read().splitlines()
    assert json.loads(line) == {"row": 9, "split": "train", "image_uri": "/x/9.jpg",
                                "values": {"label": "dog"}, "stage": "read",
                                "reason": "image file not found"}
    info = json.load(open(tmp_path / "dataset_info.json"))
    assert [(s["name"], s["shardLengths"]) for s in info["splits"]] == [
        ("train", ["1", "2"]), ("test", ["1"])]
    assert m.version == 1 and m.published.endswith("Z")
    assert open(tmp_path / "versions" / "00001.json", "rb").read() == m.to_bytes()

    def files():  # every file's bytes, but the time the version was published
        found = {f: open(tmp_path / f, "rb").read() for f in os.listdir(out)
                 if os.path.isfile(tmp_path / f)}
        found["tfrecorder.json"] = dataclasses.replace(
            metadata.read_manifest(out), published=None).to_bytes()
        return found

    first = files()
    _stage(out, _stats())
    again = publishing.finish(_run(out), _spec(out), list(reversed(_stats())), _bad())
    assert first == files()
    assert dataclasses.replace(metadata.read_manifest(out), published=None) == \
        dataclasses.replace(m, published=None)
    assert again.generation == m.generation


def test_over_the_error_budget_no_manifest_is_written(tmp_path):
    out = str(tmp_path)
    _stage(out, _stats())
    with pytest.raises(ConversionError, match="1 of 5 rows.*max_error_fraction=0.1.*not found"):
        publishing.finish(_run(out), _spec(out, budget=0.1), _stats(), _bad())
    assert not os.path.exists(tmp_path / layout.MANIFEST)
    assert os.path.exists(tmp_path / layout.ERRORS)
    assert not any(n.endswith(("00001", "00002")) for n in os.listdir(out))  # nothing published
    with pytest.raises(IncompleteOutputError, match="mode='overwrite'"):
        metadata.read_manifest(str(tmp_path))


@pytest.mark.parametrize("counts,expected", [({3: 5}, 3), ({1: 2}, 1), ({4: 1, 0: 0}, 4),
                                             ({3: 1, 4: 1}, 3), ({2: 3}, 3)])
def test_tfds_image_channels(counts, expected):
    assert run_metadata.image_channels(counts) == expected


@pytest.mark.slow  # a conversion end to end
def test_tfds_reads_every_record_of_a_dataset_holding_a_gif(tf, tmp_path):
    # TFDS's Image feature decodes a GIF (even of one frame) to [1, H, W, 3], which its
    # [H, W, C] shape refuses: such a dataset declares the image as its encoded bytes.
    import io

    import pandas as pd
    import tensorflow_datasets as tfds
    from PIL import Image

    import tfrecorder
    from tests.conftest import encode

    frames = [Image.new("RGB", (12, 8), c) for c in ("red", "blue")]
    animated = io.BytesIO()
    frames[0].save(animated, "GIF", save_all=True, append_images=frames[1:])
    files = {"a.gif": animated.getvalue(), "b.gif": encode("P", fmt="GIF"),
             "c.jpg": encode(), "d.png": encode(fmt="PNG")}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    df = pd.DataFrame({"split": "TRAIN", "image_uri": [str(tmp_path / n) for n in files],
                       "label": ["x", "y", "x", "y"]})
    out = tmp_path / "out"
    tfrecorder.convert(df, str(out))
    builder = tfds.builder_from_directory(str(out))
    got = {}
    for ex in builder.as_dataset(split="train"):
        img = tf.io.decode_image(ex["image"], expand_animations=False)
        got[ex["image_name"].numpy().decode()] = (ex["image"].numpy(), tuple(img.shape))
    assert {n: data for n, (data, _) in got.items()} == files
    assert {n: shape for n, (_, shape) in got.items()} == {
        "a.gif": (8, 12, 3), "b.gif": (16, 24, 3), "c.jpg": (16, 24, 3), "d.png": (16, 24, 3)}
    del files["a.gif"], files["b.gif"]  # without a GIF, TFDS decodes the images itself
    tfrecorder.convert(df.iloc[2:], str(out), mode="overwrite")
    images = [ex["image"] for ex in tfds.builder_from_directory(str(out)).as_dataset(split="train")]
    assert [(i.dtype.name, tuple(i.shape)) for i in images] == [("uint8", (16, 24, 3))] * 2


@pytest.mark.slow  # a conversion end to end
def test_tfds_reads_every_record_of_a_dataset_holding_a_webp(tf, tmp_path):
    # TFDS's Image feature decodes a WebP as a GIF, to [1, H, W, C]: such a dataset
    # declares the image as its encoded bytes, which are the file's.
    import pandas as pd
    import tensorflow_datasets as tfds

    import tfrecorder
    from tests.conftest import encode

    files = {"a.webp": encode(fmt="WEBP"), "b.jpg": encode(seed=1)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    df = pd.DataFrame({"split": "TRAIN", "image_uri": [str(tmp_path / n) for n in files],
                       "label": "x"})
    out = tmp_path / "out"
    tfrecorder.convert(df, str(out))
    got = {ex["image_name"].numpy().decode(): ex["image"].numpy()
           for ex in tfds.builder_from_directory(str(out)).as_dataset(split="train")}
    assert got == files
