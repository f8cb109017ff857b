"""A run publishing into its output folder (the lock, survey, removal and publishing):
one writer at a time, nothing destroyed before a run is sound, only our own files
replaced, and nothing left behind."""

import json
import os
import shutil
import subprocess
import sys
import time

import pandas as pd
import pytest

import tfrecorder
from tfrecorder import _storage as storage
from tfrecorder._readers import inspection
from tfrecorder._folder import layout, metadata, survey
from tfrecorder._folder.lock import LOCK_TTL, acquire, identity, release
from tests.conftest import BUCKET, SAMPLES, encode, read_split


def _table(root, prefix, n, labels):
    """A CSV of ``n`` distinct images named ``<prefix>_<i>.jpg``."""
    os.makedirs(root / prefix, exist_ok=True)
    lines = []
    for i in range(n):
        path = root / prefix / f"{prefix}_{i}.jpg"
        path.write_bytes(encode(size=(64, 48), seed=hash((prefix, i)) % 10_000))
        lines.append(f"TRAIN,{path},{labels[i % len(labels)]}")
    csv = root / f"{prefix}.csv"
    csv.write_text("\n".join(lines) + "\n")
    return str(csv)


def _snapshot(out):
    """Every file below ``out`` (index files included) by its relative path, and its bytes."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.relative_to(out).parts[0] != layout.TMP_DIR}


def _top(names):
    return sorted({n.split("/")[0] for n in names})


# --- one writer at a time -----------------------------------------------------------

_RACER = """
import json, sys
import apache_beam, tfrecorder  # imported before the start signal, so both start together
import tfrecorder._writer.launch, tfrecorder._writer.pipeline  # (the writer's steps too)
csv, out, overwrite = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
print("ready", flush=True)
sys.stdin.readline()
try:
    # On Beam (a pipeline option): a run long enough for the other to meet its lock.
    r = tfrecorder.convert(csv, out, overwrite=overwrite, num_shards=2, progress=False,
                           pipeline_options={"direct_num_workers": 1})
    print(json.dumps({"ok": True, "rows": r.rows_written, "labels": r.labels}))
except tfrecorder.OutputExistsError as e:
    print(json.dumps({"ok": False, "error": type(e).__name__, "message": str(e)}))
"""


def _race(tables, out, overwrite):
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, csv, str(out), str(int(overwrite))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for csv in tables]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:  # the start signal: both runs begin at once
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out_text, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out_text
        results.append(json.loads(out_text.strip().splitlines()[-1]))
    return results


@pytest.fixture(scope="module")
def racing_tables(tmp_path_factory):
    """The two tables of the racing runs (read only)."""
    root = tmp_path_factory.mktemp("racing")
    return _table(root, "a", 120, ["a0", "a1", "a2"]), _table(root, "b", 160, ["b0", "b1"])


@pytest.mark.slow
@pytest.mark.parametrize("repetition,overwrite", [(0, True), (1, True), (2, True), (3, False)])
def test_two_racing_runs_never_publish_each_others_data(tmp_path, tf, repetition, overwrite,
                                                        racing_tables, samples_converted):
    a, b = racing_tables
    out = tmp_path / "out"
    if overwrite:  # a complete output of a third table is already there (a copy)
        shutil.copytree(samples_converted()[0], out)
    results = _race([a, b], out, overwrite)

    busy = [r for r in results if not r["ok"]]
    assert len(busy) == 1, results  # the second run met the lock of the first
    assert busy[0]["error"] == "OutputBusyError"
    assert "another conversion is writing" in busy[0]["message"] and "run " in busy[0]["message"]
    (winner,) = [r for r in results if r["ok"]]
    prefix = "a" if winner["labels"][0].startswith("a") else "b"
    expected = {"a": 120, "b": 160}[prefix]
    assert winner["rows"] == expected
    names = [e["image_name"][0].decode() for e in read_split(tf, out)]
    assert len(names) == expected and all(n.startswith(f"{prefix}_") for n in names)
    m = metadata.read_manifest(str(out))
    assert m.rows_in == m.rows_written == expected and tfrecorder.verify(str(out)).records == expected
    assert sorted(os.listdir(out)) == sorted(
        [*(f for s in m.splits for f in m.files(s)), "dataset_info.json", "errors.jsonl",
         "features.json", "index", "label.labels.txt", "quality.json", "rows", "tfrecorder.json",
             "versions"])  # no lock, no run folder
    assert sorted(os.listdir(out / "index")) == sorted(
        os.path.basename(f) for f in m.index_files())


def _lock_file(out, **holder):
    out.mkdir(exist_ok=True)
    now = time.time()
    base = {"run_id": "other", "runner": "DirectRunner", "host": "elsewhere", "pid": 1,
            "started": now, "expires": now + 600}
    (out / layout.LOCK).write_text(json.dumps({**base, **holder}))


def test_a_live_lock_refuses_at_once_and_names_the_run(tmp_path):
    out = tmp_path / "out"
    _lock_file(out, run_id="abc123", pid=os.getpid(), host=os.uname().nodename)
    with pytest.raises(tfrecorder.OutputBusyError, match=r"run abc123 \(DirectRunner, process") as e:
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), mode="overwrite")
    assert isinstance(e.value, tfrecorder.OutputExistsError)
    assert os.listdir(out) == [layout.LOCK]  # nothing written


@pytest.mark.slow  # a conversion end to end
@pytest.mark.parametrize("holder", [
    {"host": "HOST", "pid": "DEAD"},            # a killed run on this machine
    {"expires": 0},                             # a lock nobody renewed
    {"runner": "DataflowRunner", "expires": 1},  # a Dataflow job that ended without its last step
], ids=["dead process", "expired", "expired dataflow"])
def test_a_stale_lock_is_taken_over(tmp_path, holder):
    if holder.get("pid") == "DEAD":
        holder = {**identity(), "pid": _dead_pid()}
    out = tmp_path / "out"
    _lock_file(out, **holder)
    result = tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), mode="overwrite")
    assert result.rows_written == 36 and layout.LOCK not in os.listdir(out)


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    return int(done.stdout)


def _killed_holding_the_lock(out, runner: str, detached: bool = False) -> dict:
    """The lock a process took (with its real identity) before it was killed: it ends
    without releasing it. Returns the lock's content."""
    take = "sys.argv[1], 'killed', sys.argv[2]" + (", detached=True" if detached else "")
    subprocess.run([sys.executable, "-c", (
        f"import os, sys; from tfrecorder._folder import lock as _lock; _lock.acquire({take}); "
        "os._exit(0)"), str(out), runner], check=True)
    return json.loads((out / layout.LOCK).read_text())


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["compact", "vacuum"])
def test_a_lock_whose_process_is_gone_is_taken_over_at_once_whatever_ran(
        tmp_path, samples_converted, runner):
    """A compact or vacuum killed holding the lock: the next one goes on at once, as
    after a killed conversion, not ten minutes later."""
    out = tmp_path / "out"
    shutil.copytree(samples_converted()[0], out)
    holder = _killed_holding_the_lock(out, runner)
    assert holder["runner"] == runner and holder["pid"] != os.getpid()
    assert holder["expires"] > time.time() + LOCK_TTL / 2  # far from expired
    assert tfrecorder.vacuum(str(out), keep=1).versions == ()
    assert layout.LOCK not in os.listdir(out)
    _killed_holding_the_lock(out, runner)
    assert tfrecorder.compact(str(out)).version is None  # nothing to rewrite
    assert layout.LOCK not in os.listdir(out)


@pytest.mark.slow
def test_a_live_holder_or_a_job_elsewhere_keeps_its_lock(tmp_path, samples_converted):
    out = tmp_path / "out"
    shutil.copytree(samples_converted()[0], out)
    lock = acquire(str(out), "live", "compact")  # this process: alive
    with pytest.raises(tfrecorder.OutputBusyError, match=r"run live \(compact, process"):
        tfrecorder.vacuum(str(out), keep=1)
    lock.release()
    # A job handed to a runner elsewhere goes on without the process that submitted it.
    _killed_holding_the_lock(out, "DataflowRunner", detached=True)
    before = (out / layout.LOCK).read_bytes()
    with pytest.raises(tfrecorder.OutputBusyError, match=r"run killed \(DataflowRunner"):
        tfrecorder.compact(str(out))
    assert (out / layout.LOCK).read_bytes() == before


@pytest.mark.parametrize("holder", [
    {"pid_namespace": -1},      # another container with the same host name
    {"boot_id": "other-boot"},  # another machine, or this one before a reboot... unproven
    {"boot_id": None, "pid_namespace": None},  # a lock of an older tfrecorder
], ids=["other pid namespace", "other boot", "no identity"])
def test_a_process_that_is_only_invisible_from_here_keeps_its_lock(tmp_path, holder):
    out = tmp_path / "out"
    _lock_file(out, **{**identity(), "pid": _dead_pid(), **holder})
    before = (out / layout.LOCK).read_bytes()
    with pytest.raises(tfrecorder.OutputBusyError, match="run other"):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), mode="overwrite")
    assert os.listdir(out) == [layout.LOCK] and (out / layout.LOCK).read_bytes() == before


@pytest.mark.slow  # a conversion end to end
@pytest.mark.parametrize("content", [
    '{"run_id": "x", "expires": null}', '{"run_id": "x"}', '["not", "a", "lock"]',
    '{"run_id": "x", "expires": "soon"}', "", "{garbage",
], ids=["null expiry", "no expiry", "a list", "a string expiry", "empty", "not json"])
def test_a_malformed_lock_is_busy_while_young_and_taken_over_once_provably_expired(
        tmp_path, content):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / layout.LOCK
    lock.write_text(content)
    with pytest.raises(tfrecorder.OutputBusyError, match="cannot read") as e:
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), mode="overwrite")
    assert str(lock) in str(e.value)
    assert os.listdir(out) == [layout.LOCK]
    old = time.time() - LOCK_TTL - 5
    os.utime(lock, (old, old))  # nobody rewrote it for longer than a lock lives
    result = tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), mode="overwrite")
    assert result.rows_written == 36
    assert not [e for e in os.listdir(out) if e.startswith(layout.LOCK)]


def test_a_folder_at_the_locks_name_is_busy_and_never_moved(tmp_path):
    out = tmp_path / "out"
    (out / layout.LOCK).mkdir(parents=True)
    (out / layout.LOCK / "keep").write_text("mine")
    old = time.time() - 10 * LOCK_TTL
    os.utime(out / layout.LOCK, (old, old))
    with pytest.raises(tfrecorder.OutputBusyError, match="is a folder"):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), mode="overwrite")
    assert os.listdir(out) == [layout.LOCK]
    assert (out / layout.LOCK / "keep").read_text() == "mine"


def _create_and_remove(path, times):
    for _ in range(times):
        try:
            storage.create_exclusive(path, b'{"expires": 1}')
        except FileExistsError:
            pass
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


@pytest.mark.slow
def test_a_lock_file_is_never_seen_half_written(tmp_path):
    """A run that meets a lock reads it whole or not at all: one that read a created
    but still empty lock took a live run for a damaged lock."""
    import multiprocessing

    path = str(tmp_path / layout.LOCK)
    creator = multiprocessing.get_context("spawn").Process(
        target=_create_and_remove, args=(path, 3000))
    creator.start()
    seen = set()
    while creator.is_alive():
        try:
            with open(path, "rb") as f:
                seen.add(f.read())
        except FileNotFoundError:
            pass
    creator.join()
    assert creator.exitcode == 0
    assert seen <= {b'{"expires": 1}'}, seen - {b'{"expires": 1}'}
    assert os.listdir(tmp_path) == []  # nothing of the temporary names is left


@pytest.mark.slow  # a conversion end to end
def test_a_lock_being_created_is_not_a_file_of_the_folder(tmp_path):
    # Another run writes its lock whole under a temporary name, then links it: a survey
    # in that moment must not take the folder for a user's (nor remove the file).
    out = tmp_path / "out"
    out.mkdir()
    making = out / os.path.basename(storage.temp_name(str(out / layout.LOCK)))
    making.write_text("{}")
    assert survey.survey(str(out)).entries == ()
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out))  # overwrite=False
    assert making.exists()
    (out / "mine.txt").write_text("x")
    assert survey.survey(str(out)).entries != ()


def test_the_lock_on_cloud_storage(gcs):
    out = f"gs://{BUCKET}/locked"
    lock = acquire(out, "run-1", "DataflowRunner", ttl=3600)
    with pytest.raises(tfrecorder.OutputBusyError, match="run run-1 \\(DataflowRunner"):
        acquire(out, "run-2", "DirectRunner")
    lock.holder["job_id"] = "2026-11-23_job"
    lock.write()
    with pytest.raises(tfrecorder.OutputBusyError, match="job 2026-11-23_job"):
        acquire(out, "run-2", "DirectRunner")
    release(storage.join(out, layout.LOCK), "someone-else")  # not theirs: stays
    assert gcs.exists(f"{BUCKET}/locked/{layout.LOCK}")
    lock.release()
    acquire(out, "run-2", "DirectRunner").release()
    assert not gcs.exists(f"{BUCKET}/locked/{layout.LOCK}")


# --- nothing destroyed before the run is sound ----------------------------------------

@pytest.fixture
def previous(tmp_path, samples_converted):
    """An output directory holding a complete conversion, and its files' bytes (a copy
    of the shared conversion: the same bytes, its own folder)."""
    out = tmp_path / "out"
    shutil.copytree(samples_converted(num_shards=2)[0], out)
    return out, _snapshot(out)


def _df(paths, labels=None, split="TRAIN"):
    return pd.DataFrame({"split": split, "image_uri": paths,
                         "label": labels or ["x"] * len(paths)})


@pytest.mark.parametrize("make,error,match", [
    (lambda t: dict(source=_df([str(t / "a.jpg")]), seed="x"), tfrecorder.ConfigError,
     "seed='x'"),
    (lambda t: dict(source=_df([str(t / "a.jpg"), str(t / "b.jpg")], ["cat", "big\ndog"])),
     tfrecorder.SchemaError, r"row 1, column 'label'.*line break"),
    (lambda t: dict(source=_df([str(t / "a.jpg"), "s3://bucket/b.jpg"])),
     tfrecorder.SchemaError, r"row 1, column 'image_uri'.*unsupported URI scheme s3://"),
    (lambda t: dict(source=_df([str(t / "a.jpg")]), label_vocabulary=str(t)),
     tfrecorder.ConfigError, "is a folder"),
    (lambda t: dict(source=_df([str(t / "a.jpg")]), label_vocabulary=["a", "b\rc"]),
     tfrecorder.ConfigError, "line break"),
    (lambda t: dict(source=_df([str(t / "a.jpg")]), num_shards={"holdout": 1}),
     tfrecorder.ConfigError, "num_shards: unknown split 'holdout'"),
], ids=["seed", "label line break", "s3 uri", "vocabulary folder", "vocabulary line break",
        "num_shards split"])
def test_every_check_runs_before_the_previous_output_is_touched(tmp_path, previous, make,
                                                                error, match):
    out, before = previous
    (tmp_path / "a.jpg").write_bytes(encode(seed=1))
    (tmp_path / "b.jpg").write_bytes(encode(seed=2))
    kwargs = make(tmp_path)
    with pytest.raises(error, match=match):
        tfrecorder.convert(kwargs.pop("source"), str(out), mode="overwrite", **kwargs)
    assert _snapshot(out) == before and sorted(os.listdir(out)) == _top(before)


@pytest.mark.slow  # a conversion end to end
def test_a_run_that_fails_leaves_the_previous_output_as_it_was(tmp_path, previous, tf):
    out, before = previous
    good = [str(tmp_path / f"{i}.jpg") for i in range(3)]
    for i, p in enumerate(good):
        open(p, "wb").write(encode(seed=i))
    df = _df(good + [str(tmp_path / f"gone{i}.jpg") for i in range(3)])
    with pytest.raises(tfrecorder.ConversionError, match="3 of 6 rows") as e:
        tfrecorder.convert(df, str(out), mode="overwrite")
    assert _snapshot(out) == before  # every file of the previous output, byte for byte
    assert len(read_split(tf, out)) == 36 and tfrecorder.verify(str(out)).records == 36
    # The failed run's errors are kept in its own folder, which the error names.
    path = str(e.value).split("listed in ")[1].rstrip(".")
    assert path.startswith(str(out / layout.TMP_DIR)) and len(open(path).readlines()) == 3
    # The next run clears that folder.
    tfrecorder.convert(df, str(out), mode="overwrite", max_error_fraction=0.5)
    assert layout.TMP_DIR not in os.listdir(out)


@pytest.mark.slow  # a conversion end to end
def test_overwrite_replaces_only_what_a_conversion_wrote(tmp_path, previous):
    out, before = previous
    # Files of the user's, one named like a shard of ours but listed by no manifest.
    (out / "notes.txt").write_text("mine")
    (out / "other-train.tfrecord-00000-of-00001").write_bytes(b"not ours")
    result = tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), mode="overwrite",
                                num_shards=1)
    m = metadata.read_manifest(str(out))
    assert result.shards_per_split["train"] == 1
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "other-train.tfrecord-00000-of-00001").read_bytes() == b"not ours"
    old_shards = {n for n in before if layout.ShardName.parse(n)}
    assert not old_shards & set(os.listdir(out)) - set(m.files("train"))  # old shards gone


def test_the_index_files_overwrite_removes_are_those_a_conversion_names():
    # What a previous output's index files are is derived from its shard names, never
    # taken from the manifest's "index" entries (which the manifest's own check also
    # refuses unless they are these names): "notes.txt" stays the user's.
    from tfrecorder._folder import index
    from tfrecorder._folder.manifest import Manifest, ShardInfo, SplitInfo

    shard = "data-train.tfrecord-00000-of-00001"
    listed = ShardInfo(shard, 1, 10, index="notes.txt")
    manifest = Manifest("data", None, {}, {}, {"train": SplitInfo("train", 1, 10, [listed])},
                        1, 1, 0)
    surveyed = survey.Survey("out", ("notes.txt", shard, index.DIR, layout.MANIFEST),
                             manifest, frozenset())
    assert "notes.txt" not in surveyed.complete_files
    assert index.name(shard) in surveyed.complete_files and surveyed.foreign() == ["notes.txt"]


def test_a_users_file_that_a_run_would_replace_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "data-test.tfrecord-00000-of-00001").write_bytes(b"my own records")
    with pytest.raises(tfrecorder.OutputExistsError, match="which no tfrecorder manifest lists"):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), mode="overwrite")
    assert os.listdir(out) == ["data-test.tfrecord-00000-of-00001"]


# --- reading back checks the counts -------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("damage", ["cut at a record boundary", "replaced by a shorter file"])
def test_a_shard_that_lost_records_is_an_error_naming_it(tf, tmp_path, damage):
    out = tmp_path / "out"
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), num_shards={"TRAIN": 2})
    m = metadata.read_manifest(str(out))
    assert len(m.files("train")) == 2  # a per-split count in any spelling
    shard = out / m.files("train")[1]
    records = list(inspection.shard_records(str(shard), None))
    if damage == "cut at a record boundary":
        keep = sum(16 + len(r) for r in records[:-2])
        shard.write_bytes(shard.read_bytes()[:keep])
    else:
        other = out / m.files("validation")[0]
        shard.write_bytes(other.read_bytes())
    with pytest.raises(tf.errors.InvalidArgumentError, match=m.files("train")[1]):
        for _ in tfrecorder.load(str(out), split="train", decode_images=False):
            pass
    with pytest.raises(tfrecorder.CorruptRecordError, match=m.files("train")[1]):
        tfrecorder.verify(str(out))
    assert sum(1 for _ in tfrecorder.load(str(out), split="test", decode_images=False)) == 3


@pytest.mark.parametrize("text", ["", "{not json", '{"format": "tfrecorder", "name": "d"}',
                                  '{"splits": {"train": {"name": "train"}}}'])
def test_a_garbage_or_partial_manifest_is_one_clear_error(tmp_path, text):
    out = tmp_path / "out"
    out.mkdir()
    (out / layout.MANIFEST).write_text(text)
    for read in (tfrecorder.load, tfrecorder.info, tfrecorder.verify, tfrecorder.inspect):
        with pytest.raises(tfrecorder.IncompleteOutputError,
                           match="not a complete tfrecorder manifest.*mode='overwrite'"):
            read(str(out))


def test_a_failed_manifest_write_leaves_the_old_one(tmp_path):
    path = tmp_path / layout.MANIFEST
    path.write_bytes(b'{"old": true}')
    with pytest.raises(TypeError):
        storage.write_atomic(str(path), object())  # the write fails half way
    assert path.read_bytes() == b'{"old": true}' and os.listdir(tmp_path) == [layout.MANIFEST]
    storage.write_atomic(str(path), b'{"new": true}')
    assert path.read_bytes() == b'{"new": true}' and os.listdir(tmp_path) == [layout.MANIFEST]


# --- a run that writes nothing, and what is left behind --------------------------------

def test_a_run_that_writes_nothing_fails(tmp_path):
    df = _df([str(tmp_path / f"missing{i}.jpg") for i in range(4)])
    with pytest.raises(tfrecorder.ConversionError,
                       match=r"4 of 4 rows.*every row was quarantined.*image file not found"):
        tfrecorder.convert(df, str(tmp_path / "out"), max_error_fraction=1.0)
    assert not (tmp_path / "out" / layout.MANIFEST).exists()


def test_the_default_budget_fails_a_run_with_one_bad_row_in_five(tmp_path):
    paths = [str(tmp_path / f"{i}.jpg") for i in range(4)]
    for i, p in enumerate(paths):
        open(p, "wb").write(encode(seed=i))
    df = _df(paths + [str(tmp_path / "gone.jpg")])
    assert tfrecorder.Options().max_error_fraction == 0.1
    with pytest.raises(tfrecorder.ConversionError, match="max_error_fraction=0.1"):
        tfrecorder.convert(df, str(tmp_path / "out"))


_IN_TMPDIR = """
import sys, tfrecorder
from tfrecorder._writer import runners
if sys.argv[2] == "workers":
    runners.IN_PROCESS_MAX_ROWS = 0  # worker processes even for a small table
tfrecorder.convert(sys.argv[1], sys.argv[3], num_workers=2, num_shards=2, progress=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["in process", "workers"])
def test_nothing_is_left_in_tmpdir(tmp_path, mode):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    p = subprocess.run([sys.executable, "-c", _IN_TMPDIR, os.path.join(SAMPLES, "data.csv"),
                        mode.split()[0], str(tmp_path / "out")], env=env, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert os.listdir(tmpdir) == []
    assert metadata.read_manifest(str(tmp_path / "out")).rows_written == 36


@pytest.mark.slow  # two conversions end to end
def test_an_overwrite_that_lost_its_lock_removes_nothing_the_winner_published(
        tmp_path, monkeypatch):
    # An overwrite stalls before its removals, past its lock's expiry; another overwrite
    # takes the lock over and publishes; the first resumes.
    from tfrecorder._writer import publishing

    out = tmp_path / "out"
    tfrecorder.convert(_table(tmp_path, "first", 3, ["a"]), str(out))
    winner_table = _table(tmp_path, "winner", 4, ["b"])
    won = {}
    look = publishing.survey  # what finish does just before it removes anything

    def stalled(output_dir, *args):
        if not won:
            won["started"] = True
            lock = out / layout.LOCK
            lock.write_text(json.dumps({**json.loads(lock.read_text()), "expires": 0}))
            won["result"] = tfrecorder.convert(winner_table, str(out), mode="overwrite")
            won["files"] = _snapshot(out)
        return look(output_dir, *args)

    monkeypatch.setattr(publishing, "survey", stalled)
    with pytest.raises(tfrecorder.OutputBusyError, match="no longer holds"):
        tfrecorder.convert(_table(tmp_path, "loser", 5, ["c"]), str(out), mode="overwrite")
    assert won["result"].rows_written == 4
    assert _snapshot(out) == won["files"]
    assert tfrecorder.verify(str(out)).records == 4
