"""The command line's words: each command's flags and help (``build_parser``), the
values of flags that take a count or a folder per split, and TFRecorder's commands
``create-tfrecords`` and ``check-tfrecords`` rewritten as ours (``tfrecorder_command``).

Its own module because what the command line accepts is one thing, apart from what
each command does: ``_cli`` runs the commands, and the tests that check every option
has its flag read the parser alone. Nothing here runs a command.

Convert's flags come from ``Options``' fields, one each, in both spellings
(``--num-shards`` and ``--num_shards``), with the help and metavar their fields give.
"""

from __future__ import annotations

import argparse


def _shards(value: str):
    """``--num-shards``: ``8``, or ``train=8,validation=2`` for a count per split."""
    if "=" not in value:
        try:
            return int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{value!r}: give a whole number, or counts per split as "
                f"train=8,validation=2") from None
    out = {}
    for item in value.split(","):
        split, _, count = item.partition("=")
        try:
            out[split.strip()] = int(count)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r}: give counts per split as train=8,validation=2") from None
    return out


def _per_split_or_one(value: str):
    """``--images-dir``: ``DIR``, or ``train=DIR,validation=DIR`` for a folder per split."""
    pairs = [item.partition("=") for item in value.split(",")]
    if "=" not in value or not all(eq and _is_split(key) for key, eq, _ in pairs):
        return value
    return {key.strip(): folder.strip() for key, _, folder in pairs}


def _is_split(name: str) -> bool:
    from tfrecorder._folder import split_names

    return split_names.ALIASES.get(name.strip().lower()) is not None


def source(value: str):
    """``SOURCE``: a path or pattern, or ``train=a.json,validation=b.json`` (COCO files per
    split) when no file has that name."""
    import os

    per_split = _per_split_or_one(value)
    return value if isinstance(per_split, str) or os.path.exists(value) else per_split


def _convert_parser(sub) -> None:
    from tfrecorder import _option_fields
    from tfrecorder._options import Options

    p = sub.add_parser(
        "convert", help="convert a CSV, image directory, JSON Lines or COCO file to TFRecord files",
        usage="%(prog)s [flags] SOURCE OUTPUT_DIR\n"
              "       %(prog)s [flags] --from-vertex OUTPUT_DIR",
        description="Convert an AutoML-style CSV (split,image_uri,label; header optional), an "
                    "image directory (DIR/<split>/<label>/<file>), Vertex AI JSON Lines or a "
                    "COCO file to sharded TFRecord files. Flags Apache Beam knows "
                    "(e.g. --max_num_workers=20) pass through to it. "
                    "Every flag also has its TFRecorder spelling (--num_shards).")
    p.add_argument("source", metavar="SOURCE", nargs="?",
                   help="CSV file (local or gs://), image directory, Vertex AI JSON Lines "
                        "(a .jsonl file, a quoted pattern such as 'gs://b/export/*.jsonl', or "
                        "a folder of .jsonl files), a COCO file (instances_train.json), or "
                        "COCO files per split as train=instances_train.json,validation="
                        "instances_val.json")
    p.add_argument("output_dir", metavar="OUTPUT_DIR", nargs="?",
                   help="folder to write the TFRecord files to (local or gs://)")
    p.add_argument("--from-vertex", "--from_vertex", dest="from_vertex", action="store_true",
                   help="in a Vertex AI custom training job, convert its dataset: the files "
                        "of AIP_TRAINING_DATA_URI, AIP_VALIDATION_DATA_URI and "
                        "AIP_TEST_DATA_URI (AIP_DATA_FORMAT=jsonl); give OUTPUT_DIR only")
    p.add_argument("--schema", metavar="FILE",
                   help='JSON file mapping columns to types, e.g. {"split": "SplitKey", '
                        '"image_uri": "ImageUri", "label": "StringLabel"}')
    _verbose(p)
    # One flag per option, in both spellings (--num-shards and --num_shards); Dataflow's
    # settings by their flat names (--project).
    for f in _option_fields.flag_fields(Options):
        cli = dict(f.metadata["cli"])
        flags = cli.pop("flags", None) or [f"--{f.name.replace('_', '-')}", f"--{f.name}"]
        flags = list(dict.fromkeys(flags + [flag.replace("-", "_").replace("__", "--", 1)
                                            for flag in flags]))
        cli.setdefault("default", f.default)
        cli.pop("help", None)
        if f.name == "num_shards":
            cli["type"] = _shards
        if f.name == "images_dir":
            cli["type"] = _per_split_or_one
        if f.name == "mode":
            cli.update(action=_OneMode, default=None)  # None: not given, "create"
        p.add_argument(*flags, dest=f.name, help=_option_fields.flag_help(f), **cli)
    p.add_argument("--update", dest="mode", action=_OneMode, const="update",
                   default=None, help="--mode update: write only the rows that changed "
                                      "since the folder's latest version, as a new version")
    p.add_argument("--append", dest="mode", action=_OneMode, const="append",
                   default=None, help="--mode append: add only the rows whose key the "
                                      "folder's latest version does not hold, as a new "
                                      "version")
    # Not an option of the library: the command tunes Beam in its own process only.
    p.add_argument("--beam-sampler-ms", "--beam_sampler_ms", dest="beam_sampler_ms",
                   type=_period_ms, default=20, metavar="MS",
                   help="longest sleep (ms) of Beam's state sampler while the conversion's "
                        "Beam pipeline runs in this process (default 20; Beam's own: 200)")


def _period_ms(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: give a whole number of ms from 1, "
                                         f"e.g. 20")
    return int(value)


class _OneMode(argparse.Action):
    """``--mode MODE``, ``--update`` or ``--append``: each sets ``mode``, and two that
    disagree are refused."""

    def __init__(self, option_strings, dest, const=None, default=None, help=None,
                 choices=None):
        super().__init__(option_strings, dest, nargs=0 if const else None, const=const,
                         default=default, choices=choices, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        mode = self.const or values
        given = getattr(namespace, self.dest, None)
        if given is not None and given != mode:
            parser.error(f"{option_string} {'' if self.const else mode + ' '}and mode "
                         f"{given} together: give one of them (a mode is given by --mode, --update "
                         f"or --append; --update writes what changed, --append only adds "
                         f"new keys)")
        setattr(namespace, self.dest, mode)


def _verbose(parser) -> None:
    # Also after the command (tfrecorder convert -v); SUPPRESS keeps a -v given before it.
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log what the run does to stderr")


def _inspect_parser(sub) -> None:
    p = sub.add_parser(
        "inspect", help="write the first records of a split as a CSV and image files",
        description="Write the first records of a split as a CSV (every feature but the "
                    "image, with label names) and the images as files, and print them "
                    "with the counts per split. TFRecorder's spellings of the flags work "
                    "too: tfrecord_dir, num_records, output_dir.")
    p.add_argument("tfrecord_dir", metavar="TFRECORD_DIR", nargs="?",
                   help="a folder written by tfrecorder convert")
    p.add_argument("--tfrecord-dir", "--tfrecord_dir", dest="tfrecord_dir_flag",
                   metavar="TFRECORD_DIR", help=argparse.SUPPRESS)
    p.add_argument("--split", default="train", help="split to look at (default: train)")
    p.add_argument("-n", "--num-records", "--num_records", type=int, default=5, metavar="N",
                   help="how many records to write (default: 5)")
    p.add_argument("--output-dir", "--output_dir", dest="inspect_dir", default=None,
                   metavar="DIR",
                   help="folder to write the CSV and images to (default: a new temporary "
                        "folder)")
    _version_flag(p)
    _verbose(p)


def _csv_parser(sub) -> None:
    p = sub.add_parser(
        "create-image-csv", help="write an AutoML CSV for a folder of images",
        description="Write an AutoML image CSV (SPLIT,image_uri,label, no header) for a "
                    "folder laid out IMAGE_DIR/<split>/<label>/<file> or "
                    "IMAGE_DIR/<label>/<file> (rows then UNASSIGNED).")
    p.add_argument("image_dir", metavar="IMAGE_DIR", help="folder of images (local or gs://)")
    p.add_argument("csv_file", metavar="CSV_FILE", help="CSV file to write")
    _verbose(p)


def _index_parser(sub) -> None:
    p = sub.add_parser(
        "index", help="write the index files of a directory that has none",
        description="Write index/<shard>.idx (each record's byte offset and length) for "
                    "every shard of an output directory: a conversion written before "
                    "index files existed or with --no-index, or a TFRecorder 2.0 folder. "
                    "gzip shards cannot be indexed.")
    p.add_argument("output_dir", help="a directory written by tfrecorder convert")


def _verify_parser(sub) -> None:
    p = sub.add_parser(
        "verify", help="read every record of a directory and check it",
        description="Read every record of every shard of an output directory, checking "
                    "each record's checksums, every shard's record count against the "
                    "manifest and every index file against its shard. Exit code 0 when "
                    "all is whole, 1 naming the first damaged file, 2 when the folder is "
                    "not a whole conversion.")
    p.add_argument("output_dir", help="a directory written by tfrecorder convert")
    _version_flag(p)


def _version_flag(p) -> None:
    p.add_argument("--version", type=int, default=None, metavar="K",
                   help="read version K of a folder that updates changed (default: the "
                        "latest; tfrecorder versions OUT lists them)")


def _report_parser(sub) -> None:
    p = sub.add_parser(
        "report", help="print the data report: duplicates, leaks, conflicts, statistics",
        description="Print the data report a conversion wrote (quality.json): images "
                    "that are the same in two splits (leaks) or within one "
                    "(duplicates), the same bytes under different labels (conflicts), "
                    "rows per label and split, image sizes, image problems (dark, "
                    "blurry, grayscale, odd sizes, ...) and Vertex AI's dataset "
                    "warnings. Exit code 0; with --fail-on, 3 when any of the named "
                    "findings is there, so that a data pipeline can stop on it; 2 when "
                    "the folder is not a whole conversion.")
    p.add_argument("output_dir", help="a directory written by tfrecorder convert")
    p.add_argument("--fail-on", "--fail_on", metavar="KINDS", default=None,
                   help="comma-separated findings that make the exit code 3: "
                        "leaks, duplicates, conflicts, warnings, issues (any image "
                        "problem), or an image problem by name: dark, light, blurry, "
                        "low_information, low_detail, grayscale, odd_aspect_ratio, odd_size; "
                        "boxes (any box problem of a detection folder), or one by name: "
                        "no_boxes, degenerate_box, tiny_box, box_outside, duplicate_box, "
                        "mask_box_mismatch (e.g. leaks,conflicts,dark)")


def _versions_parser(sub) -> None:
    p = sub.add_parser(
        "versions", help="list the versions an output directory has published",
        description="List every version published in an output directory, oldest first: "
                    "when, from what and how (create, overwrite, update, append, compact), and "
                    "per split the "
                    "records added, retired and kept, and the records live in it.")
    p.add_argument("output_dir", help="a directory written by tfrecorder convert")


def _vacuum_parser(sub) -> None:
    p = sub.add_parser(
        "vacuum", help="remove the versions older than the last N and their files",
        description="Remove the versions of an output directory older than its last N: "
                    "the files only they list, then their manifests, oldest first. A file "
                    "a kept version lists is never removed. The same as "
                    "tfrecorder.vacuum(output_dir, keep=N).")
    p.add_argument("output_dir", help="a directory written by tfrecorder convert")
    p.add_argument("--keep", type=int, required=True, metavar="N",
                   help="how many of the latest versions to keep (1 or more)")


def _compact_parser(sub) -> None:
    p = sub.add_parser(
        "compact", help="rewrite the splits TFDS cannot read as whole shards of a new version",
        description="Rewrite the live records of every split an update appended to or "
                    "retired from as whole shards of a new version, so that TFDS reads "
                    "every split again; earlier versions keep their files (tfrecorder "
                    "vacuum removes them). The same as tfrecorder.compact(output_dir).")
    p.add_argument("output_dir", help="a directory written by tfrecorder convert")
    p.add_argument("--split", action="append", metavar="SPLIT",
                   help="rewrite this split (repeat for more), even if TFDS reads it")


def _export_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="write a version as Hugging Face Parquet (or WebDataset tar files)",
        description="Write one version of an output directory into DEST as Parquet files "
                    "that Hugging Face's datasets and the Hub read as they are, with a "
                    "dataset card (README.md) and croissant.json, or with --format "
                    "webdataset as tar files with a wids index per split. Exporting "
                    "again after an update rewrites only the files of the shards it "
                    "changed. The same as tfrecorder.export(output_dir, dest).")
    p.add_argument("output_dir", help="a directory written by tfrecorder convert")
    p.add_argument("dest", help="the export's folder (local or gs://), new or an export")
    p.add_argument("--format", default="parquet", choices=["parquet", "webdataset"],
                   help="the export's format (default: parquet)")
    p.add_argument("--metadata", metavar="FILE", default=None,
                   help="a JSON file of the dataset's metadata: name, description, "
                        "license, creator, url and any Croissant rai: key")
    _version_flag(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecorder",
        description="Convert image and tabular datasets to sharded TFRecord files.")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what the run does to stderr (also after the command)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _convert_parser(sub)
    _inspect_parser(sub)
    _csv_parser(sub)
    _index_parser(sub)
    _verify_parser(sub)
    _report_parser(sub)
    _versions_parser(sub)
    _vacuum_parser(sub)
    _compact_parser(sub)
    _export_parser(sub)
    return parser


def tfrecorder_command(argv: list[str]) -> list[str]:
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
        from tfrecorder._readers.inspection import pattern_target

        folder, split = pattern_target(values["file_pattern"], split)
    return ["inspect", folder, "--split", split, "-n", values.get("num_records", "1"),
            "--output-dir", values.get("output_dir", "output"), *kept]
