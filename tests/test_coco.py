"""COCO object-detection files, as the COCO tools write them: boxes in pixels made
relative, categories as labels, iscrowd kept per box, images without annotations kept,
one file per split, and every problem an annotation can have."""

import json
import os

import pytest

import tfrecorder
from tfrecorder._folder import example
from tfrecorder._inputs import spill, splits
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA
from tfrecorder.access import Reader
from tests.conftest import check_table, encode

SIZES = [(40, 30), (20, 50), (32, 32), (16, 24)]  # width, height of each image


def _images(folder, prefix=""):
    os.makedirs(folder, exist_ok=True)
    for i, size in enumerate(SIZES):
        with open(os.path.join(str(folder), f"{prefix}{i}.jpg"), "wb") as f:
            f.write(encode(seed=i, size=size))


def _coco(annotations, prefix="", **extra):
    """A COCO instances file's content: SIZES' images, three categories."""
    return {
        "info": {"description": "test"}, "licenses": [{"id": 1, "name": "x"}],
        "images": [{"id": 100 + i, "file_name": f"{prefix}{i}.jpg", "width": w, "height": h,
                    "license": 1, "coco_url": "http://x"} for i, (w, h) in enumerate(SIZES)],
        "categories": [{"id": 1, "name": "person", "supercategory": "person"},
                       {"id": 3, "name": "car", "supercategory": "vehicle"},
                       {"id": 18, "name": "dog", "supercategory": "animal"}],
        "annotations": annotations, **extra}


def _ann(id, image, category, bbox, iscrowd=0, **extra):
    """An annotation; a segmentation or keypoints only where given (``extra``)."""
    return {"id": id, "image_id": image, "category_id": category, "bbox": bbox,
            "iscrowd": iscrowd, "area": 1.0, **extra}


ANNOTATIONS = [
    _ann(7, 100, 3, [4, 3, 20, 15]),
    _ann(2, 100, 1, [0, 0, 40, 30], iscrowd=1),   # the whole image; lower id comes first
    _ann(9, 101, 18, [5.5, 10, 10, 25.25]),
    _ann(11, 103, 1, [0, 12, 16, 12]),
    # image 102 has no annotation
]


def _write(path, content):
    with open(path, "w") as f:
        json.dump(content, f)
    return str(path)


def _records(out):
    """{split: {image_name: features without the image bytes}} of a conversion."""
    found = {}
    for split in tfrecorder.info(str(out)).splits:
        reader = Reader(str(out), split)
        for i in range(len(reader)):
            features = reader.features(i)
            features.pop("image")
            found.setdefault(split, {})[features.pop("image_name").decode()] = features
    return found


def _expected(annotations, categories):
    """Per image file, its (label, [ymin, xmin, ymax, xmax], iscrowd), from the pixels."""
    files = {100 + i: (f"{i}.jpg", size) for i, size in enumerate(SIZES)}
    out = {name: [] for name, _ in files.values()}
    for a in sorted(annotations, key=lambda a: a["id"]):
        name, (w, h) = files[a["image_id"]]
        x, y, bw, bh = a["bbox"]
        out[name].append((categories[a["category_id"]], [y / h, x / w, (y + bh) / h, (x + bw) / w],
                          a["iscrowd"]))
    return out


def _problems(source, **kw):
    with pytest.raises(tfrecorder.SchemaError) as e:
        spill.read(source, IMAGE_CSV_SCHEMA, **kw)
    return {(p.row, p.column): p for p in e.value.problems}


def _checked(source, **kw):
    """``(rows, notes)`` of ``source`` read as a conversion reads it."""
    spilled = spill.read(source, IMAGE_CSV_SCHEMA, **kw)
    try:
        return [r for split in spilled.counts for r in spilled.rows(split)], spilled.notes
    finally:
        spilled.remove()


# --- round trips -----------------------------------------------------------------------

@pytest.mark.slow
def test_boxes_labels_and_crowd_flags_round_trip(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances_train.json", _coco(ANNOTATIONS))
    result = tfrecorder.convert({"train": src}, str(tmp_path / "out"))
    assert result.rows_in == 5 and result.rows_written == 5  # 4 boxes, 1 image without
    assert result.rows_per_split == {"train": 4}
    # the summary names what it counts: rows of the table, records, images
    text = str(result).splitlines()
    assert text[0].endswith("as 4 records (object detection: one record per image, with "
                            "the boxes of all its rows)")
    assert text[1].split() == ["train", "4", "images", "in", "1", "shard(s)"]
    assert "train: 4 records (5 rows)" in str(result.report)
    assert "<th>images</th>" in result._repr_html_()
    assert "  annotations: 4 in, 4 written, 0 reported" in text
    manifest = tfrecorder.info(str(tmp_path / "out"))
    names = manifest.vocabularies["objects/label"]
    assert names == ["car", "dog", "person"]  # sorted names, as for AutoML CSVs
    expected = _expected(ANNOTATIONS, {1: "person", 3: "car", 18: "dog"})
    found = _records(tmp_path / "out")["train"]
    assert set(found) == set(expected)
    for name, boxes in expected.items():
        record = found[name]
        assert [names[i] for i in record["objects/label"]] == [b[0] for b in boxes], name
        assert record["objects/bbox"].ravel().tolist() == pytest.approx(
            [c for b in boxes for c in b[1]]), name
        assert record["objects/is_crowd"].tolist() == [b[2] for b in boxes], name
        assert (record["image_width"], record["image_height"]) == SIZES[int(name[0])]
    assert found["2.jpg"]["objects/bbox"].shape == (0, 4)  # kept, with no boxes


@pytest.mark.slow
def test_each_record_keeps_its_images_coco_id(tmp_path):
    _images(tmp_path)
    content = _coco([*ANNOTATIONS[:3], {**ANNOTATIONS[3], "image_id": "x103"}])
    content["images"][3]["id"] = "x103"  # not a whole number: -1
    src = _write(tmp_path / "instances_train.json", content)
    tfrecorder.convert({"train": src}, str(tmp_path / "out"))
    found = _records(tmp_path / "out")["train"]
    assert {name: r["image_id"] for name, r in found.items()} == {
        "0.jpg": 100, "1.jpg": 101, "2.jpg": 102, "3.jpg": -1}
    assert tfrecorder.info(str(tmp_path / "out")).features["image_id"].shape == []


@pytest.mark.slow
def test_one_file_per_split_with_a_folder_per_split(tmp_path):
    _images(tmp_path / "train2017", "t")
    _images(tmp_path / "val2017", "v")
    (tmp_path / "annotations").mkdir()
    train = _write(tmp_path / "annotations" / "instances_train.json",
                   _coco(ANNOTATIONS, prefix="t"))
    val = _write(tmp_path / "annotations" / "instances_val.json",
                 _coco([_ann(1, 101, 3, [0, 0, 20, 50])], prefix="v"))
    result = tfrecorder.convert(
        {"train": train, "validation": val}, str(tmp_path / "out"),
        images_dir={"train": str(tmp_path / "train2017"), "validation": str(tmp_path / "val2017")})
    assert result.rows_per_split == {"train": 4, "validation": 4}
    found = _records(tmp_path / "out")
    assert set(found["train"]) == {f"t{i}.jpg" for i in range(4)}
    assert found["validation"]["v1.jpg"]["objects/bbox"].tolist() == [[0, 0, 1, 1]]
    assert result.rows_quarantined == 0


@pytest.mark.slow
def test_file_names_start_from_images_dir_else_the_json_files_folder(tmp_path):
    _images(tmp_path / "data")
    beside = _write(tmp_path / "data" / "instances.json", _coco(ANNOTATIONS))
    assert tfrecorder.convert(beside, str(tmp_path / "o1")).rows_quarantined == 0
    apart = _write(tmp_path / "instances.json", _coco(ANNOTATIONS))
    result = tfrecorder.convert(apart, str(tmp_path / "o2"), images_dir=str(tmp_path / "data"))
    assert result.rows_quarantined == 0 and sum(result.rows_per_split.values()) == 4
    with pytest.raises(tfrecorder.ConfigError, match="is not a folder"):
        tfrecorder.convert(apart, str(tmp_path / "o3"), images_dir=str(tmp_path / "nope"))


def test_a_file_without_splits_is_split_as_unassigned_rows_are(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _coco(ANNOTATIONS))
    checked = check_table(src, IMAGE_CSV_SCHEMA)
    where = {os.path.basename(r.image_uri): r.split for r in checked.rows}
    assert len(where) == 4
    for name, split in where.items():
        assert split == splits.assign(splits.hashed_name(str(tmp_path / name)),
                                      splits.DEFAULT_FRACTIONS)


@pytest.mark.slow
def test_unused_keys_are_one_note_of_the_result(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _coco(ANNOTATIONS))
    result = tfrecorder.convert(src, str(tmp_path / "out"))
    assert result.notes == [
        "COCO keys not converted: annotations[].area, "
        "categories[].supercategory, images[].coco_url, images[].license, info, licenses"]
    assert f"  note: {result.notes[0]}" in str(result).splitlines()


# --- problems --------------------------------------------------------------------------

def test_annotation_problems_name_the_file_and_the_annotation_id(tmp_path):
    _images(tmp_path)
    bad = ANNOTATIONS + [
        _ann(20, 999, 1, [0, 0, 1, 1]),          # no such image
        _ann(21, 100, 2, [0, 0, 1, 1]),          # no such category
        _ann(22, 100, 1, [30, 0, 11, 5]),        # ends past the image's width (40)
        _ann(23, 101, 1, [0, -1, 5, 5]),         # starts above the image
        _ann(24, 101, 1, [0, 0, 5, 60]),         # ends below the image's height (50)
        _ann(25, 101, 1, [0, 0, 5]),             # not four numbers
        _ann(26, 101, 1, [0, 0, -5, 5]),         # negative width
        _ann(27, 101, 1, [0, 0, 5, 5], iscrowd=2),
    ]
    src = _write(tmp_path / "instances.json", _coco(bad))
    problems = _problems(src)
    assert set(problems) == {
        (f"{src} annotation 20", "image_id"), (f"{src} annotation 21", "category_id"),
        (f"{src} annotation 22", "bbox"), (f"{src} annotation 23", "bbox"),
        (f"{src} annotation 24", "bbox"), (f"{src} annotation 25", "bbox"),
        (f"{src} annotation 26", "bbox"), (f"{src} annotation 27", "iscrowd")}
    assert "no image with this id" in problems[(f"{src} annotation 20", "image_id")].reason
    assert "no category" in problems[(f"{src} annotation 21", "category_id")].reason
    assert "outside image 100 (40 x 30 pixels" in problems[(f"{src} annotation 22", "bbox")].reason
    assert "negative" in problems[(f"{src} annotation 26", "bbox")].reason
    assert "row " + f"{src} annotation 20" in str(tfrecorder.SchemaError(list(problems.values())))


def test_a_box_ending_a_rounding_past_the_images_edge_is_cut_at_it(tmp_path):
    _images(tmp_path)
    # the tool that wrote the file rounded: x + width is 40.005 on an image 40 wide
    src = _write(tmp_path / "instances.json",
                 _coco([_ann(1, 100, 1, [0.1, 0.2, 39.905, 29.8])]))
    (row,) = [r for r in check_table(src, IMAGE_CSV_SCHEMA).rows if r.labels]
    _, box = example.parse(example.serialize(row.features))["objects/bbox"]
    assert box == pytest.approx([0.2 / 30, 0.1 / 40, 30 / 30, 1.0])  # xmax cut at 1
    past = _write(tmp_path / "past.json", _coco([_ann(1, 100, 1, [0.1, 0.2, 39.92, 29.8])]))
    assert (f"{past} annotation 1", "bbox") in _problems(past)


def test_a_box_of_zero_area_is_reported_not_written(tmp_path):
    from tfrecorder._errors import Problems
    from tfrecorder._inputs import annotations, coco
    from tfrecorder._inputs.annotations import Annotations

    _images(tmp_path)
    src = _write(tmp_path / "instances.json", _coco(
        [_ann(1, 100, 1, [4, 3, 0, 15]), _ann(2, 100, 3, [4, 3, 10, 0]),
         _ann(3, 101, 1, [1, 1, 5, 5])]))
    counts, problems = Annotations(), Problems()
    (_, data, ids), = list(coco.read([(src, None)], None, problems, counts=counts))
    assert not problems
    assert ids[:2] == [f"{src} image 100", f"{src} annotation 3"]  # 100: without boxes
    assert data["label"][:2] == [None, "person"]
    assert counts.reported == {annotations.ZERO_AREA: 2} and counts.written == 1
    assert counts.first == [f"{src} annotation 1: zero area (bbox [4, 3, 0, 15])",
                            f"{src} annotation 2: zero area (bbox [4, 3, 10, 0])"]


def test_image_and_category_entries_with_problems(tmp_path):
    _images(tmp_path)
    content = _coco(ANNOTATIONS)
    content["images"] += [
        {"id": 104, "file_name": "0.jpg", "width": 4, "height": 4},  # another image's file
        {"id": 105, "width": 4, "height": 4},                       # no file name
        {"id": 106, "file_name": "6.jpg", "width": 0, "height": 4},  # no size
        {"id": 100, "file_name": "7.jpg", "width": 4, "height": 4},  # a second id 100
    ]
    content["categories"] += [{"id": 3, "name": "truck"}, {"id": 40}]
    # annotations of those entries: the entry's problem is the one told
    content["annotations"] = [_ann(1, 105, 1, [0, 0, 1, 1]), _ann(2, 100, 40, [0, 0, 1, 1])]
    src = _write(tmp_path / "instances.json", content)
    problems = _problems(src)
    assert set(problems) == {
        (f"{src} image 104", "file_name"), (f"{src} image 105", "file_name"),
        (f"{src} image 106", "width"), (f"{src} image 100", "id"),
        (f"{src} category 3", "id"), (f"{src} category 40", "name")}


def test_file_names_outside_the_images_folder_are_problems_of_their_images(tmp_path):
    _images(tmp_path / "data")
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "photo.jpg").write_bytes(encode(seed=9, size=(8, 8)))
    outside = ["../private/photo.jpg", str(tmp_path / "private" / "photo.jpg"),
               "a/../../private/photo.jpg", "~/photo.jpg", "gs://bucket/photo.jpg",
               "..\\private\\photo.jpg"]
    content = _coco(ANNOTATIONS)
    content["images"] += [{"id": 200 + i, "file_name": name, "width": 8, "height": 8}
                          for i, name in enumerate(outside)]
    content["annotations"] = ANNOTATIONS + [_ann(50 + i, 200 + i, 1, [0, 0, 4, 4])
                               for i in range(len(outside))]
    src = _write(tmp_path / "data" / "instances.json", content)
    problems = _problems(src)
    assert set(problems) == {(f"{src} image {200 + i}", "file_name")
                             for i in range(len(outside))}
    assert [problems[(f"{src} image {200 + i}", "file_name")].value
            for i in range(len(outside))] == outside
    assert "relative to images_dir=" in problems[(f"{src} image 200", "file_name")].reason
    with pytest.raises(tfrecorder.SchemaError, match=r"private/photo\.jpg"):
        tfrecorder.convert(src, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    # a name that goes down and back up stays inside: read
    inside = _write(tmp_path / "data" / "inside.json",
                    _coco(ANNOTATIONS, prefix="sub/../"))
    assert len(_checked(inside)[0]) == 4


@pytest.mark.parametrize("layout", ["cvat", "cvat-old", "coco2017", "label-studio",
                                    "images-beside"])
def test_images_where_labelling_tools_put_them_are_found(tmp_path, layout):
    json_at, images_at, prefix = {
        "cvat": ("annotations/instances_default.json", "images/default", ""),
        "cvat-old": ("annotations/instances_default.json", "images", ""),
        "coco2017": ("annotations/instances_train2017.json", "train2017", ""),
        "label-studio": ("result.json", "images", "images/"),  # names start with images/
        "images-beside": ("result.json", "images", ""),
    }[layout]
    _images(tmp_path / images_at)
    (tmp_path / json_at).parent.mkdir(parents=True, exist_ok=True)
    src = _write(tmp_path / json_at, _coco(ANNOTATIONS, prefix=prefix))
    rows, notes = _checked(src)
    assert {os.path.dirname(r.image_uri) for r in rows} == {
        str(tmp_path / images_at)}
    if layout != "label-studio":  # there the JSON's own folder is the images' start
        assert notes[0] == (f"images of {src} found in {tmp_path / images_at}, where its "
                            f"exporter puts them; images_dir= (--images-dir) names another "
                            f"folder")


@pytest.mark.slow
def test_images_in_no_folder_known_fail_before_any_pipeline_naming_images_dir(
        tmp_path, run_cli):
    _images(tmp_path / "elsewhere")
    (tmp_path / "annotations").mkdir()
    src = _write(tmp_path / "annotations" / "instances_default.json", _coco(ANNOTATIONS))
    problem = _problems(src)[(src, "images_dir")]
    assert problem.reason == (
        f"none of 4 images the file lists (its first, and others spread over it) is in its "
        f"folder {tmp_path / 'annotations'} "
        f"({tmp_path / 'annotations' / '0.jpg'} is not there, nor is any of them in "
        f"{tmp_path / 'annotations' / 'images'}, {tmp_path / 'images' / 'default'}, "
        f"{tmp_path / 'images'}, {tmp_path / 'default'}); give the folder they are in as "
        f"images_dir= (--images-dir)")
    p = run_cli("convert", src, str(tmp_path / "out"))
    assert p.returncode == 2 and "--images-dir" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()  # no pipeline ran, nothing was written
    # images_dir= given where Label Studio's images/... names do not start: the folder
    # they do start from is named
    _images(tmp_path / "ls" / "images")
    ls = _write(tmp_path / "ls" / "result.json", _coco(ANNOTATIONS, prefix="images/"))
    problem = _problems(ls, images_dir=str(tmp_path / "ls" / "images"))[(ls, "images_dir")]
    assert problem.reason.endswith(f"they are in {tmp_path / 'ls'}: name the folder as "
                                   f"images_dir= (--images-dir)")
    assert tfrecorder.convert(ls, str(tmp_path / "o2"), images_dir=str(tmp_path / "ls"),
                              ).rows_quarantined == 0


def test_the_same_image_in_two_split_files_is_a_problem(tmp_path):
    _images(tmp_path)
    train = _write(tmp_path / "train.json", _coco(ANNOTATIONS))
    val = _write(tmp_path / "val.json", _coco([]))
    problems = _problems({"train": train, "validation": val})
    assert any("the same image is in splits ['train', 'validation']" in p.reason
               for p in problems.values())


@pytest.mark.parametrize("text,message", [
    ("{not json", "not a JSON file"),
    ('{"a": 1}\n{"b": 2}\n', "name it .jsonl"),
    ('{"annotations": []}', "not a COCO file"),
    ('{"images": [], "annotations": []}', "no images"),
    ('{"images": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deep"),
])
def test_files_that_are_not_coco(tmp_path, text, message):
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(tfrecorder.SchemaError, match=message):
        check_table(str(path), IMAGE_CSV_SCHEMA)


def test_a_dict_source_names_splits_and_coco_files(tmp_path):
    src = _write(tmp_path / "a.json", _coco([]))
    with pytest.raises(tfrecorder.ConfigError, match="give each file's split"):
        check_table({"holdout": src}, IMAGE_CSV_SCHEMA)
    with pytest.raises(tfrecorder.ConfigError, match="COCO .json file"):
        check_table({"train": str(tmp_path / "a.csv")}, IMAGE_CSV_SCHEMA)
    with pytest.raises(tfrecorder.ConfigError, match="leave schema= and names= out"):
        tfrecorder.convert(src, str(tmp_path / "o"), schema={"image_uri": "ImageUri"})
    with pytest.raises(tfrecorder.ConfigError, match="a folder per split is for COCO files"):
        tfrecorder.convert(src, str(tmp_path / "o"), images_dir={"train": str(tmp_path)})
    with pytest.raises(tfrecorder.ConfigError, match=r"images_dir names \['test'\]"):
        tfrecorder.convert({"train": src}, str(tmp_path / "o"),
                           images_dir={"train": str(tmp_path), "test": str(tmp_path)})


@pytest.mark.slow
def test_the_command_line_takes_coco_files_per_split(tmp_path, run_cli):
    _images(tmp_path / "train2017")
    _images(tmp_path / "val2017")
    train = _write(tmp_path / "instances_train.json", _coco(ANNOTATIONS))
    val = _write(tmp_path / "instances_val.json", _coco([]))
    images = f"train={tmp_path / 'train2017'},validation={tmp_path / 'val2017'}"
    p = run_cli("convert", f"train={train},validation={val}", str(tmp_path / "out"),
                "--images-dir", images)
    assert p.returncode == 0, p.stderr
    assert "note: COCO keys not converted" in p.stdout
    m = tfrecorder.info(str(tmp_path / "out"))
    assert {s: i.num_examples for s, i in m.splits.items()} == {"train": 4, "validation": 4}


@pytest.mark.slow
def test_read_gives_each_records_crowd_flags_as_a_list_beside_its_boxes(tmp_path):
    _images(tmp_path)
    src = _write(tmp_path / "instances_train.json", _coco(ANNOTATIONS))
    tfrecorder.convert({"train": src}, str(tmp_path / "out"))
    table = tfrecorder.read(str(tmp_path / "out")).set_index("image_uri")
    expected = _expected(ANNOTATIONS, {1: "person", 3: "car", 18: "dog"})
    for uri, r in table.iterrows():
        boxes = expected[os.path.basename(uri)]
        assert r["objects/is_crowd"] == [b[2] for b in boxes], uri  # two boxes, one, none
        assert [b[0] for b in r["boxes"]] == [b[0] for b in boxes], uri


def test_a_file_whose_first_images_are_missing_still_finds_its_folder(tmp_path):
    # The first images of the file are gone, the rest are beside it: the folder is
    # right, and the missing rows are the run's to quarantine (within its error
    # budget), not a reason to refuse the file before it runs.
    from tfrecorder._inputs import coco
    from tfrecorder._errors import Problems

    images = [{"id": i, "file_name": f"{i}.jpg", "width": 4, "height": 4} for i in range(200)]
    for i in range(20, 200):
        (tmp_path / f"{i}.jpg").write_bytes(b"x")
    problems, found_in = Problems(), []
    src = str(tmp_path / "coco.json")
    assert coco._folder(images, src, None, problems, found_in) == str(tmp_path)
    assert not problems and not found_in
    given = coco._folder(images, src, str(tmp_path), problems, found_in)
    assert given == str(tmp_path) and not problems
