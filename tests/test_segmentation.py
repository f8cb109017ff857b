"""Semantic segmentation tables: ``split, image_uri, mask_uri`` from a CSV or a
DataFrame, each mask a PNG of class ids checked against its image from both headers,
stored as its file's bytes; masks that cannot be one are quarantined with their reason."""

import io
import json
import os

import numpy as np
import pandas as pd
import pytest

import tfrecorder
from tfrecorder._errors import ConfigError
from tests.conftest import encode, read_split


def _png(array, mode=None) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.asarray(array, dtype=np.uint8), mode).save(out, "PNG")
    return out.getvalue()


def _ids(height, width, seed=0):
    """A mask of class ids 0..2: background, a band of 1, a block of 2."""
    ids = np.zeros((height, width), dtype=np.uint8)
    ids[seed % height:, : width // 2] = 1
    ids[: height // 2, width // 2:] = 2
    return ids


def segmentation_table(folder, bad: bool = True) -> list[dict]:
    """Rows of images (24 x 16, width x height) and masks written into ``folder``; with
    ``bad``, one mask of another size, an RGB mask and a missing mask file besides."""
    rows = []
    for i in range(4):
        image, mask = f"img{i}.png", f"img{i}_mask.png"
        with open(os.path.join(folder, image), "wb") as f:
            f.write(encode(size=(24, 16), fmt="PNG", seed=i))
        with open(os.path.join(folder, mask), "wb") as f:
            f.write(_png(_ids(16, 24, i)))
        rows.append({"split": "TRAIN" if i < 3 else "TEST", "image_uri": image,
                     "mask_uri": mask})
    if bad:
        for name, data in [("big", _png(_ids(32, 24))), ("rgb", encode(size=(24, 16),
                                                                        fmt="PNG"))]:
            with open(os.path.join(folder, f"{name}.png"), "wb") as f:
                f.write(encode(size=(24, 16), fmt="PNG", seed=9))
            with open(os.path.join(folder, f"{name}_mask.png"), "wb") as f:
                f.write(data)
            rows.append({"split": "TRAIN", "image_uri": f"{name}.png",
                         "mask_uri": f"{name}_mask.png"})
        with open(os.path.join(folder, "lost.png"), "wb") as f:
            f.write(encode(size=(24, 16), fmt="PNG", seed=8))
        rows.append({"split": "TRAIN", "image_uri": "lost.png", "mask_uri": "lost_mask.png"})
    return rows


def _errors(out) -> dict:
    with open(os.path.join(out, "errors.jsonl")) as f:
        return {e["image_uri"].rsplit("/", 1)[-1]: e for e in map(json.loads, f)}


@pytest.mark.slow
def test_a_csv_table_keeps_each_mask_or_quarantines_it_with_its_reason(tmp_path, tf):
    rows = segmentation_table(str(tmp_path))
    pd.DataFrame(rows).to_csv(tmp_path / "table.csv", index=False)
    out = str(tmp_path / "out")
    result = tfrecorder.convert(str(tmp_path / "table.csv"), out, max_error_fraction=0.5)

    assert result.rows_quarantined == 3
    errors = _errors(out)
    assert set(errors) == {"big.png", "rgb.png", "lost.png"}
    assert errors["big.png"]["reason"].startswith(
        "mask of another size: 24 x 32 pixels (width x height) on an image of 24 x 16")
    assert "8-bit RGB PNG" in errors["rgb.png"]["reason"]
    assert errors["lost.png"]["reason"].startswith("mask file not found")
    assert errors["lost.png"]["stage"] == "read"
    records = read_split(tf, out, "train") + read_split(tf, out, "test")
    assert len(records) == 4
    for r in records:
        name = r["image_uri"][0].decode()
        with open(tmp_path / name.replace(".png", "_mask.png"), "rb") as f:
            assert r["segmentation_mask"] == [f.read()]  # the file's bytes, as they are
        assert r["segmentation_mask_format"] == [b"png"]
        assert "mask_uri" not in r


def test_a_dataframe_table_with_class_names(tmp_path, tf):
    rows = segmentation_table(str(tmp_path), bad=False)
    frame = pd.DataFrame([{**r, "image_uri": str(tmp_path / r["image_uri"]),
                           "mask_uri": str(tmp_path / r["mask_uri"])} for r in rows])
    (tmp_path / "classes.txt").write_text("background\ncat\ndog\n")
    out = str(tmp_path / "out")
    result = tfrecorder.convert(frame, out, label_vocabulary=str(tmp_path / "classes.txt"))

    assert result.rows_quarantined == 0
    with open(os.path.join(out, "segmentation_mask.labels.txt")) as f:
        assert f.read().split() == ["background", "cat", "dog"]
    decoded = [tf.io.decode_png(r["segmentation_mask"][0]).numpy()
               for r in read_split(tf, out, "train")]
    assert [d.shape for d in decoded] == [(16, 24, 1)] * 3
    assert sorted(np.unique(decoded[0]).tolist()) == [0, 1, 2]


def test_shorter_side_is_refused_beside_masks(tmp_path):
    rows = segmentation_table(str(tmp_path), bad=False)
    pd.DataFrame(rows).to_csv(tmp_path / "table.csv", index=False)
    with pytest.raises(ConfigError, match="segmentation_mask"):
        tfrecorder.convert(str(tmp_path / "table.csv"), str(tmp_path / "out"),
                           shorter_side=8)


@pytest.mark.parametrize("mode, words", [
    ("P", "8-bit palette PNG"),
    ("I;16", "16-bit grey PNG"),
    ("LA", "8-bit grey with alpha PNG"),
])
def test_only_one_8_bit_channel_of_ids_is_a_mask(mode, words):
    from PIL import Image

    from tfrecorder._writer import class_mask

    out = io.BytesIO()
    Image.fromarray(_ids(16, 24)).convert(mode).save(out, "PNG")
    reason = class_mask.problem(out.getvalue(), 24, 16)
    assert reason.startswith(class_mask.NOT_IDS) and words in reason
    assert class_mask.problem(_png(_ids(16, 24)), 24, 16) is None
    assert class_mask.problem(b"GIF89a" + bytes(40), 24, 16).startswith(class_mask.NOT_IDS)


@pytest.fixture(scope="module")
def segmented(tmp_path_factory):
    """A segmentation DataFrame converted in each layout: (its folder, {layout: out})."""
    folder = tmp_path_factory.mktemp("segmented")
    rows = segmentation_table(str(folder), bad=False)
    frame = pd.DataFrame([{**r, "image_uri": str(folder / r["image_uri"]),
                           "mask_uri": str(folder / r["mask_uri"])} for r in rows])
    outs = {}
    for layout in ("tfrecorder", "model_garden"):
        outs[layout] = str(folder / layout)
        tfrecorder.convert(frame, outs[layout], layout=layout,
                           label_vocabulary=["background", "cat", "dog"])
    return folder, outs


def _mask_of(folder, image_uri: str) -> bytes:
    with open(os.path.join(str(folder), os.path.basename(image_uri).replace(
            ".png", "_mask.png")), "rb") as f:
        return f.read()


@pytest.mark.parametrize("layout", ["tfrecorder", "model_garden"])
def test_read_and_access_give_the_mask_png(segmented, layout):
    from tfrecorder import access

    folder, outs = segmented
    table = tfrecorder.read(outs[layout], "train")
    assert len(table) == 3
    for uri, mask in zip(table["image_uri"], table["segmentation_mask"]):
        assert mask == _mask_of(folder, uri)
    reader = access.Reader(outs[layout], "train")
    values = access.values(reader.records([0])[0], reader.manifest)
    assert values["segmentation_mask"] == _mask_of(folder, values["image_uri"].decode())
    assert values["segmentation_mask_format"] == b"png"


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["tfrecorder", "model_garden"])
def test_load_decodes_the_mask_to_class_ids(segmented, layout, tf):
    folder, outs = segmented
    for ex in tfrecorder.load(outs[layout], "train"):
        mask = ex["segmentation_mask"].numpy()
        assert mask.dtype == np.uint8 and mask.shape == (16, 24, 1)
        i = int(os.path.basename(ex["image_uri"].numpy().decode())[3])
        assert (mask[..., 0] == _ids(16, 24, i)).all()
        assert ex["image"].shape == (16, 24, 3)
    resized = next(iter(tfrecorder.load(outs[layout], "train", image_size=(8, 12),
                                        batch_size=3)))
    assert resized["segmentation_mask"].shape == (3, 8, 12, 1)
    assert resized["segmentation_mask"].dtype == tf.uint8


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["tfrecorder", "model_garden"])
def test_torch_gives_image_and_mask_as_torchvision_takes_them(segmented, layout):
    torch = pytest.importorskip("torch")
    import tfrecorder.torch as tt

    folder, outs = segmented
    ds = tt.Dataset(outs[layout], "train")
    image, mask = ds[0]
    assert image.shape == (3, 16, 24) and image.dtype == torch.uint8
    assert mask.shape == (16, 24) and mask.dtype == torch.int64
    names = tt.Dataset(outs[layout], "train", target_format="dict")[0]
    i = int(os.path.basename(names["image_uri"].decode())[3])
    assert mask.numpy().tolist() == _ids(16, 24, i).tolist()


@pytest.mark.slow
def test_torchvision_transforms_move_the_mask_with_the_image(segmented):
    tv_tensors = pytest.importorskip("torchvision.tv_tensors")
    import tfrecorder.torch as tt
    from torchvision.transforms import v2

    folder, outs = segmented
    image, mask = tt.Dataset(outs["tfrecorder"], "train")[0]
    assert isinstance(mask, tv_tensors.Mask)
    _, flipped = tt.Dataset(outs["tfrecorder"], "train",
                            transforms=v2.RandomHorizontalFlip(p=1.0))[0]
    assert flipped.numpy().tolist() == mask.numpy()[:, ::-1].tolist()


@pytest.mark.slow
def test_model_garden_segmentation_decoder_reads_our_records(segmented, tf):
    from official.vision.dataloaders import segmentation_input

    folder, outs = segmented
    decoder = segmentation_input.Decoder()
    files = [os.path.join(outs["model_garden"], f)
             for f in sorted(os.listdir(outs["model_garden"])) if "-train.tfrecord" in f]
    got = [decoder.decode(r) for r in tf.data.TFRecordDataset(files)]
    assert len(got) == 3
    for record in got:
        label = tf.io.decode_image(record["image/segmentation/class/encoded"],
                                   channels=1).numpy()
        assert label.shape == (16, 24, 1)
        assert (int(record["image/height"]), int(record["image/width"])) == (16, 24)
        assert sorted(np.unique(label).tolist()) == [0, 1, 2]
    masks = sorted(r["image/segmentation/class/encoded"].numpy() for r in got)
    assert masks == sorted(_mask_of(folder, f"img{i}.png") for i in range(3))


@pytest.mark.slow
def test_parquet_export_holds_the_mask_as_an_image_column(segmented, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder, outs = segmented
    dest = tmp_path / "hf"
    tfrecorder.export(outs["tfrecorder"], str(dest))
    loaded = datasets.load_dataset(str(dest), cache_dir=str(tmp_path / "hf-cache"))
    train = loaded["train"]
    assert isinstance(train.features["segmentation_mask"], datasets.Image)
    decoded = train[0]["segmentation_mask"]  # a PIL image, as the Hub's viewer shows it
    assert decoded.size == (24, 16) and decoded.mode == "L"
    raw = train.cast_column("segmentation_mask", datasets.Image(decode=False))
    raw = raw.cast_column("image", datasets.Image(decode=False))
    got = sorted(r["segmentation_mask"]["bytes"] for r in raw)
    assert got == sorted(_mask_of(folder, f"img{i}.png") for i in range(3))
    mlc = pytest.importorskip("mlcroissant")
    dataset = mlc.Dataset(jsonld=str(dest / "croissant.json"))
    first = next(iter(dataset.records("train")))
    assert first["train/segmentation_mask"].size == (24, 16)  # read as an image


@pytest.mark.slow
def test_webdataset_export_holds_the_mask_as_its_own_png_member(segmented, tmp_path):
    import tarfile

    folder, outs = segmented
    dest = tmp_path / "wds"
    done = tfrecorder.export(outs["tfrecorder"], str(dest), format="webdataset")
    members = {}
    for name in done.files:
        if name.startswith("train"):
            with tarfile.open(dest / name) as tar:
                members.update({m.name: tar.extractfile(m).read() for m in tar.getmembers()})
    masks = sorted(v for k, v in members.items() if k.endswith(".mask.png"))
    assert masks == sorted(_mask_of(folder, f"img{i}.png") for i in range(3))
    meta = [json.loads(v) for k, v in members.items() if k.endswith(".json")]
    assert all("segmentation_mask" not in m for m in meta)


@pytest.mark.slow
def test_an_exif_turned_photo_is_stored_as_shown_beside_its_mask(tmp_path, tf):
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 6  # turn a quarter clockwise to show: 24 x 16 stored, 16 x 24 shown
    photo = io.BytesIO()
    Image.open(io.BytesIO(encode(size=(24, 16)))).save(photo, "JPEG", exif=exif)
    (tmp_path / "photo.jpg").write_bytes(photo.getvalue())
    (tmp_path / "photo_mask.png").write_bytes(_png(_ids(24, 16)))  # drawn as shown
    frame = pd.DataFrame({"split": ["TRAIN"], "image_uri": [str(tmp_path / "photo.jpg")],
                          "mask_uri": [str(tmp_path / "photo_mask.png")]})
    out = str(tmp_path / "out")
    result = tfrecorder.convert(frame, out)
    assert result.rows_quarantined == 0
    (record,) = read_split(tf, out, "train")
    assert (record["image_width"], record["image_height"]) == ([16], [24])
    assert tf.io.decode_jpeg(record["image"][0]).shape == (24, 16, 3)


@pytest.mark.slow
def test_an_update_keeps_unchanged_records_and_the_class_names(tmp_path):
    rows = segmentation_table(str(tmp_path), bad=False)
    frame = pd.DataFrame([{**r, "image_uri": str(tmp_path / r["image_uri"]),
                           "mask_uri": str(tmp_path / r["mask_uri"])} for r in rows])
    out = str(tmp_path / "out")
    tfrecorder.convert(frame.iloc[:2], out, label_vocabulary=["background", "cat", "dog"])
    result = tfrecorder.convert(frame, out, mode="update")
    assert result.changes["train"] == {"added": 1, "retired": 0, "kept": 2}
    assert tfrecorder.info(out).vocabularies == {
        "segmentation_mask": ["background", "cat", "dog"]}
    assert len(tfrecorder.read(out)) == 4
    frame.loc[0, "mask_uri"] = frame.loc[1, "mask_uri"]  # another mask: rewritten
    result = tfrecorder.convert(frame, out, mode="update")
    assert result.changes["train"] == {"added": 1, "retired": 1, "kept": 2}
