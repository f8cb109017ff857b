"""The shard cache beside LitData's StreamingDataset, reading the same photos from the
same GCS emulator at the same latency, in one script.

Set-up (LitData needs torchvision, which pins torch; tfrecorder's own deps go in too):

    python3.11 -m venv /tmp/litdata-venv
    /tmp/litdata-venv/bin/pip install torch==2.14.1 torchvision==0.29.1   # from this disk
    # (litdata requires torchvision: on top of torch==2.13.0, pip replaces it by these)
    /tmp/litdata-venv/bin/pip install litdata==0.2.76 google-cloud-storage
    /tmp/litdata-venv/bin/pip install -e . gcp-storage-emulator gcsfs
    python bench/make_corpus.py /tmp/cache-corpus --images 900       # 720 train photos
    /tmp/litdata-venv/bin/python bench/litdata_bench.py /tmp/cache-corpus [--delay-ms 30]

The train split's 720 photos, as our 8 shards (CORPUS/tfrecords-8, as in
``bench/cache_bench.py``) and as LitData chunks (``litdata.optimize``, one worker,
``ceil(720 / 8)`` items per chunk, so 8 chunks; an item is the photo's bytes and its
label, nothing decoded; kept in CORPUS/litdata-8), are put into one GCS emulator behind
``bench/latency_proxy.py`` (``--delay-ms`` per request). Each reader then runs under a
DataLoader of 2 workers and batches of 32, the workers sending back only how many
records they read:

  ours     ``tfrecorder.torch.Dataset(gs://..., cache_dir=...)`` (``cache_bench.raw_loader``)
  litdata  ``litdata.StreamingDataset(gs://..., cache_dir=...)`` and its
           ``StreamingDataLoader``

  cold   open (the dataset built from the bucket) + first epoch through an empty cache,
         in order (no shuffling); the first batch, timed from the open
  warm   3 later epochs through the full cache (median)
  third  a cache limit of a third of the split (ours ``cache_limit`` with a
         ``Sampler(order="shards")``, its window chosen unless ``--window``;
         LitData ``max_cache_size`` with ``shuffle=True``; LitData also over
         ``--small-chunks`` chunks, as it hangs over 8 chunks of 5.5 MB with a
         14.5 MB budget and 2 workers):
         2 epochs, records each, fetches of each shard or chunk (GETs of its bytes, as
         the proxy counted them), and the cache folder's largest size on disk

LitData's default for remote data (``LITDATA_ASYNC_CHUNK_PREFETCH`` unset) downloads
chunks through obstore's ``GCSStore(bucket, credential_provider=...)``, built with no
endpoint, so (by its code; not run here) it would not follow ``STORAGE_EMULATOR_HOST``
to the emulator; the script sets ``LITDATA_ASYNC_CHUNK_PREFETCH=0`` unless
``--litdata-async`` is given, so LitData downloads with google-cloud-storage's ``Client``
(anonymous credentials against the emulator), a thread per chunk ahead.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")
# LitData waits this long for a chunk before it raises (default 120 s); it asks for the
# chunk again after FORCE_DOWNLOAD_TIME (30 s), so 45 s shows a hang, not a slow fetch.
os.environ.setdefault("MAX_WAIT_TIME", "45")

import cache_bench  # noqa: E402  (sets gcsfs' environment for the emulator)
import latency_proxy  # noqa: E402
from gcs_reads_bench import BUCKET, _free_port, emulator  # noqa: E402


def _item(row):
    """One LitData item: the photo's bytes as they are on disk, and its label."""
    path, label = row
    with open(path, "rb") as f:
        return {"image": f.read(), "label": label}


def litdata_converted(corpus: str, chunks: int = 8,
                      convert_here: bool = False) -> tuple[str, int]:
    """The train photos as LitData chunks in CORPUS/litdata-CHUNKS: ``(folder, items)``."""
    import json

    out = os.path.join(corpus, f"litdata-{chunks}")
    with open(os.path.join(corpus, "data.csv"), newline="") as f:
        rows = [(r["image_uri"], r["label"]) for r in csv.DictReader(f)
                if r["split"].upper() == "TRAIN"]
    classes = sorted({label for _, label in rows})
    rows = [(path, classes.index(label)) for path, label in rows]
    index = os.path.join(out, "index.json")
    if not os.path.exists(index) and not convert_here:
        # optimize() leaves DATA_OPTIMIZER_* in its process's environment, which
        # StreamingDataset then reads (its epochs slowed 100x): convert in a child.
        import subprocess

        subprocess.run([sys.executable, __file__, corpus, "--litdata-convert", str(chunks)],
                       check=True)
    if not os.path.exists(index):
        import litdata

        litdata.optimize(fn=_item, inputs=rows, output_dir=out,
                         chunk_size=math.ceil(len(rows) / chunks), num_workers=1,
                         reorder_files=False, mode="overwrite")
    with open(index) as f:
        got = json.load(f)["chunks"]
    assert sum(c["chunk_size"] for c in got) == len(rows), (got, len(rows))
    return out, len(rows)


def object_gets(log: list, since: int, suffix: str) -> dict[str, int]:
    """GETs of the bytes of each object whose name ends with ``suffix`` (any range)."""
    out: dict[str, int] = {}
    for method, path, _span in log[since:]:
        name = urllib.parse.unquote(path.split("?")[0]).rsplit("/", 1)[-1]
        if method == "GET" and "alt=media" in path and name.endswith(suffix):
            out[name] = out.get(name, 0) + 1
    return out


def folder_bytes(folder: str) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # evicted or renamed while walking
                pass
    return total


class Largest:
    """The largest size a folder reaches on disk, sampled every 10 ms in a thread."""

    def __init__(self, folder: str):
        self.folder, self.largest, self._done = folder, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    held = None
    largest_held = 0

    def _watch(self):
        while not self._done.wait(0.01):
            self.largest = max(self.largest, folder_bytes(self.folder))
            if self.held is not None:
                self.largest_held = max(self.largest_held, self.held())

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.largest


#: ``order="shards"`` window for our third (``--window``; None: the sampler chooses).
WINDOW = None


def ours(root: str, batch_size: int, cache_dir: str, limit: int | None = None):
    import tfrecorder.torch

    if limit is None:
        return cache_bench.raw_loader(root, batch_size=batch_size, cache_dir=cache_dir)[1]
    return cache_bench.raw_loader(
        root, batch_size=batch_size, cache_dir=cache_dir, cache_limit=limit,
        sampler=lambda d: tfrecorder.torch.Sampler(
            d, seed=0, order="shards", **({} if WINDOW is None else {"window": WINDOW})))[1]


def theirs(root: str, batch_size: int, cache_dir: str, limit: int | None = None):
    import litdata

    kw = {} if limit is None else {"max_cache_size": int(limit), "shuffle": True, "seed": 0}
    ds = litdata.StreamingDataset(root, cache_dir=cache_dir, **kw)
    return litdata.StreamingDataLoader(ds, batch_size=batch_size, num_workers=2,
                                       collate_fn=len)


def measure(name: str, make, root: str, work: str, log: list, fetched, args,
            limit: int, records: int, units: int, third_only: bool = False) -> dict:
    """Cold, warm and third for one reader; prints as it goes. An epoch that raises is
    reported (``res["third"]`` gets the error) and ends that part."""
    res = {}
    if not third_only:
        cold_warm(res, name, make, root, work, log, fetched, args, records)
    third_dir = os.path.join(work, f"{name}-third")
    os.makedirs(third_dir)
    watch = Largest(third_dir)
    loader = make(root, args.batch_size, third_dir, limit)
    held = getattr(getattr(loader.dataset, "reader", None), "cache", None)
    if held is not None:  # ours: what the cache itself counts (cache_bench's figure)
        watch.held = held.held
    res["third"] = []
    for e in range(args.third_epochs):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(e)
        before = len(log)
        start = time.perf_counter()
        try:
            first, wall, n = cache_bench.epoch(loader)
        except Exception as err:  # noqa: BLE001  (a reader's failure is a result)
            wall = time.perf_counter() - start
            msg = str(err).strip().splitlines()[-1][:300]
            got = fetched(log, before)
            res["third"].append((None, wall, sum(got.values()), f"{type(err).__name__}: {msg}"))
            print(f"{name:8} third  epoch {e}: FAILED after {wall:.1f} s, "
                  f"{sum(got.values())} fetches: {type(err).__name__}: {msg}", flush=True)
            break
        got = fetched(log, before)
        res["third"].append((n, wall, sum(got.values()), sorted(got.items())))
        print(f"{name:8} third  epoch {e}: {n} records in {wall:.3f} s (first batch "
              f"{first:.3f} s); {sum(got.values())} fetches of {units}: "
              f"{[c for _, c in sorted(got.items())]}", flush=True)
    res["largest"] = watch.stop()
    res["largest_held"] = watch.largest_held
    return res


def cold_warm(res, name, make, root, work, log, fetched, args, records) -> None:
    before = len(log)
    start = time.perf_counter()
    loader = make(root, args.batch_size, os.path.join(work, f"{name}-cache"))
    opened = time.perf_counter() - start
    first, wall, n = cache_bench.epoch(loader)
    got = fetched(log, before)
    res.update(open=opened, first=opened + first, cold=opened + wall, cold_n=n,
               cold_fetches=sorted(got.values()), cold_requests=len(log) - before)
    print(f"{name:8} cold   open {opened:.3f} s, first batch {opened + first:.3f} s, epoch "
          f"{opened + wall:.3f} s, {n} records; fetches {sorted(got.values())} "
          f"({len(log) - before} requests in all)", flush=True)
    warm, warm_n, before = [], [], len(log)
    for _ in range(args.warm_epochs):
        _, wall, n = cache_bench.epoch(loader)
        warm.append(wall)
        warm_n.append(n)
    res.update(warm=statistics.median(warm), warm_n=warm_n, warm_requests=len(log) - before)
    print(f"{name:8} warm   epochs {', '.join(f'{w:.3f}' for w in warm)} s (median "
          f"{res['warm']:.3f} s = {records / res['warm']:,.0f} records/s), records {warm_n}; "
          f"{len(log) - before} requests", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--warm-epochs", type=int, default=3)
    ap.add_argument("--third-epochs", type=int, default=2)
    ap.add_argument("--window", type=int, default=None,
                    help="our Sampler's order='shards' window in the third (default: "
                         "left out, the sampler chooses one two of which fit the limit)")
    ap.add_argument("--small-chunks", type=int, default=24,
                    help="LitData's third also over this many smaller chunks (0: not)")
    ap.add_argument("--litdata-async", action="store_true",
                    help="leave LitData's async (obstore) downloads on")
    ap.add_argument("--litdata-convert", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    global WINDOW
    WINDOW = args.window
    if args.litdata_convert:
        litdata_converted(args.corpus, args.litdata_convert, convert_here=True)
        return
    if not os.path.exists(os.path.join(args.corpus, "data.csv")):
        sys.exit(f"no corpus: python bench/make_corpus.py {args.corpus} --images 900")
    if not args.litdata_async:
        os.environ["LITDATA_ASYNC_CHUNK_PREFETCH"] = "0"

    import litdata

    from tfrecorder import access

    out = cache_bench.converted(args.corpus)
    local = access.Reader(out, "train")
    ours_bytes = sum(s.num_bytes for s in local.shards)
    lit, lit_items = litdata_converted(args.corpus, len(local.shards))
    lit_chunks = sorted(f for f in os.listdir(lit) if f.endswith(".bin"))
    lit_bytes = sum(os.path.getsize(os.path.join(lit, f)) for f in lit_chunks)
    assert lit_items == len(local), (lit_items, len(local))
    small = None
    if args.small_chunks:
        small = litdata_converted(args.corpus, args.small_chunks)[0]
        small_bytes = sum(os.path.getsize(os.path.join(small, f))
                          for f in os.listdir(small) if f.endswith(".bin"))
    print(f"train: {len(local)} photos; ours {len(local.shards)} shards, "
          f"{ours_bytes / 1e6:.1f} MB; litdata {litdata.__version__} {len(lit_chunks)} chunks, "
          f"{lit_bytes / 1e6:.1f} MB; delay {args.delay_ms:g} ms per request, batch "
          f"{args.batch_size}, 2 workers; LITDATA_ASYNC_CHUNK_PREFETCH="
          f"{os.environ.get('LITDATA_ASYNC_CHUNK_PREFETCH', '(unset)')}", flush=True)

    proxy_port = _free_port()
    with emulator("litdata-bench-") as (port, direct, work):
        direct.put(out, f"gs://{BUCKET}/ours", recursive=True)
        direct.put(lit, f"gs://{BUCKET}/litdata", recursive=True)
        if small:
            direct.put(small, f"gs://{BUCKET}/litdata-small", recursive=True)
        log: list = []
        proxy = latency_proxy.serve(f"127.0.0.1:{port}", proxy_port, args.delay_ms, log)
        os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{proxy_port}"
        import gcsfs

        gcsfs.GCSFileSystem.clear_instance_cache()

        results = {
            "tfrecorder": measure(
                "ours", ours, f"gs://{BUCKET}/ours", work, log,
                lambda lg, since: latency_proxy.shard_fetches(lg, since), args,
                ours_bytes // 3, len(local), len(local.shards)),
            "litdata": measure(
                "litdata", theirs, f"gs://{BUCKET}/litdata", work, log,
                lambda lg, since: object_gets(lg, since, ".bin"), args,
                lit_bytes // 3, len(local), len(lit_chunks)),
        }
        if small:
            results["small"] = measure(
                "litdata-small", theirs, f"gs://{BUCKET}/litdata-small", work, log,
                lambda lg, since: object_gets(lg, since, ".bin"), args,
                small_bytes // 3, len(local), args.small_chunks, third_only=True)
        proxy.shutdown()

    o, t = results["tfrecorder"], results["litdata"]
    shard = max(s.num_bytes for s in local.shards)
    chunk = max(os.path.getsize(os.path.join(lit, f)) for f in lit_chunks)

    def third(r):
        return "; ".join(f"{n} rec, {w:.3f} s, {f} fetches" if n is not None else
                         f"failed after {w:.1f} s ({f} fetches): {detail}"
                         for n, w, f, detail in r["third"])

    rows = [
        ("open (dataset from the bucket)", f"{o['open']:.3f} s", f"{t['open']:.3f} s",
         t["open"] / o["open"]),
        ("cold: first batch (from open)", f"{o['first']:.3f} s", f"{t['first']:.3f} s",
         t["first"] / o["first"]),
        ("cold: open + first epoch", f"{o['cold']:.3f} s ({o['cold_n']} rec)",
         f"{t['cold']:.3f} s ({t['cold_n']} rec)", t["cold"] / o["cold"]),
        ("cold: fetches per shard/chunk", str(o["cold_fetches"]), str(t["cold_fetches"]), None),
        ("cold: requests in all", str(o["cold_requests"]), str(t["cold_requests"]), None),
        (f"warm: epoch (median of {args.warm_epochs})",
         f"{o['warm']:.3f} s ({len(local) / o['warm']:,.0f} rec/s)",
         f"{t['warm']:.3f} s ({len(local) / t['warm']:,.0f} rec/s)", t["warm"] / o["warm"]),
        ("warm: records per epoch", str(o["warm_n"]), str(t["warm_n"]), None),
        ("warm: requests", str(o["warm_requests"]), str(t["warm_requests"]), None),
        ("third: epochs", third(o), third(t), None),
        ("third: largest cache folder on disk",
         f"{o['largest'] / 1e6:.1f} MB ({o['largest'] / shard:.2f} shards); the cache's "
         f"own count {o['largest_held'] / 1e6:.1f} MB ({o['largest_held'] / shard:.2f})",
         f"{t['largest'] / 1e6:.1f} MB ({t['largest'] / chunk:.2f} chunks)", None),
    ]
    if small:
        r = results["small"]
        rows.append((f"third, LitData in {args.small_chunks} chunks", "", third(r), None))
        rows.append((f"third, {args.small_chunks} chunks: largest cache", "",
                     f"{r['largest'] / 1e6:.1f} MB", None))
    print(f"\n| what | tfrecorder | litdata {litdata.__version__} | litdata / tfrecorder |")
    print("|---|---|---|---|")
    for what, a, b, ratio in rows:
        print(f"| {what} | {a} | {b} | {'' if ratio is None else f'{ratio:.2f}x'} |")
    print(f"\n(limits: ours {ours_bytes // 3 / 1e6:.1f} MB = {ours_bytes / 3 / shard:.2f} "
          f"shards, litdata {lit_bytes // 3 / 1e6:.1f} MB = {lit_bytes / 3 / chunk:.2f} chunks)")


if __name__ == "__main__":
    main()
