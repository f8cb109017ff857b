import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tfrecorder._writer import pipeline, plan, run_metadata, shard, staging
from tfrecorder._folder import example
from tfrecorder._folder import layout, ledger, metadata
from tfrecorder._folder.layout import FeatureSpec
from tfrecorder._inputs.block import Row
from tests.conftest import encode, read_split, stage_rows

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


@pytest.mark.slow
def test_write_shards_emits_one_element_per_shard_with_its_quarantined_rows(tmp_path,
                                                                           image_table):
    rows = _rows(tmp_path, image_table, 6, [100, 101])
    tasks = stage_rows(rows, tmp_path / "tasks", num_shards=2)
    out = str(tmp_path / "out")
    settings = shard.WriteSettings(ledger.RunFolder(out, "r1"), COLUMNS)
    with BeamTestPipeline() as p:
        written = (p | beam.Create(range(len(tasks)))
                   | pipeline.WriteShards(str(tmp_path / "tasks"), settings))
        assert_that(written
                    | beam.MapTuple(lambda s, bad: (s.filename, s.num_examples,
                                                    sorted((q.row, q.failed_at) for q in bad))),
                    equal_to([("d-train.tfrecord-00000-of-00002", 3, []),
                              ("d-train.tfrecord-00001-of-00002", 3, []),
                              ("d-test.tfrecord-00000-of-00002", 0, [(100, "read")]),
                              ("d-test.tfrecord-00001-of-00002", 0, [(101, "read")])]))


def test_the_job_graph_is_one_chain_without_side_inputs_or_tagged_outputs(tmp_path):
    """What every Beam runner supports: each step has one input and one output."""
    spec = run_metadata.DatasetSpec("d", None, {}, {}, 1)
    p = beam.Pipeline()
    pipeline.build(p, str(tmp_path), 1,
                   shard.WriteSettings(ledger.RunFolder(str(tmp_path), "r1"), COLUMNS), spec)
    steps = []

    class Visit(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            steps.append(node)

    p.visit(Visit())
    assert steps
    for node in steps:
        assert not node.side_inputs, node.full_label
        assert len(node.main_inputs) <= 1, node.full_label
        assert len(node.outputs) == 1, node.full_label
    # the last step to be visited is the one that publishes (runners such as Dask
    # compute only the last step, and what it depends on)
    assert steps[-1].full_label == "WriteMetadata/Finish"


def test_shards_are_reshuffled_unless_one_worker_in_this_process_writes_them(tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    spec = run_metadata.DatasetSpec("d", None, {}, {}, 1)
    settings = shard.WriteSettings(ledger.RunFolder(str(tmp_path), "r1"), COLUMNS)

    def labels(p):
        pipeline.build(p, str(tmp_path), 2, settings, spec)
        found = []

        class Visit(beam.pipeline.PipelineVisitor):
            def enter_composite_transform(self, node):
                found.append(node.full_label)

        p.visit(Visit())
        return found

    one = PipelineOptions([], direct_num_workers=1)
    two = PipelineOptions([], direct_num_workers=2, direct_running_mode="multi_threading")
    assert "WriteShards/Spread" not in labels(beam.Pipeline(fn_runner.FnApiRunner(), one))
    assert "WriteShards/Spread" in labels(beam.Pipeline(fn_runner.FnApiRunner(), two))
    assert "WriteShards/Spread" in labels(beam.Pipeline(options=one))  # another runner


@pytest.mark.slow  # a conversion end to end
def test_build_writes_shards_then_metadata_with_the_manifest(tf, tmp_path, image_table):
    rows = _rows(tmp_path, image_table, 5, [9])
    tasks = stage_rows(rows, tmp_path / "tasks", num_shards=1)
    out = str(tmp_path / "out")
    os.makedirs(out)
    with open(os.path.join(out, layout.LOCK), "w") as f:  # the run's, as a run holds it
        json.dump({"run_id": "r1", "expires": 2e9}, f)
    spec = run_metadata.DatasetSpec(
        "d", None, {"label": FeatureSpec("int64", [], "label")}, {"label": ["even", "odd"]},
        len(rows), max_error_fraction=0.5)
    with beam.Pipeline() as p:
        pipeline.build(p, str(tmp_path / "tasks"), len(tasks),
                       shard.WriteSettings(ledger.RunFolder(out, "r1"), COLUMNS), spec)
    m = metadata.read_manifest(out)
    assert (m.rows_in, m.rows_written, m.rows_quarantined) == (6, 5, 1)
    assert m.splits["train"].num_examples == 5 and m.splits["test"].num_examples == 0
    ex = read_split(tf, out, "train")
    assert sorted(e["label"][0] for e in ex) == [0, 0, 0, 1, 1]


def test_staged_tasks_read_back_equal(tmp_path):
    rows = [Row(i, "train", f"/x/{i}.jpg", {"label": example.int64_feature([i])}, ("a", i),
                (i,), (100 + i,)) for i in range(5)]
    tasks = stage_rows(rows, tmp_path, num_shards=2)
    assert [t.filename for t in tasks] == ["d-train.tfrecord-00000-of-00002",
                                           "d-train.tfrecord-00001-of-00002"]
    assert staging.list_tasks(str(tmp_path)) == sorted(
        staging.task_path(str(tmp_path), t.filename) for t in tasks)
    # every row once, as it was made, in the seeded order of its shard
    staged = [r for t in tasks for r in t.rows]
    assert sorted(staged, key=lambda r: r.row) == rows
    order = [rows[i] for i in plan.permutation(5, 0, "train")]
    assert staged == order
