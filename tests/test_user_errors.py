"""Every user error is one clear line: a TFRecorderError naming the file, row or value and
the fix; the CLI prints ``Error: ...`` and exits 2 (bad input) or 1, never a traceback."""

import os

import pandas as pd
import pytest

import tfrecorder
from tfrecorder import _cli as cli
from tfrecorder._folder import layout
from tests.conftest import SAMPLES, encode, write_images


def _cli(capsys, *args):
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def pics(tmp_path):
    return write_images(tmp_path, 3)


def _latin1_csv(tmp_path, pics):
    path = tmp_path / "latin1.csv"
    path.write_bytes(f"TRAIN,{pics[0]},cat\nTRAIN,{pics[1]},caf\xe9\n".encode("latin-1"))
    return str(path)


def _long_field_csv(tmp_path, pics):
    path = tmp_path / "quote.csv"
    # An opening quote never closed: the rest of the file becomes one field.
    path.write_text(f'TRAIN,{pics[0]},cat\nTRAIN,"{pics[1]},dog\n' + "x" * 200_000 + "\n")
    return str(path)


@pytest.mark.parametrize("make,error,words", [
    (_latin1_csv, tfrecorder.SchemaError, ["row 2", "not UTF-8", "0xe9", "save it as UTF-8"]),
    (_long_field_csv, tfrecorder.SchemaError, ["row 2", "field larger than field limit",
                                               "never closed"]),
], ids=["latin-1 csv", "runaway quoted field"])
def test_unreadable_csv_files(tmp_path, pics, make, error, words, capsys):
    source = make(tmp_path, pics)
    with pytest.raises(error) as e:
        tfrecorder.convert(source, str(tmp_path / "out"))
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    code, out, err = _cli(capsys, "convert", source, str(tmp_path / "out"))
    assert code == 2 and err.startswith("Error: ") and "Traceback" not in err and out == ""


def test_two_columns_of_the_same_name(tmp_path, pics):
    df = pd.DataFrame([["TRAIN", pics[0], "a", "b"]], columns=["split", "image_uri", "label",
                                                             "LABEL"])
    with pytest.raises(tfrecorder.SchemaError,
                       match=r"column 'label'.*2 columns are named 'label'.*rename all but one"):
        df.tensorflow.to_tfrecord(str(tmp_path / "out"))
    path = tmp_path / "dup.csv"
    path.write_text(f"split,image_uri,label,label\nTRAIN,{pics[0]},a,b\n")
    with pytest.raises(tfrecorder.SchemaError, match="2 columns are named 'label'"):
        tfrecorder.convert(str(path), str(tmp_path / "out"))


@pytest.mark.parametrize("where,match", [
    ("under a file", "a part of the path is a file"),
    ("not writable", "no permission"),
    ("s3", "unsupported URI scheme s3://"),
])
def test_output_paths_that_cannot_work(tmp_path, where, match, capsys):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    out = {"under a file": str(blocker / "out"), "not writable": "/sys/tfrecorder-out",
           "s3": "s3://bucket/out"}[where]
    with pytest.raises(tfrecorder.ConfigError, match=match):
        tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), out)
    code, _, err = _cli(capsys, "convert", os.path.join(SAMPLES, "data.csv"), out)
    assert code == 2 and err.count("\n") == 1 and match.split()[0] in err


@pytest.mark.parametrize("uri", ["s3://bucket/out", "nosuch://bucket/out"])
@pytest.mark.parametrize("command", ["index", "inspect"])
def test_reading_a_folder_of_an_unsupported_scheme_is_one_error_line(capsys, command, uri):
    scheme = uri.split("://")[0]
    if scheme == "s3":
        try:
            import s3fs  # noqa: F401
            pytest.skip("s3fs is installed here: s3:// would be read")
        except ImportError:
            pass
    code, _, err = _cli(capsys, command, uri)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"Error: {uri}") and f"unsupported URI scheme {scheme}://" in err
    assert "local paths and gs://" in err
    with pytest.raises(tfrecorder.ConfigError, match=f"unsupported URI scheme {scheme}://"):
        (tfrecorder.build_index if command == "index" else tfrecorder.inspect)(uri)


def test_a_vocabulary_that_is_a_folder(tmp_path, capsys):
    code, _, err = _cli(capsys, "convert", os.path.join(SAMPLES, "data.csv"),
                        str(tmp_path / "out"), "--label-vocabulary", str(tmp_path))
    assert code == 2 and "is a folder; give a file with one label per line" in err


def test_a_garbage_manifest_in_the_cli(tmp_path, capsys):
    (tmp_path / layout.MANIFEST).write_text("{ half a manifest")
    code, _, err = _cli(capsys, "inspect", str(tmp_path))
    assert code == 2 and "not a complete tfrecorder manifest" in err and "Traceback" not in err


def test_a_run_that_writes_nothing_exits_1(tmp_path, capsys):
    path = tmp_path / "gone.csv"
    path.write_text(f"TRAIN,{tmp_path / 'a.jpg'},x\nTRAIN,{tmp_path / 'b.jpg'},y\n")
    code, out, err = _cli(capsys, "convert", str(path), str(tmp_path / "out"))
    assert code == 1 and "every row was quarantined" in err and "errors.jsonl" in err


#: The longest dataset name whose files fit 255 bytes: its validation shards' names, with
#: the ".<32 hex digits>.part" a shard file has while it is written.
LONGEST_NAME = 255 - len("-validation.tfrecord-00000-of-00001") - len(f".{'0' * 32}.part")


def test_a_dataset_name_too_long_for_a_file_name(tmp_path, capsys):
    # Unchecked, the run would fail inside with OSError "File name too long", its folder
    # left behind.
    source, out = os.path.join(SAMPLES, "data.csv"), tmp_path / "out"
    with pytest.raises(tfrecorder.ConfigError) as e:
        tfrecorder.convert(source, str(out), name="n" * (LONGEST_NAME + 1))
    assert f"name='nnn" in str(e.value) and f"({LONGEST_NAME + 1} characters)" in str(e.value)
    assert "too long for a file name" in str(e.value) and "shorten it by 1 or more" in str(e.value)
    assert not out.exists()
    code, stdout, err = _cli(capsys, "convert", source, str(out), "--name", "n" * 240)
    assert code == 2 and err.startswith("Error: name=") and err.count("\n") == 1
    assert stdout == "" and not out.exists()
    # The longest name that fits writes and reads back.
    tfrecorder.convert(source, str(out), name="n" * LONGEST_NAME)
    assert tfrecorder.verify(str(out)).records == 36
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # no lock, no run folder


def test_a_label_column_too_long_for_its_labels_file(tmp_path, pics):
    column = "l" * 250
    df = pd.DataFrame({"split": ["TRAIN"], "image_uri": [pics[0]], column: ["cat"]})
    schema = {"split": "SplitKey", "image_uri": "ImageUri", column: "StringLabel"}
    with pytest.raises(tfrecorder.ConfigError, match=r"a label column's name is too long for a "
                                                     r"file name: 'l+\.\.\.l+\.labels\.txt'"):
        tfrecorder.convert(df, str(tmp_path / "out"), schema=schema)
    assert not (tmp_path / "out").exists()


#: Run as ``python -c _WITHOUT_ROOT_POWERS COMMAND...``: as root, drops the powers that
#: let root write anywhere (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) from what the command
#: may hold, so that a folder's permission bits apply to it as to any user, then becomes
#: the command. A fresh interpreter does it, not a ``preexec_fn`` in the test process: a
#: process forked from one where gRPC runs (Beam, in earlier tests) may print gRPC's
#: lines before it becomes the command. Exit code 77: the powers cannot be dropped here.
_WITHOUT_ROOT_POWERS = """
import ctypes, os, sys
if os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            sys.exit(77)
os.execv(sys.argv[1], sys.argv[1:])
"""


@pytest.mark.slow  # a conversion end to end
def test_an_output_folder_that_exists_but_is_read_only(tmp_path):
    # Unchecked, taking the lock would fail with a PermissionError: exit 1, not 2.
    import subprocess
    import sys

    out = tmp_path / "read-only"
    out.mkdir()
    out.chmod(0o555)
    root = os.path.dirname(SAMPLES)
    try:
        run = subprocess.run(
            [sys.executable, "-c", _WITHOUT_ROOT_POWERS, sys.executable, "-m", "tfrecorder",
             "convert", os.path.join(SAMPLES, "data.csv"), str(out)],
            capture_output=True, text=True, cwd=str(tmp_path),
            env={**os.environ, "PYTHONPATH": root}, timeout=300)
    finally:
        out.chmod(0o755)
    if run.returncode == 77:  # prctl refused: root without CAP_SETPCAP
        pytest.skip("cannot run without root's override of permissions here")
    assert run.returncode == 2, run.stderr
    assert run.stderr == f"Error: output directory {out} cannot be written (no permission); " \
                         f"give a folder you can write to\n"
    assert os.listdir(out) == []  # no lock, no .tfrecorder-tmp


def test_a_csv_with_only_its_header(tmp_path, capsys):
    path = tmp_path / "header.csv"
    path.write_text("split,image_uri,label\n")
    with pytest.raises(tfrecorder.SchemaError, match="has no rows, only a header line"):
        tfrecorder.convert(str(path), str(tmp_path / "out"))
    code, out, err = _cli(capsys, "convert", str(path), str(tmp_path / "out"))
    assert code == 2 and err.startswith("Error: ") and "has no rows" in err and out == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_mode_flags_and_a_dataflow_flag_without_its_runner(tmp_path, capsys):
    csv = os.path.join(SAMPLES, "data.csv")
    out = str(tmp_path / "out")
    code, _, err = _cli(capsys, "convert", csv, out, "--overwrite", "--update")
    assert code == 2 and "mode='update' and overwrite=True" in err
    code, _, err = _cli(capsys, "convert", csv, out, "--project", "my-project")
    assert code == 2 and "runner='DirectRunner'" in err and "project='my-project'" in err
    assert _cli(capsys, "convert", csv, out, "--num-shards", "1")[0] == 0
    assert _cli(capsys, "convert", csv, out, "--num-shards", "1")[0] == 2  # create: refused
    assert _cli(capsys, "convert", csv, out, "--mode", "overwrite", "--num-shards", "2")[0] == 0
    assert len(tfrecorder.info(out).splits["train"].shards) == 2
