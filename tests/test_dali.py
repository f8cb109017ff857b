"""NVIDIA DALI reads our shards with our index files, on the CPU alone.

DALI (``pip install nvidia-dali-cuda120``, over 400 MB with its codecs) is not part of
``[test]``; these tests run where it is installed (docs/loading.md says how).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._folder import index, metadata
from tfrecorder._folder import records
from tests.conftest import SAMPLES, docs_snippets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

dali = pytest.importorskip("nvidia.dali")
tfrec = pytest.importorskip("nvidia.dali.tfrecord")


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("dali") / "out")
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), folder, num_shards=3)
    return folder


def index_files(out, split):
    """The index file of each shard of ``split``: the conversion's, or made from a scan
    of the shard where the conversion wrote none."""
    paths = []
    for shard in metadata.read_manifest(out).splits[split].shards:
        path = os.path.join(out, index.name(shard.file))
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(os.path.join(out, shard.file), "rb") as f:
                text = index.format(records.scan(f))
            with open(path, "wb") as f:
                f.write(text)
        paths.append(path)
    return paths


def _read_with_dali(out, split, batch_size=4, **reader_args):
    from nvidia.dali import fn, pipeline_def

    reader = access.Reader(out, split)

    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None)
    def pipeline():
        ex = fn.readers.tfrecord(
            path=reader.files, index_path=index_files(out, split),
            features={"image": tfrec.FixedLenFeature((), tfrec.string, ""),
                      "image_name": tfrec.FixedLenFeature((), tfrec.string, ""),
                      "label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
            name="reader", **reader_args)
        return ex["image"], ex["image_name"], ex["label"]

    pipe = pipeline()
    pipe.build()
    # DALI's shard k of n holds the records [total * k // n, total * (k + 1) // n).
    size = len(access.part(len(reader), reader_args.get("shard_id", 0),
                           reader_args.get("num_shards", 1)))
    got = []
    while len(got) < size:
        images, names, labels = pipe.run()
        for i in range(len(images)):
            got.append((np.array(images.at(i)).tobytes(), np.array(names.at(i)).tobytes(),
                        int(np.array(labels.at(i))[0])))
    return reader, pipe.reader_meta("reader")["epoch_size"], got[:size]


def test_dali_reads_every_record_as_our_reader_does(out):
    reader, epoch_size, got = _read_with_dali(out, "train", random_shuffle=False)
    assert epoch_size == len(reader)
    expected = [(f["image"], f["image_name"], f["label"])
                for f in map(reader.features, range(len(reader)))]
    assert got == expected


def test_dali_shards_with_our_index_files_cover_the_split(out):
    reader = access.Reader(out, "train")
    names = []
    for shard_id in range(2):
        _, _, got = _read_with_dali(out, "train", random_shuffle=True, seed=5,
                                    shard_id=shard_id, num_shards=2, pad_last_batch=False,
                                    batch_size=1)
        names += [name for _, name, _ in got]
    assert sorted(names) == sorted(reader.features(i)["image_name"] for i in range(len(reader)))


def test_our_index_files_are_byte_for_byte_dalis_tfrecord2idx(out, tmp_path, monkeypatch):
    import runpy

    script = next((p for p in (Path(dali.__file__).parents[2] / "bin" / "tfrecord2idx",
                               Path(sys.executable).parent / "tfrecord2idx")
                   if p.exists()), None) or shutil.which("tfrecord2idx")
    if script is None:
        pytest.skip("DALI's tfrecord2idx script is not installed beside it")
    for shard, ours in zip(access.Reader(out, "validation").files, index_files(out, "validation")):
        theirs = tmp_path / "dali.idx"
        # The script as `tfrecord2idx SHARD INDEX` runs it, in this process (it imports
        # TensorFlow, which a new process would import again for each shard).
        monkeypatch.setattr(sys, "argv", [str(script), shard, str(theirs)])
        runpy.run_path(str(script), run_name="__main__")
        assert theirs.read_bytes() == Path(ours).read_bytes()


@pytest.mark.slow
def test_the_dali_snippet_in_the_docs_runs(doc_runs):
    # Its run among the page's blocks (tests/test_docs.py), after those that convert the
    # samples into out/.
    (snippet,) = docs_snippets("loading.md", "NVIDIA DALI")
    result, _ = doc_runs.block("docs/loading.md", snippet)
    assert result["status"] == "ok", result["error"]
    assert result["stdout"].splitlines() == ["(8, 64, 64, 3)"]
