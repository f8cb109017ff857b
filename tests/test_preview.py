"""show(): one batch as the model sees it, on real load() datasets of the samples."""

import base64
import io
import re

import numpy as np
import pytest

import tfrecorder


@pytest.fixture(scope="module")
def out(samples_converted):
    return samples_converted()[0]  # read only


def _shown(preview):
    """The embedded images of the HTML, decoded, with their captions."""
    from PIL import Image

    html = preview._repr_html_()
    found = re.findall(r"<img src='data:(image/\w+);base64,([^']+)'[^>]*/>"
                       r"<figcaption[^>]*>([^<]*)</figcaption>", html)
    out = []
    for mime, data, caption in found:
        img = Image.open(io.BytesIO(base64.b64decode(data)))
        assert img.get_format_mimetype() == mime
        out.append((np.asarray(img.convert("RGB")).astype(np.int32), caption))
    return out


def _first(ds, n):
    """The first ``n`` (image, label) records of a batched supervised dataset."""
    images, labels = [], []
    for x, y in ds:
        images.extend(x.numpy())
        labels.extend(y.numpy())
        if len(images) >= n:
            break
    return images[:n], labels[:n]


@pytest.mark.slow
def test_show_draws_the_images_of_batches_as_resized_with_their_label_names(out, tf):
    ds, info = tfrecorder.load(out, split="train", batch_size=8, image_size=(64, 48),
                               as_supervised=True, with_info=True)
    preview = tfrecorder.show((ds, info), n=12)  # load(..., with_info=True) as it comes
    shown = _shown(preview)
    images, labels = _first(ds, 12)
    assert len(shown) == 12  # two batches read, the first 12 images of them
    assert [c for _, c in shown] == [info.label_names[i] for i in labels]
    assert {c for _, c in shown} <= {"circle", "square", "triangle"}
    for (pixels, _), model_input in zip(shown, images):
        assert pixels.shape == (64, 48, 3)  # as resized for the model, height x width
        # the model's values (float 0..255), up to JPEG's small losses
        assert np.abs(pixels - model_input).mean() < 4
    text = str(preview)
    assert text == repr(preview) and "\n" not in text and len(text) < 200
    assert text.startswith("12 of 16 images, 64x48x3 float32 (values ")
    assert "circle" in text


@pytest.mark.slow
def test_label_names_come_from_what_load_gives_or_are_numbers(out, tf):
    ds = tfrecorder.load(out, split="validation", batch_size=4, image_size=(32, 32),
                         as_supervised=True)
    _, labels = _first(ds, 6)
    assert [c for _, c in _shown(tfrecorder.show(ds))] == [str(i) for i in labels]
    names = tfrecorder.info(out).label_names
    by_info = tfrecorder.show(ds, label_names=tfrecorder.info(out))
    by_list = tfrecorder.show(ds, label_names=names)
    assert [c for _, c in _shown(by_info)] == [c for _, c in _shown(by_list)] == [
        names[i] for i in labels]
    # Every split, as load() gives them without split=: the train split, named.
    every = tfrecorder.load(out, batch_size=4, image_size=(32, 32), as_supervised=True)
    assert len(_shown(tfrecorder.show(every, n=5))) == 5
    assert {c for _, c in _shown(tfrecorder.show(every))} <= set(names)


@pytest.mark.slow
def test_dict_batches_and_single_batches_are_shown_too(out, tf):
    datasets = tfrecorder.load(out, batch_size=2, image_size=(40, 30))
    test = datasets["test"]  # dicts of features, 3 records: batches of 2 and 1
    shown = _shown(tfrecorder.show(test, label_names=datasets))
    batches = list(test)
    expected = [datasets.label_names[i] for b in batches for i in b["label"].numpy()]
    assert [c for _, c in shown] == expected and len(shown) == 3
    # One batch, taken from the dataset by the user.
    one = tfrecorder.show(batches[0], label_names=datasets)
    assert [c for _, c in _shown(one)] == expected[:2]
    assert str(one).startswith("2 images, 40x30x3 float32")
    # An unbatched dataset of uint8 images at their stored sizes.
    plain = tfrecorder.load(out, split="test")
    shown = _shown(tfrecorder.show(plain, n=2))
    for (pixels, _), ex in zip(shown, plain):
        assert pixels.shape == tuple(ex["image"].shape)
        assert np.abs(pixels - ex["image"].numpy()).mean() < 4


@pytest.mark.slow
def test_scaled_inputs_are_shown_with_the_scaling_undone(out, tf):
    ds = tfrecorder.load(out, split="train", batch_size=4, image_size=(32, 32),
                         as_supervised=True)
    (batch, _), = ds.take(1)
    raw = batch.numpy()
    # 0..1 (Keras' Rescaling(1/255)) and -1..1 (MobileNet's preprocessing): undone
    for scaled, words in [(raw / 255.0, "shown times 255"),
                          (raw / 127.5 - 1.0, "shown from -1..1")]:
        preview = tfrecorder.show(tf.constant(scaled, tf.float32))
        assert words in str(preview)
        for (pixels, _), original in zip(_shown(preview), raw):
            assert np.abs(pixels - original).mean() < 4
    # mean/std normalised: stretched from the batch's minimum to its maximum
    mean, std = raw.mean(axis=(0, 1, 2)), raw.std(axis=(0, 1, 2))
    normalised = (raw - mean) / std
    preview = tfrecorder.show(normalised.astype(np.float32))
    assert "(normalised), stretched to 0..255" in str(preview)
    lo, hi = normalised.min(), normalised.max()
    for (pixels, _), image in zip(_shown(preview), normalised):
        assert np.abs(pixels - (image - lo) / (hi - lo) * 255).mean() < 4
    # PyTorch's layout: channels first
    preview = tfrecorder.show(np.moveaxis(raw, -1, 1).astype(np.uint8))
    assert [p.shape for p, _ in _shown(preview)] == [(32, 32, 3)] * 4


@pytest.mark.slow
def test_show_reads_only_the_batches_it_needs(out, tf):
    ds = tfrecorder.load(out, split="train", batch_size=4, image_size=(16, 16),
                         as_supervised=True).repeat()  # never ends
    assert len(_shown(tfrecorder.show(ds, n=6))) == 6
    with pytest.raises(tfrecorder.ConfigError, match="n=0"):
        tfrecorder.show(ds, n=0)


def test_arrays_and_their_labels_need_no_tensorflow():
    grey = np.zeros((3, 10, 20), np.uint8)  # a batch of grey images without a channel axis
    grey[1] = 255
    preview = tfrecorder.show((grey, np.array([2, 0, 7])), label_names=["a", "b", "c"])
    shown = _shown(preview)
    assert [c for _, c in shown] == ["c", "a", "7"]  # an id without a name: its number
    assert [p.shape for p, _ in shown] == [(10, 20, 3)] * 3
    assert shown[1][0].min() == 255 and shown[0][0].max() == 0
    # multi-label: ids per record; one-hot float rows: the names of their ones
    multi = tfrecorder.show((np.zeros((2, 4, 4, 3), np.uint8), [[0, 2], [1]]),
                            label_names=["a", "b", "c"])
    assert [c for _, c in _shown(multi)] == ["a c", "b"]
    hot = tfrecorder.show((np.zeros((2, 4, 4, 3), np.uint8), np.eye(3, dtype=np.float32)[:2]),
                          label_names=["a", "b", "c"])
    assert [c for _, c in _shown(hot)] == ["a", "b"]
    with pytest.raises(tfrecorder.ConfigError, match="no image in the element's features"):
        tfrecorder.show({"label": np.array([1, 2])})
