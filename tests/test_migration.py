"""Code and data written for Google's TFRecorder 2.0 keep working here: its calls, its
arguments, its results' keys, its schema names, its commands and its output directories."""

import base64
import gzip
import io
import os
import pathlib
import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import tfrecorder
from tfrecorder import _cli as cli, input_schema, types
from tfrecorder._folder import example
from tfrecorder._folder import records
from tests.conftest import BUCKET, SAMPLES, encode, write_images


@pytest.fixture(scope="module")
def converted(samples_converted):
    out, result = samples_converted()  # read only
    return result, pathlib.Path(out)


# --- 1. the result is a mapping ---------------------------------------------------------

def test_the_result_is_a_mapping_with_tfrecorders_keys(converted):
    result, out = converted
    assert "metrics" in result and "tfrecord_dir" in result and "nope" not in result
    with pytest.warns(DeprecationWarning, match=r"result\.output_dir") as caught:
        assert result["tfrecord_dir"] == str(out) == result.output_dir
    assert [w.filename for w in caught] == [__file__]  # from this line, not tfrecorder's
    assert result["job_id"] == result.job_id
    assert set(result.keys()) == {"tfrecord_dir", "job_id", "metrics"}
    with pytest.warns(DeprecationWarning, match="tfrecord_dir"):  # dict() reads every key
        assert dict(result)["metrics"] == result.metrics and len(result) == 3
    assert result.get("dataflow_url") is None and result.get("job_id") == result.job_id
    metrics = result["metrics"]
    assert (metrics["rows"], metrics["good_images"], metrics["bad_images"]) == (36, 36, 0)
    assert metrics["rows_written"] == 36
    with pytest.raises(KeyError, match="the keys are"):
        result["tfrecord"]


@pytest.mark.slow
def test_a_dataflow_job_is_a_mapping_too(gcs):
    df = pd.DataFrame({"split": ["TRAIN"], "image_uri": [f"gs://{BUCKET}/x.jpg"], "label": ["a"]})
    job = df.tensorflow.to_tfr(f"gs://{BUCKET}/mapping", None, "DataFlowRunner", "my-project",
                               "us-central1", dataflow_options={"dry_run": True, "no_auth": True})
    assert set(dict(job)) == {"tfrecord_dir", "job_id", "dataflow_url", "metrics"}
    assert job["tfrecord_dir"] == f"gs://{BUCKET}/mapping" and job.get("job_id") is None


# --- 2. signatures ----------------------------------------------------------------------

def _csv(tmp_path, text):
    path = tmp_path / "t.csv"
    path.write_text(text)
    return str(path)


def _three_images(tmp_path):
    return write_images(tmp_path, 3)


@pytest.mark.slow
def test_convert_takes_tfrecorders_positional_arguments(tmp_path):
    a, b, c = _three_images(tmp_path)
    source = _csv(tmp_path, f"TRAIN,{a},x\nTRAIN,{b},y\nTEST,{c},x\n")
    out = str(tmp_path / "out")
    #                  source  output_dir schema header names runner        project region
    result = tfrecorder.convert(source, out, None, None, None, "DirectRunner", None, None,
                                None, None, "my-label", None, 2)
    #                           wheel dataflow_options job_label compression num_shards
    assert result.shards_per_split == {"train": 2, "test": 1}
    datasets = tfrecorder.convert_and_load(source, str(tmp_path / "o2"), None, None, None,
                                           overwrite=True)
    assert sorted(datasets) == ["test", "train"]


@pytest.mark.slow  # a conversion end to end
@pytest.mark.parametrize("text,header,names", [
    ("image_uri,label,split\n{a},x,TRAIN\n{b},y,TEST\n", "infer", None),       # a header
    ("{a},x,TRAIN\n{b},y,TEST\n", None, ["image_uri", "label", "split"]),      # names, no header
    ("p,q,r\n{a},x,TRAIN\n{b},y,TEST\n", 0, ["image_uri", "label", "split"]),  # names replace it
    ("# exported\np,q,r\n{a},x,TRAIN\n{b},y,TEST\n", 1, ["image_uri", "label", "split"]),
], ids=["infer", "names", "header=0 with names", "header=1"])
def test_header_and_names_read_a_csv_as_pandas_does(tmp_path, text, header, names):
    a, b, _ = _three_images(tmp_path)
    source = _csv(tmp_path, text.format(a=a, b=b))
    result = tfrecorder.convert(source, str(tmp_path / "out"), header=header, names=names)
    assert result.rows_per_split == {"train": 1, "test": 1} and result.labels == ["x", "y"]


def test_header_none_reads_a_header_line_as_data(tmp_path):
    a, b, _ = _three_images(tmp_path)
    source = _csv(tmp_path, f"split,image_uri,label\nTRAIN,{a},x\nTEST,{b},y\n")
    with pytest.raises(tfrecorder.SchemaError, match="row 1, column 'split': value 'split'"):
        tfrecorder.convert(source, str(tmp_path / "out"), header=None)
    with pytest.raises(tfrecorder.ConfigError, match="header='first'"):
        tfrecorder.convert(source, str(tmp_path / "out"), header="first")


@pytest.mark.slow  # a conversion end to end
def test_names_select_dataframe_columns(tmp_path):
    a, b, _ = _three_images(tmp_path)
    df = pd.DataFrame({"split": ["TRAIN", "TEST"], "image_uri": [a, b], "label": ["x", "y"],
                       "label2": ["p", "q"]})
    result = tfrecorder.convert(df, str(tmp_path / "out"), names=["split", "image_uri", "label"])
    assert result.labels == ["x", "y"]
    with pytest.raises(tfrecorder.ConfigError, match="no column 'nope'"):
        tfrecorder.convert(df, str(tmp_path / "o"), names=["split", "nope"])


# --- 3. schemas and types ---------------------------------------------------------------

def test_input_schema_has_tfrecorders_attributes(tf):
    schema = input_schema.Schema({"split": types.SplitKey, "image_uri": types.ImageUri,
                                  "label": types.StringLabel, "Siblings/Spouses Aboard":
                                  types.IntegerInput})
    assert (schema.split_key, schema.image_uri_key, schema.label_key) == (
        "split", "image_uri", "label")
    assert list(schema.get_input_keys()) == ["split", "image_uri", "label",
                                             "Siblings/Spouses Aboard"]
    assert schema.input_schema_map["label"] == types.StringLabel()
    assert input_schema.IMAGE_CSV_SCHEMA.split_key == "split"
    assert input_schema.image_csv_schema_map == {
        "split": types.SplitKey, "image_uri": types.ImageUri, "label": types.StringLabel}
    assert types.SplitKey.allowed_values[:3] == ["TRAIN", "VALIDATION", "TEST"]
    assert types.IntegerInput.feature_spec == tf.io.FixedLenFeature([], tf.int64)
    assert types.FloatInput.feature_spec.dtype == tf.float32
    assert types.ImageUri.feature_spec.dtype == tf.string
    assert issubclass(types.ImageDim, types.SupportedType)
    assert issubclass(types.ImageSupportString, types.SupportedType)
    with pytest.raises(tfrecorder.ConfigError, match="not a column type"):
        input_schema.Schema({"x": types.SupportedType})


# --- 4. relative image paths ------------------------------------------------------------

@pytest.mark.slow  # a conversion end to end
def test_relative_paths_resolve_against_the_csv_folder_then_the_working_directory(
        tmp_path, monkeypatch, caplog):
    (tmp_path / "work" / "img").mkdir(parents=True)
    (tmp_path / "data" / "img").mkdir(parents=True)
    for i in range(3):
        (tmp_path / "work" / "img" / f"{i}.jpg").write_bytes(encode(seed=i))
    csv = tmp_path / "data" / "t.csv"
    csv.write_text("".join(f"TRAIN,img/{i}.jpg,x\n" for i in range(3)))
    monkeypatch.chdir(tmp_path / "work")  # TFRecorder read them from here
    result = tfrecorder.convert(str(csv), str(tmp_path / "o1"))
    assert result.rows_written == 3
    assert "against the working directory" in caplog.text

    # Found beside the CSV: its folder wins, for every row (decided once per table).
    (tmp_path / "data" / "img" / "0.jpg").write_bytes(encode(seed=7))
    result = tfrecorder.convert(str(csv), str(tmp_path / "o2"), max_error_fraction=1.0)
    assert (result.rows_written, result.rows_quarantined) == (1, 2)
    assert {e["reason"] for e in result.first_errors} == {
        f"image file not found: {e['image_uri']}" for e in result.first_errors}


# --- 5. option dicts go to Beam as keywords ---------------------------------------------

@pytest.mark.slow
def test_dataflow_options_dicts_mean_what_they_say(gcs):
    df = pd.DataFrame({"split": "TRAIN", "label": "a",
                       "image_uri": [f"gs://{BUCKET}/p/{i}.jpg" for i in range(3)]})
    job = tfrecorder.convert(df, f"gs://{BUCKET}/kw", runner="DataflowRunner",
                             project="my-project", region="us-central1",
                             dataflow_options={"use_public_ips": False, "dry_run": True,
                                               "no_auth": True, "max_num_workers": 3})
    options = job.job.options.get_all_options()
    assert job.job_id is None  # a dry run: nothing submitted
    assert options["use_public_ips"] is False and options["max_num_workers"] == 3


# --- 6. inspect() is its folder; TFRecorder's commands -----------------------------------

def test_inspect_returns_its_folder_as_a_path(converted, tmp_path):
    _, out = converted
    look = tfrecorder.inspect(str(out), output_dir=str(tmp_path / "look"))
    assert os.fspath(look) == str(tmp_path / "look")
    table = pd.read_csv(os.path.join(look, "data.csv"))
    assert len(table) == 5 and "label_name" in table.columns
    checked = tfrecorder.check_tfrecords(file_pattern=os.path.join(str(out), "data-train*"),
                                         num_records=2, output_dir=str(tmp_path / "chk"))
    assert checked.split == "train" and len(pd.read_csv(os.path.join(checked, "data.csv"))) == 2


@pytest.mark.slow  # a conversion end to end
def test_tfrecorders_commands(tmp_path, capsys):
    code = cli.main(["create-tfrecords", f"--input_data={os.path.join(SAMPLES, 'data.csv')}",
                     f"--output_dir={tmp_path / 'out'}", "--num_shards=2"])
    assert code == 0 and "wrote 36 of 36 rows" in capsys.readouterr().out
    code = cli.main(["check-tfrecords", f"--tfrecord_dir={tmp_path / 'out'}", "--split=TEST",
                     "--num_records=2", f"--output_dir={tmp_path / 'chk'}"])
    assert code == 0 and len(pd.read_csv(tmp_path / "chk" / "data.csv")) == 2
    result = tfrecorder.create_tfrecords(input_data=os.path.join(SAMPLES, "data.csv"),
                                         output_dir=str(tmp_path / "py"))
    assert result["metrics"]["rows"] == 36


# --- 7. TFRecorder 2.0's own output directories ----------------------------------------

def _feature_bytes(v):
    return example.bytes_feature([v])


def _legacy_dir(root):
    """A directory in TFRecorder 2.0's layout, built from its format: gzip shards of
    Examples holding web-safe base64 raw pixels, its TF Transform schema and vocabulary."""
    rng = np.random.default_rng(3)
    pictures = {
        "train": [("rgb", rng.integers(0, 256, (6, 8, 3), dtype=np.uint8), "goat"),
                  ("grey", rng.integers(0, 256, (5, 7), dtype=np.uint8), "cat")],
        "val": [("rgba", rng.integers(0, 256, (4, 4, 4), dtype=np.uint8), "cat")],
        "test": [("rgb2", rng.integers(0, 256, (9, 3, 3), dtype=np.uint8), "goat")],
    }
    vocab = ["goat", "cat"]  # TF Transform orders a vocabulary by frequency, not by name
    for split, items in pictures.items():
        buf = io.BytesIO()
        for name, array, label in items:
            img = Image.fromarray(array)
            channels = 1 if "L" in img.mode else 3  # what TFRecorder recorded, even for RGBA
            features = {
                "image": _feature_bytes(base64.b64encode(img.tobytes(), altchars=b"-_")),
                "image_height": example.int64_feature([img.height]),
                "image_width": example.int64_feature([img.width]),
                "image_channels": example.int64_feature([channels]),
                "image_name": _feature_bytes(f"{name}.png"),
                "image_uri": _feature_bytes(f"gs://b/{name}.png"),
                "label": example.int64_feature([vocab.index(label)]),
                "split": _feature_bytes(split.upper()),
            }
            records.write_record(buf, example.serialize(features))
        with gzip.open(root / f"{split}-00000-of-00001.tfrecord.gz", "wb") as f:
            f.write(buf.getvalue())
    (root / "transformed_metadata").mkdir()
    schema = "".join(
        f'feature {{\n  name: "{n}"\n  type: {t}\n  presence {{\n    min_fraction: 1.0\n  }}\n'
        f'  shape {{\n  }}\n}}\n'
        for n, t in [("image", "BYTES"), ("image_channels", "INT"), ("image_height", "INT"),
                     ("image_name", "BYTES"), ("image_uri", "BYTES"), ("image_width", "INT"),
                     ("label", "INT"), ("split", "BYTES")])
    (root / "transformed_metadata" / "schema.pbtxt").write_text(schema)
    (root / "transform_fn" / "assets").mkdir(parents=True)
    (root / "transform_fn" / "assets" / "vocab_compute_and_apply_vocabulary_vocabulary"
     ).write_text("\n".join(vocab) + "\n")
    (root / "discarded-data-00000-of-00001").write_text("")
    return pictures


@pytest.mark.slow
def test_tfrecorder_2_output_directories_load(tf, tmp_path):
    job_dir = tmp_path / "tfrecorder-20210702-235702-convert"
    job_dir.mkdir()
    pictures = _legacy_dir(job_dir)
    datasets = tfrecorder.load(str(job_dir))
    assert sorted(datasets) == ["test", "train", "validation"]
    assert datasets.label_names == ["goat", "cat"]
    train = list(datasets["TRAIN"])  # TFRecorder's split keys work
    by_name = {ex["image_name"].numpy().decode(): ex for ex in train}
    for name, array, label in pictures["train"]:
        ex = by_name[f"{name}.png"]
        expected = np.repeat(array[:, :, None], 3, axis=2) if array.ndim == 2 else array
        np.testing.assert_array_equal(ex["image"].numpy(), expected)  # the original pixels
        assert datasets.label_names[int(ex["label"])] == label
    (rgba,) = list(tfrecorder.load(str(job_dir), split="validation", channels=4))
    np.testing.assert_array_equal(rgba["image"].numpy(), pictures["val"][0][1])
    grey = next(iter(tfrecorder.load(str(job_dir), split="train", channels=1)))
    assert grey["image"].shape[2] == 1
    images, labels = next(iter(tfrecorder.load(str(job_dir), split="test", batch_size=2,
                                               image_size=(4, 4), as_supervised=True)))
    assert images.shape == (1, 4, 4, 3) and images.dtype == tf.float32
    assert labels.numpy().tolist() == [0]


def test_tfrecorder_2_output_directories_inspect_and_verify(tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    pictures = _legacy_dir(job_dir)
    look = tfrecorder.inspect(str(job_dir), split="TRAIN", num_records=2,
                              output_dir=str(tmp_path / "look"))
    table = pd.read_csv(os.path.join(look, "data.csv"))
    assert sorted(table["label_name"]) == ["cat", "goat"]
    for name, array, _ in pictures["train"]:
        (png,) = [f for f in os.listdir(look) if f.endswith(f"{name}.png")]
        np.testing.assert_array_equal(np.asarray(Image.open(os.path.join(look, png))), array)
    assert tfrecorder.verify(str(job_dir)).records_per_split == {
        "train": 2, "validation": 1, "test": 1}


# --- 8. the steps of TFRecorder's five sample notebooks ----------------------------------

@pytest.mark.slow  # a conversion end to end
def test_notebook_basic_usage(tmp_path, monkeypatch):
    # df = pd.read_csv(input_file); results = df.tensorflow.to_tfr(output_dir); results
    # (image paths relative to the working directory, as the notebook's were)
    shutil.copytree(SAMPLES, tmp_path / "samples", ignore=shutil.ignore_patterns("*.ipynb"))
    monkeypatch.chdir(tmp_path / "samples")
    df = pd.read_csv("data.csv")
    results = df.tensorflow.to_tfr("./out")
    assert results["metrics"]["good_images"] == 36 and results["metrics"]["bad_images"] == 0
    assert os.path.isdir(results["tfrecord_dir"])


@pytest.mark.slow
def test_notebook_convert_image_directory(tmp_path):
    # tfrecorder.convert(image_dir, output_dir) for IMAGE_DIR/<SPLIT>/<label>/<file>
    for split in ("TRAIN", "VALIDATION", "TEST"):
        for label in ("cat", "goat"):
            folder = tmp_path / "images" / split / label
            folder.mkdir(parents=True)
            (folder / f"{label}-1.jpg").write_bytes(encode(seed=hash((split, label)) % 999))
    results = tfrecorder.convert(str(tmp_path / "images"), str(tmp_path / "out"))
    assert results.rows_per_split == {"train": 2, "validation": 2, "test": 2}
    datasets = tfrecorder.load(results["tfrecord_dir"])
    assert sum(1 for _ in datasets["train"]) == 2


@pytest.mark.slow  # a conversion end to end
def test_notebook_convert_structured_data(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    n = 20
    df = pd.DataFrame({
        "Survived": rng.integers(0, 2, n), "Pclass": rng.integers(1, 4, n),
        "Name": [f"Passenger {i}" for i in range(n)], "Sex": rng.choice(["male", "female"], n),
        "Age": rng.uniform(1, 80, n), "Siblings/Spouses Aboard": rng.integers(0, 4, n),
        "Parents/Children Aboard": rng.integers(0, 3, n), "Fare": rng.uniform(5, 200, n)})
    df["split"] = "train"
    monkeypatch.chdir(tmp_path)  # the notebook writes to './tfrecords'
    results = tfrecorder.convert(
        df,
        "./tfrecords",
        schema=input_schema.Schema({
            "Survived": types.IntegerInput,
            "Pclass": types.IntegerInput,
            "Name": types.StringInput,
            "Sex": types.StringInput,
            "Age": types.FloatInput,
            "Siblings/Spouses Aboard": types.IntegerInput,
            "Parents/Children Aboard": types.IntegerInput,
            "Fare": types.FloatInput,
            "split": types.SplitKey,
        })
    )
    print(results)
    datasets = tfrecorder.load(results["tfrecord_dir"])
    for x in datasets["train"].take(1):
        dtypes = {k: v.dtype.name for k, v in x.items()}
    assert dtypes["Siblings/Spouses Aboard"] == "int64" and dtypes["Fare"] == "float32"
    assert dtypes["Name"] == "string" and len(dtypes) == 8


@pytest.mark.slow  # a conversion end to end
def test_notebook_loading_a_tf_dataset(tmp_path):
    # datasets = tfrecorder.load(tfrecord_dir); datasets.keys(); datasets['TRAIN'];
    # for d in train: d['image_name']
    _legacy_dir(tmp_path)
    datasets = tfrecorder.load(str(tmp_path))
    assert set(datasets.keys()) == {"train", "validation", "test"}
    names = sorted(d["image_name"].numpy() for d in datasets["TRAIN"])
    assert names == [b"grey.png", b"rgb.png"]


@pytest.mark.slow
def test_notebook_dataflow(gcs, tmp_path):
    # df with gs:// image URIs, then to_tfr(output_dir, runner='DataflowRunner', project=...,
    # region=..., tfrecorder_wheel=...); the Dataflow job is built offline (dry run).
    from tfrecorder._writer.wheel import build_wheel

    wheel = build_wheel(str(tmp_path))
    df = pd.DataFrame({"split": ["TRAIN", "VALIDATION", "TEST"] * 2,
                       "image_uri": [f"../tfrecorder/test_data/images/{i}.jpg" for i in range(6)],
                       "label": ["cat"] * 3 + ["goat"] * 3})
    df["image_uri"] = df.image_uri.str.replace("../tfrecorder/", f"gs://{BUCKET}/")
    job = df.tensorflow.to_tfr(output_dir=f"gs://{BUCKET}/results", runner="DataflowRunner",
                               project="my-project", region="us-central1",
                               tfrecorder_wheel=wheel,
                               dataflow_options={"dry_run": True, "no_auth": True})
    assert job["job_id"] is None and job["tfrecord_dir"] == f"gs://{BUCKET}/results"


def test_check_tfrecords_with_a_file_pattern_on_the_command_line(tmp_path, capsys):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    _legacy_dir(job_dir)
    code = cli.main(["check-tfrecords", f"--file_pattern={job_dir}/val*.tfrecord.gz",
                     "--num_records=5", f"--output_dir={tmp_path / 'chk'}"])
    assert code == 0, capsys.readouterr().err
    assert len(pd.read_csv(tmp_path / "chk" / "data.csv")) == 1  # the one validation record
