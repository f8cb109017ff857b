"""The model_garden layout, judged by Model Garden's own decoders: every record of a
COCO conversion decodes with ``TfExampleDecoder`` to the COCO file's boxes, category ids
and image ids; an image table's records with its classification decoder to our label
ids; and the label map and the manifest say what was written."""

import json
import os

import pytest

import tfrecorder
from tfrecorder._folder import garden
from tfrecorder._folder.manifest import Manifest
from tests.conftest import split_files, write_images
from tests.test_coco import ANNOTATIONS, SIZES, _coco, _images, _write

# Model Garden, installed beside our TensorFlow without its pins: README's test command
# runs ``pip install --no-deps -r tests/model-garden.txt``.
from official.vision.dataloaders import tf_example_decoder as decoders  # noqa: E402


def _decoded(tf, decoder, files):
    return [{k: v.numpy() for k, v in decoder.decode(r).items()}
            for r in tf.data.TFRecordDataset(files)]


@pytest.mark.slow
def test_model_garden_decoder_reads_every_record_of_a_coco_conversion(tmp_path, tf):
    _images(tmp_path)
    src = _write(tmp_path / "instances_train.json", _coco(ANNOTATIONS))
    out = str(tmp_path / "out")
    tfrecorder.convert({"train": src}, out, layout="model_garden")
    got = _decoded(tf, decoders.TfExampleDecoder(), split_files(out, "train"))
    assert len(got) == len(SIZES)
    by_id = {int(r["source_id"]): r for r in got}
    assert sorted(by_id) == [100, 101, 102, 103]  # COCO's image ids
    for i, (w, h) in enumerate(SIZES):
        record = by_id[100 + i]
        assert (record["height"], record["width"]) == (h, w)
        mine = sorted((a for a in ANNOTATIONS if a["image_id"] == 100 + i),
                      key=lambda a: a["id"])
        assert record["groundtruth_classes"].tolist() == [a["category_id"] for a in mine]
        assert record["groundtruth_is_crowd"].tolist() == [bool(a["iscrowd"]) for a in mine]
        expected = [c for x, y, bw, bh in (a["bbox"] for a in mine)
                    for c in (y / h, x / w, (y + bh) / h, (x + bw) / w)]
        assert record["groundtruth_boxes"].reshape(-1).tolist() == pytest.approx(expected)
        assert record["groundtruth_area"].tolist() == pytest.approx(
            [a["bbox"][2] * a["bbox"][3] for a in mine], rel=1e-5)
        assert record["image"].shape == (h, w, 3)
    manifest = Manifest.from_bytes(open(os.path.join(out, "tfrecorder.json"), "rb").read())
    assert manifest.layout == "model_garden"
    with open(os.path.join(out, "objects-label.label_map.pbtxt")) as f:
        assert f.read() == ('item {\n  id: 3\n  name: "car"\n}\n'
                            'item {\n  id: 18\n  name: "dog"\n}\n'
                            'item {\n  id: 1\n  name: "person"\n}\n')


@pytest.mark.slow
def test_model_garden_decoder_reads_the_instance_masks_pycocotools_draws(tmp_path, tf):
    pytest.importorskip("pycocotools")
    from tests.test_masks import MASKED, _by_annotation

    _images(tmp_path)
    src = _write(tmp_path / "instances_train.json", _coco(MASKED))
    out = str(tmp_path / "out")
    tfrecorder.convert({"train": src}, out, layout="model_garden")
    decoder = decoders.TfExampleDecoder(include_mask=True)
    got = {int(r["source_id"]): r for r in _decoded(tf, decoder, split_files(out, "train"))}
    judge = _by_annotation(src)
    for image in sorted(got):
        mine = sorted((a for a in MASKED if a["image_id"] == image), key=lambda a: a["id"])
        found = got[image]["groundtruth_instance_masks"]
        assert found.shape[0] == len(mine)
        for mask, a in zip(found, mine):
            assert (mask > 0.5).astype("uint8").tolist() == judge[a["id"]].tolist()
    # and our readers read the same masks back in our keys
    ours = tfrecorder.read(out, split="train")
    assert sum(len(m) for m in ours["objects/mask"]) == len(MASKED)


@pytest.mark.slow
def test_model_garden_classification_decoder_reads_our_label_ids(tmp_path, tf):
    from official.vision.dataloaders import classification_input

    (tmp_path / "img").mkdir()
    paths = write_images(tmp_path / "img", 4)
    table = tmp_path / "t.csv"
    table.write_text("".join(f"TRAIN,{p},{'cat' if i % 2 else 'dog'}\n"
                             for i, p in enumerate(paths)))
    out = str(tmp_path / "out")
    tfrecorder.convert(str(table), out, layout="model_garden")
    got = _decoded(tf, classification_input.Decoder(), split_files(out, "train"))
    names = open(os.path.join(out, "label.labels.txt")).read().split()
    assert names == ["cat", "dog"]
    by_bytes = {r["image/encoded"]: r["image/class/label"] for r in got}
    assert sorted(by_bytes.values()) == [0, 0, 1, 1]
    for i, p in enumerate(paths):
        assert by_bytes[open(p, "rb").read()] == names.index("cat" if i % 2 else "dog")


def test_boxes_of_other_sources_are_numbered_from_one():
    assert garden.class_ids(["a", "b"], detection=True) == (1, 2)
    assert garden.class_ids(["a", "b"], detection=False) == (0, 1)
    assert garden.class_ids(["a", "b"], True, {"a": 7, "b": 3}) == (7, 3)


def test_an_unknown_layout_is_refused_with_the_choices():
    with pytest.raises(tfrecorder.ConfigError, match="layout='garden'.*model_garden"):
        tfrecorder.convert("x.csv", "out", layout="garden")
