"""Any Beam runner: the same pipeline on Beam's PortableRunner and its embedded job
service (what Flink and Spark clusters are reached through), and runner names."""

import os

import pytest

import tfrecorder
from tfrecorder import metadata
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
    for name in os.listdir(direct):  # the same bytes as on the DirectRunner
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
