"""``tfrecorder compact``: the splits an update left out of TFDS rewritten as whole shards
of a new version (docs/versions.md), on real conversions and updates."""

import gzip
import json

import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._folder import layout
from tfrecorder._writer.result import human_bytes
from tests.test_update import (LABELS, _converted_on_gcs, _digests, _images, _listed, _table,
                               _tag)


def _records(out, split, version=None):
    """The live records of ``split`` (serialized Examples), in the order readers see them."""
    reader = access.Reader(str(out), split, version=version)
    return list(reader.records(range(len(reader))))


def _updated(tmp_path, **options):
    """16 images converted, then updated: two train rows removed, one relabelled, one
    added to train and one to test; the output folder and the edited table."""
    paths = _images(tmp_path / "img", 16)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out), **options)
    table = _table(paths).drop(index=[1, 5])
    table.loc[2, "label"] = "owl"
    extra = _images(tmp_path / "img", 2, start=16)
    table.loc[16] = ["TRAIN", extra[0], "dog"]
    table.loc[17] = ["TEST", extra[1], "cat"]
    result = tfrecorder.convert(table, str(out), mode="update", **options)
    assert result.version == 2 and result.tfds_left_out == ["train", "test"]
    assert "tfrecorder compact" in str(result)
    return out, table


@pytest.mark.slow
def test_compact_rewrites_what_tfds_cannot_read_and_keeps_every_version(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    out, table = _updated(tmp_path, near_duplicates=True)
    before = {v: {s: _records(out, s, v) for s in ("train", "test")} for v in (1, 2)}
    files = _digests(out)
    report = json.loads((out / "quality.json").read_text())

    done = tfrecorder.compact(str(out))
    assert done.version == 3 and done.splits == {"train": 11, "test": 5}
    assert str(done).startswith(f"{out}: compacted train (11 records), test (5 records) "
                                f"into version 3: 2 shard(s)")
    tag = _tag(out, 3)
    assert done.files == (f"data-train-v00003-{tag}.tfrecord-00000-of-00001",
                          f"data-test-v00003-{tag}.tfrecord-00000-of-00001")
    # Every earlier file as it was; only new files added, and tfrecorder.json replaced.
    after = _digests(out)
    changed = {n for n in files if after.get(n) != files[n]}
    assert changed == {"tfrecorder.json", "dataset_info.json", "quality.json"}
    assert set(after) - set(files) == _listed(out, 3) - _listed(out, 2) | {
        f"versions/00003-{tag}/quality.json", f"versions/00003-{tag}/dataset_info.json"}
    # The same records in the same order, read by every reader, and every version still.
    for split in ("train", "test"):
        assert _records(out, split) == before[2][split]
        for v in (1, 2):
            assert _records(out, split, v) == before[v][split]
    m = json.loads((out / "tfrecorder.json").read_text())
    assert m["version"] == 3 and m["parent"] == 2 and m["mode"] == "compact"
    assert m["changes"] == {"train": {"added": 0, "retired": 0, "kept": 11},
                            "test": {"added": 0, "retired": 0, "kept": 5}}
    assert not any(s.get("live_index") for info in m["splits"].values()
                   for s in info["shards"])
    assert m["generation"] != json.loads(
        (out / "versions" / "00002.json").read_text())["generation"]
    assert tfrecorder.verify(str(out)).records_per_split == {"train": 11, "test": 5}
    # TFDS reads every split again, with the records every other reader reads.
    builder = tfds.builder_from_directory(str(out))
    assert set(builder.info.splits) == {"train", "test"}
    uris = sorted(ex["image_uri"].decode() for ex in tfds.as_numpy(
        builder.as_dataset(split="train")))
    assert uris == sorted(tfrecorder.read(str(out), "train")["image_uri"])
    # Its data report is its parent's: the same pairs at the same positions.
    new = json.loads((out / layout.version_quality(3, _tag(out, 3))).read_text())
    assert new == {**report, "version": 3}
    assert (out / "quality.json").read_text() == (
        out / layout.version_quality(3, _tag(out, 3))).read_text()
    # Nothing left to do: nothing published.
    again = tfrecorder.compact(str(out))
    assert again.version is None and "nothing to compact" in str(again)
    assert tfrecorder.versions(str(out))["mode"].tolist() == ["create", "update", "compact"]
    # The rows files came along: an update with the same table finds nothing to change,
    # and one with an edit updates the compacted version.
    assert tfrecorder.convert(table, str(out), mode="update",
                              near_duplicates=True).unchanged
    edited = table.drop(index=[3])
    assert tfrecorder.convert(edited, str(out), mode="update",
                              near_duplicates=True).changes["train"] == {
        "added": 0, "retired": 1, "kept": 10}


@pytest.mark.slow
def test_vacuum_after_compact_leaves_only_the_compacted_files(tmp_path):
    out, table = _updated(tmp_path)
    want = {s: _records(out, s) for s in ("train", "test")}
    done = tfrecorder.compact(str(out))
    # Both copies until vacuum: the summary says so, with the bytes vacuum then frees.
    sizes = {p.name: p.stat().st_size for p in out.glob("data-*")}
    assert (f"The folder holds both copies: the earlier versions' {human_bytes(done.held)} "
            f"of shards stay until `tfrecorder vacuum {out} --keep 1`") in str(done)
    tfrecorder.vacuum(str(out), keep=1)
    assert done.held == sum(n for name, n in sizes.items() if not (out / name).exists())
    shards = sorted(p.name for p in out.glob("data-*"))
    tag = _tag(out, 3)
    assert shards == [f"data-test-v00003-{tag}.tfrecord-00000-of-00001",
                      f"data-train-v00003-{tag}.tfrecord-00000-of-00001"]
    assert {s: _records(out, s) for s in ("train", "test")} == want
    assert tfrecorder.verify(str(out)).records == 16
    # The folder's quality.json, which only the removed version 1 listed, is still the
    # latest report: the next update replaces it, as it replaces tfrecorder.json.
    table = table.drop(index=[3])
    assert tfrecorder.convert(table, str(out), mode="update").version == 4
    assert json.loads((out / "quality.json").read_text())["version"] == 4


@pytest.mark.slow  # a conversion end to end
def test_compact_of_named_splits_and_its_errors(tmp_path, run_cli):
    paths = _images(tmp_path / "img", 8)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    # A folder TFDS reads whole: nothing to do, unless a split is named.
    done = run_cli("compact", str(out))
    assert done.returncode == 0 and "nothing to compact" in done.stdout
    assert not (out / "versions" / "00002.json").exists()
    done = run_cli("compact", str(out), "--split", "test")
    assert done.returncode == 0 and "compacted test (2 records) into version 2" in done.stdout
    m = json.loads((out / "tfrecorder.json").read_text())
    assert [s["file"] for s in m["splits"]["test"]["shards"]] == [
        f"data-test-v00002-{m['tag']}.tfrecord-00000-of-00001"]
    assert [s["file"] for s in m["splits"]["train"]["shards"]] == [
        "data-train.tfrecord-00000-of-00001"]                 # not named: as it was
    with pytest.raises(tfrecorder.ConfigError, match="'valid' not in version 2"):
        tfrecorder.compact(str(out), splits=["valid"])
    done = run_cli("compact", str(out), "--split", "valid")
    assert done.returncode != 0 and "name one of these" in done.stderr
    with pytest.raises(tfrecorder.IncompleteOutputError, match="nothing to compact"):
        tfrecorder.compact(str(tmp_path / "img"))
    assert not (out / layout.LOCK).exists() and not (out / layout.TMP_DIR).exists()


@pytest.mark.slow
def test_damaged_rows_files_and_live_indexes_are_named_and_nothing_is_published(tmp_path):
    out, _ = _updated(tmp_path)
    m = json.loads((out / "tfrecorder.json").read_text())
    (shard,) = [s for s in m["splits"]["train"]["shards"] if s.get("live_index")]
    rows_file, live_index = out / shard["rows"], out / shard["live_index"]
    kept_rows, kept_live = rows_file.read_bytes(), live_index.read_bytes()
    lines = gzip.decompress(kept_rows).splitlines()
    for damage, message in (
            (lambda: rows_file.write_bytes(gzip.compress(b"\n".join(lines[:-3]))),
             f"{shard['rows']}: {len(lines) - 3} lines where its shard holds {len(lines)}"),
            (lambda: rows_file.unlink(), "the rows file is missing"),
            (lambda: rows_file.write_bytes(kept_rows[:40]), "not a rows file"),
            (lambda: rows_file.write_bytes(gzip.compress(b"\n".join(
                [json.dumps({**json.loads(lines[0]), "label": "cat"}).encode(), *lines[1:]]))),
             f"{shard['rows']}: not a rows file \\(line 1: label is \"cat\", not a list"),
            (lambda: live_index.write_bytes(b"foo bar\n" + kept_live),
             "line 1: 'foo bar' is not 'OFFSET LENGTH'"),
            (lambda: live_index.write_bytes(b"0 99999\n"), "live index is damaged")):
        damage()
        with pytest.raises(tfrecorder.CorruptRecordError, match=message):
            tfrecorder.compact(str(out))
        rows_file.write_bytes(kept_rows)
        live_index.write_bytes(kept_live)
        assert json.loads((out / "tfrecorder.json").read_text())["version"] == 2
        assert not (out / layout.LOCK).exists() and not (out / layout.TMP_DIR).exists()
    assert tfrecorder.compact(str(out)).version == 3  # repaired: it goes through


@pytest.mark.slow  # a conversion end to end
def test_splits_are_named_in_any_spelling_or_refused(tmp_path):
    paths = _images(tmp_path / "img", 8)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    assert tfrecorder.compact(str(out), splits="TRAIN").splits == {"train": 6}
    for bad in (5, ["train", 3], {"train": 1}):
        with pytest.raises(tfrecorder.ConfigError, match="give a split's name or a list"):
            tfrecorder.compact(str(out), splits=bad)


@pytest.mark.slow
def test_a_damaged_record_stops_compact_and_leaves_the_last_version_whole(tmp_path):
    out, _ = _updated(tmp_path)
    want = _records(out, "test")
    shard = out / "data-train.tfrecord-00000-of-00001"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF  # inside the last record's checksum
    shard.write_bytes(bytes(data))
    with pytest.raises(tfrecorder.CorruptRecordError, match="data-train.tfrecord-00000"):
        tfrecorder.compact(str(out))
    assert json.loads((out / "tfrecorder.json").read_text())["version"] == 2
    assert not (out / "versions" / "00003.json").exists()
    assert not (out / layout.LOCK).exists() and not (out / layout.TMP_DIR).exists()
    assert _records(out, "test") == want
    assert not list(out.glob("*v00003*"))


@pytest.mark.slow
def test_compact_of_gzip_shards_after_an_append(tf, tmp_path):
    # Gzip folders take appends only (no index to retire records by); an append leaves
    # a split in shards of two versions, which compact rewrites as gzip shards.
    paths = _images(tmp_path / "img", 8)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out), compression="gzip")
    more = _images(tmp_path / "img", 2, start=8)
    table = _table(paths + more)
    assert tfrecorder.convert(table, str(out), mode="append",
                              compression="gzip").changes["train"]["added"] == 1
    def stored():  # every record of the latest version, by split, in manifest order
        m = json.loads((out / "tfrecorder.json").read_text())
        return {s: [r.numpy() for r in tf.data.TFRecordDataset(
                    [str(out / x["file"]) for x in info["shards"]], compression_type="GZIP")]
                for s, info in m["splits"].items()}

    want = stored()
    done = tfrecorder.compact(str(out))
    tag = _tag(out, 3)
    assert done.files == (f"data-train-v00003-{tag}.tfrecord-00000-of-00001.gz",
                          f"data-test-v00003-{tag}.tfrecord-00000-of-00001.gz")
    assert stored() == want and len(want["train"]) == 7
    with gzip.open(out / done.files[1]) as f:
        assert len(f.read()) > 0  # a gzip stream
    m = json.loads((out / "tfrecorder.json").read_text())
    assert all(s.get("index") is None for info in m["splits"].values()
               for s in info["shards"])
    assert tfrecorder.verify(str(out)).records_per_split == {"train": 7, "test": 3}
    # The same records in other gzip bytes: the report counts the new files' bytes.
    report = json.loads((out / "quality.json").read_text())
    assert {s: report["stats"][s]["stored_bytes"] for s in ("train", "test")} == {
        s: info["num_bytes"] for s, info in m["splits"].items()}
    ds = tfrecorder.load(str(out), split="test", batch_size=5, image_size=(8, 8),
                         shuffle=False)
    assert sum(int(tf.nest.flatten(b)[0].shape[0]) for b in ds) == 3


@pytest.mark.slow
def test_compact_on_cloud_storage(gcs, tmp_path):
    uris, out = _converted_on_gcs(gcs, "compact", 8)
    table = _table(uris).drop(index=[1])
    assert tfrecorder.convert(table, out, mode="update").tfds_left_out == ["train"]
    want = tfrecorder.read(out, "train")
    done = tfrecorder.compact(out)
    assert done.version == 3 and done.splits == {"train": 5}
    tag = json.loads(gcs.cat(f"{out}/{layout.version_manifest(3)}"))["tag"]
    assert gcs.exists(f"{out}/data-train-v00003-{tag}.tfrecord-00000-of-00001")
    assert not [p for p in gcs.ls(out) if p.rsplit("/", 1)[-1].startswith(".tfrecorder")]
    got = tfrecorder.read(out, "train")
    assert got["image_uri"].tolist() == want["image_uri"].tolist()
    assert tfrecorder.verify(out).records_per_split["train"] == 5
    assert LABELS[0] in set(got["label"])


@pytest.mark.slow
def test_what_a_killed_compact_left_is_removed_by_the_next_one(tmp_path):
    out, _ = _updated(tmp_path)
    want = {s: _records(out, s) for s in ("train", "test")}
    # What a compaction killed while moving its files into place leaves: its ledger,
    # and a shard of the version it did not publish.
    run = out / layout.TMP_DIR / "0123456789ab"
    run.mkdir(parents=True)
    leftover = "data-train-v00003.tfrecord-00001-of-00002"  # a name it will not write
    (run / "ledger.json").write_text(json.dumps({"files": [
        leftover, layout.rows_file(leftover), "versions/00003.json"]}))
    (out / leftover).write_bytes(b"half")
    (out / layout.rows_file(leftover)).write_bytes(b"half")
    assert tfrecorder.verify(str(out)).version == 2  # the last version reads as it is
    done = tfrecorder.compact(str(out))
    assert done.version == 3 and leftover not in done.files
    assert not (out / leftover).exists() and not (out / layout.rows_file(leftover)).exists()
    assert not (out / layout.TMP_DIR).exists()
    assert {s: _records(out, s) for s in ("train", "test")} == want
    assert tfrecorder.verify(str(out)).records == 16


@pytest.mark.slow
def test_a_compact_with_nothing_to_rewrite_still_removes_what_a_killed_run_left(tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    run = out / layout.TMP_DIR / "0123456789ab"
    run.mkdir(parents=True)
    leftover = "data-train-v00002.tfrecord-00000-of-00001"
    (run / "ledger.json").write_text(json.dumps({"files": [leftover]}))
    (out / leftover).write_bytes(b"half")
    done = tfrecorder.compact(str(out))  # version 1 is whole shards: nothing to rewrite
    assert done.version is None
    assert not (out / leftover).exists() and not (out / layout.TMP_DIR).exists()
