"""Exports of object-detection folders (docs/sharing.md), judged by the other side's
code: ``datasets``, ``mlcroissant`` and ``webdataset`` read COCO's pixel boxes, the
category names and the masks and keypoints we hold."""

import io
import json

import numpy as np
import pytest

import tfrecorder
from tfrecorder import access
from tests.test_coco import _coco, _images, _write
from tests.test_export import _load, _offline  # noqa: F401 (an autouse fixture)
from tests.test_keypoints import NAMES, POSED, SKELETON, _posed


def _ours(out, split="train"):
    reader = access.Reader(out, split)
    try:
        return [reader.features(i) for i in range(len(reader))]
    finally:
        reader.close()


@pytest.fixture(scope="module")
def posed(tmp_path_factory):
    """A COCO conversion with crowd flags and a category's keypoints, once for the
    module; a second split holds images of their own."""
    root = tmp_path_factory.mktemp("posed")
    _images(root)
    _images(root, "v")
    train = _write(root / "train.json", _posed(POSED))
    other = _coco(POSED, prefix="v")
    other["categories"][0].update(keypoints=NAMES, skeleton=SKELETON)
    val = _write(root / "val.json", other)
    out = str(root / "out")
    tfrecorder.convert({"train": train, "validation": val}, out)
    return out


def _relative(box, width, height):
    """COCO's pixels ``[x, y, w, h]`` back to our ``[ymin, xmin, ymax, xmax]``."""
    x, y, w, h = box
    return [y / height, x / width, (y + h) / height, (x + w) / width]


@pytest.mark.slow
def test_datasets_loads_every_detection_record_with_coco_pixel_boxes(posed, tmp_path):
    datasets = pytest.importorskip("datasets")
    dest = tmp_path / "hf"
    tfrecorder.export(posed, str(dest))
    loaded = _load(dest, tmp_path)
    manifest = tfrecorder.info(posed)
    names = manifest.vocabularies["objects/label"]
    features = loaded["train"].features
    assert features["objects"]["category"].feature.names == names
    assert features["objects"]["bbox"] == datasets.List(
        datasets.List(datasets.Value("float32"), length=4))
    assert features["width"] == datasets.Value("int32")
    for split in ("train", "validation"):
        ours, theirs = _ours(posed, split), list(loaded[split])
        assert len(theirs) == len(ours) > 0
        ids = [row["image_id"] for row in theirs]
        assert len(set(ids)) == len(ids)
        for mine, row in zip(ours, theirs):
            assert row["image"]["bytes"] == mine["image"]
            width, height = mine["image_width"], mine["image_height"]
            assert (row["width"], row["height"]) == (width, height)
            boxes = row["objects"]
            back = np.array([_relative(b, width, height)
                             for b in boxes["bbox"]]).reshape(-1, 4)
            assert np.allclose(back, mine["objects/bbox"].reshape(-1, 4), rtol=1e-6,
                               atol=1e-6), mine["image_name"]
            assert boxes["category"] == mine["objects/label"].tolist()
            assert boxes["iscrowd"] == [bool(v) for v in mine["objects/is_crowd"]]
            assert boxes["id"] == list(range(len(boxes["bbox"])))
            assert boxes["area"] == pytest.approx([w * h for _, _, w, h in boxes["bbox"]])
            assert "image_uri" not in row and "image_width" not in row
    person = {row["image_name"]: row["objects"] for row in loaded["train"]}["0.jpg"]
    assert [names[i] for i in person["category"]] == ["person", "car"]
    # the person's keypoints in COCO's pixels, as the annotation gave them
    assert person["keypoints"][0] == pytest.approx(POSED[0]["keypoints"])
    assert person["keypoints"][1] == [] and person["num_keypoints"] == [2, 0]
    assert len(person["keypoints"][0]) == 3 * len(NAMES)


@pytest.mark.slow
def test_masks_load_as_images_and_give_the_area(tmp_path):
    pytest.importorskip("pycocotools.mask")
    from tests.test_masks import MASKED

    _images(tmp_path)
    out = str(tmp_path / "out")
    tfrecorder.convert({"train": _write(tmp_path / "masked.json", _coco(MASKED))}, out)
    dest = tmp_path / "hf"
    tfrecorder.export(out, str(dest))
    loaded = _load(dest, tmp_path)["train"]
    from PIL import Image

    for mine, row in zip(_ours(out), loaded):
        masks = row["objects"]["mask"]
        assert len(masks) == len(mine["objects/mask"])
        for png, image, area in zip(mine["objects/mask"], masks, row["objects"]["area"]):
            pixels = np.asarray(Image.open(io.BytesIO(png)))
            assert np.array_equal(np.asarray(image), pixels)
            assert area == np.count_nonzero(pixels) > 0  # the segment's, not the box's


@pytest.mark.slow
def test_mlcroissant_reads_the_objects_of_the_first_record(posed, tmp_path):
    mlc = pytest.importorskip("mlcroissant")
    dest = tmp_path / "hf"
    tfrecorder.export(posed, str(dest))
    dataset = mlc.Dataset(jsonld=str(dest / "croissant.json"))
    ours = {r["image_name"]: r for r in _ours(posed)}  # bytes, as mlcroissant reads them
    records = iter(dataset.records("train"))
    seen = 0
    for record in records:
        mine = ours[record["train/image_name"]]
        boxes = record["train/objects"]
        assert len(boxes) == len(mine["objects/label"])
        width, height = record["train/width"], record["train/height"]
        for box, corners, label in zip(boxes, mine["objects/bbox"], mine["objects/label"]):
            assert _relative(box["train/objects/bbox"], width, height) == pytest.approx(
                corners.tolist(), abs=1e-6)
            assert box["train/objects/category"] == label
        seen += bool(boxes)
        if seen:
            break
    assert seen == 1
    names = [r["label_names/name"] for r in dataset.records("label_names")]
    assert names == tfrecorder.info(posed).vocabularies["objects/label"]


@pytest.mark.slow
def test_webdataset_holds_the_objects_in_the_json_member(posed, tmp_path):
    wds = pytest.importorskip("webdataset")
    dest = tmp_path / "wds"
    tfrecorder.export(posed, str(dest), format="webdataset")
    names = tfrecorder.info(posed).vocabularies["objects/label"]
    ours = _ours(posed)
    theirs = list(wds.WebDataset(sorted(str(p) for p in dest.glob("train-*.tar")),
                                 shardshuffle=False, empty_check=False))
    assert len(theirs) == len(ours)
    for mine, sample in zip(ours, theirs):
        assert sample["jpg"] == mine["image"] and "cls" not in sample
        meta = json.loads(sample["json"])
        width, height = meta["width"], meta["height"]
        assert (width, height) == (mine["image_width"], mine["image_height"])
        boxes = meta["objects"]
        back = np.array([_relative(b, width, height)
                             for b in boxes["bbox"]]).reshape(-1, 4)
        assert np.allclose(back, mine["objects/bbox"].reshape(-1, 4), atol=1e-6)
        assert boxes["category_name"] == [names[i] for i in mine["objects/label"]]
        assert boxes["num_keypoints"] == mine["objects/num_keypoints"].tolist()
        assert "objects/bbox" not in meta and "image_uri" not in meta


@pytest.mark.slow
def test_webdataset_masks_are_png_members_of_the_sample(tmp_path):
    wds = pytest.importorskip("webdataset")
    pytest.importorskip("pycocotools.mask")
    from tests.test_masks import MASKED

    _images(tmp_path)
    out = str(tmp_path / "out")
    tfrecorder.convert({"train": _write(tmp_path / "masked.json", _coco(MASKED))}, out)
    dest = tmp_path / "wds"
    tfrecorder.export(out, str(dest), format="webdataset")
    theirs = list(wds.WebDataset(str(dest / "train-00000.tar"), shardshuffle=False,
                                 empty_check=False))
    for mine, sample in zip(_ours(out), theirs):
        stored = list(mine["objects/mask"])
        assert [sample[f"mask.{i}.png"] for i in range(len(stored))] == stored
        assert f"mask.{len(stored)}.png" not in sample
