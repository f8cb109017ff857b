"""Reading versions (docs/format.md, "Versions and the data report (format 2)"): every
reader reads one version's live records, exactly, and keeps reading it while a newer
version is published.

The folders are made the way an update leaves them: a real conversion, published as
version 1 of format 2, then version 2 written by hand as the format says: records
retired through live index files, a ``-v00002`` shard written with TensorFlow's
TFRecordWriter and its index, a label name appended, ``versions/00001.json``,
``versions/00002.json`` and ``tfrecorder.json``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil

import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._folder import index, layout, survey
from tfrecorder._folder.records import scan as scan_records
from tfrecorder._errors import ConfigError, CorruptRecordError
from tests.conftest import BUCKET, SAMPLES

DATA = os.path.join(SAMPLES, "data.csv")
NEW_SHARD = "data-train-v00002.tfrecord-00000-of-00001"
#: Per train shard of version 1, the records version 2 retires (positions in the file).
RETIRED = {0: [1], 1: [0, 3, 4], 2: []}
NEW_LABEL = "zebra"


@pytest.fixture(scope="module")
def converted(samples_converted):
    # Read only: tests that change files change a copy.
    return samples_converted(num_shards={"train": 3, "validation": 1, "test": 1})[0]


def _manifest(out, name=layout.MANIFEST) -> dict:
    return json.load(open(os.path.join(out, name)))


def _write(out, name, data: bytes) -> None:
    path = os.path.join(out, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _json(value) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def _records(out, shard_file) -> list[bytes]:
    """The records of one shard, by the index the conversion wrote."""
    data = open(os.path.join(out, shard_file), "rb").read()
    return [data[o + 12:o + n - 4] for o, n in index.read(out, shard_file)]


def as_version_1(out) -> dict:
    """``out`` (a finished conversion) published as version 1 of format 2."""
    d = {**_manifest(out), "format_version": 2, "version": 1,
         "published": "2026-11-25T10:00:00Z", "source": "data.csv", "mode": "overwrite",
         "key": "image_uri"}
    _write(out, "versions/00001.json", _json(d))
    _write(out, layout.MANIFEST, _json(d))
    return d


def version_2(tf, out, publish: bool = True) -> dict:
    """Version 2 of ``out`` (version 1 of format 2), as an update writes it: the train
    records of ``RETIRED`` retired through live index files, two new records (one of a
    new label) in a ``-v00002`` shard with its index and rows file, a label name
    appended. Publishes it (versions/00002.json, then tfrecorder.json) unless
    ``publish=False``, which writes every file but the two manifests and returns the
    manifest."""
    v1 = _manifest(out, "versions/00001.json")
    d = json.loads(json.dumps(v1))
    label_key = "label"
    names = list(v1["vocabularies"][label_key])
    d["vocabularies"][label_key] = names + [NEW_LABEL]
    labels = os.path.join(out, layout.labels_file(label_key))
    open(labels, "a").write(f"{NEW_LABEL}\n")
    train = d["splits"]["train"]
    for number, shard in enumerate(train["shards"]):
        gone = RETIRED[number]
        if not gone:
            continue
        entries = index.read(out, shard["file"])
        live = [e for k, e in enumerate(entries) if k not in gone]
        name = f"versions/00002/index/{shard['file']}.idx"
        _write(out, name, index.format(live))
        shard["live"], shard["live_index"] = len(live), name
    # Two new records: copies of the first train record under new names, one of them
    # under the new label.
    first = tf.train.Example.FromString(_records(out, train["shards"][0]["file"])[0])
    new = []
    for k, label in enumerate([0, len(names)]):
        ex = tf.train.Example()
        ex.CopyFrom(first)
        ex.features.feature["image_name"].bytes_list.value[:] = [f"new-{k}.png".encode()]
        ex.features.feature["label"].int64_list.value[:] = [label]
        new.append(ex.SerializeToString())
    path = os.path.join(out, NEW_SHARD)
    with tf.io.TFRecordWriter(path) as w:
        for r in new:
            w.write(r)
    with open(path, "rb") as f:
        _write(out, index.name(NEW_SHARD), index.format(scan_records(f)))
    rows = f"rows/{NEW_SHARD}.rows.jsonl.gz"
    _write(out, rows, gzip.compress(b"".join(
        json.dumps({"row": 100 + k, "key": f"new-{k}.png", "split": "train"}).encode()
        + b"\n" for k in range(2))))
    train["shards"].append({"file": NEW_SHARD, "num_examples": 2, "live": 2,
                            "num_bytes": os.path.getsize(path), "index": index.name(NEW_SHARD),
                            "rows": rows})
    train["num_examples"] = sum(s.get("live", s["num_examples"]) for s in train["shards"])
    d.update(version=2, parent=1, published="2026-11-25T10:02:11Z", mode="update",
             changes={"train": {"added": 2, "retired": sum(map(len, RETIRED.values())),
                                "kept": train["num_examples"] - 2}},
             generation=hashlib.sha256(b"version 2 of " + v1["generation"].encode())
             .hexdigest()[:32])
    if publish:
        publish_version(out, d)
    return d


def publish_version(out, d: dict) -> None:
    _write(out, f"versions/{d['version']:05d}.json", _json(d))
    _write(out, layout.MANIFEST, _json(d))


@pytest.fixture(scope="module")
def versioned(tf, tmp_path_factory, converted):
    """``(folder, records of version 1, records of version 2)``: train records in file
    order, as bytes."""
    out = str(tmp_path_factory.mktemp("versioned") / "out")
    shutil.copytree(converted, out)
    v1 = as_version_1(out)
    files = [s["file"] for s in v1["splits"]["train"]["shards"]]
    before = [r for f in files for r in _records(out, f)]
    version_2(tf, out)
    after = [r for n, f in enumerate(files) for k, r in enumerate(_records(out, f))
             if k not in RETIRED[n]] + _records(out, NEW_SHARD)
    return out, before, after


def _names(records) -> list[str]:
    from tfrecorder._folder import example

    return [example.parse(r)["image_name"][1][0].decode() for r in records]


def test_the_folder_made_by_hand_is_what_the_format_says(versioned):
    out, before, after = versioned
    v2 = _manifest(out)
    assert _manifest(out, "versions/00002.json") == v2 and v2["version"] == 2
    assert len(before) == 27 and len(after) == 27 - 4 + 2
    assert v2["splits"]["train"]["num_examples"] == len(after)
    assert sorted(os.listdir(os.path.join(out, "versions"))) == ["00001.json", "00002",
                                                                "00002.json"]
    assert sorted(os.listdir(os.path.join(out, "versions", "00002", "index"))) == sorted(
        f"{s['file']}.idx" for s in v2["splits"]["train"]["shards"] if "live_index" in s)


@pytest.mark.parametrize("version, expected", [(1, 1), (2, 2), (None, 2)])
def test_the_access_reader_reads_exactly_the_live_records_of_its_version(versioned, version,
                                                                         expected):
    out, before, after = versioned
    records = before if expected == 1 else after
    reader = access.Reader(out, "train", version=version)
    assert reader.version == expected and len(reader) == len(records)
    assert reader.records(range(len(reader))) == records
    assert [reader.record(i) for i in range(len(reader))] == records
    with pytest.raises(IndexError):
        reader.record(len(records))
    assert reader.manifest.splits["train"].num_examples == len(records)
    names = reader.manifest.label_names
    assert names[-1] == NEW_LABEL if expected == 2 else NEW_LABEL not in names
    # Other splits: untouched by version 2, the same records.
    test = access.Reader(out, "test", version=version)
    assert len(test) > 0 and test.records(range(len(test))) == \
        access.Reader(out, "test", version=1).records(range(len(test)))


def test_a_version_the_folder_does_not_hold_is_a_config_error_naming_those_it_does(
        versioned, converted):
    out, _, _ = versioned
    for read in (lambda v: access.Reader(out, "train", version=v),
                 lambda v: tfrecorder.load(out, "train", version=v),
                 lambda v: tfrecorder.verify(out, version=v),
                 lambda v: tfrecorder.read(out, version=v),
                 lambda v: tfrecorder.inspect(out, version=v)):
        with pytest.raises(ConfigError, match="has no version 3; it has versions 1, 2"):
            read(3)
    with pytest.raises(ConfigError, match="version=0; give a version number"):
        access.Reader(out, "train", version=0)
    # A folder converted before versions existed has version 1 only: its tfrecorder.json.
    assert access.Reader(converted, "train", version=1).records(range(27)) == \
        access.Reader(converted, "train").records(range(27))
    with pytest.raises(ConfigError, match="has no version 2; it has version 1\\b"):
        access.Reader(converted, "train", version=2)


def _loaded(tf, out, **kw) -> list[str]:
    ds = tfrecorder.load(out, "train", decode_images=False, **kw)
    got = [ex["image_name"].numpy().decode() for ex in ds]
    assert int(ds.cardinality()) == len(got)
    return got


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2])
def test_load_reads_the_live_records_whole_in_parts_and_globally_shuffled(tf, versioned,
                                                                         version):
    out, before, after = versioned
    want = sorted(_names(before if version == 1 else after))
    assert sorted(_loaded(tf, out, version=version)) == want
    for n in (2, 3, 5):
        parts = [_loaded(tf, out, version=version, shard=(i, n)) for i in range(n)]
        assert sorted(sum(parts, [])) == want
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    shuffled = _loaded(tf, out, version=version, shuffle="global", seed=3)
    assert sorted(shuffled) == want and shuffled != _names(before if version == 1 else after)
    halves = [_loaded(tf, out, version=version, shuffle="global", seed=3, shard=(i, 2))
              for i in range(2)]
    assert sorted(sum(halves, [])) == want
    ds, info = tfrecorder.load(out, "train", version=version, with_info=True,
                               decode_images=False, as_supervised=True)
    labels = [int(label) for _, label in ds]
    assert max(labels) < len(info.label_names)
    if version == 2:
        assert info.label_names[-1] == NEW_LABEL and labels.count(len(info.label_names) - 1) == 1
    else:
        assert NEW_LABEL not in info.label_names


@pytest.mark.slow
def test_the_other_readers_take_the_version(versioned):
    torch_mod = pytest.importorskip("tfrecorder.torch")
    from tfrecorder import grain

    out, before, after = versioned
    for version, records in ((1, before), (2, after)):
        ds = torch_mod.Dataset(out, "train", version=version)
        assert len(ds) == len(records)
        labels = [ds[i][1] for i in range(len(ds))]
        assert (ds.label_names[-1] == NEW_LABEL) == (version == 2)
        assert max(labels) < len(ds.label_names)
        if version == 2:
            assert labels[-1] == len(ds.label_names) - 1
        source = grain.DataSource(out, "train", version=version)
        assert [source[i]["image_name"].decode() for i in range(len(source))] == \
            _names(records)
        assert repr(source).endswith(f"version={version}, records={len(records)})")
        sampler = torch_mod.Sampler(ds, seed=1, rank=0, world_size=2)
        other = torch_mod.Sampler(ds, seed=1, rank=1, world_size=2)
        assert sorted(list(sampler) + list(other)) == list(range(len(records)))
    table = tfrecorder.read(out, split="train", version=2)
    assert list(table.label)[-1] == NEW_LABEL and len(table) == len(after)
    assert len(tfrecorder.read(out, split="train", version=1)) == len(before)
    inspected = tfrecorder.inspect(out, "train", num_records=30, version=1,
                                   output_dir=os.path.join(os.path.dirname(out), "insp1"))
    assert [r["image_name"] for r in inspected.rows] == _names(before)
    inspected = tfrecorder.inspect(out, "train", num_records=30,
                                   output_dir=os.path.join(os.path.dirname(out), "insp2"))
    assert [r["image_name"] for r in inspected.rows] == _names(after)
    assert inspected.split_counts["train"] == len(after)


def test_index_files_list_exactly_the_live_records_for_dali(versioned):
    out, before, after = versioned
    v2 = access.Reader(out, "train", version=2)
    shards = _manifest(out)["splits"]["train"]["shards"]
    assert v2.index_files == [os.path.join(out, s.get("live_index") or s["index"])
                              for s in shards]
    got = []
    for path, idx in zip(v2.files, v2.index_files):
        data = open(path, "rb").read()
        got += [data[o + 12:o + n - 4] for o, n in index.parse(open(idx, "rb").read(),
                                                               gaps=True)]
    assert got == after
    v1 = access.Reader(out, "train", version=1)
    assert v1.index_files == [os.path.join(out, index.name(s["file"]))
                              for s in _manifest(out, "versions/00001.json")["splits"]["train"]["shards"]]


def test_verify_reads_each_version(versioned, tmp_path):
    out, before, after = versioned
    one, two = tfrecorder.verify(out, version=1), tfrecorder.verify(out)
    assert (one.version, one.records_per_split["train"], one.files) == (1, 27, 5)
    assert (two.version, two.records_per_split["train"], two.files) == (2, len(after), 6)
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    live = os.path.join(copy, _manifest(copy)["splits"]["train"]["shards"][1]["live_index"])
    entries = index.parse(open(live, "rb").read(), gaps=True)
    entries[-1] = (entries[-1][0] + 1, entries[-1][1] - 1)  # no record starts there
    open(live, "wb").write(index.format(entries))
    with pytest.raises(CorruptRecordError, match=f"line {len(entries)}: .* is no record of"):
        tfrecorder.verify(copy)
    assert tfrecorder.verify(copy, version=1).records == 36  # version 1 does not read it
    os.remove(live)
    with pytest.raises(CorruptRecordError, match="live index .* is missing"):
        access.Reader(copy, "train").record(9 - len(RETIRED[0]))  # shard 1's first


@pytest.mark.slow
def test_a_reader_of_version_1_keeps_reading_it_while_version_2_is_published(tf, converted,
                                                                            tmp_path):
    out = str(tmp_path / "out")
    shutil.copytree(converted, out)
    as_version_1(out)
    v1_names = sorted(_names(access.Reader(out, "train").records(range(27))))
    reader = access.Reader(out, "train")            # the latest: version 1
    first = reader.record(0)
    from tfrecorder import grain

    source = grain.DataSource(out, "train")
    ds = tfrecorder.load(out, "train", decode_images=False)
    parts = tfrecorder.load(out, "train", decode_images=False, shard=(0, 2))
    it = iter(ds)
    seen = [next(it)["image_name"].numpy().decode()]
    version_2(tf, out)                              # tfrecorder.json is version 2 now
    assert access.Reader(out, "train").version == 2
    assert reader.version == 1 and reader.record(0) == first
    assert len(reader.records(range(27))) == 27     # no error: its version is whole
    assert sorted(source[i]["image_name"].decode() for i in range(len(source))) == v1_names
    seen += [ex["image_name"].numpy().decode() for ex in it]
    assert sorted(seen) == v1_names
    assert len([ex for ex in parts]) == 13
    # Version 1's manifest replaced (a folder converted again): the reader stops.
    d = _manifest(out, "versions/00001.json")
    d["generation"] = "another"
    _write(out, "versions/00001.json", _json(d))
    with pytest.raises(tfrecorder.OutputChangedError, match="written again"):
        reader.close()
        reader.record(5)


@pytest.mark.slow  # a conversion end to end
def test_overwrite_removes_every_file_of_every_version_and_nothing_else(tf, versioned,
                                                                       tmp_path):
    src, _, _ = versioned
    out = str(tmp_path / "out")
    shutil.copytree(src, out)
    _write(out, "notes.txt", b"the user's")
    surveyed = survey.survey(out)
    assert surveyed.foreign() == ["notes.txt"]
    ours = surveyed.complete_files
    assert {"versions/00001.json", "versions/00002.json", NEW_SHARD, index.name(NEW_SHARD),
            f"rows/{NEW_SHARD}.rows.jsonl.gz"} <= ours
    assert any(n.startswith("versions/00002/index/") for n in ours)
    tfrecorder.convert(DATA, out, num_shards=2, mode="overwrite")
    left = sorted(os.path.relpath(os.path.join(r, f), out)
                  for r, _, fs in os.walk(out) for f in fs)
    assert "notes.txt" in left
    # what is left of versions/ and rows/ is the new version 1's, nothing of the old two
    listed = {s["rows"] for sp in _manifest(out, "tfrecorder.json")["splits"].values()
              for s in sp["shards"]}
    assert [n for n in left if n.startswith("versions")] == ["versions/00001.json"]
    assert {n for n in left if n.startswith("rows")} == listed and len(listed) == 6
    assert not [n for n in left if "-v0000" in n]
    assert access.Reader(out, "train").version == 1
    assert tfrecorder.verify(out).records == 36


def test_a_versioned_folder_is_not_overwritten_without_overwrite(versioned, tmp_path):
    src, _, _ = versioned
    out = str(tmp_path / "out")
    shutil.copytree(src, out)
    with pytest.raises(tfrecorder.OutputExistsError):
        tfrecorder.convert(DATA, out)


def test_build_index_on_a_versioned_folder(versioned, tmp_path):
    src, _, after = versioned
    out = str(tmp_path / "out")
    shutil.copytree(src, out)
    kept = {n: open(os.path.join(out, "versions", n), "rb").read()
            for n in ("00001.json", "00002.json")}
    shutil.rmtree(os.path.join(out, index.DIR))
    written = tfrecorder.build_index(out)
    assert len(written) == 6 and os.path.join(out, index.name(NEW_SHARD)) in written
    for n, data in kept.items():  # a version's manifest is never rewritten
        assert open(os.path.join(out, "versions", n), "rb").read() == data
    v2 = _manifest(out)
    assert v2["version"] == 2 and all(s["index"] for s in v2["splits"]["train"]["shards"])
    assert access.Reader(out, "train").records(range(len(after))) == after
    assert tfrecorder.verify(out).records_per_split["train"] == len(after)


@pytest.mark.slow
def test_versions_on_cloud_storage(tf, gcs, versioned):
    src, before, after = versioned
    out = f"gs://{BUCKET}/versioned"
    for root, _, files in os.walk(src):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), src)
            gcs.pipe(f"{BUCKET}/versioned/{rel}", open(os.path.join(root, f), "rb").read())
    for version, records in ((1, before), (2, after), (None, after)):
        reader = access.Reader(out, "train", version=version)
        assert reader.records(range(len(reader))) == records
        # TensorFlow's own GCS client does not speak to the emulator: load() is built
        # from the version's gs:// manifest and live index files, and not iterated.
        ds, info = tfrecorder.load(out, "train", version=version, decode_images=False,
                                   with_info=True)
        assert int(ds.cardinality()) == len(records)
        assert (info.label_names[-1] == NEW_LABEL) == (version != 1)
        parts = [tfrecorder.load(out, "train", version=version, decode_images=False,
                                 shard=(i, 2)).cardinality() for i in range(2)]
        assert sorted(int(p) for p in parts) == [len(records) // 2, (len(records) + 1) // 2]
        assert len(tfrecorder.read(out, "train", version=version)) == len(records)
    assert tfrecorder.verify(out, version=2).records_per_split["train"] == len(after)
    with pytest.raises(ConfigError, match="it has versions 1, 2"):
        access.Reader(out, "train", version=7)
    # A reader of version 1 keeps reading it when tfrecorder.json changes again.
    reader = access.Reader(out, "train", version=1)
    d = json.loads(gcs.cat(f"{BUCKET}/versioned/versions/00002.json"))
    gcs.pipe(f"{BUCKET}/versioned/{layout.MANIFEST}", _json({**d, "published": "later"}))
    assert reader.records(range(27)) == before


@pytest.mark.slow
@pytest.mark.parametrize("kwargs", [{"shard": (1, 2)}, {"shuffle": "global", "seed": 5}])
def test_a_checkpoint_of_version_2_resumes_over_its_live_records(tf, versioned, tmp_path,
                                                                 kwargs):
    out, _, after = versioned

    def dataset():
        return tfrecorder.load(out, "train", version=2, batch_size=3, decode_images=False,
                               **kwargs)

    whole = [n.decode() for b in dataset() for n in b["image_name"].numpy()]
    it = iter(dataset())
    ckpt = tf.train.Checkpoint(data=it)
    first = [n.decode() for _ in range(2) for n in next(it)["image_name"].numpy()]
    saved = ckpt.save(str(tmp_path / "ckpt"))
    again = iter(dataset())
    tf.train.Checkpoint(data=again).restore(saved).assert_consumed()
    rest = [n.decode() for b in again for n in b["image_name"].numpy()]
    assert first + rest == whole
    if "shuffle" in kwargs:
        assert sorted(whole) == sorted(_names(after))
    else:  # reader 1 of 2: the second half of the live records, in file order per shard
        assert sorted(whole) == sorted(_names(after)[len(after) // 2:])


def test_a_live_index_may_skip_records_but_never_go_back():
    assert index.parse(b"0 20\n50 16\n66 30\n", gaps=True) == [(0, 20), (50, 16), (66, 30)]
    with pytest.raises(CorruptRecordError, match="line 2: .*previous one ends at byte 20; "
                                                 "the version's live index is damaged"):
        index.parse(b"0 20\n10 16\n", gaps=True)
    with pytest.raises(CorruptRecordError, match="line 2"):
        index.parse(b"0 20\n50 16\n")  # a shard's own index has no gaps


@pytest.mark.parametrize("field, value", [
    ("live_index", "../../secret.idx"),
    ("live_index", "versions/00002/index/data-test.tfrecord-00000-of-00001.idx"),
    ("rows", "rows/../notes.txt"),
    ("file", "data-train-v2.tfrecord-00000-of-00001"),
])
def test_a_version_listing_names_tfrecorder_does_not_write_is_refused(versioned, tmp_path,
                                                                      field, value):
    src, _, _ = versioned
    out = str(tmp_path / "out")
    shutil.copytree(src, out)
    d = _manifest(out)
    d["splits"]["train"]["shards"][0][field] = value
    for name in ("versions/00002.json", layout.MANIFEST):
        _write(out, name, _json(d))
    for read in (lambda: access.Reader(out, "train"), lambda: tfrecorder.verify(out),
                 lambda: tfrecorder.load(out, "train"), lambda: tfrecorder.info(out)):
        with pytest.raises(tfrecorder.IncompleteOutputError, match=f"it lists '{value}'|"
                                                                   f"{value}"):
            read()
    # Version 1 is whole and still reads; overwrite takes nothing the bad version lists
    # as its own, so it refuses to replace the shards.
    assert access.Reader(out, "train", version=1).version == 1
    assert "versions" in survey.survey(out).foreign()
    with pytest.raises(tfrecorder.OutputExistsError):
        tfrecorder.convert(DATA, out, num_shards={"train": 3, "validation": 1, "test": 1},
                           mode="overwrite")


def test_a_version_of_a_folder_that_holds_no_conversion_says_so(tmp_path):
    with pytest.raises(tfrecorder.IncompleteOutputError, match="does not exist"):
        access.Reader(str(tmp_path / "nothing"), "train", version=2)
    with pytest.raises(tfrecorder.IncompleteOutputError, match="does not exist"):
        tfrecorder.load(str(tmp_path / "nothing"), "train", version=1)
