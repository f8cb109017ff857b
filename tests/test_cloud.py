"""gs:// end to end against a real local GCS emulator, and the Dataflow job built offline.

TensorFlow's own gs:// file system always talks to Google's servers, so records are
read back here through Beam's GCS file system (and tfrecorder's own reader), while
listing and metadata go through tfrecorder's storage facade.
"""

import collections
import json
import os
import subprocess
import sys
import threading

import pandas as pd
import pytest

import tfrecorder
from tfrecorder import _storage as storage
from tfrecorder._writer import shard
from tfrecorder._folder import example
from tfrecorder._folder import records
from tfrecorder._folder import layout, ledger, metadata
from tfrecorder._writer.plan import ShardTask
from tfrecorder._inputs.block import Row
from tests.conftest import encode

from tests.conftest import BUCKET


def _beam_gcs():
    """Beam's GCS I/O with an anonymous client: the emulator needs no credentials, and
    Beam's default-credentials lookup would spend many seconds failing first."""
    from apache_beam.io.gcp import gcsio
    from apache_beam.options.pipeline_options import PipelineOptions

    client = gcsio.create_storage_client(PipelineOptions(), use_credentials=False)
    return gcsio.GcsIO(storage_client=client)


@pytest.mark.slow
def test_gs_csv_of_gs_images_to_gs_output_every_row_accounted_for(gcs, tmp_path):
    root = f"gs://{BUCKET}/e2e"
    images = {}
    for i in range(9):
        data = encode(fmt="PNG" if i % 3 == 0 else "JPEG", seed=i)
        images[f"img/{i}.{'png' if i % 3 == 0 else 'jpg'}"] = data
        gcs.pipe(f"{root}/{list(images)[-1]}", data)
    rows = [["TRAIN" if i < 6 else "TEST", uri if i % 2 else f"{root}/{uri}", f"c{i % 2}"]
            for i, uri in enumerate(images)]  # relative and absolute gs:// URIs
    rows.append(["TEST", f"{root}/img/missing.jpg", "c0"])
    gcs.pipe(f"{root}/data.csv", pd.DataFrame(rows).to_csv(header=False, index=False).encode())

    out = f"{root}/out"
    result = tfrecorder.convert(f"{root}/data.csv", out)
    assert (result.rows_in, result.rows_written, result.rows_quarantined) == (10, 9, 1)
    names = storage.listdir(out)
    assert "tfrecorder.json" in names and layout.TMP_DIR not in names

    beam_fs = _beam_gcs()
    m = metadata.read_manifest(out)
    seen = {}
    for split in m.splits:
        for f in m.files(split):
            with beam_fs.open(f"{out}/{f}") as fh:
                for raw in records.read_records(fh, f):
                    ex = example.parse(raw)
                    seen[ex["image_name"][1][0].decode()] = (split, ex["image"][1][0],
                                                             ex["label"][1][0])
    assert len(seen) == 9
    for uri, data in images.items():
        split, stored, label = seen[os.path.basename(uri)]
        assert stored == data
    errors = [json.loads(line) for line in gcs.cat(f"{out}/errors.jsonl").splitlines()]
    assert [e["reason"] for e in errors] == [f"image file not found: {errors[0]['image_uri']}"]

    inspected = tfrecorder.inspect(out, split="train", num_records=3, output_dir=str(tmp_path / "i"))
    assert len(inspected.images) == 3 and inspected.split_counts == {"train": 6, "test": 3}
    assert tfrecorder.verify(out).records == 9
    datasets = tfrecorder.load(out, decode_images=False)  # built from gs:// metadata
    assert list(datasets) == ["train", "test"] and datasets.label_names == ["c0", "c1"]


def test_gs_images_missing_over_the_budget_stop_the_run_before_it_starts(gcs):
    # One listing of the folder tells which objects are not there; the object that is
    # no image is found only by reading it, and is not among the bad rows.
    root = f"gs://{BUCKET}/early"
    gcs.pipe(f"{root}/img/good.jpg", encode())
    gcs.pipe(f"{root}/img/broken.jpg", b"not an image")
    rows = [["TRAIN", f"{root}/img/good.jpg", "a"], ["TRAIN", "img/broken.jpg", "a"]]
    rows += [["TRAIN", f"img/gone-{i}.jpg", "b"] for i in range(2)]
    rows += [["TEST", f"gs://{BUCKET}/nowhere/x.jpg", "b"]]
    gcs.pipe(f"{root}/data.csv", pd.DataFrame(rows).to_csv(header=False, index=False).encode())
    with pytest.raises(tfrecorder.ConversionError, match=r"^3 of 5 rows were quarantined"):
        tfrecorder.convert(f"{root}/data.csv", f"{root}/out")
    errors = [json.loads(line) for line in gcs.cat(f"{root}/out/errors.jsonl").splitlines()]
    assert [(e["row"], e["reason"]) for e in errors] == [
        (3, f"image file not found: {root}/img/gone-0.jpg"),
        (4, f"image file not found: {root}/img/gone-1.jpg"),
        (5, f"image file not found: gs://{BUCKET}/nowhere/x.jpg")]


class _ReadThrough(shard.WriteSettings):
    """Write settings whose shards read every image through ``read``: the seam
    ``shard.write`` takes its reader from, so the shard decides the reads in flight."""

    def __init__(self, tmp_path, read):
        super().__init__(ledger.RunFolder(str(tmp_path / "out"), "r1"), ("image_uri",))
        object.__setattr__(self, "read", read)

    def reader(self):
        return self.read


def _shard_of(uris):
    rows = [Row(i, "train", uri, {}, (uri,)) for i, uri in enumerate(uris)]
    return ShardTask("train", 0, 1, "d-train.tfrecord-00000-of-00001", rows)


def test_reads_inside_a_shard_overlap(tmp_path):
    # Three reads of gs:// images must be in flight together to pass the barrier; one
    # at a time, the first would wait alone until the barrier breaks and fails the shard.
    barrier, data = threading.Barrier(3, timeout=10), encode()

    def read(uri):
        barrier.wait()
        return data

    uris = [f"gs://b/{i}.jpg" for i in range(6)]
    stats, bad = shard.write(_shard_of(uris), _ReadThrough(tmp_path, read))
    assert (stats.num_examples, bad) == (6, [])


@pytest.mark.slow
def test_local_reads_go_one_at_a_time(tmp_path):
    # Each read holds its slot until a second read arrives (or a short wait ends): were
    # local reads in flight together, a second would arrive while the first waits.
    lock, in_flight, most = threading.Lock(), [0], [0]
    another = threading.Event()
    data = encode()

    def read(uri):
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            if in_flight[0] > 1:
                another.set()
        another.wait(timeout=0.25)
        with lock:
            in_flight[0] -= 1
        return data

    uris = [str(tmp_path / f"{i}.jpg") for i in range(4)]
    stats, bad = shard.write(_shard_of(uris), _ReadThrough(tmp_path, read))
    assert (stats.num_examples, bad) == (4, [])
    assert most[0] == 1


# --- Dataflow, built offline ---------------------------------------------------------

DRY = ["--dry_run=True", "--no_auth"]


def _dataflow(gcs, n_rows, **kw):
    df = pd.DataFrame({"split": "TRAIN",
                       "image_uri": [f"gs://{BUCKET}/photos/{i:07d}.jpg" for i in range(n_rows)],
                       "label": [f"l{i % 7}" for i in range(n_rows)]})
    options = dict(runner="DataflowRunner", project="my-project", region="us-central1",
                   pipeline_options=DRY + ["--worker_machine_type=n1-standard-8",
                                           "--max_num_workers=20",
                                           "--sdk_container_image=gcr.io/my-project/beam:1"])
    options.update(kw)
    return tfrecorder.convert(df, f"gs://{BUCKET}/df-{n_rows}", mode="overwrite", **options)


def _staged(job):
    from apache_beam.portability.api import beam_runner_api_pb2

    names = []
    for env in job.proto_pipeline.components.environments.values():
        for dep in env.dependencies:
            names.append(beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
                dep.role_payload).staged_name)
    return names


@pytest.mark.slow
def test_dataflow_job_does_not_grow_with_the_table_and_stages_the_wheel(gcs, tmp_path,
                                                                       monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def tasks_now():  # task files under the bucket's temporary folder; other tests' too
        return {p for p in gcs.find(f"{BUCKET}/tfrecorder-tmp") if p.endswith(".task")}

    before = tasks_now()
    small, big = _dataflow(gcs, 100), _dataflow(gcs, 100_000)
    # the wheel built for the job and the spilled rows are gone once it is submitted
    assert [n for n in os.listdir(tmp_path) if n.startswith("tfrecorder")] == []
    assert small.job_id is None and big.job_id is None  # dry runs: nothing submitted
    size_small = len(small.job.proto_pipeline.SerializeToString())
    size_big = len(big.job.proto_pipeline.SerializeToString())
    # The graph holds one small number per shard, and nothing per row.
    tasks = tasks_now() - before  # the two jobs' own
    per_folder = collections.Counter(p.rsplit("/", 2)[-2] for p in tasks)
    shards_small, shards_big = sorted(per_folder.values())
    assert (size_big - size_small) <= 10 * (shards_big - shards_small) + 100
    assert size_big < 100_000  # Dataflow's limit: 10 MB
    assert b"photos/0099999.jpg" not in big.job.proto_pipeline.SerializeToString()
    package_version = tfrecorder.__version__
    assert f"tfrecorder_tables-{package_version}-py3-none-any.whl" in _staged(big.job)
    opts = big.job.options.get_all_options()
    assert opts["machine_type"] == "n1-standard-8" and opts["max_num_workers"] == 20
    assert opts["sdk_container_image"] == "gcr.io/my-project/beam:1"
    assert opts["temp_location"].startswith(f"gs://{BUCKET}/tfrecorder-tmp")
    assert tasks  # the rows travel as staged task files, read by the workers


@pytest.mark.slow
def test_a_given_wheel_is_staged_instead(gcs, tmp_path):
    from tfrecorder._writer.wheel import build_wheel

    wheel = build_wheel(str(tmp_path / "mine"))
    renamed = str(tmp_path / "tfrecorder-9.9.9-py3-none-any.whl")
    os.rename(wheel, renamed)
    job = _dataflow(gcs, 10, tfrecorder_wheel=renamed)
    assert "tfrecorder-9.9.9-py3-none-any.whl" in _staged(job.job)


@pytest.mark.slow
def test_the_staged_wheel_installs_and_imports(tmp_path):
    from tfrecorder._writer.wheel import build_wheel

    wheel = build_wheel(str(tmp_path))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
                    "--target", str(target), wheel], check=True)
    code = "import tfrecorder._writer.shard, tfrecorder._folder.records; print(tfrecorder.__file__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(target)}, cwd=str(tmp_path),
                         check=True).stdout
    assert out.startswith(str(target))


@pytest.mark.parametrize("kw,match", [
    ({"project": None}, "needs project="),
    ({"region": None}, "needs region="),
    ({"temp_location": "/tmp/x"}, "temp_location='/tmp/x'"),
])
def test_dataflow_options_are_checked_first(gcs, kw, match):
    with pytest.raises(tfrecorder.ConfigError, match=match):
        _dataflow(gcs, 3, **kw)


def test_dataflow_refuses_local_paths(tmp_path, image_table):
    local = image_table("a.jpg", encode())
    df = pd.DataFrame({"split": ["TRAIN"], "image_uri": [local], "label": ["x"]})
    opts = dict(runner="DataflowRunner", project="my-project", region="us-central1")
    with pytest.raises(tfrecorder.ConfigError, match="writes to gs:// only"):
        tfrecorder.convert(df, str(tmp_path / "out"), **opts)
    with pytest.raises(tfrecorder.ConfigError, match="row 0: " + local):
        tfrecorder.convert(df, f"gs://{BUCKET}/never", **opts)


class _FinishedJob:
    """Stands in for Beam's DataflowPipelineResult of a job that has ended."""

    def __init__(self, state):
        self.state = state
        self.waited = False

    def wait_until_finish(self):
        self.waited = True
        return self.state


@pytest.mark.slow  # a conversion end to end
def test_waiting_for_a_job_gives_the_directrunner_result(tmp_path):
    from tfrecorder._writer.dataflow import console_url
    from tfrecorder._writer.result import DataflowJob

    out = str(tmp_path / "out")
    local = tfrecorder.convert(os.path.join(os.path.dirname(__file__), "..", "samples",
                                            "data.csv"), out)
    url = console_url("my-project", "us-central1", "2026-11-22_01_02_03-123")
    assert url == ("https://console.cloud.google.com/dataflow/jobs/us-central1/"
                   "2026-11-22_01_02_03-123?project=my-project")
    done = _FinishedJob("DONE")
    job = DataflowJob(out, "2026-11-22_01_02_03-123", url, pipeline_result=done)
    assert job["job_id"] == "2026-11-22_01_02_03-123" and job["dataflow_url"] == url
    assert "submitted" in str(job) and url in job._repr_html_()
    result = job.wait()
    assert done.waited and result.job_id == job.job_id and result.runner == "DataflowRunner"
    assert (result.rows_per_split, result.labels) == (local.rows_per_split, local.labels)
    with pytest.raises(tfrecorder.ConversionError, match="ended FAILED"):
        DataflowJob(out, "j", url, pipeline_result=_FinishedJob("FAILED")).wait()
