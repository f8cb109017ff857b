"""No silent wrong data: inputs that used to convert into something other than what they
hold (lost values, shifted ids, missing rows, images that do not decode) either convert
faithfully or are refused up front."""

from __future__ import annotations

import decimal
import json

import numpy as np
import pandas as pd
import pytest

import tfrecorder
from tfrecorder import types
from tfrecorder._inputs import labels
from tfrecorder._folder import metadata
from tfrecorder.input_schema import Schema
from tests.conftest import encode, read_split, write_images


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    return write_images(tmp_path_factory.mktemp("jpegs"), 6)


def _strict_lines(path) -> list[dict]:
    """errors.jsonl parsed by a strict JSON parser (NaN and Infinity refused)."""
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    return [json.loads(line, parse_constant=refuse)
            for line in open(path, encoding="utf-8").read().splitlines()]


# --- schema ------------------------------------------------------------------------------


@pytest.mark.slow  # a conversion end to end
def test_a_column_named_like_an_image_feature_is_refused_unless_it_is_the_image(tf, tmp_path,
                                                                                 jpegs):
    # Its values would be replaced by the image bytes, and the manifest would declare
    # `image` a plain column, so load() would stop decoding images.
    for name in ("image", "image_height", "image_format"):
        with pytest.raises(tfrecorder.ConfigError, match=f"'{name}' would collide"):
            Schema({"split": types.SplitKey, "image_uri": types.ImageUri,
                    "label": types.Label, name: types.StringInput})
    with pytest.raises(tfrecorder.ConfigError, match="'image_uri' would collide"):
        Schema({"path": types.ImageUri, "image_uri": types.StringInput})
    # Without an image column no image feature is written: the name is free.
    Schema({"image_uri": types.StringInput, "image_name": types.StringInput})
    schema = Schema({"image": types.ImageUri, "label": types.Label})
    df = pd.DataFrame({"image": jpegs[:2], "label": [0, 1]})
    tfrecorder.convert(df, str(tmp_path / "out"), schema=schema)
    assert metadata.read_manifest(str(tmp_path / "out")).image_key == "image"
    images = [ex["image"] for ex in tfrecorder.load(str(tmp_path / "out"), split="train")]
    assert [tuple(i.shape) for i in images] == [(16, 24, 3)] * 2


# --- errors.jsonl ------------------------------------------------------------------------


@pytest.mark.parametrize("index, bad, written", [
    (pd.date_range("2024-05-01 12:00", periods=3, freq="D"), 1, "2024-05-02T12:00:00"),
    (pd.period_range("2024-05", periods=3, freq="M"), 1, "2024-06"),
    (pd.timedelta_range("1D", periods=3, freq="D"), 1, "2 days 00:00:00"),
    (pd.interval_range(0, 3), 1, "(1, 2]"),
    (pd.Index([0.5, float("nan"), 2.5]), 1, "nan"),
    (pd.Index([0.5, 1.5, float("inf")]), 2, "inf"),
    (pd.MultiIndex.from_tuples([("a", 1), ("a", 2), ("b", 1)]), 2, ["b", 1]),
], ids=["timestamp", "period", "timedelta", "interval", "nan", "inf", "multiindex"])
def test_row_ids_of_every_index_type_are_written_as_strict_json(tmp_path, jpegs, index, bad,
                                                                  written):
    uris = list(jpegs[:3])
    uris[bad] = str(tmp_path / "missing.jpg")
    df = pd.DataFrame({"split": "TRAIN", "image_uri": uris, "label": ["cat", "dog", "cat"]},
                      index=index)
    result = tfrecorder.convert(df, str(tmp_path / "out"), max_error_fraction=1.0)
    assert (result.rows_written, result.rows_quarantined) == (2, 1)
    (line,) = _strict_lines(tmp_path / "out" / "errors.jsonl")
    assert line["row"] == written and line["reason"].startswith("image file not found: ")


def test_infinite_values_in_a_quarantined_row_are_strict_json(tmp_path, jpegs):
    schema = Schema({"image_uri": types.ImageUri, "label": types.Label,
                     "weight": types.FloatInput})
    df = pd.DataFrame({"image_uri": [jpegs[0], str(tmp_path / "missing.jpg")],
                       "label": [0, 1], "weight": [1.0, float("-inf")]})
    tfrecorder.convert(df, str(tmp_path / "out"), schema=schema, max_error_fraction=1.0)
    (line,) = _strict_lines(tmp_path / "out" / "errors.jsonl")
    assert line["row"] == 1 and line["values"]["weight"] == "-inf"


def test_every_row_of_a_missing_multi_label_image_is_its_own_errors_line(tf, tmp_path, jpegs):
    missing = str(tmp_path / "missing.jpg")
    df = pd.DataFrame({"split": "TRAIN",
                       "image_uri": [missing, jpegs[0], missing, missing, jpegs[1]],
                       "label": ["cat", "dog", "dog", "bird", "cat"]})
    result = tfrecorder.convert(df, str(tmp_path / "out"), max_error_fraction=1.0,
                                multi_label=True)
    lines = _strict_lines(tmp_path / "out" / "errors.jsonl")
    assert [(e["row"], e["values"]["label"]) for e in lines] == [(0, "cat"), (2, "dog"),
                                                                 (3, "bird")]
    assert {e["reason"].split(":")[0] for e in lines} == {"image file not found"}
    assert (result.rows_in, result.rows_written, result.rows_quarantined) == (5, 2, 3)
    assert result.rows_in == result.rows_written + len(lines)


# --- label cells as other readers give them ---------------------------------------------


@pytest.mark.slow  # a conversion end to end
def test_multi_label_cells_read_back_from_parquet_convert_like_lists(tf, tmp_path, jpegs):
    lists = [["cat", "dog"], ["dog"], ["bird", "cat"], ["cat"]]
    uris = [*jpegs[:3], str(tmp_path / "missing.jpg")]
    as_lists = pd.DataFrame({"split": "TRAIN", "image_uri": uris, "label": lists})
    # pandas.read_parquet gives each list cell as a NumPy array of objects.
    as_arrays = as_lists.assign(label=[np.array(v, dtype=object) for v in lists])
    got = []
    for name, df in (("lists", as_lists), ("arrays", as_arrays)):
        out = tmp_path / name
        result = tfrecorder.convert(df, str(out), max_error_fraction=1.0)
        records = sorted((e["image_name"][0], e["label"]) for e in read_split(tf, out))
        (line,) = _strict_lines(out / "errors.jsonl")
        got.append((result.labels, records, line["values"]["label"]))
    assert got[0] == got[1]
    assert got[1][0] == ["bird", "cat", "dog"] and got[1][2] == ["cat"]
    assert got[1][1] == [(b"0.jpg", [1, 2]), (b"1.jpg", [2]), (b"2.jpg", [0, 1])]


@pytest.mark.slow  # a conversion end to end
def test_decimal_and_bytes_labels_are_read_like_numbers_and_names(tf, tmp_path, jpegs):
    # pandas.read_sql gives NUMERIC columns as decimal.Decimal, binary ones as bytes.
    ids = pd.DataFrame({"split": "TRAIN", "image_uri": jpegs[:3],
                        "label": [decimal.Decimal(0), decimal.Decimal(2), decimal.Decimal("1.0")]})
    result = tfrecorder.convert(ids, str(tmp_path / "ids"))
    assert result.labels == ["0", "1", "2"]
    got = sorted((e["image_name"][0], e["label"]) for e in read_split(tf, tmp_path / "ids"))
    assert got == [(b"0.jpg", [0]), (b"1.jpg", [2]), (b"2.jpg", [1])]
    names = pd.DataFrame({"split": "TRAIN", "image_uri": jpegs[:3], "label": [b"dog", b"cat", " cat".encode()]})
    result = tfrecorder.convert(names, str(tmp_path / "names"))
    assert result.labels == ["cat", "dog"]
    got = sorted((e["image_name"][0], e["label"]) for e in read_split(tf, tmp_path / "names"))
    assert got == [(b"0.jpg", [1]), (b"1.jpg", [0]), (b"2.jpg", [0])]
    schema = Schema({"image_uri": types.ImageUri, "label": types.Label,
                     "count": types.IntegerInput, "note": types.StringInput})
    table = ids.assign(count=[decimal.Decimal(5)] * 3, note=[b"caf\xc3\xa9"] * 3)
    tfrecorder.convert(table, str(tmp_path / "columns"), schema=schema)
    (first, *_) = read_split(tf, tmp_path / "columns")
    assert (first["count"], first["note"]) == ([5], ["café".encode()])


# --- label vocabularies ---------------------------------------------------------------------


@pytest.mark.slow  # a conversion end to end
def test_a_label_vocabulary_saved_with_a_byte_order_mark_is_read_as_the_csv_is(tf, tmp_path,
                                                                                 jpegs):
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes("dog\r\ncat\r\n".encode("utf-8-sig"))  # as Notepad saves it
    df = pd.DataFrame({"split": "TRAIN", "image_uri": jpegs[:2], "label": ["cat", "dog"]})
    result = tfrecorder.convert(df, str(tmp_path / "out"), label_vocabulary=str(vocab))
    assert result.labels == ["dog", "cat"] and result.rows_written == 2
    got = sorted((e["image_name"][0], e["label"]) for e in read_split(tf, tmp_path / "out"))
    assert got == [(b"0.jpg", [1]), (b"1.jpg", [0])]


@pytest.mark.slow  # a conversion end to end
def test_the_labels_file_a_run_writes_is_accepted_back_whatever_its_names_hold(tf, tmp_path,
                                                                                 jpegs):
    # Characters str.splitlines breaks at, but a labels file does not (only \n does).
    names = ["a\u2028b", "c\x85d", "e\x0cf", "g\x1eh", "i\u2029j", "plain"]
    df = pd.DataFrame({"split": "TRAIN", "image_uri": jpegs, "label": names})
    first = tfrecorder.convert(df, str(tmp_path / "first"))
    written = tmp_path / "first" / "label.labels.txt"
    assert labels.parse_labels_file(written.read_text(encoding="utf-8")) == first.labels
    assert sorted(first.labels) == sorted(names)
    again = tfrecorder.convert(df.iloc[::-1], str(tmp_path / "again"),
                               label_vocabulary=str(written))
    assert again.labels == first.labels
    by_name = lambda out: sorted((e["image_name"][0], e["label"])  # noqa: E731
                                 for e in read_split(tf, out))
    assert by_name(tmp_path / "first") == by_name(tmp_path / "again")


@pytest.mark.slow  # a conversion end to end
def test_every_box_row_of_a_missing_detection_image_is_its_own_errors_line(tmp_path, jpegs):
    missing = tmp_path / "missing.jpg"
    csv_path = tmp_path / "boxes.csv"
    csv_path.write_text(f"TRAIN,{missing},car,0.1,0.2,,,0.5,0.6,,\n"
                        f"TRAIN,{jpegs[0]},car,0,0,,,1,1,,\n"
                        f"TRAIN,{missing},person,0.3,0.1,,,0.9,0.4,,\n")
    result = tfrecorder.convert(str(csv_path), str(tmp_path / "out"), max_error_fraction=1.0)
    lines = _strict_lines(tmp_path / "out" / "errors.jsonl")
    assert [(e["row"], e["values"]["label"]) for e in lines] == [(1, "car"), (3, "person")]
    assert (result.rows_in, result.rows_written, result.rows_quarantined) == (3, 1, 2)
