"""What an update costs against converting the edited table again: whole processes,
interleaved rounds, on the corpus of bench/make_corpus.py.

    python bench/make_corpus.py /tmp/corpus --images 10000
    python bench/update_bench.py /tmp/corpus/data.csv [--runs 3] [--changed 0.01] [--opens]

The edit changes ``--changed`` of the rows, in three equal parts: new rows (new image
files, re-encoded from the corpus's), rows removed, rows relabelled. The folder the
updates start from is converted once from the original table (not timed); each round
then runs, each a fresh process with the file system synced first:

- ``full``: ``tfrecorder convert EDITED OUT --overwrite`` into a folder of its own;
- ``update``: ``tfrecorder convert EDITED OUT --update`` on a copy of the converted folder;
- ``no change``: ``--update`` with the original table on a copy (the runner's start-up,
  reading the stored rows files and comparing, publishing nothing).

Prints the medians of wall time and of peak memory (the process tree's resident memory),
the per-round ratios update / full and (update - no change) / full, the bytes the update
added to the folder against the folder's bytes, and with ``--opens`` (needs strace) the
image files each kind of run opened.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_bench import run  # noqa: E402


def _files(folder: str) -> dict[str, int]:
    return {os.path.relpath(os.path.join(r, f), folder): os.path.getsize(os.path.join(r, f))
            for r, _, fs in os.walk(folder) for f in fs}


def edit(csv_path: str, out_csv: str, changed: float, seed: int = 0) -> dict[str, int]:
    """Writes the edited table; returns how many rows of each kind of change it has."""
    from PIL import Image

    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    base = os.path.dirname(os.path.abspath(csv_path))
    rng = random.Random(seed)
    n = max(3, round(len(body) * changed))
    picked = rng.sample(range(len(body)), 2 * (n // 3))
    removed, relabelled = set(picked[: n // 3]), picked[n // 3:]
    labels = sorted({r[2] for r in body})
    for i in relabelled:
        body[i][2] = next(lab for lab in labels if lab != body[i][2])
    new_dir = os.path.join(os.path.dirname(os.path.abspath(out_csv)), "new_images")
    os.makedirs(new_dir, exist_ok=True)
    added = []
    for j, i in enumerate(rng.sample(range(len(body)), n - 2 * (n // 3))):
        src = body[i][1] if os.path.isabs(body[i][1]) else os.path.join(base, body[i][1])
        img = Image.open(src).convert("RGB")
        buf = io.BytesIO()
        img.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(buf, "JPEG", quality=88)
        path = os.path.join(new_dir, f"new_{j:05d}.jpg")
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        added.append([body[i][0], path, body[i][2]])
    kept = [r for i, r in enumerate(body) if i not in removed]
    # paths absolute: the edited table lives elsewhere than the corpus's
    for r in kept:
        if not os.path.isabs(r[1]):
            r[1] = os.path.join(base, r[1])
    with open(out_csv, "w", newline="") as f:
        csv.writer(f).writerows([header, *kept, *added])
    return {"added": len(added), "removed": len(removed), "relabelled": len(relabelled)}


def opens(cmd: list[str], folders: list[str]) -> int:
    """Image files under ``folders`` the command's processes opened (strace)."""
    with tempfile.NamedTemporaryFile(suffix=".strace") as log:
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", log.name, *cmd],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        text = open(log.name, errors="replace").read()
    seen = set()
    for line in text.splitlines():
        for folder in folders:
            at = line.find(f'"{folder}')
            if at >= 0 and "ENOENT" not in line:
                seen.add(line[at + 1: line.index('"', at + 1)])
    return len(seen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="data.csv made by bench/make_corpus.py")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--changed", type=float, default=0.01, help="share of rows changed")
    ap.add_argument("--work", default=None)
    ap.add_argument("--opens", action="store_true", help="count image files opened (strace)")
    args = ap.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="tfr-update-")
    original = os.path.join(work, "original.csv")
    with open(args.csv, newline="") as f, open(original, "w", newline="") as g:
        base = os.path.dirname(os.path.abspath(args.csv))
        rows = list(csv.reader(f))
        for r in rows[1:]:
            if not os.path.isabs(r[1]):
                r[1] = os.path.join(base, r[1])
        csv.writer(g).writerows(rows)
    edited = os.path.join(work, "edited.csv")
    kinds = edit(original, edited, args.changed)
    tfr = [sys.executable, "-m", "tfrecorder", "convert"]
    converted = os.path.join(work, "converted")
    shutil.rmtree(converted, ignore_errors=True)
    subprocess.run([*tfr, original, converted], check=True, stdout=subprocess.DEVNULL)
    stored = sum(_files(converted).values())
    print(f"{len(rows) - 1} rows, {kinds}; the converted folder: {stored / 2**20:.1f} MiB",
          flush=True)

    def copy(name: str) -> str:
        out = os.path.join(work, name)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(converted, out)
        return out

    results: dict[str, list[tuple[float, int]]] = {"full": [], "update": [], "no change": []}
    written = None
    for i in range(args.runs):
        for name in results:
            if name == "full":
                out = os.path.join(work, "full")
                shutil.rmtree(out, ignore_errors=True)
                cmd = [*tfr, edited, out, "--overwrite"]
            else:
                out = copy(name.replace(" ", "_"))
                cmd = [*tfr, edited if name == "update" else original, out, "--update"]
            before = _files(out) if name != "full" else {}
            os.sync()
            wall, peak = run(cmd)
            results[name].append((wall, peak))
            if name == "update":
                after = _files(out)
                written = sum(n for f, n in after.items() if before.get(f) != n)
            if name == "no change":
                assert _files(out) == before, "a no-change update changed the folder"
            print(f"run {i + 1} {name:<9} {wall:7.2f} s  peak {peak / 2**20:6.0f} MiB",
                  flush=True)

    med = {k: statistics.median(w for w, _ in v) for k, v in results.items()}
    print(f"\nmedians of {args.runs} interleaved rounds, {os.cpu_count()} cores:")
    for k, v in results.items():
        print(f"  {k:<9} {med[k]:7.2f} s  peak {statistics.median(p for _, p in v) / 2**20:6.0f} MiB")
    ratio = [u[0] / f[0] for u, f in zip(results["update"], results["full"])]
    net = [(u[0] - n[0]) / f[0]
           for u, n, f in zip(results["update"], results["no change"], results["full"])]
    print(f"  update / full: {statistics.median(ratio):.3f}x (rounds: "
          f"{', '.join(f'{r:.3f}' for r in ratio)})")
    print(f"  (update - no change) / full: {statistics.median(net):.3f} (rounds: "
          f"{', '.join(f'{r:.3f}' for r in net)})")
    print(f"  the update added {written / 2**20:.2f} MiB: {written / stored:.2%} of the "
          f"folder's {stored / 2**20:.1f} MiB")
    if args.opens:
        folders = [os.path.dirname(os.path.abspath(args.csv)), os.path.join(work, "new_images")]
        for name, table in (("update", edited), ("no change", original)):
            out = copy("opens")
            n = opens([*tfr, table, out, "--update"], folders)
            print(f"  {name}: opened {n} image files "
                  f"(new and changed rows: {kinds['added'] + kinds['relabelled']})")


if __name__ == "__main__":
    main()
