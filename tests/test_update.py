"""Updates from an edited table: only what changed is written, every version stays
readable (docs/versions.md), on real conversions with the DirectRunner."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest

import tfrecorder
from tfrecorder._folder import layout, rows
from tests.conftest import encode

LABELS = ["cat", "dog"]


def _images(folder, n, start=0):
    """``n`` small distinct JPEGs ``<i>.jpg``; their paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(start, start + n):
        path = os.path.join(str(folder), f"{i}.jpg")
        with open(path, "wb") as f:
            f.write(encode(seed=i))
        paths.append(path)
    return paths


def _table(paths, labels=None, splits=None):
    n = len(paths)
    return pd.DataFrame({
        "split": splits or ["TRAIN" if i % 4 else "TEST" for i in range(n)],
        "image_uri": paths,
        "label": labels or [LABELS[i % 2] for i in range(n)]})


def _converted_on_gcs(gcs, folder, n):
    """``n`` small distinct JPEGs uploaded to the emulator's ``folder/img/<i>.jpg`` and
    converted into ``folder/out``: their URIs and the output's."""
    from tests.conftest import BUCKET

    root = f"gs://{BUCKET}/{folder}"
    uris = [f"{root}/img/{i}.jpg" for i in range(n)]
    for i, uri in enumerate(uris):
        gcs.pipe(uri, encode(seed=i))
    out = f"{root}/out"
    tfrecorder.convert(_table(uris), out)
    return uris, out


def _garbage_keeping_stamp(path):
    """Replaces ``path``'s bytes with as many bytes of garbage, and puts its size and
    modification time back as they were: an update that trusts size and time does not
    see it; one that opens the file finds no image."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"\0" * st.st_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns


def _digests(out):
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def _listed(out, version):
    """The files version ``version``'s manifest lists, and the manifest itself."""
    m = json.loads((out / layout.version_manifest(version)).read_text())
    names = {layout.version_manifest(version)}
    for info in m["splits"].values():
        for s in info["shards"]:
            names |= {s["file"], s["index"], s["rows"]} | (
                {s["live_index"]} if s.get("live_index") else set())
    return names


def _tag(out, version):
    """The tag of the run that published ``version`` (in every name it wrote)."""
    return json.loads((out / layout.version_manifest(version)).read_text())["tag"]


def _live_records(tf, out, version):
    """Every live record of ``version`` per split, read through the live index where a
    shard has one (the records at those offsets only), else the whole shard."""
    m = json.loads((out / layout.version_manifest(version)).read_text())
    found = {}
    for split, info in m["splits"].items():
        records = []
        for s in info["shards"]:
            path = out / s["file"]
            if s.get("live_index"):
                data = path.read_bytes()
                for line in (out / s["live_index"]).read_text().splitlines():
                    offset, length = map(int, line.split())
                    framed = data[offset:offset + length]
                    records.append(framed[12:-4])  # length and its CRC, data, data's CRC
            else:
                records.extend(r.numpy() for r in tf.data.TFRecordDataset(str(path)))
            assert len(records) - sum(len(r) for r in found.values()) >= 0
        found[split] = [tf.train.Example.FromString(r) for r in records]
        assert len(found[split]) == info["num_examples"]
    return found


def _values(example):
    f = example.features.feature
    return (f["image_uri"].bytes_list.value[0].decode(), f["label"].int64_list.value[0],
            f["image"].bytes_list.value[0])


@pytest.mark.slow
def test_an_update_writes_only_what_changed_and_keeps_every_version(tf, tmp_path):
    paths = _images(tmp_path / "img", 12)
    out = tmp_path / "out"
    first = tfrecorder.convert(_table(paths), str(out))
    assert first.version == 1 and first.rows_per_split == {"train": 9, "test": 3}
    v1 = _digests(out)
    v1_listed = _listed(out, 1)

    # The edit: row 1 removed, row 2 relabelled, image 3 rewritten, image 12 added.
    table = _table(paths)
    table = table.drop(index=[1])
    table.loc[2, "label"] = "owl"
    with open(paths[3], "wb") as f:
        f.write(encode(seed=103, size=(30, 20)))
    new = _images(tmp_path / "img", 1, start=12)[0]
    table.loc[12] = ["TRAIN", new, "cat"]
    untouched = [p for i, p in enumerate(paths) if i not in (1, 2, 3)]
    for p in untouched:  # an update that opened any of them would quarantine it
        _garbage_keeping_stamp(p)

    result = tfrecorder.convert(table, str(out), mode="update")
    assert result.version == 2 and not result.unchanged
    assert result.rows_quarantined == 0  # no unchanged image was read
    # image 0 is test (i % 4 == 0); 1, 2, 3 are train
    assert result.changes == {"train": {"added": 3, "retired": 3, "kept": 6},
                              "test": {"added": 0, "retired": 0, "kept": 3}}
    assert result.rows_per_split == {"train": 9, "test": 3}
    assert "version 2" in str(result) and "+3 added, -3 retired, 6 kept" in str(result)

    # Nothing of version 1 was touched: its files are byte for byte as they were.
    after = _digests(out)
    for name in v1_listed:
        assert after[name] == v1[name], name
    assert (out / "versions" / "00002.json").read_bytes() == (out / "tfrecorder.json").read_bytes()
    assert (out / "label.labels.txt").read_text() == "cat\ndog\nowl\n"  # ids kept, owl next

    m2 = json.loads((out / "versions" / "00002.json").read_text())
    assert (m2["format_version"], m2["version"], m2["parent"], m2["mode"]) == (2, 2, 1, "update")
    assert m2["key"] == "image_uri" and m2["source"] == "DataFrame"
    assert m2["vocabularies"]["label"] == ["cat", "dog", "owl"]
    assert json.loads((out / "versions" / "00001.json").read_text())["vocabularies"] == {
        "label": ["cat", "dog"]}
    train = m2["splits"]["train"]["shards"]
    tag = m2["tag"]
    assert re.fullmatch(r"[0-9a-f]{8}", tag)
    assert [s["file"] for s in train] == ["data-train.tfrecord-00000-of-00001",
                                          f"data-train-v00002-{tag}.tfrecord-00000-of-00001"]
    assert train[0]["live"] == 6 and train[0]["num_examples"] == 9
    assert train[0]["live_index"] == (f"versions/00002-{tag}/index/"
                                      "data-train.tfrecord-00000-of-00001.idx")
    assert "live" not in train[1] and "live_index" not in train[1]
    assert m2["splits"]["train"]["num_examples"] == 6 + 3  # kept, and written
    assert "live_index" not in m2["splits"]["test"]["shards"][0]

    # The records of version 2: the kept ones of version 1, and the three written.
    records = _live_records(tf, out, 2)
    got = {uri: (label, data) for uri, label, data in map(_values, records["train"])}
    want = {p: LABELS[i % 2] for i, p in enumerate(paths) if i % 4 and i not in (1,)}
    want[paths[2]] = "owl"
    want[new] = "cat"
    names = ["cat", "dog", "owl"]
    assert {uri: names[label] for uri, (label, _) in got.items()} == want
    assert got[paths[3]][1] == open(paths[3], "rb").read()  # the rewritten image's new bytes
    assert got[new][1] == open(new, "rb").read()
    # Version 1 reads as it did: the records of its own shards, every one of them.
    old = _live_records(tf, out, 1)
    assert sorted(u for u, _, _ in map(_values, old["train"])) == sorted(
        p for i, p in enumerate(paths) if i % 4)
    assert tfrecorder.versions(str(out))[["version", "mode", "train_added", "train_retired",
                                          "train_kept", "train_records"]].values.tolist() == [
        [1, "create", 9, 0, 0, 9], [2, "update", 3, 3, 6, 9]]

    # compare="content" opens every image: the garbage behind unchanged stamps shows.
    # Every row it sends through is garbage: over the error budget (of the whole table),
    # the update fails, and publishes nothing.
    published = (out / "tfrecorder.json").read_bytes()
    with pytest.raises(tfrecorder.ConversionError, match=f"{len(untouched)} of "
                       f"{len(table)} rows were quarantined.*cannot identify image"):
        tfrecorder.convert(table, str(out), mode="update", compare="content")
    assert (out / "tfrecorder.json").read_bytes() == published
    assert not (out / "versions" / "00003.json").exists()
    assert tfrecorder.versions(str(out))["version"].tolist() == [1, 2]


def test_an_update_that_changes_nothing_writes_nothing(tmp_path):
    paths = _images(tmp_path / "img", 6)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    for p in paths:  # unchanged rows are never opened
        _garbage_keeping_stamp(p)
    result = tfrecorder.convert(_table(paths), str(out), mode="update")
    assert result.unchanged and result.version == 1
    assert result.changes == {"train": {"added": 0, "retired": 0, "kept": 4},
                              "test": {"added": 0, "retired": 0, "kept": 2}}
    assert "up to date" in str(result)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes())
            for p in out.rglob("*") if p.is_file()} == before
    assert not (out / layout.LOCK).exists() and not (out / layout.TMP_DIR).exists()


@pytest.mark.slow
def test_append_adds_new_keys_and_reports_the_stored_ones(tf, tmp_path):
    paths = _images(tmp_path / "img", 6)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    more = _images(tmp_path / "img", 2, start=6)
    table = _table(paths + more)
    table.loc[0, "label"] = "dog"  # a stored key: append neither changes nor retires it
    table = table.drop(index=[1])  # nor does it retire what the table no longer has
    result = tfrecorder.convert(table, str(out), mode="append")
    assert result.version == 2 and result.existing_count == 5
    assert sorted(result.existing_keys) == [paths[0], paths[2], paths[3], paths[4], paths[5]]
    assert "5 row(s) not appended" in str(result)
    # The stored key whose row differs is said, with what differs and what writes it.
    assert (result.existing_differ, result.existing_differ_in) == (1, ["label"])
    assert str(result).count("; 1 of them differs (label): --update writes it") == 1
    assert "1 of them differs (label)" in result._repr_html_()
    assert result.changes == {"train": {"added": 2, "retired": 0, "kept": 4},
                              "test": {"added": 0, "retired": 0, "kept": 2}}
    records = _live_records(tf, out, 2)
    uris = sorted(u for split in records.values() for u, _, _ in map(_values, split))
    assert uris == sorted(paths + more)  # each once
    labels = {u: label for split in records.values() for u, label, _ in map(_values, split)}
    assert labels[paths[0]] == 1 - 1  # still cat: append changes no stored record
    m = json.loads((out / "tfrecorder.json").read_text())
    assert m["mode"] == "append" and all(
        "live_index" not in s for info in m["splits"].values() for s in info["shards"])
    # Nothing new: up to date, and still what differs (here the image as well).
    with open(paths[2], "ab") as f:
        f.write(b"\0")
    again = tfrecorder.convert(table, str(out), mode="append")
    assert again.unchanged and (again.existing_differ, again.existing_differ_in) == (
        2, ["image", "label"])
    assert "; 2 of them differ (image, label): --update writes them" in str(again)


@pytest.mark.slow
def test_a_shard_with_no_live_record_is_not_listed(tf, tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths, splits=["TRAIN", "TRAIN", "TEST", "TEST"]), str(out))
    table = _table(paths[:2], splits=["TRAIN", "TRAIN"])  # the whole test split removed
    result = tfrecorder.convert(table, str(out), mode="update")
    assert result.changes == {"train": {"added": 0, "retired": 0, "kept": 2},
                              "test": {"added": 0, "retired": 2, "kept": 0}}
    m = json.loads((out / "versions" / "00002.json").read_text())
    assert list(m["splits"]) == ["train"]
    assert not list(out.glob("versions/00002*/index"))  # no live index to write
    assert (out / "data-test.tfrecord-00000-of-00001").exists()  # version 1's, kept
    info = json.loads((out / "dataset_info.json").read_text())
    assert [s["name"] for s in info["splits"]] == ["train"]
    # Back again: a new row with the key of a retired record is new.
    again = tfrecorder.convert(_table(paths, splits=["TRAIN", "TRAIN", "TEST", "TEST"]),
                               str(out), mode="update")
    assert again.version == 3 and again.changes["test"] == {"added": 2, "retired": 0,
                                                             "kept": 0}
    m3 = json.loads((out / "tfrecorder.json").read_text())
    assert [s["file"] for s in m3["splits"]["test"]["shards"]] == [
        f"data-test-v00003-{m3['tag']}.tfrecord-00000-of-00001"]
    # A split of one update's whole shards is one template again, which TFDS reads.
    info = json.loads((out / "dataset_info.json").read_text())
    assert {s["name"]: s["filepathTemplate"] for s in info["splits"]}["test"] == (
        f"{{DATASET}}-{{SPLIT}}-v00003-{m3['tag']}.{{FILEFORMAT}}-{{SHARD_X_OF_Y}}")
    assert len(_live_records(tf, out, 3)["test"]) == 2


@pytest.mark.slow
def test_a_key_column_matches_rows_whose_image_moved(tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    table = _table(paths, splits=["TRAIN"] * 4).assign(id=["a", "b", "c", "d"])
    schema = {"split": tfrecorder.types.SplitKey, "image_uri": tfrecorder.types.ImageUri,
              "label": tfrecorder.types.StringLabel, "id": tfrecorder.types.StringInput}
    tfrecorder.convert(table, str(out), schema=schema, key="id")
    lines = rows.read(str(out / layout.rows_file("data-train.tfrecord-00000-of-00001")))
    assert sorted(e["key"] for e in lines) == ["a", "b", "c", "d"]
    assert {e["key"]: e["features"] for e in lines}["a"] == {"id": "a"}
    moved = tmp_path / "img" / "moved.jpg"
    os.rename(paths[0], moved)
    table.loc[0, "image_uri"] = str(moved)
    result = tfrecorder.convert(table, str(out), schema=schema, key="id", mode="update")
    # The same key with another image file: a change (its stamp is another file's).
    assert result.changes == {"train": {"added": 1, "retired": 1, "kept": 3}}


@pytest.mark.slow
def test_what_an_update_cannot_do_is_refused_before_anything_is_written(tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    before = _digests(out)
    types = tfrecorder.types
    with pytest.raises(tfrecorder.ConfigError, match="columns differ.*new features.*extra"):
        tfrecorder.convert(_table(paths).assign(extra=[1, 2, 3, 4]), str(out), mode="update",
                           schema={"split": types.SplitKey, "image_uri": types.ImageUri,
                                   "label": types.StringLabel, "extra": types.IntegerInput})
    with pytest.raises(tfrecorder.ConfigError, match="image settings.*shorter_side"):
        tfrecorder.convert(_table(paths), str(out), mode="update", shorter_side=8)
    with pytest.raises(tfrecorder.ConfigError, match="name='other'.*'data'"):
        tfrecorder.convert(_table(paths), str(out), mode="update", name="other")
    with pytest.raises(tfrecorder.ConfigError, match="label ids"):
        tfrecorder.convert(_table(paths), str(out), mode="update",
                           label_vocabulary=["dog", "cat"])
    with pytest.raises(tfrecorder.ConfigError, match="key='nope' is not a column"):
        tfrecorder.convert(_table(paths), str(out), mode="update", key="nope")
    with pytest.raises(tfrecorder.ConfigError, match="overwrite"):
        tfrecorder.convert(_table(paths), str(out), mode="update", overwrite=True)
    with pytest.raises(tfrecorder.ConfigError, match="mode='replace'"):
        tfrecorder.convert(_table(paths), str(out), mode="replace")
    with pytest.raises(tfrecorder.OutputExistsError):  # no mode: as before
        tfrecorder.convert(_table(paths), str(out))
    assert _digests(out) == before and not (out / layout.LOCK).exists()

    # A folder converted before rows files existed cannot be compared with.
    for name in ("tfrecorder.json", "versions/00001.json"):
        m = json.loads((out / name).read_text())
        for info in m["splits"].values():
            for s in info["shards"]:
                del s["rows"]
        (out / name).write_text(json.dumps(m))
    with pytest.raises(tfrecorder.ConfigError, match="before rows files.*mode='overwrite'"):
        tfrecorder.convert(_table(paths), str(out), mode="update")


@pytest.mark.slow
def test_overwrite_starts_over_at_version_one(tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    tfrecorder.convert(_table(paths[:3]), str(out), mode="update")
    assert (out / "versions" / "00002.json").exists()
    (out / "notes.txt").write_text("mine")
    result = tfrecorder.convert(_table(paths[1:]), str(out), mode="overwrite")
    assert result.version == 1
    assert sorted(os.listdir(out / "versions")) == ["00001.json"]
    assert not any("-v0" in n for n in os.listdir(out))
    assert (out / "notes.txt").read_text() == "mine"
    assert list(tfrecorder.versions(str(out))["version"]) == [1]


def test_an_update_into_an_empty_folder_is_a_first_conversion(tmp_path):
    paths = _images(tmp_path / "img", 4)
    result = tfrecorder.convert(_table(paths), str(tmp_path / "out"), mode="update")
    assert result.version == 1 and result.rows_written == 4
    m = json.loads((tmp_path / "out" / "tfrecorder.json").read_text())
    assert m["mode"] == "update" and m["version"] == 1 and "parent" not in m


def test_an_update_into_a_folder_of_other_files_does_not_suggest_an_update(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(tfrecorder.OutputExistsError) as e:
        tfrecorder.convert(_table(_images(tmp_path / "img", 2)), str(out), mode="update")
    said = str(e.value)
    assert "holds 1 entry (notes.txt) and no version of a conversion to update" in said
    assert "mode='update' (--update)" not in said and "--overwrite in place of --update" in said
    assert os.listdir(out) == ["notes.txt"]


def test_an_update_into_a_missing_folder_with_a_bad_table_leaves_no_folder(tmp_path):
    # A first conversion reads and checks its table before it writes anything: an
    # update of a folder that holds no version yet is one, and leaves nothing either.
    paths = _images(tmp_path / "img", 2)
    table = _table(paths)
    table.loc[1, "split"] = "SOMETIMES"
    with pytest.raises(tfrecorder.SchemaError, match="SOMETIMES"):
        tfrecorder.convert(table, str(tmp_path / "out"), mode="update")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_killed_update_leaves_the_last_version_whole(tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    before = _digests(out)
    # What a run killed after writing a shard leaves: its ledger, and the shard.
    run = out / layout.TMP_DIR / "0123456789ab"
    run.mkdir(parents=True)
    leftover = "data-train-v00002.tfrecord-00000-of-00001"
    (run / "ledger.json").write_text(json.dumps({"files": [
        leftover, layout.rows_file(leftover), "versions/00002.json"]}))
    (out / leftover).write_bytes(b"half")
    (out / "rows").joinpath(leftover + ".rows.jsonl.gz").write_bytes(b"half")
    assert tfrecorder.verify(str(out)).records == 4  # version 1 reads as it is
    more = _images(tmp_path / "img", 1, start=4)
    result = tfrecorder.convert(_table(paths + more), str(out), mode="update")
    assert result.version == 2 and result.changes["test"]["added"] == 1
    assert not (out / leftover).exists() and not (out / layout.TMP_DIR).exists()
    after = _digests(out)
    assert all(after[n] == before[n] for n in _listed(out, 1))


#: The file-system calls that change a folder, as the storage facade makes them.
_CHANGES = ("open", "replace", "rename", "link", "remove", "unlink", "mkdir", "rmdir")


def _killed_at(n, out, fn):
    """Runs ``fn`` in a forked child killed (``os._exit``, no cleanup, no ``finally``)
    just before its ``n``-th call that changes ``out`` outside the runs' own folder;
    True when ``fn`` finished first."""
    pid = os.fork()
    if pid == 0:  # the child: never returns to the test
        try:
            calls, root = [0], str(out)

            def watched(name):
                real = getattr(os, name)

                def call(path, *rest, **kw):
                    changes = name != "open" or rest[0] & (os.O_WRONLY | os.O_RDWR)
                    if (changes and not isinstance(path, int)
                            and os.fspath(path).startswith(root)
                            and layout.TMP_DIR not in os.fspath(path)):
                        calls[0] += 1
                        if calls[0] == n:
                            os._exit(9)
                    return real(path, *rest, **kw)
                return call
            for name in _CHANGES:
                setattr(os, name, watched(name))
            fn()
            os._exit(0)
        except BaseException:
            import traceback
            traceback.print_exc()
            os._exit(1)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert code in (0, 9), f"the update failed in the child ({code})"
    return code == 0


@pytest.mark.slow
def test_an_update_killed_at_any_call_publishes_all_of_itself_or_nothing(tmp_path):
    # Killed before its version's manifest exists, every reader still sees the parent
    # whole (the report, TFDS's metadata, the labels, the errors file); killed after, its
    # version is published. Either way the next run leaves the folder an uninterrupted
    # update leaves, and no temporary file.
    paths = _images(tmp_path / "img", 6)
    template = tmp_path / "v1"
    tfrecorder.convert(_table(paths), str(template))
    table = _table(paths + _images(tmp_path / "img", 1, start=6),
                   labels=["cat", "owl", "dog", "cat", "dog", "cat", "owl"])
    top = ["tfrecorder.json", "quality.json", "dataset_info.json", "features.json",
           "errors.jsonl", "label.labels.txt"]
    v1 = {n: (template / n).read_bytes() for n in top}
    clean = tmp_path / "clean"
    shutil.copytree(template, clean)
    tfrecorder.convert(table, str(clean), mode="update")
    want = _digests(clean)
    stamped = {"tfrecorder.json", "versions/00002.json"}  # they hold the time published

    n, finished = 0, False
    while not finished:
        n += 1
        out = tmp_path / f"k{n}"
        shutil.copytree(template, out)
        finished = _killed_at(n, out, lambda: tfrecorder.convert(table, str(out),
                                                                 mode="update"))
        if not (out / "versions" / "00002.json").exists():
            assert {x: (out / x).read_bytes() for x in top} == v1, n
            assert tfrecorder.report(str(out)).data.get("version", 1) == 1
        result = tfrecorder.convert(table, str(out), mode="update")  # the rerun
        assert result.version == 2 and result.labels == ["cat", "dog", "owl"], n
        got = _digests(out)
        assert sorted(got) == sorted(want), (n, set(got) ^ set(want))  # no temporary file
        assert {x: d for x, d in got.items() if x not in stamped} == {
            x: d for x, d in want.items() if x not in stamped}, n
        assert (out / "tfrecorder.json").read_bytes() == (
            out / "versions" / "00002.json").read_bytes()
        shutil.rmtree(out)
    assert n > 20, n  # every change the update makes was a kill point


@pytest.mark.parametrize("how", ["append", "vocabulary"])
def test_a_new_label_without_a_new_record_is_a_change(tmp_path, how):
    # The only new label is on a row whose key is stored (an append leaves the row as
    # it is), or only in a label_vocabulary that grew: the new version lists it, and a
    # model built from the result has a unit for it.
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    if how == "append":
        table = _table(paths, labels=["owl", "dog", "cat", "dog"])
        result = tfrecorder.convert(table, str(out), mode="append")
        assert result.existing_count == 4
    else:
        result = tfrecorder.convert(_table(paths), str(out), mode="update",
                                    label_vocabulary=["cat", "dog", "owl"])
    assert not result.unchanged and result.version == 2
    assert result.labels == ["cat", "dog", "owl"]
    assert result.labels_without_records == ["owl"]
    assert (out / "label.labels.txt").read_text().split() == ["cat", "dog", "owl"]
    assert result.changes == {"train": {"added": 0, "retired": 0, "kept": 3},
                              "test": {"added": 0, "retired": 0, "kept": 1}}
    assert tfrecorder.verify(str(out)).records == 4
    again = tfrecorder.convert(_table(paths), str(out), mode="update",
                               label_vocabulary=["cat", "dog", "owl"])
    assert again.unchanged and again.version == 2


@pytest.mark.slow
def test_the_command_line_updates_and_lists_versions(tmp_path, run_cli):
    paths = _images(tmp_path / "img", 4)
    csv = tmp_path / "data.csv"
    _table(paths).to_csv(csv, index=False)
    out = tmp_path / "out"
    cli = run_cli
    assert cli("convert", str(csv), str(out), "--no-progress").returncode == 0
    _table(paths + _images(tmp_path / "img", 1, start=4)).to_csv(csv, index=False)
    done = cli("convert", str(csv), str(out), "--update", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "version 2" in done.stdout and "+1 added, -0 retired" in done.stdout
    same = cli("convert", str(csv), str(out), "--update", "--no-progress")
    assert same.returncode == 0 and "up to date" in same.stdout
    listed = cli("versions", str(out))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:4] == ["version", "published", "source", "mode"]
    assert lines[1].split()[0] == "1" and "data.csv" in lines[1] and "create" in lines[1]
    assert lines[2].split()[0] == "2" and "update" in lines[2] and len(lines) == 3
    appended = cli("convert", str(csv), str(out), "--append", "--no-progress")
    assert appended.returncode == 0 and "up to date" in appended.stdout
    assert "5 row(s) not appended" in appended.stdout
    nothing = cli("versions", str(tmp_path / "nothing"))
    assert nothing.returncode == 2 and nothing.stderr.startswith("Error: ")
    both = cli("convert", str(csv), str(out), "--update", "--overwrite", "--no-progress")
    assert both.returncode == 2 and "overwrite" in both.stderr


@pytest.mark.slow
def test_rows_quarantined_before_do_not_make_a_small_update_fail(tmp_path):
    paths = _images(tmp_path / "img", 11) + [str(tmp_path / "img" / "missing.jpg")]
    out = tmp_path / "out"
    first = tfrecorder.convert(_table(paths), str(out))
    assert first.rows_quarantined == 1  # 1 of 12: within max_error_fraction=0.1
    more = _images(tmp_path / "img", 1, start=20)
    # The missing image's row is not stored, so every update tries it again: 1 of the
    # table's 13 rows, not 1 of the 2 rows the update reads.
    result = tfrecorder.convert(_table(paths + more), str(out), mode="update")
    assert result.version == 2 and result.rows_quarantined == 1
    assert result.changes == {"train": {"added": 0, "retired": 0, "kept": 8},
                              "test": {"added": 1, "retired": 0, "kept": 3}}
    (line,) = (out / "errors.jsonl").read_text().splitlines()
    assert json.loads(line)["image_uri"].endswith("missing.jpg")
    # Tried again and quarantined again, with nothing else to change: nothing published.
    again = tfrecorder.convert(_table(paths + more), str(out), mode="update")
    assert again.unchanged and again.version == 2
    assert sorted(p.name for p in (out / "versions").glob("*.json")) == [
        "00001.json", "00002.json"]
    assert not (out / layout.TMP_DIR).exists() and not (out / layout.LOCK).exists()


@pytest.mark.slow
def test_an_update_whose_new_rows_miss_their_files_stops_before_reading_any(tmp_path):
    paths = _images(tmp_path / "img", 8)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    broken = tmp_path / "img" / "broken.jpg"
    broken.write_bytes(b"not an image")  # found only by reading it: not among the bad
    gone = [str(tmp_path / "img" / f"gone{i}.jpg") for i in range(3)]
    with pytest.raises(tfrecorder.ConversionError, match=r"^3 of 12 rows were quarantined"):
        tfrecorder.convert(_table(paths + [str(broken)] + gone), str(out), mode="append")
    assert json.loads((out / "tfrecorder.json").read_text())["version"] == 1


@pytest.mark.slow
def test_the_report_of_an_update_compares_new_rows_with_every_kept_one(tmp_path):
    paths = _images(tmp_path / "img", 8)
    out = tmp_path / "out"
    table = _table(paths, splits=["TRAIN"] * 6 + ["TEST"] * 2)
    tfrecorder.convert(table, str(out), near_duplicates=True)
    copy = tmp_path / "img" / "copy.jpg"  # version 1's first train image, now in test
    copy.write_bytes(open(paths[0], "rb").read())
    table.loc[8] = ["TEST", str(copy), "cat"]
    for p in paths:  # kept records are compared by their rows files, never read again
        _garbage_keeping_stamp(p)
    result = tfrecorder.convert(table.drop(index=[5]), str(out), mode="update",
                                near_duplicates=True)
    assert result.rows_quarantined == 0
    m = json.loads((out / "tfrecorder.json").read_text())
    assert m["quality"] == f"versions/00002-{m['tag']}/quality.json"
    report = json.loads((out / m["quality"]).read_text())
    assert (out / "quality.json").read_text() == (
        out / m["quality"]).read_text()
    assert report["version"] == 2 and report["counts"]["leaks"] == {"exact": 1, "near": 0}
    (pair,) = report["pairs"]
    assert (pair["a"]["image_uri"], pair["a"]["split"], pair["a"]["position"]) == (
        paths[0], "train", 0)
    assert (pair["b"]["image_uri"], pair["b"]["split"], pair["b"]["position"]) == (
        str(copy), "test", 2)  # after the two kept test records, in file order
    assert report["stats"]["train"]["records"] == 5 and report["stats"]["test"]["records"] == 3
    assert report["stats"]["train"]["labels"] == {"cat": 3, "dog": 2}
    assert result.report.counts["leaks"]["exact"] == 1
    # quality.json is the latest version's report (docs/format.md); version 1 names it.
    assert json.loads((out / "versions" / "00001.json").read_text())["quality"] == "quality.json"


@pytest.mark.slow
def test_a_near_copy_added_by_an_update_is_a_leak_naming_the_kept_row(tmp_path):
    # The kept side of a near pair is found in its shard's rows file, by its rank among
    # the live records (through the live index the update writes): row, image, label.
    from PIL import Image

    from tests.test_quality import _jpeg, _photo

    paths = []
    for i in range(8):
        path = tmp_path / "img" / f"{i}.jpg"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(_jpeg(_photo(100 + i)))
        paths.append(str(path))
    out = tmp_path / "out"
    table = _table(paths, splits=["TRAIN"] * 6 + ["TEST"] * 2)
    tfrecorder.convert(table, str(out), near_duplicates=True)
    half = tmp_path / "img" / "half_of_3.jpg"  # paths[3], half size, re-encoded
    Image.open(paths[3]).resize((80, 60)).save(half, "JPEG", quality=80)
    edited = table.drop(index=[1])             # a train record retired: a live index
    edited.loc[8] = ["TEST", str(half), "dog"]
    result = tfrecorder.convert(edited, str(out), mode="update", near_duplicates=True)
    assert result.changes["train"]["retired"] == 1
    report = json.loads((out / "quality.json").read_text())
    (pair,) = [p for p in report["pairs"] if p["kind"] == "near"]
    kept = tfrecorder.read(str(out), "train")
    at = kept["image_uri"].tolist().index(paths[3])
    assert pair["a"] == {"split": "train", "row": 3, "image_uri": paths[3],
                         "label": LABELS[3 % 2], "position": at}
    assert pair["b"] == {"split": "test", "row": 8, "image_uri": str(half), "label": "dog",
                         "position": 2}
    assert report["counts"]["leaks"]["near"] == 1


def _edited_twice(tmp_path, folder):
    """20 images converted with the report's near pairs into ``folder``, copied into
    ``folder``-copy, and the edited table (2 rows removed, 2 relabelled, 3 new: one a
    copy of a train image in test, one whose file is missing)."""
    paths = _images(tmp_path / "img", 20)
    out = tmp_path / folder
    table = _table(paths)
    tfrecorder.convert(table, str(out), near_duplicates=True)
    copy = tmp_path / "img" / "copy.jpg"
    copy.write_bytes(open(paths[1], "rb").read())  # paths[1] is in train
    edited = table.drop(index=[2, 3])
    edited.loc[[4, 5], "label"] = ["dog", "cat"]
    edited.loc[20] = ["TEST", str(copy), "cat"]
    edited.loc[21] = ["TRAIN", str(tmp_path / "img" / "missing.jpg"), "dog"]
    edited.loc[22] = ["TRAIN", _images(tmp_path / "img", 1, start=30)[0], "dog"]
    shutil.copytree(out, tmp_path / f"{folder}-copy")
    return out, tmp_path / f"{folder}-copy", edited


@pytest.mark.slow
def test_a_small_update_runs_its_steps_without_beam_and_writes_the_same_files(tmp_path):
    from tests.conftest import timeless

    here, beam, edited = _edited_twice(tmp_path, "out")
    without = tfrecorder.convert(edited, str(here), mode="update", near_duplicates=True)
    # Options for Beam, even ones that change nothing, run the same update on Beam.
    through = tfrecorder.convert(edited, str(beam), mode="update", near_duplicates=True,
                                 pipeline_options={"direct_num_workers": 1})
    assert without.job_id.startswith("here-") and through.job_id.startswith("direct-")
    for r in (without, through):
        assert r.version == 2 and r.rows_quarantined == 1
        assert r.changes["train"] == {"added": 2, "retired": 3, "kept": 12}
        assert r.report.counts["leaks"]["exact"] == 1
    files = {p.relative_to(here).as_posix() for p in here.rglob("*") if p.is_file()}
    assert files == {p.relative_to(beam).as_posix() for p in beam.rglob("*") if p.is_file()}
    assert f"versions/00002-{_tag(here, 2)}/quality.json" in files and "errors.jsonl" in files
    for name in sorted(files):  # byte for byte, but the time published and images' times
        assert timeless(here / name) == timeless(beam / name), name


@pytest.mark.slow
def test_an_update_with_pipeline_options_or_over_the_budget_still_says_so(
        tmp_path, monkeypatch):
    out, copy, edited = _edited_twice(tmp_path, "out")
    # Options for Beam: the update runs on Beam, as asked.
    given = tfrecorder.convert(edited, str(out), mode="update", near_duplicates=True,
                               pipeline_options={"direct_num_workers": 1})
    assert given.job_id.startswith("direct-") and given.version == 2
    # Without Beam, a run over its error budget fails as on Beam, and publishes nothing
    # (files that are there but are no images: missing ones would stop it before).
    for i in range(23, 30):
        edited.loc[i] = ["TRAIN", str(tmp_path / "img" / f"gone{i}.jpg"), "cat"]
        (tmp_path / "img" / f"gone{i}.jpg").write_bytes(b"not an image")
    with pytest.raises(tfrecorder.ConversionError, match="max_error_fraction") as failed:
        tfrecorder.convert(edited, str(copy), mode="update", near_duplicates=True,
                           max_error_fraction=0.2)
    assert json.loads((copy / "tfrecorder.json").read_text())["version"] == 1
    assert not (copy / "versions" / "00002.json").exists()
    assert (copy / "errors.jsonl").read_text() == ""  # version 1's, as it was
    (named,) = [w.strip("(),.;'") for w in str(failed.value).split()
                if w.strip("(),.;'").endswith("errors.jsonl")]
    assert named.startswith(str(copy)) and named != str(copy / "errors.jsonl")
    assert len(open(named).read().splitlines()) == 8  # every row it could not write


@pytest.mark.slow
def test_a_small_update_never_imports_beam(tmp_path):
    out, _, edited = _edited_twice(tmp_path, "out")
    table = tmp_path / "edited.csv"
    edited.to_csv(table, index=False)
    code = ("import sys, tfrecorder\n"
            f"r = tfrecorder.convert({str(table)!r}, {str(out)!r}, mode='update', "
            "near_duplicates=True)\n"
            "print(r.version, r.job_id[:5], 'apache_beam' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "here-", "False"]


@pytest.mark.slow
def test_an_update_on_cloud_storage_stamps_objects_by_generation(gcs, tmp_path):
    uris, out = _converted_on_gcs(gcs, "versions-e2e", 6)
    (line, *_) = rows.read(f"{out}/rows/data-train.tfrecord-00000-of-00001.rows.jsonl.gz")
    info = gcs.info(line["key"])
    assert line["stamp"] == int(info["generation"]) and line["size"] == int(info["size"])
    assert json.loads(gcs.cat(f"{out}/versions/00001.json"))["version"] == 1

    gcs.pipe(uris[1], encode(seed=101))  # rewritten: a new generation
    result = tfrecorder.convert(_table(uris[:5]), out, mode="update")  # and 5 removed
    assert result.version == 2
    assert result.changes == {"train": {"added": 1, "retired": 2, "kept": 2},
                              "test": {"added": 0, "retired": 0, "kept": 2}}
    m = json.loads(gcs.cat(f"{out}/tfrecorder.json"))
    assert m == json.loads(gcs.cat(f"{out}/versions/00002.json"))
    (old, new) = m["splits"]["train"]["shards"]
    assert new["file"] == f"data-train-v00002-{m['tag']}.tfrecord-00000-of-00001"
    assert old["live"] == 2
    assert gcs.exists(f"{out}/{old['live_index']}") and gcs.exists(f"{out}/{new['rows']}")
    with pytest.raises(FileExistsError):  # a published version is never replaced
        from tfrecorder import _storage as storage

        storage.create_exclusive(f"{out}/versions/00002.json", b"{}")
    assert tfrecorder.convert(_table(uris[:5]), out, mode="update").unchanged
    # the first row removed, a copy of a train image added to test: every kept row's
    # index label moves down by one, staged in the run's folder on the object store
    copy = f"{out.rsplit('/', 1)[0]}/img/copy_of_2.jpg"
    gcs.pipe(copy, gcs.cat(uris[2]))
    edited = _table(uris[:5]).iloc[1:].reset_index(drop=True)
    edited.loc[len(edited)] = ["TEST", copy, LABELS[2 % 2]]
    tfrecorder.convert(edited, out, mode="update")
    (leak,) = tfrecorder.report(out).leaks.itertuples()
    assert (leak.row_a, leak.image_uri_a, leak.row_b, leak.image_uri_b) == (1, uris[2], 4, copy)


@pytest.mark.slow
def test_a_version_published_by_a_run_killed_before_tfrecorder_json_is_the_latest(tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    v1 = (out / "tfrecorder.json").read_bytes()
    tfrecorder.convert(_table(paths[:3]), str(out), mode="update")
    (out / "tfrecorder.json").write_bytes(v1)  # as if killed right after versions/00002.json
    result = tfrecorder.convert(_table(paths[:3]), str(out), mode="update")
    assert result.unchanged and result.version == 2
    assert (out / "tfrecorder.json").read_bytes() == (out / "versions" / "00002.json").read_bytes()


def test_update_shard_names_format_and_parse_with_their_version():
    name = layout.ShardName("data", "train", 3, 8, False, 2, "1a2b3c4d")
    assert str(name) == "data-train-v00002-1a2b3c4d.tfrecord-00003-of-00008"
    assert layout.ShardName.parse(str(name)) == name
    # names written before tags still parse, so those folders read
    untagged = layout.ShardName("data", "train", 3, 8, False, 2)
    assert str(untagged) == "data-train-v00002.tfrecord-00003-of-00008"
    assert layout.ShardName.parse(str(untagged)) == untagged
    assert layout.ShardName.parse("data-train-v00002-1A2B3C4D.tfrecord-00003-of-00008") is None
    assert layout.tfds_template(2, "1a2b3c4d") == (
        "{DATASET}-{SPLIT}-v00002-1a2b3c4d.{FILEFORMAT}-{SHARD_X_OF_Y}")
    assert layout.live_index(2, "data-train.tfrecord-00000-of-00001", "1a2b3c4d") == (
        "versions/00002-1a2b3c4d/index/data-train.tfrecord-00000-of-00001.idx")
    assert layout.ShardName.parse("data-train.tfrecord-00003-of-00008").version == 1
    # version 1's shards carry no version: one name per shard
    assert layout.ShardName.parse("data-train-v00001.tfrecord-00003-of-00008") is None
    for ours in ("rows/data-train-v00002.tfrecord-00000-of-00001.rows.jsonl.gz",
                 "rows/data-train-v00002-1a2b3c4d.tfrecord-00000-of-00001.rows.jsonl.gz",
                 "versions/00002-1a2b3c4d/quality.json",
                 "versions/00002-1a2b3c4d/index/data-train.tfrecord-00000-of-00001.idx",
                 "versions/00002.json", "versions/00002/quality.json",
                 "versions/00002/index/data-train.tfrecord-00000-of-00001.idx"):
        assert layout.is_output_name(ours), ours
    for other in ("rows/notes.txt", "versions/2.json", "versions/00002/index/x.idx",
                  "versions/00002-1a2b/quality.json", "versions/00002-1a2b3c4d.json",
                  "versions/../x.json", "rows/data-train.tfrecord-00000-of-00001.idx"):
        assert not layout.is_output_name(other), other
    assert layout.parse_live_index(
        "versions/00003/index/data-test.tfrecord-00000-of-00001.idx") == (
        3, "data-test.tfrecord-00000-of-00001")


@pytest.mark.parametrize("data, gaps", [
    (b"0 16 16\n16\n", False), (b"0\n16 16 16\n", False), (b"0 16 40\n16\n", True),
    (b"0\r16\n", False), (b"0\x0b16\n", False), (b"0\x0c16\n16 16\n", False),
    (b"0 16\n16 x\n", False), (b"0 16\n17 16\n", False), (b"0 15\n", False)])
def test_an_index_line_that_is_not_offset_and_length_is_refused_by_its_line(data, gaps):
    from tfrecorder._folder import index

    with pytest.raises(tfrecorder.CorruptRecordError, match=r"x.idx, line \d"):
        index.parse(data, "x.idx", gaps=gaps)


def test_sound_index_files_read_the_same_whole_or_line_by_line():
    from tfrecorder._folder import index

    assert index.parse(b"0 16\n16 20\n") == [(0, 16), (16, 20)]
    assert index.parse(b"0 16\r\n16 20\r\n") == [(0, 16), (16, 20)]   # read line by line
    assert index.parse(b"\n0 16\n\n16 20") == [(0, 16), (16, 20)]
    assert index.parse(b"0 16\n40 20\n", gaps=True) == [(0, 16), (40, 20)]
    assert index.parse(b"") == []
    with pytest.raises(tfrecorder.CorruptRecordError, match="the shard holds 3"):
        index.parse(b"0 16\n16 20\n", "x.idx", count=3)
    with pytest.raises(tfrecorder.CorruptRecordError, match="ends past"):
        index.parse(b"0 16\n16 20\n", "x.idx", size=35)


def test_a_rows_file_is_one_object_per_line_or_refused(tmp_path):
    import gzip as gz

    def read(text, count=None):
        path = tmp_path / "x.rows.jsonl.gz"
        path.write_bytes(gz.compress(text))
        return rows.read(str(path), count)

    a = {"row": 2, "key": "a.jpg", "split": "train", "label": ["cat"]}
    b = {"row": [0, "x"], "key": None, "split": "test", "label": [], "features": {"n": [1]}}
    ab = (json.dumps(a) + "\n\n" + json.dumps(b) + "\n").encode()
    assert read(ab) == [a, b]
    assert read("\ufeff".encode() + ab) == [a, b]  # a BOM
    for bad in (b'{"a":1}, {"b":2}\n{"c":3}\n', b'[{"a":1}\n{"b":2}]\n', b'{"a":1}\n{"b":',
                b'[1, 2]\n', b"[" * 100_000 + b"]" * 100_000 + b"\n"):
        with pytest.raises(tfrecorder.CorruptRecordError, match="x.rows.jsonl.gz: not a rows"):
            read(bad)
    with pytest.raises(tfrecorder.CorruptRecordError, match="2 lines where its shard holds 3"):
        read(ab, 3)
    # parsed, but a field of another type than a conversion writes: the line and field
    seen = dict(a, size=10, stamp=5, sha256="ab", w=3, h=4, format="jpeg",
                phash="00000000000000ff", px=[1, 2, 3, 4, 5, 6, 7.5])
    assert read((json.dumps(seen) + "\n").encode()) == [seen]
    for field, value, told in [
            ("key", ["a.jpg"], 'key is ["a.jpg"], not text or null'),
            ("label", "cat", 'label is "cat", not a list of label names'),
            ("label", [["cat"]], 'label is [["cat"]], not a list of label names'),
            ("split", None, "split is null, not text"),
            ("row", {"n": 1}, 'row is {"n": 1}, not a row number or index label'),
            ("row", [[1]], "row is [[1]], not a row number or index label"),
            ("rows", True, "rows is true, not a whole number"),
            ("w", "3", 'w is "3", not a whole number or null'),
            ("phash", "xyz", 'phash is "xyz", not 16 hex digits or null'),
            ("thumb", "AAAA", 'thumb is "AAAA", not 64 bytes in base64 or null'),
            ("thumb", 64, "thumb is 64, not 64 bytes in base64 or null"),
            ("issues", {"dark": "x"},
             'issues is {"dark": "x"}, not an object of image problems and their scores'),
            ("px", [1, 2], "px is [1, 2], not 7 numbers or null"),
            ("features", [], "features is [], not an object"),
            ("split", ..., "no split")]:
        line = {k: v for k, v in dict(seen, **{field: value}).items() if v is not ...}
        with pytest.raises(tfrecorder.CorruptRecordError) as e:
            read((json.dumps(seen) + "\n" + json.dumps(line) + "\n").encode())
        assert str(e.value) == (
            f"{tmp_path / 'x.rows.jsonl.gz'}: not a rows file (line 2: {told}); the folder "
            f"is damaged: `tfrecorder verify` checks its records; convert again with "
            f"mode='overwrite' to write the rows files anew")
    with pytest.raises(tfrecorder.CorruptRecordError, match="the rows file is missing"):
        rows.read(str(tmp_path / "none.rows.jsonl.gz"))


@pytest.mark.slow
def test_a_rows_file_line_of_other_types_stops_an_update_naming_it(tmp_path, run_cli):
    import gzip as gz

    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    _table(paths).to_csv(tmp_path / "data.csv", index=False)
    tfrecorder.convert(str(tmp_path / "data.csv"), str(out))
    (rows_file,) = (out / "rows").glob("data-train*")
    lines = gz.decompress(rows_file.read_bytes()).splitlines()
    first = json.loads(lines[0])
    first["key"] = [first["key"]]  # was: TypeError: unhashable type: 'list'
    rows_file.write_bytes(gz.compress(b"\n".join([json.dumps(first).encode(), *lines[1:]])))
    told = f"{rows_file}: not a rows file (line 1: key is "
    with pytest.raises(tfrecorder.CorruptRecordError, match=re.escape(told)):
        tfrecorder.convert(str(tmp_path / "data.csv"), str(out), mode="update")
    done = run_cli("convert", str(tmp_path / "data.csv"), str(out), "--update")
    assert done.returncode != 0 and done.stderr.startswith(f"Error: {told}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert json.loads((out / "tfrecorder.json").read_text()).get("version", 1) == 1


def test_rows_files_are_the_same_bytes_for_the_same_records():
    entries = [rows.entry(row=2, key="a.jpg", split="train", labels=["cat"], size=10,
                          stamp=5, sha256="ab", phash=(255, bytes(64)), width=3, height=4,
                          fmt="jpeg"),
               rows.entry(row="x", key=None, split="test", labels=[], features={"n": 1.5})]
    data = rows.encode(entries)
    assert data == rows.encode(entries) and list(rows.decode(data)) == [
        {"row": 2, "key": "a.jpg", "split": "train", "label": ["cat"], "size": 10,
         "stamp": 5, "sha256": "ab", "phash": "00000000000000ff", "thumb": "A" * 86 + "==",
         "w": 3, "h": 4, "format": "jpeg"},
        {"row": "x", "key": None, "split": "test", "label": [], "features": {"n": 1.5}}]
    assert rows.key_text(" a.jpg ") == "a.jpg" and rows.key_text(12) == "12"


@pytest.mark.slow
def test_a_table_without_images_is_matched_by_its_values_or_its_key(tf, tmp_path):
    types = tfrecorder.types
    schema = {"split": types.SplitKey, "id": types.IntegerInput, "x": types.FloatInput}
    df = pd.DataFrame({"split": ["TRAIN"] * 6, "id": range(6), "x": [i / 4 for i in range(6)]})
    out = tmp_path / "out"
    tfrecorder.convert(df, str(out), schema=schema)
    edited = df.drop(index=[0]).copy()
    edited.loc[1, "x"] = 9.5
    edited.loc[6] = ["TRAIN", 2, 0.5]  # a row equal to a stored one: added, not kept twice
    # No key column: every row's key is empty, and a row is kept where its values are.
    result = tfrecorder.convert(edited, str(out), schema=schema, mode="update")
    assert result.changes == {"train": {"added": 2, "retired": 2, "kept": 4}}
    records = _live_records(tf, out, 2)["train"]
    assert sorted((e.features.feature["id"].int64_list.value[0],
                   e.features.feature["x"].float_list.value[0]) for e in records) == [
        (1, 9.5), (2, 0.5), (2, 0.5), (3, 0.75), (4, 1.0), (5, 1.25)]
    # Another key than the records were written with matches none of them: every row is
    # written again, once, keyed by it; the same table again is then unchanged.
    again = tfrecorder.convert(edited, str(out), schema=schema, mode="update", key="id")
    assert again.changes == {"train": {"added": 6, "retired": 6, "kept": 0}}
    assert tfrecorder.convert(edited, str(out), schema=schema, mode="update",
                              key="id").unchanged


@pytest.mark.slow
def test_a_multi_label_image_changes_when_its_labels_do(tmp_path):
    paths = _images(tmp_path / "img", 3)
    table = pd.DataFrame({"split": ["TRAIN"] * 4, "image_uri": [paths[0], paths[0], paths[1],
                                                                   paths[2]],
                          "label": ["cat", "dog", "cat", "owl"]})
    out = tmp_path / "out"
    first = tfrecorder.convert(table, str(out), multi_label=True)
    assert first.multi_label and first.rows_per_split == {"train": 3}
    lines = rows.read(str(out / layout.rows_file("data-train.tfrecord-00000-of-00001")))
    assert sorted(sorted(e["label"]) for e in lines) == [["cat"], ["cat", "dog"], ["owl"]]
    same = tfrecorder.convert(table.iloc[[1, 0, 2, 3]], str(out), multi_label=True,
                              mode="update")
    assert same.unchanged  # the order of an image's labels is no change
    result = tfrecorder.convert(table.drop(index=[1]), str(out), multi_label=True,
                                mode="update")
    assert result.changes == {"train": {"added": 1, "retired": 1, "kept": 2}}


@pytest.mark.slow
def test_index_files_added_later_let_an_update_retire_records(tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out), write_index=False)
    with pytest.raises(tfrecorder.ConfigError, match="tfrecorder index"):
        tfrecorder.convert(_table(paths[:3]), str(out), mode="update")
    tfrecorder.build_index(str(out))
    result = tfrecorder.convert(_table(paths[:3]), str(out), mode="update")
    assert result.version == 2 and result.changes["train"]["retired"] == 1


@pytest.mark.slow
def test_every_reader_reads_each_version_exactly_after_a_real_update(tf, tmp_path, capsys):
    # The update's own files (live index, v00002 shard) read by load(), access, read(),
    # verify() and the command line, at version 1 and at the latest.
    from tfrecorder import _cli as cli, access

    paths = _images(tmp_path / "img", 16)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    table = _table(paths).drop(index=[1, 5])           # two train rows retired
    table.loc[2, "label"] = "owl"                        # one relabelled
    extra = _images(tmp_path / "img", 2, start=16)
    table.loc[16] = ["TRAIN", extra[0], "dog"]
    table.loc[17] = ["TEST", extra[1], "cat"]
    assert tfrecorder.convert(table, str(out), mode="update").version == 2

    train_v1 = {p: LABELS[i % 2] for i, p in enumerate(paths) if i % 4}
    train_v2 = {p: LABELS[i % 2] for i, p in enumerate(paths) if i % 4 and i not in (1, 5)}
    train_v2[paths[2]] = "owl"
    train_v2[extra[0]] = "dog"
    for version, want in ((1, train_v1), (2, train_v2), (None, train_v2)):
        frame = tfrecorder.read(str(out), "train", version=version)
        assert dict(zip(frame["image_uri"], frame["label"])) == want, version
        reader = access.Reader(str(out), "train", version=version)
        assert len(reader) == len(want)
        uris = sorted(tf.train.Example.FromString(r).features.feature["image_uri"]
                      .bytes_list.value[0].decode() for r in reader.records(range(len(reader))))
        assert uris == sorted(want)
        ds = tfrecorder.load(str(out), split="train", batch_size=4, image_size=(8, 8),
                             version=version, shuffle=False)
        assert sum(int(tf.nest.flatten(batch)[0].shape[0]) for batch in ds) == len(want)
        done = tfrecorder.verify(str(out), version=version)
        assert done.records_per_split["train"] == len(want)
        assert done.records_per_split["test"] == (4 if version == 1 else 5)
    assert cli.main(["verify", str(out), "--version", "1"]) == 0
    assert "train 12" in capsys.readouterr().out
    assert cli.main(["verify", str(out)]) == 0
    assert "train 11" in capsys.readouterr().out
    assert cli.main(["verify", str(out), "--version", "3"]) == 2
    assert "versions 1, 2" in capsys.readouterr().err
    assert cli.main(["inspect", str(out), "--version", "1", "-n", "20",
                     "--output-dir", str(tmp_path / "look")]) == 0
    looked = pd.read_csv(tmp_path / "look" / "data.csv")
    assert "owl" not in set(looked["label"]) and len(looked) == 12


def _detection_jsonl(path, images, boxes):
    """A Vertex AI JSON Lines detection table: ``boxes[i]`` the (label, x_min, y_min,
    x_max, y_max) of image i, every image in training."""
    with open(path, "w") as f:
        for image, its in zip(images, boxes):
            f.write(json.dumps({"imageGcsUri": image, "boundingBoxAnnotations": [
                {"displayName": b[0], "xMin": b[1], "yMin": b[2], "xMax": b[3], "yMax": b[4]}
                for b in its], "dataItemResourceLabels": {
                    "aiplatform.googleapis.com/ml_use": "training"}}) + "\n")


@pytest.mark.slow
def test_a_detection_table_updates_box_by_box(tmp_path):
    from tfrecorder import access

    paths = _images(tmp_path / "img", 4)
    table, out = tmp_path / "det.jsonl", tmp_path / "out"
    boxes = [[("cat", 0.1, 0.1, 0.5, 0.6), ("dog", 0.3, 0.1, 0.9, 0.6)],
             [("cat", 0.1, 0.2, 0.5, 0.6)], [("dog", 0.2, 0.2, 0.4, 0.4)], []]
    _detection_jsonl(table, paths, boxes)
    tfrecorder.convert(str(table), str(out))
    assert tfrecorder.convert(str(table), str(out), mode="update").unchanged

    def boxes_now():
        frame = tfrecorder.read(str(out), "train")
        return {os.path.basename(u): b for u, b in zip(frame["image_uri"], frame["boxes"])}

    # The second box of image 0 moved: only that image is written again.
    boxes[0][1] = ("dog", 0.4, 0.1, 0.9, 0.6)
    _detection_jsonl(table, paths, boxes)
    moved = tfrecorder.convert(str(table), str(out), mode="update")
    assert moved.changes["train"] == {"added": 1, "retired": 1, "kept": 3}
    assert boxes_now()["0.jpg"] == [("cat", 0.1, 0.1, 0.5, 0.6), ("dog", 0.4, 0.1, 0.9, 0.6)]
    # A box relabelled with a new name: the name gets the next id, the others keep theirs.
    boxes[2][0] = ("owl", 0.2, 0.2, 0.4, 0.4)
    _detection_jsonl(table, paths, boxes)
    relabelled = tfrecorder.convert(str(table), str(out), mode="update")
    assert relabelled.changes["train"] == {"added": 1, "retired": 1, "kept": 3}
    assert (out / "objects-label.labels.txt").read_text().split() == ["cat", "dog", "owl"]
    reader = access.Reader(str(out), "train")
    ids = {os.path.basename(f["image_uri"].decode()): list(f["objects/label"])
           for f in map(reader.features, range(len(reader)))}
    assert ids == {"0.jpg": [0, 1], "1.jpg": [0], "2.jpg": [2], "3.jpg": []}
    # Two boxes swapping labels is a change too; an image dropped is retired.
    boxes[0] = [("dog", 0.1, 0.1, 0.5, 0.6), ("cat", 0.4, 0.1, 0.9, 0.6)]
    _detection_jsonl(table, paths[:3], boxes[:3])
    swapped = tfrecorder.convert(str(table), str(out), mode="update")
    assert swapped.changes["train"] == {"added": 1, "retired": 2, "kept": 2}
    assert sorted(boxes_now()) == ["0.jpg", "1.jpg", "2.jpg"]
    assert boxes_now()["0.jpg"][0][0] == "dog"
    assert tfrecorder.versions(str(out))["version"].tolist() == [1, 2, 3, 4]


@pytest.mark.slow
def test_dali_reads_each_version_through_its_live_index_files(tmp_path):
    # DALI's own TFRecord reader, handed a version's shards and its live index files
    # (Reader.files, Reader.index_files), reads exactly that version's records.
    pytest.importorskip("nvidia.dali")
    import numpy as np
    from nvidia.dali import fn, pipeline_def
    import nvidia.dali.tfrecord as tfrec
    from tfrecorder import access

    paths = _images(tmp_path / "img", 16)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    table = _table(paths).drop(index=[1, 6])
    table.loc[3, "label"] = "owl"
    table.loc[16] = ["TRAIN", _images(tmp_path / "img", 1, start=16)[0], "dog"]
    assert tfrecorder.convert(table, str(out), mode="update").version == 2

    for version in (1, 2):
        reader = access.Reader(str(out), "train", version=version)
        if version == 2:
            assert any(f"versions/00002-{_tag(out, 2)}/index" in p for p in reader.index_files)

        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def pipeline():
            ex = fn.readers.tfrecord(
                path=reader.files, index_path=reader.index_files, random_shuffle=False,
                features={"image_uri": tfrec.FixedLenFeature((), tfrec.string, ""),
                          "label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
                name="reader")
            return ex["image_uri"], ex["label"]

        pipe = pipeline()
        pipe.build()
        assert pipe.reader_meta("reader")["epoch_size"] == len(reader)
        got = []
        for _ in range(len(reader)):
            uri, label = pipe.run()
            got.append((np.array(uri.at(0)).tobytes().decode(), int(np.array(label.at(0))[0])))
        want = [(f["image_uri"].decode(), int(f["label"]))
                for f in map(reader.features, range(len(reader)))]
        assert got == want, version
    assert len(want) == 11 and ("owl" in tfrecorder.read(str(out), "train")["label"].tolist())


@pytest.mark.slow
def test_vacuum_removes_only_what_older_versions_alone_list(tf, tmp_path, capsys):
    from tfrecorder import _cli as cli, access

    paths = _images(tmp_path / "img", 12)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    table = _table(paths)
    table.loc[1, "label"] = "owl"
    tfrecorder.convert(table, str(out), mode="update")                 # version 2
    table = table.drop(index=[2])
    tfrecorder.convert(table, str(out), mode="update")                 # version 3
    latest = _listed(out, 3)
    kept = {n: d for n, d in _digests(out).items() if n in latest}
    # (the test's _listed leaves out data reports and version 2's copies of the top
    # files, its own files; the folder's quality.json, which version 1 names, is the
    # latest's copy and stays)
    only_old = (_listed(out, 1) | _listed(out, 2) | {
        f"versions/00002-{_tag(out, 2)}/{n}" for n in ("quality.json", "dataset_info.json",
                                                       "features.json", "errors.jsonl")}) - latest
    assert (f"versions/00002-{_tag(out, 2)}/index/data-train.tfrecord-00000-of-00001.idx"
            in only_old)
    want = sorted(tfrecorder.read(str(out), "train")["image_uri"])

    with pytest.raises(tfrecorder.ConfigError, match="keep=0"):
        tfrecorder.vacuum(str(out), keep=0)
    done = tfrecorder.vacuum(str(out), keep=1)
    assert done.versions == (1, 2)
    assert set(done.files) == only_old - {"versions/00001.json", "versions/00002.json"}
    assert str(done).startswith(f"removed version(s) 1, 2: {len(done.files)} file(s) of "
                                "records and reports, ") and str(done).endswith(
                                    "and 2 version manifest(s)")
    after = _digests(out)
    assert not only_old & set(after)                       # every file only they listed: gone
    assert {n: after[n] for n in kept} == kept             # the kept version's: untouched
    assert sorted(tfrecorder.read(str(out), "train")["image_uri"]) == want
    assert tfrecorder.verify(str(out)).records == 11
    assert tfrecorder.versions(str(out))["version"].tolist() == [3]
    with pytest.raises(tfrecorder.ConfigError, match="it has version 3. Give that one, or "
                       "version=None for the latest [(]on the command line, leave out"):
        access.Reader(str(out), "train", version=1)
    assert str(tfrecorder.vacuum(str(out), keep=1)) == "nothing to remove: every version is kept"
    assert cli.main(["vacuum", str(out), "--keep", "1"]) == 0
    assert "nothing to remove" in capsys.readouterr().out


@pytest.mark.slow
def test_tfds_reads_the_splits_an_update_left_whole_and_is_told_of_the_others(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    paths = _images(tmp_path / "img", 12)
    out = tmp_path / "out"
    assert tfrecorder.convert(_table(paths), str(out)).tfds_left_out == []
    table = _table(paths).drop(index=[1])                    # a train row retired
    result = tfrecorder.convert(table, str(out), mode="update")
    assert result.tfds_left_out == ["train"]
    assert "TFDS        split(s) train left out of dataset_info.json" in str(result)
    builder = tfds.builder_from_directory(str(out))
    assert set(builder.info.splits) == {"test"}
    assert len(builder.as_dataset(split="test")) == 3      # the split no update touched
    with pytest.raises(Exception, match="train"):
        builder.as_dataset(split="train")


@pytest.mark.slow
def test_an_update_builds_its_dataflow_job_and_publishes_nothing_in_a_dry_run(gcs, tmp_path):
    uris, out = _converted_on_gcs(gcs, "versions-dataflow", 8)
    published = gcs.cat(f"{out}/tfrecorder.json")
    gcs.pipe(uris[1], encode(seed=201))                  # one image rewritten
    result = tfrecorder.convert(
        _table(uris), out, mode="update", runner="DataflowRunner", project="my-project",
        region="us-central1", pipeline_options=["--dry_run=True", "--no_auth"])
    assert result.job_id is None and result.job is not None        # built, not submitted
    names = [t.unique_name for t in result.job.proto_pipeline.components.transforms.values()]
    assert any("WriteShards" in n for n in names) and any("FindMatches" in n for n in names)
    assert gcs.cat(f"{out}/tfrecorder.json") == published          # nothing published
    assert not gcs.exists(f"{out}/versions/00002.json")
    assert tfrecorder.convert(_table(uris), out, mode="update").version == 2  # then it runs


def _csv(path, rows):
    path.write_text("".join(f"{s},{u},{lab}\n" for s, u, lab in rows))
    return str(path)


def _photos_converted(tmp_path, n, train, seed):
    """``n`` distinct photos (the first ``train`` in train, the rest in test) listed in
    ``v1.csv`` and converted with near duplicates: their folder, rows and output."""
    from tests.test_quality import _jpeg, _photo

    img = tmp_path / "img"
    img.mkdir()
    rows = []
    for i in range(n):
        (img / f"{i}.jpg").write_bytes(_jpeg(_photo(seed + i)))
        rows.append(("TRAIN" if i < train else "TEST", str(img / f"{i}.jpg"), LABELS[i % 2]))
    out = tmp_path / "out"
    tfrecorder.convert(_csv(tmp_path / "v1.csv", rows), str(out), near_duplicates=True)
    return img, rows, out


@pytest.mark.slow
def test_an_updates_report_names_the_edited_tables_rows_and_counts_every_live_record(
        tmp_path):
    """The report of an update is the report a conversion of the edited table would
    give: its pairs name the edited CSV's lines (kept records too, whose rows files give
    the old table's), and each split's statistics, channel mean and std included, are
    those of all its live records, not of the new ones alone."""
    from PIL import Image

    from tests.test_quality import _jpeg, _photo

    img, rows, out = _photos_converted(tmp_path, 10, 7, seed=200)
    (img / "copy_5.jpg").write_bytes((img / "5.jpg").read_bytes())
    Image.open(img / "6.jpg").resize((80, 60)).save(img / "half_6.jpg", "JPEG", quality=80)
    # two lines removed from the top: every kept record moves up two lines
    edited = rows[2:] + [("TEST", str(img / "copy_5.jpg"), "dog"),
                         ("TEST", str(img / "half_6.jpg"), "cat")]
    csv = _csv(tmp_path / "v2.csv", edited)
    result = tfrecorder.convert(csv, str(out), mode="update", near_duplicates=True)
    assert result.changes["train"] == {"added": 0, "retired": 2, "kept": 5}
    fresh = tmp_path / "fresh"
    tfrecorder.convert(csv, str(fresh), near_duplicates=True)
    updated = json.loads((out / "quality.json").read_text())
    whole = json.loads((fresh / "quality.json").read_text())

    def named(report):
        return sorted((p["kind"], p["distance"],
                       *((s["split"], s["row"], s["image_uri"], s["label"])
                         for s in (p["a"], p["b"]))) for p in report["pairs"])

    assert named(updated) == named(whole) and len(updated["pairs"]) == 2
    assert {(s["row"], s["image_uri"]) for p in updated["pairs"] for s in (p["a"], p["b"])} == {
        (4, str(img / "5.jpg")), (9, str(img / "copy_5.jpg")),
        (5, str(img / "6.jpg")), (10, str(img / "half_6.jpg"))}
    for split in ("train", "test"):
        mine, theirs = updated["stats"][split], whole["stats"][split]
        assert "mean" in mine and (mine["mean"], mine["std"]) == (theirs["mean"], theirs["std"])
        for field in ("rows", "records", "labels", "formats", "width", "height"):
            assert mine[field] == theirs[field], field
    # An update that does not measure its new images cannot know the split's colours.
    (img / "10.jpg").write_bytes(_jpeg(_photo(300)))
    tfrecorder.convert(_csv(tmp_path / "v3.csv", edited + [("TEST", str(img / "10.jpg"), "dog")]),
                       str(out), mode="update")
    stats = json.loads((out / "quality.json").read_text())["stats"]
    assert "mean" not in stats["test"] and stats["train"]["mean"] == whole["stats"]["train"]["mean"]


@pytest.mark.slow
def test_an_update_that_only_retires_records_reports_what_a_conversion_of_its_table_does(
        tmp_path, capsys):
    """An update that writes no shard ends as every run does: its data report is the one
    a conversion of the edited table gives (the kept records' exact and near pairs,
    named by the edited CSV's lines, and each split's statistics), its result counts
    what it retired, it names no job (none ran) and shows no progress (nothing to
    write)."""
    from PIL import Image

    from tests.test_quality import _jpeg, _photo

    img, rows, out = tmp_path / "img", [], tmp_path / "out"
    img.mkdir()
    for i in range(9):
        (img / f"{i}.jpg").write_bytes(_jpeg(_photo(400 + i)))
        rows.append(("TRAIN" if i < 6 else "TEST", str(img / f"{i}.jpg"), LABELS[i % 2]))
    (img / "copy_3.jpg").write_bytes((img / "3.jpg").read_bytes())
    Image.open(img / "4.jpg").resize((80, 60)).save(img / "half_4.jpg", "JPEG", quality=80)
    rows += [("TEST", str(img / "copy_3.jpg"), "dog"),
             ("TEST", str(img / "half_4.jpg"), "cat")]
    tfrecorder.convert(_csv(tmp_path / "v1.csv", rows), str(out), near_duplicates=True)
    csv = _csv(tmp_path / "v2.csv", rows[1:5] + rows[6:])  # two train rows removed
    capsys.readouterr()
    result = tfrecorder.convert(csv, str(out), mode="update", near_duplicates=True,
                                progress=True)
    assert capsys.readouterr().err == ""
    assert result.changes == {"train": {"added": 0, "retired": 2, "kept": 4},
                              "test": {"added": 0, "retired": 0, "kept": 5}}
    assert result.version == 2 and not result.unchanged and result.job_id is None
    m = json.loads((out / "tfrecorder.json").read_text())
    assert not any("-v00002-" in s["file"] for info in m["splits"].values()
                   for s in info["shards"])  # no shard written
    assert not list((out / layout.TMP_DIR).glob("*"))  # the run's folder removed
    fresh = tmp_path / "fresh"
    whole = tfrecorder.convert(csv, str(fresh), near_duplicates=True)
    # (Its bytes are those of the files it keeps, retired records' too.)
    for field in ("rows_in", "rows_written", "rows_per_split", "rows_quarantined", "labels",
                  "label_counts"):
        assert getattr(result, field) == getattr(whole, field), field
    updated = json.loads((out / "quality.json").read_text())
    converted = json.loads((fresh / "quality.json").read_text())

    def named(report):
        return sorted((p["kind"], p["distance"],
                       *((s["split"], s["row"], s["image_uri"], s["label"])
                         for s in (p["a"], p["b"]))) for p in report["pairs"])

    assert named(updated) == named(converted)
    assert {p["kind"] for p in updated["pairs"]} == {"exact", "near"}
    assert updated["stats"] == converted["stats"]
    assert (updated["issues"], updated["warnings"]) == (converted["issues"],
                                                        converted["warnings"])


@pytest.mark.slow
def test_an_update_searching_near_duplicates_over_unhashed_records_is_refused(tmp_path):
    paths = _images(tmp_path / "img", 6)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    more = _images(tmp_path / "img", 1, start=6)
    with pytest.raises(tfrecorder.ConfigError, match="were written without near duplicates") as e:
        tfrecorder.convert(_table(paths + more), str(out), mode="update", near_duplicates=True)
    named = re.search(r"record of row (\d+) \((.*?)\)", str(e.value))
    assert named and paths[int(named[1])] == named[2]  # a row and its image, as stored
    assert "--near-duplicates --overwrite" in str(e.value)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    # without near duplicates the same update goes through
    assert tfrecorder.convert(_table(paths + more), str(out), mode="update").version == 2


@pytest.mark.slow
def test_an_update_over_records_hashed_before_thumbnails_were_kept_is_refused(tmp_path):
    """A near pair is listed only when the records' thumbnails confirm it: kept records
    whose rows files hold a hash but no thumbnail could never be confirmed."""
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out), near_duplicates=True)
    _edit_rows_files(out, "train", lambda entries: [e.pop("thumb", None) for e in entries])
    more = _images(tmp_path / "img", 1, start=4)
    with pytest.raises(tfrecorder.ConfigError, match="no perceptual hash and thumbnail"):
        tfrecorder.convert(_table(paths + more), str(out), mode="update", near_duplicates=True)


def test_update_and_append_together_and_a_key_the_schema_leaves_out_are_named(
        tmp_path, run_cli):
    paths = _images(tmp_path / "img", 4)
    csv = tmp_path / "data.csv"
    csv.write_text("split,image_uri,label,id\n" + "".join(
        f"TRAIN,{p},cat,k{i}\n" for i, p in enumerate(paths)))
    out = tmp_path / "out"
    for flags in (["--update", "--append"], ["--append", "--update"]):
        done = run_cli("convert", csv, out, *flags)
        assert done.returncode == 2 and "together: give one of them" in done.stderr
        assert not out.exists()
    # the default schema reads split, image and label: "id" is in the file only
    with pytest.raises(tfrecorder.ConfigError, match="add it to the schema"):
        tfrecorder.convert(str(csv), str(out), key="id")
    with pytest.raises(tfrecorder.ConfigError, match=r"split_fractions=\(0.5, 0.5\); give a dict"):
        tfrecorder.convert(str(csv), str(out), split_fractions=(0.5, 0.5))


def _edit_rows_files(out, split, edit):
    """Every rows file of ``split`` in ``out`` with ``edit(entries)`` applied: a folder
    as an earlier release of tfrecorder wrote it (its lines without a later field)."""
    for path in sorted((out / "rows").glob(f"*-{split}.*")):
        entries = rows.decode(path.read_bytes())
        edit(entries)
        path.write_bytes(rows.encode(entries))


@pytest.mark.slow
def test_rows_files_written_before_colour_sums_and_with_an_unhashed_image(tmp_path):
    """Rows files without ``px`` (written before the colour sums were kept) leave their
    split without mean and std after an update, not with the new records' alone; a
    rows file of a run that searched near duplicates but could not hash one image is
    not refused by an update that searches them."""
    from tests.test_quality import _jpeg, _photo

    img, rows_, out = _photos_converted(tmp_path, 8, 5, seed=400)

    def older(entries):
        for e in entries:
            e.pop("px")
        entries[0].pop("phash")  # as if its small decode had failed, before "phash": null

    _edit_rows_files(out, "train", older)
    (img / "8.jpg").write_bytes(_jpeg(_photo(500)))
    (img / "9.jpg").write_bytes(_jpeg(_photo(501)))
    edited = rows_ + [("TRAIN", str(img / "8.jpg"), "cat"), ("TEST", str(img / "9.jpg"), "dog")]
    tfrecorder.convert(_csv(tmp_path / "v2.csv", edited), str(out), mode="update",
                       near_duplicates=True)
    stats = json.loads((out / "quality.json").read_text())["stats"]
    assert "mean" not in stats["train"] and stats["train"]["records"] == 6
    fresh = tmp_path / "fresh"
    tfrecorder.convert(_csv(tmp_path / "v2.csv", edited), str(fresh), near_duplicates=True)
    whole = json.loads((fresh / "quality.json").read_text())["stats"]
    assert (stats["test"]["mean"], stats["test"]["std"]) == (whole["test"]["mean"],
                                                             whole["test"]["std"])


@pytest.mark.slow
def test_an_append_names_kept_records_by_the_appended_tables_rows(tmp_path):
    paths = _images(tmp_path / "img", 6)
    v1 = [("TRAIN", p, LABELS[i % 2]) for i, p in enumerate(paths)]
    out = tmp_path / "out"
    tfrecorder.convert(_csv(tmp_path / "v1.csv", v1), str(out))
    copy = tmp_path / "img" / "copy_of_2.jpg"
    copy.write_bytes(open(paths[2], "rb").read())
    # the new row first: every stored row is one line further down
    v2 = [("TEST", str(copy), "cat")] + v1
    result = tfrecorder.convert(_csv(tmp_path / "v2.csv", v2), str(out), mode="append")
    assert result.existing_count == 6 and result.changes["test"]["added"] == 1
    assert ("version 2: 1 record(s) appended from the table's 7 rows; 7 rows are in it"
            in str(result))
    (leak,) = tfrecorder.report(str(out)).leaks.itertuples()
    assert (leak.row_a, leak.image_uri_a, leak.row_b, leak.image_uri_b) == (
        4, paths[2], 1, str(copy))


@pytest.mark.slow
def test_append_to_a_table_without_images_adds_the_rows_it_does_not_hold(tmp_path):
    csv = tmp_path / "t.csv"
    header = "split,label,size\n"
    lines = [f"TRAIN,{LABELS[i % 2]},{i}\n" for i in range(6)]
    csv.write_text(header + "".join(lines))
    schema = {"split": "SplitKey", "label": "StringLabel", "size": "IntegerInput"}
    out = tmp_path / "out"
    tfrecorder.convert(str(csv), str(out), schema=schema)
    csv.write_text(header + "".join(lines) + "TRAIN,cat,99\n")
    result = tfrecorder.convert(str(csv), str(out), schema=schema, mode="append")
    assert result.existing_count == 6 and result.changes["train"]["added"] == 1
    assert sorted(tfrecorder.read(str(out))["size"]) == [0, 1, 2, 3, 4, 5, 99]


@pytest.mark.slow
def test_an_updates_rows_count_the_input_rows_of_a_multi_label_record(tmp_path):
    paths = _images(tmp_path / "img", 4)
    lines = [(s, p, lab) for s, p in zip(["TRAIN", "TRAIN", "TRAIN", "TEST"], paths)
             for lab in LABELS]  # every image under both labels: 8 rows, 4 records
    out = tmp_path / "out"
    tfrecorder.convert(_csv(tmp_path / "v1.csv", lines), str(out))
    more = _images(tmp_path / "img", 1, start=4)
    edited = lines + [("TEST", more[0], "cat")]
    tfrecorder.convert(_csv(tmp_path / "v2.csv", edited), str(out), mode="update")
    fresh = tmp_path / "fresh"
    tfrecorder.convert(_csv(tmp_path / "v2.csv", edited), str(fresh))
    got = json.loads((out / "quality.json").read_text())["stats"]
    want = json.loads((fresh / "quality.json").read_text())["stats"]
    assert got["train"]["rows"] == want["train"]["rows"] == 6
    assert got["test"]["rows"] == want["test"]["rows"] == 3


def test_moved_rows_are_staged_as_runs_of_shifted_lines(tmp_path):
    """Line 2 removed, a line added after line 5, line 8 removed: the rows after each
    edit shift by -1, 0 and -1 again. Staged in stored-row order, two runs whatever the
    number of records; the unmoved rows between them stay as they are; rows that are
    not line numbers, before or after, are listed one by one. A rows file holding one
    stored row twice is staged by position."""
    pairs = [(r, r - 1) for r in range(3, 6)] + [(r, r) for r in (6, 7)]
    pairs += [(r, r - 1) for r in range(9, 2000)]
    pairs += [("b", "a"), ("c", "c"), (True, 5), ([1, 2], [2, 1]), (2000, "r2000"),
              (None, 4)]
    triples = [(p, old, new) for p, (old, new) in enumerate(reversed(pairs))]
    rows.write_renumbered(str(tmp_path), {"rows/x.rows.jsonl.gz": triples})
    staged = json.loads((tmp_path / "renumbered" / "x.rows.jsonl.gz.json").read_text())
    assert staged["shift"] == [[3, 5, -1], [9, 1999, -1]]
    now = rows.renumbering(str(tmp_path), "rows/x.rows.jsonl.gz")
    assert [now(p, old) for p, old, _ in triples] == [new for _, _, new in triples]
    assert now(7, 1) == 1 and now(7, 2001) == 2001  # rows no kept record has: as stored
    assert rows.renumbering(str(tmp_path), "rows/other.rows.jsonl.gz") is None
    # stored row 4 twice (records of two tables, side by side after a compaction)
    twice = [(0, 4, 3), (1, 4, 9), (2, 5, 5), (3, 6, 5)]
    rows.write_renumbered(str(tmp_path), {"rows/y.rows.jsonl.gz": twice})
    now = rows.renumbering(str(tmp_path), "rows/y.rows.jsonl.gz")
    assert [now(p, old) for p, old, _ in twice] == [3, 9, 5, 5]

@pytest.mark.slow
def test_an_update_keeps_a_row_whose_index_label_is_none_and_names_string_labels(tmp_path):
    """A DataFrame's index label may be None, which is also what no match looks like; a
    table first indexed 0, 1, 2... and then by names names its kept records by the
    names; an update of a multi-label table counts its input rows, not its records."""
    paths = _images(tmp_path / "img", 3)
    out = tmp_path / "out"
    table = _table(paths)
    table.index = [None, "b", "c"]
    tfrecorder.convert(table, str(out))
    more = _images(tmp_path / "img", 1, start=3)
    edited = _table(paths + more)
    edited.index = [None, "b", "c", "d"]
    result = tfrecorder.convert(edited, str(out), mode="update")
    assert sum(c["kept"] for c in result.changes.values()) == 3
    assert sum(c["retired"] for c in result.changes.values()) == 0
    assert sorted(tfrecorder.read(str(out))["image_uri"]) == sorted(paths + more)

    out2 = tmp_path / "out2"
    tfrecorder.convert(_table(paths, splits=["TRAIN"] * 3), str(out2))
    copy = tmp_path / "img" / "copy_of_1.jpg"
    copy.write_bytes(open(paths[1], "rb").read())
    named = _table(paths + [str(copy)], splits=["TRAIN"] * 3 + ["TEST"])
    named.index = ["r0", "r1", "r2", "r3"]
    named.loc["r3", "label"] = LABELS[1]
    tfrecorder.convert(named, str(out2), mode="update")
    (leak,) = tfrecorder.report(str(out2)).leaks.itertuples()
    assert (leak.row_a, leak.image_uri_a, leak.row_b) == ("r1", paths[1], "r3")


@pytest.mark.slow
def test_an_update_of_a_multi_label_table_says_how_many_input_rows_it_holds(tmp_path):
    paths = _images(tmp_path / "img", 4)
    lines = [("TRAIN", p, lab) for p in paths for lab in LABELS]  # 8 rows, 4 records
    out = tmp_path / "out"
    tfrecorder.convert(_csv(tmp_path / "v1.csv", lines), str(out))
    more = _images(tmp_path / "img", 1, start=4)
    result = tfrecorder.convert(_csv(tmp_path / "v2.csv", lines + [("TRAIN", more[0], "cat")]),
                                str(out), mode="update")
    assert result.rows_written == 9 and result.rows_in == 9
    assert "9 of 9 rows of the table are in it" in str(result)


@pytest.mark.slow
def test_a_compacted_shard_partly_written_without_near_duplicates_is_refused(tmp_path):
    """Records hashed by a first conversion and records an update wrote without near
    duplicates, rewritten into one shard by compact: an update that searches near
    duplicates is refused, as the unhashed ones could not be compared."""
    paths = _images(tmp_path / "img", 6)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths, splits=["TRAIN"] * 6), str(out), near_duplicates=True,
                       num_shards=1)
    more = _images(tmp_path / "img", 2, start=6)
    tfrecorder.convert(_table(paths + more, splits=["TRAIN"] * 8), str(out), mode="update",
                       num_shards=1)
    tfrecorder.compact(str(out))
    (rows_file,) = (out / "rows").glob("*-train-v00003-*")
    lines = rows.decode(rows_file.read_bytes())
    assert sum("phash" in e for e in lines) == 6 and len(lines) == 8
    last = _images(tmp_path / "img", 1, start=8)
    with pytest.raises(tfrecorder.ConfigError, match="were written without near duplicates"):
        tfrecorder.convert(_table(paths + more + last, splits=["TRAIN"] * 9), str(out),
                           mode="update", near_duplicates=True, num_shards=1)


@pytest.mark.slow
def test_an_update_without_near_duplicates_of_a_folder_searched_with_them_says_so(tmp_path):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out), near_duplicates=True)
    more = _images(tmp_path / "img", 1, start=4)
    result = tfrecorder.convert(_table(paths + more), str(out), mode="update")
    assert result.version == 2 and result.report.near_duplicates is None
    assert ("note: near duplicates not searched: version 1 was converted with "
            "near_duplicates=True (--near-duplicates), this update without it") in str(result)
    assert "--near-duplicates --overwrite" in str(result)
    # An update of a folder converted without them says nothing of them.
    last = _images(tmp_path / "img", 1, start=5)
    result = tfrecorder.convert(_table(paths + more + last), str(out), mode="update")
    assert result.version == 3 and "note: near duplicates" not in str(result)


def _unassigned_csv(folder, n, subfolder="images"):
    """``folder/data.csv`` listing ``n`` distinct JPEGs of ``folder/<subfolder>`` by
    paths relative to it, every row unassigned: the CSV and its rows ``[path, label]``."""
    _images(folder / subfolder, n)
    listed = [[f"{subfolder}/{i}.jpg", LABELS[i % 2]] for i in range(n)]
    csv = folder / "data.csv"
    csv.write_text("split,image_uri,label\n" + "".join(f",{p},{lab}\n" for p, lab in listed))
    return csv, listed


def _frame(listed, prefix, splits=None):
    return pd.DataFrame({"split": splits or [""] * len(listed),
                         "image_uri": [prefix + path for path, _ in listed],
                         "label": [label for _, label in listed]})


@pytest.mark.slow
def test_an_update_spelling_the_paths_another_way_writes_nothing(tmp_path, monkeypatch):
    csv, listed = _unassigned_csv(tmp_path / "data", 40)
    out = tmp_path / "out"
    first = tfrecorder.convert(str(csv), str(out))  # from the shell
    monkeypatch.chdir(tmp_path)  # a notebook, beside the data folder
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    for table in (_frame(listed, str(tmp_path / "data") + "/"), _frame(listed, "./data/")):
        result = tfrecorder.convert(table, str(out), mode="update")
        assert result.unchanged and result.version == 1, result.changes
        assert "up to date" in str(result)
        assert {s: c["kept"] for s, c in result.changes.items()} == first.rows_per_split
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
    # A row of a new image still takes its split from where the image is.
    _images(tmp_path / "data" / "images", 1, start=40)
    grown = _frame(listed + [["images/40.jpg", "cat"]], str(tmp_path / "data") + "/")
    result = tfrecorder.convert(grown, str(out), mode="update")
    assert sum(c["added"] for c in result.changes.values()) == 1
    assert not any(c["retired"] for c in result.changes.values())


@pytest.mark.slow
def test_a_folder_whose_splits_hashed_the_spelled_paths_keeps_them_in_every_update(
        tmp_path):
    from tfrecorder._inputs import splits

    # As a release that hashed the path as the CSV spelled it wrote the folder: each
    # unassigned row in the split of that hash, its key the spelled path.
    csv, listed = _unassigned_csv(tmp_path / "data", 40, subfolder="photos/2024")
    fractions = splits.check_fractions(splits.DEFAULT_FRACTIONS)
    spelled = [splits.assign(path, fractions) for path, _ in listed]
    where = [splits.assign(splits.hashed_name(str(tmp_path / "data" / path)), fractions)
             for path, _ in listed]
    assert spelled != where  # the rows this folder holds elsewhere than a new hash says
    out = tmp_path / "out"
    tfrecorder.convert(_frame(listed, "", [s.upper() for s in spelled]), str(out),
                       images_dir=str(tmp_path / "data"))
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    # Updated with absolute paths, every row unassigned: nothing moves.
    result = tfrecorder.convert(_frame(listed, str(tmp_path / "data") + "/"), str(out),
                                mode="update")
    assert result.unchanged, result.changes
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
    # The same table as the CSV spells it, unassigned as well: nothing moves either.
    assert tfrecorder.convert(str(csv), str(out), mode="update").unchanged


@pytest.mark.slow
def test_a_new_image_named_like_a_stored_one_takes_its_own_split(tmp_path):
    # A folder of unassigned images stored by bare names (a CSV beside them); an update
    # adds other images of the same names from another folder: they are new images, so
    # each takes the split its own hash gives, not the stored namesake's.
    from tfrecorder._inputs import splits

    folder = tmp_path / "data"
    _images(folder, 30)
    first = [[f"{i}.jpg", LABELS[i % 2]] for i in range(30)]
    (folder / "data.csv").write_text("split,image_uri,label\n" + "".join(
        f",{p},{lab}\n" for p, lab in first))
    out = tmp_path / "out"
    tfrecorder.convert(str(folder / "data.csv"), str(out))
    _images(folder / "batch2", 30, start=100)  # other pixels, other sizes
    for i in range(30):
        os.rename(folder / "batch2" / f"{100 + i}.jpg", folder / "batch2" / f"{i}.jpg")
    second = first + [[f"batch2/{i}.jpg", LABELS[i % 2]] for i in range(30)]
    (folder / "data.csv").write_text("split,image_uri,label\n" + "".join(
        f",{p},{lab}\n" for p, lab in second))
    result = tfrecorder.convert(str(folder / "data.csv"), str(out), mode="update")
    assert sum(c["added"] for c in result.changes.values()) == 30
    fractions = splits.check_fractions(splits.DEFAULT_FRACTIONS)
    stored = tfrecorder.read(str(out))
    got = dict(zip(stored["image_uri"], stored["split"]))
    for i in range(30):
        own = splits.assign(splits.hashed_name(str(folder / "batch2" / f"{i}.jpg")),
                            fractions)
        assert got[f"batch2/{i}.jpg"] == own, i


@pytest.mark.slow
def test_an_integer_column_read_as_floats_beside_a_null_is_unchanged(tmp_path):
    paths = _images(tmp_path / "img", 4)
    csv = tmp_path / "data.csv"
    csv.write_text("split,image_uri,label,n\n" + "".join(
        f"TRAIN,{p},cat,{n}\n" for p, n in zip(paths, ["3", "4", "", "6"])))
    schema = {"split": tfrecorder.types.SplitKey, "image_uri": tfrecorder.types.ImageUri,
              "label": tfrecorder.types.StringLabel,
              "n": tfrecorder.types.IntegerInput(optional=True)}
    out = tmp_path / "out"
    tfrecorder.convert(str(csv), str(out), schema=schema)
    floats = pd.read_csv(csv)  # pandas reads 3 as 3.0 beside the empty cell
    assert floats["n"].tolist()[0] == 3.0 and floats["n"].dtype == float
    nullable = floats.astype({"n": "Int64"})  # 3 and pd.NA
    for table in (floats, nullable):
        result = tfrecorder.convert(table, str(out), schema=schema, mode="update")
        assert result.unchanged, result.changes
    changed = floats.assign(n=[3.0, 5.0, None, 6.0])
    result = tfrecorder.convert(changed, str(out), schema=schema, mode="update")
    assert result.changes == {"train": {"added": 1, "retired": 1, "kept": 3}}


def test_a_key_is_matched_by_the_value_its_column_makes_it():
    from tfrecorder._versions.stored_records import matching_key

    integer, real = layout.FeatureSpec("int64"), layout.FeatureSpec("float")
    assert [matching_key(k, integer) for k in ("3", "3.0", "-2.0", "1e2")] == [
        "3", "3", "-2", "100"]
    assert [matching_key(k, real) for k in ("1", "1.0", "0.5")] == ["1.0", "1.0", "0.5"]
    # what is no number of the column's type stays as written
    for key in ("3.5", "true", "abc", "nan", None):
        assert matching_key(key, integer) == key
    assert matching_key("3.0", layout.FeatureSpec("string")) == "3.0"
    assert matching_key("3.0", None) == "3.0"


@pytest.mark.slow
def test_an_integer_key_read_as_floats_beside_a_null_still_finds_its_records(tmp_path):
    # One key gone missing turns pandas' ints into floats (3 -> 3.0): the other rows'
    # keys are the same values, so only the row that changed is written again.
    paths = _images(tmp_path / "img", 8)
    table = _table(paths, splits=["TRAIN"] * 8).assign(id=range(8))
    schema = {"split": tfrecorder.types.SplitKey, "image_uri": tfrecorder.types.ImageUri,
              "label": tfrecorder.types.StringLabel,
              "id": tfrecorder.types.IntegerInput(optional=True)}
    out = tmp_path / "out"
    tfrecorder.convert(table, str(out), schema=schema, key="id")
    edited = table.assign(id=[0, 1, 2, None, 4, 5, 6, 7])
    assert edited["id"].dtype == float
    result = tfrecorder.convert(edited, str(out), schema=schema, key="id", mode="update")
    assert result.changes == {"train": {"added": 1, "retired": 1, "kept": 7}}
    # and back: keys stored as 3.0 (this version's) find the ints of the next table
    again = tfrecorder.convert(table.assign(id=[0, 1, 2, 9, 4, 5, 6, 7]), str(out),
                               schema=schema, key="id", mode="update")
    assert again.changes == {"train": {"added": 1, "retired": 1, "kept": 7}}


@pytest.mark.slow
def test_a_key_column_compares_the_image_by_where_it_is(tmp_path, monkeypatch):
    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    table = _table([os.path.relpath(p, tmp_path) for p in paths]).assign(id=list("abcd"))
    schema = {"split": tfrecorder.types.SplitKey, "image_uri": tfrecorder.types.ImageUri,
              "label": tfrecorder.types.StringLabel, "id": tfrecorder.types.StringInput}
    tfrecorder.convert(table, str(out), schema=schema, key="id")
    result = tfrecorder.convert(table.assign(image_uri=paths), str(out), schema=schema,
                                key="id", mode="update")
    assert result.unchanged, result.changes


def test_check_content_is_the_old_spelling_of_compare_content():
    with pytest.warns(DeprecationWarning, match='compare="content"') as caught:
        opts = tfrecorder.Options(mode="update", check="content")
    assert (opts.compare, opts.check) == ("content", "header")
    assert caught[0].filename == __file__  # the user's line, not tfrecorder's
    with pytest.warns(DeprecationWarning) as caught, pytest.raises(tfrecorder.ConfigError):
        tfrecorder.convert(None, "out", mode="update", check="content", num_shards="x")
    assert caught[0].filename == __file__
    assert tfrecorder.Options(mode="update").compare == "stat"


@pytest.mark.slow
def test_a_run_that_lost_its_lock_publishes_nothing_over_the_winner(tmp_path, monkeypatch):
    # An update stalls after moving its files into place, past its lock's expiry; a
    # second update takes the lock over and publishes version 2; the first resumes. Each
    # wrote version 2 under names of its own run's tag: the manifest decides.
    from tfrecorder._writer import publishing

    paths = _images(tmp_path / "img", 4)
    out = tmp_path / "out"
    tfrecorder.convert(_table(paths), str(out))
    more = _images(tmp_path / "img", 2, start=4)
    loser_table = _table(paths + more[:1], labels=["cat", "dog", "cat", "dog", "owl"])
    winner_table = _table(paths[1:] + more[1:])
    won = {}
    pause = publishing._remove_empty_index_dir  # publishing's step after the moves

    def stalled(output_dir):
        if not won:
            won["started"] = True
            lock = out / layout.LOCK
            holder = json.loads(lock.read_text())
            lock.write_text(json.dumps({**holder, "expires": 0}))  # renewals all failed
            won["result"] = tfrecorder.convert(winner_table, str(out), mode="update")
            won["files"] = _digests(out)
        pause(output_dir)

    monkeypatch.setattr(publishing, "_remove_empty_index_dir", stalled)
    with pytest.raises(tfrecorder.OutputBusyError, match="version 2") as e:
        tfrecorder.convert(loser_table, str(out), mode="update")
    assert "publishes nothing" in str(e.value)
    assert won["result"].version == 2 and "owl" not in won["result"].labels
    assert tfrecorder.verify(str(out)).records == 4
    assert "owl" not in json.dumps(tfrecorder.report(str(out)).data)
    monkeypatch.undo()
    winner = json.loads((out / layout.version_manifest(2)).read_text())
    assert re.fullmatch(r"[0-9a-f]{8}", winner["tag"])
    assert all(f"-v00002-{winner['tag']}." in s["file"]
               for info in winner["splits"].values() for s in info["shards"]
               if "-v00002" in s["file"])
    # Exactly one version 2, byte for byte the winner's; the loser's own files, under
    # its own names, are beside it, and replaced none of the winner's.
    after = _digests(out)
    assert {n: after.get(n) for n in won["files"]} == won["files"]
    loser_files = sorted(set(after) - set(won["files"]) - {n for n in after
                                                          if n.startswith(".tfrecorder-tmp/")})
    assert loser_files and all(n.startswith("versions/00002-") for n in loser_files)
    assert not any(winner["tag"] in n for n in loser_files)
    assert sorted(n for n in after if re.fullmatch(r"versions/\d{5}\.json", n)) == [
        "versions/00001.json", "versions/00002.json"]
    # The next run removes whatever the loser left, and goes on from the winner's.
    third = tfrecorder.convert(winner_table, str(out), mode="update")
    assert third.unchanged and third.version == 2
    assert _digests(out) == won["files"]


@pytest.mark.slow
def test_a_runs_tag_follows_from_what_it_writes(tmp_path):
    # The same update of the same folder names its files alike; another table, not.
    paths = _images(tmp_path / "img", 4)
    tags = []
    for name, table in (("a", _table(paths[:3])), ("b", _table(paths[:3])),
                        ("c", _table(paths[1:]))):
        out = tmp_path / name
        tfrecorder.convert(_table(paths), str(out))
        tfrecorder.convert(table, str(out), mode="update")
        tags.append(json.loads((out / layout.version_manifest(2)).read_text())["tag"])
    assert tags[0] == tags[1] != tags[2]
    a, b = _digests(tmp_path / "a"), _digests(tmp_path / "b")
    assert set(a) == set(b)  # the same names, the same bytes but the publishing times
    assert {n: d for n, d in a.items() if ".tfrecord-" in n} == {
        n: d for n, d in b.items() if ".tfrecord-" in n}


def test_a_version_says_how_it_was_made_in_the_words_mode_takes(samples_converted, tmp_path):
    out, result = samples_converted()  # read only: copied before its manifests are edited
    assert result.mode == "create" and tfrecorder.versions(out)["mode"].tolist() == ["create"]
    # A folder written before says "convert" (or, before versions, nothing): read as create.
    old = tmp_path / "old"
    shutil.copytree(out, old)
    for name in (layout.MANIFEST, layout.version_manifest(1)):
        m = json.loads((old / name).read_text())
        m["mode"] = "convert"
        (old / name).write_text(json.dumps(m))
    assert tfrecorder.versions(str(old))["mode"].tolist() == ["create"]
