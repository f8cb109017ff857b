"""Pascal VOC folders: the devkit layout with its split lists and the flat one tools
export, 1-based pixel boxes made relative, difficult and truncated kept per box, a
missing size read from the image, and every object that cannot be a box reported."""

import os

import pytest

import tfrecorder
from tfrecorder._errors import Problems
from tfrecorder._inputs import annotations, voc
from tfrecorder._inputs.annotations import Annotations
from tfrecorder.access import Reader
from tests.conftest import encode


def _xml(filename, objects, size=(40, 30)):
    size_xml = "" if size is None else (
        f"<size><width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>")
    body = "".join(
        f"<object><name>{name}</name><truncated>{t}</truncated><difficult>{d}</difficult>"
        f"<bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax>"
        f"<ymax>{b[3]}</ymax></bndbox></object>" for name, b, d, t in objects)
    return (f"<annotation><folder>VOC2007</folder><filename>{filename}</filename>{size_xml}"
            f"{body}</annotation>")


def _devkit(root):
    os.makedirs(root / "Annotations")
    os.makedirs(root / "JPEGImages")
    os.makedirs(root / "ImageSets" / "Main")
    for i in range(4):
        (root / "JPEGImages" / f"00000{i}.jpg").write_bytes(encode(seed=i, size=(40, 30)))
    files = {
        "000000": _xml("000000.jpg", [("dog", (1, 1, 40, 30), 0, 1),     # the whole image
                                      ("cat", (11, 6, 20, 15), 1, 0),
                                      ("cat", (5, 5, 45, 10), 0, 0),      # past the right edge
                                      ("cat", (5, 5, 3, 10), 0, 0),       # xmax before xmin
                                      ("cat", ("a", 1, 2, 3), 0, 0)]),    # not a number
        "000001": _xml("000001.jpg", []),                                 # no objects
        "000002": _xml("000002.jpg", [("dog", (0, 0, 41, 20), 0, 0)], size=(0, 0)),
        "000003": _xml("000003.jpg", [("cat", (2, 4, 21, 15), 0, 0)], size=None),
    }
    for stem, text in files.items():
        (root / "Annotations" / f"{stem}.xml").write_text(text)
    (root / "ImageSets" / "Main" / "train.txt").write_text("000000\n000001\n")
    (root / "ImageSets" / "Main" / "val.txt").write_text("000002\n")
    return root


def _read(root):
    problems, counts, notes = Problems(), Annotations(), []
    (kind, data, ids), = list(voc.read(voc.find(str(root)), None, problems, counts, notes))
    problems.raise_if_any()
    return data, ids, counts, notes


def test_devkit_boxes_flags_splits_and_reasons(tmp_path):
    data, ids, counts, notes = _read(_devkit(tmp_path))
    rows = list(zip(*(data[c] for c in voc.COLUMNS)))
    name = lambda r: os.path.basename(r[1])  # noqa: E731
    assert [(r[0], name(r), r[2], *r[3:]) for r in rows] == [
        ("train", "000000.jpg", "dog", 0.0, 0.0, 1.0, 1.0, 0, 1),
        ("train", "000000.jpg", "cat", 10 / 40, 5 / 30, 20 / 40, 15 / 30, 1, 0),
        ("train", "000001.jpg", None, None, None, None, None, None, None),
        # size 0: read from the image; one pixel past an edge is cut at it
        ("validation", "000002.jpg", "dog", 0.0, 0.0, 1.0, 20 / 30, 0, 0),
        # no size; in no split list: unassigned
        (None, "000003.jpg", "cat", 1 / 40, 3 / 30, 21 / 40, 15 / 30, 0, 0),
    ]
    xml = str(tmp_path / "Annotations" / "000000.xml")
    assert ids[:2] == [f"{xml} object 1", f"{xml} object 2"]
    assert counts.read == 7 and counts.written == 4
    assert counts.reported == {annotations.OUTSIDE: 1, annotations.ZERO_AREA: 1,
                               annotations.MALFORMED: 1}
    assert counts.first[0] == (f"{xml} object 3: outside the image ([5.0, 5.0, 45.0, 10.0] "
                               f"in an image of 40 x 30 pixels)")
    assert notes == [f"1 image(s) of {tmp_path / 'Annotations'} are in no ImageSets/Main "
                     f"list (train, val, test): split by a hash of the image"]


def test_flat_layout_and_other_folders(tmp_path):
    os.makedirs(tmp_path / "annotations")
    os.makedirs(tmp_path / "images")
    (tmp_path / "images" / "a.png").write_bytes(encode(fmt="PNG", size=(20, 10)))
    (tmp_path / "annotations" / "a.xml").write_text(
        _xml("a.png", [("x", (1.5, 1, 10.5, 10), 0, 0)], size=(20, 10)))
    data, _, counts, notes = _read(tmp_path)
    assert data["image_uri"] == [str(tmp_path / "images" / "a.png")]
    assert (data["x_min"], data["x_max"], data["split"]) == ([0.5 / 20], [10.5 / 20], [None])
    assert str(counts) == "annotations: 1 in, 1 written, 0 reported" and notes == []
    assert voc.find(str(tmp_path / "images")) is None


@pytest.mark.slow
def test_convert_keeps_difficult_and_truncated(tmp_path):
    root = _devkit(tmp_path / "VOC2007")
    tfrecorder.convert(str(root), str(tmp_path / "out"))
    reader = Reader(str(tmp_path / "out"), "train")
    found = {}
    for i in range(len(reader)):
        f = reader.features(i)
        found[f["image_name"].decode()] = (list(f["objects/is_difficult"]),
                                           list(f["objects/is_truncated"]))
    assert found["000000.jpg"] == ([0, 1], [1, 0]) and found["000001.jpg"] == ([], [])


@pytest.mark.slow
def test_a_dataset_written_by_supervision(tmp_path):
    from tests.conftest import supervision_dataset
    from tests.test_yolo import _converted_boxes

    dataset, given, (w, h) = supervision_dataset(tmp_path / "source")
    root = tmp_path / "voc"
    dataset.as_pascal_voc(images_directory_path=str(root / "images"),
                          annotations_directory_path=str(root / "annotations"))
    tfrecorder.convert(str(root), str(tmp_path / "out"))
    found = _converted_boxes(tmp_path / "out")
    assert sorted(found) == sorted(given)
    for name, boxes in given.items():
        # whole pixels, written 1-based as the devkit's: back exactly
        assert found[name] == [(label, pytest.approx([x0 / w, y0 / h, x1 / w, y1 / h],
                                                     abs=1e-6))
                               for label, (x0, y0, x1, y1) in boxes]
