"""Nothing outside the output folder is ever read, written or removed, whatever a
manifest, a ledger or a planted link says; staged tasks are private."""

import json
import os
import re
import shutil
import stat

import pytest

import tfrecorder
from tfrecorder._folder import layout, ledger
from tfrecorder._writer import staging
from tfrecorder._inputs.block import Row
from tests.conftest import BUCKET, encode, stage_rows


def _table(root, prefix, n=6, labels=("cat", "dog")):
    folder = root / prefix
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        path = folder / f"{i}.jpg"
        path.write_bytes(encode(size=(32, 24), seed=hash((prefix, i)) % 10_000))
        lines.append(f"TRAIN,{path},{labels[i % len(labels)]}")
    csv = root / f"{prefix}.csv"
    csv.write_text("\n".join(lines) + "\n")
    return str(csv)


@pytest.fixture
def victims(tmp_path):
    """Files and a folder beside the output folder that no run may touch."""
    (tmp_path / "victim.txt").write_text("precious")
    (tmp_path / "victimdir").mkdir()
    (tmp_path / "victimdir" / "inside.txt").write_text("precious too")

    def intact():
        assert (tmp_path / "victim.txt").read_text() == "precious"
        assert (tmp_path / "victimdir" / "inside.txt").read_text() == "precious too"
        assert sorted(os.listdir(tmp_path / "victimdir")) == ["inside.txt"]

    return intact


def _craft(out, manifest: dict) -> None:
    """Writes a crafted manifest as the folder's: ``tfrecorder.json`` and the latest
    version's own file, which readers pin and read."""
    text = json.dumps(manifest)
    (out / layout.MANIFEST).write_text(text)
    (out / layout.version_manifest(manifest.get("version", 1))).write_text(text)


def _converted(tmp_path, prefix="a", **kw):
    out = tmp_path / "out"
    tfrecorder.convert(_table(tmp_path, prefix), str(out), num_shards=2, mode="overwrite", **kw)
    return out


@pytest.mark.slow  # a sweep of cases
@pytest.mark.parametrize("name", ["../victim.txt", "../victimdir", "VICTIM",
                                  "data-train.tfrecord-00000-of-00002/../../victim.txt"])
def test_a_manifest_listing_paths_outside_is_refused_by_every_reader_and_by_overwrite(
        tmp_path, victims, name):
    out = _converted(tmp_path)
    name = str(tmp_path / "victim.txt") if name == "VICTIM" else name
    manifest = json.loads((out / layout.MANIFEST).read_text())
    manifest["splits"]["train"]["shards"][0]["file"] = name
    _craft(out, manifest)
    for read in (tfrecorder.load, tfrecorder.info, tfrecorder.verify, tfrecorder.inspect):
        with pytest.raises(tfrecorder.IncompleteOutputError, match="not a shard name"):
            read(str(out))
    with pytest.raises(tfrecorder.OutputExistsError, match="cannot be trusted.*not a shard name"):
        tfrecorder.convert(_table(tmp_path, "b"), str(out), num_shards=2, mode="overwrite")
    victims()


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["../secret.txt", "SECRET", "notes.txt",
                                   "index/data-train.tfrecord-00001-of-00002.idx",
                                   "index/../../secret.txt"])
def test_a_manifest_listing_another_index_file_is_refused_by_every_reader_and_by_overwrite(
        tmp_path, victims, entry):
    """An index entry is a name too: only the index file of its own shard is one."""
    from tfrecorder import access, grain as tfr_grain, torch as tfr_torch

    out = _converted(tmp_path)
    (tmp_path / "secret.txt").write_text("SECRET-FIRST-LINE\nmore\n")
    (out / "notes.txt").write_text("the user's notes")
    entry = str(tmp_path / "secret.txt") if entry == "SECRET" else entry
    manifest = json.loads((out / layout.MANIFEST).read_text())
    manifest["splits"]["train"]["shards"][0]["index"] = entry
    _craft(out, manifest)
    expected = "index/data-train.tfrecord-00000-of-00002.idx"
    readers = (tfrecorder.load, tfrecorder.info, tfrecorder.verify, tfrecorder.inspect,
               tfrecorder.build_index, lambda o: access.Reader(o).record(0),
               lambda o: access.Reader(o).index_files, lambda o: tfr_torch.Dataset(o)[0],
               lambda o: tfr_grain.DataSource(o)[0])
    for read in readers:
        with pytest.raises(tfrecorder.IncompleteOutputError) as e:
            read(str(out))
        message = str(e.value)
        # the manifest the reader read is named: tfrecorder.json or the version's own
        assert (layout.MANIFEST in message or layout.version_manifest(1) in message)
        assert repr(entry) in message and expected in message
        assert "SECRET" not in message
    with pytest.raises(tfrecorder.OutputExistsError, match="cannot be trusted.*index file"):
        tfrecorder.convert(_table(tmp_path, "b"), str(out), num_shards=2, mode="overwrite")
    assert (out / "notes.txt").read_text() == "the user's notes"
    assert (tmp_path / "secret.txt").read_text() == "SECRET-FIRST-LINE\nmore\n"
    assert (out / expected).is_file()
    victims()


def _mine(manifest: dict, version: int = 1) -> None:
    """Edits a manifest's JSON as one would to have tfrecorder remove or read a file of
    the user's: its first train shard renamed after another dataset, with the index and
    rows file names that go with it."""
    x = manifest["splits"]["train"]["shards"][0]
    x["file"] = "mine-train.tfrecord-00000-of-00002"
    x["index"], x["rows"] = f"index/{x['file']}.idx", layout.rows_file(x["file"])


def _all_mine(manifest: dict) -> None:
    """A manifest that agrees with itself: the dataset renamed ``mine``, every shard
    named after it."""
    manifest["name"] = "mine"
    for info in manifest["splits"].values():
        for x in info["shards"]:
            x["file"] = "mine" + x["file"][len("data"):]
            x["index"], x["rows"] = f"index/{x['file']}.idx", layout.rows_file(x["file"])


def _notes_feature(manifest: dict) -> None:
    manifest["features"]["notes"] = {"dtype": "int64", "shape": [], "role": "label"}
    manifest["vocabularies"]["notes"] = ["a", "b"]


_CRAFTS = {  # how a manifest is edited, the user's file it names, and what it says
    "vocabulary of no feature": (lambda m: m["vocabularies"].update(notes=["a", "b"]),
                                 "notes.labels.txt", "'notes'"),
    "shard of another dataset": (_mine, "mine-train.tfrecord-00000-of-00002",
                                 "'mine-train.tfrecord-00000-of-00002'"),
}
#: Two fields edited so that an old version's manifest agrees with itself: only the
#: folder's other versions tell (every version of a folder holds one dataset with the
#: same features).
_AGREEING = {
    "another dataset throughout": (_all_mine, "mine-train.tfrecord-00000-of-00002",
                                   "declares dataset 'mine'"),
    "a feature of its own": (_notes_feature, "notes.labels.txt", "declares features"),
}


def _shard0(m: dict) -> dict:
    return m["splits"]["train"]["shards"][0]


@pytest.mark.parametrize("edit,said", [
    (lambda m: m["vocabularies"].update(notes=[]), "vocabulary for 'notes'"),
    (lambda m: _shard0(m).update(file="mine-train.tfrecord-00000-of-00002", index=None,
                                 rows=None), "'mine-train.tfrecord-00000-of-00002'"),
    (lambda m: _shard0(m).update(file="data-test.tfrecord-00000-of-00002", index=None,
                                 rows=None), "'data-test.tfrecord-00000-of-00002' as a shard "
                                             "of split 'train'"),
    (lambda m: _shard0(m).update(file="data-train-v00002.tfrecord-00000-of-00001",
                                 index=None, rows=None), "by version 1"),
    (lambda m: _shard0(m).update(file="data-train.tfrecord-00000-of-00002.gz", index=None,
                                 rows=None), "'data-train.tfrecord-00000-of-00002.gz'"),
    (lambda m: _shard0(m).update(live=1, live_index="versions/00002/index/"
                                 "data-train.tfrecord-00000-of-00002.idx"), "live index"),
    (lambda m: m.update(quality="versions/00002/quality.json"), "data report"),
], ids=["vocabulary of no feature", "another dataset", "another split", "a later version",
        "gzip without compression", "a later version's live index",
        "a later version's report"])
def test_every_name_a_manifest_lists_is_checked_against_what_it_declares(
        samples_converted, edit, said):
    from tfrecorder._folder.manifest import Manifest

    folder = samples_converted(num_shards=2)[0]
    with open(os.path.join(folder, layout.MANIFEST)) as f:
        manifest = json.load(f)
    assert Manifest.from_json(manifest).name == "data"  # as written: trusted
    edit(manifest)
    with pytest.raises(ValueError, match=re.escape(said)):
        Manifest.from_json(manifest)


@pytest.mark.slow
@pytest.mark.parametrize("craft", list(_CRAFTS))
def test_a_manifest_naming_a_file_of_no_feature_or_shard_it_declares_is_refused(
        tmp_path, craft):
    """Names of ours are not enough: a labels file of a feature the manifest does not
    declare, or a shard of another dataset, is the user's."""
    from tfrecorder import access

    edit, theirs, said = _CRAFTS[craft]
    out = _converted(tmp_path)
    (out / theirs).write_text("the user's")
    manifest = json.loads((out / layout.MANIFEST).read_text())
    edit(manifest)
    _craft(out, manifest)
    readers = (tfrecorder.load, tfrecorder.info, tfrecorder.verify, tfrecorder.inspect,
               tfrecorder.versions, lambda o: access.Reader(o).record(0))
    for read in readers:
        with pytest.raises(tfrecorder.IncompleteOutputError, match=re.escape(said)):
            read(str(out))
    with pytest.raises(tfrecorder.OutputExistsError, match="cannot be trusted.*" + said):
        tfrecorder.convert(_table(tmp_path, "b"), str(out), num_shards=2, mode="overwrite")
    assert (out / theirs).read_text() == "the user's"


@pytest.mark.slow
@pytest.mark.parametrize("craft", [*_CRAFTS, *_AGREEING])
def test_vacuum_and_overwrite_leave_what_a_crafted_old_version_names(tmp_path, craft):
    """A dropped version's manifest edited by hand: vacuum refuses, naming the file and
    the entry, and removes nothing; overwrite, update and compact refuse too; the latest
    version reads."""
    edit, theirs, said = {**_CRAFTS, **_AGREEING}[craft]
    out = _converted(tmp_path)
    tfrecorder.convert(_table(tmp_path, "a", n=8), str(out), mode="update")  # version 2
    (out / theirs).write_text("the user's")
    old = out / layout.version_manifest(1)
    manifest = json.loads(old.read_text())
    edit(manifest)
    old.write_text(json.dumps(manifest))
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(tfrecorder.IncompleteOutputError,
                       match=re.escape(str(old)) + ".*" + re.escape(said)):
        tfrecorder.vacuum(str(out), keep=1)
    if "declares" not in said:  # (one that agrees with itself reads as it says)
        with pytest.raises(tfrecorder.IncompleteOutputError, match=re.escape(said)):
            tfrecorder.info(str(out), version=1)
    with pytest.raises(tfrecorder.IncompleteOutputError, match=re.escape(str(old))):
        tfrecorder.versions(str(out))
    with pytest.raises(tfrecorder.OutputExistsError, match="cannot be trusted.*" + said):
        tfrecorder.convert(_table(tmp_path, "b"), str(out), num_shards=2, mode="overwrite")
    with pytest.raises(tfrecorder.IncompleteOutputError, match="cannot be updated.*" + said):
        tfrecorder.convert(_table(tmp_path, "a", n=9), str(out), mode="update")
    with pytest.raises(tfrecorder.IncompleteOutputError, match=re.escape(said)):
        tfrecorder.compact(str(out))
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing removed
    assert (out / theirs).read_text() == "the user's"
    assert tfrecorder.verify(str(out)).records == 8  # the latest version reads as it was


def _add_holdout(manifest_file, shard: str) -> None:
    """A split ``holdout`` of one shard ``shard`` added to a manifest, by hand."""
    manifest = json.loads(manifest_file.read_text())
    manifest["splits"]["holdout"] = {"name": "holdout", "num_examples": 1, "num_bytes": 1000,
                                     "shards": [{"file": shard, "num_examples": 1,
                                                 "num_bytes": 1000}]}
    manifest_file.write_text(json.dumps(manifest))


@pytest.mark.slow
def test_a_shard_of_an_old_version_that_is_not_the_file_written_is_left_alone(tmp_path):
    """A dropped version's manifest that lists, under a split of its own, a shard name
    a conversion could give: the user's file of that name is not the shard a conversion
    wrote (its size is not the manifest's), and neither vacuum nor overwrite removes it."""
    out = _converted(tmp_path)
    tfrecorder.convert(_table(tmp_path, "a", n=8), str(out), mode="update")  # version 2
    theirs = "data-holdout.tfrecord-00000-of-00001"
    (out / theirs).write_text("the user's")
    _add_holdout(out / layout.version_manifest(1), theirs)
    done = tfrecorder.vacuum(str(out), keep=1)
    assert done.versions == (1,) and theirs not in done.files
    assert (out / theirs).read_text() == "the user's"
    # The same, by an overwrite of the folder.
    tfrecorder.convert(_table(tmp_path, "a", n=8), str(out), mode="update",
                       label_vocabulary=["cat", "dog", "owl"])  # version 3
    _add_holdout(out / layout.version_manifest(2), theirs)
    tfrecorder.convert(_table(tmp_path, "b"), str(out), num_shards=2, mode="overwrite")
    assert (out / theirs).read_text() == "the user's"


@pytest.mark.slow
@pytest.mark.parametrize("published", [True, False], ids=["over a conversion", "fresh"])
def test_a_ledger_naming_files_of_no_conversion_here_removes_none(tmp_path, published):
    """A ledger is a run's list of what it wrote, but only names this folder's
    conversion (or the run now writing it) writes for its dataset, splits and features
    are taken from it."""
    out = _converted(tmp_path) if published else tmp_path / "out"
    run = out / layout.TMP_DIR / "deadrun"
    run.mkdir(parents=True)
    theirs = ["mine-train.tfrecord-00000-of-00001", "notes.labels.txt"]
    (run / ledger.LEDGER).write_text(json.dumps({"files": theirs}))
    for name in theirs:
        (out / name).write_text("the user's")
    result = tfrecorder.convert(_table(tmp_path, "b"), str(out), mode="overwrite")
    assert result.rows_written == 6 and layout.TMP_DIR not in os.listdir(out)
    assert all((out / name).read_text() == "the user's" for name in theirs)


@pytest.mark.slow  # a conversion end to end
def test_a_ledger_listing_paths_outside_removes_nothing_there(tmp_path, victims):
    out = tmp_path / "out"
    run = out / layout.TMP_DIR / "deadrun"
    run.mkdir(parents=True)
    (run / ledger.LEDGER).write_text(json.dumps({"files": [
        "../victim.txt", "../victimdir", str(tmp_path / "victim.txt"), "/",
        "data-train.tfrecord-00000-of-00001"]}))
    (out / "data-train.tfrecord-00000-of-00001").write_bytes(b"left by the dead run")
    result = tfrecorder.convert(_table(tmp_path, "a"), str(out), mode="overwrite")
    assert result.rows_written == 6
    victims()
    assert layout.TMP_DIR not in os.listdir(out)  # the dead run's folder is gone


@pytest.mark.slow  # a sweep of cases
@pytest.mark.parametrize("planted", [layout.TMP_DIR, f"{layout.TMP_DIR}/deadrun"])
def test_a_run_folder_planted_as_a_link_is_never_written_or_emptied(tmp_path, victims, planted):
    out = _converted(tmp_path)
    before = sorted(os.listdir(out))
    (out / planted).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(tmp_path / "victimdir", out / planted)
    if planted == layout.TMP_DIR:
        with pytest.raises(tfrecorder.ConfigError, match="symbolic link.*Remove it"):
            tfrecorder.convert(_table(tmp_path, "b"), str(out), mode="overwrite")
        assert sorted(os.listdir(out)) == sorted(before + [layout.TMP_DIR])
    else:  # a run's folder that is a link is removed as a link
        tfrecorder.convert(_table(tmp_path, "b"), str(out), mode="overwrite")
        assert not os.path.lexists(out / planted)
    victims()


@pytest.mark.slow  # a sweep of cases
@pytest.mark.parametrize("name", [layout.ERRORS, "label.labels.txt", layout.DATASET_INFO,
                                  "data-train.tfrecord-00001-of-00002"])
def test_our_files_replaced_by_links_are_replaced_never_written_through(tmp_path, victims, name):
    out = _converted(tmp_path)
    os.remove(out / name)
    os.symlink(tmp_path / "victim.txt", out / name)
    result = tfrecorder.convert(_table(tmp_path, "b"), str(out), num_shards=2, mode="overwrite")
    assert result.rows_written == 6
    victims()
    assert not os.path.islink(out / name) and (out / name).is_file()
    tfrecorder.verify(str(out))


@pytest.mark.slow  # a sweep of cases
@pytest.mark.parametrize("via", ["index", "cli", "overwrite"])
def test_an_index_folder_planted_as_a_link_is_refused_never_written_through(
        tmp_path, victims, via):
    from tfrecorder import _cli as cli

    out = _converted(tmp_path, write_index=via != "overwrite")
    if via != "overwrite":
        for name in ("data-train.tfrecord-00000-of-00002", "data-train.tfrecord-00001-of-00002"):
            os.remove(out / "index" / f"{name}.idx")
        os.rmdir(out / "index")
    else:
        shutil.rmtree(out / "index", ignore_errors=True)
    os.symlink(tmp_path / "victimdir", out / "index")
    before = sorted(os.listdir(out))
    if via == "index":
        with pytest.raises(tfrecorder.ConfigError,
                           match=re.escape(f"{out / 'index'} is a symbolic link")):
            tfrecorder.build_index(str(out))
    elif via == "cli":
        code, err = _cli_error(cli, ["index", str(out)])
        assert code == 2 and f"{out / 'index'} is a symbolic link" in err
    else:
        with pytest.raises(tfrecorder.ConfigError, match="symbolic link"):
            tfrecorder.convert(_table(tmp_path, "b"), str(out), num_shards=2, mode="overwrite")
    assert sorted(os.listdir(out)) == before and os.path.islink(out / "index")
    victims()


@pytest.mark.slow  # a sweep of cases
@pytest.mark.parametrize("name", ["index/data-train.tfrecord-00001-of-00002.idx",
                                  layout.MANIFEST])
@pytest.mark.parametrize("via", ["index", "overwrite"])
def test_index_files_and_the_manifest_at_links_are_replaced_never_written_through(
        tmp_path, victims, name, via):
    out = _converted(tmp_path)
    planted = (out / name).read_bytes()
    (tmp_path / "elsewhere").write_bytes(planted)
    os.remove(out / name)
    os.symlink(tmp_path / "elsewhere", out / name)
    if via == "index":
        tfrecorder.build_index(str(out))
    else:
        tfrecorder.convert(_table(tmp_path, "b"), str(out), num_shards=2, mode="overwrite")
    assert (tmp_path / "elsewhere").read_bytes() == planted
    assert not os.path.islink(out / name) and (out / name).is_file()
    tfrecorder.verify(str(out))
    victims()


def _cli_error(cli, argv):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, err.getvalue()


def test_staged_tasks_are_private_and_a_swapped_one_is_refused(tmp_path):
    old = os.umask(0o002)  # a group-shared folder
    try:
        [task] = stage_rows([Row(0, "train", None, {}, ("a",))], tmp_path / "tasks")
    finally:
        os.umask(old)
    path = staging.task_path(str(tmp_path / "tasks"), task.filename)
    [part] = [tmp_path / "tasks" / n for n in os.listdir(tmp_path / "tasks") if ".part-" in n]
    assert stat.S_IMODE(os.stat(tmp_path / "tasks").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(part).st_mode) == 0o600
    assert [r.row for r in staging.read_task(path).rows] == [0]
    for swapped in (path, part):
        os.chmod(swapped, 0o664)  # writable by the group: anyone there could have swapped it
        with pytest.raises(tfrecorder.ConfigError, match="not a private file"):
            staging.read_task(path)
        os.chmod(swapped, 0o600)
    if os.getuid() == 0:  # owned by another user
        os.chown(path, 65534, -1)
        with pytest.raises(tfrecorder.ConfigError, match="not a private file"):
            staging.read_task(path)


def test_the_run_folder_is_its_owners_alone(tmp_path):
    folder = tmp_path / "out" / layout.TMP_DIR / "run1"
    old = os.umask(0o002)
    try:
        ledger.write_ledger(str(folder), ["tfrecorder.json"])
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder / ledger.LEDGER).st_mode) == 0o600


@pytest.mark.slow  # the storage emulator end to end
def test_a_manifest_on_cloud_storage_naming_objects_outside_is_refused(gcs, tmp_path):
    gcs.pipe(f"{BUCKET}/victim.txt", b"precious")
    out = f"gs://{BUCKET}/crafted"
    tfrecorder.convert(_table(tmp_path, "a"), out)
    manifest = json.loads(gcs.cat(f"{BUCKET}/crafted/{layout.MANIFEST}"))
    manifest["splits"]["train"]["shards"][0]["file"] = "../victim.txt"
    for name in (layout.MANIFEST, layout.version_manifest(1)):  # the file readers pin too
        gcs.pipe(f"{BUCKET}/crafted/{name}", json.dumps(manifest).encode())
    with pytest.raises(tfrecorder.IncompleteOutputError, match="not a shard name"):
        tfrecorder.verify(out)
    with pytest.raises(tfrecorder.OutputExistsError, match="cannot be trusted"):
        tfrecorder.convert(_table(tmp_path, "b"), out, mode="overwrite")
    assert gcs.cat(f"{BUCKET}/victim.txt") == b"precious"
