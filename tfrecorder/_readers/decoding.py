"""A record's features parsed and its image decoded, inside a ``tf.data`` map.

The parsing spec comes from the manifest (``feature_spec``). The writer stored every
image's height and width, so when a resize is asked for, each JPEG is decoded by
libjpeg at the smallest scale (1/2, 1/4 or 1/8) that still covers the requested size:
decoding fewer pixels is most of the work saved; the image is then resized to exactly
the requested size as usual. Images are given the channels asked for whatever they were
stored with; TFRecorder 2.0's base64 pixels are decoded too. Its own module because it
is TensorFlow image work on one record, apart from which records are read.
"""

from __future__ import annotations

from tfrecorder._folder import layout, legacy, stored_keys
from tfrecorder._folder.manifest import Manifest


def feature_spec(tf, manifest: Manifest) -> dict:
    """The parsing spec of every feature, from the manifest: of the keys its records
    are stored under (``stored_keys``), which ``in_our_keys`` gives back as ours."""
    dtypes = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    spec = {}
    form = stored_keys.form(manifest)
    for key, f in (manifest.features if form is None else form.stored).items():
        if f.varlen:
            spec[key] = tf.io.VarLenFeature(dtypes[f.dtype])
        else:
            spec[key] = tf.io.FixedLenFeature(f.shape, dtypes[f.dtype])
    return spec


def in_our_keys(tf, manifest: Manifest):
    """A function of a record parsed with ``feature_spec`` giving its features in our
    keys, as ``stored_keys`` does without TensorFlow (varlen ones as SparseTensors, as
    ``tf.io`` parses ours); None for a folder stored in our keys. Made outside the
    ``tf.data`` map: the class names' lookup table is made once."""
    form = stored_keys.form(manifest)
    if form is None:
        return None
    # A folder without class names (a segmentation table's) has no names to look up,
    # and TensorFlow refuses an empty table.
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(list(form.ids), tf.string), tf.constant(list(form.ids.values()), tf.int64)),
        default_value=-1) if form.ids else None

    def rebuild(ex):
        out = {}
        for key, (keys, how) in form.groups.items():
            if how == stored_keys.RENAME:
                out[key] = ex[keys[0]]
            elif how == stored_keys.NUMBER:  # a whole number as text -> the number, or -1
                text = ex[keys[0]]
                whole = tf.strings.regex_full_match(text, "-?[0-9]+")
                out[key] = tf.strings.to_number(tf.where(whole, text, "-1"), tf.int64)
            elif how == stored_keys.INTERLEAVE:  # [n] per coordinate -> [n * k], ours
                lists = [tf.sparse.to_dense(ex[k]) for k in keys]
                out[key] = _sparse(tf, tf.reshape(tf.stack(lists, axis=1), [-1]))
            else:  # NAMES: class names -> our label ids
                ids = table.lookup(tf.sparse.to_dense(ex[keys[0]]))
                check = tf.debugging.assert_non_negative(
                    ids, message=f"{keys[0]} holds a class that is no line of "
                                 f"{form.labels_file}; the record was not written so by "
                                 f"tfrecorder")
                with tf.control_dependencies([check]):
                    out[key] = _sparse(tf, tf.identity(ids))
        return out

    return rebuild


def _sparse(tf, dense):
    """A 1-D SparseTensor holding every value of 1-D ``dense`` (zeros included)."""
    n = tf.shape(dense, out_type=tf.int64)[0]
    return tf.SparseTensor(tf.expand_dims(tf.range(n), 1), dense, tf.expand_dims(n, 0))


def _jpeg_ratio(tf, height, width, size):
    """Index 0..3 of the largest libjpeg scale 1/1, 1/2, 1/4, 1/8 that still covers ``size``."""
    th, tw = size
    scale = tf.constant(0)
    for r in (2, 4, 8):
        covers = tf.logical_and((height + r - 1) // r >= th, (width + r - 1) // r >= tw)
        scale += tf.cast(covers, tf.int32)
    return scale


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
        branch = tf.where(tf.equal(ex[layout.IMAGE_FORMAT], "jpeg"), ratio + 1, 0)
        img = tf.switch_case(branch, [any_format, jpeg(1), jpeg(2), jpeg(4), jpeg(8)])
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


def decode_mask(tf, data, image_size):
    """A segmentation mask's PNG as its class ids: uint8 ``[H, W, 1]``, the shape Model
    Garden's segmentation decoder gives; with ``image_size``, resized to it by nearest
    neighbour (ids are never blended), as the image is."""
    ids = tf.ensure_shape(tf.io.decode_png(data, channels=1), [None, None, 1])
    if image_size is None:
        return ids
    out = tf.image.resize(ids, image_size, method="nearest")
    out.set_shape([*image_size, 1])
    return tf.cast(out, tf.uint8)


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
