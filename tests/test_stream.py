"""The streaming driver: tables read in chunks give exactly what a table read whole gives."""

import os

import pandas as pd
import pytest

import tfrecorder
from tfrecorder import metadata, output, plan, schema, staging, stream, validation
from tests.conftest import SAMPLES, encode


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Chunks of 7 rows, so that a small table spans many."""
    monkeypatch.setattr(stream, "CHUNK_ROWS", 7)


def _pictures(tmp_path, n):
    paths = []
    for i in range(n):
        p = tmp_path / f"img{i:03d}.jpg"
        p.write_bytes(encode(size=(8, 6), seed=i))
        paths.append(str(p))
    return paths


def _files(out):
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file()}


def test_chunked_reading_writes_the_same_bytes(tmp_path, monkeypatch):
    csv = os.path.join(SAMPLES, "data.csv")
    tfrecorder.convert(csv, str(tmp_path / "whole"), num_shards=2)
    monkeypatch.setattr(stream, "CHUNK_ROWS", 5)
    tfrecorder.convert(csv, str(tmp_path / "chunked"), num_shards=2)
    assert _files(tmp_path / "whole") == _files(tmp_path / "chunked")


def test_the_streamed_plan_is_the_in_memory_plan(tmp_path, tiny_chunks):
    # The same rows, planned by plan.plan (rows in memory) and by stream.layouts +
    # stream.stage (counts and an index permutation): every shard holds the same rows
    # in the same order.
    paths = _pictures(tmp_path, 40)
    df = pd.DataFrame({"split": ["TRAIN", "TEST", "", "VALIDATION"] * 10, "image_uri": paths,
                       "label": [f"l{i % 3}" for i in range(40)]})
    spilled = stream.read(df, schema.IMAGE_CSV_SCHEMA, "infer", None, label_vocabulary=None,
                          split_fractions={"train": 0.5, "validation": 0.25, "test": 0.25})
    try:
        plans = stream.layouts(spilled, num_shards={"train": 3, "validation": 2, "test": 1},
                               bytes_per_split={}, workers=1, seed=7)
        stream.stage(spilled, plans, str(tmp_path / "tasks"), name="d", gzip=False)
    finally:
        spilled.remove()
    streamed = [staging.read_task(p) for p in staging.list_tasks(str(tmp_path / "tasks"))]
    checked = validation.validate(df, list(df.index), schema.IMAGE_CSV_SCHEMA,
                                  split_fractions={"train": 0.5, "validation": 0.25,
                                                   "test": 0.25})
    whole = plan.plan(checked.rows, name="d", seed=7,
                      num_shards={"train": 3, "validation": 2, "test": 1})
    assert sorted(t.filename for t in streamed) == sorted(t.filename for t in whole)
    by_name = {t.filename: t for t in streamed}
    for task in whole:
        assert [r.row for r in by_name[task.filename].rows] == [r.row for r in task.rows]
        assert by_name[task.filename].rows == task.rows


def test_a_streamed_csv_of_gs_uris_plans_what_the_whole_csv_plans(tmp_path, tiny_chunks):
    # The per-column fast paths (gs:// URIs taken as they are, splits and labels through
    # their distinct values) against the whole table validated in memory.
    from tfrecorder import sources

    lines = ["split,image_uri,label"] + [
        f"{['TRAIN', 'test', '', 'Validation', 'UNASSIGNED'][i % 5]},gs://b/p/{i}.jpg,"
        f"{['cat', 'dog', 'emu'][i % 3]}" for i in range(60)]
    lines.append(lines[1])  # an image listed twice with its one label: two records, as whole
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    fractions = {"train": 0.5, "validation": 0.25, "test": 0.25}
    spilled = stream.read(str(path), schema.IMAGE_CSV_SCHEMA, "infer", None,
                          label_vocabulary=None, split_fractions=fractions)
    try:
        plans = stream.layouts(spilled, num_shards=2, bytes_per_split={}, workers=1, seed=3)
        stream.stage(spilled, plans, str(tmp_path / "tasks"), name="d", gzip=False)
    finally:
        spilled.remove()
    streamed = {t.filename: t.rows
                for t in map(staging.read_task, staging.list_tasks(str(tmp_path / "tasks")))}
    table = sources.read(str(path))
    checked = validation.validate(table.frame, table.row_ids, schema.IMAGE_CSV_SCHEMA,
                                  base_dir=table.base_dir, split_fractions=fractions)
    whole = {t.filename: t.rows for t in plan.plan(checked.rows, name="d", seed=3, num_shards=2)}
    assert streamed == whole and sum(map(len, whole.values())) == 61
    assert {r.image_uri for rows in whole.values() for r in rows} == {
        f"gs://b/p/{i}.jpg" for i in range(60)}


@pytest.mark.parametrize("keys,names,multi", [
    (["a", "b", "a"], ["x", "y", "x"], False),            # an image twice, one label
    (["a", "b", " a "], ["x", "y", "z"], True),           # " a " is image "a"
    (["a", "b", "a"], ["1", "y", "01"], False),           # "1" and "01" are one label
    (["a", None, "a", ""], ["x", "y", None, "z"], False),  # nulls are not compared
    (["a", None, "a"], ["x", "y", "z"], True),            # found among nulls too
])
def test_the_survey_finds_an_image_with_two_labels_across_chunks(keys, names, multi):
    from tfrecorder import sources

    chunks = [sources.Table(sources.ColumnFrame(
        {"split": ["TRAIN"], "image_uri": [k], "label": [v]}, 1), [i], None, "csv")
        for i, (k, v) in enumerate(zip(keys, names))]
    assert stream.survey(iter(chunks), schema.IMAGE_CSV_SCHEMA)[1] is multi


def test_vocabularies_are_decided_over_the_whole_table(tmp_path, tiny_chunks):
    paths = _pictures(tmp_path, 30)
    # Whole numbers in the first chunks, a name in the last: the column is a vocabulary,
    # and "zebra", seen only at the end, still sorts after the numbers.
    labels = [str(i % 4) for i in range(29)] + ["zebra"]
    df = pd.DataFrame({"split": "TRAIN", "image_uri": paths, "label": labels})
    result = tfrecorder.convert(df, str(tmp_path / "out"))
    assert result.labels == ["0", "1", "2", "3", "zebra"]
    ints = pd.DataFrame({"split": "TRAIN", "image_uri": paths, "label": [i % 4 for i in range(30)]})
    assert tfrecorder.convert(ints, str(tmp_path / "o2")).labels == ["0", "1", "2", "3"]


def test_problems_of_every_chunk_are_reported_together_and_capped(tmp_path, tiny_chunks):
    rows = ["split,image_uri,label"]
    for i in range(1503):
        split = "HOLDOUT" if i >= 3 else "TRAIN"
        rows.append(f"{split},gs://b/{i}.jpg,x")
    rows[5] = "TRAIN,gs://b/ragged.jpg"  # a ragged row, among the bad splits
    path = tmp_path / "big.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(tfrecorder.SchemaError) as e:
        tfrecorder.convert(str(path), str(tmp_path / "out"))
    assert [p.row for p in e.value.problems] == [6]  # the table's shape first
    rows[5] = "TRAIN,gs://b/fixed.jpg,x"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(tfrecorder.SchemaError) as e:
        tfrecorder.convert(str(path), str(tmp_path / "out"))
    assert len(e.value.problems) == 1000 and e.value.problems[0].row == 5
    assert sum(e.value.unlisted.values()) == 1500 - 1 - 1000
    assert "1499 problem(s)" in str(e.value) and "more not listed" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_one_image_with_labels_in_different_chunks_is_one_record(tmp_path, tiny_chunks):
    paths = _pictures(tmp_path, 20)
    df = pd.DataFrame({"split": "TRAIN", "image_uri": paths + [paths[0]],
                       "label": ["a"] * 20 + ["b"]})  # the last row: image 0 again, "b"
    result = tfrecorder.convert(df, str(tmp_path / "out"))
    assert (result.rows_in, result.rows_written, result.rows_per_split) == (21, 21, {"train": 20})
    assert metadata.read_manifest(str(tmp_path / "out")).features["label"].shape is None


def test_nothing_is_left_of_the_spill(tmp_path, monkeypatch, tiny_chunks):
    import tempfile

    spill_root = tmp_path / "tmp"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    csv, out = os.path.join(SAMPLES, "data.csv"), str(tmp_path / "out")
    tfrecorder.convert(csv, out)
    with pytest.raises(tfrecorder.SchemaError):
        tfrecorder.convert(pd.DataFrame({"split": ["NOPE"] * 9, "image_uri": "a.jpg",
                                         "label": "x"}), str(tmp_path / "o2"))
    assert os.listdir(spill_root) == []
    # refused after the table was read and spilled: the target holds an output, or is busy
    with pytest.raises(tfrecorder.OutputExistsError):
        tfrecorder.convert(csv, out)
    assert os.listdir(spill_root) == []
    lock = output.acquire(out, output.new_run_id(), "DirectRunner", output.LOCK_TTL)
    try:
        with pytest.raises(tfrecorder.OutputBusyError):
            tfrecorder.convert(csv, out, overwrite=True)
    finally:
        lock.release()
    assert os.listdir(spill_root) == []
