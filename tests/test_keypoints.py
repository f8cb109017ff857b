"""COCO keypoints: ``[x, y, v]`` per keypoint made relative like the boxes, v and
``num_keypoints`` as COCO gives them, the categories' keypoint names and skeleton in
the manifest; keypoints that are not their category's are reported."""

import pytest

import tfrecorder
from tfrecorder._errors import Problems
from tfrecorder._inputs import coco, keypoints
from tfrecorder._inputs.annotations import Annotations
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA
from tfrecorder._folder import example
from tfrecorder.access import Reader
from tests.conftest import check_table
from tests.test_coco import _ann, _coco, _images, _write

NAMES = ["nose", "left_eye", "right_eye"]
SKELETON = [[1, 2], [1, 3]]


def _posed(annotations):
    content = _coco(annotations)
    content["categories"][0].update(keypoints=NAMES, skeleton=SKELETON)  # person
    return content


# Image 100 is 40 x 30 (width x height), 101 is 20 x 50.
POSED = [
    _ann(1, 100, 1, [2, 2, 30, 20], keypoints=[10, 6, 2, 0, 0, 0, 20, 15, 1],
         num_keypoints=2),
    _ann(2, 100, 3, [0, 0, 10, 10]),  # a car: no keypoints
    _ann(3, 101, 1, [1, 1, 10, 30]),  # a person without them: all unlabelled
]


def test_keypoints_are_relative_with_cocos_visibility(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _posed(POSED))
    checked = check_table(src, IMAGE_CSV_SCHEMA)
    assert checked.features[keypoints.KEYPOINTS].dtype == example.FLOAT
    found = {}
    for row in checked.rows:
        parsed = example.parse(example.serialize(row.features))
        found[row.image_uri.rsplit("/", 1)[-1]] = (
            parsed[keypoints.KEYPOINTS][1], parsed[keypoints.NUM_KEYPOINTS][1])
    points, counts = found["0.jpg"]  # the person's 3 triples, then the car's none
    assert points == pytest.approx([10 / 40, 6 / 30, 2, 0, 0, 0, 20 / 40, 15 / 30, 1])
    assert counts == [2, 0]
    assert found["1.jpg"] == ([0.0] * 9, [0])
    assert found["2.jpg"] == ([], [])


@pytest.mark.slow
def test_the_manifest_names_each_categorys_keypoints_and_skeleton(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _posed(POSED))
    tfrecorder.convert({"train": src}, str(tmp_path / "out"))
    manifest = tfrecorder.info(str(tmp_path / "out"))
    assert manifest.keypoints == {"person": {"keypoints": NAMES, "skeleton": SKELETON}}
    reader = Reader(str(tmp_path / "out"), "train")
    by_name = {reader.features(i)["image_name"].decode(): reader.features(i)
               for i in range(len(reader))}
    assert by_name["0.jpg"]["objects/num_keypoints"].tolist() == [2, 0]
    assert by_name["0.jpg"]["objects/keypoints"].tolist() == pytest.approx(
        [0.25, 0.2, 2, 0, 0, 0, 0.5, 0.5, 1])


def test_a_conversion_without_keypoints_has_none_in_its_manifest(tmp_path):
    from tfrecorder._folder.manifest import Manifest

    assert "keypoints" not in Manifest("x", None, {}, {}, {}, 0, 0, 0).to_json()


def test_keypoints_not_of_their_category_are_reported(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _posed(POSED[:1] + [
        _ann(4, 100, 1, [0, 0, 5, 5], keypoints=[1, 1, 2]),  # 1 of 3
        _ann(5, 100, 1, [0, 0, 5, 5], keypoints=[1, 1, 3, 0, 0, 0, 0, 0, 0]),  # v 3
        _ann(6, 100, 3, [0, 0, 5, 5], keypoints=[1, 1, 2]),  # a car has none
    ]))
    counts, problems = Annotations(), Problems()
    list(coco.read([(src, None)], None, problems, counts=counts))
    assert not problems
    assert counts.reported == {"malformed": 3} and counts.written == 1
    assert counts.first[0].startswith(f"{src} annotation 4: malformed (keypoints [1, 1, 2] "
                                      f"are not x, y, v for each of the category's 3")
    assert "v is not 0, 1 or 2" in counts.first[1]
