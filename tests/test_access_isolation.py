"""The random-access readers (access, torch, grain) read one conversion, even while
another conversion replaces the directory: a shard already open stays the reader's
conversion; a shard opened after the replacement (in a forked or spawned worker, after
close(), or on gs:// without a shard cache, where nothing stays open; test_cache.py
has the cached case) is an OutputChangedError, never a record
of the other conversion. Local readers meet some replacements made by the test process;
gs:// readers and forked, spawned and torch workers meet ones made by another process."""

import multiprocessing
import os
import pickle
import subprocess
import sys

import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._errors import OutputChangedError
from tests.conftest import BUCKET
from tests.test_load_isolation import _replace_here, _replace_in_another_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tables(two_tables):
    return two_tables


@pytest.fixture
def out(tmp_path, first_of_two):
    """A copy of the first table converted (conftest.py), for the test to replace."""
    import shutil

    out = str(tmp_path / "out")
    shutil.copytree(first_of_two, out)
    return out


def _name(reader, i):
    return reader.features(i)["image_name"].decode()


def _names(reader):
    return [_name(reader, i) for i in range(len(reader))]


def _read_to_the_end(reader, start):
    """The names read from ``start`` on, until the end or an OutputChangedError."""
    names = []
    with pytest.raises(OutputChangedError, match="was written again while it was being read"):
        for i in range(start, len(reader)):
            names.append(_name(reader, i))
    return names


@pytest.mark.slow
def test_a_reader_under_way_reads_its_open_shards_and_refuses_the_others(out, tables):
    reader = access.Reader(out, "train")
    first = [_name(reader, i) for i in range(50)]          # shards 0 and 1 are open
    _replace_here(tables[1], out)
    rest = _read_to_the_end(reader, 50)
    assert all(name.startswith("a") for name in first + rest)
    assert [_name(reader, i) for i in range(50)] == first  # open files: the old conversion
    assert all(name.startswith("b") for name in _names(access.Reader(out, "train")))


@pytest.mark.slow
def test_a_reader_closed_forked_or_unpickled_after_a_replacement_refuses_it(out, tables):
    reader = access.Reader(out, "train")
    names = _names(reader)                                 # every index read, every shard open
    _replace_in_another_process(tables[1], out)
    assert _names(reader) == names                         # its open files are its conversion
    for method in ("fork", "spawn"):
        with multiprocessing.get_context(method).Pool(1) as pool:
            with pytest.raises(OutputChangedError, match="generation"):
                pool.apply(_names, (reader,))
    with pytest.raises(OutputChangedError):
        pickle.loads(pickle.dumps(reader)).record(0)
    reader.close()
    with pytest.raises(OutputChangedError):
        reader.record(0)


@pytest.mark.slow
def test_a_rebuilt_index_is_the_same_conversion(out):
    reader = access.Reader(out, "train", max_open_files=1)
    names = _names(reader)
    tfrecorder.build_index(out)                            # rewrites the manifest, same generation
    assert _names(reader) == names


@pytest.mark.slow
def test_at_most_max_open_files_shards_are_open_under_a_low_limit(tmp_path):
    from tests.conftest import convert_ids

    out = convert_ids(tmp_path / "many", 400, 200)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100)); "
            "from tfrecorder import access; r = access.Reader(sys.argv[1], 'train'); "
            "ids = [r.features(i)['id'] for i in range(len(r))]; "
            "print(sorted(ids) == list(range(400)), len(r._fds))")
    done = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "64"]
    reader = access.Reader(out, "train", max_open_files=3)
    assert sorted(reader.features(i)["id"] for i in range(400)) == list(range(400))
    assert len(reader._fds) == 3
    with pytest.raises(tfrecorder.ConfigError, match="max_open_files=0"):
        access.Reader(out, "train", max_open_files=0)


@pytest.mark.slow
def test_torch_workers_read_one_conversion_through_a_replacement(out, tables, monkeypatch):
    import torch.utils.data

    import tfrecorder.torch

    def names(batch):
        return [n.decode() for n in batch["image_name"]]

    ds = tfrecorder.torch.Dataset(out, "train")
    ds.supervised = False  # whole feature dicts, to see the image names
    ds.image_key = None
    loader = torch.utils.data.DataLoader(ds, batch_size=10, num_workers=2,
                                         collate_fn=lambda items: {
                                             "image_name": [x["image_name"] for x in items]})
    seen = []
    batches = iter(loader)
    with pytest.raises(OutputChangedError):
        for n, batch in enumerate(batches):
            seen += names(batch)
            if n == 4:
                _replace_in_another_process(tables[1], out)
    _stop(batches, monkeypatch)
    assert len(seen) >= 50 and all(name.startswith("a") for name in seen)

    # A dataset read in the main process first, then handed to forked workers.
    again = tfrecorder.torch.Dataset(out, "train")
    labels = [again[i][1] for i in range(len(again))]
    _replace_in_another_process(tables[0], out)
    batches = iter(torch.utils.data.DataLoader(again, batch_size=100, num_workers=2))
    with pytest.raises(OutputChangedError):
        list(batches)
    _stop(batches, monkeypatch)
    assert [again[i][1] for i in range(len(again))] == labels  # still open here


def _stop(batches, monkeypatch):
    """Ends a DataLoader iterator whose worker raised, by PyTorch's own shutdown, which
    waits up to its status interval (5 s) for each worker before it terminates it (a
    plain Dataset that raises shows the same): here the wait is a tenth of a second."""
    from torch.utils.data import _utils

    monkeypatch.setattr(_utils, "MP_STATUS_CHECK_INTERVAL", 0.1)
    batches._shutdown_workers()


@pytest.mark.slow
def test_a_grain_source_sent_to_workers_after_a_replacement_refuses_it(out, tables):
    import tfrecorder.grain

    source = tfrecorder.grain.DataSource(out, "train")
    names = [source[i]["image_name"] for i in range(len(source))]
    _replace_here(tables[1], out)
    assert [source[i]["image_name"] for i in range(len(source))] == names
    copy = pickle.loads(pickle.dumps(source))               # what Grain's workers get
    with pytest.raises(OutputChangedError):
        copy[0]


@pytest.mark.slow
def test_a_gs_reader_returns_no_record_read_after_a_replacement(gcs, tmp_path, tables):
    root = f"gs://{BUCKET}/isolation"
    tfrecorder.convert(tables[0], root, num_shards=8)
    reader = access.Reader(root, "train", cache_limit=0)  # ranged reads (test_cache.py)
    first = [_name(reader, i) for i in range(0, len(reader), 97)]  # indexes read
    assert all(name.startswith("a") for name in first)
    batch = reader.records(range(5))
    assert batch == [reader.record(i) for i in range(5)]
    # From another process: this one's gcsfs would drop its cached listings as it wrote.
    # 8 shards, as the conversion it replaces: each object the emulator stores is a round trip.
    _replace_in_another_process(tables[1], root, shards=8)
    for i in (0, 97, len(reader) - 1):
        with pytest.raises(OutputChangedError, match="generation"):
            reader.record(i)
    with pytest.raises(OutputChangedError):
        reader.records(range(5))
    assert _name(access.Reader(root, "train"), 0).startswith("b")
