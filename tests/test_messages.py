"""What a newcomer reads when something is wrong: short, and naming the fact that matters."""

import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

import tfrecorder
from tests.conftest import SAMPLES, encode

ROOT = os.path.dirname(SAMPLES)


@pytest.mark.slow
def test_a_failed_conversion_from_python_prints_our_line_and_nothing_of_beam(tmp_path):
    """The README's DataFrame converted from the wrong folder: every image is missing."""
    script = textwrap.dedent(f"""
        import pandas as pd
        import tfrecorder
        df = pd.read_csv({os.path.join(SAMPLES, "data.csv")!r})
        df.tensorflow.to_tfrecord("out/")
    """)
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                       text=True, env=env)
    assert p.returncode == 1
    err = p.stderr.strip().splitlines()
    last = err[-1]
    assert last.startswith("tfrecorder.ConversionError: 36 of 36 rows were quarantined")
    # The first paths it looked for, resolved, and how relative paths were resolved.
    assert f"image file not found: {tmp_path / 'images' / 'circle_00.png'}" in last
    assert f"resolved against {tmp_path}" in last and "current directory" in last
    # One traceback (the user's own frames), no Beam logging, no chained exception.
    assert p.stderr.count("Traceback") == 1, p.stderr
    assert "apache_beam" not in p.stderr and "During handling" not in p.stderr
    assert len(err) < 20, p.stderr


@pytest.mark.slow
def test_worker_processes_print_nothing_either(tmp_path):
    """Above runners.IN_PROCESS_MAX_ROWS rows the DirectRunner starts worker processes,
    which share the user's stderr: the failure is raised by the waiting process only.
    (Every row names one file that is not an image: missing files would stop the run
    before it starts.)"""
    from tfrecorder._writer.runners import IN_PROCESS_MAX_ROWS

    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    script = textwrap.dedent(f"""
        import pandas as pd
        import tfrecorder
        n = {IN_PROCESS_MAX_ROWS + 1}
        df = pd.DataFrame({{"split": "TRAIN", "image_uri": "broken.jpg", "label": "x"}},
                          index=range(n))
        df.tensorflow.to_tfrecord("out/", num_workers=2, num_shards=2)
    """)
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                       text=True, env=env)
    assert p.returncode == 1
    assert p.stderr.count("Traceback") == 1 and "apache_beam" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(
        f"tfrecorder.ConversionError: {IN_PROCESS_MAX_ROWS + 1} of")
    assert (tmp_path / "out" / "errors.jsonl").exists()
    assert not (tmp_path / "out" / "tfrecorder.json").exists()


def test_beam_logging_is_restored_and_no_root_handler_stays(tmp_path, image_table):
    import logging

    root = list(logging.root.handlers)
    beam = logging.getLogger("apache_beam").level
    df = pd.DataFrame([["TRAIN", image_table("a.jpg", encode()), "x"]],
                      columns=["split", "image_uri", "label"])
    df.tensorflow.to_tfrecord(str(tmp_path / "out"))
    with pytest.raises(tfrecorder.ConversionError) as e:  # Beam's run fails
        broken = image_table("broken.jpg", b"not an image")
        pd.DataFrame([["TRAIN", broken, "x"]], columns=["split", "image_uri", "label"]
                     ).tensorflow.to_tfrecord(str(tmp_path / "out2"))
    # No chain of Beam's exceptions is printed with it.
    assert e.value.__cause__ is None
    assert e.value.__context__ is None or e.value.__suppress_context__
    assert logging.root.handlers == root
    assert logging.getLogger("apache_beam").level == beam


def test_a_csv_says_its_paths_resolve_against_its_folder(tmp_path):
    data = tmp_path / "d" / "data.csv"
    data.parent.mkdir()
    data.write_text("TRAIN,img/a.jpg,x\n")
    with pytest.raises(tfrecorder.ConversionError) as e:
        tfrecorder.convert(str(data), str(tmp_path / "out"))
    assert f"image file not found: {tmp_path / 'd' / 'img' / 'a.jpg'}" in str(e.value)
    assert f"'img/a.jpg' were resolved against {tmp_path / 'd'}" in str(e.value)


@pytest.mark.parametrize("source", ["csv", "dataframe"])
def test_wrong_column_names_list_the_table_columns_and_suggest_renames(tmp_path, source):
    path = tmp_path / "t.csv"
    path.write_text("split,path,class\nTRAIN,a.jpg,cat\n")
    table = str(path) if source == "csv" else pd.read_csv(path)
    with pytest.raises(tfrecorder.SchemaError) as e:
        tfrecorder.convert(table, str(tmp_path / "out"))
    text = str(e.value)
    assert "the table's columns are 'split', 'path', 'class'" in text
    assert "column 'image_uri': missing column" in text and "did you mean 'path'?" in text
    assert "column 'label': missing column" in text and "did you mean 'class'?" in text
    assert "df.rename(columns={'path': 'image_uri', 'class': 'label'})" in text


def test_a_column_nothing_resembles_is_named_to_add(tmp_path):
    df = pd.DataFrame({"split": ["TRAIN"], "image_uri": ["a.jpg"], "zzz": [1]})
    with pytest.raises(tfrecorder.SchemaError, match=r"column 'label': missing column; the "
                       r"table's columns are 'split', 'image_uri', 'zzz'; add a 'label' column"):
        tfrecorder.convert(df, str(tmp_path / "out"))


@pytest.mark.parametrize("read", [tfrecorder.load, tfrecorder.inspect])
def test_reading_a_folder_that_does_not_exist_says_so(tmp_path, read, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tfrecorder.IncompleteOutputError) as e:
        read("nothing/here")
    text = str(e.value)
    assert f"nothing/here ({tmp_path / 'nothing' / 'here'}) does not exist" in text
    assert "overwrite" not in text
    (tmp_path / "file.csv").write_text("x")
    with pytest.raises(tfrecorder.IncompleteOutputError, match="is a file, not a folder"):
        read("file.csv")


def test_quarantine_reasons_name_the_file_not_a_buffer(tmp_path, image_table):
    good = image_table("good.jpg", encode())
    text = image_table("notes.jpg", b"hello, I am text\n")
    df = pd.DataFrame([["TRAIN", good, "x"], ["TRAIN", text, "x"]],
                      columns=["split", "image_uri", "label"])
    result = df.tensorflow.to_tfrecord(str(tmp_path / "out"), max_error_fraction=0.5)
    (bad,) = [json.loads(line) for line in open(tmp_path / "out" / "errors.jsonl")]
    assert "BytesIO" not in bad["reason"] and text in bad["reason"], bad["reason"]
    assert "not a readable image" in bad["reason"]
    assert "BytesIO" not in str(result)


@pytest.mark.slow
def test_labels_without_records_are_named_in_the_result(tmp_path, image_table):
    rows = [["TRAIN", image_table(f"{i}.jpg", encode(seed=i)), "cat"] for i in range(4)]
    rows += [["TRAIN", str(tmp_path / "gone-1.jpg"), "yak"],
             ["TEST", str(tmp_path / "gone-2.jpg"), "zebra"]]
    df = pd.DataFrame(rows, columns=["split", "image_uri", "label"])
    result = df.tensorflow.to_tfrecord(str(tmp_path / "out"), max_error_fraction=0.5)
    # Ids stay those of the table's vocabulary; the labels with no record are named.
    assert result.labels == ["cat", "yak", "zebra"]
    assert result.labels_without_records == ["yak", "zebra"]
    assert "2 label(s) have no records" in str(result) and "yak, zebra" in str(result)
    assert "2 label(s) have no records" in result._repr_html_()
    assert open(tmp_path / "out" / "label.labels.txt").read() == "cat\nyak\nzebra\n"
    # The fix docs/format.md gives: convert with the labels that have records.
    kept = [n for n in result.labels if n not in result.labels_without_records]
    again = df[df.label.isin(kept)].tensorflow.to_tfrecord(str(tmp_path / "out2"))
    assert again.labels == ["cat"] and again.labels_without_records == []


def test_a_vocabulary_name_the_table_never_uses_has_no_records(tmp_path, image_table):
    df = pd.DataFrame([["TRAIN", image_table("a.jpg", encode()), "cat"]],
                      columns=["split", "image_uri", "label"])
    result = df.tensorflow.to_tfrecord(str(tmp_path / "out"), label_vocabulary=["cat", "dog"])
    assert result.labels_without_records == ["dog"]


def test_a_user_who_asks_for_info_still_sees_beams_messages(tmp_path, image_table, caplog):
    import logging

    # Beam's logger as a fresh process has it (the CLI, run in-process by other tests,
    # sets it).
    beam = logging.getLogger("apache_beam")
    before = beam.level
    beam.setLevel(logging.NOTSET)
    df = pd.DataFrame([["TRAIN", image_table("a.jpg", encode()), "x"]],
                      columns=["split", "image_uri", "label"])
    try:
        with caplog.at_level(logging.INFO):  # the root at INFO, as basicConfig(level=INFO)
            # A pipeline option: the one-row conversion runs on Beam, not in this process.
            df.tensorflow.to_tfrecord(str(tmp_path / "out"),
                                      pipeline_options={"direct_num_workers": 1})
    finally:
        beam.setLevel(before)
    assert any(r.name.startswith("apache_beam") for r in caplog.records)


def test_an_inspection_shows_its_summary_not_image_bytes(tmp_path):
    out = str(tmp_path / "out")
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), out)
    look = tfrecorder.inspect(out, split="train", num_records=5, output_dir=str(tmp_path / "l"))
    assert repr(look) == str(look) and len(repr(look)) < 2000
    assert "first 5 records of train" in repr(look) and "\\x" not in repr(look)


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"),
                                     (126_773_248, "120.9 MiB"), (3 * 2**40, "3.0 TiB")])
def test_byte_counts_read_as_people_read_them(n, text):
    from tfrecorder._writer.result import human_bytes

    assert human_bytes(n) == text


@pytest.mark.slow  # two conversions end to end
def test_a_run_with_every_row_quarantined_leads_with_the_fix_and_counts_reasons(tmp_path):
    svg = tmp_path / "a.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    table = pd.DataFrame({"split": "TRAIN", "image_uri": [str(svg)] * 3,
                          "label": ["a", "b", "a"]})
    with pytest.raises(tfrecorder.ConversionError) as e:
        tfrecorder.convert(table, str(tmp_path / "out"))
    said = str(e.value)
    assert said.startswith("3 of 3 rows were quarantined: every row was quarantined, so "
                           "nothing was written. Fix: convert the SVG files to PNG")
    assert "Reasons: 3 SVG is not supported. First rows: row 0: " in said
    # A file that is no image at all keeps the general reason and fix.
    text = tmp_path / "a.jpg"
    text.write_text("name,value\n")
    with pytest.raises(tfrecorder.ConversionError) as e:
        tfrecorder.convert(table.assign(image_uri=str(text)), str(tmp_path / "out3"))
    assert "Fix: convert those files to a format" in str(e.value)
    assert "Reasons: 3 not a readable image. First rows: row 0: " in str(e.value)

    # Relative paths from the wrong folder: --images-dir is the fix, said before the rows.
    (tmp_path / "sub").mkdir()
    (tmp_path / "imgs").mkdir()
    for i in range(2):
        (tmp_path / "imgs" / f"{i}.jpg").write_bytes(encode(seed=i))
    (tmp_path / "sub" / "t.csv").write_text("TRAIN,imgs/0.jpg,a\nTRAIN,imgs/1.jpg,b\n")
    with pytest.raises(tfrecorder.ConversionError) as e:
        tfrecorder.convert(str(tmp_path / "sub" / "t.csv"), str(tmp_path / "out2"))
    said = str(e.value)
    assert said.index("--images-dir") < said.index("Reasons: 2 image file not found")
    assert "Fix: check where" not in said  # the exact fix replaces the general one
