"""EXIF orientation: a phone photo whose boxes were drawn on it as shown lands, stored,
with the boxes on the pixels every decoder gives; a classification table keeps its
bytes."""

import io
import json

import numpy as np
import pytest
from PIL import Image, ImageOps

import tfrecorder
from tfrecorder._writer import orientation
from tfrecorder.access import Reader

# The photo as shown: 40 wide, 64 tall, a red patch where its box is.
SHOWN = (40, 64)
BOX = [6, 36, 14, 18]  # COCO's x, y, width, height, in the shown frame's pixels


def _shown() -> Image.Image:
    img = Image.new("RGB", SHOWN, "white")
    x, y, w, h = BOX
    img.paste((220, 20, 20), (x, y, x + w, y + h))
    return img


def _phone_jpeg(turn: int = 6) -> bytes:
    """The shown photo as a phone stores it: the sensor's pixels (64 wide, 40 tall for a
    quarter turn) and the EXIF orientation that turns them as shown."""
    undo = {6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270,
            3: Image.Transpose.ROTATE_180}[turn]
    exif = Image.Exif()
    exif[0x0112] = turn
    exif[0x010F] = "a phone"  # Make: an EXIF field other than the orientation, kept
    out = io.BytesIO()
    _shown().transpose(undo).save(out, "JPEG", quality=95, exif=exif.tobytes())
    return out.getvalue()


def test_the_orientation_is_read_from_the_jpeg_header():
    assert orientation.of_jpeg(_phone_jpeg(6)) == 6
    assert orientation.of_jpeg(_phone_jpeg(8)) == 8
    plain = io.BytesIO()
    _shown().save(plain, "JPEG")
    assert orientation.of_jpeg(plain.getvalue()) == 1
    assert orientation.of_jpeg(b"\xff\xd8\xff\xe1\x00\x08Exif") == 1  # cut short: none
    told = orientation.without_tag(_phone_jpeg(6))
    assert orientation.of_jpeg(told) == 1 and Image.open(io.BytesIO(told)).getexif()[0x0112] == 1


@pytest.mark.parametrize("turn", [3, 6, 8])
def test_upright_gives_the_shown_frame_without_the_tag(tf, turn):
    data, info = orientation.upright(_phone_jpeg(turn))
    assert (info.width, info.height, info.channels, info.format) == (*SHOWN, 3, "jpeg")
    stored = Image.open(io.BytesIO(data))
    assert stored.size == SHOWN
    assert 0x0112 not in stored.getexif() and stored.getexif()[0x010F] == "a phone"
    pixels = tf.io.decode_jpeg(data).numpy()
    assert pixels.shape == (SHOWN[1], SHOWN[0], 3)
    # the same pixels as the photo turned by Pillow as it is shown
    shown = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(_phone_jpeg(turn)))))
    assert np.abs(pixels.astype(int) - shown.astype(int)).mean() < 4


def _patch_in_box(tf, record) -> tuple[float, float]:
    """The mean redness (R - G) inside the record's box, and outside every box."""
    pixels = tf.io.decode_jpeg(record["image"]).numpy().astype(int)
    h, w = pixels.shape[:2]
    ymin, xmin, ymax, xmax = record["objects/bbox"].ravel().tolist()
    top, left, bottom, right = (round(ymin * h), round(xmin * w), round(ymax * h),
                                round(xmax * w))
    redness = pixels[..., 0] - pixels[..., 1]
    outside = np.ones((h, w), bool)
    outside[top - 2:bottom + 2, left - 2:right + 2] = False  # JPEG blurs the patch's edge
    return (float(redness[top + 2:bottom - 2, left + 2:right - 2].mean()),
            float(redness[outside].mean()))


def _convert_coco(tmp_path, data: bytes, size, box):
    """A COCO file of one photo sized ``size`` with one ``box``, converted."""
    (tmp_path / "0.jpg").write_bytes(data)
    coco = {"images": [{"id": 1, "file_name": "0.jpg", "width": size[0], "height": size[1]}],
            "categories": [{"id": 1, "name": "thing"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": box,
                             "iscrowd": 0, "area": box[2] * box[3]}]}
    (tmp_path / "train.json").write_text(json.dumps(coco))
    return tfrecorder.convert({"train": str(tmp_path / "train.json")}, str(tmp_path / "out"))


@pytest.mark.slow
def test_a_coco_box_drawn_on_the_shown_photo_is_on_the_stored_pixels(tmp_path, tf):
    raw = _phone_jpeg(6)
    result = _convert_coco(tmp_path, raw, SHOWN, BOX)
    record = Reader(str(tmp_path / "out"), "train").features(0)
    assert (record["image_width"], record["image_height"]) == SHOWN
    assert tf.io.decode_jpeg(record["image"]).shape == (SHOWN[1], SHOWN[0], 3)
    inside, outside = _patch_in_box(tf, record)
    assert inside > 150 and outside < 20
    stored = len(record["image"])
    assert result.turned == {"images": 1, "source_bytes": len(raw), "stored_bytes": stored,
                             "sensor_frame": 0}
    line = next(s for s in str(result).splitlines() if s.lstrip().startswith("UPRIGHT"))
    assert "1 JPEG(s) turned upright by their EXIF orientation" in line
    assert "<b>upright</b>" in result._repr_html_()


@pytest.mark.slow
def test_a_coco_file_sizing_the_photo_in_its_sensor_frame_keeps_that_frame(tmp_path, tf):
    # A tool that ignored the orientation: the size and the box are the sensor's
    # (64 wide, 40 tall), the patch drawn there.
    sensor = Image.new("RGB", (64, 40), "white")
    box = [30, 8, 20, 14]
    sensor.paste((220, 20, 20), (box[0], box[1], box[0] + box[2], box[1] + box[3]))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    sensor.save(out, "JPEG", quality=95, exif=exif.tobytes())
    raw = out.getvalue()
    result = _convert_coco(tmp_path, raw, (64, 40), box)
    record = Reader(str(tmp_path / "out"), "train").features(0)
    stored = bytes(record["image"])
    assert len(stored) == len(raw) and orientation.of_jpeg(stored) == 1  # only the tag changed
    assert Image.open(io.BytesIO(stored)).tobytes() == Image.open(io.BytesIO(raw)).tobytes()
    assert (record["image_width"], record["image_height"]) == (64, 40)
    inside, outside = _patch_in_box(tf, record)
    assert inside > 150 and outside < 20
    assert result.turned["sensor_frame"] == 1 and result.turned["images"] == 0
    assert "1 kept in the sensor's frame" in str(result)


@pytest.mark.slow
def test_a_classification_table_keeps_the_photos_bytes(tmp_path):
    raw = _phone_jpeg(6)
    (tmp_path / "0.jpg").write_bytes(raw)
    table = tmp_path / "t.csv"
    table.write_text(f"split,image_uri,label\nTRAIN,{tmp_path / '0.jpg'},cat\n")
    result = tfrecorder.convert(str(table), str(tmp_path / "out"))
    record = Reader(str(tmp_path / "out"), "train").features(0)
    assert bytes(record["image"]) == raw
    assert (record["image_width"], record["image_height"]) == (64, 40)  # as decoders give it
    assert result.turned["images"] == 0 and "UPRIGHT" not in str(result)
