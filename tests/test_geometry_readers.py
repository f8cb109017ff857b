"""Masks and keypoints read back by every reader: ``read()``, ``access.values`` and
``tfrecorder.torch`` as plain values (a bytes list of PNGs per record for masks),
``load()`` as tensors."""

import io

import numpy as np
import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._inputs import keypoints, masks
from tests.test_coco import _images, _write
from tests.test_keypoints import NAMES, POSED, SKELETON, _posed
from tests.test_masks import MASKED, _by_annotation

pytest.importorskip("pycocotools")

# Masks and keypoints in one file: the posed annotations given the masked ones' masks.
BOTH = [dict(p, segmentation=m["segmentation"]) for p, m in zip(POSED, MASKED)]


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("geometry")
    _images(folder)
    src = _write(folder / "instances.json", _posed(BOTH))
    tfrecorder.convert({"train": src}, str(folder / "out"))
    return str(folder / "out"), _by_annotation(src)


@pytest.mark.slow
def test_access_values_give_masks_as_bytes_and_keypoints_as_floats(converted):
    out, judge = converted
    reader = access.Reader(out, "train")
    assert reader.manifest.keypoints == {"person": {"keypoints": NAMES, "skeleton": SKELETON}}
    by_name = {}
    for i in range(len(reader)):
        record = reader.features(i)
        by_name[record["image_name"].decode()] = record
    first = by_name["0.jpg"]
    assert [type(p) for p in first[masks.MASK]] == [bytes, bytes]
    for png, a in zip(first[masks.MASK], (1, 2)):
        assert np.array_equal(_pixels(png), judge[a])
    assert first[keypoints.KEYPOINTS].dtype == np.float32
    assert first[keypoints.NUM_KEYPOINTS].tolist() == [2, 0]
    assert len(by_name["2.jpg"][masks.MASK]) == 0


@pytest.mark.slow
def test_read_gives_a_list_of_pngs_and_of_keypoints_per_record(converted):
    out, judge = converted
    table = tfrecorder.read(out).set_index("image_uri")
    row = table.loc[[u for u in table.index if u.endswith("0.jpg")][0]]
    assert [np.array_equal(_pixels(p), judge[a]) for p, a in zip(row[masks.MASK], (1, 2))] \
        == [True, True]
    assert list(row[keypoints.KEYPOINTS]) == pytest.approx(
        [0.25, 0.2, 2, 0, 0, 0, 0.5, 0.5, 1])


@pytest.mark.slow
def test_torch_gives_the_record_masks_as_bytes(converted):
    pytest.importorskip("torch")
    import tfrecorder.torch as tt

    out, judge = converted
    ds = tt.Dataset(out, "train", target_format="dict")  # the record's plain values
    items = [ds[i] for i in range(len(ds))]
    found = [x for x in items if len(x[masks.MASK]) == 2]
    assert len(found) == 1
    assert np.array_equal(_pixels(found[0][masks.MASK][1]), judge[2])
    assert list(found[0][keypoints.NUM_KEYPOINTS]) == [2, 0]


@pytest.mark.slow
def test_load_gives_masks_and_keypoints_as_tensors(converted):
    tf = pytest.importorskip("tensorflow")

    out, judge = converted
    records = list(tfrecorder.load(out, "train"))
    first = [r for r in records if r["image_name"].numpy() == b"0.jpg"][0]
    pngs = first[masks.MASK]
    assert isinstance(pngs, tf.Tensor) and pngs.dtype == tf.string
    decoded = tf.io.decode_png(pngs[0]).numpy()[..., 0]
    assert np.array_equal(decoded, judge[1])
    assert first[keypoints.KEYPOINTS].dtype == tf.float32
    assert first[keypoints.NUM_KEYPOINTS].numpy().tolist() == [2, 0]
