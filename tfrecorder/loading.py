"""Output directory -> ``tf.data`` pipelines, from the metadata the writer left.

The pipeline is the one TensorFlow's data-performance guide describes: shard files read
in parallel (interleave), records batched before they are parsed (one vectorised parse
per batch), images decoded and resized in parallel, and prefetching, all AUTOTUNEd.

One more step is specific to us: the writer stored every image's height and width, so
when a resize is asked for, each JPEG is decoded by libjpeg at the smallest scale (1/2,
1/4 or 1/8) that still covers the requested size. Decoding fewer pixels is most of the
work saved; the image is then resized to exactly the requested size as usual.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from tfrecorder import layout, legacy, metadata, splits, storage
from tfrecorder.errors import ConfigError

#: Shards read at the same time at most; more only adds memory.
MAX_PARALLEL_READS = 16


class Datasets(dict):
    """``{split: tf.data.Dataset}``; TFRecorder's keys ("TRAIN", "VALIDATION") also work.

    ``label_names`` lists the label names (id i is ``label_names[i]``); ``info`` is the
    output directory's manifest.
    """

    def __init__(self, datasets: Mapping, info: metadata.Manifest):
        super().__init__(datasets)
        self.info = info
        self.label_names = info.label_names

    def __getitem__(self, key):
        return super().__getitem__(_split_key(key, self))

    def __contains__(self, key):
        try:
            return super().__contains__(_split_key(key, self))
        except KeyError:
            return False

    def get(self, key, default=None):
        return self[key] if key in self else default


def _split_key(key, available) -> str:
    try:
        name = splits.canonical(key)
    except splits.UnknownSplit:
        name = None
    if name is None or not dict.__contains__(available, name):
        raise KeyError(f"split {key!r}; this directory has {sorted(dict.keys(available))}")
    return name


def info(tfrecord_dir: str) -> metadata.Manifest:
    """The manifest of ``tfrecord_dir``: splits, counts, features, label names."""
    return metadata.read_manifest(str(tfrecord_dir))


def load(
    tfrecord_dir: str,
    split: str | None = None,
    *,
    batch_size: int | None = None,
    image_size: Sequence[int] | None = None,
    as_supervised: bool = False,
    shuffle: bool = False,
    shuffle_buffer: int = 1024,
    seed: int | None = None,
    cache: bool | str = False,
    decode_images: bool = True,
    channels: int = 3,
    deterministic: bool | None = None,
    drop_remainder: bool = False,
    with_info: bool = False,
):
    """``tf.data`` datasets of the splits written to ``tfrecord_dir``.

    Returns a ``Datasets`` dict of every split, or one dataset when ``split`` is given
    (``(dataset, info)`` with ``with_info=True``). Elements are dicts of features, or
    ``(image, label)`` pairs with ``as_supervised=True``. Images are decoded to uint8
    ``HxWxC`` (``channels`` 1, 3 or 4); with ``image_size=(h, w)`` they are resized to
    float32 ``h x w x C`` (values 0..255), as Keras' image loaders do. Raises
    IncompleteOutputError for a directory whose conversion did not finish.
    """
    import tensorflow as tf

    tfrecord_dir = str(tfrecord_dir)
    manifest = info(tfrecord_dir)
    image_key, label_key = manifest.image_key, manifest.label_key
    if image_size is not None:
        image_size = tuple(int(x) for x in image_size)
        if len(image_size) != 2 or min(image_size) <= 0:
            raise ConfigError(f"image_size={image_size!r}; give (height, width)")
    if channels not in (1, 3, 4):
        raise ConfigError(f"channels={channels!r}; use 1, 3 or 4")
    if as_supervised and (image_key is None or label_key is None):
        raise ConfigError("as_supervised=True needs an image and a label feature; this "
                          f"directory has {sorted(manifest.features)}")
    decode = decode_images and image_key is not None
    if decode and batch_size and image_size is None:
        raise ConfigError(
            "batch_size with decoded images needs image_size=(height, width): images of "
            "different sizes cannot be stacked in one batch (or pass decode_images=False)")

    if split is None:
        names = list(manifest.splits)
    else:
        try:
            names = [_split_key(split, manifest.splits)]
        except KeyError:
            raise ConfigError(f"split {split!r} is not in {tfrecord_dir}; it has "
                              f"{sorted(manifest.splits)}") from None
    built = {
        name: _pipeline(tf, tfrecord_dir, manifest, name, decode=decode, batch_size=batch_size,
                        image_size=image_size, channels=channels, as_supervised=as_supervised,
                        shuffle=shuffle, shuffle_buffer=shuffle_buffer, seed=seed, cache=cache,
                        deterministic=deterministic, drop_remainder=drop_remainder)
        for name in names
    }
    result = built[names[0]] if split is not None else Datasets(built, manifest)
    return (result, manifest) if with_info else result


def feature_spec(tf, manifest: metadata.Manifest) -> dict:
    """The parsing spec of every feature, from the manifest."""
    dtypes = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    spec = {}
    for key, f in manifest.features.items():
        if f.varlen:
            spec[key] = tf.io.VarLenFeature(dtypes[f.dtype])
        else:
            spec[key] = tf.io.FixedLenFeature(f.shape, dtypes[f.dtype])
    return spec


def _jpeg_ratio(tf, height, width, size):
    """Index 0..3 of the largest libjpeg scale 1/1, 1/2, 1/4, 1/8 that still covers ``size``."""
    th, tw = size
    index = tf.constant(0)
    for r in (2, 4, 8):
        covers = tf.logical_and((height + r - 1) // r >= th, (width + r - 1) // r >= tw)
        index += tf.cast(covers, tf.int32)
    return index


def _decoder(tf, image_size, channels, legacy_pixels: bool):
    """``(keys, decode)``: the features one image needs, and a function of a dict of them
    giving the image (uint8, or float32 resized to ``image_size``)."""
    if legacy_pixels:  # TFRecorder 2.0: base64 of raw pixels
        def decode_raw(ex):
            img = legacy.tf_pixels(tf, ex[layout.IMAGE], ex[layout.IMAGE_HEIGHT],
                                   ex[layout.IMAGE_WIDTH], channels)
            return img if image_size is None else _fit(tf, img, image_size)

        return (layout.IMAGE, layout.IMAGE_HEIGHT, layout.IMAGE_WIDTH), decode_raw

    def decode(ex):
        data = ex[layout.IMAGE]

        def any_format():
            img = tf.io.decode_image(data, channels=channels, expand_animations=False)
            img.set_shape([None, None, channels])
            return img

        if image_size is None:
            return any_format()

        def jpeg(ratio):
            return lambda: tf.io.decode_jpeg(data, channels=channels, ratio=ratio)

        ratio = _jpeg_ratio(tf, ex[layout.IMAGE_HEIGHT], ex[layout.IMAGE_WIDTH], image_size)
        index = tf.where(tf.equal(ex[layout.IMAGE_FORMAT], "jpeg"), ratio + 1, 0)
        img = tf.switch_case(index, [any_format, jpeg(1), jpeg(2), jpeg(4), jpeg(8)])
        img.set_shape([None, None, channels])
        return _fit(tf, img, image_size)

    return (layout.IMAGE, layout.IMAGE_FORMAT, layout.IMAGE_HEIGHT, layout.IMAGE_WIDTH), decode


def _fit(tf, img, image_size):
    """``img`` as float32 of ``image_size``: resized, unless it already has that size
    (images pre-sized at conversion often do)."""
    same = tf.reduce_all(tf.equal(tf.shape(img)[:2], tf.constant(image_size)))
    out = tf.cond(same, lambda: tf.cast(img, tf.float32),
                  lambda: tf.image.resize(img, image_size))
    out.set_shape([*image_size, img.shape[-1]])
    return out


def _counted_records(tf, path, expected, compression):
    """The records of one shard; at its end, an error naming the shard when it holds
    fewer or more records than the manifest says (a truncated or replaced file).

    TFRecord framing cannot show a file cut at a record boundary; the count can. It costs
    one addition per record and one comparison per shard.
    """
    end = tf.data.Dataset.from_tensors((tf.constant(b""), True))
    records = tf.data.TFRecordDataset(path, compression_type=compression).map(
        lambda r: (r, False))

    def count(n, item):
        record, last = item
        check = tf.cond(
            last,
            lambda: tf.debugging.assert_equal(
                n, expected, message=tf.strings.format(
                    "{}: the manifest says {} records; this shard holds a different number "
                    "(it was truncated or replaced). Convert again, or restore the file. Read",
                    (path, expected))),
            lambda: tf.no_op())
        with tf.control_dependencies([check]):
            return n + tf.cast(tf.logical_not(last), tf.int64), (record, last)

    return (records.concatenate(end)
            .scan(tf.constant(0, tf.int64), count)
            .filter(lambda record, last: tf.logical_not(last))
            .map(lambda record, last: record))


def _pipeline(tf, root, manifest, split, *, decode, batch_size, image_size, channels,
              as_supervised, shuffle, shuffle_buffer, seed, cache, deterministic, drop_remainder):
    AUTOTUNE = tf.data.AUTOTUNE
    files = [storage.join(root, f) for f in manifest.files(split)]
    compression = "GZIP" if manifest.compression == "gzip" else ""
    spec = feature_spec(tf, manifest)
    image_key, label_key = manifest.image_key, manifest.label_key
    legacy_format = manifest.format_version == legacy.FORMAT_VERSION
    needed, decode_one = (_decoder(tf, image_size, channels, legacy_format) if decode
                          else ((), None))

    counts = [s.num_examples for s in manifest.splits[split].shards]
    ds = tf.data.Dataset.from_tensor_slices((files, tf.constant(counts, tf.int64)))
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    if min(counts, default=0) < 0:  # no counts to check (a TFRecorder 2.0 directory)
        read = lambda f, n: tf.data.TFRecordDataset(f, compression_type=compression)  # noqa: E731
    else:
        read = lambda f, n: _counted_records(tf, f, n, compression)  # noqa: E731
    ds = ds.interleave(
        read,
        cycle_length=max(1, min(len(files), MAX_PARALLEL_READS)),
        num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if cache:
        ds = ds.cache(cache if isinstance(cache, str) else "")
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)

    def finish(ex):
        for key, f in manifest.features.items():
            if not f.varlen or key not in ex:
                continue
            inner = f.inner_shape
            width = int(np.prod(inner)) if inner else 1
            if batch_size:
                rt = tf.RaggedTensor.from_sparse(ex[key])
                if inner:  # e.g. boxes: [batch, (boxes), 4]
                    rt = tf.RaggedTensor.from_row_lengths(
                        tf.reshape(rt.values, [-1, *inner]), rt.row_lengths() // width)
                ex[key] = rt
            else:
                dense = tf.sparse.to_dense(ex[key])
                ex[key] = tf.reshape(dense, [-1, *inner]) if inner else dense
        if as_supervised:
            return ex[image_key], ex[label_key]
        return ex

    def parse_one(raw):
        ex = tf.io.parse_single_example(raw, spec)
        if decode_one is not None:
            ex[image_key] = decode_one({k: ex[k] for k in needed})
        return ex

    # Each record is parsed and its image decoded (and resized) by itself, in parallel,
    # then batched: measured faster than a batch-wide parse followed by a per-image
    # map_fn, most of all for small, pre-sized images (docs/performance.md).
    ds = ds.map(parse_one, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if batch_size:
        ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(finish, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    return ds.prefetch(AUTOTUNE)
