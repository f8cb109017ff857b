import os

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tfrecorder import example, metadata, pipeline, shard, staging
from tfrecorder.plan import plan
from tfrecorder.layout import FeatureSpec
from tfrecorder.plan import Row
from tests.conftest import encode, read_split

COLUMNS = ("split", "image_uri", "label")


def _rows(tmp_path, image_table, n_good, missing):
    rows = []
    for i in range(n_good):
        uri = image_table(f"img/{i}.jpg", encode("RGB", fmt="JPEG", seed=i))
        rows.append(Row(i, "train", uri, {"label": example.int64_feature([i % 2])}, ("TRAIN", uri, i % 2)))
    for i in missing:
        uri = str(tmp_path / f"img/missing{i}.jpg")
        rows.append(Row(i, "test", uri, {"label": example.int64_feature([0])}, ("TEST", uri, 0)))
    return rows


def test_write_shards_emits_exact_stats_and_quarantined_rows(tmp_path, image_table):
    rows = _rows(tmp_path, image_table, 6, [100, 101])
    tasks = plan(rows, name="d", num_shards=2)
    out = str(tmp_path / "out")
    paths = staging.stage_tasks(tasks, str(tmp_path / "tasks"))
    with BeamTestPipeline() as p:
        written = (p | beam.Create(paths)
                   | pipeline.WriteShards(shard.WriteSettings(out, str(tmp_path / "run"), COLUMNS)))
        assert_that(written[pipeline.STATS]
                    | beam.Map(lambda s: (s.filename, s.num_examples)),
                    equal_to([("d-train.tfrecord-00000-of-00002", 3),
                              ("d-train.tfrecord-00001-of-00002", 3),
                              ("d-test.tfrecord-00000-of-00002", 0),
                              ("d-test.tfrecord-00001-of-00002", 0)]), label="stats")
        assert_that(written[pipeline.QUARANTINED] | beam.Map(lambda q: (q.row, q.stage)),
                    equal_to([(100, "read"), (101, "read")]), label="bad")


def test_build_writes_shards_then_metadata_with_the_manifest(tf, tmp_path, image_table):
    rows = _rows(tmp_path, image_table, 5, [9])
    tasks = plan(rows, name="d", num_shards=1)
    out = str(tmp_path / "out")
    os.makedirs(out)
    run = os.path.join(out, ".tfrecorder-tmp", "r1")
    spec = metadata.DatasetSpec(
        "d", None, {"label": FeatureSpec("int64", [], "label")}, {"label": ["even", "odd"]},
        len(rows), max_error_fraction=0.5, run_id="r1", run_dir=run)
    with beam.Pipeline() as p:
        staging.stage_tasks(tasks, str(tmp_path / "tasks"))
        pipeline.build(p, str(tmp_path / "tasks"), shard.WriteSettings(out, run, COLUMNS), spec)
    m = metadata.read_manifest(out)
    assert (m.rows_in, m.rows_written, m.rows_quarantined) == (6, 5, 1)
    assert m.splits["train"].num_examples == 5 and m.splits["test"].num_examples == 0
    ex = read_split(tf, out, "train")
    assert sorted(e["label"][0] for e in ex) == [0, 0, 0, 1, 1]


def test_staged_tasks_read_back_equal(tmp_path):
    rows = [Row(i, "train", f"/x/{i}.jpg", {"label": example.int64_feature([i])}, ("a", i),
                (i,), (100 + i,)) for i in range(5)]
    tasks = plan(rows, name="d", num_shards=2)
    paths = staging.stage_tasks(tasks, str(tmp_path))
    assert staging.list_tasks(str(tmp_path)) == sorted(paths)
    assert [staging.read_task(p) for p in paths] == tasks
