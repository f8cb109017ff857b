"""What is stored of an image file: its bytes checked, kept as they are or re-encoded,
pre-sized; and stored bytes opened again as their format."""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from tfrecorder._folder import image_headers
from tfrecorder._writer import image
from tests.conftest import encode


def _png_16bit_rgb(w=5, h=3) -> bytes:
    raw = b"".join(b"\x00" + b"\x01\x02" * 3 * w for _ in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


CASES = {
    "jpeg grey": lambda: encode("L", fmt="JPEG"),
    "jpeg rgb": lambda: encode("RGB", fmt="JPEG"),
    "jpeg cmyk": lambda: encode("CMYK", fmt="JPEG"),
    "png 1-bit": lambda: encode("1", fmt="PNG"),
    "png grey": lambda: encode("L", fmt="PNG"),
    "png grey+alpha": lambda: encode("LA", fmt="PNG"),
    "png rgb": lambda: encode("RGB", fmt="PNG"),
    "png rgba": lambda: encode("RGBA", fmt="PNG"),
    "png palette": lambda: encode("P", fmt="PNG"),
    "png palette+transparency": lambda: encode("P", fmt="PNG", transparency=0),
    "png grey+transparency": lambda: encode("L", fmt="PNG", transparency=0),
    "png 16-bit grey": lambda: encode("I;16", fmt="PNG"),
    "png 16-bit rgb": _png_16bit_rgb,
    "gif": lambda: encode("P", fmt="GIF"),
    "bmp rgb": lambda: encode("RGB", fmt="BMP"),
    "bmp rgba": lambda: encode("RGBA", fmt="BMP"),
    "bmp grey": lambda: encode("L", fmt="BMP"),
    "webp rgb": lambda: encode("RGB", fmt="WEBP"),
    "webp rgba": lambda: encode("RGBA", fmt="WEBP"),
    "webp lossless": lambda: encode("RGB", fmt="WEBP", lossless=True),
    "webp animated (re-encoded)": lambda: _animated_webp(),
    "tiff (re-encoded)": lambda: encode("RGB", fmt="TIFF"),
    "tiff cmyk (re-encoded)": lambda: encode("CMYK", fmt="TIFF"),
}


def _animated_webp() -> bytes:
    frames = [Image.open(io.BytesIO(encode("RGB", seed=i))) for i in range(2)]
    out = io.BytesIO()
    frames[0].save(out, "WEBP", save_all=True, append_images=frames[1:])
    return out.getvalue()


@pytest.mark.parametrize("case", sorted(CASES))
def test_recorded_shape_is_what_decode_image_returns(tf, case):
    data = CASES[case]()
    stored, info = image.prepare(data)
    decoded = tf.io.decode_image(stored, expand_animations=False)
    assert [info.height, info.width, info.channels] == decoded.shape.as_list()
    if "re-encoded" in case:
        assert info.format == "png" and stored != data
        assert info.source_format == Image.open(io.BytesIO(data)).format.lower()
    else:
        assert stored is data  # stored untouched
        assert info.format == Image.open(io.BytesIO(data)).format.lower()
        assert info.source_format is None


@pytest.mark.parametrize("alpha", [False, True])
def test_a_webp_is_stored_as_it_is_and_decodes_to_its_pixels(tf, alpha):
    img = Image.open(io.BytesIO(encode("RGB", fmt="PNG")))
    if alpha:
        img.putalpha(Image.linear_gradient("L").resize(img.size))
    out = io.BytesIO()
    img.save(out, "WEBP", lossless=True)
    data = out.getvalue()
    stored, info = image.prepare(data + b"\0trailer")  # bytes after its RIFF end: cut
    assert stored == data and (info.format, info.channels) == ("webp", 4 if alpha else 3)
    pixels = np.asarray(img)
    assert (tf.io.decode_image(stored, expand_animations=False).numpy() == pixels).all()
    with pytest.raises(image_headers.ImageProblem, match="truncated WebP|not a readable image"):
        image.prepare(data[:-10])


def _undecodable(fmt: str) -> bytes:
    """A 40x30 RGB image of ``fmt`` with an intact header and end, that no decoder can
    decode: a JPEG whose first Huffman table declares more codes than exist, a PNG whose
    compressed pixels are zeroed."""
    data = bytearray(encode("RGB", size=(40, 30), fmt=fmt))
    if fmt == "JPEG":
        dht = data.index(b"\xff\xc4")  # marker, length (2), class and id (1), counts (16)
        data[dht + 5:dht + 21] = b"\xff" * 16
    else:
        start = data.index(b"IDAT") + 4
        data[start + 10:start + 200] = b"\x00" * 190
    return bytes(data)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_header_check_reads_dimensions_without_decoding(fmt):
    # Decoding these bytes fails, so only a check that decodes nothing accepts them.
    data = _undecodable(fmt)
    stored, info = image.prepare(data, "header")
    assert stored == data
    assert (info.format, info.width, info.height, info.channels) == (fmt.lower(), 40, 30, 3)
    with pytest.raises(image_headers.ImageProblem, match=f"{fmt} image fails to decode"):
        image.prepare(data, "decode")


@pytest.mark.parametrize("data,reason", [
    (b"", "empty file"),
    (b"just some text, not an image\n", "not a readable image"),
    (encode("RGB", fmt="JPEG")[:-40], "truncated JPEG"),
    (encode("RGB", fmt="PNG")[:-20], "truncated PNG"),
    (encode("P", fmt="GIF")[:-5], "truncated GIF"),
    (encode("RGB", fmt="BMP")[:-50], "truncated BMP"),
])
def test_broken_files_are_refused_with_their_reason(data, reason):
    with pytest.raises(image_headers.ImageProblem, match=reason):
        image.prepare(data)


def test_decompression_bomb_is_refused(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(image_headers.ImageProblem, match="decompression bomb"):
        image.prepare(encode("RGB", size=(20, 20), fmt="PNG"))


def test_decode_check_catches_damage_the_header_check_cannot_see():
    data = bytearray(encode("RGB", size=(64, 64), fmt="PNG"))
    start = data.index(b"IDAT") + 4
    data[start + 10:start + 200] = b"\x00" * 190  # garble the pixels, keep IEND
    image.prepare(bytes(data), "header")
    with pytest.raises(image_headers.ImageProblem, match="fails to decode"):
        image.prepare(bytes(data), "decode")


@pytest.mark.parametrize("case", sorted(CASES))
def test_header_parsers_agree_with_pillow(case):
    data = CASES[case]()
    assert image.prepare(data, "header")[1] == image.prepare(data, "decode")[1]


def test_jpeg_header_parser_skips_exif_and_fill_bytes():
    data = encode("RGB", size=(33, 21), fmt="JPEG", exif=b"Exif\x00\x00" + b"\x00" * 500)
    padded = data[:2] + b"\xff\xff" + data[2:]  # fill bytes before a marker are legal
    for d in (data, padded):
        assert image_headers._jpeg_header(d) == (21, 33, 3)


# --- files as phones write them ---------------------------------------------------------

def _photo(**save) -> bytes:
    """A JPEG with an EXIF block holding a thumbnail (a whole JPEG, FFD9 included)."""
    big = Image.frombytes("RGB", (96, 64), bytes(range(256)) * 72)
    thumb = io.BytesIO()
    big.resize((24, 16)).save(thumb, "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 1
    out = io.BytesIO()
    # Pillow writes the thumbnail as raw bytes inside APP1 when given as exif bytes.
    big.save(out, "JPEG", exif=exif.tobytes() + thumb.getvalue(), **save)
    return out.getvalue()


def _mpo() -> bytes:
    first = Image.frombytes("RGB", (40, 30), bytes(range(200)) * 18)
    out = io.BytesIO()
    first.save(out, "MPO", save_all=True, append_images=[first.rotate(180)])
    return out.getvalue()


MOTION_VIDEO = b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40 + b"\xff\xd9\xff\xd8"
SAMSUNG_TRAILER = b"\x00\x00SEFH" + b"\x01" * 300 + b"SEFT"

# name -> (image bytes, bytes a phone appends after them)
PHONE_FILES = {
    "motion photo (video after the JPEG)": (_photo(), MOTION_VIDEO),
    "samsung trailer": (_photo(), SAMSUNG_TRAILER),
    "progressive jpeg + trailer": (_photo(progressive=True), SAMSUNG_TRAILER),
    "jpeg with restart markers + trailer": (_photo(restart_marker_blocks=2), MOTION_VIDEO),
    "png + bytes after IEND": (encode("RGB", fmt="PNG"), b"\x00garbage after IEND" * 10),
    "gif + bytes after the trailer": (encode("P", fmt="GIF"), b"extra bytes"),
    "multi-picture jpeg (MPO)": (_mpo(), b""),
}


@pytest.mark.parametrize("check", image.CHECKS)
@pytest.mark.parametrize("case", sorted(PHONE_FILES))
def test_images_with_bytes_after_their_end_are_written_without_them(tf, case, check):
    picture, appended = PHONE_FILES[case]
    data = picture + appended
    decoded_whole = tf.io.decode_image(data, expand_animations=False)  # valid as it is
    stored, info = image.prepare(data, check)
    assert stored == picture  # the image itself, without what follows it
    decoded = tf.io.decode_image(stored, expand_animations=False)
    assert [info.height, info.width, info.channels] == decoded.shape.as_list()
    assert decoded.numpy().tobytes() == decoded_whole.numpy().tobytes()
    assert info.format in ("jpeg", "png", "gif")


@pytest.mark.parametrize("check", image.CHECKS)
@pytest.mark.parametrize("make,cut", [
    (lambda: _photo(), 300),                      # inside the scan data
    (lambda: _photo(progressive=True), 500),      # between two progressive scans
    (lambda: encode("RGB", size=(64, 64), fmt="PNG"), 30),
    (lambda: encode("P", size=(64, 64), fmt="GIF"), 40),
], ids=["jpeg", "progressive jpeg", "png", "gif"])
def test_truncated_images_are_still_refused(tf, make, cut, check):
    data = make()[:-cut]
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data, expand_animations=False)  # TensorFlow refuses it too
    with pytest.raises(image_headers.ImageProblem, match="truncated|fails to decode"):
        image.prepare(data, check)


@pytest.mark.parametrize("check", image.CHECKS)
def test_a_jpeg_cut_right_after_its_exif_thumbnail_is_refused(check):
    # The thumbnail's own end-of-image marker must not pass for the photo's.
    data = _photo()
    thumb_end = data.index(b"\xff\xd9") + 2
    assert thumb_end < len(data) - 100
    with pytest.raises(image_headers.ImageProblem, match="truncated JPEG|not a readable image"):
        image.prepare(data[:thumb_end] + b"\x00" * 5000, check)


# --- pre-sizing (shorter_side) ----------------------------------------------------------

def _psnr(a, b) -> float:
    import numpy as np

    err = np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    return float("inf") if err == 0 else 10 * np.log10(255.0 ** 2 / err)


def _photo_like(w, h, seed=0, mode="RGB"):
    import numpy as np

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 / w), (y * 255 / h), ((x + y) * 127 / (w + h))], axis=2)
    # Smooth blotches (a small random field, upsampled) and a little grain, like a photo.
    field = Image.fromarray(rng.integers(0, 256, (h // 24 + 2, w // 24 + 2, 3), dtype="uint8"))
    blotches = np.asarray(field.resize((w, h), Image.Resampling.BICUBIC), np.float64) - 128
    grain = rng.normal(0, 3, (h, w, 3))
    img = Image.fromarray(np.clip(base * 0.6 + blotches * 0.5 + grain + 40, 0, 255).astype("uint8"))
    return img.convert(mode)


def _reference(img, shorter, quality=90):
    """A straightforward resize: full decode, EXIF orientation, Lanczos in one step, then
    the same JPEG encoding, so that a comparison measures the resizing alone."""
    from PIL import ImageOps

    img = ImageOps.exif_transpose(img)
    scale = shorter / min(img.size)
    size = (round(img.width * scale), round(img.height * scale))
    out = io.BytesIO()
    img.convert("RGB").resize(size, Image.Resampling.LANCZOS).save(out, "JPEG", quality=quality)
    return Image.open(out)


def _jpeg(img, **kw):
    out = io.BytesIO()
    img.save(out, "JPEG", quality=95, **kw)
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("check", image.CHECKS)
def test_downscaled_images_match_a_reference_resize(tf, check):
    data = _jpeg(_photo_like(1200, 900))
    stored, info = image.prepare(data, check, image.Sizing(256, 90))
    assert (info.format, info.height, info.width, info.channels) == ("jpeg", 256, 341, 3)
    decoded = tf.io.decode_image(stored).numpy()
    assert list(decoded.shape) == [256, 341, 3]
    reference = _reference(Image.open(io.BytesIO(data)), 256)
    assert _psnr(decoded, reference) > 38  # DCT draft + Lanczos ~ a full-size resize
    assert _psnr(decoded, Image.open(io.BytesIO(data)).resize((341, 256))) > 30  # sanity


def test_downscaling_does_not_alias():
    import numpy as np

    # One-pixel stripes: a filter that skips pixels would turn them into bands.
    stripes = (np.indices((800, 1000)).sum(axis=0) % 2 * 255).astype("uint8")
    data = io.BytesIO()
    Image.fromarray(stripes).save(data, "PNG")
    stored, info = image.prepare(data.getvalue(), "header", image.Sizing(100))
    small = np.asarray(Image.open(io.BytesIO(stored)))
    assert info.channels == 1 and small.shape == (100, 125)
    assert abs(small.mean() - 127.5) < 4 and small.std() < 6  # an even grey


def test_exif_orientation_is_applied_before_resizing(tf):
    import numpy as np

    img = Image.new("RGB", (600, 400), (220, 20, 20))
    img.paste((20, 20, 220), (300, 0, 600, 400))  # left red, right blue
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise: red on top
    data = _jpeg(img, exif=exif.tobytes())
    stored, info = image.prepare(data, "header", image.Sizing(100))
    assert (info.height, info.width) == (150, 100)  # upright: a portrait
    pixels = tf.io.decode_image(stored).numpy()
    assert pixels[10, 50, 0] > 180 and pixels[140, 50, 2] > 180
    assert _psnr(pixels, _reference(Image.open(io.BytesIO(data)), 100)) > 38


@pytest.mark.parametrize("mode,fmt,channels", [("RGBA", "png", 4), ("L", "jpeg", 1),
                                                ("CMYK", "jpeg", 3), ("P", "jpeg", 3)])
def test_resized_formats_follow_transparency(tf, mode, fmt, channels):
    img = _photo_like(400, 300, mode=mode if mode != "CMYK" else "RGB")
    out = io.BytesIO()
    if mode == "CMYK":
        img.convert("CMYK").save(out, "JPEG")
    else:
        img.save(out, "PNG")
    stored, info = image.prepare(out.getvalue(), "header", image.Sizing(64))
    assert (info.format, info.channels, info.height) == (fmt, channels, 64)
    assert tf.io.decode_image(stored).shape.as_list() == [64, 85, channels]


def test_images_at_or_below_the_size_stay_as_they_are():
    for w, h in ((256, 400), (300, 256), (100, 80)):
        data = _jpeg(_photo_like(w, h))
        stored, info = image.prepare(data, "header", image.Sizing(256))
        assert stored is data and (info.width, info.height) == (w, h)


def _png(pixels, bits: int, colour: int) -> bytes:
    """A PNG of ``pixels`` (numpy, H x W [x C]) at ``bits`` per sample, IHDR colour type
    ``colour`` (0 grey, 2 RGB, 4 grey + alpha, 6 RGBA), written by hand: Pillow cannot
    write 16-bit colour PNGs."""
    import numpy as np

    dtype = ">u2" if bits == 16 else "u1"
    raw = b"".join(b"\x00" + np.ascontiguousarray(row).astype(dtype).tobytes() for row in pixels)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    h, w = pixels.shape[:2]
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bits, colour, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def _every_mode():
    """(name, bytes, a PNG of the same pixels that TensorFlow decodes) for every mode
    Pillow opens a PNG or TIFF as: smooth ramps, so resizing changes little."""
    import numpy as np

    def save(img, fmt, **options):
        out = io.BytesIO()
        img.save(out, fmt, **options)
        return out.getvalue()

    h, w = 48, 64
    y, x = np.mgrid[0:h, 0:w]
    g16 = (x * 65535 // (w - 1)).astype(np.uint16)
    a16 = (y * 65535 // (h - 1)).astype(np.uint16)
    rgb16 = np.stack([g16, a16, 65535 - g16], -1)
    g8, a8, rgb8 = (v >> 8 for v in (g16, a16, rgb16))
    g8, a8, rgb8 = g8.astype(np.uint8), a8.astype(np.uint8), rgb8.astype(np.uint8)
    pngs = {
        "1": save(Image.fromarray(g8 > 127), "PNG"),
        "L": _png(g8, 8, 0), "LA": _png(np.stack([g8, a8], -1), 8, 4),
        "P": save(Image.fromarray(rgb8).convert("P"), "PNG"),
        "P with transparency": save(Image.fromarray(rgb8).convert("P"), "PNG", transparency=0),
        "RGB": _png(rgb8, 8, 2), "RGBA": _png(np.dstack([rgb8, a8]), 8, 6),
        "I;16": _png(g16, 16, 0), "16-bit LA": _png(np.stack([g16, a16], -1), 16, 4),
        "16-bit RGB": _png(rgb16, 16, 2), "16-bit RGBA": _png(np.dstack([rgb16, a16]), 16, 6),
    }
    for name, data in pngs.items():
        yield f"PNG {name}", data, data
    tiffs = {
        "1": (Image.fromarray(g8 > 127), "1"), "L": (Image.fromarray(g8), "L"),
        "LA": (Image.fromarray(np.stack([g8, a8], -1), "LA"), "LA"),
        "P": (Image.fromarray(rgb8).convert("P"), "P"), "RGB": (Image.fromarray(rgb8), "RGB"),
        "RGBA": (Image.fromarray(np.dstack([rgb8, a8]), "RGBA"), "RGBA"),
        "CMYK": (Image.fromarray(rgb8).convert("CMYK"), "RGB"),
        "I;16": (Image.fromarray(g16), "I;16"),
        "I;16B": (Image.fromarray(g16).convert("I").convert("I;16B"), "I;16"),
        "I": (Image.fromarray(g16.astype(np.int32), "I"), "I;16"),
    }
    for name, (img, twin) in tiffs.items():
        data = save(img, "TIFF")
        reference = pngs.get(twin) or save(img.convert(twin), "PNG")
        yield f"TIFF {name}", data, reference


@pytest.mark.parametrize("name, data, reference", list(_every_mode()),
                         ids=[n for n, _, _ in _every_mode()])
def test_downscaled_images_keep_their_appearance_in_every_mode(tf, name, data, reference):
    # A 16-bit grey image became almost all white: Pillow's conversion to 8 bits clips.
    as_is, plain = image.prepare(data)
    stored, info = image.prepare(data, "header", image.Sizing(24))
    assert (info.height, info.width) == (24, 32)
    assert info.channels == plain.channels, name  # as the unresized image decodes
    got = tf.io.decode_image(stored, expand_animations=False)
    assert got.shape == (24, 32, info.channels)
    want = tf.io.decode_image(reference, channels=0 if info.channels == 2 else info.channels,
                              expand_animations=False)
    want = tf.image.resize(tf.cast(want, tf.float32), (24, 32), antialias=True)
    diff = tf.reduce_mean(tf.abs(tf.cast(got, tf.float32) - want))
    assert float(diff) < 4, f"{name}: mean difference {float(diff):.1f} of 255"
    unresized = tf.io.decode_image(as_is, expand_animations=False)  # stored as is, or as PNG
    want = tf.image.resize(tf.cast(unresized, tf.float32), (24, 32), antialias=True)
    assert float(tf.reduce_mean(tf.abs(tf.cast(got, tf.float32) - want))) < 4, name


@pytest.mark.slow  # another Python process
def test_a_header_check_of_a_common_format_does_not_import_pillow(tmp_path):
    import os
    import subprocess
    import sys

    small = tmp_path / "a.jpg"
    small.write_bytes(encode("RGB", size=(40, 30), fmt="JPEG"))
    huge = tmp_path / "huge.png"  # a header claiming 20000x10000: over twice Pillow's limit
    huge.write_bytes(b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sIIBBBBBI", 13, b"IHDR", 20000,
                                                           10000, 8, 2, 0, 0, 0, 0))
    code = f"""
import sys
from tfrecorder._folder import image_headers
from tfrecorder._writer import image
print(image.prepare(open({str(small)!r}, "rb").read())[1], "PIL.Image" in sys.modules)
try:
    image.prepare(open({str(huge)!r}, "rb").read())
except image_headers.ImageProblem as e:
    print(e)
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(image.__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=root).stdout.splitlines()
    assert out[0] == "ImageInfo(format='jpeg', height=30, width=40, channels=3) False"
    assert out[1].startswith("decompression bomb: 20000x10000") and "(89478485)" in out[1]


@pytest.mark.slow
def test_threads_that_pre_size_and_check_headers_at_once_from_a_fresh_process(tmp_path):
    # A worker's first images are handled by several threads at once, and the first of
    # them to need Pillow imports it while the others check headers: they must never see
    # a half-imported PIL.Image ("partially initialized module ... MAX_IMAGE_PIXELS").
    import os
    import subprocess
    import sys

    files = []
    for i, fmt in enumerate(["JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP"]):
        path = tmp_path / f"big{i}.{fmt.lower()}"
        path.write_bytes(encode("RGB", size=(64, 48), fmt=fmt, seed=i))
        files.append(str(path))
    small = tmp_path / "small.jpg"
    small.write_bytes(encode("RGB", size=(12, 10), fmt="JPEG"))
    code = f"""
import sys, threading
from tfrecorder._writer import image
assert "PIL.Image" not in sys.modules
big = [open(p, "rb").read() for p in {files!r}]
small = open({str(small)!r}, "rb").read()
sizing = image.Sizing(shorter_side=16)
start, done, errors = threading.Barrier(4 + len(big)), threading.Event(), []
def presize(data):
    start.wait()
    try:
        image.prepare(data, "header", sizing)
    except Exception as e:
        errors.append(repr(e))
def imported():
    module = sys.modules.get("PIL.Image")
    return module is not None and hasattr(module, "MAX_IMAGE_PIXELS")
def check_headers():
    start.wait()
    after = 0  # checks made once Pillow is whole: the race is over after a few
    while not done.is_set() and after < 50:
        try:
            image.prepare(small, "header", sizing)  # not resized: a header check only
        except Exception as e:
            errors.append(repr(e))
            return
        after += imported()
threads = [threading.Thread(target=check_headers) for _ in range(4)]
workers = [threading.Thread(target=presize, args=(d,)) for d in big]
for t in threads + workers:
    t.start()
for t in workers:
    t.join()
done.set()
for t in threads:
    t.join()
print(len(errors), errors[:2])
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(image.__file__)))
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=root)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "0 []"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP"])
def test_stored_bytes_open_as_their_format_with_the_pixels_pillow_gives(fmt):
    pixels = np.arange(8 * 6 * 3, dtype=np.uint8).reshape(6, 8, 3)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, fmt)
    data = buf.getvalue()
    opened = image_headers.open_stored(data)
    assert opened.format == fmt
    assert np.array_equal(np.asarray(opened), np.asarray(Image.open(io.BytesIO(data))))


def test_bytes_that_no_format_reads_are_refused_as_pillow_refuses_them():
    for data in (b"\xff\xd8\xff" + b"\x00" * 40, b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, b"junk"):
        with pytest.raises(Image.UnidentifiedImageError):
            image_headers.open_stored(data)
