"""tfrecorder.grain.DataSource through Grain's own DataLoader and MapDataset."""

from __future__ import annotations

import io
import os

import grain
import numpy as np
import pytest
from PIL import Image

import tfrecorder
import tfrecorder.grain
from tfrecorder import access
from tests.conftest import SAMPLES, convert_ids, docs_snippets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


N = 21


@pytest.fixture(scope="module")
def table_out(tmp_path_factory):
    return convert_ids(tmp_path_factory.mktemp("grain") / "table", N, 3, value="w")


def test_the_source_meets_grains_protocol(table_out):
    source = tfrecorder.grain.DataSource(table_out, "train")
    assert isinstance(source, grain.sources.RandomAccessDataSource)
    assert len(source) == N
    assert source[4] == access.Reader(table_out, "train").features(4)
    assert repr(source) == f"tfrecorder.grain.DataSource({table_out!r}, 'train', records={N})"


@pytest.mark.slow
def test_grains_dataloader_with_two_worker_processes_reads_every_record_once(table_out):
    source = tfrecorder.grain.DataSource(table_out, "train")
    sampler = grain.samplers.IndexSampler(len(source), shuffle=True, seed=3, num_epochs=1)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=2,
                              operations=[grain.transforms.Batch(4)])
    ids = [int(i) for batch in loader for i in batch["id"]]
    assert sorted(ids) == list(range(N))
    assert ids != sorted(ids)  # shuffled


def test_grain_shards_across_hosts_every_record_once(table_out):
    source = tfrecorder.grain.DataSource(table_out, "train")
    seen = []
    for index in range(3):
        sampler = grain.samplers.IndexSampler(
            len(source), shuffle=True, seed=1, num_epochs=1,
            shard_options=grain.sharding.ShardOptions(index, 3, drop_remainder=False))
        seen += [ex["id"] for ex in grain.DataLoader(data_source=source, sampler=sampler)]
    assert sorted(seen) == list(range(N))


@pytest.mark.slow  # a conversion end to end
def test_map_dataset_decodes_and_batches_the_images(tmp_path):
    out = str(tmp_path / "images")
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), out)
    source = tfrecorder.grain.DataSource(out, "train")

    def decode(ex):
        image = Image.open(io.BytesIO(ex["image"])).convert("RGB").resize((8, 8))
        return {"image": np.asarray(image), "label": ex["label"]}

    ds = grain.MapDataset.source(source).shuffle(seed=0).map(decode).batch(5)
    batches = list(ds)
    assert batches[0]["image"].shape == (5, 8, 8, 3) and batches[0]["image"].dtype == np.uint8
    labels = sorted(int(x) for b in batches for x in b["label"])
    assert labels == sorted(access.Reader(out, "train").features(i)["label"]
                            for i in range(len(source)))


@pytest.mark.slow
def test_the_grain_snippet_in_the_docs_runs(doc_runs):
    # Its run among the page's blocks (tests/test_docs.py): saved as a file and run in a
    # process of its own, as Grain's spawned workers import it again.
    (snippet,) = docs_snippets("loading.md", "JAX and Grain")
    result, folder = doc_runs.block("docs/loading.md", snippet)
    assert result["status"] == "ok", result["error"]
    n = len(tfrecorder.grain.DataSource(os.path.join(folder, "out"), "train"))
    assert result["stdout"].splitlines() == ["(8, 64, 64, 3)", f"{n} records"]
