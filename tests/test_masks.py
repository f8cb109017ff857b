"""COCO instance masks: polygons (several per object) and run-length encodings
(uncompressed and compressed, crowds) rasterised to one PNG per box, judged by
pycocotools' own ``annToMask``; masks that are not of their image are reported."""

import io
import json
import sys

import numpy as np
import pytest

from tfrecorder._errors import Problems
from tfrecorder._inputs import coco, masks
from tfrecorder._inputs.annotations import Annotations
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA
from tfrecorder._folder import example
from tests.conftest import check_table
from tests.test_coco import _ann, _coco, _images, _write

pycocotools = pytest.importorskip("pycocotools.mask")


def _rle(height, width, box):
    """The uncompressed RLE (column-major runs) of a filled ``box`` (x0, y0, x1, y1)."""
    pixels = np.zeros((height, width), dtype=np.uint8)
    x0, y0, x1, y1 = box
    pixels[y0:y1, x0:x1] = 1
    flat = pixels.flatten(order="F").tolist()
    runs, value, n = [], 0, 0
    for p in flat:
        if p != value:
            runs.append(n)
            value, n = p, 0
        n += 1
    runs.append(n)
    return {"size": [height, width], "counts": runs}


def _compressed(height, width, box):
    rle = pycocotools.frPyObjects(_rle(height, width, box), height, width)
    return {"size": rle["size"], "counts": rle["counts"].decode("ascii")}


# Image 100 is 40 x 30 (width x height), 101 is 20 x 50, 103 is 16 x 24.
MASKED = [
    # two polygons for one object, one of them reaching past the image's edge
    _ann(1, 100, 1, [2, 2, 30, 20], segmentation=[
        [2, 2, 12.5, 2, 12.5, 11.5, 2, 11.5], [20, 10, 41, 10, 30, 20.7]]),
    _ann(2, 100, 3, [0, 0, 40, 30], iscrowd=1, segmentation=_rle(30, 40, (5, 3, 17, 29))),
    _ann(3, 101, 18, [1, 1, 10, 30], iscrowd=1, segmentation=_compressed(50, 20, (1, 1, 11, 31))),
    _ann(4, 103, 1, [0, 0, 16, 24], segmentation=[[0.4, 0.6, 15.2, 3.3, 8.8, 23.9]]),
]


def _by_annotation(src):
    """pycocotools' own masks: annotation id -> ``COCO.annToMask``."""
    from pycocotools.coco import COCO

    api = COCO(src)
    return {a["id"]: api.annToMask(a) for a in api.dataset["annotations"]}


def _masks_of(src):
    """{image name: [mask pixels per box]} of the records a conversion would write."""
    from PIL import Image

    checked = check_table(src, IMAGE_CSV_SCHEMA)
    out = {}
    for row in checked.rows:
        parsed = example.parse(example.serialize(row.features))
        name = row.image_uri.replace("\\", "/").rsplit("/", 1)[-1]
        pngs = parsed.get(masks.MASK, (None, []))[1]
        images = [Image.open(io.BytesIO(p)) for p in pngs]
        assert all(i.format == "PNG" and i.mode == "L" for i in images)  # as Model Garden's
        out[name] = [np.asarray(i) for i in images]
    return checked, out


def test_masks_are_pycocotools_own_bit_for_bit(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _coco(MASKED))
    checked, found = _masks_of(src)
    assert checked.features[masks.MASK].dtype == example.BYTES
    judge = _by_annotation(src)
    # boxes in the order of their ids within an image, as the boxes are written
    expected = {"0.jpg": [judge[1], judge[2]], "1.jpg": [judge[3]], "2.jpg": [],
                "3.jpg": [judge[4]]}
    assert set(found) == set(expected)
    for name, wanted in expected.items():
        assert len(found[name]) == len(wanted), name
        for ours, theirs in zip(found[name], wanted):
            assert ours.dtype == theirs.dtype == np.uint8
            assert ours.shape == theirs.shape
            assert np.array_equal(ours, theirs), name
            assert set(np.unique(ours).tolist()) <= {0, 1}
    assert found["0.jpg"][0].sum() > 0 and found["1.jpg"][0].sum() == 300


def test_a_file_without_segmentations_holds_no_masks(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _coco([_ann(1, 100, 1, [1, 1, 5, 5])]))
    assert masks.MASK not in check_table(src, IMAGE_CSV_SCHEMA).features


def test_masks_not_of_their_image_are_reported_with_the_reason(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _coco(MASKED[:1] + [
        _ann(5, 100, 1, [0, 0, 5, 5], iscrowd=1, segmentation=_rle(31, 40, (0, 0, 5, 5))),
        _ann(6, 100, 1, [0, 0, 5, 5], segmentation=[[0, 0, 5, 5]]),  # 2 points: no polygon
        _ann(7, 101, 1, [0, 0, 5, 5]),  # none, where others have one
        _ann(8, 101, 1, [0, 0, 5, 5], iscrowd=1,
             segmentation={"size": [50, 20], "counts": [3, 4]}),  # runs short of 1000
    ]))
    counts, problems = Annotations(), Problems()
    (_, data, ids), = list(coco.read([(src, None)], None, problems, counts=counts))
    assert not problems
    assert counts.read == 5 and counts.written == 1
    assert counts.reported == {masks.OTHER_SIZE: 1, "malformed": 2, masks.NO_MASK: 1}
    assert counts.first[0] == (f"{src} annotation 5: mask of another size (RLE of 31 x 40 "
                               f"pixels (height x width) on an image of 30 x 40)")
    assert "annotations: 5 in, 1 written, 4 reported (2 malformed, 1 mask of another " \
           "size, 1 no segmentation)" == str(counts)
    assert [i for i in ids if "annotation" in i] == [f"{src} annotation 1"]


@pytest.mark.parametrize("segmentation, reason", [
    ([[1, 2, 3, 4, 5]], "malformed"),
    ([[1, 2, 3, 4, "x", 6]], "malformed"),
    ([], masks.NO_MASK),
    ({"size": [30, 40], "counts": [1200, -1]}, "malformed"),
    ({"size": [30], "counts": "abc"}, "malformed"),
    ({"size": [40, 30], "counts": [1200]}, masks.OTHER_SIZE),
    ("polygon", "malformed"),
])
def test_what_is_no_mask(segmentation, reason):
    assert masks.problem(segmentation, 30, 40)[0] == reason
    assert masks.problem([[0, 0, 4, 0, 4, 4]], 30, 40) is None
    assert masks.problem({"size": [30, 40], "counts": [1200]}, 30, 40) is None


def test_without_pycocotools_a_file_with_masks_names_the_extra(tmp_path, monkeypatch):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _coco(MASKED))
    monkeypatch.setitem(sys.modules, "pycocotools", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "pycocotools.mask", None)
    with pytest.raises(ModuleNotFoundError,
                       match=r"instances.json has instance masks .*tfrecorder-tables\[masks\]"):
        list(coco.read([(src, None)], None, Problems(), counts=Annotations()))
    plain = _write(tmp_path / "plain.json", _coco([_ann(1, 100, 1, [1, 1, 5, 5])]))
    assert list(coco.read([(plain, None)], None, Problems(), counts=Annotations()))


def test_the_segmentation_is_no_longer_an_unused_key(tmp_path):
    assert "annotations[].segmentation" not in coco.unused_keys(_coco(MASKED))
    assert json.loads(masks.column_value([[1, 2, 3, 4, 5, 6]], 3, 4)) == [
        3, 4, [[1, 2, 3, 4, 5, 6]]]


def _chunks(png):
    """(kind, data) of each chunk of a PNG file after its signature."""
    import struct

    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    out, pos = [], 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        out.append((png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return out


def test_a_mask_png_is_grey_8_bit_with_unfiltered_rows():
    # Masks are mostly long runs of one value: no row filter helps them, and zlib's
    # run-length strategy is fast on them, so every row is stored as it is (filter 0).
    import struct
    import zlib

    value = masks.column_value([[10, 8, 50, 8, 50, 40, 10, 40], [2, 2, 6, 2, 4, 6]], 48, 64)
    png = masks.png(value)
    chunks = _chunks(png)
    assert [kind for kind, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    assert (width, height, depth, colour) == (64, 48, 8, 0)
    rows = np.frombuffer(zlib.decompress(chunks[1][1]), dtype=np.uint8).reshape(48, 65)
    assert (rows[:, 0] == 0).all()
    from pycocotools import mask as coco_mask

    judge = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(
        [[10, 8, 50, 8, 50, 40, 10, 40], [2, 2, 6, 2, 4, 6]], 48, 64)))
    assert np.array_equal(rows[:, 1:], judge) and judge.sum() > 1000
