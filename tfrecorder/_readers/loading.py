"""Output directory -> ``tf.data`` pipelines, from the metadata the writer left.

The pipeline follows TensorFlow's data-performance guide: shard files read in parallel
(interleave), then each record parsed and its image decoded and resized by itself, in
one parallel map, and only then batched (measured faster than a batch-wide parse; see
docs/performance.md), and prefetching, all AUTOTUNEd.

One more step is specific to us: the writer stored every image's height and width, so
when a resize is asked for, each JPEG is decoded by libjpeg at the smallest scale (1/2,
1/4 or 1/8) that still covers the requested size. Decoding fewer pixels is most of the
work saved; the image is then resized to exactly the requested size as usual.

The manifest's counts make every dataset's length exact (``cardinality()``), and the
index files (``index.py``) let a reader start at any record: reader ``i`` of ``n``
(``shard=``, ``input_context=``) reads its part of the records (``partition.py``) with
one seek per file, and ``shuffle="global"`` reads each record by its offset, in a
seeded permutation of the whole split.
"""

from __future__ import annotations

import numbers
from typing import Mapping, Sequence

import numpy as np

from tfrecorder._readers import cache as _cache, partition
from tfrecorder._folder import layout, legacy, view
from tfrecorder._inputs import splits
from tfrecorder._errors import ConfigError
from tfrecorder._folder.manifest import Manifest

#: Shards read at the same time at most; more only adds memory.
MAX_PARALLEL_READS = 16
#: A reader's part is cut into runs of at least this many records, read in parallel.
MIN_RUN = 256
#: Read buffer of a run of records started at an offset.
RUN_BUFFER = 256 << 10
#: Records read before the manifest is read again to see that they are the opened
#: conversion's, and handed on only then (``_verified``).
CHECK_EVERY = 64


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
        name = splits.canonical(key)
    except splits.UnknownSplit:
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
    float32 ``h x w x C`` (values 0..255), as Keras' image loaders do. Raises
    IncompleteOutputError for a directory whose conversion did not finish.

    Every dataset knows its length (``cardinality()``: records, or batches). ``shard=(i, n)``
    or ``input_context=`` (a ``tf.distribute.InputContext``) gives reader ``i`` of ``n``
    its part: disjoint, together every record once, sizes within one record.
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
    return load_version(
        view.open_version(str(tfrecord_dir), version), split, cache_dir=cache_dir,
        cache_limit=cache_limit, batch_size=batch_size, image_size=image_size,
        as_supervised=as_supervised, shuffle=shuffle,
        shuffle_buffer=shuffle_buffer, seed=seed, cache=cache,
        decode_images=decode_images, channels=channels,
        deterministic=deterministic, drop_remainder=drop_remainder,
        with_info=with_info, shard=shard, input_context=input_context)


def load_version(
    opened: view.Version,
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
):
    """``load`` of the version ``opened`` (``Folder.load``): every split's pipeline reads
    that one opening."""
    image_size = _check_arguments(batch_size, image_size, shuffle_buffer, seed, channels)
    import tensorflow as tf

    tfrecord_dir = opened.output_dir
    manifest = opened.manifest
    image_key, label_key = manifest.image_key, manifest.label_key
    if as_supervised and (image_key is None or label_key is None):
        raise ConfigError("as_supervised=True needs an image and a label feature; this "
                          f"directory has {sorted(manifest.features)}")
    reader = _reader(shard, input_context)
    if shuffle not in (True, False, "global"):
        raise ConfigError(f"shuffle={shuffle!r}; use False, True (a window of "
                          f"shuffle_buffer records) or 'global' (the whole split)")
    if shuffle == "global" and cache:
        raise ConfigError("cache with shuffle='global' would replay the first epoch's order "
                          "every epoch; drop cache, or use shuffle=True")
    if shuffle == "global" and reader[1] > 1 and seed is None:
        raise ConfigError(f"shuffle='global' with {reader[1]} readers needs seed=: every "
                          f"reader must cut the same permutation of the split")
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
                        reader=reader, shard_cache=shard_cache)
        for name in names
    }
    result = built[names[0]] if split is not None else Datasets(built, manifest)
    return (result, manifest) if with_info else result


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
                          f"different order each run")
    if not _whole(channels) or channels not in (1, 3, 4):
        raise ConfigError(f"channels={channels!r}; use 1 (grey), 3 (RGB) or 4 (RGBA)")
    return image_size


def _reader(shard, input_context) -> tuple[int, int]:
    """``(index, count)`` of this reader, from ``shard=`` or a tf.distribute InputContext."""
    if shard is not None and input_context is not None:
        raise ConfigError("give shard=(index, count) or input_context=, not both")
    if input_context is not None:
        try:
            shard = (input_context.input_pipeline_id, input_context.num_input_pipelines)
        except AttributeError:
            raise ConfigError(f"input_context={input_context!r}; give the "
                              f"tf.distribute.InputContext that distribute_datasets_from_"
                              f"function passes to its function") from None
    return (0, 1) if shard is None else partition.check_reader(shard)


def feature_spec(tf, manifest: Manifest) -> dict:
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

    # Every decoder gives 3 channels. For 1 or 4, an image is decoded to the channels it
    # has and converted (JPEG and GIF never decode to 4; GIF, BMP and CMYK JPEG never to
    # 1), except a JPEG, which has no alpha and, unless CMYK, decodes to grey directly.
    def decode(ex):
        data = ex[layout.IMAGE]

        def webp_rgb():
            # TensorFlow decodes a WebP only to the channels it has, 3 or 4 (3 of one
            # with alpha is refused): its alpha is dropped after.
            img = tf.io.decode_image(data, channels=0, expand_animations=False)
            return tf.ensure_shape(img[..., :3], [None, None, 3])

        def any_format():
            if channels == 3:
                return tf.cond(tf.equal(ex[layout.IMAGE_FORMAT], "webp"), webp_rgb,
                               lambda: tf.io.decode_image(data, channels=3,
                                                          expand_animations=False))
            img = tf.io.decode_image(data, channels=0, expand_animations=False)
            return _with_channels(tf, img, channels)

        def jpeg(ratio):
            def rgb():
                return tf.io.decode_jpeg(data, channels=3, ratio=ratio)

            if channels == 3:
                return rgb
            if channels == 4:
                return lambda: _opaque(tf, rgb())
            cmyk = tf.equal(tf.io.extract_jpeg_shape(data)[2], 4)
            return lambda: tf.cond(cmyk, lambda: tf.image.rgb_to_grayscale(rgb()),
                                   lambda: tf.io.decode_jpeg(data, channels=1, ratio=ratio))

        if image_size is None and channels == 3:
            return tf.ensure_shape(any_format(), [None, None, 3])
        if image_size is None:
            img = tf.cond(tf.equal(ex[layout.IMAGE_FORMAT], "jpeg"), jpeg(1), any_format)
            return tf.ensure_shape(img, [None, None, channels])
        ratio = _jpeg_ratio(tf, ex[layout.IMAGE_HEIGHT], ex[layout.IMAGE_WIDTH], image_size)
        index = tf.where(tf.equal(ex[layout.IMAGE_FORMAT], "jpeg"), ratio + 1, 0)
        img = tf.switch_case(index, [any_format, jpeg(1), jpeg(2), jpeg(4), jpeg(8)])
        return _fit(tf, tf.ensure_shape(img, [None, None, channels]), image_size)

    return (layout.IMAGE, layout.IMAGE_FORMAT, layout.IMAGE_HEIGHT, layout.IMAGE_WIDTH), decode


def _with_channels(tf, img, channels: int):
    """``img`` (uint8 with 1 to 4 channels, as decoded) with ``channels`` channels: grey
    repeated to RGB, RGB made grey (``tf.image.rgb_to_grayscale``), alpha dropped, or an
    opaque alpha added."""
    def stored_as(stored: int):
        def convert():
            if stored == channels:
                return tf.ensure_shape(img, [None, None, channels])
            colour = tf.ensure_shape(img[..., :3] if stored >= 3 else img[..., :1],
                                     [None, None, 3 if stored >= 3 else 1])
            if channels == 1:
                return tf.image.rgb_to_grayscale(colour) if stored >= 3 else colour
            rgb = colour if stored >= 3 else tf.image.grayscale_to_rgb(colour)
            if channels == 3:
                return rgb
            if stored in (1, 3):
                return _opaque(tf, rgb)
            return tf.ensure_shape(tf.concat([rgb, img[..., stored - 1:]], -1), [None, None, 4])
        return convert

    return tf.switch_case(tf.shape(img)[-1] - 1, [stored_as(c) for c in (1, 2, 3, 4)])


def _opaque(tf, rgb):
    """An RGB image with an opaque alpha channel added."""
    return tf.ensure_shape(tf.pad(rgb, [[0, 0], [0, 0], [0, 1]], constant_values=255),
                           [None, None, 4])


def _fit(tf, img, image_size):
    """``img`` as float32 of ``image_size``: resized, unless it already has that size
    (images pre-sized at conversion often do)."""
    same = tf.reduce_all(tf.equal(tf.shape(img)[:2], tf.constant(image_size)))
    out = tf.cond(same, lambda: tf.cast(img, tf.float32),
                  lambda: tf.image.resize(img, image_size))
    out.set_shape([*image_size, img.shape[-1]])
    return out


def _counted_records(tf, path, expected, compression, first=None, offset=None):
    """The records of one shard; at its end, an error naming the shard when it holds
    fewer or more records than the manifest says (a truncated or replaced file).

    With ``first`` (and its byte ``offset`` from the index, when there is one) only the
    ``expected`` records from record ``first`` are read, and the error says when the
    shard ends before them.

    TFRecord framing cannot show a file cut at a record boundary; the count can. It costs
    one addition per record and one comparison per shard.
    """
    end = tf.data.Dataset.from_tensors((tf.constant(b""), True))
    if first is None:
        raw = tf.data.TFRecordDataset(path, compression_type=compression)
    elif offset is None:  # no index (gzip): the records before are read and dropped
        raw = tf.data.TFRecordDataset(path, compression_type=compression).skip(first)
        raw = raw.take(expected)
    else:
        raw = _records_at(tf, path, offset, RUN_BUFFER).take(expected)
    records = raw.map(lambda r: (r, False))

    def count(n, item):
        record, last = item

        def at_end():
            return tf.debugging.assert_equal(
                n, expected, message=tf.strings.format(
                    "{}: {} records expected from the manifest's counts; this shard "
                    "holds a different number (it was truncated or replaced). Convert "
                    "again, or restore the file. Read", (path, expected)))

        check = tf.cond(last, at_end, lambda: tf.no_op())
        with tf.control_dependencies([check]):
            return n + tf.cast(tf.logical_not(last), tf.int64), (record, last)

    return (records.concatenate(end)
            .scan(tf.constant(0, tf.int64), count)
            .filter(lambda record, last: tf.logical_not(last))
            .map(lambda record, last: record))


def _same_conversion(tf, root: str, pin: str, generation: str):
    """A function of records already read, making an op that fails, with a message
    saying what happened, when the manifest file ``pin`` of ``root`` (the version's
    own, ``versions/KKKKK.json``, or ``tfrecorder.json``) is gone or is another
    conversion's than ``generation``.

    A conversion replacing a directory removes the old manifest before it touches any
    shard, and writes the new one last. So if the manifest, read after some records were
    read, still names the reader's conversion, no shard had been replaced when they were
    read: they are that conversion's, local or ``gs://``, whatever was open.
    """
    path = pin
    pattern = f'(?s).*"generation": "{generation}".*'
    message = (f"{root} was replaced by another conversion while this dataset was reading "
               f"it (its {pin.rsplit('/', 1)[-1]} is missing or of another conversion "
               f"now), so "
               f"this epoch would mix two conversions. Call load() again to read the new "
               f"one.")

    def check(after):
        # The path is joined with an empty string cut from the records: the read then
        # depends on them, so it runs after they were read, and TensorFlow's optimiser
        # cannot fold it into a constant when an iterator starts (it did: the manifest
        # read once, as the first epoch began, passed every later check).
        where = tf.strings.join([path, tf.strings.reduce_join(tf.strings.substr(after, 0, 0))])
        found = tf.io.matching_files(where)
        text = tf.cond(tf.size(found) > 0, lambda: tf.io.read_file(where),
                       lambda: tf.constant(""))
        return tf.debugging.assert_equal(tf.strings.regex_full_match(text, pattern), True,
                                         message=message)

    return check


def _verified(tf, records, check):
    """``records`` handed on in groups of ``CHECK_EVERY``, each only after ``check`` of
    the group (the manifest, read after the group's records) passed: no record of
    another conversion is ever handed on, not even the few read before a replacement
    could be seen."""
    def verified(group):
        with tf.control_dependencies([check(group)]):
            return tf.identity(group)

    return records.batch(CHECK_EVERY).map(verified).unbatch()


def _records_at(tf, path, offset, buffer_size):
    """The records of uncompressed shard ``path`` from byte ``offset`` (a record's start,
    from its index) to the file's end, checksums checked; the file before is not read.

    TensorFlow's TFRecord reader takes a start offset (``TFRecordDatasetV2``) that
    ``tf.data.TFRecordDataset`` does not expose. Such a dataset is made only inside the
    functions of ``interleave``: there it is built, saved and restored like any other,
    while as a pipeline's own source TensorFlow cannot serialise it.
    """
    variant = tf.raw_ops.TFRecordDatasetV2(
        filenames=tf.reshape(path, [1]), compression_type="",
        buffer_size=tf.cast(buffer_size, tf.int64),
        byte_offsets=tf.reshape(tf.cast(offset, tf.int64), [1]))
    return tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))


def _epoch_keys(tf, seed: int):
    """A new random key each iteration (epoch) of the dataset, the same sequence for the
    same ``seed`` in every process, whatever TensorFlow's global seed.

    ``tf.data.Dataset.random(seed)`` mixes in the global seed (``tf.random.set_seed``),
    which training scripts often set per worker for their augmentations: readers cutting
    one permutation would each draw another, and records be read twice or never. The
    same op, given both of its seeds here, depends on ``seed`` alone. (A checkpoint
    restores the epoch under way, not how many keys were drawn before.)"""
    variant = tf.raw_ops.RandomDatasetV2(
        seed=tf.constant(seed, tf.int64), seed2=tf.constant(_KEY_STREAM, tf.int64),
        seed_generator=tf.raw_ops.DummySeedGenerator(), rerandomize_each_iteration=True,
        output_types=[tf.int64], output_shapes=[[]])
    return tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.int64))


#: The second seed of the epoch keys' generator: any constant, fixed for good (it is part
#: of which permutation a seed gives).
_KEY_STREAM = 0x7F4A7C15


def _one_record(tf, path, offset, length):
    """The one record at byte ``offset`` of ``path``; an error naming the shard and the
    offset when the shard ends before it (a shard cut short, read by its index)."""
    missing = tf.constant(b"\0missing")  # never a record: a serialized Example has no NUL tag

    def present(record):
        return tf.debugging.assert_none_equal(
            record, missing, message=tf.strings.join([
                path, ": no record at byte ", tf.strings.as_string(offset), " (length ",
                tf.strings.as_string(length), "), where its index file puts one: the "
                "shard was cut short or replaced. Convert again, or restore the file"]))

    def checked(record):
        with tf.control_dependencies([present(record)]):
            return tf.identity(record)

    return (_records_at(tf, path, offset, length).take(1)
            .concatenate(tf.data.Dataset.from_tensors(missing)).take(1).map(checked))


def _cache_file(cache: str, manifest: Manifest, split: str, reader) -> str:
    """The cache files' prefix for ``cache=PATH``: one per conversion, split and reader's
    part, so that no dataset replays another's records (TensorFlow's cache replays
    whatever its files hold)."""
    i, n = reader
    return f"{cache}.{manifest.generation or 'legacy'}.{split}.part-{i}-of-{n}"


def _reader_records(tf, v: view.View, compression, reader, shuffle, seed, deterministic,
                    shard_cache=None):
    """The records reader ``(i, n)`` reads of the split of view ``v``, and how many
    there are."""
    total = len(v)
    start, end = partition.span(total, *reader)
    if shuffle == "global" and shard_cache is not None:
        return _cached_records(tf, v, start, end, seed, shard_cache, deterministic), end - start
    if shuffle == "global":
        entries = [v.entries(i) for i in range(len(v.shards))]
        file_of = np.concatenate([np.full(c, i, np.int32) for i, c in enumerate(v.counts)]
                                 or [np.zeros(0, np.int32)])
        offsets = np.array([o for e in entries for o, _ in e], np.int64)
        lengths = np.array([n for e in entries for _, n in e], np.int64)
        paths = tf.constant(v.files)
        file_of, offsets, lengths = (tf.constant(a) for a in (file_of, offsets, lengths))
        ds = _global_positions(tf, seed, start, end, total).interleave(
            lambda r: _one_record(tf, tf.gather(paths, tf.gather(file_of, r)),
                                  tf.gather(offsets, r), tf.gather(lengths, r)),
            cycle_length=MAX_PARALLEL_READS, block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic)
        return ds, end - start

    # Each reader's part cut into pieces read in parallel, and each piece into runs of
    # records the shard holds back to back (a retired record ends one), read from
    # their byte offset; gzip shards are read from their start, the records before
    # dropped.
    indexed = compression == ""
    run_list = []  # (file, first record, records, byte offset or -1)
    for f, first, n in partition.pieces(partition.runs(v.counts, start, end),
                                        MAX_PARALLEL_READS, MIN_RUN):
        if indexed:
            run_list += [(f, first, k, at) for at, k in v.contiguous(f, first, n)]
        else:
            v.refuse_retired(f)
            run_list.append((f, first, n, -1))
    ds = tf.data.Dataset.from_tensor_slices((
        tf.constant([v.files[f] for f, _, _, _ in run_list], tf.string),
        tf.constant([first for _, first, _, _ in run_list], tf.int64),
        tf.constant([n for _, _, n, _ in run_list], tf.int64),
        tf.constant([at for _, _, _, at in run_list], tf.int64)))
    if shuffle:
        ds = ds.shuffle(max(1, len(run_list)), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(
        lambda f, first, n, at: _counted_records(tf, f, n, compression, first,
                                                 at if indexed else None),
        cycle_length=max(1, min(len(run_list), MAX_PARALLEL_READS)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds, end - start


def _cached_records(tf, v: view.View, start, end, seed, shard_cache, deterministic):
    """``shuffle="global"`` through the shard cache: the same permutation of positions,
    each group of ``CHECK_EVERY`` read by an ``access.Reader`` of the view's conversion
    (whole shards fetched once into the cache, then local reads, both checksums
    checked)."""
    from tfrecorder import access

    records = access.Reader(v.output_dir, v.split, version=v.version.number,
                            cache_dir=shard_cache.root, cache_limit=shard_cache.limit)
    if records._generation != v.version.generation:
        records._check_generation(0)  # replaced between the two openings: says so

    def read(positions):
        return np.array(records.records(positions.tolist()), dtype=object)

    def fetched(positions):
        data = tf.numpy_function(read, [positions], tf.string, stateful=True)
        data.set_shape([None])
        return data

    return (_global_positions(tf, seed, start, end, len(v)).batch(CHECK_EVERY)
            .map(fetched, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
            .unbatch())


def _global_positions(tf, seed, start, end, total):
    """Positions ``start`` to ``end`` of one permutation of the whole split per epoch
    (index_shuffle: no buffer); every reader draws the same one and reads its part."""
    last = tf.constant(max(total - 1, 0), tf.int64)

    def epoch(key):
        positions = tf.data.Dataset.range(start, end)
        return positions.map(lambda p: tf.random.experimental.index_shuffle(
            p, tf.stack([tf.constant(seed, tf.int64), key]), last))

    return _epoch_keys(tf, seed).take(1).flat_map(epoch)


def _pipeline(tf, v: view.View, *, decode, batch_size, image_size, channels, as_supervised,
              shuffle, shuffle_buffer, seed, cache, deterministic, drop_remainder,
              reader=(0, 1), shard_cache=None):
    AUTOTUNE = tf.data.AUTOTUNE
    root, manifest, split = v.output_dir, v.manifest, v.split
    files = v.files
    compression = "GZIP" if manifest.compression == "gzip" else ""
    spec = feature_spec(tf, manifest)
    image_key, label_key = manifest.image_key, manifest.label_key
    legacy_format = manifest.format_version == legacy.FORMAT_VERSION
    needed, decode_one = (_decoder(tf, image_size, channels, legacy_format) if decode
                          else ((), None))

    counts = v.counts
    known = v.counts_known  # TFRecorder 2.0 did not record them
    if reader[1] > 1 or shuffle == "global":
        v.need_counts("shard= and shuffle='global'")
    if reader[1] > 1 or shuffle == "global" or v.retired:
        ds, length = _reader_records(tf, v, compression, reader, shuffle, seed, deterministic,
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
    # kept only once its conversion was checked, under a name of that conversion).
    from_cache = shuffle == "global" and shard_cache is not None
    if v.version.generation and not from_cache:
        ds = _verified(tf, ds, _same_conversion(tf, root, v.version.pin, v.version.generation))
    if length is not None:
        # The exact length, from the manifest: batching then knows the batch count, and
        # Keras the steps per epoch, before the first epoch ends.
        ds = ds.apply(tf.data.experimental.assert_cardinality(length))
    if cache:
        ds = ds.cache(_cache_file(cache, manifest, split, reader) if isinstance(cache, str)
                      else "")
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
