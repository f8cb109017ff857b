"""Vertex AI JSON Lines, read as Vertex AI writes them: classification (single- and
multi-label) and object detection, splits from ml_use, file names or neither, the files
of a custom training job (AIP_* variables), and every problem a line can have."""

import json
import os

import pytest

import tfrecorder
from tfrecorder._inputs import sources, splits, vertex
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA
from tfrecorder.access import Reader
from tests.conftest import check_table, encode

ML_USE = "aiplatform.googleapis.com/ml_use"


def _images(folder, n, size=(24, 16)):
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(n):
        path = os.path.join(str(folder), f"{i}.jpg")
        with open(path, "wb") as f:
            f.write(encode(seed=i, size=size))
        paths.append(path)
    return paths


def _jsonl(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(line if isinstance(line, str) else json.dumps(line))
            f.write("\n")
    return str(path)


def _single(uri, label, ml_use=None, **extra):
    line = {"imageGcsUri": uri, "classificationAnnotation": {"displayName": label}, **extra}
    if ml_use is not None:
        line["dataItemResourceLabels"] = {ML_USE: ml_use}
    return line


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


def _label_names(out, key="label"):
    return Reader(str(out), next(iter(tfrecorder.info(str(out)).splits))).manifest.vocabularies[key]


def _problems(source, **kw):
    with pytest.raises(tfrecorder.SchemaError) as e:
        check_table(source, IMAGE_CSV_SCHEMA, **kw)
    return {(p.row, p.column): p for p in e.value.problems}


# --- round trips -----------------------------------------------------------------------

@pytest.mark.slow
def test_single_label_lines_round_trip_with_their_ml_use_splits(tmp_path):
    paths = _images(tmp_path / "img", 6)
    uses = ["training", "training", "validation", "test", "training", "validation"]
    labels = ["cat", "dog", "cat", "dog", "bird", "dog"]
    src = _jsonl(tmp_path / "export.jsonl",
                 [_single(p, label, use) for p, label, use in zip(paths, labels, uses)])
    result = tfrecorder.convert(src, str(tmp_path / "out"))
    assert result.rows_per_split == {"train": 3, "validation": 2, "test": 1}
    assert result.labels == ["bird", "cat", "dog"]
    found = _records(tmp_path / "out")
    canonical = {"training": "train", "validation": "validation", "test": "test"}
    for i, (label, use) in enumerate(zip(labels, uses)):
        assert found[canonical[use]][f"{i}.jpg"]["label"] == result.labels.index(label)


@pytest.mark.slow
def test_multi_label_lines_become_records_of_every_label(tmp_path):
    paths = _images(tmp_path / "img", 3)
    lines = [
        {"imageGcsUri": paths[0], "classificationAnnotations": [
            {"displayName": "sky"}, {"displayName": "dog"}, {"displayName": "cat"}],
         "dataItemResourceLabels": {ML_USE: "training"}},
        {"imageGcsUri": paths[1], "classificationAnnotations": [{"displayName": "sky"}],
         "dataItemResourceLabels": {ML_USE: "training"}},
        # the same image on two lines: its labels merge, as Vertex AI merges them
        {"imageGcsUri": paths[2], "classificationAnnotations": [{"displayName": "cat"}],
         "dataItemResourceLabels": {ML_USE: "test"}},
        {"imageGcsUri": paths[2], "classificationAnnotations": [{"displayName": "dog"}]},
    ]
    result = tfrecorder.convert(_jsonl(tmp_path / "m.jsonl", lines), str(tmp_path / "out"))
    names = result.labels
    assert names == ["cat", "dog", "sky"]
    found = _records(tmp_path / "out")
    assert list(found["train"]["0.jpg"]["label"]) == [0, 1, 2]
    assert list(found["train"]["1.jpg"]["label"]) == [2]
    assert list(found["test"]["2.jpg"]["label"]) == [0, 1]
    assert result.rows_in == 4 and result.rows_per_split == {"train": 2, "test": 1}


@pytest.mark.slow
def test_boxes_round_trip_as_relative_corners_and_images_without_boxes_stay(tmp_path):
    paths = _images(tmp_path / "img", 3)
    lines = [
        {"imageGcsUri": paths[0], "boundingBoxAnnotations": [
            {"displayName": "car", "xMin": 0.1, "yMin": 0.2, "xMax": 0.5, "yMax": 0.6},
            # Vertex AI's exports leave zero coordinates out; numbers may be strings
            {"displayName": "bus", "xMax": "0.25", "yMax": 1}],
         "dataItemResourceLabels": {ML_USE: "training"}},
        {"imageGcsUri": paths[1], "boundingBoxAnnotations": [],
         "dataItemResourceLabels": {ML_USE: "training"}},
        {"imageGcsUri": paths[2], "dataItemResourceLabels": {ML_USE: "test"}},
    ]
    result = tfrecorder.convert(_jsonl(tmp_path / "d.jsonl", lines), str(tmp_path / "out"))
    assert result.rows_per_split == {"train": 2, "test": 1}
    names = _label_names(tmp_path / "out", "objects/label")
    assert names == ["bus", "car"]
    found = _records(tmp_path / "out")
    first = found["train"]["0.jpg"]
    assert first["objects/bbox"].ravel().tolist() == pytest.approx(
        [0.2, 0.1, 0.6, 0.5, 0.0, 0.0, 1.0, 0.25])  # ymin, xmin, ymax, xmax per box
    assert [names[i] for i in first["objects/label"]] == ["car", "bus"]
    for split, name in (("train", "1.jpg"), ("test", "2.jpg")):
        assert found[split][name]["objects/bbox"].shape == (0, 4)
        assert len(found[split][name]["objects/label"]) == 0


@pytest.mark.slow
def test_split_from_ml_use_else_file_name_else_assigned_by_hash(tmp_path):
    paths = _images(tmp_path / "img", 5)
    _jsonl(tmp_path / "training-00000-of-00001.jsonl", [
        _single(paths[0], "cat"), _single(paths[1], "dog", "test")])  # ml_use wins
    _jsonl(tmp_path / "validation-00000-of-00001.jsonl", [_single(paths[2], "cat")])
    _jsonl(tmp_path / "export.jsonl", [_single(paths[3], "dog"), _single(paths[4], "cat")])
    result = tfrecorder.convert(str(tmp_path / "*.jsonl"), str(tmp_path / "out"))
    found = _records(tmp_path / "out")
    where = {name: split for split, records in found.items() for name in records}
    assert where["0.jpg"] == "train" and where["1.jpg"] == "test"
    assert where["2.jpg"] == "validation"
    for i in (3, 4):  # unassigned: as the CSV path splits unassigned rows
        assert where[f"{i}.jpg"] == splits.assign(splits.hashed_name(paths[i]),
                                                  splits.DEFAULT_FRACTIONS)
    # the line whose ml_use overrode its file's split is not passed over in silence
    (note,) = [n for n in result.notes if "ml_use" in n]
    assert "1 line(s) of training-00000-of-00001.jsonl" in note and "(train)" in note


@pytest.mark.slow
def test_relative_image_paths_start_from_the_files_folder_or_images_dir(tmp_path):
    _images(tmp_path / "data" / "img", 2)
    src = _jsonl(tmp_path / "data" / "a.jsonl",
                 [_single("img/0.jpg", "cat", "training"), _single("img/1.jpg", "dog", "training")])
    assert tfrecorder.convert(src, str(tmp_path / "o1")).rows_written == 2
    elsewhere = _jsonl(tmp_path / "b.jsonl", [_single("0.jpg", "cat", "training")])
    result = tfrecorder.convert(elsewhere, str(tmp_path / "o2"),
                                images_dir=str(tmp_path / "data" / "img"))
    assert result.rows_written == 1 and result.rows_quarantined == 0


@pytest.mark.slow
def test_unused_keys_are_listed_in_one_note_of_the_result(tmp_path):
    paths = _images(tmp_path / "img", 2)
    lines = [
        {"imageGcsUri": paths[0], "mimeType": "image/jpeg",
         "classificationAnnotation": {"displayName": "cat", "annotationResourceLabels": {
             "aiplatform.googleapis.com/annotation_set_name": "123"}},
         "dataItemResourceLabels": {ML_USE: "training", "env": "prod"}},
        _single(paths[1], "dog", "training"),
    ]
    result = tfrecorder.convert(_jsonl(tmp_path / "a.jsonl", lines), str(tmp_path / "out"))
    assert result.notes == [
        "JSON Lines keys not converted: classificationAnnotation.annotationResourceLabels "
        "(1 line), dataItemResourceLabels.env (1 line), mimeType (1 line)"]
    assert f"  note: {result.notes[0]}" in str(result).splitlines()
    assert "mimeType" in result._repr_html_()
    clean = tfrecorder.convert(_jsonl(tmp_path / "b.jsonl", lines[1:]), str(tmp_path / "o2"))
    assert clean.notes == [] and "note:" not in str(clean)


@pytest.mark.slow
def test_a_pattern_a_list_and_a_folder_read_the_same_lines(tmp_path):
    paths = _images(tmp_path / "img", 4)
    folder = tmp_path / "export"
    folder.mkdir()
    a = _jsonl(folder / "part-1.jsonl", [_single(p, "cat", "training") for p in paths[:3]])
    b = _jsonl(folder / "part-2.jsonl", [_single(paths[3], "dog", "test")])
    (folder / "README.txt").write_text("not data")
    for i, source in enumerate([str(folder / "part-*.jsonl"), [a, b], str(folder)]):
        result = tfrecorder.convert(source, str(tmp_path / f"out{i}"))
        assert result.rows_per_split == {"train": 3, "test": 1}, source


def test_an_image_folder_with_a_jsonl_file_beside_its_label_folders_stays_one(tmp_path):
    _images(tmp_path / "cat", 2)
    _jsonl(tmp_path / "metadata.jsonl", [{"file_name": "cat/0.jpg", "text": "a cat"}])
    table = sources.read(str(tmp_path))
    assert table.kind == "directory" and len(table.frame) == 2


# --- problems --------------------------------------------------------------------------

def test_a_line_not_json_or_without_an_image_is_a_problem_naming_file_and_line(tmp_path):
    paths = _images(tmp_path / "img", 1)
    src = _jsonl(tmp_path / "a.jsonl", [
        _single(paths[0], "cat"),
        '{"imageGcsUri": "x.jpg", "classificationAnnotation": ',        # cut short
        "",                                                              # blank: skipped
        {"classificationAnnotation": {"displayName": "cat"}},           # no image
        {"imageGcsUri": "  ", "classificationAnnotation": {"displayName": "cat"}},
        '["a list"]',
        '{"imageGcsUri": ' + "[" * 100_000 + "]" * 100_000 + "}",       # nested too deep
    ])
    problems = _problems(src)
    assert set(problems) == {(f"{src}:2", None), (f"{src}:4", "imageGcsUri"),
                             (f"{src}:5", "imageGcsUri"), (f"{src}:6", None), (f"{src}:7", None)}
    assert "not JSON" in problems[(f"{src}:2", None)].reason
    assert "nested too deep" in problems[(f"{src}:7", None)].reason
    assert "no image" in problems[(f"{src}:4", "imageGcsUri")].reason
    assert "not an object" in problems[(f"{src}:6", None)].reason
    assert f"row {src}:2" in str(tfrecorder.SchemaError(list(problems.values())))


def test_annotation_problems_name_the_key_of_the_line(tmp_path):
    paths = _images(tmp_path / "img", 1)
    src = _jsonl(tmp_path / "a.jsonl", [
        _single(paths[0], "cat", "sometimes"),
        {"imageGcsUri": paths[0], "classificationAnnotation": {"annotationSpecId": "1"}},
        {"imageGcsUri": paths[0]},
        {"imageGcsUri": paths[0], "classificationAnnotation": {"displayName": 7}},
        {"imageGcsUri": 5, "classificationAnnotation": {"displayName": "cat"}},
    ])
    problems = _problems(src)
    assert "unknown ml_use" in problems[(f"{src}:1", f"dataItemResourceLabels.{ML_USE}")].reason
    assert "no label name" in problems[(f"{src}:2", "classificationAnnotation.displayName")].reason
    assert "no label" in problems[(f"{src}:3", None)].reason
    # a value of the wrong JSON type is named as such, not as a missing one
    assert "displayName is a JSON number, not text" in problems[
        (f"{src}:4", "classificationAnnotation.displayName")].reason
    assert "imageGcsUri is a JSON number, not text" in problems[(f"{src}:5", "imageGcsUri")].reason


def test_box_problems_name_the_box_and_the_shared_checks_still_run(tmp_path):
    paths = _images(tmp_path / "img", 1)
    src = _jsonl(tmp_path / "a.jsonl", [
        {"imageGcsUri": paths[0], "boundingBoxAnnotations": [
            {"displayName": "car", "xMin": 0.1, "yMin": 0.1, "yMax": 0.5}]},   # no xMax
        {"imageGcsUri": paths[0], "boundingBoxAnnotations": [
            {"xMin": 0.1, "yMin": 0.1, "xMax": 0.5, "yMax": 0.5}]},            # no label
        {"imageGcsUri": paths[0], "boundingBoxAnnotations": [
            {"displayName": "car", "xMin": "left", "yMin": 0, "xMax": 1, "yMax": 1}]},
    ])
    problems = _problems(src)
    assert "no xMax" in problems[(f"{src}:1", "boundingBoxAnnotations[0].xMax")].reason
    assert (f"{src}:2", "boundingBoxAnnotations[0].displayName") in problems
    assert problems[(f"{src}:3", "boundingBoxAnnotations[0].xMin")].reason == "not a number"
    # lines that parse are checked where an AutoML CSV's rows are
    read = _jsonl(tmp_path / "b.jsonl", [
        {"imageGcsUri": paths[0], "boundingBoxAnnotations": [
            {"displayName": "car", "xMin": 0.6, "yMin": 0.1, "xMax": 0.5, "yMax": 1.5}]}])
    problems = _problems(read)
    assert "above x_max" in problems[(f"{read}:1", "x_min")].reason
    assert "outside [0, 1]" in problems[(f"{read}:1", "y_max")].reason


def test_classification_and_boxes_in_one_table_are_a_problem(tmp_path):
    paths = _images(tmp_path / "img", 2)
    a = _jsonl(tmp_path / "a.jsonl", [
        {"imageGcsUri": paths[0], "boundingBoxAnnotations": []},
        _single(paths[1], "cat"),
        {"imageGcsUri": paths[1], "classificationAnnotation": {"displayName": "cat"},
         "boundingBoxAnnotations": []},
    ])
    problems = _problems(a)
    assert "not both" in problems[(f"{a}:2", "classificationAnnotation")].reason
    assert "not both" in problems[(f"{a}:3", "boundingBoxAnnotations")].reason


@pytest.mark.slow
def test_an_image_file_that_cannot_be_read_is_quarantined_with_its_line(tmp_path):
    paths = _images(tmp_path / "img", 9)
    lines = [_single(p, "cat", "training") for p in paths]
    lines.append(_single(str(tmp_path / "img" / "missing.jpg"), "dog", "training"))
    src = _jsonl(tmp_path / "a.jsonl", lines)
    result = tfrecorder.convert(src, str(tmp_path / "out"), max_error_fraction=0.2)
    assert result.rows_quarantined == 1 and result.rows_written == 9
    (error,) = [json.loads(x) for x in open(result.errors_file)]
    assert error["row"] == f"{src}:10" and "not found" in error["reason"]


def test_an_empty_file_and_a_pattern_matching_nothing_are_errors(tmp_path):
    empty = _jsonl(tmp_path / "empty.jsonl", [])
    assert "no lines" in str(_problems(empty))
    with pytest.raises(tfrecorder.ConfigError, match="matches no file"):
        check_table(str(tmp_path / "nothing-*.jsonl"), IMAGE_CSV_SCHEMA)
    csv = tmp_path / "t.csv"
    csv.write_text("TRAIN,a.jpg,cat\n")
    with pytest.raises(tfrecorder.ConfigError, match="not a JSON Lines file"):
        check_table([str(csv)], IMAGE_CSV_SCHEMA)


# --- a Vertex AI custom training job ---------------------------------------------------

def _job(tmp_path):
    """The files a custom training job is given, and its AIP_* variables."""
    paths = _images(tmp_path / "img", 4)
    export = tmp_path / "export"
    export.mkdir()
    _jsonl(export / "training-00000-of-00002.jsonl", [_single(paths[0], "cat")])
    _jsonl(export / "training-00001-of-00002.jsonl", [_single(paths[1], "dog")])
    _jsonl(export / "validation-00000-of-00001.jsonl", [_single(paths[2], "cat")])
    _jsonl(export / "test-00000-of-00001.jsonl", [_single(paths[3], "dog")])
    return {"AIP_DATA_FORMAT": "jsonl",
            "AIP_TRAINING_DATA_URI": str(export / "training-*"),
            "AIP_VALIDATION_DATA_URI": str(export / "validation-*"),
            "AIP_TEST_DATA_URI": str(export / "test-*")}


def test_from_vertex_takes_each_aip_pattern_as_its_split(tmp_path):
    env = _job(tmp_path)
    source = tfrecorder.from_vertex(env)
    assert source.files == ((env["AIP_TRAINING_DATA_URI"], "train"),
                            (env["AIP_VALIDATION_DATA_URI"], "validation"),
                            (env["AIP_TEST_DATA_URI"], "test"))
    checked = check_table(source, IMAGE_CSV_SCHEMA)
    by_split = {}
    for row in checked.rows:
        by_split.setdefault(row.split, []).append(os.path.basename(row.image_uri))
    assert by_split == {"train": ["0.jpg", "1.jpg"], "validation": ["2.jpg"], "test": ["3.jpg"]}


@pytest.mark.slow
def test_convert_from_vertex_reads_the_environment(tmp_path, monkeypatch):
    for name, value in _job(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AIP_TEST_DATA_URI")  # a job may be given fewer splits
    result = tfrecorder.convert(tfrecorder.from_vertex(), str(tmp_path / "out"))
    assert result.rows_per_split == {"train": 2, "validation": 1}
    assert set(_records(tmp_path / "out")["train"]) == {"0.jpg", "1.jpg"}


@pytest.mark.parametrize("env,message", [
    ({}, "AIP_DATA_FORMAT is not set"),
    ({"AIP_DATA_FORMAT": "csv", "AIP_TRAINING_DATA_URI": "gs://b/training-*"},
     "AIP_DATA_FORMAT='csv'"),
    ({"AIP_DATA_FORMAT": "bigquery", "AIP_TRAINING_DATA_URI": "bq://p.d.t"},
     "AIP_DATA_FORMAT='bigquery'"),
    ({"AIP_DATA_FORMAT": "jsonl"}, "none of AIP_TRAINING_DATA_URI"),
])
def test_from_vertex_refuses_what_it_cannot_read(env, message):
    with pytest.raises(tfrecorder.ConfigError, match=message):
        tfrecorder.from_vertex(env)


def test_from_vertex_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("AIP_DATA_FORMAT", "jsonl")
    monkeypatch.setenv("AIP_TRAINING_DATA_URI", "gs://b/export/training-*")
    for name in ("AIP_VALIDATION_DATA_URI", "AIP_TEST_DATA_URI"):
        monkeypatch.delenv(name, raising=False)
    assert tfrecorder.from_vertex() == vertex.JsonLines((("gs://b/export/training-*", "train"),))


@pytest.mark.slow
def test_the_command_line_converts_from_vertex_and_refuses_other_formats(
        tmp_path, monkeypatch, run_cli):
    for name, value in _job(tmp_path).items():
        monkeypatch.setenv(name, value)
    run = ["convert", "--from-vertex"]
    p = run_cli(*run, str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    assert "wrote 4 of 4 rows" in p.stdout
    assert tfrecorder.info(str(tmp_path / "out")).splits["train"].num_examples == 2
    monkeypatch.setenv("AIP_DATA_FORMAT", "csv")
    p = run_cli(*run, str(tmp_path / "o2"))
    assert p.returncode == 2 and p.stderr.startswith("Error: AIP_DATA_FORMAT='csv'")
    monkeypatch.setenv("AIP_DATA_FORMAT", "jsonl")
    p = run_cli(*run, "a.jsonl", str(tmp_path / "o3"))
    assert p.returncode == 2 and "--from-vertex takes OUTPUT_DIR only" in p.stderr
