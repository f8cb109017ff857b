"""load() and info(): a folder back as tf.data pipelines (tfrecorder/_readers/loading.py
and decoding.py): splits, keys, decoded and resized images, label names."""

import os

import numpy as np
import pandas as pd
import pytest

import tfrecorder
from tfrecorder._readers import decoding
from tfrecorder._folder import metadata
from tests.conftest import SAMPLES


@pytest.fixture(scope="module")
def samples_out(samples_converted):
    return samples_converted(num_shards=2)[0]  # read only


def _table():
    df = pd.read_csv(os.path.join(SAMPLES, "data.csv"), keep_default_na=False)
    df["path"] = [os.path.join(SAMPLES, u) for u in df.image_uri]
    return df.set_index(df.image_uri.map(os.path.basename))


@pytest.mark.slow
def test_load_gives_every_split_with_tfrecorder_keys_and_label_names(samples_out):
    ds = tfrecorder.load(samples_out)
    assert list(ds) == ["train", "validation", "test"]
    assert ds["TRAIN"] is ds["train"] and "VALIDATE" in ds and "holdout" not in ds
    assert ds.label_names == ["circle", "square", "triangle"]
    with pytest.raises(KeyError, match="this directory has"):
        ds["holdout"]
    counts = {s: sum(1 for _ in d) for s, d in ds.items()}
    assert counts == {s: i.num_examples for s, i in ds.info.splits.items()}


@pytest.mark.slow  # a conversion end to end
def test_undecoded_records_hold_the_original_bytes(samples_out):
    table = _table()
    ds, info = tfrecorder.load(samples_out, split="train", decode_images=False, with_info=True)
    n = 0
    for ex in ds:
        name = ex["image_name"].numpy().decode()
        assert ex["image"].numpy() == open(table.loc[name, "path"], "rb").read()
        assert info.label_names[int(ex["label"])] == table.loc[name, "label"]
        n += 1
    assert n == info.splits["train"].num_examples


@pytest.mark.slow  # a conversion end to end
def test_decoded_images_equal_decode_image(tf, samples_out):
    table = _table()
    for ex in tfrecorder.load(samples_out, split="validation"):
        name = ex["image_name"].numpy().decode()
        expected = tf.io.decode_image(open(table.loc[name, "path"], "rb").read(), channels=3,
                                      expand_animations=False)
        assert ex["image"].dtype == tf.uint8
        np.testing.assert_array_equal(ex["image"].numpy(), expected.numpy())


@pytest.mark.slow  # a conversion end to end
def test_batched_resized_supervised_pairs(tf, samples_out):
    table = _table()
    ds = tfrecorder.load(samples_out, split="train", batch_size=8, image_size=(32, 40),
                         as_supervised=True)
    names = tfrecorder.info(samples_out).label_names
    total = 0
    for images, labels in ds:
        assert images.shape[1:] == (32, 40, 3) and images.dtype == tf.float32
        assert images.shape[0] == labels.shape[0] <= 8
        assert float(tf.reduce_max(images)) <= 255.0
        total += int(labels.shape[0])
    assert total == tfrecorder.info(samples_out).splits["train"].num_examples
    assert set(names) == set(table.label)


@pytest.mark.parametrize("height,width,size,expected", [
    (600, 800, (100, 100), 2),   # 1/4 scale: 150 x 200 still covers 100 x 100
    (600, 800, (224, 224), 1),   # 1/2 scale: 300 x 400
    (256, 300, (224, 224), 0),   # full size needed
    (1000, 1000, (100, 100), 3), # 1/8 scale: 125 x 125
    (449, 449, (224, 224), 1),   # ceil(449 / 2) = 225 >= 224
])
def test_jpeg_scale_is_the_smallest_that_covers_the_size(tf, height, width, size, expected):
    got = decoding._jpeg_ratio(tf, tf.constant(height, tf.int64), tf.constant(width, tf.int64), size)
    assert int(got) == expected


@pytest.mark.slow  # a conversion end to end
def test_scaled_jpeg_decoding_stays_close_to_full_decoding(tf, tmp_path, image_table):
    from PIL import Image
    import io

    # A smooth picture, as photos are at 224 px: scaled decoding must not change it.
    y, x = np.mgrid[0:640, 0:800]
    pixels = np.stack([x * 255 // 800, y * 255 // 640, (x + y) * 255 // 1440], -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=92)
    path = image_table("big.jpg", buf.getvalue())
    out = str(tmp_path / "out")
    tfrecorder.convert(pd.DataFrame({"split": ["TRAIN"], "image_uri": [path], "label": ["a"]}), out)
    (img,) = [e["image"] for e in tfrecorder.load(out, split="train", image_size=(96, 120))]
    full = tf.image.resize(tf.io.decode_jpeg(buf.getvalue(), channels=3), (96, 120))
    assert img.shape == (96, 120, 3)
    assert float(tf.reduce_mean(tf.abs(img - full))) < 2.0


@pytest.mark.slow
def test_shuffle_is_seeded_and_keeps_every_record(samples_out):
    def names(**kw):
        return [e["image_name"].numpy() for e in tfrecorder.load(
            samples_out, split="train", decode_images=False, **kw)]

    plain = names()
    a, b = names(shuffle=True, seed=3), names(shuffle=True, seed=3)
    assert a == b and sorted(a) == sorted(plain) and a != plain


@pytest.mark.slow  # a conversion end to end
def test_cache_and_gzip(tmp_path):
    out = str(tmp_path / "gz")
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), out, compression="gzip")
    ds = tfrecorder.load(out, split="test", decode_images=False, cache=True)
    first = [e["image_name"].numpy() for e in ds]
    assert first == [e["image_name"].numpy() for e in ds] and len(first) == 3


def test_refusals(samples_out, tmp_path):
    with pytest.raises(tfrecorder.ConfigError, match="image_size"):
        tfrecorder.load(samples_out, batch_size=4)
    with pytest.raises(tfrecorder.ConfigError, match="it has"):
        tfrecorder.load(samples_out, split="holdout")
    os.makedirs(tmp_path / "half")
    (tmp_path / "half" / "data-train.tfrecord-00000-of-00001").write_bytes(b"")
    with pytest.raises(tfrecorder.IncompleteOutputError, match="no tfrecorder.json"):
        tfrecorder.load(str(tmp_path / "half"))


BAD_ARGUMENTS = [
    ({"batch_size": 0, "image_size": (8, 8)}, ["batch_size=0", "1 or more"]),
    ({"batch_size": -2, "image_size": (8, 8)}, ["batch_size=-2", "1 or more"]),
    ({"batch_size": 2.5, "image_size": (8, 8)}, ["batch_size=2.5", "whole number"]),
    ({"image_size": 224}, ["image_size=224", "(224, 224)"]),
    ({"image_size": (224,)}, ["image_size=(224,)", "(height, width)"]),
    ({"image_size": (0, 8)}, ["image_size=(0, 8)", "(height, width)"]),
    ({"seed": "x", "shuffle": True}, ["seed='x'", "whole number"]),
    ({"seed": 1.5, "shuffle": True}, ["seed=1.5", "whole number"]),
    ({"shuffle_buffer": 0, "shuffle": True}, ["shuffle_buffer=0", "1 or more"]),
    ({"shuffle_buffer": -3, "shuffle": True}, ["shuffle_buffer=-3", "1 or more"]),
    ({"channels": 3.0}, ["channels=3.0", "use 1 (grey), 3 (RGB) or 4"]),
    ({"channels": True}, ["channels=True", "use 1 (grey), 3 (RGB) or 4"]),
]


@pytest.mark.parametrize("kwargs,words", BAD_ARGUMENTS,
                         ids=[words[0] for _, words in BAD_ARGUMENTS])
def test_arguments_that_cannot_work_are_a_config_error_naming_them(samples_out, kwargs, words):
    # Unchecked, batch_size=0 would not batch, and the others would fail inside
    # TensorFlow (a TypeError or an InvalidArgumentError) when the first element is read.
    with pytest.raises(tfrecorder.ConfigError) as e:
        next(iter(tfrecorder.load(samples_out, split="train", **kwargs)))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.slow
def test_whole_numbers_of_any_integer_type_are_taken(samples_out):
    ds = tfrecorder.load(samples_out, split="train", batch_size=np.int64(2),
                         image_size=[np.int32(8), 8], seed=np.int64(1), shuffle=True,
                         shuffle_buffer=np.int64(4), channels=np.int64(1))
    images, = [b["image"].shape for b in ds.take(1)]
    assert tuple(images) == (2, 8, 8, 1)


@pytest.mark.slow  # a conversion end to end
def test_convert_and_load(tmp_path):
    ds = tfrecorder.convert_and_load(os.path.join(SAMPLES, "data.csv"), str(tmp_path / "o"),
                                     load_options={"split": "test", "decode_images": False})
    assert sum(1 for _ in ds) == 3


def test_manifest_counts_labels_per_split(samples_out):
    table = _table()
    m = metadata.read_manifest(samples_out)
    total = {}
    for info in m.splits.values():
        assert sum(info.label_counts.values()) == info.num_examples
        for k, v in info.label_counts.items():
            total[k] = total.get(k, 0) + v
    assert total == table.label.value_counts().to_dict()


#: One image of every kind the channels of a load() may be asked of: the stored channels
#: (as decode_image gives them) in the name.
_KINDS = {"rgb.jpg": ("RGB", "JPEG"), "grey.jpg": ("L", "JPEG"), "cmyk.jpg": ("CMYK", "JPEG"),
          "palette.gif": ("P", "GIF"), "rgb.bmp": ("RGB", "BMP"), "rgba.bmp": ("RGBA", "BMP"),
          "grey.png": ("L", "PNG"), "grey_alpha.png": ("LA", "PNG"), "rgb.png": ("RGB", "PNG"),
          "rgba.png": ("RGBA", "PNG"), "rgb.webp": ("RGB", "WEBP"), "rgba.webp": ("RGBA", "WEBP")}


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory):
    from PIL import Image

    from tests.conftest import encode

    folder = tmp_path_factory.mktemp("kinds")
    rows = []
    for i, (name, (mode, fmt)) in enumerate(sorted(_KINDS.items())):
        (folder / name).write_bytes(encode(mode, size=(24, 16), fmt=fmt, seed=i))
        if name == "rgba.webp":  # an alpha that is not all opaque, which WebP would drop
            img = Image.open(folder / name)
            img.putalpha(Image.linear_gradient("L").resize(img.size))
            img.save(folder / name, "WEBP")
        rows.append({"split": "TRAIN", "image_uri": str(folder / name), "label": "x"})
    out = folder / "out"
    tfrecorder.convert(pd.DataFrame(rows), str(out))
    return folder, str(out)


@pytest.mark.slow
@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("image_size", [None, (8, 12)])
def test_every_channels_value_decodes_every_image_kind(tf, every_kind, channels, image_size):
    folder, out = every_kind
    seen = set()
    for ex in tfrecorder.load(out, split="train", channels=channels, image_size=image_size):
        name = ex["image_name"].numpy().decode()
        data = (folder / name).read_bytes()
        assert ex["image_format"].numpy().decode() == name.rsplit(".")[-1].replace("jpg", "jpeg")
        stored = tf.io.decode_image(data, channels=0, expand_animations=False)
        rgb = (stored[..., :3] if name.endswith(".webp")  # 3 of 4 channels is refused
               else tf.io.decode_image(data, channels=3, expand_animations=False))
        if channels == 3:
            expected = rgb
        elif channels == 1 and name in ("rgb.jpg", "grey.jpg"):  # JPEG's own luma
            expected = tf.io.decode_jpeg(data, channels=1)
        elif channels == 1:
            expected = stored[..., :1] if stored.shape[-1] <= 2 else tf.image.rgb_to_grayscale(rgb)
        else:
            alpha = (stored[..., -1:] if stored.shape[-1] in (2, 4)
                     else tf.fill([*stored.shape[:2], 1], tf.constant(255, tf.uint8)))
            expected = tf.concat([rgb, alpha], -1)
        if image_size is None:
            assert ex["image"].dtype == tf.uint8
            np.testing.assert_array_equal(ex["image"].numpy(), expected.numpy(), err_msg=name)
            if name.endswith(".png"):  # where libpng converts too, within rounding
                native = tf.io.decode_image(data, channels=channels).numpy().astype(int)
                assert np.abs(ex["image"].numpy().astype(int) - native).max() <= 1, name
        else:
            assert ex["image"].shape == (*image_size, channels), name
            resized = tf.image.resize(expected, image_size).numpy()
            if not name.endswith(".jpg"):  # JPEGs are decoded at a reduced DCT scale
                np.testing.assert_allclose(ex["image"].numpy(), resized, atol=1e-3, err_msg=name)
        seen.add(name)
    assert seen == set(_KINDS)
