"""The ``tfrecorder`` command line. Thin: it parses flags, calls the library, and
prints. Exit codes: 0 success, 1 the run failed, 2 usage or validation errors.
TFRecorder's commands ``create-tfrecords`` and ``check-tfrecords`` work too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tfrecorder.errors import (
    ConfigError,
    IncompleteOutputError,
    OutputExistsError,
    SchemaError,
    TFRecorderError,
)


class UsageError(ConfigError):
    """A command line that cannot work (exit code 2)."""


def _convert_parser(sub) -> None:
    import dataclasses

    from tfrecorder.options import Options

    p = sub.add_parser(
        "convert", help="convert a CSV or an image directory to TFRecord files",
        description="Convert an AutoML-style CSV (split,image_uri,label; header optional) or an "
                    "image directory (DIR/<split>/<label>/<file>) to sharded TFRecord files. "
                    "Flags that Apache Beam knows (e.g. --max_num_workers=20) are passed to it.")
    p.add_argument("source", help="CSV file (local or gs://) or image directory")
    p.add_argument("output_dir", help="directory to write the TFRecord files to")
    p.add_argument("--schema", metavar="FILE",
                   help='JSON file mapping columns to types, e.g. {"split": "SplitKey", '
                        '"image_uri": "ImageUri", "label": "StringLabel"}')
    # One flag per option, in both spellings (--num-shards and --num_shards).
    for f in dataclasses.fields(Options):
        cli = f.metadata["cli"]
        if cli is None:
            continue
        cli = dict(cli)
        flags = cli.pop("flags", None) or [f"--{f.name.replace('_', '-')}", f"--{f.name}"]
        flags = list(dict.fromkeys(flags + [flag.replace("-", "_").replace("__", "--", 1)
                                            for flag in flags]))
        cli.setdefault("default", f.default)
        p.add_argument(*flags, dest=f.name, help=f"{f.metadata['help']} (default: {f.default})",
                       **cli)


def _run_convert(args, beam_flags) -> int:
    import dataclasses

    from tfrecorder.convert import convert
    from tfrecorder.options import Options

    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(Options)
               if f.metadata["cli"] is not None}
    _check_beam_flags(beam_flags)
    result = convert(args.source, args.output_dir, schema=args.schema,
                     pipeline_options=beam_flags or None, **options)
    print(result)
    return 0


def _check_beam_flags(flags: list[str]) -> None:
    """Refuses flags that neither tfrecorder nor Beam's registered options know."""
    if not flags:
        return
    import argparse
    import difflib

    from apache_beam.options.pipeline_options import PipelineOptions

    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    for cls in PipelineOptions.__subclasses__():
        cls._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(flags)
    unknown = [u for u in unknown if u.startswith("-")]
    if not unknown:
        return
    flag = unknown[0].split("=", 1)[0]
    ours = [o for a in build_parser()._subparsers._group_actions[0].choices["convert"]._actions
            for o in a.option_strings]
    beam = [o for a in parser._actions for o in a.option_strings]
    close = difflib.get_close_matches(flag, ours + beam, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(f"unknown flag {flag}: neither tfrecorder nor Apache Beam knows it{hint}")


def _inspect_parser(sub) -> None:
    p = sub.add_parser(
        "inspect", help="write the first records of a split as a CSV and image files",
        description="Write the first records of a split as a CSV (every feature but the "
                    "image, with label names) and the images as files, and print them "
                    "with the counts per split.")
    p.add_argument("output_dir", help="a directory written by tfrecorder convert")
    p.add_argument("--split", default="train", help="split to look at (default: train)")
    p.add_argument("-n", "--num-records", type=int, default=5,
                   help="records to write (default: 5)")
    p.add_argument("--output-dir", dest="inspect_dir", default=None,
                   help="where to write them (default: a new temporary folder)")


def _run_inspect(args, _beam_flags) -> int:
    from tfrecorder.inspection import inspect

    print(inspect(args.output_dir, args.split, args.num_records, args.inspect_dir))
    return 0


def _csv_parser(sub) -> None:
    p = sub.add_parser(
        "create-image-csv", help="write an AutoML CSV for a folder of images",
        description="Write an AutoML image CSV (SPLIT,image_uri,label, no header) for a "
                    "folder laid out IMAGE_DIR/<split>/<label>/<file> or "
                    "IMAGE_DIR/<label>/<file> (rows then UNASSIGNED).")
    p.add_argument("image_dir", help="folder of images (local or gs://)")
    p.add_argument("csv_file", help="CSV file to write")


def _run_csv(args, _beam_flags) -> int:
    from tfrecorder.sources import create_image_csv

    n = create_image_csv(args.image_dir, args.csv_file)
    print(f"wrote {n} rows to {args.csv_file}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecorder",
        description="Convert image and tabular datasets to sharded TFRecord files.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _convert_parser(sub)
    _inspect_parser(sub)
    _csv_parser(sub)
    return parser


COMMANDS = {"convert": _run_convert, "inspect": _run_inspect, "create-image-csv": _run_csv}


def _tfrecorder_command(argv: list[str]) -> list[str]:
    """TFRecorder's commands in our words.

    ``create-tfrecords --input_data=D --output_dir=O [flags]`` is ``convert D O [flags]``;
    ``check-tfrecords --tfrecord_dir=D [--split=S] [--num_records=N] [--output_dir=O]``
    (or its older ``--file_pattern=D/train*``) is ``inspect D --split S -n N
    --output-dir O``.
    """
    if not argv or argv[0] not in ("create-tfrecords", "check-tfrecords"):
        return argv
    command, rest = argv[0], list(argv[1:])
    values: dict[str, str] = {}
    kept: list[str] = []
    names = ("input_data", "output_dir", "tfrecord_dir", "file_pattern", "split",
             "num_records")
    i = 0
    while i < len(rest):
        flag, eq, value = rest[i].partition("=")
        key = flag.lstrip("-").replace("-", "_")
        if flag.startswith("--") and key in names:
            if not eq:
                i += 1
                value = rest[i] if i < len(rest) else ""
            values[key] = value
        else:
            kept.append(rest[i])
        i += 1
    if command == "create-tfrecords":
        source = values.get("input_data") or (kept.pop(0) if kept else "")
        return ["convert", source, values.get("output_dir", "./tfrecords"), *kept]
    folder = values.get("tfrecord_dir") or (kept.pop(0) if kept else "")
    split = values.get("split", "train")
    if "file_pattern" in values:  # /path/to/tfrecords/train*.tfrecord.gz
        from tfrecorder.inspection import pattern_target

        folder, split = pattern_target(values["file_pattern"], split)
    return ["inspect", folder, "--split", split, "-n", values.get("num_records", "1"),
            "--output-dir", values.get("output_dir", "output"), *kept]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = _tfrecorder_command(list(sys.argv[1:] if argv is None else argv))
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "convert":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # Beam logs a failing step's exception, which the one "Error:" line repeats.
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    try:
        return COMMANDS[args.command](args, unknown)
    except (SchemaError, ConfigError, OutputExistsError, IncompleteOutputError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except TFRecorderError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a file the run needed could not be read or written
        print(f"Error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
