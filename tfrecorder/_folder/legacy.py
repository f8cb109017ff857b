"""TFRecorder 2.0's output directories, read as they are.

TFRecorder wrote, per conversion, a folder ``<output_dir>/tfrecorder-<time>-<label>/``::

    train-00000-of-00001.tfrecord.gz     gzip shards per split (train, validation or
    validation-00000-of-00001.tfrecord.gz  val, test), named by Beam's WriteToTFRecord
    test-00000-of-00001.tfrecord.gz
    transformed_metadata/schema.pbtxt    the features (TensorFlow Metadata text proto)
    transform_fn/assets/vocab_compute_and_apply_vocabulary_vocabulary
                                         label names, line i is id i
    discarded-data-*                     rows it could not read, as text

and each record held ``image``, the image's raw pixels (``PIL.Image.tobytes()``) in
web-safe base64, with ``image_height``, ``image_width`` and ``image_channels``, the
label id, and the row's ``split`` and ``image_uri``. ``manifest`` describes such a
folder as a Manifest (format version 0) so that ``load`` and ``inspect`` read it like
our own output; ``pixels`` and ``tf_pixels`` turn its ``image`` back into pixels.
"""

from __future__ import annotations

import base64
import re

from tfrecorder import _storage as storage
from tfrecorder._folder import index, layout
from tfrecorder._folder.layout import FeatureSpec
from tfrecorder._folder.manifest import Manifest, ShardInfo, SplitInfo

#: Manifest.format_version of a TFRecorder 2.0 directory.
FORMAT_VERSION = 0
SCHEMA = "transformed_metadata/schema.pbtxt"
VOCABULARY = "transform_fn/assets/vocab_compute_and_apply_vocabulary_vocabulary"
_SPLITS = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}
_FEATURE = re.compile(r'feature\s*\{\s*name:\s*"(?P<name>[^"]+)"\s*type:\s*(?P<type>[A-Z]+)')
_DTYPES = {"BYTES": "bytes", "INT": "int64", "FLOAT": "float"}


def is_legacy(folder: str) -> bool:
    """True for a folder TFRecorder 2.0 wrote (its TensorFlow Transform metadata)."""
    return storage.exists(storage.join(folder, SCHEMA))


def manifest(folder: str) -> Manifest:
    """A Manifest describing TFRecorder 2.0's output in ``folder``.

    Per-shard record counts are unknown (-1): TFRecorder did not record them; an index
    file (``tfrecorder index``) gives them.
    """
    text = storage.read_bytes(storage.join(folder, SCHEMA)).decode("utf-8")
    features: dict[str, FeatureSpec] = {}
    for m in _FEATURE.finditer(text):
        name, dtype = m["name"], _DTYPES.get(m["type"], "bytes")
        role = {layout.IMAGE: "image", "label": "label"}.get(name, "feature")
        if name in (layout.IMAGE_HEIGHT, layout.IMAGE_WIDTH, layout.IMAGE_CHANNELS,
                    layout.IMAGE_NAME):
            role = "image_info"
        features[name] = FeatureSpec(dtype, [], role)
    vocabularies = {}
    if "label" in features and storage.exists(storage.join(folder, VOCABULARY)):
        lines = storage.read_bytes(storage.join(folder, VOCABULARY)).decode("utf-8").splitlines()
        vocabularies["label"] = [line.strip() for line in lines if line.strip()]
    shards: dict[str, list[str]] = {}
    compression = None
    for name in storage.listdir(folder):
        m = layout.LEGACY_SHARD.fullmatch(name)
        if m:
            shards.setdefault(_SPLITS[m["split"]], []).append(name)
            compression = "gzip" if m["gz"] else compression
    splits = {}
    for split, files in sorted(shards.items(), key=lambda kv: layout.split_order(kv[0])):
        infos = [_shard(folder, f) for f in sorted(files)]
        counts = [s.num_examples for s in infos]
        splits[split] = SplitInfo(split, sum(counts) if min(counts) >= 0 else -1,
                                  sum(s.num_bytes for s in infos), infos)
    return Manifest(
        name="tfrecorder2", compression=compression, features=features,
        vocabularies=vocabularies, splits=splits, rows_in=-1, rows_written=-1,
        rows_quarantined=-1, format_version=FORMAT_VERSION)


def _shard(folder: str, file: str) -> ShardInfo:
    """A shard's ShardInfo: its record count is known only from an index file
    (``tfrecorder index`` writes them), else -1."""
    size = storage.size(storage.join(folder, file))
    if not storage.exists(index.path(folder, file)):
        return ShardInfo(file, -1, size)
    return ShardInfo(file, len(index.read(folder, file)), size, index.name(file))


def pixels(data: bytes, height: int, width: int):
    """The pixels of one TFRecorder 2.0 ``image`` value, as a uint8 HxWxC array.

    The channel count is taken from the data's length: TFRecorder recorded 3 for any
    mode without "L", also for RGBA images whose raw bytes have 4.
    """
    import numpy as np

    raw = np.frombuffer(base64.urlsafe_b64decode(data), np.uint8)
    return raw.reshape(height, width, raw.size // (height * width))


def png(data: bytes, height: int, width: int) -> bytes:
    """One TFRecorder 2.0 ``image`` value as PNG bytes (for ``inspect``)."""
    import io

    from tfrecorder._folder.image_headers import pil

    Image = pil()
    array = pixels(data, height, width)
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[array.shape[2]]
    out = io.BytesIO()
    Image.fromarray(array if array.shape[2] > 1 else array[:, :, 0], mode).save(out, "PNG")
    return out.getvalue()


def tf_pixels(tf, data, height, width, channels: int):
    """In a tf.data function: a TFRecorder 2.0 ``image`` value -> uint8 HxWx``channels``."""
    flat = tf.io.decode_raw(tf.io.decode_base64(data), tf.uint8)
    h, w = tf.cast(height, tf.int32), tf.cast(width, tf.int32)
    have = tf.size(flat) // (h * w)
    img = tf.reshape(flat, tf.stack([h, w, have]))

    def rgb():
        return tf.cond(have >= 3, lambda: img[:, :, :3],
                       lambda: tf.tile(img[:, :, :1], [1, 1, 3]))

    if channels == 3:
        out = rgb()
    elif channels == 1:
        out = tf.cond(have >= 3, lambda: tf.image.rgb_to_grayscale(img[:, :, :3]),
                      lambda: img[:, :, :1])
    else:
        alpha = tf.cond(tf.equal(have % 2, 0), lambda: img[:, :, -1:],
                        lambda: tf.fill(tf.stack([h, w, 1]), tf.constant(255, tf.uint8)))
        out = tf.concat([rgb(), alpha], axis=2)
    out.set_shape([None, None, channels])
    return out
