"""Ultralytics YOLO datasets: data.yaml's splits and names, labels mirrored from images/
to labels/, background images kept, polygon rows as masks that pycocotools would draw,
pose rows as keypoints, and every row that cannot be written reported with its reason."""

import os

import pytest

import tfrecorder
from tfrecorder._errors import ConfigError, Problems, SchemaError
from tfrecorder._inputs import annotations, keypoints, masks, yolo
from tfrecorder._inputs.annotations import Annotations
from tfrecorder.access import Reader
from tests.conftest import encode

LABELS = {
    "0": ["0 0.5 0.5 0.2 0.4",                      # a box
          "1 0.2 0.25 0.2 0.3",                     # a box
          "7 0.5 0.5 0.1 0.1",                      # class id 7: no such name
          "0 0.5 0.5 0 0.1",                        # zero area
          "0 0.95 0.5 0.2 0.2",                     # ends at 1.05: outside
          "0 0.66667 0.5 0.66667 0.5",               # ends at 1.000005: rounding, cut
          "x y"],                                   # not numbers
    "1": [],                                        # an empty label file: background
    # "2" has no label file: background
}


def _dataset(root, names="{0: cat, 1: dog}", extra=""):
    for split, stems in (("train", ["0", "1", "2"]), ("val", ["v"])):
        os.makedirs(root / "images" / split, exist_ok=True)
        os.makedirs(root / "labels" / split, exist_ok=True)
        for i, stem in enumerate(stems):
            (root / "images" / split / f"{stem}.jpg").write_bytes(encode(seed=i, size=(40, 30)))
    for stem, rows in LABELS.items():
        (root / "labels" / "train" / f"{stem}.txt").write_text("".join(r + "\n" for r in rows))
    (root / "labels" / "val" / "v.txt").write_text("1 0.25 0.75 0.5 0.5\n")
    (root / "data.yaml").write_text(f"path: {root}\ntrain: images/train\nval: images/val\n"
                                    f"names: {names}\n{extra}")
    return root


def _read(path):
    problems, counts = Problems(), Annotations()
    tables = list(yolo.read(str(path), None, problems, counts))
    problems.raise_if_any()
    (kind, data, ids), = tables
    assert kind == "detection"
    return data, ids, counts


def test_every_row_is_written_or_reported_with_its_reason(tmp_path):
    data, ids, counts = _read(_dataset(tmp_path) / "data.yaml")
    boxes = [(os.path.basename(u), label, x0, y0, x1, y1) for u, label, x0, y0, x1, y1 in zip(
        data["image_uri"], data["label"], data["x_min"], data["y_min"], data["x_max"],
        data["y_max"])]
    assert boxes[0] == ("0.jpg", "cat", pytest.approx(0.4), pytest.approx(0.3),
                        pytest.approx(0.6), pytest.approx(0.7))
    assert boxes[1] == ("0.jpg", "dog", pytest.approx(0.1), pytest.approx(0.1),
                        pytest.approx(0.3), pytest.approx(0.4))
    assert boxes[2][:2] == ("0.jpg", "cat") and boxes[2][4] == 1.0   # cut at the edge
    assert boxes[3:] == [("1.jpg", None, None, None, None, None),
                         ("2.jpg", None, None, None, None, None),
                         ("v.jpg", "dog", 0.0, 0.5, 0.5, 1.0)]
    assert data["split"] == ["train"] * 5 + ["validation"]
    label_file = str(tmp_path / "labels" / "train" / "0.txt")
    assert ids[:3] == [f"{label_file}:1", f"{label_file}:2", f"{label_file}:6"]
    assert counts.read == 8 and counts.written == 4
    assert counts.reported == {annotations.UNKNOWN_CLASS: 1, annotations.ZERO_AREA: 1,
                               annotations.OUTSIDE: 1, annotations.MALFORMED: 1}
    assert counts.first[0].startswith(f"{label_file}:3: unknown class (class id 7")
    assert str(counts) == ("annotations: 8 in, 4 written, 4 reported (1 malformed, "
                           "1 outside the image, 1 unknown class, 1 zero area)")
    assert counts.shapes == set()   # neither polygons nor kpt_shape: boxes alone


def test_names_as_a_list_and_splits_as_lists_of_images(tmp_path):
    _dataset(tmp_path, names="[cat, dog]")
    (tmp_path / "train.txt").write_text("./images/train/0.jpg\n\n./images/train/2.jpg\n")
    (tmp_path / "data.yaml").write_text("train: [train.txt]\ntest: images/val\n"
                                        "names: [cat, dog]\nnc: 2\n")
    data, _, _ = _read(tmp_path / "data.yaml")
    assert [os.path.basename(u) for u in data["image_uri"]] == ["0.jpg", "0.jpg", "0.jpg",
                                                                "2.jpg", "v.jpg"]
    assert data["split"] == ["train"] * 4 + ["test"]


def test_pose_rows_are_boxes_and_keypoints(tmp_path):
    _dataset(tmp_path, extra="kpt_shape: [2, 3]\nkpt_names: {0: [nose, tail]}\n")
    (tmp_path / "labels" / "train" / "0.txt").write_text(
        "0 0.5 0.5 0.2 0.4 0.45 0.4 2 0.55 0.6 1\n"
        "0 0.5 0.5 0.2 0.4 0.45 0.4 2\n"          # 8 fields: neither form
        "0 0.5 0.5 0.2 0.4 0.45 0.4 3 0 0 0\n"    # visibility 3
        "1 0.5 0.5 0.2 0.2\n")                     # a box row: keypoints unlabelled
    data, _, counts = _read(tmp_path / "data.yaml")
    assert data["x_min"][0] == pytest.approx(0.4) and data["y_max"][0] == pytest.approx(0.7)
    assert keypoints.values(data["keypoints"][0]) == (2, [0.45, 0.4, 2, 0.55, 0.6, 1])
    assert keypoints.values(data["keypoints"][1]) == (0, [0.0, 0.0, 0, 0.0, 0.0, 0])
    assert counts.reported == {annotations.MALFORMED: 2}
    assert "visibility 3 is not 0, 1 or 2" in "".join(counts.first)
    assert counts.shapes == {"keypoints"} and data["mask"][0] is None
    assert counts.keypoints == {"cat": {"keypoints": ["nose", "tail"], "skeleton": []},
                                "dog": {"keypoints": ["0", "1"], "skeleton": []}}


def test_pose_rows_without_visibility_are_labelled_but_at_zero(tmp_path):
    _dataset(tmp_path, extra="kpt_shape: [2, 2]\n")
    (tmp_path / "labels" / "train" / "0.txt").write_text("0 0.5 0.5 0.2 0.4 0.45 0.4 0 0\n")
    data, _, _ = _read(tmp_path / "data.yaml")
    assert keypoints.values(data["keypoints"][0]) == (1, [0.45, 0.4, 2, 0.0, 0.0, 0])


def _pycocotools_mask(polygon, width, height):
    """pycocotools' mask of a relative polygon on a ``width`` x ``height`` image, as
    COCO's ``annToMask`` draws the same polygon given in pixels."""
    import numpy as np
    from pycocotools import mask as coco_mask

    pixels = [v * (width if i % 2 == 0 else height) for i, v in enumerate(polygon)]
    rle = coco_mask.merge(coco_mask.frPyObjects([pixels], height, width))
    return np.asarray(coco_mask.decode(rle))


def _png_pixels(data):
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)))


POLYGON = [0.1, 0.1, 0.6, 0.2, 0.4, 0.9, 0.15, 0.6]


def test_polygon_rows_are_masks_drawn_as_pycocotools_draws_them(tmp_path):
    pytest.importorskip("pycocotools")
    _dataset(tmp_path)
    (tmp_path / "labels" / "train" / "0.txt").write_text(
        "1 " + " ".join(f"{v:.6f}" for v in POLYGON) + "\n"
        "0 0.5 0.5 0.2 0.4\n")                     # a box among polygons: no mask
    (tmp_path / "labels" / "train" / "1.txt").write_text("0 0.1 0.1 0.3 0.1 0.2 0.4\n")
    data, _, counts = _read(tmp_path / "data.yaml")
    assert counts.shapes == {"mask"}
    assert counts.reported == {masks.NO_MASK: 2}   # and val's box row
    assert "a box row, where other rows of the dataset are polygons" in counts.first[0]
    assert [os.path.basename(u) for u in data["image_uri"]] == ["0.jpg", "1.jpg", "2.jpg",
                                                                "v.jpg"]
    assert (data["x_min"][0], data["y_max"][0]) == (pytest.approx(0.1), pytest.approx(0.9))
    mask = _png_pixels(masks.png(data["mask"][0]))
    assert mask.shape == (30, 40) and mask.sum() > 100   # the image's 40 x 30 pixels
    assert (mask == _pycocotools_mask(POLYGON, 40, 30)).all()
    assert data["mask"][2] is None and data["label"][2] is None   # background: no box


def test_a_polygon_row_on_an_unreadable_image_is_reported(tmp_path):
    pytest.importorskip("pycocotools")
    _dataset(tmp_path)
    (tmp_path / "images" / "train" / "0.jpg").write_bytes(b"not an image")
    (tmp_path / "labels" / "train" / "0.txt").write_text("0 0.1 0.1 0.3 0.1 0.2 0.4\n")
    data, _, counts = _read(tmp_path / "data.yaml")
    assert counts.reported == {yolo.UNREADABLE: 1, masks.NO_MASK: 1}   # val's box row
    assert counts.written == 0
    assert data["label"][0] is None   # the image is a row still: the writer says why not


def test_label_files_mirror_the_last_images_folder():
    assert yolo.label_path("/d/images/a/images/train/x.y.jpg") == "/d/images/a/labels/train/x.y.txt"
    assert yolo.label_path("gs://b/images/1.png") == "gs://b/labels/1.txt"
    assert yolo.label_path("/d/train/1.png") == "/d/train/1.txt"


def test_a_yaml_without_names_or_a_wrong_nc_is_a_schema_error(tmp_path):
    _dataset(tmp_path)
    (tmp_path / "data.yaml").write_text("train: images/train\n")
    with pytest.raises(SchemaError, match="no 'names'"):
        _read(tmp_path / "data.yaml")
    (tmp_path / "data.yaml").write_text("names: [a, b]\n")
    with pytest.raises(SchemaError, match="no train, val or test"):
        _read(tmp_path / "data.yaml")
    (tmp_path / "data.yaml").write_text("train: images/train\nnames: [a, b]\nnc: 3\n")
    with pytest.raises(SchemaError, match=r"column 'nc': value 3: not the number of names \(2\)"):
        _read(tmp_path / "data.yaml")
    (tmp_path / "data.yaml").write_text("train: images/nothere\nnames: [a]\n")
    with pytest.raises(SchemaError, match="images/nothere is neither a folder"):
        _read(tmp_path / "data.yaml")


def test_images_dir_is_refused(tmp_path):
    _dataset(tmp_path)
    with pytest.raises(ConfigError, match="its data.yaml says; leave images_dir out"):
        tfrecorder.convert(str(tmp_path), str(tmp_path / "out"), images_dir=str(tmp_path))


@pytest.mark.slow
def test_convert_writes_a_record_per_image(tmp_path):
    root = _dataset(tmp_path / "ds")
    result = tfrecorder.convert(str(root), str(tmp_path / "out"))
    lines = str(result).splitlines()
    where = lines.index("  annotations: 8 in, 4 written, 4 reported (1 malformed, 1 outside "
                        "the image, 1 unknown class, 1 zero area)")
    label_file = root / "labels" / "train" / "0.txt"
    assert lines[where + 1] == (f"    {label_file}:3: unknown class (class id 7 is not one "
                                f"of data.yaml's names)")
    assert result.annotations.written == 4
    assert "annotations: 8 in, 4 written" in result._repr_html_()
    reader = Reader(str(tmp_path / "out"), "train")
    names = reader.manifest.vocabularies["objects/label"]
    found = {}
    for i in range(len(reader)):
        f = reader.features(i)
        found[f["image_name"].decode()] = [names[k] for k in f["objects/label"]]
    assert found == {"0.jpg": ["cat", "dog", "cat"], "1.jpg": [], "2.jpg": []}


def _converted_boxes(out):
    """{image name: [(label, [xmin, ymin, xmax, ymax] relative)]} of every record."""
    import numpy as np

    found = {}
    for split in tfrecorder.info(str(out)).splits:
        reader = Reader(str(out), split)
        names = reader.manifest.vocabularies["objects/label"]
        for i in range(len(reader)):
            f = reader.features(i)
            boxes = np.reshape(f["objects/bbox"], (-1, 4))
            found[f["image_name"].decode()] = [
                (names[k], [b[1], b[0], b[3], b[2]]) for k, b in zip(f["objects/label"], boxes)]
    return found


def _as_yolo(dataset, root):
    """``dataset`` (supervision's) written by supervision as a YOLO folder at ``root``,
    its images as the train split."""
    dataset.as_yolo(images_directory_path=str(root / "images" / "train"),
                    annotations_directory_path=str(root / "labels" / "train"),
                    data_yaml_path=str(root / "data.yaml"))
    # supervision writes nc and names; Ultralytics (and we) need the splits too
    with open(root / "data.yaml", "a") as f:
        f.write("train: images/train\n")
    return root


@pytest.mark.slow
def test_a_dataset_written_by_supervision(tmp_path):
    from tests.conftest import supervision_dataset

    dataset, given, (w, h) = supervision_dataset(tmp_path / "source")
    root = _as_yolo(dataset, tmp_path / "yolo")
    result = tfrecorder.convert(str(root), str(tmp_path / "out"))
    found = _converted_boxes(tmp_path / "out")
    assert sorted(found) == sorted(given)
    for name, boxes in given.items():
        assert [label for label, _ in found[name]] == [label for label, _ in boxes]
        for (_, got), (_, (x0, y0, x1, y1)) in zip(found[name], boxes):
            # written with 5 decimals: each corner within their rounding
            assert got == pytest.approx([x0 / w, y0 / h, x1 / w, y1 / h], abs=1e-5)
    assert result.rows_in == 4


@pytest.mark.slow
def test_polygons_written_by_supervision_are_the_masks_pycocotools_draws(tmp_path):
    pytest.importorskip("pycocotools")
    import numpy as np
    import supervision as sv

    from tests.conftest import supervision_dataset

    dataset, _, (w, h) = supervision_dataset(tmp_path / "source")
    first = dataset.image_paths[0]
    boxes = dataset.annotations[first]
    drawn = np.zeros((len(boxes), h, w), dtype=bool)
    drawn[0, 4:20, 6:30] = True                     # a rectangle
    drawn[1, 2:28, 2:12] = True                     # an L
    drawn[1, 20:28, 2:36] = True
    drawn[2, 5:25, 8:12] = True
    dataset.annotations[first] = sv.Detections(xyxy=boxes.xyxy, mask=drawn,
                                               class_id=boxes.class_id)
    root = _as_yolo(dataset, tmp_path / "yolo")
    rows = (root / "labels" / "train" / "0.txt").read_text().splitlines()
    polygons = [[float(v) for v in row.split()[1:]] for row in rows]
    assert all(len(p) > 4 for p in polygons)        # supervision wrote polygons
    result = tfrecorder.convert(str(root), str(tmp_path / "out"))
    assert result.annotations.written == 3 and not result.annotations.reported
    reader = Reader(str(tmp_path / "out"), "train")
    by_name = {reader.features(i)["image_name"].decode(): reader.features(i)
               for i in range(len(reader))}
    stored = by_name["0.jpg"]["objects/mask"]
    assert len(stored) == 3 and list(by_name["1.jpg"]["objects/mask"]) == []
    for png, polygon in zip(stored, polygons):
        assert (_png_pixels(png) == _pycocotools_mask(polygon, w, h)).all()


def test_shorter_side_with_masks_is_refused(tmp_path):
    pytest.importorskip("pycocotools")
    root = _dataset(tmp_path / "ds")
    (root / "labels" / "train" / "0.txt").write_text("0 0.1 0.1 0.3 0.1 0.2 0.4\n")
    with pytest.raises(ConfigError, match=r"shorter_side=16 resizes the images, but the "
                                          r"source's masks \(objects/mask\)"):
        tfrecorder.convert(str(root), str(tmp_path / "out"), shorter_side=16)
    assert not os.path.exists(tmp_path / "out" / "manifest.json")
