"""The shard cache under every random-access reader of gs:// (tfrecorder._readers.cache): one
fetch per shard per machine, bounded, never stale, never half, never anything not its own.

Fetches are counted by the requests a logging proxy (bench/latency_proxy.py, no delay)
forwards to the GCS emulator: every process of a test, DataLoader workers included,
reaches the emulator through it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import warnings

import numpy as np
import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._readers import cache as _cache
from tfrecorder._errors import ConfigError, CorruptRecordError, OutputChangedError
from tests.conftest import BUCKET, convert_ids, emulator_behind

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 40


def _proxy_module():
    spec = importlib.util.spec_from_file_location(
        "latency_proxy", os.path.join(ROOT, "bench", "latency_proxy.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def requests(gcs):
    """The requests of every process of this module's tests to the emulator, logged."""
    log: list = []
    with emulator_behind(lambda upstream, port: _proxy_module().serve(upstream, port, 0, log)):
        yield log


def fetches(log, since: int = 0) -> dict[str, int]:
    return _proxy_module().shard_fetches(log, since)


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A tabular conversion of N records with distinct ids, in 4 shards."""
    return convert_ids(tmp_path_factory.mktemp("cache") / "out", N, 4)


@pytest.fixture(scope="module")
def remote(gcs, local, requests):
    root = f"gs://{BUCKET}/cache-ids"
    gcs.put(local, root, recursive=True)
    return root


def ids(reader, order=None) -> list[int]:
    order = range(len(reader)) if order is None else order
    return [int(access.values(r, reader.manifest.features)["id"])
            for r in reader.records(order)]


def entries(cache_dir) -> list[str]:
    folder = os.path.join(str(cache_dir), _cache.SHARDS)
    return sorted(n for n in os.listdir(folder) if n.endswith(".shard"))


@pytest.mark.slow
def test_each_shard_is_fetched_once_then_read_from_local_disk(remote, local, requests,
                                                              tmp_path):
    before = len(requests)
    reader = access.Reader(remote, "train", cache_dir=tmp_path)
    order = access.permutation(len(reader), seed=0, epoch=0)
    assert ids(reader, order) == ids(access.Reader(local, "train"), order)
    assert sorted(ids(reader)) == list(range(N))
    got = fetches(requests, before)
    assert sorted(got) == sorted(s.file for s in reader.shards) and set(got.values()) == {1}
    assert len(entries(tmp_path)) == 4
    # A second reader (another epoch, another job) on the same machine fetches nothing.
    before = len(requests)
    again = access.Reader(remote, "train", cache_dir=tmp_path)
    assert sorted(ids(again)) == list(range(N))
    assert fetches(requests, before) == {}


def test_a_local_folder_is_read_in_place_never_copied_nor_removed(local, tmp_path):
    before = {p: os.path.getmtime(os.path.join(local, p)) for p in os.listdir(local)}
    reader = access.Reader(local, "train", cache_dir=tmp_path / "c", cache_limit=1)
    assert reader.cache is None
    assert sorted(ids(reader)) == list(range(N))
    assert not (tmp_path / "c").exists()
    assert {p: os.path.getmtime(os.path.join(local, p)) for p in os.listdir(local)} == before


@pytest.mark.slow
def test_cache_limit_zero_reads_by_ranged_requests(remote, tmp_path):
    reader = access.Reader(remote, "train", cache_dir=tmp_path, cache_limit=0)
    assert reader.cache is None
    assert sorted(ids(reader)) == list(range(N))
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("given, expected", [
    (None, None), (0, 0), (123, 123), ("10GB", 10**10), ("512MiB", 512 << 20),
    ("1.5 gb", 1_500_000_000), (np.int64(7), 7)])
def test_cache_limit_is_bytes_or_a_size_with_its_unit(given, expected):
    assert _cache.parse_limit(given) == expected


@pytest.mark.parametrize("given", [-1, "10 parsecs", "GB", True, 1.5, float("nan"),
                                   float("inf"), "0.5", "1.5", np.float64("nan")])
def test_a_cache_limit_that_is_no_size_is_refused_naming_it(given):
    with pytest.raises(ConfigError, match="cache_limit=.*give bytes"):
        _cache.parse_limit(given)


def test_the_default_folder_is_tfrecorder_cache_or_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TFRECORDER_CACHE", str(tmp_path / "here"))
    assert _cache.default_dir() == str(tmp_path / "here")
    monkeypatch.delenv("TFRECORDER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.default_dir() == str(tmp_path / "xdg" / "tfrecorder")
    cache = _cache.for_source("gs://b/out")
    assert cache.root == str(tmp_path / "xdg" / "tfrecorder")
    free = shutil.disk_usage(tmp_path).free
    assert cache.limit == min(_cache.DEFAULT_LIMIT, int(free * _cache.DEFAULT_FREE_FRACTION)) \
        or abs(cache.limit - free // 2) < free // 100  # the disk's free space moves


@pytest.mark.slow
def test_eviction_keeps_the_cache_within_its_limit_and_spares_shards_being_read(
        remote, tmp_path):
    size = max(s.num_bytes for s in access.Reader(remote, "train").shards)
    limit = 2 * size + size // 2  # two shards and a half
    reading = access.Reader(remote, "train", cache_dir=tmp_path, cache_limit=limit)
    reading.read_ahead = 0
    held = reading._pin_entry(0)  # shard 0, being read (as during a batch)
    pinned = entries(tmp_path)
    assert len(pinned) == 1
    other = access.Reader(remote, "train", cache_dir=tmp_path, cache_limit=limit)
    other.read_ahead = 0
    for shard in range(1, 4):  # shard by shard
        ids(other, range(other.view.starts[shard], other.view.starts[shard + 1]))
        # The limit, plus the shard being read (`held`) and the one `other` keeps
        # pinned between its reads: nothing else.
        assert reading.cache.held() <= limit + 2 * size
        assert set(pinned) <= set(entries(tmp_path))  # never evicted while open
    held.close()
    ids(reading, [reading.view.starts[1]])  # shard 1 again: fetched, the others gone
    assert reading.cache.held() <= limit and len(entries(tmp_path)) == 2
    assert sorted(ids(reading)) == list(range(N))


def _peak_held(cache, done):
    """The most bytes ``cache`` held at any look, looking until ``done`` is set."""
    peak = 0
    while not done.is_set():
        peak = max(peak, cache.held())
        done.wait(0.001)
    return max(peak, cache.held())


@pytest.fixture(scope="module")
def twelve(gcs, tmp_path_factory, requests):
    """48 records in 12 shards on the emulator."""
    root = f"gs://{BUCKET}/cache-twelve"
    gcs.put(convert_ids(tmp_path_factory.mktemp("twelve") / "out", 48, 12), root,
            recursive=True)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("order", ["global", "shards"])
def test_the_limit_holds_under_any_order_with_workers(twelve, tmp_path, order):
    import threading

    import torch
    from torch.utils.data import DataLoader

    import tfrecorder.torch

    size = max(s.num_bytes for s in access.Reader(twelve, "train").shards)
    limit = 4 * size  # a third of the split
    ds = tfrecorder.torch.Dataset(twelve, "train", cache_dir=tmp_path, cache_limit=limit)
    sampler = (tfrecorder.torch.Sampler(ds, seed=0) if order == "global" else
               tfrecorder.torch.Sampler(ds, seed=0, order="shards"))
    loader = DataLoader(ds, batch_size=4, num_workers=2, sampler=sampler,
                        multiprocessing_context="fork")
    done = threading.Event()
    peak = []
    watcher = threading.Thread(target=lambda: peak.append(_peak_held(ds.reader.cache, done)))
    watcher.start()
    try:
        got = torch.cat([b["id"] for b in loader]).tolist()
    finally:
        done.set()
        watcher.join()
    assert sorted(got) == list(range(48))
    # The limit, plus the one shard each worker pins at a time (a batch is read one
    # shard at a time; the one kept between batches is let go before another is pinned).
    assert peak[0] <= limit + 2 * size, (peak[0], limit, size)
    assert ds.reader.cache.held() <= limit


@pytest.mark.slow
def test_a_folder_converted_again_is_never_served_from_the_old_entries(
        gcs, tmp_path, local, requests):
    root = f"gs://{BUCKET}/cache-again"
    gcs.put(local, root, recursive=True)
    old = access.Reader(root, "train", cache_dir=tmp_path / "c")
    assert sorted(ids(old)) == list(range(N))
    partial = access.Reader(root, "train", cache_dir=tmp_path / "p")
    partial.read_ahead = 0  # the shards it reads, no others
    ids(partial, [0])  # its first shard only
    again = convert_ids(tmp_path / "again", N, 4, value="y")  # other records, same names
    gcs.rm(root, recursive=True)
    gcs.put(again, root, recursive=True)
    # A shard it has is its conversion's; one it must fetch now would not be.
    assert "x" in access.values(partial.record(1), partial.manifest.features)
    with pytest.raises(OutputChangedError, match="generation"):
        partial.record(N - 1)
    assert entries(tmp_path / "p") == entries(tmp_path / "p")[:1]
    new = access.Reader(root, "train", cache_dir=tmp_path / "c")
    assert set(new.manifest.features) == {"id", "y"}
    assert all("y" in access.values(r, new.manifest.features) for r in new.records(range(N)))
    assert len(entries(tmp_path / "c")) == 8  # the old ones stay until evicted
    # The old reader still reads its own conversion from the entries it holds open.
    assert all("x" in access.values(r, old.manifest.features) for r in old.records(range(N)))


@pytest.mark.slow
def test_a_damaged_entry_is_fetched_again_not_served(remote, tmp_path, requests):
    reader = access.Reader(remote, "train", cache_dir=tmp_path)
    expected = reader.records(range(N))
    reader.close()
    names = entries(tmp_path)
    path = os.path.join(tmp_path, _cache.SHARDS, names[0])
    with open(path, "r+b") as f:  # a flipped byte in the last record's data
        f.seek(os.path.getsize(path) - 6)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open(os.path.join(tmp_path, _cache.SHARDS, names[1]), "r+b") as f:
        f.truncate(10)  # cut short
    before = len(requests)
    again = access.Reader(remote, "train", cache_dir=tmp_path)
    assert again.records(range(N)) == expected
    assert sum(fetches(requests, before).values()) == 2


@pytest.mark.slow
def test_a_shard_damaged_in_the_bucket_is_an_error_after_one_more_fetch(
        gcs, local, tmp_path):
    root = f"gs://{BUCKET}/cache-damaged"
    gcs.put(local, root, recursive=True)
    reader = access.Reader(root, "train", cache_dir=tmp_path)
    shard = reader.shards[0].file
    data = bytearray(gcs.cat_file(f"{root}/{shard}"))
    data[-6] ^= 0xFF
    gcs.pipe_file(f"{root}/{shard}", bytes(data))
    last = reader.view.starts[1] - 1
    with pytest.raises(CorruptRecordError, match=f"{shard}, record at byte .*fetched again.*"
                                                 f"bad data checksum"):
        reader.record(last)


_KILLED_FETCH = """
import os, signal, sys
from tfrecorder import access
reader = access.Reader(sys.argv[1], "train", cache_dir=sys.argv[2])
reader._check_generation = lambda shard: os.kill(os.getpid(), signal.SIGKILL)
reader.record(0)
"""


@pytest.mark.slow
def test_a_fetch_killed_before_its_end_leaves_nothing_served(remote, tmp_path):
    # Killed at the worst moment: every byte written, the entry not yet renamed.
    done = subprocess.run([sys.executable, "-c", _KILLED_FETCH, remote, str(tmp_path)],
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True)
    assert done.returncode == -9, done.stderr[-2000:]
    folder = os.path.join(tmp_path, _cache.SHARDS)
    left = [n for n in os.listdir(folder) if ".shard" in n]
    assert len(left) == 1 and ".shard.tmp-" in left[0]
    reader = access.Reader(remote, "train", cache_dir=tmp_path)
    assert sorted(ids(reader)) == list(range(N))
    assert not [n for n in os.listdir(folder) if ".tmp-" in n]  # cleared by the next fetch


@pytest.mark.slow  # a conversion end to end
def test_nothing_but_its_own_files_is_ever_removed(remote, tmp_path):
    size = max(s.num_bytes for s in access.Reader(remote, "train").shards)
    folder = tmp_path / _cache.SHARDS
    folder.mkdir()
    theirs = [tmp_path / "notes.txt", folder / "notes.txt",
              folder / ("0" * 32 + ".shard.bak"), folder / ("f" * 31 + ".shard")]
    for p in theirs:
        p.write_bytes(b"x" * size)
    reader = access.Reader(remote, "train", cache_dir=tmp_path, cache_limit=size)
    assert sorted(ids(reader)) == list(range(N))
    assert all(p.read_bytes() == b"x" * size for p in theirs)


_READ_ALL = """
import sys
from tfrecorder import access
reader = access.Reader(sys.argv[1], "train", cache_dir=sys.argv[2])
print(sorted(int(access.values(r, reader.manifest.features)["id"])
             for r in reader.records(range(len(reader)))) == list(range(int(sys.argv[3]))))
"""


@pytest.mark.slow
def test_two_processes_reading_at_once_fetch_each_shard_once(remote, tmp_path, requests):
    before = len(requests)
    env = {**os.environ, "PYTHONPATH": ROOT}
    procs = [subprocess.Popen([sys.executable, "-c", _READ_ALL, remote, str(tmp_path), str(N)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [o.strip() for o, _ in outs] == ["True", "True"], [e[-2000:] for _, e in outs]
    got = fetches(requests, before)
    assert len(got) == 4 and set(got.values()) == {1}


@pytest.mark.slow
def test_dataloader_workers_share_one_cache(remote, tmp_path, requests):
    import torch
    from torch.utils.data import DataLoader

    import tfrecorder.torch

    before = len(requests)
    ds = tfrecorder.torch.Dataset(remote, "train", cache_dir=tmp_path, cache_limit="1GB")
    assert ds.reader.cache.limit == 10**9
    loader = DataLoader(ds, batch_size=4, num_workers=2,
                        sampler=tfrecorder.torch.Sampler(ds, seed=1),
                        multiprocessing_context="fork")
    assert sorted(torch.cat([b["id"] for b in loader]).tolist()) == list(range(N))
    got = fetches(requests, before)
    assert len(got) == 4 and set(got.values()) == {1}
    assert len(entries(tmp_path)) == 4


def manifest_reads(log, since: int = 0) -> int:
    """GETs of a manifest's bytes (``tfrecorder.json``, ``versions/KKKKK.json``)."""
    return sum(1 for method, path, _ in log[since:]
               if method == "GET" and "alt=media" in path
               and urllib.parse.unquote(path.split("?")[0]).endswith(".json"))


def test_a_copy_of_a_reader_checks_the_manifest_without_reading_it_again(
        remote, tmp_path, requests):
    import pickle

    reader = access.Reader(remote, "train", cache_dir=tmp_path)
    before = len(requests)
    copy = pickle.loads(pickle.dumps(reader))  # what a spawned worker or Grain gets
    assert sorted(ids(copy)) == list(range(N))
    # Each fetch looked at the manifest's object (is it still ours?), none read it:
    # the copy holds the stamp its original took when it found the manifest its own.
    assert len(fetches(requests, before)) == 4 and manifest_reads(requests, before) == 0
    assert any(".json" in urllib.parse.unquote(p) for _, p, _ in requests[before:])


def test_opening_a_reader_reads_each_manifest_once_and_looks_for_none(
        remote, tmp_path, requests):
    before = len(requests)
    access.Reader(remote, "train", cache_dir=tmp_path)
    names = [urllib.parse.unquote(p.split("?")[0]).split("/cache-ids/", 1)[-1]
             + ("" if "alt=media" in p else " (looked at)") for _, p, _ in requests[before:]]
    first_index = next(i for i, n in enumerate(names) if n.startswith("index/"))
    # One round trip each, one after the other: no look for the version's manifest
    # before reading it, no second read of it to compare its generation with itself.
    assert names[:first_index] == ["tfrecorder.json", "versions/00001.json"], names


def test_a_grain_source_reads_through_the_cache(remote, tmp_path):
    import pickle

    import tfrecorder.grain

    source = tfrecorder.grain.DataSource(remote, "train", cache_dir=tmp_path, cache_limit=10**6)
    copy = pickle.loads(pickle.dumps(source))  # what a Grain worker gets
    assert sorted(int(copy[i]["id"]) for i in range(len(copy))) == list(range(N))
    assert copy.reader.cache.root == str(tmp_path) and len(entries(tmp_path)) == 4


@pytest.mark.slow
def test_load_global_shuffle_reads_gs_through_the_cache(tf, remote, local, tmp_path):
    def read(folder, **kw):
        ds = tfrecorder.load(folder, "train", shuffle="global", seed=3, **kw)
        return [int(ex["id"]) for ex in ds.as_numpy_iterator()]

    cached = read(remote, cache_dir=tmp_path)
    assert cached == read(local) and sorted(cached) == list(range(N))
    assert len(entries(tmp_path)) == 4


def test_the_streaming_order_reads_every_record_once_a_few_shards_at_a_time():
    counts = [10, 7, 0, 12, 9, 10]
    starts = np.concatenate([[0], np.cumsum(counts)])
    order = access.shard_order(counts, seed=4, epoch=2, window=2)
    assert sorted(order.tolist()) == list(range(sum(counts)))
    assert order.tolist() == access.shard_order(counts, 4, 2, 2).tolist()
    assert order.tolist() != access.shard_order(counts, 4, 3, 2).tolist()
    shard_of = np.searchsorted(starts, order, side="right") - 1
    shards = access.permutation(len(counts), 4, 2).tolist()
    at = 0
    for k in range(0, len(counts), 2):  # window by window, in the shards' shuffled order
        window = shards[k:k + 2]
        n = sum(counts[s] for s in window)
        assert set(shard_of[at:at + n].tolist()) == {s for s in window if counts[s]}
        at += n
    parts = [access.part(order, r, 3).tolist() for r in range(3)]
    assert sorted(sum(parts, [])) == list(range(sum(counts)))
    with pytest.raises(ConfigError, match="window=0"):
        access.shard_order(counts, 0, 0, window=0)


def test_the_sampler_orders_by_shards_and_resumes_in_the_epoch(local):
    import tfrecorder.torch

    ds = tfrecorder.torch.Dataset(local, "train")
    sampler = tfrecorder.torch.Sampler(ds, seed=3, order="shards", window=1)
    sampler.set_epoch(5)
    whole = list(sampler)
    assert whole == access.shard_order(ds.reader.view.counts, 3, 5, 1).tolist()
    sampler.set_epoch(5, start=13)
    assert list(sampler) == whole[13:] and len(sampler) == N - 13
    ranks = [tfrecorder.torch.Sampler(ds, seed=3, order="shards", rank=r, world_size=2)
             for r in range(2)]
    assert sorted(list(ranks[0]) + list(ranks[1])) == list(range(N))
    with pytest.raises(ConfigError, match="order='shards' needs a tfrecorder.torch.Dataset"):
        tfrecorder.torch.Sampler(list(range(5)), order="shards")
    with pytest.raises(ConfigError, match="order='random'"):
        tfrecorder.torch.Sampler(ds, order="random")


@pytest.mark.slow
def test_the_sampler_chooses_a_window_whose_two_fit_in_the_cache_limit(remote, tmp_path):
    import tfrecorder.torch

    size = max(s.num_bytes for s in access.Reader(remote, "train").shards)

    def sampler(limit, **kw):
        ds = tfrecorder.torch.Dataset(remote, "train", cache_dir=tmp_path, cache_limit=limit)
        return tfrecorder.torch.Sampler(ds, seed=2, order="shards", **kw)

    # Two windows (the one read, the next one the batches in flight reach) in the limit.
    assert [sampler(int(k * size)).window for k in (1, 2.5, 4, 6, 100)] == [1, 1, 2, 3, 4]
    assert sampler(None).window == access.WINDOW  # the default limit: it hangs on the disk
    chosen = sampler(int(4 * size))
    chosen.set_epoch(3, start=5)  # reproducible from (seed, epoch, start) and the window
    counts = chosen._reader.view.counts
    assert list(chosen) == access.shard_order(counts, 2, 3, 2).tolist()[5:]
    with pytest.warns(UserWarning, match=r"window=4\) with cache_limit=.*leave window out "
                                         r"\(it is then 1\)"):
        assert sampler(int(2.5 * size), window=4).window == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler(int(8 * size), window=4)  # two windows fit: nothing to say


@pytest.mark.slow
def test_a_cache_of_a_third_of_the_split_streams_each_shard_once_an_epoch(
        remote, tmp_path, requests):
    import torch
    from torch.utils.data import DataLoader

    import tfrecorder.torch

    size = max(s.num_bytes for s in access.Reader(remote, "train").shards)
    # Of 4 shards: those the two workers read (their batches in flight may straddle two
    # shards) and the next one, fetched ahead.
    limit = int(2.5 * size)
    ds = tfrecorder.torch.Dataset(remote, "train", cache_dir=tmp_path, cache_limit=limit)
    sampler = tfrecorder.torch.Sampler(ds, seed=0, order="shards")  # the window it holds
    assert sampler.window == 1
    loader = DataLoader(ds, batch_size=4, num_workers=2, sampler=sampler,
                        multiprocessing_context="fork")
    for epoch in range(2):
        before = len(requests)
        sampler.set_epoch(epoch)
        got = torch.cat([b["id"] for b in loader]).tolist()
        assert sorted(got) == list(range(N))
        fetched = fetches(requests, before)
        # Each shard at most once; after the first epoch, those left cached not at all.
        assert set(fetched.values()) == {1} and len(fetched) == (4 if epoch == 0 else
                                                                  len(fetched)), fetched
        # Within the limit at each fetch but for the shards then read (each worker's).
        assert ds.reader.cache.held() <= limit + 2 * size


def _fetched_ahead(reader, shards, seconds=60.0):
    """Whether ``shards`` are whole in ``reader``'s cache once its read-ahead thread has
    nothing left to fetch (waited for, not timed)."""
    deadline = time.monotonic() + seconds
    while reader._fetcher is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    # an entry has its name once whole (fetched under a temporary one)
    return [os.path.exists(reader.cache._path(reader._cache_key(s), "shard")) for s in shards]


@pytest.mark.slow
def test_reading_in_file_order_fetches_the_next_shards_ahead(remote, tmp_path, requests):
    reader = access.Reader(remote, "train", cache_dir=tmp_path)
    assert reader.read_ahead == access.READ_AHEAD == 2
    before = len(requests)
    ids(reader, [0])  # a record of shard 0: shards 1 and 2 fetched meanwhile, not 3
    assert _fetched_ahead(reader, range(4)) == [True, True, True, False]
    assert sorted(fetches(requests, before).values()) == [1, 1, 1]
    # Reading them fetches nothing more; shard 3 comes ahead of shard 2's reading.
    before = len(requests)
    ids(reader, range(reader.view.starts[1], reader.view.starts[3]))
    assert _fetched_ahead(reader, [3]) == [True]
    assert list(fetches(requests, before).values()) == [1]
    assert sorted(ids(reader)) == list(range(N))
    # A reader that asks for none fetches only what it reads.
    other = access.Reader(remote, "train", cache_dir=tmp_path / "none")
    other.read_ahead = 0
    ids(other, [0])
    assert len(entries(tmp_path / "none")) == 1


@pytest.mark.slow
def test_reading_ahead_leaves_a_shard_another_is_fetching_to_it(remote, tmp_path, requests):
    import fcntl

    reader = access.Reader(remote, "train", cache_dir=tmp_path)
    reader.read_ahead = 0
    key = reader._cache_key(1)
    reader.cache._makedirs()
    held = _cache._lock(reader.cache._path(key, "fetch"), fcntl.LOCK_EX)  # another's fetch
    before = len(requests)
    try:
        assert reader.prefetch(1, wait=False) is True  # left to it: no wait, no request
        assert fetches(requests, before) == {} and not reader.cache.holds(key)
    finally:
        os.close(held)
    assert reader.prefetch(1, wait=False) and reader.cache.holds(key)
    assert list(fetches(requests, before).values()) == [1]


def test_a_wrong_size_in_the_manifest_is_refused_before_room_is_made(tmp_path):
    cache = _cache.Cache(str(tmp_path / "c"), limit=1000)
    other = tmp_path / "other"
    other.write_bytes(b"o" * 600)
    cache.fetch("a" * 32, str(other), 600, lambda: None)  # another dataset's entry
    shard = tmp_path / "shard"
    shard.write_bytes(b"s" * 2500)
    with pytest.raises(CorruptRecordError, match=f"{shard}: the object is 2500 bytes "
                                                 f"where its manifest gives {16 << 30}"):
        cache.fetch("b" * 32, str(shard), 16 << 30, lambda: None)
    assert entries(tmp_path / "c") == ["a" * 32 + ".shard"]  # nothing evicted, nothing made
    assert not [n for n in os.listdir(tmp_path / "c" / _cache.SHARDS) if ".tmp-" in n]


@pytest.fixture
def small_disk(tmp_path):
    """A folder on a file system of 64 KiB (tmpfs; mounting it takes root)."""
    at = tmp_path / "small"
    at.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(at)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"a small file system cannot be mounted here: {done.stderr.strip()}")
    try:
        yield at
    finally:
        subprocess.run(["umount", str(at)], check=True)


def test_a_full_cache_disk_is_said_and_nothing_half_written_is_kept(small_disk, tmp_path):
    shard = tmp_path / "shard"
    shard.write_bytes(os.urandom(200_000))
    cache = _cache.Cache(str(small_disk), limit=10**9)  # a limit the disk cannot hold
    with pytest.raises(ConfigError, match=f"the cache's disk is full: cache_dir="
                                          f"'{small_disk}' cannot hold {shard}.*cache_limit"):
        cache.fetch("a" * 32, str(shard), 200_000, lambda: None)
    left = os.listdir(small_disk / _cache.SHARDS)
    assert not [n for n in left if ".shard" in n], left  # no entry, no temporary file


_FILE_SIZE_LIMIT = """
import resource, sys
from tfrecorder._readers import cache as _cache
from tfrecorder._errors import ConfigError
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
try:
    _cache.Cache(sys.argv[1], limit=10**9).fetch("a" * 32, sys.argv[2], 200_000, lambda: None)
except ConfigError as e:
    print("ConfigError:", e)
"""


@pytest.mark.slow  # a Python process of its own
def test_a_file_size_limit_is_said_as_a_full_disk(tmp_path):
    shard = tmp_path / "shard"
    shard.write_bytes(os.urandom(200_000))
    done = subprocess.run([sys.executable, "-c", _FILE_SIZE_LIMIT, str(tmp_path / "c"),
                           str(shard)], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.stdout.startswith("ConfigError: the cache's disk is full"), done.stderr
    assert not [n for n in os.listdir(tmp_path / "c" / _cache.SHARDS) if ".shard" in n]


def test_a_process_forked_during_a_fetch_holds_none_of_the_caches_locks(tmp_path):
    import threading

    src = tmp_path / "shard"
    src.write_bytes(b"s" * 5000)
    cache = _cache.Cache(str(tmp_path / "c"), limit=10**6)
    read = cache.pin("b" * 32, str(src), 5000, lambda: None)  # an entry being read
    fetching, go = threading.Event(), threading.Event()

    def verify():  # the fetch, in another thread, holds its lock here
        fetching.set()
        assert go.wait(60)

    thread = threading.Thread(target=cache.fetch, args=("a" * 32, str(src), 5000, verify))
    thread.start()
    assert fetching.wait(60)
    r, w = os.pipe()
    started_r, started_w = os.pipe()
    pid = os.fork()  # a DataLoader worker, forked now
    if pid == 0:
        os.close(w)
        os.write(started_w, b"s")  # its fork handlers have run
        os.read(r, 1)  # alive until the parent is done
        os._exit(0)
    os.close(r)
    os.close(started_w)
    try:
        assert os.read(started_r, 1) == b"s"
        os.close(started_r)
        go.set()
        thread.join()
        read.close()
        # The child lives on: neither entry is pinned nor being fetched any more.
        assert _cache._free(cache._path("a" * 32, "fetch"))
        assert cache._evict("a" * 32) and cache._evict("b" * 32)
    finally:
        os.close(w)
        assert os.waitpid(pid, 0)[1] == 0


@pytest.fixture(scope="module")
def updated(gcs, tmp_path_factory, requests):
    """A conversion of N records in 4 shards, then an update of one row: version 2 keeps
    the 4 shards (one with a record retired) and adds one; on the emulator."""
    import pandas as pd

    out = convert_ids(tmp_path_factory.mktemp("updated") / "out", N, 4)
    table = pd.DataFrame({"split": ["TRAIN"] * N, "id": range(N), "x": [i / 4 for i in range(N)]})
    table.loc[3, "x"] = 99.0
    schema = tfrecorder.input_schema.Schema({
        "split": tfrecorder.types.SplitKey, "id": tfrecorder.types.IntegerInput,
        "x": tfrecorder.types.FloatInput})
    tfrecorder.convert(table, out, schema=schema, mode="update")
    root = f"gs://{BUCKET}/cache-updated"
    gcs.put(out, root, recursive=True)
    return root


@pytest.mark.slow
def test_the_versions_of_an_update_share_the_entries_of_the_shards_they_keep(
        updated, tmp_path, requests):
    first = access.Reader(updated, "train", version=1, cache_dir=tmp_path)
    assert sorted(ids(first)) == list(range(N))
    before = len(requests)
    second = access.Reader(updated, "train", cache_dir=tmp_path)
    assert second.version == 2 and sorted(ids(second)) == list(range(N))
    new = [s.file for s in second.shards if s.file not in {t.file for t in first.shards}]
    assert list(fetches(requests, before)) == new and len(new) == 1  # the new shard only
    assert len(entries(tmp_path)) == 5  # one copy of each shard
    assert 99.0 in [access.values(r, second.manifest.features)["x"]
                    for r in second.records(range(N))]


@pytest.mark.slow
def test_a_kept_shard_whose_writers_manifest_is_gone_is_fetched_for_the_version_read(
        updated, gcs, tmp_path, requests):
    root = f"gs://{BUCKET}/cache-vacuumed"
    gcs.copy(updated, root, recursive=True)
    gcs.rm(f"{root}/versions/00001.json")
    reader = access.Reader(root, "train", cache_dir=tmp_path)
    assert sorted(ids(reader)) == list(range(N))
    assert len(entries(tmp_path)) == 5


@pytest.mark.slow
def test_read_and_a_folders_read_use_the_cache_settings_given(remote, tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORDER_CACHE", str(tmp_path / "default"))
    frame = tfrecorder.open(remote, cache_dir=tmp_path / "given", cache_limit=0).read()
    assert sorted(frame["id"]) == list(range(N))
    assert not (tmp_path / "default").exists() and not (tmp_path / "given").exists()
    assert sorted(tfrecorder.read(remote, cache_dir=tmp_path / "given")["id"]) == list(range(N))
    assert len(entries(tmp_path / "given")) == 4 and not (tmp_path / "default").exists()
    with pytest.raises(ConfigError, match="cache_limit='lots'"):
        tfrecorder.read(remote, cache_limit="lots")



@pytest.mark.parametrize("in_the_way, kept, refused", [
    ("cache_dir", None, "cache_dir=.* is a file, not a folder"),
    ("a" * 32 + ".shard", None, None),  # an empty folder: repaired
    ("a" * 32 + ".lock", None, None),
    ("a" * 32 + ".shard", "mine.txt", "aaaa.shard is a folder where .* remove that folder"),
    ("a" * 32 + ".fetch", "mine.txt", "aaaa.fetch is a folder where .* remove that folder"),
])
def test_a_cache_folder_in_the_way_is_repaired_or_refused_naming_it(tmp_path, in_the_way,
                                                                    kept, refused):
    root = tmp_path / "c"
    if in_the_way == "cache_dir":
        root.write_text("not a folder")
    else:
        (root / _cache.SHARDS / in_the_way).mkdir(parents=True)
        if kept:
            (root / _cache.SHARDS / in_the_way / kept).write_text("someone's")
    src = tmp_path / "shard"
    src.write_bytes(b"s" * 500)

    def pin():
        cache = _cache.for_source(f"gs://{BUCKET}/x", cache_dir=root)
        return cache.pin("a" * 32, str(src), 500, lambda: None)

    if refused is None:
        entry = pin()
        assert os.pread(entry.fd, 500, 0) == b"s" * 500
        entry.close()
        return
    with pytest.raises(ConfigError, match=refused):
        pin()
    if kept:  # never removed: not the cache's
        assert (root / _cache.SHARDS / in_the_way / kept).read_text() == "someone's"
