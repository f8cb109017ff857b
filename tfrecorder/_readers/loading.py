"""Output directory -> ``tf.data`` pipelines, from the metadata the writer left.

The pipeline follows TensorFlow's data-performance guide: shard files read in parallel
(interleave, ``streams``), then each record parsed and its image decoded and resized by
itself (``decoding``), in one parallel map, and only then batched (measured faster than
a batch-wide parse; see docs/performance.md), and prefetching, all AUTOTUNEd.

The manifest's counts make every dataset's length exact (``cardinality()``); input
pipeline ``i`` of ``n`` reads its part, and ``shuffle="global"`` a seeded permutation of the
whole split (``streams``). This module holds the public calls (``load``, ``info``,
``Datasets``), their argument checks, and the pipeline of one split.
"""

from __future__ import annotations

import numbers
from typing import Mapping, Sequence

import numpy as np

from tfrecorder import _extras
from tfrecorder._errors import ConfigError
from tfrecorder._folder import layout, legacy, view
from tfrecorder._folder.manifest import Manifest
from tfrecorder._folder import split_names
from tfrecorder._readers import cache as _cache, partition
from tfrecorder._readers.decoding import _decoder, decode_mask, feature_spec, in_our_keys
from tfrecorder._readers.streams import (MAX_PARALLEL_READS, _counted_records,
                                         _pipeline_records, _same_conversion, _verified)


class Datasets(dict):
    """``{split: tf.data.Dataset}``; TFRecorder's keys ("TRAIN", "VALIDATION") also work.

    ``label_names`` lists the label names (id i is ``label_names[i]``); ``info`` is the
    output directory's manifest.
    """

    def __init__(self, datasets: Mapping, info: Manifest):
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
        name = split_names.canonical(key)
    except split_names.UnknownSplit:
        name = None
    if name is None or not dict.__contains__(available, name):
        raise KeyError(f"split {key!r}; this directory has {sorted(dict.keys(available))}")
    return name


def info(tfrecord_dir: str, version: int | None = None) -> Manifest:
    """The manifest of ``tfrecord_dir`` (of its version ``version``; the latest by
    default): splits, live record counts, features, label names."""
    return view.open_version(str(tfrecord_dir), version).manifest


def load(
    tfrecord_dir: str,
    split: str | None = None,
    *,
    batch_size: int | None = None,
    image_size: Sequence[int] | None = None,
    as_supervised: bool = False,
    shuffle: bool | str = False,
    shuffle_buffer: int = 1024,
    seed: int | None = None,
    cache: bool | str = False,
    decode_images: bool = True,
    channels: int = 3,
    deterministic: bool | None = None,
    drop_remainder: bool = False,
    with_info: bool = False,
    shard: tuple[int, int] | None = None,
    input_context=None,
    cache_dir: str | None = None,
    cache_limit: int | str | None = None,
    version: int | None = None,
):
    """``tf.data`` datasets of the splits written to ``tfrecord_dir``.

    Returns a ``Datasets`` dict of every split, or one dataset when ``split`` is given
    (``(dataset, info)`` with ``with_info=True``). Elements are dicts of features, or
    ``(image, label)`` pairs with ``as_supervised=True``. Images are decoded to uint8
    ``HxWxC`` (``channels`` 1, 3 or 4); with ``image_size=(h, w)`` they are resized to
    float32 ``h x w x C`` (values 0..255), as Keras' image loaders do. A segmentation
    record's ``segmentation_mask`` is decoded beside its image to its class ids, uint8
    ``H x W x 1`` (``tf.io.decode_png(mask, channels=1)``; resized to ``image_size`` by
    nearest neighbour). Raises
    IncompleteOutputError for a directory whose conversion did not finish.

    Every dataset knows its length (``cardinality()``: records, or batches). ``shard=(i, n)``
    or ``input_context=`` (a ``tf.distribute.InputContext``) gives input pipeline ``i`` of
    ``n`` its part: disjoint, together every record once, sizes within one record.
    ``shuffle=True`` shuffles file order and a window of ``shuffle_buffer`` records;
    ``shuffle="global"`` reads every record once per epoch in a seeded permutation of the
    whole split, a new one each epoch.

    ``version=k`` reads version ``k`` of a folder that updates have changed (None: the
    latest): only its live records, with its label names, even while a newer version
    is published (docs/loading.md); ConfigError naming the versions there are when
    there is no version ``k``.

    ``shuffle="global"`` on ``gs://`` reads whole shards into the machine's shard cache
    and each record from there: ``cache_dir`` (default ``$TFRECORDER_CACHE`` or
    ``~/.cache/tfrecorder``), ``cache_limit`` (bytes or ``"10GB"``; 0: a ranged request
    per record). Other reads stream each shard in order and need no cache
    (docs/bucket.md).
    """
    # A Folder hands its one opening (``load_version``) instead of a path.
    opened = (tfrecord_dir if isinstance(tfrecord_dir, view.Version)
              else view.open_version(str(tfrecord_dir), version))
    image_size = _check_arguments(batch_size, image_size, shuffle_buffer, seed, channels)
    tf = _extras.require("tensorflow", "tfrecorder.load()")

    tfrecord_dir = opened.output_dir
    manifest = opened.manifest
    image_key, label_key = manifest.image_key, manifest.label_key
    if as_supervised and (image_key is None or label_key is None):
        raise ConfigError("as_supervised=True needs an image and a label feature; this "
                          f"directory has {sorted(manifest.features)}")
    input_pipeline = _input_pipeline(shard, input_context)
    if shuffle not in (True, False, "global"):
        raise ConfigError(f"shuffle={shuffle!r}; use False, True (a window of "
                          f"shuffle_buffer records) or 'global' (the whole split)")
    if shuffle == "global" and cache:
        raise ConfigError("cache with shuffle='global' would replay the first epoch's order "
                          "every epoch; drop cache, or use shuffle=True")
    if shuffle == "global" and input_pipeline[1] > 1 and seed is None:
        raise ConfigError(f"shuffle='global' with {input_pipeline[1]} input pipelines needs "
                          f"seed=: every one must cut the same permutation of the split")
    shard_cache = _cache.for_source(tfrecord_dir, cache_dir, cache_limit)
    if shuffle == "global" and seed is None:
        import random

        seed = random.SystemRandom().randrange(1 << 31)
    decode = decode_images and image_key is not None
    if decode and batch_size and image_size is None:
        raise ConfigError(
            "batch_size with decoded images needs image_size=(height, width): images of "
            "different sizes cannot be stacked in one batch (or pass decode_images=False)")

    names = list(manifest.splits) if split is None else [opened.split_name(split)]
    built = {
        name: _pipeline(tf, opened.view(name), decode=decode, batch_size=batch_size,
                        image_size=image_size, channels=channels, as_supervised=as_supervised,
                        shuffle=shuffle, shuffle_buffer=shuffle_buffer, seed=seed, cache=cache,
                        deterministic=deterministic, drop_remainder=drop_remainder,
                        input_pipeline=input_pipeline, shard_cache=shard_cache)
        for name in names
    }
    result = built[names[0]] if split is not None else Datasets(built, manifest)
    return (result, manifest) if with_info else result



def load_version(opened: view.Version, split: str | None = None, **options):
    """``load`` of the version ``opened`` (``Folder.load``): every split's pipeline reads
    that one opening."""
    return load(opened, split, **options)


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_arguments(batch_size, image_size, shuffle_buffer, seed, channels):
    """``image_size`` as a ``(height, width)`` tuple; a ConfigError naming the first
    argument that cannot work (TensorFlow would fail later and less clearly, or, for
    ``batch_size=0``, not batch at all)."""
    if batch_size is not None and not (_whole(batch_size) and batch_size > 0):
        raise ConfigError(f"batch_size={batch_size!r}; give a whole number of records per "
                          f"batch, 1 or more, or None for no batching")
    if image_size is not None:
        if _whole(image_size):
            raise ConfigError(f"image_size={image_size!r}; give (height, width), e.g. "
                              f"({image_size}, {image_size})")
        try:
            size = tuple(image_size)
        except TypeError:
            size = ()
        if len(size) != 2 or not all(_whole(x) and x > 0 for x in size):
            raise ConfigError(f"image_size={image_size!r}; give (height, width) in pixels, "
                              f"e.g. (224, 224)")
        image_size = tuple(int(x) for x in size)
    if not (_whole(shuffle_buffer) and shuffle_buffer > 0):
        raise ConfigError(f"shuffle_buffer={shuffle_buffer!r}; give a whole number of "
                          f"records, 1 or more (1024 by default)")
    if seed is not None and not _whole(seed):
        raise ConfigError(f"seed={seed!r}; give a whole number, e.g. 42, or None for a "
                          f"different order each time")
    if not _whole(channels) or channels not in (1, 3, 4):
        raise ConfigError(f"channels={channels!r}; use 1 (grey), 3 (RGB) or 4 (RGBA)")
    return image_size


def _input_pipeline(shard, input_context) -> tuple[int, int]:
    """``(number, count)`` of this input pipeline, from ``shard=`` or a tf.distribute InputContext."""
    if shard is not None and input_context is not None:
        raise ConfigError("give shard=(index, count) or input_context=, not both")
    if input_context is not None:
        try:
            shard = (input_context.input_pipeline_id, input_context.num_input_pipelines)
        except AttributeError:
            raise ConfigError(f"input_context={input_context!r}; give the "
                              f"tf.distribute.InputContext that distribute_datasets_from_"
                              f"function passes to its function") from None
    return (0, 1) if shard is None else partition.check_shard(shard)


def _cache_file(cache: str, manifest: Manifest, split: str, input_pipeline) -> str:
    """The cache files' prefix for ``cache=PATH``: one per conversion, split and input
    pipeline's part, so that no dataset replays another's records (TensorFlow's cache replays
    whatever its files hold)."""
    i, n = input_pipeline
    return f"{cache}.{manifest.generation or 'legacy'}.{split}.part-{i}-of-{n}"


def _pipeline(tf, v: view.View, *, decode, batch_size, image_size, channels, as_supervised,
              shuffle, shuffle_buffer, seed, cache, deterministic, drop_remainder,
              input_pipeline=(0, 1), shard_cache=None):
    AUTOTUNE = tf.data.AUTOTUNE
    root, manifest, split = v.output_dir, v.manifest, v.split
    files = v.files
    compression = "GZIP" if manifest.compression == "gzip" else ""
    spec = feature_spec(tf, manifest)
    ours = in_our_keys(tf, manifest)  # None where the records hold our keys
    image_key, label_key = manifest.image_key, manifest.label_key
    legacy_format = manifest.format_version == legacy.FORMAT_VERSION
    needed, decode_one = (_decoder(tf, image_size, channels, legacy_format) if decode
                          else ((), None))

    counts = v.counts
    known = v.counts_known  # TFRecorder 2.0 did not record them
    if input_pipeline[1] > 1 or shuffle == "global":
        v.need_counts("shard= and shuffle='global'")
    if input_pipeline[1] > 1 or shuffle == "global" or v.retired:
        ds, length = _pipeline_records(tf, v, compression, input_pipeline, shuffle, seed,
                                       deterministic,
                                       shard_cache if v.version.generation else None)
    else:
        ds = tf.data.Dataset.from_tensor_slices((files, tf.constant(counts, tf.int64)))
        if shuffle:
            ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        if not known:
            read = lambda f, n: tf.data.TFRecordDataset(f, compression_type=compression)  # noqa: E731
        else:
            read = lambda f, n: _counted_records(tf, f, n, compression)  # noqa: E731
        ds = ds.interleave(
            read,
            cycle_length=max(1, min(len(files), MAX_PARALLEL_READS)),
            num_parallel_calls=AUTOTUNE, deterministic=deterministic)
        length = sum(counts) if known else None
    # Records from the shard cache are the conversion's by construction (an entry is
    # cached only once its conversion was checked, under a name of that conversion).
    from_cache = shuffle == "global" and shard_cache is not None
    if v.version.generation and not from_cache:
        ds = _verified(tf, ds, _same_conversion(tf, root, v.version.pin, v.version.generation))
    if length is not None:
        # The exact length, from the manifest: batching then knows the batch count, and
        # Keras the steps per epoch, before the first epoch ends.
        ds = ds.apply(tf.data.experimental.assert_cardinality(length))
    if cache:
        ds = ds.cache(_cache_file(cache, manifest, split, input_pipeline)
                      if isinstance(cache, str) else "")
    if shuffle is True:
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
        if ours is not None:
            ex = ours(ex)
        if decode_one is not None:
            ex[image_key] = decode_one({k: ex[k] for k in needed})
            if layout.SEGMENTATION_MASK in ex:  # class ids, beside the decoded image
                ex[layout.SEGMENTATION_MASK] = decode_mask(tf, ex[layout.SEGMENTATION_MASK],
                                                           image_size)
        return ex

    # Each record is parsed and its image decoded (and resized) by itself, in parallel,
    # then batched: measured faster than a batch-wide parse followed by a per-image
    # map_fn, most of all for small, pre-sized images (docs/performance.md).
    ds = ds.map(parse_one, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if batch_size:
        ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(finish, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    return ds.prefetch(AUTOTUNE)
