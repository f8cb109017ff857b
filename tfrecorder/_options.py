"""The options of a conversion, in one frozen dataclass documented once.

Each field carries its help text, and most a longer Markdown ``doc``
(``_option_fields.option``); the ``Options`` docstring table, ``help(Options)``, the
command line's flags (``--num-shards`` / ``--num_shards``) and the table of
docs/options.md are all built from them (``_option_fields``). Here: the fields, their
checks, and the Beam flags passed through.
TFRecorder's ``dataflow_options=`` is accepted as another name for ``pipeline_options``.
The settings that only DataflowRunner reads are grouped in ``Dataflow``
(``Options(dataflow=Dataflow(project=..., region=...))``, ``_dataflow_settings``); their
flat names (``Options(project=...)``, ``convert(..., project=...)``) are accepted too.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
from typing import Any, Mapping, Sequence

from tfrecorder._writer import image
from tfrecorder._report import measures
from tfrecorder._inputs import splits
from tfrecorder._folder import split_names
from tfrecorder import _deprecation as deprecation
from tfrecorder._errors import ConfigError
from tfrecorder._dataflow_settings import DATAFLOW_SETTINGS, Dataflow
from tfrecorder._folder.layout import NAME_PATTERN
from tfrecorder._option_fields import docstring_table, option

#: The runners tfrecorder treats specially; any other Beam runner works too.
RUNNERS = ("DirectRunner", "DataflowRunner")
#: Options.mode: what a conversion does with what its output folder holds.
MODES = ("create", "overwrite", "update", "append")
#: The modes that add a version to the folder's latest one.
UPDATES = ("update", "append")
#: Options.compare: how an update tells a row's image changed.
COMPARES = ("stat", "content")
_ALIASES = {"dataflow_options": "pipeline_options"}


@dataclasses.dataclass(frozen=True)
class Options:
    runner: str = option(
        "DirectRunner", "Beam runner: DirectRunner (this machine), DataflowRunner, DaskRunner, "
        "or any other Beam runner (FlinkRunner, SparkRunner, PortableRunner, PrismRunner...)",
        cli={"metavar": "RUNNER",
             "help": ("Beam runner: DirectRunner (this machine; the default), DataflowRunner, "
                      "or another Beam runner (FlinkRunner, SparkRunner, PortableRunner, "
                      "PrismRunner)")}, doc=(
            '`"DirectRunner"` runs on this machine: in the calling process for inputs under '
            "20,000 rows or of one shard, else `num_workers` worker processes. In the calling "
            "process, pre-sizing, `near_duplicates` and `check=\"decode\"` decode images in "
            '`num_workers` threads. `"DataflowRunner"` runs on Google Cloud '
            '([dataflow.md](dataflow.md)); `"DaskRunner"` on a Dask cluster; any other Beam '
            "runner name works too ([runners.md](runners.md))"))
    num_shards: int | Mapping[str, int] = option(
        0, "shards per split, or a dict per split; 0 sizes them from the data (64 MiB - 1 GiB)",
        cli={"type": int, "metavar": "N",
             "help": ("shards per split: N for every split, or per split as "
                      "train=8,validation=2,test=1; 0 (the default) sizes shards from the "
                      "data, 64 MiB to 1 GiB each")}, doc=(
            'shards per split, or a dict `{"train": 8, "test": 1}` (split names in any '
            'spelling: `"TRAIN"`, `"VALIDATE"`; an unknown one is a `ConfigError`). `0` sizes '
            "them automatically: each shard at most 1 GiB and, where possible, at least "
            "64 MiB, the count a power of two up to 1024 (TFDS's rule); never fewer than 8 "
            "shards (or `num_workers`, or Dataflow's `max_num_workers`, when given) when a "
            "split has at least 64 rows per shard; never more shards than rows. The count "
            "depends on the data and these options only, never on the machine: the same "
            "table gives the same files everywhere"))
    compression: str | None = option(
        None, "None or 'gzip' (TFDS cannot read gzip shards; images do not shrink)",
        cli={"choices": ["gzip"],
             "help": ("write gzip-compressed shards (TFDS cannot read them, and images do not "
                      "shrink); the default is uncompressed")}, doc=(
            '`"gzip"` writes `.gz` shards. TFDS cannot read them, and image bytes do not '
            "shrink"))
    mode: str = option(
        "create", "'create': into an empty folder; 'overwrite': replace what a conversion "
        "wrote there; 'update': write only the rows that changed since the folder's latest "
        "version, as a new version; 'append': only add new rows",
        cli={"choices": list(MODES),
             "help": ("create: into an empty or new OUTPUT_DIR (the default); overwrite: "
                      "replace what an earlier conversion wrote there; update: write what "
                      "changed since its latest version, as a new version (--update); append: "
                      "only add rows with a new key (--append)")}, doc=(
            '`"create"` converts into an empty or new folder and refuses one that holds '
            'data (`OutputExistsError`). `"overwrite"` replaces what an earlier conversion '
            'wrote there and starts over at version 1 (see `overwrite`). `"update"` compares '
            "the table with the folder's latest version by `key` and publishes a new "
            "version: new and changed rows are written into new shards, removed and "
            "changed ones are retired, unchanged ones are not read (`--update`); into a "
            'folder with no version yet it converts as `"create"` does. `"append"` only adds '
            "rows whose key is new (`--append`). See [versions.md](versions.md)"))
    overwrite: bool = option(
        False, "the old spelling of mode='overwrite'",
        cli={"action": "store_true",
             "help": ("--mode overwrite: replace what an earlier conversion wrote in "
                      "OUTPUT_DIR (other files there are left alone); without it a non-empty "
                      "OUTPUT_DIR is refused")}, doc=(
            '`True` is the old spelling of `mode="overwrite"` (`--overwrite`, beside '
            '`--mode overwrite`); with `mode="update"` or `"append"` it is a `ConfigError`. '
            "Without it a non-empty output directory is refused (`OutputExistsError`). With "
            "it, the files a previous conversion wrote (as its manifest lists them, or the "
            "ledger of a run that did not finish) are replaced by the run's last step, after "
            "every shard is written, the old manifest first; a failed run leaves them as they "
            "were. Other files are left alone, and one the run would have to replace is "
            "refused before anything is written"))
    key: str = option(
        "image_uri", "the column that identifies a row across versions (mode='update')",
        cli={}, doc=(
            "the column whose value identifies a row from one version to the next "
            '(`mode="update"`, `"append"`): by default the image column\'s value as the '
            "table gives it. The manifest records it for the updates to come"))
    compare: str = option(
        "stat", "how an update tells that a row's image changed: 'stat' by its size and "
        "modification time, 'content' by the SHA-256 of its bytes",
        cli={"choices": list(COMPARES),
             "help": ("with --update or --append, how a row's image is found changed: stat, by"
                      " its file's size and modification time (the default); content, by the "
                      "SHA-256 of its bytes")}, doc=(
            '`mode="update"` and `"append"` only: how a row whose key is stored is found '
            'changed. `"stat"` compares its image file\'s size and modification time with '
            'the stored ones; `"content"` reads every image of the table and compares the '
            "SHA-256 of its bytes with the stored one (a copy with a new time is unchanged, "
            "a rewrite that kept size and time is changed). `check=\"content\"` is its old "
            "spelling (a `DeprecationWarning`)"))
    label_vocabulary: Sequence[str] | str | None = option(
        None, "label names in id order, or a path to a file with one per line",
        cli={"metavar": "FILE",
             "help": ("file of label names, one per line: line i gets id i (default: the "
                      "table's labels, sorted)")}, doc=(
            "the label names in id order, as a list or a path to a UTF-8 file with one name "
            "per line (a byte-order mark and CRLF line ends are fine; only `\\n` ends a line, "
            "as in the `label.labels.txt` a run writes, which is always accepted back). A "
            "label outside it is a schema problem"))
    multi_label: bool | None = option(
        None, "True: one record per image with every label its rows give; False: one "
        "label per image; None: from the table",
        cli={"flags": ["--multi-label"], "action": "store_const", "const": True,
             "default": None,
             "help": ("one record per image with every label its rows give, even when only a "
                      "few images are listed under two labels (without it, such a table is "
                      "refused with those rows listed)")}, doc=(
            "`True` makes one record per image holding every label its rows (or list "
            "cells) give; `False` refuses an image listed with two labels. `None` (the "
            "default) takes a table with list cells, or with many images under several "
            "labels, as multi-label; a table that is single-label except for a few images "
            "repeated under another label (fewer than half of its images) is a "
            "`SchemaError` listing those rows, since a stray duplicate row would otherwise "
            "turn every label into a list"))
    near_duplicates: bool = option(
        False, "also find near duplicates (resized or re-encoded copies) for the data report",
        cli={"flags": ["--near-duplicates"], "action": "store_true",
             "help": ("also report near duplicates (resized or re-encoded copies, by a "
                      "perceptual hash) in quality.json; exact duplicates, conflicts and "
                      "statistics are always reported")}, doc=(
            "adds near duplicates to the data report (`quality.json`, `tfrecorder.report`): "
            "each image is decoded small and hashed (a 64-bit difference hash), and pairs "
            "within a few bits are listed, across splits as leaks; see docs/quality.md. "
            "Exact duplicates, conflicts and statistics are always reported"))
    near_distance: int = option(
        measures.MAX_DISTANCE, "bits within which two images' hashes make a near-duplicate candidate",
        cli={"type": int, "metavar": "BITS",
             "help": ("with --near-duplicates: two images whose hashes differ in at most BITS "
                      "bits (0 to 16, default {default}) are compared by their thumbnails, and"
                      " listed when those agree too")}, doc=(
            "with `near_duplicates`, two images whose 64-bit hashes differ in at most this "
            "many bits are compared by their thumbnails, and listed when those agree too; "
            "0 to 16. Higher finds more distant copies (heavier re-encodes, grey or "
            "slightly cropped copies) at the cost of more candidates; docs/quality.md "
            "gives what each distance finds"))
    split_fractions: Mapping[str, float] = option(
        help="how UNASSIGNED rows are split: {'train': .8, 'validation': .1, 'test': .1}",
        factory=lambda: dict(splits.DEFAULT_FRACTIONS), doc=(
            "how UNASSIGNED rows are split (by a hash of where their image is); must add up "
            "to 1"))
    images_dir: str | Mapping[str, str] | None = option(
        None, "folder relative image paths start from (default: the source file's); a dict "
        "per split for COCO files given per split",
        cli={"metavar": "DIR",
             "help": ("folder that relative image paths start from (a COCO file's "
                      "file_names; default: the source file's folder); for COCO files per "
                      "split, a folder per split as train=train2017/,validation=val2017/")},
        doc=(
            "the folder (local or `gs://`) that relative image paths start from: a COCO "
            "file's `file_name`s, a CSV's or a JSON Lines file's paths, a DataFrame's. "
            "Without it they start from the file's own folder (the current one for a "
            "DataFrame; for a COCO file, else the folder its exporter put the images in, "
            "docs/input.md). For COCO files given per split, a dict per split "
            '(`{"train": "train2017/", "validation": "val2017/"}`; on the command line '
            "`train=train2017/,validation=val2017/`). A folder that does not exist is a "
            "`ConfigError`; an image directory source takes none"))
    seed: int = option(
        0, "seed of the write-time shuffle",
        cli={"type": int, "metavar": "SEED",
             "help": "seed of the shuffle of rows into shards (default: {default})"},
        doc="seed of the write-time shuffle within each split")
    name: str = option(
        "data", "dataset name in file names (NAME-train.tfrecord-...)",
        cli={"metavar": "NAME",
             "help": ("dataset name that starts every shard's file name, "
                      "NAME-train.tfrecord-... (default: {default})")}, doc=(
            "the dataset name in file names, `[a-zA-Z]\\w*`; at most 182 characters (ASCII), "
            "so that every file a run writes, with the suffix a shard has while it is "
            "written, fits the 255 bytes a file name may have (179 with "
            '`compression="gzip"`)'))
    check: str = option(
        "header", "'header': parse headers and file ends; 'decode': decode every image",
        cli={"choices": list(image.CHECK_OPTIONS),
             "help": ("header: read each image's header and end (the default); decode: decode "
                      "every image (content, the old spelling of --compare content, is "
                      "deprecated)")}, doc=(
            '`"header"`: the header gives format, size and channels (read directly for '
            "JPEG, PNG, GIF and BMP, by Pillow for other formats), and the file's end is "
            "checked (JPEG end-of-image marker, PNG IEND chunk, GIF trailer, BMP size); no "
            "pixel of a JPEG, PNG, GIF or BMP is decoded (other formats are decoded to be "
            're-encoded as PNG). `"decode"`: every image is also fully decoded. '
            '`"content"`, its old third value, is `compare="content"` with `"header"` '
            "(a `DeprecationWarning`)"))
    max_error_fraction: float = option(
        0.1, "fail the run when more than this share of rows is quarantined (a run that "
        "writes nothing always fails)",
        cli={"type": float, "metavar": "F",
             "help": ("fail (exit code 1, nothing published) when more than this share of "
                      "rows is quarantined (default: {default}); a run that writes nothing "
                      "always fails")}, doc=(
            "when more than this share of the rows is quarantined the run fails with "
            "`ConversionError` naming the counts, the first reasons and the errors file, and "
            "writes no manifest. A run in which every row is quarantined always fails. When "
            "the rows whose image file is missing are already over it, the run fails before "
            "reading any image. Why 0.1: "
            "[reliability.md](reliability.md#runs-that-fail-or-are-killed)"))
    max_image_bytes: int = option(
        256 << 20, "image files larger than this are quarantined unread",
        cli={"type": int, "metavar": "BYTES",
             "help": "quarantine image files larger than this, unread (default: {default})"},
        doc="image files larger than this are quarantined unread (`image file too large`)")
    shorter_side: int | None = option(
        None, "downscale images whose shorter side is longer than this to it (aspect kept, "
        "EXIF orientation applied) and re-encode them; None stores every image as it is",
        cli={"type": int, "metavar": "N",
             "help": ("downscale images whose shorter side is longer than N pixels to N and "
                      "re-encode them (aspect ratio kept, EXIF orientation applied); without "
                      "it every image is stored as it is")}, doc=(
            "pre-size images: one whose shorter side is longer than this many pixels is "
            "turned upright by its EXIF orientation, downscaled so that its shorter side is "
            "this (aspect kept; a JPEG is decoded at the smallest DCT scale still at least "
            "that size, then resized with a Lanczos filter) and re-encoded, as JPEG or, when "
            "it has transparency, PNG (8 bits per sample: a 16-bit image keeps its "
            "appearance, 65535 becoming 255 as TensorFlow decodes it; grey stays grey, grey "
            "with alpha stays so). Images at or below it are stored byte for byte. The "
            "manifest and `dataset_info.json` record it. A source with masks (`objects/mask`) "
            "is refused with it: they would stay at the images' first size. See "
            "[loading.md](loading.md#faster-training)"))
    jpeg_quality: int = option(
        90, "JPEG quality of images re-encoded by shorter_side (1-100)",
        cli={"type": int, "metavar": "Q",
             "help": ("JPEG quality, 1 to 100, of images re-encoded for --shorter-side "
                      "(default: {default})")},
        doc="JPEG quality (1-100) of the images `shorter_side` re-encodes; only with it")
    write_index: bool = option(
        True, "write index/<shard>.idx beside every uncompressed shard (each record's "
        "offset and length: record-level sharding, global shuffle, DALI); False skips them",
        cli={"flags": ["--no-index"], "action": "store_false",
             "help": ("write no index/<shard>.idx files (each record's offset and length, for "
                      "record-level sharding, global shuffle and DALI); by default every "
                      "uncompressed shard gets one, and tfrecorder index OUT adds them later")},
        doc=(
            "write `index/<shard>.idx` beside every shard, in the same step that writes the "
            "shard (one line per record: its byte offset and framed length; "
            "[format.md](format.md#index-files)). `load(shard=...)` and "
            '`load(shuffle="global")` use them, and NVIDIA DALI reads them as they are. gzip '
            "shards get none: a gzip stream has no record offsets. `False` (`--no-index`) "
            "skips them; `tfrecorder index OUT` adds them later"))
    num_workers: int = option(
        0, "DirectRunner worker processes (0: one per core); on Dataflow, the initial workers",
        cli={"type": int, "metavar": "N",
             "help": ("worker processes on this machine (default: one per core); with "
                      "DataflowRunner, the initial number of workers")}, doc=(
            "DirectRunner worker processes; 0 means one per core. On Dataflow, passed as "
            "`--num_workers` (the initial workers). When given, also the least number of "
            "shards of a split large enough (see `num_shards`)"))
    pipeline_options: Mapping[str, Any] | Sequence[str] | None = option(
        None, "extra Beam flags: a dict or a list of '--flag=value' strings", doc=(
            'other Beam flags, passed through unchanged: a dict (`{"direct_running_mode": '
            '"multi_threading"}`) or a list of `--flag=value` strings. TFRecorder\'s '
            "`dataflow_options=` is another name for it"))
    dataflow: Dataflow = option(
        help="DataflowRunner's settings: Dataflow(project=, region=, temp_location=, "
        "tfrecorder_wheel=, job_label=, wait=); their flat names work too (project=...)",
        factory=Dataflow, doc=(
            "DataflowRunner's own settings, `tfrecorder.Dataflow(project=..., region=...)`: "
            "the `dataflow.` rows below ([dataflow.md](dataflow.md)). Their flat names "
            "(`project=`, `--project`) are accepted as well; with any other runner they "
            "are a `ConfigError`"))
    layout: str = option(
        "tfrecorder", "the records' feature keys: 'tfrecorder' or 'model_garden'",
        cli={"choices": ["tfrecorder", "model_garden"]}, doc=(
            '`"tfrecorder"`: our keys (`image`, `label`, `objects/bbox`, ...). '
            '`"model_garden"`: the keys TF Model Garden\'s decoders and the TF Object '
            "Detection API read (`image/encoded`, `image/class/label`, "
            "`image/object/bbox/xmin`, ...), with a label map "
            "(`<feature>.label_map.pbtxt`) beside the labels file; docs/detection.md"))
    progress: bool | None = option(
        None, "progress bar of a local run; None: on a terminal or in a notebook only",
        cli={"flags": ["--no-progress"], "action": "store_false", "default": None,
             "help": ("never draw the progress bar (it is drawn only when stderr is a "
                      "terminal)")}, doc=(
            "a progress bar of a local run (rows done of total, rate, time left); `None` "
            "shows it on a terminal or in a notebook only, `False` never"))
    def __post_init__(self):
        object.__setattr__(self, "runner", _runner_name(self.runner))
        comp = self.compression
        if isinstance(comp, str) and comp.strip().lower() in ("", "none", "uncompressed"):
            comp = None
        if comp is not None:
            if not isinstance(comp, str) or comp.strip().lower() != "gzip":
                raise ConfigError(f"compression={self.compression!r}; use None or 'gzip'")
            comp = "gzip"
        object.__setattr__(self, "compression", comp)
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise ConfigError(
                f"name={self.name!r}: a dataset name starts with a letter and has only "
                f"letters, digits and underscores (e.g. 'flowers')")
        if self.layout not in ("tfrecorder", "model_garden"):
            raise ConfigError(f"layout={self.layout!r}; use 'tfrecorder' (our feature keys) "
                              f"or 'model_garden' (TF Model Garden's)")
        if self.check not in image.CHECK_OPTIONS:
            raise ConfigError(f"check={self.check!r}; use one of {image.CHECKS}")
        if self.check == "content":
            deprecation.warn('check="content" is the old spelling of compare="content" (an '
                             "update's comparison, not an image check); write "
                             'compare="content"')
            object.__setattr__(self, "check", "header")
            object.__setattr__(self, "compare", "content")
        if self.compare not in COMPARES:
            raise ConfigError(f"compare={self.compare!r}; use one of {COMPARES}")
        self._check_mode()
        if not isinstance(self.key, str) or not self.key.strip():
            raise ConfigError(f"key={self.key!r}; give the name of the column that "
                              f"identifies a row (image_uri by default)")
        counts = self.num_shards.values() if isinstance(self.num_shards, Mapping) else [self.num_shards]
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in counts):
            raise ConfigError(f"num_shards={self.num_shards!r}; use 0 (automatic) or a positive int")
        if isinstance(self.num_shards, Mapping):
            object.__setattr__(self, "num_shards", _per_split(self.num_shards, "num_shards"))
        if self.multi_label is not None and not isinstance(self.multi_label, bool):
            raise ConfigError(f"multi_label={self.multi_label!r}; use True, False or None")
        if isinstance(self.images_dir, Mapping):
            object.__setattr__(self, "images_dir", _per_split(self.images_dir, "images_dir"))
        if not all(isinstance(v, (str, os.PathLike)) for v in (
                self.images_dir.values() if isinstance(self.images_dir, Mapping)
                else [self.images_dir] if self.images_dir is not None else [])):
            raise ConfigError(f"images_dir={self.images_dir!r}; give a folder (or a dict of "
                              f"one per split)")
        if not isinstance(self.near_duplicates, bool):
            raise ConfigError(f"near_duplicates={self.near_duplicates!r}; use True or False")
        if (isinstance(self.near_distance, bool) or not isinstance(self.near_distance, int)
                or not 0 <= self.near_distance <= 16):
            raise ConfigError(f"near_distance={self.near_distance!r}; use a whole number "
                              f"of bits from 0 to 16 ({measures.MAX_DISTANCE} by default)")
        if not isinstance(self.write_index, bool):
            raise ConfigError(f"write_index={self.write_index!r}; use True or False")
        for name in ("seed", "max_image_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name}={value!r}; use a whole number >= 0")
        if self.shorter_side is not None and (
                isinstance(self.shorter_side, bool) or not isinstance(self.shorter_side, int)
                or self.shorter_side < 1):
            raise ConfigError(f"shorter_side={self.shorter_side!r}; use a number of pixels, "
                              f"e.g. 256, or None to store images as they are")
        if (isinstance(self.jpeg_quality, bool) or not isinstance(self.jpeg_quality, int)
                or not 1 <= self.jpeg_quality <= 100):
            raise ConfigError(f"jpeg_quality={self.jpeg_quality!r}; use a whole number "
                              f"from 1 to 100 (90 by default)")
        for name in ("runner", "name", "check"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{name}={value!r}; give a string")
        if not (isinstance(self.max_error_fraction, (int, float))
                and 0 <= self.max_error_fraction <= 1):
            raise ConfigError(f"max_error_fraction={self.max_error_fraction!r}; use a number in [0, 1]")
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ConfigError(f"num_workers={self.num_workers!r}; use 0 (one per core) or more")
        try:
            object.__setattr__(self, "split_fractions", splits.check_fractions(self.split_fractions))
        except (ValueError, TypeError, AttributeError) as e:
            raise ConfigError(str(e)) from None
        if not isinstance(self.dataflow, Dataflow):
            raise ConfigError(f"dataflow={self.dataflow!r}; give a tfrecorder.Dataflow("
                              f"project=..., region=...)")
        self._check_pairs()

    def _check_mode(self) -> None:
        """``mode`` in one of MODES, with ``overwrite=True`` read as ``"overwrite"``."""
        if self.mode is None:  # the old default: a new conversion
            object.__setattr__(self, "mode", "create")
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r}; use one of {MODES}")
        if not isinstance(self.overwrite, bool):
            raise ConfigError(f"overwrite={self.overwrite!r}; use True or False, or "
                              f"mode='overwrite'")
        if self.overwrite and self.mode in UPDATES:
            raise ConfigError(f"mode={self.mode!r} and overwrite=True: an update keeps the "
                              f"versions there, overwrite starts over at version 1; give "
                              f"one of them (overwrite=True is mode='overwrite')")
        if self.overwrite:  # create is the default: overwrite=True says more
            if self.mode != "overwrite":  # spelled the old way, not copied beside its mode
                deprecation.warn('overwrite=True is the old spelling of mode="overwrite"; '
                                 'give mode="overwrite" (it works the same)')
            object.__setattr__(self, "mode", "overwrite")
        object.__setattr__(self, "overwrite", self.mode == "overwrite")

    def _check_pairs(self) -> None:
        """Each option that means something only beside another is refused without it,
        naming that other option: it would be ignored."""
        # TFRecorder 2.0 gave job_label a default and took it positionally for every
        # runner, so its callers pass one with the DirectRunner: accepted, as there.
        given = [n for n in self.dataflow.given() if n != "job_label"]
        if given and self.runner != "DataflowRunner":
            raise ConfigError(
                f"{', '.join(f'{n}={getattr(self.dataflow, n)!r}' for n in given)}: "
                f"DataflowRunner's setting{'s' if len(given) > 1 else ''}, and "
                f"runner={self.runner!r}; give runner='DataflowRunner', or leave "
                f"{'them' if len(given) > 1 else 'it'} out")
        pairs = [("near_distance", measures.MAX_DISTANCE, "near_duplicates=True",
                  not self.near_duplicates),
                 ("jpeg_quality", 90, "shorter_side= (the images it re-encodes)",
                  self.shorter_side is None),
                 ("compare", "stat", "mode='update' or mode='append'",
                  self.mode not in UPDATES)]
        for name, default, needs, missing in pairs:
            if getattr(self, name) != default and missing:
                raise ConfigError(f"{name}={getattr(self, name)!r} means something only with "
                                  f"{needs}; give that too, or leave {name} out")

    @property
    def updates(self) -> bool:
        """Whether the run adds a version to the folder's latest one (update, append)."""
        return self.mode in UPDATES

    # The flat names of the Dataflow settings, as the runners read them.
    project = property(lambda self: self.dataflow.project)
    region = property(lambda self: self.dataflow.region)
    temp_location = property(lambda self: self.dataflow.temp_location)
    tfrecorder_wheel = property(lambda self: self.dataflow.tfrecorder_wheel)
    job_label = property(lambda self: self.dataflow.job_label)
    wait = property(lambda self: self.dataflow.wait)

    @classmethod
    def from_kwargs(cls, **kwargs) -> "Options":
        """Options from keyword arguments; unknown names are a ConfigError with a suggestion."""
        known = ({f.name for f in dataclasses.fields(cls)} | set(DATAFLOW_SETTINGS)
                 | set(_IGNORED))
        for old, new in _ALIASES.items():
            if old in kwargs:
                if kwargs.get(new) is not None:
                    raise ConfigError(f"give {new}= or {old}=, not both")
                kwargs[new] = kwargs.pop(old)
        for key in kwargs:
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known | set(_ALIASES)), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown option {key!r}{hint}")
        return cls(**kwargs)

    def flag_value(self, name: str) -> str | None:
        """The value of ``--name`` among the pass-through options, if given."""
        keywords = self.beam_keywords()
        if name in keywords:
            return str(keywords[name])
        for flag in self.beam_flags():
            key, _, value = flag.lstrip("-").partition("=")
            if key == name:
                return value or "true"
        return None

    def beam_flags(self) -> list[str]:
        """``pipeline_options`` given as flags (a list or a string of ``--flag=value``)."""
        extra = self.pipeline_options
        if extra is None or isinstance(extra, Mapping):
            return []
        if isinstance(extra, str):
            return extra.split()
        return [str(f) for f in extra]

    def beam_keywords(self) -> dict[str, Any]:
        """``pipeline_options`` given as a dict, for Beam's ``PipelineOptions(**kwargs)``:
        ``{"use_public_ips": False, "dry_run": True}`` means what it says."""
        extra = self.pipeline_options
        if not isinstance(extra, Mapping):
            return {}
        return {str(k).lstrip("-"): v for k, v in extra.items()}


_fields_init = Options.__init__


#: Options that no longer exist, accepted with a DeprecationWarning and ignored.
_IGNORED = {
    "beam_sampler_ms": "beam_sampler_ms= has no effect: a library call leaves Beam's "
                       "state sampler as it is (it is the process's, not the library's); "
                       "remove it. The tfrecorder convert command still shortens it "
                       "(--beam-sampler-ms)",
}


def _init(self, *args, **kwargs):
    for name, why in _IGNORED.items():
        if name in kwargs:
            kwargs.pop(name)
            deprecation.warn(why)
    # Dataflow's settings by their flat names (project=...), into ``dataflow``.
    flat = {n: kwargs.pop(n) for n in DATAFLOW_SETTINGS if n in kwargs}
    if flat:
        given = kwargs.get("dataflow")
        if given is not None and not isinstance(given, Dataflow):
            raise ConfigError(f"dataflow={given!r}; give a tfrecorder.Dataflow(...)")
        both = [n for n in flat if given is not None and n in given.given()]
        if both:
            raise ConfigError(f"{both[0]}= given twice, flat and in dataflow=; give it once")
        kwargs["dataflow"] = dataclasses.replace(given or Dataflow(), **flat)
    _fields_init(self, *args, **kwargs)


_init.__signature__ = inspect.signature(_fields_init)
Options.__init__ = _init


def _runner_name(name) -> str:
    """The Beam runner called ``name``, in any case ("DataFlowRunner", as TFRecorder's
    README spells it, or "flink"), or a runner class by its dotted path."""
    from tfrecorder._writer import runners

    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"runner={name!r}; give a Beam runner name such as 'DirectRunner'")
    wanted = name.strip().lower()
    if name.strip() == runners.DASK:
        return "DaskRunner"
    for known in (*RUNNERS, "DaskRunner"):
        if wanted in (known.lower(), known.lower()[:-len("runner")]):
            return known
    beam_runners = runners.known_runners()
    for known in beam_runners:
        if wanted in (known.lower(), known.lower()[:-len("runner")]):
            return known
    if "." in name:
        return name  # a runner class by its module path
    close = difflib.get_close_matches(name, beam_runners, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"runner={name!r} is not a Beam runner{hint} Beam knows "
                      f"{', '.join(beam_runners)}")


def _per_split(values: Mapping, option: str) -> dict:
    """``values`` keyed by canonical split names (any spelling: "TRAIN", "VALIDATE")."""
    out = {}
    for key, value in values.items():
        try:
            split = splits.canonical(key)
        except split_names.UnknownSplit:
            split = None
        if split is None:
            raise ConfigError(f"{option}: unknown split {key!r}; use train, validation or test")
        out[split] = value
    return out


Options.__doc__ = (
    "The options of a conversion; ``convert(..., **options)`` builds one and checks it.\n\n"
    + docstring_table(Options))
