"""A model_garden folder read back by every reader and verb of ours, in our keys: the
same values as the folder of our layout converted from the same source (a COCO file and
an image table), boxes, label ids and image bytes included; an update and a compaction
of it too."""

import os
import shutil

import numpy as np
import pandas as pd
import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._folder import garden, index, metadata, stored_keys
from tfrecorder._folder.layout import FeatureSpec
from tfrecorder._folder.manifest import Manifest
from tfrecorder._folder import example, records
from tests.conftest import write_images
from tests.test_coco import ANNOTATIONS, _coco, _images, _write

LAYOUTS = ("tfrecorder", "model_garden")
SPLITS = {"coco": ("train",), "table": ("train", "test")}


def _table(paths):
    """Five images and a copy of the first under another label (a conflict that the
    data report shows with thumbnails)."""
    return pd.DataFrame({"split": ["TRAIN", "TRAIN", "TRAIN", "TEST", "TEST", "TRAIN"],
                         "image_uri": paths,
                         "label": ["cat", "dog", "cat", "dog", "owl", "dog"]})


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{(source, layout): output folder} of a COCO file and an image table, each
    converted in both layouts, and the table under "table"."""
    root = tmp_path_factory.mktemp("garden")
    _images(root / "coco")
    coco = _write(root / "coco" / "instances_train.json", _coco(ANNOTATIONS))
    (root / "img").mkdir()
    paths = write_images(root / "img", 5)
    twin = root / "img" / "twin.jpg"
    twin.write_bytes(open(paths[0], "rb").read())
    table = _table(paths + [str(twin)])
    out = {"table": table}
    for layout in LAYOUTS:
        out["coco", layout] = str(root / f"coco-{layout}")
        tfrecorder.convert({"train": coco}, out["coco", layout], layout=layout)
        out["table", layout] = str(root / f"table-{layout}")
        tfrecorder.convert(table, out["table", layout], layout=layout)
    return out


def _plain(value):
    if hasattr(value, "numpy"):  # a TensorFlow or PyTorch tensor
        value = value.numpy()
    return value.tolist() if isinstance(value, np.ndarray) else value


def _by_uri(rows) -> dict:
    """Records as plain values, by their image's value in the table."""
    rows = [{k: _plain(v) for k, v in row.items()} for row in rows]
    return {row["image_uri"]: row for row in rows}


def _features(out, split, version=None) -> dict:
    reader = access.Reader(out, split, version=version)
    return _by_uri(reader.features(i) for i in range(len(reader)))


def _both(folders, source, read):
    """``read(folder)`` of the folder of each layout, which must be alike and hold
    something; the model_garden folder's."""
    ours, theirs = (read(folders[source, layout]) for layout in LAYOUTS)
    assert len(ours) and theirs == ours
    return theirs


@pytest.mark.slow
def test_access_reads_a_model_garden_folder_in_our_keys(folders):
    for source, splits in SPLITS.items():
        for split in splits:
            got = _both(folders, source, lambda out: _features(out, split))
            reader = access.Reader(folders[source, "model_garden"], split)
            stored = example.parse(reader.record(0))
            assert garden.SOURCE_ID in stored and "image" not in stored
            assert all(set(row) == set(reader.manifest.features) for row in got.values())
    # COCO's boxes, in our label ids (lines of the labels file), and only those asked.
    out = folders["coco", "model_garden"]
    reader = access.Reader(out, "train")
    names = reader.manifest.label_names
    got = _features(out, "train")
    record = next(r for uri, r in got.items() if uri.endswith(b"/0.jpg"))
    assert [names[i] for i in record["objects/label"]] == ["person", "car"]
    assert record["objects/is_crowd"] == [1, 0]
    np.testing.assert_allclose(record["objects/bbox"], [[0, 0, 1, 1], [0.1, 0.1, 0.6, 0.6]],
                               rtol=1e-6)
    some = access.values(reader.record(0), reader.manifest, ["objects/label", "image_uri"])
    assert sorted(some) == ["image_uri", "objects/label"]
    assert some["objects/label"].tolist() == got[some["image_uri"]]["objects/label"]


@pytest.mark.slow
def test_torch_and_grain_read_a_model_garden_folder_in_our_keys(folders):
    torch_data = pytest.importorskip("tfrecorder.torch")
    grain_data = pytest.importorskip("tfrecorder.grain")

    def grain_items(out):
        source = grain_data.DataSource(out, "train")
        return _by_uri(source[i] for i in range(len(source)))

    def torch_items(out):
        data = torch_data.Dataset(out, "train", target_format="dict")
        return _by_uri(data[i] for i in range(len(data)))

    def torch_targets(out):  # torchvision's (image, target), in the records' order
        data = torch_data.Dataset(out, "train")
        return [(_plain(image), {k: _plain(v) for k, v in target.items()})
                for image, target in (data[i] for i in range(len(data)))]

    def supervised(out):
        data = torch_data.Dataset(out, "train")
        return sorted((_plain(image), int(label)) for image, label in
                      (data[i] for i in range(len(data))))

    for source in SPLITS:
        _both(folders, source, grain_items)
    _both(folders, "coco", torch_items)
    ours, theirs = (torch_targets(folders["coco", layout]) for layout in LAYOUTS)
    assert theirs == ours and any(t["boxes"] for _, t in ours)
    _both(folders, "table", supervised)


@pytest.mark.slow
def test_read_and_inspect_a_model_garden_folder(folders, tmp_path):
    def table(out):
        frame = tfrecorder.read(out, images=True)
        return frame.sort_values("image_uri").reset_index(drop=True).to_dict("list")

    def inspected(out):
        shown = tfrecorder.inspect(out, "train", num_records=10,
                                   output_dir=str(tmp_path / os.path.basename(out)))
        return sorted((sorted(row.items()) for row in shown.rows), key=str), sorted(
            shown.images, key=lambda i: i[0])

    for source in SPLITS:
        got = _both(folders, source, table)
        assert all(isinstance(image, bytes) for image in got["image"])
        _both(folders, source, inspected)


@pytest.mark.slow
def test_load_reads_a_model_garden_folder_in_our_keys(folders, tf):
    def records(out):
        return _by_uri(tfrecorder.load(out, "train"))

    def batched(out):
        ds = tfrecorder.load(out, "train", batch_size=4, image_size=(8, 8))
        return [{k: v.to_list() if hasattr(v, "to_list") else _plain(v)
                 for k, v in batch.items()} for batch in ds]

    def supervised(out):
        return sorted((_plain(image), int(label)) for image, label in
                      tfrecorder.load(out, "train", as_supervised=True))

    for source in SPLITS:
        _both(folders, source, records)
        _both(folders, source, batched)
    _both(folders, "table", supervised)


@pytest.mark.slow
def test_verify_report_and_dali_index_files_of_a_model_garden_folder(folders):
    def checked(out):
        verified = tfrecorder.verify(out)
        report = tfrecorder.open(out).report()
        html = report._repr_html_()
        return (verified.records_per_split, report.found(),
                html.count("<img src='data:image/jpeg;base64,"))

    for source in SPLITS:
        per_split, found, thumbnails = _both(folders, source, checked)
    assert found["conflicts"] and thumbnails  # the table's twins, shown

    def indexed(out):
        """Every record as DALI finds it: each shard's index file, its entries framing
        the records of the shard."""
        manifest = metadata.read_manifest(out)
        reader = access.Reader(out, "train")
        assert len(reader.index_files) == len(reader.files)
        found = []
        for shard, path in zip(reader.files, reader.index_files):
            entries = index.parse(open(path, "rb").read(), path)
            with open(shard, "rb") as f:
                data = f.read()
            for offset, length in entries:
                record = records.unframe(data[offset:offset + length], length, path)
                found.append(stored_keys.parse(record, manifest)["image"][1][0])
        return sorted(found)

    for source in SPLITS:
        _both(folders, source, indexed)


@pytest.mark.slow
def test_an_update_and_a_compaction_of_a_model_garden_folder(folders, tmp_path):
    table = folders["table"].copy()
    table.loc[1, "label"] = "bird"  # one row relabelled
    outs = {}
    for layout in LAYOUTS:
        outs[layout] = str(tmp_path / layout)
        shutil.copytree(folders["table", layout], outs[layout])
        updated = tfrecorder.convert(table, outs[layout], mode="update")
        assert updated.version == 2
        assert updated.changes["train"] == {"added": 1, "retired": 1, "kept": 3}
    copies = {("table", layout): out for layout, out in outs.items()}
    got = _both(copies, "table", lambda out: _features(out, "train", version=2))
    names = metadata.read_manifest(outs["model_garden"]).label_names
    assert names[got[table.image_uri[1].encode()]["label"]] == "bird"
    with open(os.path.join(outs["model_garden"], "label.label_map.pbtxt")) as f:
        assert 'name: "bird"' in f.read()
    for out in outs.values():
        assert tfrecorder.compact(out).version == 3
    assert _both(copies, "table", lambda out: _features(out, "train", version=3)) == got


def test_a_model_garden_record_of_unequal_box_lists_or_an_unknown_class_is_refused():
    manifest = Manifest(
        name="d", compression=None, features={
            "objects/bbox": FeatureSpec("float", [-1, 4], "bbox"),
            "objects/label": FeatureSpec("int64", None, "label")},
        vocabularies={"objects/label": ["cat"]}, splits={}, rows_in=0, rows_written=0,
        rows_quarantined=0, layout="model_garden")
    boxes = {k: example.float_feature([0.5]) for k in garden.BOX_KEYS}
    good = {**boxes, garden.OBJECT_TEXT: example.bytes_feature(["cat"])}
    assert stored_keys.parse(example.serialize(good), manifest) == {
        "objects/bbox": ("float", [0.5] * 4), "objects/label": ("int64", [0])}
    short = {**good, garden.BOX_KEYS[0]: example.float_feature([])}
    with pytest.raises(tfrecorder.CorruptRecordError, match=r"hold \[0, 1, 1, 1\] values"):
        stored_keys.parse(example.serialize(short), manifest)
    dog = {**good, garden.OBJECT_TEXT: example.bytes_feature(["dog"])}
    with pytest.raises(tfrecorder.CorruptRecordError, match="b'dog'.*objects-label.labels"):
        stored_keys.parse(example.serialize(dog), manifest)
