"""The serialized records an input pipeline reads of a split, as a ``tf.data`` stream.

Shard files are read in parallel (interleave). The manifest's counts check every
shard's length, and the index files (``index.py``) let a stream start at any record:
input pipeline ``i`` of ``n`` (``shard=``, ``input_context=``, tf.distribute's word) reads
its part of the records
(``partition.py``) with one seek per file, and ``shuffle="global"`` reads each record
by its offset (or from the shard cache on ``gs://``), in a seeded permutation of the
whole split, a new one each epoch. Records are handed on only once the manifest, read
after them, still names the opened conversion (``_verified``). Its own module because
which records are read, in what order, and how they are checked is one concern, apart
from parsing them (``decoding``) and the datasets built on them (``loading``).
"""

from __future__ import annotations

import numpy as np

from tfrecorder._folder import view
from tfrecorder._readers import partition


#: Shards read at the same time at most; more only adds memory.
MAX_PARALLEL_READS = 16


#: An input pipeline's part is cut into extents of at least this many records, read in parallel.
MIN_EXTENT = 256


#: Read buffer of an extent of records started at an offset.
EXTENT_BUFFER = 256 << 10


#: Records read before the manifest is read again to see that they are the opened
#: conversion's, and handed on only then (``_verified``).
CHECK_EVERY = 64


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
        raw = _records_at(tf, path, offset, EXTENT_BUFFER).take(expected)
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
    read, still names the opened conversion, no shard had been replaced when they were
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
    which training scripts often set per worker for their augmentations: input pipelines
    cutting one permutation would each draw another, and records be read twice or never. The
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


def _pipeline_records(tf, v: view.View, compression, input_pipeline, shuffle, seed,
                      deterministic, shard_cache=None):
    """The records input pipeline ``(i, n)`` reads of the split of view ``v``, and how many
    there are."""
    total = len(v)
    start, end = partition.span(total, *input_pipeline)
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

    # Each input pipeline's part cut into pieces read in parallel, and each piece into extents
    # (records the shard holds back to back ; a retired record ends one), read from
    # their byte offset; gzip shards are read from their start, the records before
    # dropped.
    indexed = compression == ""
    extents = []  # (file, first record, records, byte offset or -1)
    for f, first, n in partition.pieces(partition.extents(v.counts, start, end),
                                        MAX_PARALLEL_READS, MIN_EXTENT):
        if indexed:
            extents += [(f, first, k, at) for at, k in v.contiguous(f, first, n)]
        else:
            v.refuse_retired(f)
            extents.append((f, first, n, -1))
    ds = tf.data.Dataset.from_tensor_slices((
        tf.constant([v.files[f] for f, _, _, _ in extents], tf.string),
        tf.constant([first for _, first, _, _ in extents], tf.int64),
        tf.constant([n for _, _, n, _ in extents], tf.int64),
        tf.constant([at for _, _, _, at in extents], tf.int64)))
    if shuffle:
        ds = ds.shuffle(max(1, len(extents)), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(
        lambda f, first, n, at: _counted_records(tf, f, n, compression, first,
                                                 at if indexed else None),
        cycle_length=max(1, min(len(extents), MAX_PARALLEL_READS)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds, end - start


def _cached_records(tf, v: view.View, start, end, seed, shard_cache, deterministic):
    """``shuffle="global"`` through the shard cache: the same permutation of positions,
    each group of ``CHECK_EVERY`` read by an ``access.Reader`` of the view's conversion
    (whole shards fetched once into the cache, then local reads, both checksums
    checked)."""
    from tfrecorder import access

    # The view's own opening: the folder is not opened again, so there is no second
    # conversion to tell apart from the first.
    records = access.Reader.of(v, cache_dir=shard_cache.root, cache_limit=shard_cache.limit)

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
    (index_shuffle: no buffer); every input pipeline draws the same one and reads
    its part."""
    last = tf.constant(max(total - 1, 0), tf.int64)

    def epoch(key):
        positions = tf.data.Dataset.range(start, end)
        return positions.map(lambda p: tf.random.experimental.index_shuffle(
            p, tf.stack([tf.constant(seed, tf.int64), key]), last))

    return _epoch_keys(tf, seed).take(1).flat_map(epoch)
