"""Any Beam runner: the same pipeline on Beam's PortableRunner and its embedded job
service (what Flink and Spark clusters are reached through), and runner names."""

import os
import re

import pytest

import tfrecorder
from tfrecorder import _metadata as metadata
from tests.conftest import SAMPLES, read_split


@pytest.mark.slow
def test_a_conversion_on_the_portable_runner_completes_and_verifies(tf, tmp_path):
    out = tmp_path / "out"
    result = tfrecorder.convert(
        os.path.join(SAMPLES, "data.csv"), str(out), runner="PortableRunner", num_shards=2,
        pipeline_options=["--job_endpoint=embed", "--environment_type=LOOPBACK"])
    assert result.rows_written == 36 and result.job_id.startswith("portable-")
    assert tfrecorder.verify(str(out)).records == 36
    direct = tmp_path / "direct"
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(direct), num_shards=2)
    files = [p.relative_to(direct) for p in direct.rglob("*") if p.is_file()]
    assert any(p.parts[0] == "index" for p in files)
    for name in files:  # the same bytes as on the DirectRunner, index files included
        assert (out / name).read_bytes() == (direct / name).read_bytes(), name
    assert len(read_split(tf, out, "train")) == 27


@pytest.mark.parametrize("given,expected", [
    ("DirectRunner", "DirectRunner"), ("direct", "DirectRunner"),
    ("DataFlowRunner", "DataflowRunner"), ("flink", "FlinkRunner"),
    ("SparkRunner", "SparkRunner"), ("PortableRunner", "PortableRunner"),
    ("PrismRunner", "PrismRunner"), ("my.module.CustomRunner", "my.module.CustomRunner"),
])
def test_runner_names(given, expected):
    assert tfrecorder.Options(runner=given).runner == expected


def test_an_unknown_runner_is_named_with_a_suggestion():
    with pytest.raises(tfrecorder.ConfigError, match="'FlinkRuner' is not a Beam runner; did "
                                                     "you mean 'FlinkRunner'"):
        tfrecorder.Options(runner="FlinkRuner")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("runner,options,match", [
    ("FlinkRunner", {}, "runner='FlinkRunner' has no cluster given: give flink_master="),
    ("flink", {"flink_master": "127.0.0.1:{port}"},
     "nothing answers at flink_master='127.0.0.1:{port}'"),
    ("SparkRunner", {}, "runner='SparkRunner' has no cluster given: give spark_master_url="),
    ("PortableRunner", {}, "runner='PortableRunner' needs job_endpoint="),
    ("PortableRunner", {"job_endpoint": "127.0.0.1:{port}"},
     "nothing answers at job_endpoint='127.0.0.1:{port}'"),
    ("DaskRunner", {"dask_client_address": "tcp://127.0.0.1:{port}"},
     "nothing answers at dask_client_address='tcp://127.0.0.1:{port}'"),
])
def test_a_runner_that_cannot_start_fails_at_once_and_writes_nothing(tmp_path, runner,
                                                                     options, match):
    port = _closed_port()
    options = {k: v.format(port=port) for k, v in options.items()}
    out = tmp_path / "out"
    with pytest.raises(tfrecorder.ConfigError, match=re.escape(match.format(port=port))):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(out), runner=runner,
                           pipeline_options=options)
    assert not out.exists()  # the output folder untouched


def test_a_local_flink_needs_a_jar_file_given(tmp_path):
    with pytest.raises(tfrecorder.ConfigError, match="flink_job_server_jar='/no/such.jar' "
                                                     "is not a file"):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(tmp_path / "out"),
                           runner="FlinkRunner", pipeline_options=[
                               "--flink_master=[local]", "--flink_job_server_jar=/no/such.jar"])
    assert not (tmp_path / "out").exists()


def test_dask_runner_names():
    for given in ("DaskRunner", "dask", "DASKRUNNER",
                  "apache_beam.runners.dask.dask_runner.DaskRunner"):
        assert tfrecorder.Options(runner=given).runner == "DaskRunner"
