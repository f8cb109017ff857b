"""Two exports into one destination (docs/sharing.md, "Two exports at once"): the
destination's lock, taken through the folder's lock module as another exporter takes
it, refuses the second; a stale one is taken over; a finished or failed export leaves
none behind, and one left over is not read as data."""

import json
import os
import shutil
import subprocess

import pytest

import tfrecorder
from tfrecorder._folder import layout, lock as _lock


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def photos(photos):
    """The exports' shared folder (conftest), by its path."""
    return photos[1]


def _files(dest):
    return {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}


def _dead_pid() -> int:
    """The id of a process of this machine that has ended."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_an_export_into_a_destination_another_export_holds_is_refused(photos, tmp_path):
    dest = tmp_path / "hf"
    tfrecorder.export(photos, str(dest))
    with _lock.acquire(str(dest), "other0export", "export"):  # as another exporter
        kept = _files(dest)
        with pytest.raises(tfrecorder.OutputBusyError) as busy:
            tfrecorder.export(photos, str(dest), format="webdataset")
        message = str(busy.value)
        assert f"another export is writing {dest}" in message
        assert "run other0export (export, process" in message
        assert "Wait for it to end" in message and f"delete {dest / layout.LOCK}" in message
        assert _files(dest) == kept  # the holder's lock included: nothing touched
    assert sorted(os.listdir(tmp_path)) == ["hf"]  # nothing staged beside it either
    done = tfrecorder.export(photos, str(dest), format="webdataset")  # released: it runs
    assert sorted(_files(dest)) == sorted(done.files + ["test.json", "train.json",
                                                        "tfrecorder-export.json"])


def test_the_lock_of_an_expired_or_dead_exporter_is_taken_over(photos, tmp_path):
    expired = tmp_path / "expired"
    expired.mkdir()
    _lock.acquire(str(expired), "expired0run", "export", ttl=-1)  # never released
    done = tfrecorder.export(photos, str(expired))
    assert sorted(_files(expired)) == sorted(done.files + [
        "README.md", "croissant.json", "tfrecorder-export.json"])  # the lock gone too
    dead = tmp_path / "dead"
    tfrecorder.export(photos, str(dead))
    held = _lock.acquire(str(dead), "dead0run", "export")
    held.holder.update(pid=_dead_pid(), pid_start=None)  # its process ended, unreleased
    held.write()
    tfrecorder.export(photos, str(dead), format="webdataset")
    assert not (dead / layout.LOCK).exists()


def test_the_folder_that_replaces_the_destination_lands_locked(tmp_path):
    from tfrecorder._export import target

    dest = tmp_path / "hf"
    dest.mkdir()
    (dest / "old.parquet").write_bytes(b"old")
    with _lock.acquire(str(dest), "this0export", "export") as held:
        writing = target.Writing(str(dest))
        writing.put("new.parquet", b"new")
        writing.publish({"files": {}}, None)
        assert sorted(os.listdir(dest)) == [layout.LOCK, "new.parquet",
                                             target.MANIFEST]
        assert _lock.holds(held.path, "this0export")  # no moment for another to take it
    assert not (dest / layout.LOCK).exists()


def test_a_failed_export_releases_the_lock_and_the_next_one_runs(photos, tmp_path):
    out = str(tmp_path / "out")
    shutil.copytree(photos, out)
    shard = os.path.join(out, tfrecorder.info(out).splits["train"].shards[1].file)
    whole = open(shard, "rb").read()
    broken = bytearray(whole)
    broken[20] ^= 0xFF  # inside the first record's data: its checksum no longer holds
    open(shard, "wb").write(bytes(broken))
    dest = tmp_path / "hf"
    with pytest.raises(tfrecorder.CorruptRecordError):
        tfrecorder.export(out, str(dest))
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no folder left for its lock
    open(shard, "wb").write(whole)
    first = tfrecorder.export(out, str(dest))
    open(shard, "wb").write(bytes(broken))
    with pytest.raises(tfrecorder.CorruptRecordError):
        tfrecorder.export(out, str(dest), format="webdataset")
    assert layout.LOCK not in os.listdir(dest)
    open(shard, "wb").write(whole)
    again = tfrecorder.export(out, str(dest))
    assert sorted(again.reused) == sorted(first.files)


@pytest.mark.slow
def test_a_lock_left_in_an_export_is_not_read_as_data(photos, tmp_path):
    datasets = pytest.importorskip("datasets")
    dest = tmp_path / "hf"
    tfrecorder.export(photos, str(dest))
    _lock.acquire(str(dest), "left0behind", "export", ttl=-1)  # a killed export's
    assert layout.LOCK.startswith(".") and not layout.LOCK.endswith((".parquet", ".tar"))
    loaded = datasets.load_dataset(str(dest), cache_dir=str(tmp_path / "hf-cache"))
    assert {s: loaded[s].num_rows for s in loaded} == {"train": 30, "test": 10}
    croissant = (dest / "croissant.json").read_text()
    assert layout.LOCK not in croissant
    wds = tmp_path / "wds"
    tfrecorder.export(photos, str(wds), format="webdataset")
    _lock.acquire(str(wds), "left0behind", "export", ttl=-1)
    urls = [s["url"] for s in json.loads((wds / "train.json").read_text())["shardlist"]]
    assert urls == [f"train-{i:05d}.tar" for i in range(4)]


@pytest.mark.slow
def test_two_exports_into_one_gcs_destination(photos, tmp_path, gcs):
    from tests.conftest import BUCKET

    dest = f"gs://{BUCKET}/export-{tmp_path.name}/hf"
    first = tfrecorder.export(photos, dest)
    with _lock.acquire(dest, "other0export", "export"):
        with pytest.raises(tfrecorder.OutputBusyError,
                           match=f"another export is writing {dest}: run other0export"):
            tfrecorder.export(photos, dest, format="webdataset")
    gcs.invalidate_cache()
    assert not gcs.exists(f"{dest}/{layout.LOCK}")
    _lock.acquire(dest, "expired0run", "export", ttl=-1)  # never released
    again = tfrecorder.export(photos, dest)
    assert sorted(again.reused) == sorted(first.files)
    gcs.invalidate_cache()
    listed = sorted(p.split("/hf/", 1)[1] for p in gcs.find(dest))
    assert listed == sorted(again.files + ["README.md", "croissant.json",
                                           "tfrecorder-export.json"])


def test_a_linked_destination_is_the_folder_it_names_and_a_file_is_refused(photos, tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    tfrecorder.export(photos, str(link), format="webdataset")
    tfrecorder.export(photos, str(link), format="webdataset")  # again, over the first
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert not (real / layout.LOCK).exists() and (real / "train.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    afile = tmp_path / "afile"
    afile.write_text("mine")
    with pytest.raises(tfrecorder.ConfigError, match="is a file; give a folder"):
        tfrecorder.export(photos, str(afile))
    assert afile.read_text() == "mine"
