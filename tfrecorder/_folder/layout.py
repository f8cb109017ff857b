"""The on-disk layout, defined once: file names, feature keys and split order.

The writer (``shard``, ``run_metadata``), the readers (``decoding``, ``inspection``,
``read``, ``access``) and ``convert`` all take these names from here, so they cannot
disagree::

    OUT/
      tfrecorder.json                    MANIFEST, written last
      dataset_info.json, features.json   DATASET_INFO, FEATURES (TFDS metadata)
      <feature>.labels.txt               labels_file(feature): line i is the name of id i
      NAME-<split>.tfrecord-SSSSS-of-NNNNN[.gz]   ShardName (version 1)
      NAME-<split>-vKKKKK-TTTTTTTT.tfrecord-...   ShardName of a later version: TAG
      errors.jsonl                       ERRORS, one line per quarantined row
      .tfrecorder-tmp/                   TMP_DIR, only while a run is under way
"""

from __future__ import annotations

import dataclasses
import re
import uuid

from tfrecorder._folder import example
from tfrecorder._folder.split_names import SPLITS

MANIFEST = "tfrecorder.json"
ERRORS = "errors.jsonl"
DATASET_INFO = "dataset_info.json"
FEATURES = "features.json"
#: The data report (duplicates, leaks, conflicts, statistics) of the conversion.
QUALITY = "quality.json"
#: Where shards are written before they are renamed into place; removed at the end.
TMP_DIR = ".tfrecorder-tmp"
#: Held while a conversion writes the directory (see ``lock``).
LOCK = ".tfrecorder.lock"
#: A lock being created: written whole under this name, then linked to LOCK (a moment).
_LOCK_IN_THE_MAKING = re.compile(re.escape(LOCK) + r"\.[0-9a-f]{12}\.tmp")


def is_lock_in_the_making(name: str) -> bool:
    """True for the temporary name a run writes its lock under before it links it."""
    return _LOCK_IN_THE_MAKING.fullmatch(name) is not None


#: A file being written whole under a temporary name beside its own, then renamed
#: (``storage.temp_name``): ``quality.json.0123456789ab.tmp``.
_IN_THE_WRITING = re.compile(r"(?P<name>.+)\.[0-9a-f]{12}\.tmp")


def written_as(name: str) -> str | None:
    """The name a temporary file ``name`` is written for (``quality.json`` for
    ``quality.json.0123456789ab.tmp``), else None."""
    m = _IN_THE_WRITING.fullmatch(name) if isinstance(name, str) else None
    return m["name"] if m else None


def shard_temp_name(filename: str) -> str:
    """The temporary name a shard file is written under before its rename: unique, so a
    retried writer never appends to a file another attempt left."""
    return f"{filename}.{uuid.uuid4().hex}.part"


#: A staged shard task's file, ``<shard>.task``, in the run's own folder. With a shard's
#: temporary name, the longest name a run gives a shard's file on its way, which the
#: arguments' checks allow for before the run starts.
TASK_SUFFIX = ".task"


LABELS_SUFFIX = ".labels.txt"
#: The OD API's label map beside a labels file, in the model_garden layout (garden).
LABEL_MAP_SUFFIX = ".label_map.pbtxt"

# --- features -------------------------------------------------------------------------

IMAGE = "image"
IMAGE_FORMAT = "image_format"
IMAGE_NAME = "image_name"
#: The path or URI the image was read from, resolved (a relative path made absolute).
#: Directories written before it existed have ``image_name`` only.
IMAGE_URI = "image_uri"
IMAGE_HEIGHT = "image_height"
IMAGE_WIDTH = "image_width"
IMAGE_CHANNELS = "image_channels"

#: The image features every record with an image holds, and their dtypes.
IMAGE_FEATURES = {
    IMAGE: example.BYTES,
    IMAGE_FORMAT: example.BYTES,
    IMAGE_NAME: example.BYTES,
    IMAGE_URI: example.BYTES,
    IMAGE_HEIGHT: example.INT64,
    IMAGE_WIDTH: example.INT64,
    IMAGE_CHANNELS: example.INT64,
}

#: A semantic segmentation record's mask: its PNG of class ids (one 8-bit channel, the
#: image's size), stored as the file's bytes; and that file's format ("png").
SEGMENTATION_MASK = "segmentation_mask"
SEGMENTATION_MASK_FORMAT = "segmentation_mask_format"

#: An object-detection record's boxes (ymin, xmin, ymax, xmax per box, relative,
#: flattened) and their label ids, under TFDS's keys.
BBOX = "objects/bbox"
LABEL = "objects/label"
#: The columns of an object-detection table, one row per box. A rows file keeps a
#: detection record's boxes in this order, from the label on (``rows.features``), so
#: the order is part of the format.
DETECTION_COLUMNS = ["split", "image_uri", "label", "x_min", "y_min", "x_max", "y_max"]


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """How one feature is stored: dtype, shape ([] scalar, None or [-1, ...] variable
    length), and role ("image", "image_info", "label", "bbox" or "feature")."""

    dtype: str
    shape: list[int] | None = dataclasses.field(default_factory=list)
    role: str = "feature"

    @property
    def varlen(self) -> bool:
        """True when records hold a variable number of values for this feature."""
        return self.shape is None or (bool(self.shape) and self.shape[0] == -1)

    @property
    def inner_shape(self) -> list[int]:
        """The shape of one item of a variable-length feature (``[4]`` for boxes)."""
        return list(self.shape[1:]) if self.shape else []


def image_feature_specs() -> dict[str, FeatureSpec]:
    """The FeatureSpec of each image feature."""
    return {key: FeatureSpec(dtype, [], "image" if key == IMAGE else "image_info")
            for key, dtype in IMAGE_FEATURES.items()}


# --- file names -----------------------------------------------------------------------

#: TFDS's rule for dataset names; file names are built from it, so it is ours too.
NAME_PATTERN = re.compile(r"[a-zA-Z]\w*")
_SHARD_PATTERN = re.compile(
    r"(?P<name>[a-zA-Z]\w*)-(?P<split>[a-z][a-z0-9_]*)"
    r"(?:-v(?P<version>\d{5})(?:-(?P<tag>[0-9a-f]{8}))?)?\.tfrecord-"
    r"(?P<number>\d{5})-of-(?P<count>\d{5})(?P<gz>\.gz)?"
)
#: TFDS's name for the shard file template, recorded in dataset_info.json.
TFDS_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"


@dataclasses.dataclass(frozen=True, order=True)
class ShardName:
    """The fields of a shard file name such as ``data-train.tfrecord-00002-of-00008``, or
    ``data-train-v00003-1a2b3c4d.tfrecord-00000-of-00002`` for a shard that the update
    (or compaction) publishing version 3 wrote, ``1a2b3c4d`` its run's ``tag``. Version
    1's shards carry neither (TFDS's own names); a later version's written before tags
    existed carry no tag (``data-train-v00003.tfrecord-...``), and still read."""

    name: str
    split: str
    number: int                      # 0 .. count - 1: the shard's place in its split
    count: int
    gzip: bool = False
    version: int = 1
    tag: str = ""                    # the run's TAG; "" for version 1 and older names

    def __str__(self) -> str:
        suffix = ".gz" if self.gzip else ""
        return (f"{self.name}-{self.split}{_version_part(self.version, self.tag)}.tfrecord-"
                f"{self.number:05d}-of-{self.count:05d}{suffix}")

    @classmethod
    def parse(cls, filename: str) -> "ShardName | None":
        """The fields of ``filename``, or None when it is not a shard name."""
        if not isinstance(filename, str):
            return None
        m = _SHARD_PATTERN.fullmatch(filename)
        if m is None:
            return None
        version = int(m["version"]) if m["version"] is not None else 1
        if m["version"] is not None and version < 2:
            return None  # version 1's shards carry no version: one name per shard
        return cls(m["name"], m["split"], int(m["number"]), int(m["count"]), bool(m["gz"]),
                   version, m["tag"] or "")


def tfds_template(version: int = 1, tag: str = "") -> str:
    """TFDS's file-name template of the shards of ``version`` written by the run of
    ``tag`` (``{DATASET}-{SPLIT}-v00003-1a2b3c4d.{FILEFORMAT}-{SHARD_X_OF_Y}``)."""
    return TFDS_TEMPLATE.replace("{SPLIT}", "{SPLIT}" + _version_part(version, tag))


#: A run's tag: 8 hex digits that a version after the first puts into every name it
#: writes (its shards, their index and rows files, its folder ``versions/KKKKK-TAG/``).
#: Two runs that publish the same version number then never write one name, unless
#: they write the same bytes there (the tag is derived from what they write), and the
#: put-if-absent of ``versions/KKKKK.json`` alone decides which of them is the version.
_TAG = re.compile(r"[0-9a-f]{8}")


def run_tag(digest) -> str:
    """The tag of a run whose plan ``digest`` (a ``hashlib`` object) has taken in: its
    parent version's generation and every input that decides its bytes."""
    return digest.hexdigest()[:8]


def is_tag(tag) -> bool:
    """True for a run's tag (8 lowercase hex digits), or "" (no tag)."""
    return tag == "" or (isinstance(tag, str) and _TAG.fullmatch(tag) is not None)


def _version_part(version: int, tag: str) -> str:
    """``-vKKKKK-TAG`` (``-vKKKKK`` without a tag) in a later version's names; nothing
    in version 1's."""
    if version <= 1:
        return ""
    return f"-v{number(version)}" + (f"-{tag}" if tag else "")


# --- versions (docs/format.md, "Versions and the data report") ------------------------

#: Every published version's manifest (``versions/00001.json``), and the files only one
#: version has, in its folder (``versions/00002-1a2b3c4d/index/<shard>.idx``, its live
#: records; ``versions/00002/`` for a version written before tags).
VERSIONS_DIR = "versions"
#: One rows file per shard (``rows/<shard>.rows.jsonl.gz``): what updates compare.
ROWS_DIR = "rows"
ROWS_SUFFIX = ".rows.jsonl.gz"


def version_manifest(version: int) -> str:
    """``versions/00002.json``: the manifest of ``version``, never rewritten."""
    return f"{VERSIONS_DIR}/{number(version)}.json"


def version_folder(version: int, tag: str = "") -> str:
    """``versions/00002-1a2b3c4d``: the folder of the files only ``version`` (written by
    the run of ``tag``) has; ``versions/00002`` without a tag."""
    return f"{VERSIONS_DIR}/{number(version)}" + (f"-{tag}" if tag else "")


def live_index(version: int, shard: str, tag: str = "") -> str:
    """``versions/00002-TAG/index/<shard>.idx``: the records of ``shard`` live in
    ``version``."""
    return f"{version_folder(version, tag)}/index/{shard}.idx"


def version_quality(version: int, tag: str = "") -> str:
    """``versions/00002-TAG/quality.json``: the data report of ``version``."""
    return version_copy(version, QUALITY, tag)


#: The files at the folder's top that describe its latest version (TFDS reads its two
#: there). A version after the first writes its own under its name first
#: (``version_copy``) and puts them at the top only once its manifest is published, so
#: that until then every reader sees its parent whole, and a run killed in between is
#: completed from them by the next.
LATEST_FILES = (QUALITY, DATASET_INFO, FEATURES, ERRORS)


def version_copy(version: int, name: str, tag: str = "") -> str:
    """``versions/00002-TAG/dataset_info.json``: ``version``'s own copy of a top file."""
    return f"{version_folder(version, tag)}/{name}"


def rows_file(shard: str) -> str:
    """``rows/<shard>.rows.jsonl.gz``: one line per record of ``shard``, in file order."""
    return f"{ROWS_DIR}/{shard}{ROWS_SUFFIX}"


_VERSION_FILE = re.compile(r"versions/(?P<version>\d{5})\.json")


def parse_version_manifest(name: str) -> int | None:
    """The version of a ``versions/KKKKK.json`` name, else None."""
    m = _VERSION_FILE.fullmatch(name) if isinstance(name, str) else None
    return int(m["version"]) if m and int(m["version"]) >= 1 else None


_LIVE_INDEX = re.compile(
    r"versions/(?P<version>\d{5})(?:-[0-9a-f]{8})?/index/(?P<shard>[^/]+)\.idx")


def parse_live_index(name: str) -> tuple[int, str] | None:
    """``(version, shard)`` of a live index file's name, else None."""
    m = _LIVE_INDEX.fullmatch(name) if isinstance(name, str) else None
    if m is None or ShardName.parse(m["shard"]) is None:
        return None
    return int(m["version"]), m["shard"]


#: The names a conversion gives the files it writes into its output folder.
_SHARD_TEXT = re.sub(r"\(\?P<\w+>", "(?:", _SHARD_PATTERN.pattern)  # no group names
_OUTPUT_NAME = re.compile(
    rf"(?:index/|versions/\d{{5}}(?:-[0-9a-f]{{8}})?/index/)?{_SHARD_TEXT}(?:\.idx)?"
    rf"|rows/{_SHARD_TEXT}{re.escape(ROWS_SUFFIX)}"
    r"|versions/\d{5}\.json"
    rf"|versions/\d{{5}}(?:-[0-9a-f]{{8}})?/(?:{'|'.join(map(re.escape, LATEST_FILES))})"
    r"|[^/\0]+\.labels\.txt"
    r"|[^/\0]+\.label_map\.pbtxt"  # the label map of the model_garden layout (garden)
    rf"|{re.escape(MANIFEST)}|{re.escape(ERRORS)}|{re.escape(DATASET_INFO)}|{re.escape(FEATURES)}"
    rf"|{re.escape(QUALITY)}"
)


def is_output_name(name: str) -> bool:
    """True for a name a conversion writes into its output folder: a shard, its index
    file, a labels file or a metadata file. Names read back from a manifest or a ledger
    must be such names; anything else (``../x``, ``/etc/x``) is refused."""
    if not isinstance(name, str) or name.startswith("."):
        return False
    m = _OUTPUT_NAME.fullmatch(name)
    if m is None:
        return False
    # an index file is "index/<shard>.idx" or "versions/KKKKK/index/<shard>.idx", and
    # only that
    return (name.startswith("index/") or "/index/" in name) == name.endswith(".idx")


def shard_of(name: str) -> ShardName | None:
    """The shard the file ``name`` belongs to: the shard itself, or its index, live
    index or rows file; None for any other name."""
    if not isinstance(name, str):
        return None
    base = name.rsplit("/", 1)[-1]
    for suffix in (ROWS_SUFFIX, ".idx"):
        base = base.removesuffix(suffix)
    return ShardName.parse(base)


@dataclasses.dataclass(frozen=True)
class Declared:
    """What a conversion declares, which fixes the names it writes: the dataset's name,
    its splits, and the features it writes a labels file for. A name read back from a
    manifest or a ledger passes ``is_output_name`` whoever put it there; only this
    tells a shard of another dataset (``mine-train.tfrecord-00000-of-00001``) or the
    labels file of a feature the conversion does not have (``notes.labels.txt``), both
    the user's, from the conversion's own files."""

    name: str
    splits: frozenset = frozenset()
    labelled: frozenset = frozenset()

    def writes(self, name: str) -> bool:
        """True for a name this conversion writes: an output name whose shard (if it is
        a shard's file) is of this dataset and one of its splits, and whose labels file
        (if it is one) is of one of its labelled features."""
        if not is_output_name(name):
            return False
        shard = shard_of(name)
        if shard is not None:
            return shard.name == self.name and shard.split in self.splits
        if name.endswith(LABELS_SUFFIX):
            return name in {labels_file(k) for k in self.labelled}
        if name.endswith(LABEL_MAP_SUFFIX):
            return name in {escape(k) + LABEL_MAP_SUFFIX for k in self.labelled}
        return True


def escape(key: str) -> str:
    """A feature key as a file-name component: ``/`` (nested keys such as ``objects/label``,
    ``image/encoded``) becomes ``-``; every other character stays."""
    return key.replace("/", "-")


def labels_file(feature: str) -> str:
    """``label`` -> ``label.labels.txt`` (TFDS's name for a ClassLabel's names file)."""
    return f"{escape(feature)}{LABELS_SUFFIX}"


def split_order(name: str) -> tuple[int, str]:
    """Sort key of split names: train, validation, test, then any other by name."""
    return (SPLITS.index(name) if name in SPLITS else len(SPLITS), name)


# --- names spelled here only (a test looks for them anywhere else) --------------------

#: The folder of index files (``index/<shard>.idx``), and an index file's suffix.
INDEX_DIR = "index"
INDEX_SUFFIX = ".idx"
#: A run's list of the files it will put into the folder, in its own folder under TMP_DIR.
LEDGER = "ledger.json"
#: TFRecorder 2.0's shard names (``train-00000-of-00004.tfrecord.gz``), read, never written.
LEGACY_SHARD = re.compile(
    r"(?P<split>train|validation|val|test)-\d{5}-of-\d{5}\.tfrecord(?P<gz>\.gz)?")


def number(k: int) -> str:
    """A version's or a block's number as names write it: five digits, ``00002``."""
    return f"{k:05d}"


def spill_block(split: str, k: int) -> str:
    """``train.part-00003``: block ``k`` of a split's rows spilled to disk while a run
    stages them (in the run's own folder)."""
    return f"{split}.part-{number(k)}"
