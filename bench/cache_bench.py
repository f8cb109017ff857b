"""PyTorch training input from a bucket: the shard cache against local disk.

    python bench/make_corpus.py /tmp/corpus --images 900      # 720 train photos
    python bench/cache_bench.py /tmp/corpus [--delay-ms 30] [--batch-size 32]
    python bench/cache_bench.py /tmp/corpus --local-only      # one local epoch, timed

Converts the corpus into 8 shards per split (kept in CORPUS/tfrecords-8), starts a GCS
emulator (gcp-storage-emulator, in memory) with ``bench/latency_proxy.py`` in front of it
(``--delay-ms`` per request, as Cloud Storage from a VM), uploads the conversion, and
reads the train split's raw records (no decoding: what reading costs shows) with a
DataLoader of 2 workers over ``tfrecorder.torch``'s reader:

  local       local disk, 3 epochs (median)
  copy        the split's shards copied out of the bucket (gcsfs ``get``), the bar the
              cache is held to: copy + one local epoch
  uncached    gs:// with ``cache_limit=0``: one ranged request per record (the first
              ``--uncached-records`` records of an epoch, as records/s)
  cold        gs:// through an empty cache: first batch and first epoch, global order
  warm        gs:// through the full cache: 3 later epochs (median)
  third       ``cache_limit`` a third of the split, ``order="shards"`` (``--window``):
              2 epochs, each shard's fetches per epoch and the cache's largest size
  third-global  the same with the default sampler's global shuffle: bytes held, not
              time, is what it measures (a global shuffle with a small cache fetches
              shards again and again)

``--peaks-only`` runs the last two only (no timing: the cache's largest size on disk).

Fetches are counted by the proxy (requests for a range from byte 0 of a shard).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

BUCKET = "bench"
# gcsfs probes a bucket's type over gRPC, which the emulator does not serve.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("NO_GCE_CHECK", "true")

from gcs_reads_bench import _free_port, emulator  # noqa: E402


def converted(corpus: str) -> str:
    out = os.path.join(corpus, "tfrecords-8")
    if not os.path.exists(os.path.join(out, "tfrecorder.json")):
        import tfrecorder

        tfrecorder.convert(os.path.join(corpus, "data.csv"), out, num_shards=8)
    return out


def raw_loader(folder, *, sampler=None, batch_size=32, **kw):
    """A DataLoader of 2 forked workers over the split's raw records; batches are the
    records' byte counts (nothing decoded, little sent back)."""
    import torch.utils.data

    import tfrecorder.torch

    class Raw(torch.utils.data.Dataset):
        def __init__(self):
            self.reader = tfrecorder.torch.Dataset(folder, "train", **kw).reader

        def __len__(self):
            return len(self.reader)

        def __getitems__(self, indices):
            return [len(r) for r in self.reader.records(indices)]

    ds = Raw()
    if sampler is not None:
        sampler = sampler(ds)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=2,
                                         sampler=sampler, collate_fn=len,
                                         multiprocessing_context="fork")
    return ds, loader


def epoch(loader, stop_after: int | None = None) -> tuple[float, float, int]:
    """(seconds to the first batch, seconds for the epoch, records), from ``iter()``:
    worker start-up included."""
    start = time.perf_counter()
    first, n = None, 0
    for size in loader:
        n += size
        if first is None:
            first = time.perf_counter() - start
        if stop_after is not None and n >= stop_after:
            break
    return first, time.perf_counter() - start, n


def local_only(out: str, batch_size: int, epochs: int) -> None:
    _, loader = raw_loader(out, batch_size=batch_size)
    times = [epoch(loader) for _ in range(epochs + 1)][1:]
    n = times[0][2]
    walls = [t for _, t, _ in times]
    print(f"local: {n} records, epochs {', '.join(f'{t:.3f}' for t in walls)} s; median "
          f"{statistics.median(walls):.3f} s = {n / statistics.median(walls):,.0f} records/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--window", type=int, default=1, help="order='shards' window")
    ap.add_argument("--uncached-records", type=int, default=192)
    ap.add_argument("--local-only", action="store_true")
    ap.add_argument("--peaks-only", action="store_true",
                    help="only the cache's largest size with a third of the split")
    args = ap.parse_args()
    out = converted(args.corpus)
    if args.local_only:
        local_only(out, args.batch_size, 3)
        return

    import tfrecorder.torch
    from tfrecorder import access

    local = access.Reader(out, "train")
    total = sum(s.num_bytes for s in local.shards)
    print(f"train: {len(local)} records in {len(local.shards)} shards, {total / 1e6:.1f} MB; "
          f"delay {args.delay_ms:g} ms per request, batch {args.batch_size}, 2 workers")
    if args.peaks_only:
        with emulator("cache-bench-") as (port, direct, work):
            log: list = []
            root = served(out, port, direct, args.delay_ms, log)
            third(root, local, work, args, log)
        return
    _, loader = raw_loader(out, batch_size=args.batch_size)
    epoch(loader)  # warm-up: page cache, imports
    local_walls = [epoch(loader)[1] for _ in range(3)]
    local_s = statistics.median(local_walls)
    print(f"local     epoch {local_s:.3f} s (median of 3) = {len(local) / local_s:,.0f} records/s")

    proxy_port = _free_port()
    with emulator("cache-bench-") as (port, direct, work):
        log: list = []
        root = served(out, port, direct, args.delay_ms, log)
        import gcsfs

        fs = gcsfs.GCSFileSystem(token="anon")

        start = time.perf_counter()
        fs.get([f"{root}/{s.file}" for s in local.shards], os.path.join(work, "copy") + "/")
        copy_s = time.perf_counter() - start
        print(f"copy      {copy_s:.3f} s; copy + one local epoch {copy_s + local_s:.3f} s")

        _, loader = raw_loader(root, batch_size=args.batch_size, cache_limit=0)
        first, wall, n = epoch(loader, stop_after=args.uncached_records)
        print(f"uncached  {n} records in {wall:.3f} s = {n / wall:,.1f} records/s "
              f"(first batch {first:.3f} s)")

        cache_dir = os.path.join(work, "cache")
        before = len(log)
        ds, loader = raw_loader(root, batch_size=args.batch_size, cache_dir=cache_dir)
        first, cold_s, n = epoch(loader)
        got = latency_proxy.shard_fetches(log, before)
        bar = 2 * (copy_s + local_s) + 0.5
        print(f"cold      first batch {first:.3f} s, epoch {cold_s:.3f} s "
              f"({'within' if cold_s <= bar else 'over'} 2 x (copy + local) + 0.5 = "
              f"{bar:.3f} s); fetches per shard {sorted(got.values())}")
        warm = [epoch(loader)[1] for _ in range(3)]
        warm_s = statistics.median(warm)
        print(f"warm      epoch {warm_s:.3f} s (median of 3) = {n / warm_s:,.0f} records/s, "
              f"{local_s / warm_s:.2f}x local disk")

        third(root, local, work, args, log)


def served(out: str, port: int, direct, delay_ms: float, log: list) -> str:
    """``out`` uploaded to the emulator, which is then reached through the latency
    proxy (requests logged in ``log``); the folder's URL."""
    import gcsfs

    import latency_proxy

    root = f"gs://{BUCKET}/out"
    direct.put(out, root, recursive=True)
    proxy_port = _free_port()
    latency_proxy.serve(f"127.0.0.1:{port}", proxy_port, delay_ms, log)
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{proxy_port}"
    gcsfs.GCSFileSystem.clear_instance_cache()
    return root


def third(root: str, local, work: str, args, log: list) -> None:
    """``cache_limit`` a third of the split: 2 epochs in ``order="shards"``, then 1 in
    the default sampler's global shuffle, each with the cache's largest size on disk
    (sampled every 10 ms)."""
    import latency_proxy
    import tfrecorder.torch

    total = sum(s.num_bytes for s in local.shards)
    shard = max(s.num_bytes for s in local.shards)
    limit = total // 3
    for name, order, epochs in (("third", "shards", 2), ("third-global", "global", 1)):
        ds, loader = raw_loader(
            root, batch_size=args.batch_size, cache_dir=os.path.join(work, name),
            cache_limit=limit,
            sampler=lambda d: tfrecorder.torch.Sampler(
                d, seed=0, order=order, **({"window": args.window} if order == "shards"
                                           else {})))
        largest, done = [0], threading.Event()

        def watch():  # the cache's size, sampled while the epochs run
            while not done.wait(0.01):
                largest[0] = max(largest[0], ds.reader.cache.held())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        for e in range(epochs):
            loader.sampler.set_epoch(e)
            before = len(log)
            first, wall, n = epoch(loader)
            got = latency_proxy.shard_fetches(log, before)
            print(f"{name:<9} epoch {e}: {n} records in {wall:.3f} s (first batch "
                  f"{first:.3f} s); fetches per shard "
                  f"{[got.get(s.file, 0) for s in local.shards]}")
        done.set()
        watcher.join()
        print(f"{name:<9} limit {limit / 1e6:.1f} MB ({limit / shard:.2f} shards); largest "
              f"size seen {largest[0] / 1e6:.1f} MB ({largest[0] / shard:.2f} shards); "
              f"held at the end {ds.reader.cache.held() / 1e6:.1f} MB")

if __name__ == "__main__":
    main()
