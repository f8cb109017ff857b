"""The missing-file pass before a conversion from gs://, for a table with one image per
folder: the time from the table's URIs to the list of those that are missing.

    python bench/missing_bench.py [--rows 200] [--delay-ms 30] [--repeat 3]

Starts a local GCS emulator (gcp-storage-emulator, in memory), uploads ``--rows`` small
objects, each in a folder of its own, and puts ``bench/latency_proxy.py`` in front of it,
so that every request waits ``--delay-ms`` as it would against Cloud Storage. Then times
``storage.missing`` over their URIs (one listing per folder) ``--repeat`` times, each
with nothing listed before, and prints the median and the most listings in flight.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gcs_reads_bench import BUCKET, _free_port, emulator  # noqa: E402 (after sys.path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    with emulator("missing-bench-") as (port, direct, _):
        uris = []
        for i in range(args.rows):
            key = f"{BUCKET}/images/{i:06d}/a.jpg"
            direct.pipe(key, b"x")
            uris.append(f"gs://{key}")

        import latency_proxy

        in_flight: dict = {}
        proxy_port = _free_port()
        proxy = latency_proxy.serve(f"127.0.0.1:{port}", proxy_port, args.delay_ms,
                                    in_flight=in_flight)
        os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{proxy_port}"

        from tfrecorder import _storage as storage

        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            gone = storage.missing(uris, {})
            times.append(time.perf_counter() - start)
            assert gone == [], gone
        proxy.shutdown()
        print(f"{args.rows} rows, one folder each, {args.delay_ms:g} ms per request: "
              f"missing-file pass {statistics.median(times):.2f} s (median of "
              f"{args.repeat}: {', '.join(f'{t:.2f}' for t in times)}); "
              f"at most {in_flight.get('most', 0)} requests in flight")


if __name__ == "__main__":
    main()
