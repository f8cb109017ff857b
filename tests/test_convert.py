"""End to end: tables -> files on the DirectRunner -> read back with plain TensorFlow."""

import dataclasses
import gzip
import hashlib
import json
import os
import pathlib
import shutil
import warnings

import pandas as pd
import pytest

import tfrecorder
from tfrecorder._folder import metadata
from tfrecorder._writer import run_metadata
from tests.conftest import SAMPLES, encode, read_examples, split_files, timeless


def _files(out):
    return {s: split_files(out, s) for s in metadata.read_manifest(str(out)).splits}


#: sha256 of every file a default conversion of the bundled samples writes. Computed once
#: and written down, so every machine that runs the suite (a laptop, CI) shows it writes
#: exactly these bytes. A change of the on-disk format changes them on purpose: then
#: update them here, and say so in the change. Manifests are compared without the time
#: they were published, rows files without the images' modification times (``timeless``).
SAMPLE_DIGESTS = {
    "data-test.tfrecord-00000-of-00001":
        "11d9b6a2f62ba58f4d3b25b3fe112ff1e1715ea3772fcd51b6b7578221bfe6b5",
    "data-train.tfrecord-00000-of-00001":
        "e8c147cce853bb1b436f6104dfdcd9b5bc8dc0b31ecb822554dd8f4e623ad8ee",
    "data-validation.tfrecord-00000-of-00001":
        "77b900b1735facdd9abd9093e323805c8540c6e311c0ecbb303de2b01c7eb90f",
    "dataset_info.json":
        "c4234b99a19ae06189f24b4084c9ce707f7e26dc1401eaff830e6f8fd858122c",
    "errors.jsonl":
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "features.json":
        "a77a6d7e87ffb0f83a64c9e11011520dc74a221fa74997bb38a8dafd616a1c58",
    "index/data-test.tfrecord-00000-of-00001.idx":
        "132839d1da7638d75d0e353af249722f3f7f45bfd0e1727a36ff0533551f43c0",
    "index/data-train.tfrecord-00000-of-00001.idx":
        "2c26dde296aff9f42898656d746d3a6c70e3f9c0f82b0de7dc1f27758627f214",
    "index/data-validation.tfrecord-00000-of-00001.idx":
        "298da40324d856f76a575e06c3984d6775d78b0c593bbef8e1e4676693e7f9f3",
    "label.labels.txt":
        "93e5345f0b90df40e97f0326ff45e4af5650a010706dfafd2d8a8431bc69a5a3",
    "quality.json":
        "4cb55cedf8fa4e029e9aa7307556482a3abbef9efaed723533144af11eeabd74",
    "rows/data-test.tfrecord-00000-of-00001.rows.jsonl.gz":
        "7e570c579d4a5b2e3c25a4315170fbfd845ea05bcd43329bda5419efac7f5e03",
    "rows/data-train.tfrecord-00000-of-00001.rows.jsonl.gz":
        "f195f983276c6164eeb82d39d03257455ad6cc657c2607062c4bb7a5fc9fffcb",
    "rows/data-validation.tfrecord-00000-of-00001.rows.jsonl.gz":
        "abe745038759d9ca38da78a67f120f5296c075599c14b1c4e4c44c57fb4b2fe1",
    "tfrecorder.json":
        "780ee82f2df9d78fd85035007411ed7c67b9d0ffe7ad85d4d8196ed04ba00b85",
    "versions/00001.json":
        "780ee82f2df9d78fd85035007411ed7c67b9d0ffe7ad85d4d8196ed04ba00b85",
}


@pytest.mark.slow  # a conversion end to end
def test_the_bundled_samples_give_the_same_bytes_on_every_machine(tmp_path):
    # Copied elsewhere first: where the table lies must not show in the output either.
    samples = tmp_path / "elsewhere"
    shutil.copytree(os.path.join(SAMPLES, "images"), samples / "images")
    shutil.copy(os.path.join(SAMPLES, "data.csv"), samples)
    out = tmp_path / "out"
    tfrecorder.convert(str(samples / "data.csv"), str(out))
    found = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            found[path.relative_to(out).as_posix()] = hashlib.sha256(
                timeless(path)).hexdigest()
    assert found == SAMPLE_DIGESTS
    # The version's manifest is the manifest, and the one timestamp is when it was
    # published; rows files stamp each image with its modification time.
    assert (out / "versions" / "00001.json").read_bytes() == (out / "tfrecorder.json").read_bytes()
    manifest = json.loads((out / "tfrecorder.json").read_text())
    assert manifest["published"].endswith("Z") and manifest["version"] == 1
    lines = [json.loads(line) for line in gzip.decompress(
        (out / "rows" / "data-train.tfrecord-00000-of-00001.rows.jsonl.gz").read_bytes()
    ).splitlines()]
    first = lines[0]
    image = samples / first["key"]
    assert first["stamp"] == image.stat().st_mtime_ns
    assert first["size"] == image.stat().st_size
    assert first["sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()


@pytest.mark.slow  # a conversion end to end
def test_samples_round_trip_with_plain_tensorflow(tf, samples_converted):
    folder, result = samples_converted()  # tfrecorder.convert(samples/data.csv, folder)
    out = pathlib.Path(folder)
    table = pd.read_csv(os.path.join(SAMPLES, "data.csv"), keep_default_na=False)
    assert result.rows_in == len(table) == result.rows_written
    assert result.labels == ["circle", "square", "triangle"]

    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "image_name": tf.io.FixedLenFeature([], tf.string),
        "image_format": tf.io.FixedLenFeature([], tf.string),
        "image_height": tf.io.FixedLenFeature([], tf.int64),
        "image_width": tf.io.FixedLenFeature([], tf.int64),
        "image_channels": tf.io.FixedLenFeature([], tf.int64),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    seen = {}
    for split, files in _files(out).items():
        for raw in tf.data.TFRecordDataset(files):
            ex = tf.io.parse_single_example(raw, spec)
            name = ex["image_name"].numpy().decode()
            decoded = tf.io.decode_image(ex["image"], expand_animations=False)
            assert decoded.shape.as_list() == [ex["image_height"].numpy(), ex["image_width"].numpy(),
                                               ex["image_channels"].numpy()]
            seen[name] = (split, ex["image"].numpy(), int(ex["label"]), ex["image_format"].numpy())
    assert len(seen) == len(table)
    for _, row in table.iterrows():
        split, data, label, fmt = seen[os.path.basename(row.image_uri)]
        assert data == open(os.path.join(SAMPLES, row.image_uri), "rb").read()
        assert result.labels[label] == row.label
        assert fmt == (b"png" if row.image_uri.endswith(".png") else b"jpeg")
        if row.split:
            assert split == {"TRAIN": "train", "VALIDATION": "validation", "TEST": "test"}[row.split]
    assert open(out / "label.labels.txt").read() == "circle\nsquare\ntriangle\n"


@pytest.mark.slow  # a conversion end to end
def test_nothing_is_lost_bad_rows_are_quarantined_with_reasons(tf, tmp_path, image_table):
    rows = []
    for i in range(12):
        rows.append(["TRAIN", image_table(f"good/{i}.jpg", encode(seed=i)), "ok"])
    bad = {
        "missing": (str(tmp_path / "nowhere.jpg"), "image file not found"),
        "empty": (image_table("empty.jpg", b""), "empty file"),
        "truncated": (image_table("trunc.jpg", encode(seed=99)[:-50]), "truncated JPEG"),
        "text": (image_table("text.jpg", b"hello, I am text\n"), "not a readable image"),
        "truncated png": (image_table("trunc.png", encode(fmt="PNG")[:-30]), "truncated PNG"),
    }
    for uri, _ in bad.values():
        rows.append(["TEST", uri, "bad"])
    df = pd.DataFrame(rows, columns=["split", "image_uri", "label"])
    out = tmp_path / "out"
    result = df.tensorflow.to_tfrecord(str(out), max_error_fraction=0.5)

    assert result.rows_in == len(df) == result.rows_written + result.rows_quarantined
    assert result.rows_quarantined == len(bad)
    written = sum(len(read_examples(tf, files)) for files in _files(out).values())
    assert written == result.rows_written == 12
    errors = [json.loads(line) for line in open(out / "errors.jsonl")]
    assert len(errors) == len(bad)
    by_uri = {e["image_uri"]: e for e in errors}
    for uri, reason in bad.values():
        e = by_uri[uri]
        assert reason in e["reason"]
        assert e["values"] == {"split": "TEST", "image_uri": uri, "label": "bad"}
        assert e["row"] == df.index[df.image_uri == uri][0]
    assert "QUARANTINED" in str(result) and "5 rows quarantined" in result._repr_html_()
    # The summary counts the rows of each kind of reason, the most common first.
    assert result.quarantine_reasons == {r: 1 for _, r in sorted(bad.values(),
                                                                key=lambda b: b[1])}
    assert f"rows ({run_metadata.counted(result.quarantine_reasons)}), listed in" in str(result)


@pytest.mark.slow
def test_missing_files_over_the_budget_stop_the_run_before_any_image_is_read(tmp_path,
                                                                          image_table):
    # The broken file is found only by reading it: its row is not among the bad ones,
    # so no image was read; the missing files' rows are quarantined as a run would.
    good = [image_table(f"{i}.jpg", encode(seed=i)) for i in range(4)]
    broken = image_table("broken.jpg", b"not an image")
    gone = [str(tmp_path / f"gone/{i}.jpg") for i in range(3)]
    df = pd.DataFrame({"split": "TRAIN", "image_uri": good + [broken] + gone,
                       "label": ["a", "b"] * 4})
    out = tmp_path / "out"
    with pytest.raises(tfrecorder.ConversionError) as e:
        df.tensorflow.to_tfrecord(str(out))
    assert str(e.value).startswith(
        f"3 of 8 rows were quarantined: more than max_error_fraction=0.1. Fix: check where "
        f"the table's image paths point")
    assert (f"Reasons: 3 image file not found. First rows: row 5: image file not found: "
            f"{gone[0]}; row 6: ") in str(e.value)
    assert f"Every bad row is listed in {out / 'errors.jsonl'}" in str(e.value)
    errors = [json.loads(line) for line in open(out / "errors.jsonl")]
    assert [(q["row"], q["stage"], q["reason"]) for q in errors] == [
        (5 + i, "read", f"image file not found: {uri}") for i, uri in enumerate(gone)]
    assert errors[0]["values"] == {"split": "TRAIN", "image_uri": gone[0], "label": "b"}
    assert not (out / "tfrecorder.json").exists()

    # Over a complete output, which stays: the errors file goes to the run's folder.
    df.iloc[:4].tensorflow.to_tfrecord(str(out), mode="overwrite")
    with pytest.raises(tfrecorder.ConversionError, match=r"3 of 8 rows .* listed in .*"
                       r"\.tfrecorder-tmp.*errors\.jsonl"):
        df.tensorflow.to_tfrecord(str(out), mode="overwrite")
    assert tfrecorder.verify(str(out)).records == 4

    # Within the budget, those rows go through the run and are quarantined there.
    result = df.tensorflow.to_tfrecord(str(tmp_path / "within"), max_error_fraction=0.5)
    assert (result.rows_written, result.rows_quarantined) == (4, 4)


def test_an_image_missing_on_two_rows_is_two_bad_rows_before_the_run(tmp_path, image_table):
    # Multi-label: one record of the image's two rows; each row is listed.
    good = image_table("a.jpg", encode())
    gone = str(tmp_path / "gone.jpg")
    df = pd.DataFrame({"split": "TRAIN", "image_uri": [good, gone, gone],
                       "label": ["x", "x", "y"]})
    with pytest.raises(tfrecorder.ConversionError, match="^2 of 3 rows were quarantined"):
        df.tensorflow.to_tfrecord(str(tmp_path / "out"), multi_label=True)
    errors = [json.loads(line) for line in open(tmp_path / "out" / "errors.jsonl")]
    assert [(q["row"], q["values"]["label"]) for q in errors] == [(1, "x"), (2, "y")]


@pytest.mark.slow  # a conversion end to end
def test_webp_is_kept_and_what_re_encoding_cost_is_in_the_summary(tf, tmp_path, image_table):
    import io

    from PIL import Image

    frames = [Image.open(io.BytesIO(encode(seed=i, size=(64, 48)))) for i in range(2)]
    animated = io.BytesIO()
    frames[0].save(animated, "WEBP", save_all=True, append_images=frames[1:])
    files = {"still.webp": encode(fmt="WEBP", size=(64, 48)), "a.jpg": encode(seed=2),
             "a.tif": encode(fmt="TIFF", seed=3, size=(64, 48)),
             "b.tif": encode(fmt="TIFF", seed=4, size=(64, 48)),
             "moving.webp": animated.getvalue()}
    df = pd.DataFrame({"split": ["TRAIN", "TRAIN", "TRAIN", "TEST", "TEST"],
                       "image_uri": [image_table(n, d) for n, d in files.items()],
                       "label": "x"})
    out = tmp_path / "out"
    result = df.tensorflow.to_tfrecord(str(out))
    stored = {}
    for split in ("train", "test"):
        for ex in read_examples(tf, split_files(out, split)):
            stored[ex["image_name"][0].decode()] = (ex["image_format"][0].decode(),
                                                   ex["image"][0])
    assert stored["still.webp"] == ("webp", files["still.webp"])  # as it is
    assert {n: f for n, (f, _) in stored.items()} == {
        "still.webp": "webp", "a.jpg": "jpeg", "a.tif": "png", "b.tif": "png",
        "moving.webp": "png"}
    cost = {fmt: [files[n] for n in files if stored[n][0] == "png" and n.endswith(ext)]
            for fmt, ext in (("tiff", ".tif"), ("webp", ".webp"))}
    assert result.reencoded == {
        fmt: {"images": len(sources), "source_bytes": sum(map(len, sources)),
              "stored_bytes": sum(len(stored[n][1]) for n in files
                                  if n.endswith(ext) and stored[n][0] == "png")}
        for (fmt, sources), ext in zip(cost.items(), (".tif", ".webp"))}
    source = sum(c["source_bytes"] for c in result.reencoded.values())
    written = sum(c["stored_bytes"] for c in result.reencoded.values())
    from tfrecorder._writer.result import human_bytes

    assert (f"  RE-ENCODED          3 image(s) stored as PNG (tiff 2, webp 1): "
            f"{human_bytes(source)} of files became {human_bytes(written)}, "
            f"{written / source:.1f}x") in str(result).splitlines()
    assert "re-encoded" in result._repr_html_()


@pytest.mark.slow  # a conversion end to end
def test_same_input_gives_byte_identical_files(tmp_path):
    csv = os.path.join(SAMPLES, "data.csv")
    tfrecorder.convert(csv, str(tmp_path / "a"), num_shards=2)
    tfrecorder.convert(csv, str(tmp_path / "b"), num_shards=2)
    a = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*")
               if p.is_file())
    assert a == sorted(str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*")
                       if p.is_file())
    assert "data-train.tfrecord-00001-of-00002" in a and ".tfrecorder-tmp" not in a
    assert "index/data-train.tfrecord-00001-of-00002.idx" in a
    for name in a:
        # (but for the time each was published: tfrecorder.json, versions/00001.json)
        assert timeless(tmp_path / "a" / name) == timeless(tmp_path / "b" / name), name


@pytest.mark.slow  # a conversion end to end
def test_existing_output_is_refused_unless_overwrite(tmp_path):
    csv = os.path.join(SAMPLES, "data.csv")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(tfrecorder.OutputExistsError, match="notes.txt.*mode='overwrite'"):
        tfrecorder.convert(csv, str(out))
    assert os.listdir(out) == ["notes.txt"]
    tfrecorder.convert(csv, str(out), mode="overwrite", num_shards=3)
    tfrecorder.convert(csv, str(out), mode="overwrite", num_shards=1)
    names = sorted(os.listdir(out))
    assert "notes.txt" in names  # not ours: left alone
    assert not any("-of-00003" in n for n in names)  # the old run's shards are gone
    assert isinstance(tfrecorder.OutputExistsError("x"), FileExistsError)


def test_gzip_shards_are_readable(tf, samples_converted):
    out = pathlib.Path(samples_converted(compression="gzip")[0])
    files = _files(out)
    assert all(f.endswith(".gz") for fs in files.values() for f in fs)
    assert sum(len(read_examples(tf, fs, "GZIP")) for fs in files.values()) == 36
    assert metadata.read_manifest(str(out)).compression == "gzip"


def test_result_keeps_tfrecorder_keys_and_renders(tmp_path):
    out = str(tmp_path / "out")
    df = pd.read_csv(os.path.join(SAMPLES, "data.csv"))
    df["image_uri"] = SAMPLES + "/" + df["image_uri"]
    result = df.tensorflow.to_tfr(out, runner="DirectRunner")
    with pytest.warns(DeprecationWarning, match=r"write result\.output_dir") as caught:
        assert result["tfrecord_dir"] == out == result.output_dir
    assert {w.filename for w in caught} == {__file__}  # the user's line, not ours
    # 36 rows on the DirectRunner: its steps run in this process, without Beam.
    assert result["job_id"] == result.job_id and result.job_id.startswith("here-")
    assert result["metrics"]["rows_written"] == 36
    assert sum(result.rows_per_split.values()) == 36 and set(result.rows_per_split) == {
        "train", "validation", "test"}
    html = result._repr_html_()
    assert "<table>" in html and "train" in html and out in html
    with pytest.raises(KeyError, match="tfrecord_dir"):
        result["nope"]


@pytest.mark.slow
def test_image_directory_source(tf, tmp_path, image_table):
    for split in ("train", "test"):
        for label in ("cat", "dog"):
            for i in range(2):
                image_table(f"tree/{split}/{label}/{i}.png", encode(fmt="PNG", seed=i))
    out = tmp_path / "out"
    result = tfrecorder.convert(str(tmp_path / "tree"), str(out))
    assert result.rows_per_split == {"train": 4, "test": 4}
    assert result.labels == ["cat", "dog"]


@pytest.mark.slow  # a conversion end to end
def test_integer_labels_and_an_explicit_vocabulary_file(tmp_path, image_table):
    a = image_table("a.jpg", encode(seed=1))
    b = image_table("b.jpg", encode(seed=2))
    r = tfrecorder.convert(pd.DataFrame({"split": ["TRAIN", "TEST"], "image_uri": [a, b],
                                         "label": [4, 1]}), str(tmp_path / "o1"))
    assert r.labels == ["0", "1", "2", "3", "4"]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("zebra\nant\n")
    r = tfrecorder.convert(pd.DataFrame({"split": ["TRAIN", "TEST"], "image_uri": [a, b],
                                         "label": ["ant", "zebra"]}), str(tmp_path / "o2"),
                           label_vocabulary=str(vocab))
    assert r.labels == ["zebra", "ant"]


def test_schema_errors_come_before_anything_is_written(tmp_path):
    df = pd.DataFrame({"split": ["TRAIN", "SOMETIMES"], "image_uri": ["a.jpg", None],
                       "label": ["x", "y"]})
    with pytest.raises(tfrecorder.SchemaError) as e:
        df.tensorflow.to_tfrecord(str(tmp_path / "out"))
    assert len(e.value.problems) == 2
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("options,match", [
    ({"compression": "zip"}, "compression='zip'"),
    ({"num_shard": 3}, "did you mean 'num_shards'"),
    ({"name": "my-data"}, "name='my-data'"),
    ({"runner": "SparkRuner"}, "runner='SparkRuner' is not a Beam runner; did you mean 'SparkRunner'"),
    ({"split_fractions": {"train": 0.5}}, "add up to 0.5"),
])
def test_bad_options_are_config_errors(tmp_path, options, match):
    with pytest.raises(tfrecorder.ConfigError, match=match):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(tmp_path / "o"), **options)


@pytest.mark.slow
def test_tfds_reads_the_output_directory(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    out = tmp_path / "out"
    shutil.copytree(SAMPLES, tmp_path / "s")
    result = tfrecorder.convert(str(tmp_path / "s" / "data.csv"), str(out), name="shapes")
    builder = tfds.builder_from_directory(str(out))
    for split, n in result.rows_per_split.items():
        ds = builder.as_dataset(split=split)
        assert len(ds) == n
        for ex in ds.take(2):
            assert ex["image"].dtype.name == "uint8" and ex["image"].shape[-1] == 3
            assert 0 <= int(ex["label"]) < 3
    assert builder.info.features["label"].names == ["circle", "square", "triangle"]
    assert len(builder.as_dataset(split="train[:10%]")) == round(result.rows_per_split["train"] / 10)


def test_label_distribution_per_split(samples_converted):
    result = samples_converted()[1]  # tfrecorder.convert(samples/data.csv, a folder)
    table = pd.read_csv(os.path.join(SAMPLES, "data.csv"), keep_default_na=False)
    dist = result.label_distribution()
    assert list(dist.index) == ["circle", "square", "triangle"]
    assert list(dist.columns) == ["train", "validation", "test"]
    assert dist.sum(axis=1).to_dict() == table.label.value_counts().to_dict()
    assert dist.sum().to_dict() == result.rows_per_split
    html = result._repr_html_()
    assert "Records per label" in html and html.count("title='validation: 2'") == 3


def test_to_tfr_takes_tfrecorder_positional_order(tmp_path):
    df = pd.read_csv(os.path.join(SAMPLES, "data.csv"))
    df["image_uri"] = SAMPLES + "/" + df["image_uri"]
    out = str(tmp_path / "out")
    # output_dir, schema, runner, project, region, wheel, dataflow_options, job_label,
    # compression, num_shards
    result = df.tensorflow.to_tfr(out, None, "DirectRunner", None, None, None, None, None,
                                  "gzip", 2)
    assert result.shards_per_split["train"] == 2
    assert metadata.read_manifest(out).compression == "gzip"


def _detection_csv(tmp_path, image_table):
    a, b = image_table("a.jpg", encode(seed=1)), image_table("b.jpg", encode(seed=2))
    path = tmp_path / "boxes.csv"
    path.write_text(f"TRAIN,{a},car,0.1,0.2,,,0.5,0.6,,\nTRAIN,{a},cat,0.3,0.1,,,0.9,0.4,,\n"
                    f"TEST,{b},,,,,,,,,\n")
    return str(path), None


def _tabular(tmp_path, image_table):
    from tfrecorder import types

    df = pd.DataFrame({"split": ["TRAIN", "TEST"], "Age": [3.0, float("nan")],
                       "Kind": ["a", "b"], "Name": ["x", "y"], "Survived": [0, 1]})
    schema = {"split": types.SplitKey, "Age": types.FloatInput(optional=True),
              "Kind": types.CategoricalInput, "Name": types.StringInput,
              "Survived": types.IntegerLabel}
    return df, schema


@pytest.mark.parametrize("make", [
    lambda tmp_path, image_table: (os.path.join(SAMPLES, "data.csv"), None),
    _tabular,
    _detection_csv,
], ids=["images", "tabular", "detection"])
def test_every_record_holds_exactly_the_features_the_manifest_declares(tmp_path, image_table,
                                                                      make):
    from tfrecorder._folder import example
    from tfrecorder._readers import inspection
    from tfrecorder._folder import view

    source, schema = make(tmp_path, image_table)
    out = str(tmp_path / "out")
    tfrecorder.convert(source, out, schema=schema)
    m = metadata.read_manifest(out)
    declared = set(m.features)
    seen = 0
    for split in m.splits:
        for raw in inspection.iter_records(view.open_version(out).view(split)):
            assert set(example.parse(raw)) == declared
            seen += 1
    assert seen == sum(s.num_examples for s in m.splits.values()) > 0


@pytest.mark.slow
def test_pre_sized_conversion_records_the_option_and_the_stored_sizes(tf, tmp_path, image_table):
    from PIL import Image as PILImage
    import io as _io
    import json as _json

    def jpeg(w, h, seed):
        img = PILImage.frombytes("RGB", (w, h), bytes((i * 7 + seed) % 256 for i in range(w * h * 3)))
        out = _io.BytesIO()
        img.save(out, "JPEG", quality=95)
        return out.getvalue()

    big = image_table("big.jpg", jpeg(640, 480, 1))
    tall = image_table("tall.jpg", jpeg(300, 500, 2))
    small = image_table("small.jpg", jpeg(120, 90, 3))
    df = pd.DataFrame({"split": "TRAIN", "image_uri": [big, tall, small], "label": ["a", "b", "a"]})
    out = tmp_path / "out"
    result = tfrecorder.convert(df, str(out), shorter_side=128, jpeg_quality=85, num_shards=2)
    assert result.rows_written == 3
    m = metadata.read_manifest(str(out))
    assert m.image_options == {"shorter_side": 128, "jpeg_quality": 85}
    assert "shorter side over 128 px" in _json.load(open(out / "dataset_info.json"))["description"]
    sizes = {}
    for ex in read_examples(tf, [f for fs in _files(out).values() for f in fs]):
        decoded = tf.io.decode_image(ex["image"][0]).numpy()
        assert list(decoded.shape) == [ex["image_height"][0], ex["image_width"][0],
                                       ex["image_channels"][0]]
        sizes[ex["image_name"][0].decode()] = (ex["image_height"][0], ex["image_width"][0])
        if ex["image_name"][0] == b"small.jpg":
            assert ex["image"][0] == open(small, "rb").read()  # already small: as it was
    assert sizes == {"big.jpg": (128, 171), "tall.jpg": (213, 128), "small.jpg": (90, 120)}
    batch = next(iter(tfrecorder.load(str(out), split="train", batch_size=3,
                                      image_size=(128, 128))))
    assert batch["image"].shape == (3, 128, 128, 3)


def test_pre_sizing_options_are_checked(tmp_path):
    for kw, match in [({"shorter_side": 0}, "shorter_side=0"),
                      ({"shorter_side": "256"}, "shorter_side='256'"),
                      ({"jpeg_quality": 101}, "jpeg_quality=101")]:
        with pytest.raises(tfrecorder.ConfigError, match=match):
            tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(tmp_path / "o"), **kw)


def _unassigned_images(folder, n):
    """``folder/data.csv`` listing ``n`` distinct JPEGs of ``folder/images`` by paths
    relative to it, every row unassigned: the CSV and its rows ``(path, label)``."""
    (folder / "images").mkdir(parents=True)
    listed = []
    for i in range(n):
        (folder / "images" / f"{i}.jpg").write_bytes(encode(seed=i))
        listed.append((f"images/{i}.jpg", "cat" if i % 2 else "dog"))
    csv = folder / "data.csv"
    csv.write_text("".join(f",{path},{label}\n" for path, label in listed))
    return csv, listed


def _split_of_each_image(out):
    """Each record's split by its image's file name, from the rows files."""
    from tfrecorder._folder import rows

    return {os.path.basename(e["key"]): e["split"]
            for path in sorted((out / "rows").iterdir()) for e in rows.read(str(path))}


@pytest.mark.slow
def test_unassigned_rows_land_in_the_same_split_however_their_paths_are_written(
        tmp_path, monkeypatch):
    csv, listed = _unassigned_images(tmp_path / "data", 60)
    monkeypatch.chdir(tmp_path)
    frame = pd.DataFrame({"split": [""] * len(listed),
                          "image_uri": [path for path, _ in listed],
                          "label": [label for _, label in listed]})
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tmp_path / "data", moved)
    tables = {
        "csv": str(csv),  # relative to the CSV's folder (the shell)
        "cwd": frame.assign(image_uri="./data/" + frame.image_uri),  # a notebook's
        "absolute": frame.assign(image_uri=str(tmp_path / "data") + "/" + frame.image_uri),
        "copied": frame.assign(image_uri=str(moved) + "/" + frame.image_uri),
    }
    found = {}
    for name, table in tables.items():
        tfrecorder.convert(table, str(tmp_path / name))
        found[name] = _split_of_each_image(tmp_path / name)
    assert len(found["csv"]) == 60 and len(set(found["csv"].values())) == 3
    for name in tables:
        assert found[name] == found["csv"], name


@pytest.mark.slow
def test_one_mode_says_what_happens_to_the_folder(tmp_path):
    csv = os.path.join(SAMPLES, "data.csv")
    out = tmp_path / "out"
    tfrecorder.convert(csv, str(out), num_shards=1)
    with pytest.raises(tfrecorder.OutputExistsError):
        tfrecorder.convert(csv, str(out), mode="create")  # the default, named
    result = tfrecorder.convert(csv, str(out), mode="overwrite", num_shards=2)
    assert result.shards_per_split["train"] == 2
    with pytest.warns(DeprecationWarning, match='old spelling of mode="overwrite"') as caught:
        assert tfrecorder.Options(overwrite=True).mode == "overwrite"  # the old spelling
    assert caught[0].filename == __file__  # from the user's line
    with warnings.catch_warnings():  # beside its mode, or copied with it: no warning
        warnings.simplefilter("error")
        opts = tfrecorder.Options(mode="overwrite", overwrite=True)
        dataclasses.replace(opts, num_shards=2)
    for mode in ("update", "append"):
        with pytest.raises(tfrecorder.ConfigError, match=f"mode='{mode}' and overwrite=True"):
            tfrecorder.convert(csv, str(out), mode=mode, overwrite=True)
    with pytest.raises(tfrecorder.ConfigError, match="mode='upsert'.*'create'"):
        tfrecorder.Options(mode="upsert")


def test_options_are_given_as_one_object_or_as_keywords_never_both(tmp_path):
    csv = os.path.join(SAMPLES, "data.csv")
    given = tfrecorder.Options(num_shards=1, name="flowers")
    result = tfrecorder.convert(csv, str(tmp_path / "a"), options=given)
    assert result.shards_per_split == {"train": 1, "validation": 1, "test": 1}
    assert metadata.read_manifest(str(tmp_path / "a")).name == "flowers"
    for extra in ({"num_shards": 2}, {"compression": "gzip"}, {"seed": 1}):
        with pytest.raises(tfrecorder.ConfigError, match=f"options= and {next(iter(extra))}="):
            tfrecorder.convert(csv, str(tmp_path / "b"), options=given, **extra)
    assert not (tmp_path / "b").exists()
    with pytest.raises(tfrecorder.ConfigError, match="options=.*tfrecorder.Options"):
        tfrecorder.convert(csv, str(tmp_path / "b"), options={"num_shards": 1})


def test_dataflow_settings_are_grouped_and_refused_with_another_runner():
    grouped = tfrecorder.Options(runner="DataflowRunner", dataflow=tfrecorder.Dataflow(
        project="my-project", region="us-central1", wait=True))
    flat = tfrecorder.Options(runner="DataflowRunner", project="my-project",
                              region="us-central1", wait=True)
    assert grouped == flat and flat.project == "my-project" and flat.wait
    for setting in ({"project": "p"}, {"wait": True},
                    {"dataflow": tfrecorder.Dataflow(region="us-central1")}):
        with pytest.raises(tfrecorder.ConfigError, match="runner='DirectRunner'"):
            tfrecorder.Options(**setting)
    # TFRecorder 2.0's callers pass job_label positionally whatever the runner.
    assert tfrecorder.Options(job_label="create-tfrecords").job_label == "create-tfrecords"
    with pytest.raises(tfrecorder.ConfigError, match="project= given twice"):
        tfrecorder.Options(runner="DataflowRunner", project="a",
                           dataflow=tfrecorder.Dataflow(project="b"))


def test_an_option_that_needs_another_is_refused_without_it():
    for alone, needed in [({"near_distance": 10}, "near_duplicates=True"),
                          ({"jpeg_quality": 80}, "shorter_side="),
                          ({"compare": "content"}, "mode='update'")]:
        with pytest.raises(tfrecorder.ConfigError, match=f"{next(iter(alone))}=.*{needed}"):
            tfrecorder.Options(**alone)
    tfrecorder.Options(near_distance=10, near_duplicates=True)
    tfrecorder.Options(jpeg_quality=80, shorter_side=256)
    tfrecorder.Options(compare="content", mode="append")
