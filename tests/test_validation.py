"""Messy tables: each gives a correct conversion or one SchemaError listing every problem."""

import os

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tfrecorder
from tfrecorder._inputs import schema as schemas
from tfrecorder._inputs import spill
from tests.conftest import Checked, check_table, encode


@pytest.fixture(scope="module")
def pics(tmp_path_factory):
    root = tmp_path_factory.mktemp("pics")
    paths = []
    for i in range(4):
        p = root / f"p{i}.png"
        p.write_bytes(encode(fmt="PNG", seed=i, size=(8, 8)))
        paths.append(str(p))
    return root, paths


def _csv(tmp_path, text: bytes, name="t.csv"):
    p = tmp_path / name
    p.write_bytes(text)
    return str(p)


def _convert(tmp_path, path, **kw):
    return tfrecorder.convert(path, str(tmp_path / "out"), mode="overwrite", **kw)


@pytest.mark.slow  # a conversion end to end
def test_bom_crlf_and_quoted_fields_convert(tmp_path, pics):
    root, paths = pics
    os.rename(paths[0], root / "a, b\nc.png")
    try:
        text = ('\ufeffsplit,image_uri,label\r\nTRAIN,"a, b\nc.png","cat, big"\r\n'
                f"TEST,{paths[1]},dog\r\n").encode("utf-8")
        result = _convert(tmp_path, _csv(root, text))
        assert result.rows_written == 2 and result.labels == ["cat, big", "dog"]
    finally:
        os.rename(root / "a, b\nc.png", paths[0])


@pytest.mark.slow  # a conversion end to end
def test_float_looking_whole_labels_are_ids(tmp_path, pics):
    _, paths = pics
    text = f"TRAIN,{paths[0]},1.0\nTEST,{paths[1]},3.0\n".encode()
    assert _convert(tmp_path, _csv(tmp_path, text)).labels == ["0", "1", "2", "3"]


def test_every_problem_of_a_bad_csv_at_once(tmp_path, pics):
    _, paths = pics
    text = (f"TRAIN,{paths[0]},cat\n"
            f"HOLDOUT,{paths[1]},cat\n"        # unknown split
            f"TRAIN,{paths[2]},\n"              # empty label
            f"TEST,,dog\n"                      # empty uri
            f"TRAINING,{paths[3]},NaN\n").encode()  # "NaN" is a label name, not a null
    with pytest.raises(tfrecorder.SchemaError) as e:
        _convert(tmp_path, _csv(tmp_path, text))
    assert sorted((p.row, p.column) for p in e.value.problems) == [
        (2, "split"), (3, "label"), (4, "image_uri")]


@pytest.mark.parametrize("header", [True, False])
def test_ragged_rows_are_all_listed(tmp_path, pics, header):
    _, paths = pics
    text = (("split,image_uri,label\n" if header else "")
            + f"TRAIN,{paths[0]},a\nTRAIN\nTEST,x,y,z,w\n" + ("" if header else "c.jpg\n"))
    with pytest.raises(tfrecorder.SchemaError) as e:
        _convert(tmp_path, _csv(tmp_path, text.encode()))
    first = 2 if header else 1
    rows = [first + 1, first + 2] if header else [first + 1, first + 3]
    assert [p.row for p in e.value.problems] == rows
    assert ("the header has 3" if header else "expected 3 fields") in str(e.value)


def test_a_header_that_does_not_match_is_named(tmp_path, pics):
    _, paths = pics
    text = f"set,path,class\nTRAIN,{paths[0]},a\n".encode()
    with pytest.raises(tfrecorder.SchemaError, match="looks like a header.*split, image_uri, label"):
        _convert(tmp_path, _csv(tmp_path, text))


# --- properties ---------------------------------------------------------------------

cell = st.one_of(st.none(), st.just(float("nan")), st.text(max_size=8), st.integers(-3, 30),
                 st.floats(allow_nan=False, allow_infinity=False, width=32),
                 st.sampled_from(["TRAIN", "test", "Validate", "UNASSIGNED", "", "cat", "1.0"]))


def _checked(source) -> Checked:
    """``source`` checked as ``convert`` checks it: ``spill.read`` (``sources.chunks``,
    then ``validation.check_columns`` on each chunk), its records in memory."""
    return check_table(source, schemas.IMAGE_CSV_SCHEMA)


def _in_tiny_chunks(source) -> Checked:
    """The same, two rows a chunk and two images a bucket."""
    sizes = spill.CHUNK_ROWS, spill.BUCKET_ROWS
    spill.CHUNK_ROWS = spill.BUCKET_ROWS = 2
    try:
        return _checked(source)
    finally:
        spill.CHUNK_ROWS, spill.BUCKET_ROWS = sizes


def _checked_both_ways(source) -> Checked:
    """``source`` checked in one chunk and in chunks of two rows: the same rows, or a
    SchemaError each with the same problems. Returns the first Checked; raises its
    SchemaError."""
    outcomes = []
    for path in (_checked, _in_tiny_chunks):
        try:
            outcomes.append(path(source))
        except tfrecorder.SchemaError as e:
            outcomes.append(e)
    whole, streamed = outcomes
    if isinstance(whole, tfrecorder.SchemaError):
        assert isinstance(streamed, tfrecorder.SchemaError), "streamed: no SchemaError"
        # the same problems; chunk by chunk, they come in another order
        assert (sorted(map(str, streamed.problems)), streamed.unlisted) == (
            sorted(map(str, whole.problems)), whole.unlisted)
    else:
        assert not isinstance(streamed, tfrecorder.SchemaError), str(streamed)
        by_row = lambda r: r.row  # noqa: E731
        assert sorted(streamed.rows, key=by_row) == sorted(whole.rows, key=by_row)
        assert (streamed.columns, streamed.features, streamed.vocabularies) == (
            whole.columns, whole.features, whole.vocabularies)
    if isinstance(whole, tfrecorder.SchemaError):
        raise whole
    return whole


@pytest.mark.slow
@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(cell, cell, cell), min_size=0, max_size=12))
@example(rows=[(None, "0", "0"), (None, "UNASSIGNED", "00"), (None, "UNASSIGNED", 0)])
@example(rows=[("TRAIN", "a.jpg", "cat"), ("", "b.png", "dog"), ("test", "/c.png", 1.0)])
def test_validation_only_ever_raises_schema_error(rows):
    df = pd.DataFrame(rows, columns=["split", "image_uri", "label"])
    try:
        checked = _checked_both_ways(df)
    except tfrecorder.SchemaError as e:
        assert e.problems and all(p.reason for p in e.problems)
        return
    # Every input row is in exactly one record (multi-label rows of one image merge).
    assert sum(1 + len(r.merged) for r in checked.rows) == len(df)
    assert {r.split for r in checked.rows} <= {"train", "validation", "test"}


@pytest.mark.slow
@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list('ab,"\n\r\t x1.TRAIN/')), max_size=80))
def test_any_csv_text_reads_or_raises_schema_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_text(text, encoding="utf-8")
    try:
        _checked_both_ways(str(path))
    except tfrecorder.SchemaError as e:
        assert e.problems


@pytest.mark.slow
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["TRAIN", "TEST", "", "VALIDATION"]),
                          st.integers(0, 5), st.sampled_from(["a", "b", "c"])),
                min_size=1, max_size=12))
def test_accepted_tables_convert_with_every_row_accounted_for(tmp_path_factory, pics, rows):
    _, paths = pics
    pool = paths + ["/nonexistent/x.png", paths[0] + ".missing"]
    df = pd.DataFrame([(s, pool[i], lab) for s, i, lab in rows],
                      columns=["split", "image_uri", "label"])
    out = tmp_path_factory.mktemp("conv") / "out"
    try:
        result = tfrecorder.convert(df, str(out), max_error_fraction=1.0)
    except tfrecorder.ConversionError as e:
        # Only possible when every row is quarantined: nothing would be written.
        assert all(i >= 4 for _, i, _ in rows) and "every row was quarantined" in str(e)
        return
    except tfrecorder.SchemaError as e:
        # Only possible when one image has different labels (multi-label) and two splits.
        assert all("give it one split" in p.reason for p in e.problems)
        return
    assert result.rows_in == len(df) == result.rows_written + result.rows_quarantined
    missing = sum(1 for _, i, _ in rows if i >= 4)
    assert result.rows_quarantined == missing
    assert sum(result.rows_per_split.values()) <= len(df) - missing
