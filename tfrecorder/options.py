"""The options of a conversion, in one frozen dataclass documented once.

Each field carries its help text; the ``Options`` docstring table, ``help(Options)`` and
the command line's flags (``--num-shards`` / ``--num_shards``) are all built from it.
TFRecorder's ``dataflow_options=`` is accepted as another name for ``pipeline_options``.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping, Sequence

from tfrecorder import image, splits
from tfrecorder.errors import ConfigError
from tfrecorder.layout import NAME_PATTERN

#: The runners tfrecorder treats specially; any other Beam runner works too.
RUNNERS = ("DirectRunner", "DataflowRunner")
#: Beam runners that Beam's list of runner names leaves out, by name and class path.
_UNLISTED = {"DaskRunner": "apache_beam.runners.dask.dask_runner.DaskRunner"}
_ALIASES = {"dataflow_options": "pipeline_options"}


def _option(default=dataclasses.MISSING, help: str = "", *, cli: dict | None = None,
            factory=dataclasses.MISSING):
    """A field with its help text; ``cli`` holds argparse settings, None for no flag."""
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={"help": help, "cli": cli})


@dataclasses.dataclass(frozen=True)
class Options:
    runner: str = _option(
        "DirectRunner", "Beam runner: DirectRunner (this machine), DataflowRunner, DaskRunner, "
        "or any other Beam runner (FlinkRunner, SparkRunner, PortableRunner, PrismRunner...)",
        cli={})
    num_shards: int | Mapping[str, int] = _option(
        0, "shards per split, or a dict per split; 0 sizes them from the data (64 MiB - 1 GiB)",
        cli={"type": int})
    compression: str | None = _option(
        None, "None or 'gzip' (TFDS cannot read gzip shards; images do not shrink)",
        cli={"choices": ["gzip"]})
    overwrite: bool = _option(
        False, "replace tfrecorder's files in a non-empty output directory",
        cli={"action": "store_true"})
    label_vocabulary: Sequence[str] | str | None = _option(
        None, "label names in id order, or a path to a file with one per line",
        cli={"metavar": "FILE"})
    split_fractions: Mapping[str, float] = _option(
        help="how UNASSIGNED rows are split: {'train': .8, 'validation': .1, 'test': .1}",
        factory=lambda: dict(splits.DEFAULT_FRACTIONS))
    seed: int = _option(0, "seed of the write-time shuffle", cli={"type": int})
    name: str = _option("data", "dataset name in file names (NAME-train.tfrecord-...)", cli={})
    check: str = _option("header", "'header': parse headers and file ends; 'decode': decode "
                         "every image", cli={"choices": list(image.CHECKS)})
    max_error_fraction: float = _option(
        0.1, "fail the run when more than this share of rows is quarantined (a run that "
        "writes nothing always fails)", cli={"type": float})
    max_image_bytes: int = _option(
        256 << 20, "image files larger than this are quarantined unread", cli={"type": int})
    shorter_side: int | None = _option(
        None, "downscale images whose shorter side is longer than this to it (aspect kept, "
        "EXIF orientation applied) and re-encode them; None stores every image as it is",
        cli={"type": int, "metavar": "N"})
    jpeg_quality: int = _option(
        90, "JPEG quality of images re-encoded by shorter_side (1-100)",
        cli={"type": int, "metavar": "Q"})
    write_index: bool = _option(
        True, "write index/<shard>.idx beside every uncompressed shard (each record's "
        "offset and length: record-level sharding, global shuffle, DALI); False skips them",
        cli={"flags": ["--no-index"], "action": "store_false"})
    num_workers: int = _option(
        0, "DirectRunner worker processes (0: one per core); on Dataflow, the initial workers",
        cli={"type": int})
    pipeline_options: Mapping[str, Any] | Sequence[str] | None = _option(
        None, "extra Beam flags: a dict or a list of '--flag=value' strings")
    job_label: str | None = _option(None, "DataflowRunner: a readable prefix of the job name",
                                    cli={})
    project: str | None = _option(None, "Google Cloud project (DataflowRunner)", cli={})
    region: str | None = _option(None, "Dataflow region, e.g. us-central1 (DataflowRunner)",
                                 cli={})
    temp_location: str | None = _option(
        None, "gs:// folder for staging (DataflowRunner); default gs://<output bucket>/"
        "tfrecorder-tmp", cli={})
    tfrecorder_wheel: str | None = _option(
        None, "a wheel to stage instead of the one built from this install (DataflowRunner)",
        cli={})
    wait: bool = _option(False, "DataflowRunner: block until the job ends, return the result",
                         cli={"action": "store_true"})
    progress: bool | None = _option(
        None, "progress bar of a local run; None: on a terminal or in a notebook only",
        cli={"flags": ["--no-progress"], "action": "store_false", "default": None})

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
        if self.check not in image.CHECKS:
            raise ConfigError(f"check={self.check!r}; use one of {image.CHECKS}")
        counts = self.num_shards.values() if isinstance(self.num_shards, Mapping) else [self.num_shards]
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in counts):
            raise ConfigError(f"num_shards={self.num_shards!r}; use 0 (automatic) or a positive int")
        if isinstance(self.num_shards, Mapping):
            object.__setattr__(self, "num_shards", _per_split(self.num_shards, "num_shards"))
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
        for name in ("runner", "name", "check", "project", "region", "temp_location",
                     "tfrecorder_wheel", "job_label"):
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

    @classmethod
    def from_kwargs(cls, **kwargs) -> "Options":
        """Options from keyword arguments; unknown names are a ConfigError with a suggestion."""
        known = {f.name for f in dataclasses.fields(cls)}
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


def _runner_name(name) -> str:
    """The Beam runner called ``name``, in any case ("DataFlowRunner", as TFRecorder's
    README spells it, or "flink"), or a runner class by its dotted path."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"runner={name!r}; give a Beam runner name such as 'DirectRunner'")
    wanted = name.strip().lower()
    for known in (*RUNNERS, *_UNLISTED):
        if wanted in (known.lower(), known.lower()[:-len("runner")]):
            return known
    for known, path in _UNLISTED.items():
        if name.strip() == path:
            return known
    from apache_beam.options.pipeline_options import StandardOptions

    beam_runners = sorted({*(p.rsplit(".", 1)[-1] for p in StandardOptions.ALL_KNOWN_RUNNERS),
                           *_UNLISTED})
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
        except splits.UnknownSplit:
            split = None
        if split is None:
            raise ConfigError(f"{option}: unknown split {key!r}; use train, validation or test")
        out[split] = value
    return out


def _table() -> str:
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(Options):
        default = (f.default_factory() if f.default is dataclasses.MISSING
                   else f.default)
        rows.append(f"| ``{f.name}`` | ``{default!r}`` | {f.metadata['help']} |")
    return "\n".join(rows)


Options.__doc__ = (
    "The options of a conversion; ``convert(..., **options)`` builds one and checks it.\n\n"
    + _table())
