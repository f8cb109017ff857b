"""The ``tfrecorder`` command line. Thin: it parses flags (``_cli_parser``, which also
takes TFRecorder's commands ``create-tfrecords`` and ``check-tfrecords``), calls the
library, and prints. Exit codes: 0 success, 1 the run failed, 2 usage or validation
errors, 130 stopped by Ctrl-C. ``command`` is the console script; it also sets what only a command may set
in its process (native libraries' logging, the cycle collector).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys

from tfrecorder import _cli_parser
from tfrecorder._errors import (
    ConfigError,
    IncompleteOutputError,
    OutputExistsError,
    SchemaError,
    TFRecorderError,
)


class UsageError(ConfigError):
    """A command line that cannot work (exit code 2)."""


def _run_convert(args, beam_flags) -> int:
    from tfrecorder import _option_fields
    from tfrecorder._options import Options
    from tfrecorder._convert import convert

    options = {f.name: getattr(args, f.name) for f in _option_fields.flag_fields(Options)}
    if options.get("overwrite") and options.get("mode") in (None, "create"):
        # --overwrite is --mode overwrite's short form, not the library's old spelling
        options["mode"], options["overwrite"] = "overwrite", False
    _check_beam_flags(beam_flags)
    if args.from_vertex:
        from tfrecorder._inputs.vertex import from_vertex

        source, output_dir = from_vertex(), args.source
    else:
        source, output_dir = _cli_parser.source(args.source), args.output_dir
    from tfrecorder._writer.sampler import asked_by_the_command

    args.published_before = _published(output_dir)  # for what Ctrl-C says it left
    with asked_by_the_command(args.beam_sampler_ms):  # the command's process, not a library's
        result = convert(source, output_dir, schema=args.schema,
                         pipeline_options=beam_flags or None, **options)
    print(result)
    return 0


#: Flags of convert that other commands are given as if they were theirs: what is
#: found when converting cannot be asked of a folder afterwards.
_NEAR_FLAGS = ("--near-duplicates", "--near_duplicates", "--near-distance", "--near_distance")


def _conversion_flag(args, unknown: list[str]) -> str | None:
    """What to say of a flag only convert takes, given to another command, or None."""
    flag = next((u.split("=", 1)[0] for u in unknown
                 if u.split("=", 1)[0] in _NEAR_FLAGS), None)
    if flag is None:
        return None
    folder = getattr(args, "output_dir", None) or "OUT"
    return (f"{flag} is a flag of convert, not of {args.command}: near duplicates are "
            f"searched when converting, as the images are read. Convert with it "
            f"(tfrecorder convert SOURCE {folder} --near-duplicates --overwrite), then "
            f"tfrecorder report {folder} lists them; a folder converted with it lists "
            f"them already")


def _check_positionals(args, convert_parser) -> None:
    """``convert SOURCE OUTPUT_DIR``, or ``convert --from-vertex OUTPUT_DIR``; else usage."""
    given = [a for a in (args.source, args.output_dir) if a is not None]
    if args.from_vertex and len(given) != 1:
        convert_parser.error("--from-vertex takes OUTPUT_DIR only: the job's dataset is "
                             "the source")
    if not args.from_vertex and len(given) != 2:
        convert_parser.error("the following arguments are required: SOURCE OUTPUT_DIR")


def _check_beam_flags(flags: list[str]) -> None:
    """Refuses flags that neither tfrecorder nor Beam's registered options know."""
    if not flags:
        return
    import difflib

    from tfrecorder._writer import runners

    unknown, beam = runners.unknown_flags(flags)
    if not unknown:
        return
    flag = unknown[0].split("=", 1)[0]
    convert = _cli_parser.build_parser()._subparsers._group_actions[0].choices["convert"]
    ours = [o for a in convert._actions for o in a.option_strings]
    close = difflib.get_close_matches(flag, ours + beam, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(f"unknown flag {flag}: neither tfrecorder nor Apache Beam knows it{hint}")


def _run_inspect(args, _beam_flags) -> int:
    from tfrecorder._readers.inspection import inspect

    folder = args.tfrecord_dir or args.tfrecord_dir_flag
    if folder is None or (args.tfrecord_dir and args.tfrecord_dir_flag
                          and args.tfrecord_dir != args.tfrecord_dir_flag):
        raise UsageError("inspect needs one TFRECORD_DIR: the folder tfrecorder convert "
                         "wrote (e.g. tfrecorder inspect out/ --split train)")
    print(inspect(folder, args.split, args.num_records, args.inspect_dir,
                  version=args.version))
    return 0


def _run_csv(args, _beam_flags) -> int:
    from tfrecorder._inputs.sources import create_image_csv

    n = create_image_csv(args.image_dir, args.csv_file)
    print(f"wrote {n} rows to {args.csv_file}")
    return 0


def _run_index(args, _beam_flags) -> int:
    from tfrecorder._versions.indexing import build_index

    written = build_index(args.output_dir)
    print(f"wrote {len(written)} index files in {args.output_dir}")
    return 0


def _run_verify(args, _beam_flags) -> int:
    from tfrecorder._readers.inspection import verify

    done = verify(args.output_dir, version=args.version)
    per_split = ", ".join(f"{split} {n}" for split, n in done.records_per_split.items())
    print(f"{args.output_dir}: whole. {done.records} records in {done.files} shard(s) "
          f"({per_split}); every checksum, count and index file checked")
    return 0


#: The exit code of ``report --fail-on`` when a named finding is there.
FOUND = 3


def _run_report(args, _beam_flags) -> int:
    from tfrecorder._report.findings import KINDS, report

    kinds = [k.strip() for k in (args.fail_on or "").split(",") if k.strip()]
    if args.fail_on is not None and not kinds:
        raise ConfigError(f"--fail-on {args.fail_on!r} names no finding; name any of "
                          f"{', '.join(KINDS)} (e.g. --fail-on leaks,conflicts)")
    r = report(args.output_dir)
    found = r.found(kinds) if kinds else {}  # unknown kinds: a ConfigError, before printing
    print(r)
    if found:
        print("found: " + ", ".join(f"{n} {k}" for k, n in found.items()), file=sys.stderr)
        return FOUND
    return 0


def _run_versions(args, _beam_flags) -> int:
    import pandas as pd

    from tfrecorder._versions.versions import versions

    frame = versions(args.output_dir)
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(frame.to_string(index=False))
    return 0


def _run_vacuum(args, _beam_flags) -> int:
    from tfrecorder._versions.vacuum import vacuum

    print(f"{args.output_dir}: {vacuum(args.output_dir, args.keep)}")
    return 0


def _run_compact(args, _beam_flags) -> int:
    from tfrecorder._versions.compact import compact

    print(compact(args.output_dir, args.split))
    return 0


def _run_export(args, _beam_flags) -> int:
    import json

    from tfrecorder._errors import ConfigError
    from tfrecorder._export.exporting import export

    metadata = None
    if args.metadata:
        try:
            with open(args.metadata, encoding="utf-8") as f:
                metadata = json.load(f)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--metadata {args.metadata}: not a JSON file of metadata "
                              f"({e}); give a file such as {{\"license\": \"cc-by-4.0\"}}"
                              ) from None
    print(export(args.output_dir, args.dest, args.format, version=args.version,
                 metadata=metadata))
    return 0


COMMANDS = {"convert": _run_convert, "inspect": _run_inspect, "create-image-csv": _run_csv,
            "index": _run_index, "verify": _run_verify, "report": _run_report,
            "versions": _run_versions, "vacuum": _run_vacuum,
            "compact": _run_compact, "export": _run_export}


def main(argv: list[str] | None = None) -> int:
    parser = _cli_parser.build_parser()
    argv = _cli_parser.tfrecorder_command(list(sys.argv[1:] if argv is None else argv))
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "convert":
        misplaced = _conversion_flag(args, unknown)
        if misplaced is not None:
            print(f"Error: {misplaced}", file=sys.stderr)
            return 2
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "convert":
        _check_positionals(args, parser._subparsers._group_actions[0].choices["convert"])
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # Beam logs a failing step's exception, which the one "Error:" line repeats.
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    try:
        return COMMANDS[args.command](args, unknown)
    except KeyboardInterrupt:  # the run's own cleanup is done: the exception unwound it
        return _interrupted(args)
    except (SchemaError, ConfigError, OutputExistsError, IncompleteOutputError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except TFRecorderError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a file the run needed could not be read or written
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:  # Beam's wrapping of a KeyboardInterrupt in a step
        if not _is_interrupt(e):
            raise
        return _interrupted(args)


#: The exit code of a command stopped by Ctrl-C (128 + SIGINT), as a shell's own.
INTERRUPTED = 130


def _is_interrupt(e: BaseException) -> bool:
    """Whether ``e`` is Ctrl-C as Beam re-raises it: a step's KeyboardInterrupt becomes
    ``RuntimeError: KeyboardInterrupt [while running 'WriteShards/Write']``."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt) or str(e).startswith("KeyboardInterrupt"):
            return True
        e = e.__cause__ or e.__context__
    return False


def _published(output_dir: str) -> tuple | None:
    """The version and generation of the manifest ``output_dir`` holds, or None."""
    import json

    from tfrecorder import _storage as storage
    from tfrecorder._folder import layout

    try:
        m = json.loads(storage.read_bytes(storage.join(output_dir, layout.MANIFEST)))
        return (m.get("version") or 1, m.get("generation"))
    except (OSError, ValueError, AttributeError, RecursionError):  # none, or damaged
        return None


def _release_own_lock(output_dir: str) -> None:
    """Removes the folder's lock if this process took it and handed it to no job: a
    Ctrl-C between the lock file's creation and the ``with`` block that releases it
    left it behind (harmless, as a lock of a process that is gone is taken over, but
    a file the user would wonder about)."""
    from tfrecorder import _storage as storage
    from tfrecorder._folder import layout, lock

    path = storage.join(output_dir, layout.LOCK)
    try:
        holder, me = lock._read_holder(path), lock.identity()
        if (holder.get("job_id") is None and holder.get("run_id")
                and all(holder.get(k) == me[k] for k in ("host", "pid", "pid_start"))):
            lock.release(path, holder["run_id"])
    except OSError:
        pass  # the one line matters more than the lock, which expires anyway


def _interrupted(args) -> int:
    """Says in one line what Ctrl-C left. A conversion publishes its version last, in
    one step: either it did (Ctrl-C came as the result was printed) and the folder's
    manifest is another, or nothing was published."""
    if args.command == "convert":
        out = args.source if args.from_vertex else args.output_dir
        _release_own_lock(out)
        before = getattr(args, "published_before", None)
        after = _published(out) if hasattr(args, "published_before") else None
        if after is not None and after != before:
            print(f"interrupted after version {after[0]} was published: {out} holds it "
                  f"whole", file=sys.stderr)
            return INTERRUPTED
        print(f"interrupted: nothing was published; {out} is as it was", file=sys.stderr)
    else:
        print(f"interrupted: tfrecorder {args.command} stopped", file=sys.stderr)
    return INTERRUPTED


def _interrupt(signum, frame) -> None:
    """The command's Ctrl-C handler: KeyboardInterrupt, as Python's own, but never inside
    ``freeze_survivors``. The collector prints an exception raised in a ``gc.callbacks``
    entry as "ignored" and drops it, so a Ctrl-C that landed there was lost and the whole
    conversion ran. There, the signal is handed to a thread that raises it again once
    the callback has returned (``_redeliver``); raising it again from here would land in
    the callback again, at its next instruction. The handler only sets an event: starting
    a thread from here allocates, which can start another collection, whose callback
    meets the signal again, and so on until Python's recursion limit."""
    while frame is not None:
        if frame.f_code is freeze_survivors.__code__:
            _redelivery().set(signum)
            return
        frame = frame.f_back
    raise KeyboardInterrupt


class _Redelivery:
    """A daemon thread that raises a signal in the main thread again once it is out of
    every ``freeze_survivors`` (``_collecting`` counts how deep it is: a collection can
    start inside the callback's own work). Started with the command, before any signal."""

    def __init__(self):
        import threading

        self.signum = signal.SIGINT
        self.wake = threading.Event()
        threading.Thread(target=self._run, name="tfrecorder-interrupt", daemon=True).start()

    def set(self, signum: int) -> None:
        self.signum = signum
        self.wake.set()

    def _run(self) -> None:
        import _thread
        import time

        while True:
            self.wake.wait()
            self.wake.clear()
            while _collecting:
                time.sleep(0.001)
            _thread.interrupt_main(self.signum)


_redeliverer: _Redelivery | None = None


def _redelivery() -> _Redelivery:
    """The process's ``_Redelivery``, started at its first use (the command starts it
    before it registers ``freeze_survivors``)."""
    global _redeliverer
    if _redeliverer is None:
        _redeliverer = _Redelivery()
    return _redeliverer


def command() -> None:
    """The ``tfrecorder`` command: ``main``, then exit. The cycle collector is kept from
    walking the same long-lived objects again and again: what survives each of its first
    full collections is frozen (``freeze_survivors``), and before the interpreter exits,
    whatever is still alive (Beam's objects, a few hundred thousand): its last
    collection over them took most of a second, for nothing, at the end of every
    conversion. Only a command may do this; a library call leaves the caller's
    collector alone."""
    quiet_native_logs(sys.argv[1:])
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
    _redelivery()  # before the callback: never started from inside it
    gc.callbacks.append(freeze_survivors)
    try:
        code = main()
    except KeyboardInterrupt:  # between main's own checks: parsing, imports, printing
        code = _interrupted_early()
    finally:
        gc.callbacks.remove(freeze_survivors)  # the interpreter's exit collects too
    if code == INTERRUPTED:
        # The run's cleanup is done; what is left are Beam's runner threads, which a
        # normal exit waits for (after Ctrl-C of a run with worker processes, for good).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    gc.freeze()
    sys.exit(code)


def _interrupted_early() -> int:
    print("interrupted: nothing was published", file=sys.stderr)
    return INTERRUPTED


#: What the command sets in its environment, for itself and the worker processes Beam
#: starts from it: the C++ libraries under Beam log to file descriptor 2 from native
#: code, past Python's logging (gRPC's core, which Beam's worker processes talk through,
#: prints "E... ev_epoll1_linux.cc ... epoll_wait error" lines under load; absl and
#: TensorFlow's runtime print theirs), and would come before the command's one line.
QUIET_NATIVE_LOGS = {
    "GRPC_VERBOSITY": "NONE",   # none of gRPC's log lines, errors included
    "GRPC_TRACE": "",           # and none of its tracers
    "TF_CPP_MIN_LOG_LEVEL": "3",  # TensorFlow's and absl's C++ logging: fatal only
}


def quiet_native_logs(argv: list[str]) -> None:
    """Sets ``QUIET_NATIVE_LOGS`` in the environment, whatever it held, before the
    command imports any library that reads them (they are read once, when a library
    starts); ``-v`` keeps the user's settings. Only the command does this: the
    environment of a process that imports tfrecorder is its owner's."""
    if "-v" in argv or "--verbose" in argv:
        return
    os.environ.update(QUIET_NATIVE_LOGS)


#: Full collections whose survivors the command freezes: the imports of a conversion
#: set off a few; after them, a long command (a Dataflow job waited for) collects as
#: usual, so no cycle that is alive at a collection and dropped later is kept for good.
FREEZES = 8
_frozen = 0  # full collections whose survivors were frozen
_collecting = 0  # how deep the main thread is in freeze_survivors


def freeze_survivors(phase: str, info: dict) -> None:
    """A ``gc.callbacks`` entry: after each of the command's first ``FREEZES`` full
    collections, what survived it (modules, classes, the objects Beam's and pandas'
    imports made) goes where the collector no longer looks, so the next full collection
    walks only what came after. The command registers it once the package (and pandas)
    is imported; the imports of Beam then set off three more full collections, each
    over everything imported so far (docs/performance.md has what they cost). Frozen
    objects are still freed when their last reference goes; only a cycle among them
    stays till the process exits."""
    global _frozen, _collecting
    _collecting += 1  # first: see _Redelivery
    try:
        if phase == "stop" and info.get("generation") == 2 and _frozen < FREEZES:
            _frozen += 1
            gc.freeze()
    finally:
        _collecting -= 1


if __name__ == "__main__":
    command()
