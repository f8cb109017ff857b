"""What the data report costs a conversion: the package before the report against this
one, whole processes, interleaved rounds.

    python bench/make_corpus.py /tmp/corpus --images 10000
    git worktree add /tmp/before <commit before the data report>
    python bench/quality_bench.py /tmp/corpus/data.csv --before /tmp/before [--runs 5]
    python bench/quality_bench.py /tmp/corpus/data.csv --before /tmp/before --runs 9 \
        --only before,report,baseline

Each round runs, on the same CSV, each a fresh process with the output folder removed
and the file system synced first:

- ``before``: ``tfrecorder convert`` of the package at ``--before`` (no report);
- ``before tuned``: the same with two changes this package made since, to Beam's state
  sampler and to the command's cycle collector (``--beam-sampler-ms``, ``freeze_survivors``):
  the like of ``report`` but for what this release adds;
- ``no report``: this package's with the report's own work left out (``NO_REPORT``:
  no digests, nothing keyed for the matching), for the measurement only;
- ``report``: this package's, default options (exact duplicates and statistics);
- ``report untuned``: the same without those two changes, the like of ``before``;
- ``near``: this package's with ``--near-duplicates``; ``near before``: the same of the
  package at ``--before`` (which of the two costs more, where ``--before`` is the
  package before a change to near duplicates);
- ``sized before`` / ``sized`` / ``sized near``: the same three with ``--shorter-side``;
- ``baseline``: bench/baseline_loop.py, the hand-written loop.

Prints the medians of wall time, CPU time (user and system) and peak memory, the median
of the per-round ratios of walls and of CPU times
(report / before, report / no report, no report / before, report / before tuned,
report untuned / before, near / before, near / near before,
sized / sized before, sized near / sized before) and report / baseline.
``--only`` runs some of them (more rounds of the quick ones in the same time); the
ratios printed are those whose two sides ran.

``no report``, ``before tuned`` and ``report untuned`` change the package in the
command's own process: they measure what they say only where the conversion runs
there, on one DirectRunner worker (a table under 20,000 rows, as the 10,000-photo
corpus), not in worker processes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_bench import HERE, input_stats, run  # noqa: E402

ROOT = os.path.dirname(HERE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="data.csv made by bench/make_corpus.py")
    ap.add_argument("--before", default=None,
                    help="a checkout of the package before the data report (needed for "
                         "the before runs)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--shorter-side", type=int, default=256)
    ap.add_argument("--work", default=None)
    ap.add_argument("--only", default=None,
                    help="comma-separated runs to make (before, before tuned, no report, report, "
                         "report untuned, near, near before, sized before, sized, sized near, "
                         "baseline; a space may be written _); default: all")
    args = ap.parse_args()

    rows, in_bytes = input_stats(args.csv)
    work = args.work or tempfile.mkdtemp(prefix="tfr-quality-")
    sized = ["--shorter-side", str(args.shorter_side)]

    def convert(package: str, *flags: str):
        # the package on the path first: `python -m tfrecorder` runs that one (-P: the
        # working directory, which may hold another checkout, is not put before it)
        return lambda out: ["env", f"PYTHONPATH={package}", sys.executable, "-P", "-m",
                            "tfrecorder", "convert", args.csv, out, "--overwrite", *flags]

    def patched(package: str, code: str, *flags: str):
        # ``package``'s command, ``code`` run first in its process
        snippet = f"import runpy, sys\n{code}\nsys.argv[0] = 'tfrecorder'\n" \
                  "runpy.run_module('tfrecorder', run_name='__main__')\n"
        return lambda out: [*convert(package, *flags)(out)[:4], "-c", snippet,
                            *convert(package, *flags)(out)[6:]]

    def tuned(tick: int, freeze: bool) -> str:
        # Beam's state sampler ticking at most every ``tick`` ms and, with ``freeze``,
        # what survives a full collection frozen, whatever the package itself does
        # (tfrecorder/_writer/sampler.short_sampler_ticks, tfrecorder/_cli.freeze_survivors);
        # ``SAMPLER_TICK_MS`` is where older packages read it.
        # The callback is registered where the command registers its own: once the
        # package is imported (pandas with it), before Beam is.
        return ("import gc\n"
                "import tfrecorder._cli as c, tfrecorder._writer.runners as r\n"
                "frozen = []\n"
                "def survivors(phase, info):\n"
                f"    if {freeze} and phase == 'stop' and info['generation'] == 2 \\\n"
                "            and len(frozen) < 8:\n"
                "        frozen.append(None)\n"
                "        gc.freeze()\n"
                "c.freeze_survivors = lambda phase, info: None\n"
                "gc.callbacks.append(survivors)\n"
                f"r.SAMPLER_TICK_MS = {tick}\n"
                "from apache_beam.runners.worker import statesampler\n"
                f"statesampler.StateSampler.__init__.__defaults__ = ({tick},)")

    short_ticks = 20  # the command's --beam-sampler-ms

    writers = {
        "before": convert(args.before),
        "before tuned": patched(args.before, tuned(short_ticks, True)),
        "no report": patched(ROOT, NO_REPORT),
        "report": convert(ROOT),
        "report untuned": patched(ROOT, tuned(200, False), "--beam-sampler-ms", "200"),
        "near": convert(ROOT, "--near-duplicates"),
        "near before": convert(args.before, "--near-duplicates"),
        "sized before": convert(args.before, *sized),
        "sized": convert(ROOT, *sized),
        "sized near": convert(ROOT, *sized, "--near-duplicates"),
        "baseline": lambda out: [sys.executable, os.path.join(HERE, "baseline_loop.py"),
                                 args.csv, out],
    }
    if args.only is not None:
        # "sized_before" as the output folders are named, or "sized before" quoted
        wanted = [w.strip().replace("_", " ") for w in args.only.split(",") if w.strip()]
        unknown = sorted(set(wanted) - set(writers))
        if unknown:
            ap.error(f"--only: unknown run(s) {', '.join(unknown)}; "
                     f"choose from {', '.join(writers)}")
        writers = {w: writers[w] for w in writers if w in wanted}
    if args.before is None and any("before" in w.split() for w in writers):
        ap.error("--before is needed for the before runs (or leave them out with --only)")
    results: dict[str, list[tuple[float, int, float]]] = {w: [] for w in writers}
    for i in range(args.runs):
        for name, cmd in writers.items():
            out = os.path.join(work, name.replace(" ", "_"))
            shutil.rmtree(out, ignore_errors=True)
            os.sync()
            before = _cpu()
            wall, peak = run(cmd(out))
            cpu = _cpu() - before
            results[name].append((wall, peak, cpu))
            shutil.rmtree(out, ignore_errors=True)
            print(f"run {i + 1} {name:<16} {wall:7.2f} s  cpu {cpu:6.2f} s  "
                  f"peak {peak / 2**20:6.0f} MiB", flush=True)

    print(f"\n{rows} rows, {in_bytes / 2**20:.0f} MiB of images, {os.cpu_count()} cores; "
          f"medians of {args.runs} interleaved runs:")
    med = {}
    for name, rs in results.items():
        med[name] = statistics.median(r[0] for r in rs)
        print(f"  {name:<16} {med[name]:7.2f} s  cpu "
              f"{statistics.median(r[2] for r in rs):6.2f} s  peak "
              f"{statistics.median(r[1] for r in rs) / 2**20:6.0f} MiB")

    def ratio(a: str, b: str, at: int = 0, what: str = "") -> str:
        per_round = [x[at] / y[at] for x, y in zip(results[a], results[b])]
        return (f"{a} / {b}{what}: {statistics.median(per_round):.3f}x (median of rounds; "
                f"{', '.join(f'{r:.3f}' for r in per_round)})")

    for a, b in (("report", "before"), ("report", "no report"), ("no report", "before"),
                 ("report", "before tuned"), ("report untuned", "before"), ("near", "before"), ("near", "near before"),
                 ("sized", "sized before"),
                 ("sized near", "sized before"), ("report", "baseline")):
        if a in results and b in results:
            print("  " + ratio(a, b))
            print("  " + ratio(a, b, 2, " (cpu)"))


#: This package with the report's own work left out, for the measurement only: no
#: SHA-256 of the images (the digests' thread gets each batch and hands back empty
#: digests), no record counted into the size statistics or kept for the matching, and
#: none keyed for it (only each shard's own element goes through the grouping). The
#: rows files (what updates compare) and the counts of rows and labels stay.
NO_REPORT = """\
import itertools
import tfrecorder._report.looker as looker, tfrecorder._writer.shard as shard, tfrecorder._writer.steps as steps
shard._digest_all = lambda batch: ["" for _ in batch]
looker.Looker.add = lambda self, ref, width, height, measured, channels=3: measured
keys = steps.match_keys  # the shard's own element comes first
steps.match_keys = lambda written, buckets=1: itertools.islice(keys(written, buckets), 1)"""


def _cpu() -> float:
    """User and system seconds of the child processes waited for so far (each run's
    process tree: the difference around a run is that run's CPU, steadier than its
    wall on a machine whose speed drifts)."""
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime

if __name__ == "__main__":
    main()
