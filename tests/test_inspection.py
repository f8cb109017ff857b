import csv
import os

import pytest

import tfrecorder
from tests.conftest import SAMPLES


@pytest.fixture(scope="module")
def out(samples_converted):
    return samples_converted()[0]  # read only


def test_inspect_writes_a_csv_and_the_original_image_files(out, tmp_path):
    result = tfrecorder.inspect(out, split="TRAIN", num_records=4, output_dir=str(tmp_path / "i"))
    rows = list(csv.DictReader(open(result.csv_path)))
    assert len(rows) == 4 == len(result.images)
    assert set(rows[0]) >= {"label", "label_name", "image_name", "image_file", "image_height"}
    for row in rows:
        written = open(tmp_path / "i" / row["image_file"], "rb").read()
        assert written == open(os.path.join(SAMPLES, "images", row["image_name"]), "rb").read()
        assert row["label_name"] in ("circle", "square", "triangle")
        assert row["label_name"] == row["image_name"].split("_")[0]
    assert result.split_counts == {"train": 27, "validation": 6, "test": 3}
    assert result.label_counts["validation"] == {"circle": 2, "square": 2, "triangle": 2}


def test_inspection_renders_thumbnails_and_counts(out):
    result = tfrecorder.inspect(out, split="test", num_records=10)
    html = result._repr_html_()
    assert html.count("<img src='data:image/") == 3
    assert "<th>label</th>" in html and "triangle" in html
    assert os.path.isdir(result.output_dir)
    assert "test 3" in str(result)


def test_inspect_refuses_unknown_splits(out):
    with pytest.raises(tfrecorder.ConfigError, match="it has"):
        tfrecorder.inspect(out, split="holdout")


@pytest.mark.parametrize("damage,error,words", [
    ("missing", tfrecorder.IncompleteOutputError, ["is missing", "mode='overwrite'"]),
    ("a folder", tfrecorder.CorruptRecordError, ["is a folder", "mode='overwrite'"]),
])
def test_verify_names_a_shard_that_is_missing_or_a_folder(out, tmp_path, damage, error, words):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = sorted(n for n in os.listdir(copy) if "-train.tfrecord-" in n)[0]
    os.remove(copy / shard)
    if damage == "a folder":
        os.mkdir(copy / shard)
    with pytest.raises(error) as e:
        tfrecorder.verify(str(copy))
    assert str(copy / shard) in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_verify_names_a_shard_of_another_size_than_its_manifest_says(out, tmp_path):
    # Sound records, as many as the manifest counts, in a file of another size: not the
    # shard the version published (another run's, written over it).
    import shutil

    from tfrecorder._readers.inspection import shard_records
    from tfrecorder._folder import records

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = sorted(n for n in os.listdir(copy) if "-train.tfrecord-" in n)[0]
    kept = list(shard_records(str(copy / shard), None))
    size = os.path.getsize(copy / shard)
    (copy / shard).write_bytes(b"".join(map(records.frame, kept[:-1] + [kept[-1] + b"x"])))
    with pytest.raises(tfrecorder.CorruptRecordError) as e:
        tfrecorder.verify(str(copy))
    assert str(copy / shard) in str(e.value)
    assert f"{size + 1} bytes, the manifest says {size}" in str(e.value)


#: Labels a spreadsheet would run as formulas if data.csv held them as they are.
FORMULAS = ["=cmd|' /C calc'!A0", "+SUM(1,2)", "-2+3", "@SUM(A1)"]


def test_inspect_csv_holds_no_cell_a_spreadsheet_would_run(tmp_path, image_table):
    import pandas as pd

    from tests.conftest import encode

    labels = [*FORMULAS, "plain"]
    df = pd.DataFrame({
        "split": ["TRAIN"] * len(labels),
        "image_uri": [image_table(f"{i}.jpg", encode(seed=i)) for i in range(len(labels))],
        "label": labels})
    df.loc[len(df)] = ["TRAIN", image_table("=HYPERLINK(1).png", encode(fmt="PNG")), "plain"]
    out = str(tmp_path / "out")
    tfrecorder.convert(df, out)
    result = tfrecorder.inspect(out, num_records=len(df), output_dir=str(tmp_path / "i"))
    rows = list(csv.DictReader(open(result.csv_path, newline="")))
    assert len(rows) == len(df)
    for row in rows:
        for column, cell in row.items():
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (column, cell)
    names = sorted(r["label_name"] for r in rows)
    assert names == sorted(["'" + f for f in FORMULAS] + ["plain", "plain"])
    assert "'=HYPERLINK(1).png" in {r["image_name"] for r in rows}
    # What inspect returns keeps the values as stored; numbers stay numbers in the file.
    assert sorted(r["label_name"] for r in result.rows) == sorted(labels + ["plain"])
    assert all(r["label"].isdigit() and r["image_height"] == "16" for r in rows)


@pytest.mark.parametrize("value,cell", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@x", "'@x"), ("\tx", "'\tx"),
    ("\rx", "'\rx"), ("a=b", "a=b"), ("", ""), (-3, -3), (2.5, 2.5), ([-1, 2], "[-1, 2]"),
])
def test_a_cell_that_would_start_a_formula_gets_a_quote(value, cell):
    from tfrecorder._readers.inspection import _cell

    assert _cell(value) == cell


def _photo(size, seed, fmt="JPEG", mode="RGB", orientation=None) -> bytes:
    """A large noisy image, the worst case for a JPEG's size (a phone photo's scale)."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    bands = len(mode)
    pixels = rng.integers(0, 256, (size[1], size[0], bands), np.uint8)
    img = Image.fromarray(pixels if bands > 1 else pixels[..., 0], mode)
    out = io.BytesIO()
    save = {"quality": 95} if fmt == "JPEG" else {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        save["exif"] = exif.tobytes()
    img.save(out, fmt, **save)
    return out.getvalue()


@pytest.mark.slow
def test_a_notebook_shows_small_thumbnails_of_large_images(tmp_path):
    import base64
    import io
    import re

    import pandas as pd
    from PIL import Image

    images = {  # name: (bytes, the thumbnail's expected size and format)
        "wide.jpg": (_photo((2400, 1800), 0), (128, 96), "JPEG"),
        "tall.jpg": (_photo((1800, 2400), 1), (96, 128), "JPEG"),
        # stored 2400 x 1800, shown turned upright by its EXIF orientation (6: 90 degrees)
        "turned.jpg": (_photo((2400, 1800), 2, orientation=6), (96, 128), "JPEG"),
        "clear.png": (_photo((1000, 500), 3, "PNG", "RGBA"), (128, 64), "PNG"),
        "opaque.png": (_photo((600, 600), 4, "PNG"), (128, 128), "JPEG"),
        "small.png": (_photo((40, 30), 5, "PNG"), (40, 30), "JPEG"),
    }
    for name, (data, _, _) in images.items():
        (tmp_path / name).write_bytes(data)
    stored = sum(len(d) for d, _, _ in images.values())
    assert stored > 10_000_000  # what the notebook held when the files were embedded
    table = pd.DataFrame({"split": "TRAIN", "image_uri": [str(tmp_path / n) for n in images],
                          "label": list(images)})
    out = str(tmp_path / "out")
    tfrecorder.convert(table, out)
    result = tfrecorder.inspect(out, num_records=len(images), output_dir=str(tmp_path / "i"))
    html = result._repr_html_()
    assert len(html) < 120_000, len(html)

    found = re.findall(r"<img src='data:image/(\w+);base64,([^']+)'/><figcaption>([^<]*)<",
                       html)
    assert sorted(c for _, _, c in found) == sorted(images)
    for kind, data, caption in found:
        thumb = Image.open(io.BytesIO(base64.b64decode(data)))
        _, size, fmt = images[caption]
        assert (thumb.format, thumb.size) == (fmt, size), caption
        assert kind == fmt.lower()
        if caption == "clear.png":  # transparency kept
            assert thumb.mode == "RGBA"
            assert thumb.getchannel("A").getextrema()[0] < 255
    # The files inspect writes are still the stored images, whole.
    written = {row["image_name"]: row["image_file"] for row in result.rows}
    for name, (data, _, _) in images.items():
        assert (tmp_path / "i" / written[name]).read_bytes() == data


def test_inspect_replaces_no_file_it_did_not_write(out, tmp_path, run_cli):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "data.csv").write_text("my table\n")
    p = run_cli("inspect", out, "--output-dir", folder)
    assert p.returncode == 2
    assert p.stderr.startswith(f"Error: {folder / 'data.csv'} is there already")
    assert "inspect did not write it" in p.stderr and "Traceback" not in p.stderr
    assert os.listdir(folder) == ["data.csv"]
    assert (folder / "data.csv").read_text() == "my table\n"
    # A folder inspect wrote is its own: a second look replaces its files, and only them.
    first = tfrecorder.inspect(out, num_records=2, output_dir=str(tmp_path / "look"))
    (tmp_path / "look" / "notes.txt").write_text("kept")
    again = tfrecorder.inspect(out, num_records=3, output_dir=str(tmp_path / "look"))
    assert len(list(csv.DictReader(open(again.csv_path)))) == 3
    assert {r["image_file"] for r in first.rows} <= set(os.listdir(tmp_path / "look"))
    assert (tmp_path / "look" / "notes.txt").read_text() == "kept"


def test_inspect_into_a_file_says_so(out, tmp_path, run_cli):
    (tmp_path / "f").write_text("x")
    p = run_cli("inspect", out, "--output-dir", tmp_path / "f")
    assert p.returncode == 2
    assert p.stderr == f"Error: output_dir {str(tmp_path / 'f')!r} is a file; give a " \
                       f"folder for the records' CSV and images (a new one is made)\n"
    assert (tmp_path / "f").read_text() == "x"


def test_inspect_names_a_stored_webp_file_webp(tmp_path, image_table):
    import pandas as pd

    from tests.conftest import encode

    uri = image_table("still.webp", encode(fmt="WEBP"))
    out = str(tmp_path / "out")
    tfrecorder.convert(pd.DataFrame({"split": ["TRAIN"], "image_uri": [uri],
                                     "label": ["a"]}), out)
    result = tfrecorder.inspect(out, num_records=1, output_dir=str(tmp_path / "i"))
    assert result.rows[0]["image_file"] == "00000_still.webp"
    assert (tmp_path / "i" / "00000_still.webp").read_bytes() == open(uri, "rb").read()
