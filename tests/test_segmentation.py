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
