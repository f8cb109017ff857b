"""The hand-written image header parsers (tfrecorder/_folder/image_headers.py) read untrusted
files: searched with hypothesis against Pillow, which reads the same headers its own way."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from tfrecorder._folder import image_headers
from tfrecorder._writer import image

_MODES = {"JPEG": ["L", "RGB", "CMYK"], "PNG": ["1", "L", "LA", "P", "RGB", "RGBA", "I;16"],
          "GIF": ["L", "P", "RGB"], "BMP": ["1", "L", "P", "RGB", "RGBA"]}


@st.composite
def _images(draw):
    """Bytes Pillow wrote: a format, a mode it writes, a size, options that change the
    header (progressive JPEG, EXIF, a PNG palette with transparency)."""
    fmt = draw(st.sampled_from(sorted(_MODES)))
    mode = draw(st.sampled_from(_MODES[fmt]))
    size = (draw(st.integers(1, 40)), draw(st.integers(1, 40)))
    img = Image.new(mode, size, color=draw(st.integers(0, 255)) if mode in ("1", "L", "P", "I;16")
                    else None)
    save = {}
    if fmt == "JPEG":
        save = {"progressive": draw(st.booleans()), "quality": draw(st.integers(5, 95))}
        if draw(st.booleans()):
            exif = Image.Exif()
            exif[0x0112] = draw(st.integers(1, 8))
            save["exif"] = exif.tobytes()
    if fmt == "PNG" and mode == "P" and draw(st.booleans()):
        save["transparency"] = 0
    out = io.BytesIO()
    img.save(out, fmt, **save)
    return out.getvalue()


def _pillow(data: bytes):
    """(format, height, width) as Pillow reads the header, or None when it cannot."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.format, img.height, img.width
    except Exception:
        return None


_FAST = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.slow
@_FAST
@given(_images())
def test_a_header_read_by_hand_is_the_header_pillow_reads(data):
    """Where the parsers read a header (the common formats and depths), they read
    Pillow's size, and the channels and stored bytes that Pillow's full check gives."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            fmt, height, width = img.format, img.height, img.width
    except OSError:
        assume(False)  # a file Pillow writes but cannot read back (a BMP without palette)
    info = image_headers._fast_info(data)
    if info is None:
        return  # read by Pillow alone: nothing of ours to compare
    assert (info.format, info.height, info.width) == (image.PASS_THROUGH[fmt], height, width)
    assert image_headers.image_end(data, info.format) == len(data)
    kept, full = image._prepare(data, "decode")
    assert kept == data and full == info


@pytest.mark.slow
@_FAST
@given(_images(), st.data())
def test_damaged_headers_are_refused_or_read_as_pillow_reads_them(data, draw):
    """Bytes changed anywhere in the first 64 (where the headers are) or cut short: the
    parsers end, raise nothing but ImageProblem, and a size they read is Pillow's."""
    cut = draw.draw(st.integers(1, len(data)))
    damaged = bytearray(data[:cut])
    for _ in range(draw.draw(st.integers(0, 4))):
        at = draw.draw(st.integers(0, min(len(damaged), 64) - 1))
        damaged[at] = draw.draw(st.integers(0, 255))
    damaged = bytes(damaged)
    info = image_headers._fast_info(damaged)
    if info is None:
        return
    try:
        end = image_headers.image_end(damaged, info.format)
    except image_headers.ImageProblem:
        return
    assert end <= len(damaged)
    seen = _pillow(damaged)
    if seen is not None and image.PASS_THROUGH.get(seen[0]) == info.format:
        assert (info.height, info.width) == seen[1:]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"BM"]),
       st.binary(max_size=200))
def test_any_bytes_after_a_signature_end_the_parsers(signature, rest):
    data = signature + rest
    info = image_headers._fast_info(data)
    for fmt in ("jpeg", "png", "gif", "bmp", "webp"):
        try:
            assert image_headers.image_end(data, fmt) <= len(data)
        except image_headers.ImageProblem:
            pass
    assert info is None or info.format in ("jpeg", "png", "gif", "bmp")
