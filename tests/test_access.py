"""The framework-free random-access reader: records, features, order and parts."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._folder import index, layout, metadata
from tfrecorder._folder import records
from tfrecorder._errors import ConfigError, CorruptRecordError, OutputChangedError
from tests.conftest import BUCKET, SAMPLES, encode, split_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def out(tmp_path_factory, samples_converted):
    # A copy: tests here add and remove its index files.
    folder = tmp_path_factory.mktemp("access") / "out"
    shutil.copytree(samples_converted(num_shards=3)[0], folder)
    return str(folder)


def _tf_records(tf, out, split):
    return [r.numpy() for r in tf.data.TFRecordDataset(split_files(out, split))]


def _without_index_files(out):
    for shard in [s for info in metadata.read_manifest(out).splits.values() for s in info.shards]:
        path = os.path.join(out, index.name(shard.file))
        if os.path.exists(path):
            os.remove(path)


def _write_index_files(out):
    for info in metadata.read_manifest(out).splits.values():
        for shard in info.shards:
            path = os.path.join(out, index.name(shard.file))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(os.path.join(out, shard.file), "rb") as f:
                text = index.format(records.scan(f))
            with open(path, "wb") as f:
                f.write(text)


@pytest.mark.slow  # a conversion end to end
@pytest.mark.parametrize("with_index", [True, False])
def test_every_record_equals_tensorflows_in_file_order(tf, out, with_index):
    (_write_index_files if with_index else _without_index_files)(out)
    for split in ("train", "validation", "test"):
        reader = access.Reader(out, split)
        expected = _tf_records(tf, out, split)
        assert len(reader) == len(expected) == metadata.read_manifest(out).splits[split].num_examples
        assert [reader.record(i) for i in range(len(reader))] == expected
        assert reader.record(-1) == expected[-1]
        with pytest.raises(IndexError, match=f"record {len(reader)} of split '{split}'"):
            reader.record(len(reader))


def test_index_files_are_what_the_reader_follows(out):
    _write_index_files(out)
    reader = access.Reader(out, "TRAIN")  # TFRecorder's spelling works too
    shard = metadata.read_manifest(out).splits["train"].shards[0]
    path, offset, length = reader.locate(1)
    assert (path, offset) == (os.path.join(out, shard.file), reader.locate(0)[2])
    idx = os.path.join(out, index.name(shard.file))
    entries = index.parse(open(idx, "rb").read())
    shifted = list(entries)
    shifted[1] = (entries[1][0], entries[1][1] + 1)   # one byte too long, the next one short
    shifted[2] = (entries[2][0] + 1, entries[2][1] - 1)
    open(idx, "wb").write(index.format(shifted))
    reader = access.Reader(out, "train")
    assert reader.record(0) and reader.locate(1)[2] == entries[1][1] + 1
    with pytest.raises(CorruptRecordError, match="where the index says"):
        reader.record(1)
    open(idx, "wb").write(index.format(entries).replace(b" ", b",", 1))
    with pytest.raises(CorruptRecordError, match="idx, line 1: .* is not .OFFSET LENGTH"):
        access.Reader(out, "train").record(0)
    open(idx, "wb").write(index.format(entries[:-1]))
    with pytest.raises(CorruptRecordError, match=f"lists {len(entries) - 1} records"):
        access.Reader(out, "train").record(0)
    _without_index_files(out)


def test_the_features_are_the_stored_image_and_label(out):
    table = pd.read_csv(os.path.join(SAMPLES, "data.csv"))
    by_name = {os.path.basename(u): (u, lab) for u, lab in zip(table.image_uri, table.label)}
    reader = access.Reader(out, "train")
    names = reader.manifest.label_names
    for i in range(len(reader)):
        ex = reader.features(i)
        uri, label = by_name[ex["image_name"].decode()]
        assert ex["image"] == open(os.path.join(SAMPLES, uri), "rb").read()
        assert names[ex["label"]] == label and isinstance(ex["label"], int)
        assert isinstance(ex["image_height"], int) and ex["image_format"] in (b"jpeg", b"png")


def test_values_of_some_keys_are_those_of_the_whole_record(out):
    reader = access.Reader(out, "train")
    specs = reader.manifest.features
    for data in reader.records(range(len(reader))):
        whole = access.values(data, specs)
        assert access.values(data, specs, keys=["label", "image"]) == {
            "image": whole["image"], "label": whole["label"]}
        assert access.values(data, specs, keys=("image_height", "no_such_key")) == {
            "image_height": whole["image_height"]}
    with pytest.raises(TypeError, match=r"keys='image': give a list of feature names"):
        access.values(data, specs, keys="image")


def _compare_with_tensorflow(tf, out, split, tf_spec):
    reader = access.Reader(out, split)
    assert len(reader) > 0
    for i in range(len(reader)):
        ours = reader.features(i)
        theirs = tf.io.parse_single_example(reader.record(i), tf_spec)
        assert set(ours) == set(theirs)
        for key, value in theirs.items():
            if isinstance(value, tf.SparseTensor):
                value = tf.sparse.to_dense(value)
            expected = np.asarray(value.numpy())
            got = ours[key]
            if np.ndim(expected) == 0:
                assert type(got) is type(expected.item()) and got == expected.item(), key
            else:
                expected = expected.reshape(got.shape)
                assert got.dtype == expected.dtype or (got.dtype == object and
                                                       expected.dtype == object), key
                np.testing.assert_array_equal(got, expected, err_msg=key)


@pytest.mark.slow  # a conversion end to end
def test_scalar_and_list_features_parse_as_tensorflow_parses_them(tf, tmp_path):
    df = pd.DataFrame({
        "split": ["TRAIN"] * 4,
        "survived": [0, 1, 1, 0],
        "pclass": [3, -1, 2, 1 << 40],
        "name": ["Braund", "Cumings", "Zoë", "x"],
        "age": [22.5, None, 26.0, float("nan")],
        "fare": [7.25, 71.2833, -7.925, 0.0],
    })
    schema = tfrecorder.input_schema.Schema({
        "split": tfrecorder.types.SplitKey, "survived": tfrecorder.types.IntegerLabel,
        "pclass": tfrecorder.types.IntegerInput, "name": tfrecorder.types.StringInput,
        "age": tfrecorder.types.FloatInput(optional=True), "fare": tfrecorder.types.FloatInput})
    out = str(tmp_path / "out")
    tfrecorder.convert(df, out, schema=schema)
    spec = {"survived": tf.io.FixedLenFeature([], tf.int64),
            "pclass": tf.io.FixedLenFeature([], tf.int64),
            "name": tf.io.FixedLenFeature([], tf.string),
            "age": tf.io.VarLenFeature(tf.float32),
            "fare": tf.io.FixedLenFeature([], tf.float32)}
    _compare_with_tensorflow(tf, out, "train", spec)
    ages = sorted(access.Reader(out, "train").features(i)["age"].tolist() for i in range(4))
    assert ages == [[], [], [22.5], [26.0]]


@pytest.mark.slow  # a conversion end to end
def test_multi_label_and_box_lists_parse_as_tensorflow_parses_them(tf, tmp_path, image_table):
    pics = [image_table(f"img/{i}.jpg", encode(seed=i)) for i in range(3)]
    csv_path = tmp_path / "boxes.csv"
    csv_path.write_text(
        f"TRAIN,{pics[0]},car,0.1,0.2,,,0.5,0.6,,\n"
        f"TRAIN,{pics[0]},person,0.3,0.1,0.9,0.1,0.9,0.4,0.3,0.4\n"
        f"TRAIN,{pics[1]},car,0,0,,,1,1,,\n"
        f"TRAIN,{pics[2]},,,,,,,,,\n")
    out = str(tmp_path / "boxes")
    tfrecorder.convert(str(csv_path), out)
    spec = {k: (tf.io.VarLenFeature(getattr(tf, {"bytes": "string", "int64": "int64",
                                                  "float": "float32"}[f.dtype]))
                if f.varlen else
                tf.io.FixedLenFeature([], {"bytes": tf.string, "int64": tf.int64}[f.dtype]))
            for k, f in metadata.read_manifest(out).features.items()}
    _compare_with_tensorflow(tf, out, "train", spec)
    reader = access.Reader(out, "train")
    boxes = {reader.features(i)["image_name"]: reader.features(i)["objects/bbox"]
             for i in range(len(reader))}
    assert boxes[b"0.jpg"].shape == (2, 4) and boxes[b"2.jpg"].shape == (0, 4)

    csv_path.write_text(f"TRAIN,{pics[0]},cat,dog\nTRAIN,{pics[1]},dog,,\n")
    tfrecorder.convert(str(csv_path), out, mode="overwrite")
    reader = access.Reader(out, "train")
    labels = {reader.features(i)["image_name"]: reader.features(i)["label"].tolist()
              for i in range(len(reader))}
    assert labels == {b"0.jpg": [0, 1], b"1.jpg": [1]}


@pytest.mark.slow  # a conversion end to end
def test_gzip_directories_are_refused(samples_converted):
    out = samples_converted(compression="gzip")[0]  # read only
    with pytest.raises(ConfigError, match="gzip-compressed shards.*compression=None"):
        access.Reader(out, "train")


def test_unknown_split_and_missing_manifest(out, tmp_path):
    with pytest.raises(ConfigError, match=r"split 'holdout' is not in .*\['test', 'train'"):
        access.Reader(out, "holdout")
    with pytest.raises(tfrecorder.IncompleteOutputError):
        access.Reader(str(tmp_path), "train")


@pytest.mark.slow  # a conversion end to end
def test_a_damaged_record_names_the_shard_and_offset(tmp_path):
    out = str(tmp_path / "out")
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), out, num_shards=1)
    reader = access.Reader(out, "train")
    path, offset, length = reader.locate(2)
    with open(path, "r+b") as f:
        f.seek(offset + 40)
        byte = f.read(1)
        f.seek(offset + 40)
        f.write(bytes([byte[0] ^ 0xFF]))
    reader = access.Reader(out, "train")
    assert reader.record(1) and reader.record(3)
    with pytest.raises(CorruptRecordError, match=f"record at byte {offset}: bad data checksum"):
        reader.record(2)


@pytest.mark.slow  # a conversion end to end
def test_a_directory_converted_again_while_read_is_an_error(tmp_path, samples_converted):
    out = str(tmp_path / "out")
    shutil.copytree(samples_converted(num_shards=2)[0], out)  # a conversion of its own
    path = os.path.join(out, layout.MANIFEST)

    def set_generation(g):
        doc = json.load(open(path))
        doc["generation"] = g
        open(path, "w").write(json.dumps(doc))

    set_generation("1")
    reader = access.Reader(out, "train")
    first = reader.record(0)                      # opens the first shard
    set_generation("2")
    assert reader.record(0) == first              # an open shard is the reader's own
    with pytest.raises(OutputChangedError, match="generation 1 when this reader opened it "
                                                 "and is 2 now"):
        reader.record(len(reader) - 1)            # the second shard is opened now
    assert access.Reader(out, "train").record(len(reader) - 1)


def test_permutation_is_a_function_of_seed_and_epoch():
    a = access.permutation(1000, seed=7, epoch=3)
    assert sorted(a.tolist()) == list(range(1000))
    assert np.array_equal(a, access.permutation(1000, seed=7, epoch=3))
    assert not np.array_equal(a, access.permutation(1000, seed=7, epoch=4))
    assert not np.array_equal(a, access.permutation(1000, seed=8, epoch=3))
    # The legacy generator's stream is frozen: this order is the same on any machine.
    assert access.permutation(6, seed=0, epoch=0).tolist() == \
        np.random.RandomState([0, 0]).permutation(6).tolist()
    with pytest.raises(ConfigError, match="seed=-1"):
        access.permutation(5, seed=-1, epoch=0)


@pytest.mark.parametrize("n", [0, 1, 7, 10, 37])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_parts_hold_every_index_once_and_differ_by_at_most_one(n, world_size):
    order = access.permutation(n, seed=1, epoch=0)
    parts = [list(access.part(order, r, world_size)) for r in range(world_size)]
    assert sorted(i for p in parts for i in p) == list(range(n))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert list(access.part(n, 0, world_size)) == list(range(len(parts[0])))
    with pytest.raises(ConfigError, match="rank=4, world_size=4"):
        access.part(n, 4, 4)


def _read_all(reader):
    return [reader.record(i) for i in range(len(reader))]


@pytest.mark.slow
def test_threads_forked_and_spawned_processes_read_the_same_records(out):
    reader = access.Reader(out, "train")
    expected = _read_all(reader)                  # the parent has its shards open now
    assert reader._fds
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(reader.record, range(len(reader)))) == expected
    for method in ("fork", "spawn"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            assert pool.map(_read_all, [reader, reader]) == [expected, expected]
    assert "_fds" not in pickle.loads(pickle.dumps(reader)).__getstate__()
    assert _read_all(reader) == expected


@pytest.mark.slow
def test_the_reader_imports_no_framework(out):
    code = ("import sys, tfrecorder.access as a; r = a.Reader(sys.argv[1], 'train'); "
            "r.features(0); print(sorted(m for m in ('tensorflow', 'torch', 'grain', "
            "'apache_beam') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("with_index", [True, False])
def test_gs_directories_are_read_with_ranged_reads(tf, gcs, out, with_index):
    (_write_index_files if with_index else _without_index_files)(out)
    root = f"gs://{BUCKET}/access-{with_index}"
    gcs.put(out, root, recursive=True)
    local = access.Reader(out, "train")
    remote = access.Reader(root, "train")
    assert remote.files[0].startswith("gs://")
    assert len(remote) == len(local)
    order = access.permutation(len(remote), seed=0, epoch=0)
    assert [remote.record(int(i)) for i in order] == [local.record(int(i)) for i in order]
    assert remote.features(3) == local.features(3)
    assert not remote._fds                        # ranged requests, no local files
    _without_index_files(out)


def test_tfrecorder_2_directories_are_refused_with_the_reason(tmp_path):
    import gzip

    from tests.test_migration import _legacy_dir

    _legacy_dir(tmp_path)
    # Each fact is refused in one place, with one fix, whichever reader meets it.
    fix = {"gzip": "Convert again without compression (compression=None, the default).",
           "counts": f"write index files with `tfrecorder index {tmp_path}`, which counts them."}
    readers = (lambda: access.Reader(str(tmp_path), "train"),
               lambda: tfrecorder.read(str(tmp_path)),
               lambda: tfrecorder.build_index(str(tmp_path)))
    for read in readers:
        with pytest.raises(ConfigError, match="gzip-compressed shards") as e:
            read()
        assert str(e.value).endswith(fix["gzip"])
    for path in tmp_path.glob("*.tfrecord.gz"):  # the same directory, uncompressed
        path.with_suffix("").write_bytes(gzip.decompress(path.read_bytes()))
        path.unlink()
    for read in readers[:2]:
        with pytest.raises(ConfigError, match="written by TFRecorder 2.0 .* no record counts") as e:
            read()
        assert str(e.value).endswith(fix["counts"])


def _with_label(out: str, label: bytes) -> str:
    """Record 1 of ``out``'s one train shard given the serialized Feature ``label``, the
    shard's index and manifests made to match: a record no conversion writes, which
    only its features tell from the others. Returns the shard's path."""
    from tfrecorder._folder import example

    m = metadata.read_manifest(out)
    shard = m.splits["train"].shards[0]
    path = os.path.join(out, shard.file)
    with open(path, "rb") as f:
        raws = list(records.read_records(f, path))
    feats = example.parse(raws[1])
    fixed = {k: example.feature(dtype, v) for k, (dtype, v) in feats.items() if k != "label"}
    raws[1] = example.serialize({**fixed, "label": example.Feature(label)})
    framed = [records.frame(r) for r in raws]
    with open(path, "wb") as f:
        f.write(b"".join(framed))
    with open(index.path(out, shard.file), "wb") as f:
        f.write(index.format(index.offsets(len(b) for b in framed)))
    size = sum(map(len, framed))
    for name in (layout.MANIFEST, "versions/00001.json"):
        with open(os.path.join(out, name)) as f:
            d = json.load(f)
        d["splits"]["train"]["shards"][0]["num_bytes"] = size
        d["splits"]["train"]["num_bytes"] = size
        with open(os.path.join(out, name), "w") as f:
            json.dump(d, f)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("label,what", [
    (b"\x1a\x03\x0a\x01\x02" + b"\x0a\x04\x0a\x02zz", "holds 1 bytes, 0 float and 1 int64"),
    (b"\x12\x06\x0a\x04\x00\x00\x00\x40", "holds a float list where the manifest declares int64"),
    (b"\x0a\x03\x0a\x01\x02", "holds a bytes list where the manifest declares int64"),
])
def test_a_label_of_another_kind_is_refused_by_every_reader_naming_where(
        tmp_path, label, what):
    from tests.test_update import _images, _table
    import tfrecorder.grain
    import tfrecorder.torch

    out = str(tmp_path / "out")
    tfrecorder.convert(_table(_images(tmp_path / "img", 2), splits=["TRAIN"] * 2), out)
    path = _with_label(out, label)
    where = f"{path}, record 1 at byte \\d+ \\(record 1 of split 'train'\\): feature 'label' {what}"
    assert tfrecorder.verify(out).records == 2  # framing and checksums are whole
    reader = access.Reader(out, "train")
    assert reader.features(0)["label"] in (0, 1)
    for read in (lambda: reader.features(1), lambda: tfrecorder.torch.Dataset(out)[1],
                 lambda: tfrecorder.torch.Dataset(out).__getitems__([0, 1]),
                 lambda: tfrecorder.grain.DataSource(out)[1], lambda: tfrecorder.read(out),
                 lambda: list(tfrecorder.open(out).read(chunksize=1))):
        with pytest.raises(CorruptRecordError, match=where):
            read()
    with pytest.raises(CorruptRecordError, match=f"{path}, record 1 .*'label' {what}"):
        tfrecorder.inspect(out, output_dir=str(tmp_path / "shown"))
