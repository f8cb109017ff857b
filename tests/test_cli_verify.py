"""tfrecorder verify OUT: the command line's verify(), run in this process (the process
boundary is not what is tested here)."""

import os
import shutil

import pytest

import tfrecorder
from tfrecorder import access
from tfrecorder._cli import main


@pytest.fixture
def out(tmp_path, samples_converted):
    """A conversion of the samples of this test's own (a copy: a test damages it)."""
    out = str(tmp_path / "out")
    shutil.copytree(samples_converted(num_shards=2)[0], out)
    return out


def test_a_whole_directory_is_one_line_and_exit_0(out, capsys):
    assert main(["verify", out]) == 0
    printed = capsys.readouterr().out
    counts = tfrecorder.info(out).splits
    total = sum(s.num_examples for s in counts.values())
    assert f"{out}: whole. {total} records in 6 shard(s)" in printed
    assert f"train {counts['train'].num_examples}" in printed


def test_a_damaged_record_is_exit_1_naming_the_file(out, capsys):
    path, offset, _ = access.Reader(out, "train").locate(3)
    with open(path, "r+b") as f:
        f.seek(offset + 30)
        byte = f.read(1)
        f.seek(offset + 30)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert main(["verify", out]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and os.path.basename(path) in err


def test_a_folder_that_is_not_a_conversion_is_exit_2(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    assert main(["verify", str(tmp_path)]) == 2
    assert "Error: " in capsys.readouterr().err


def test_a_folder_never_converted_is_not_called_an_interrupted_conversion(tmp_path):
    (tmp_path / "photo.jpg").write_bytes(b"x")
    with pytest.raises(tfrecorder.IncompleteOutputError, match="is not a tfrecorder conversion"):
        tfrecorder.info(str(tmp_path))
    (tmp_path / ".tfrecorder-tmp").mkdir()  # a run's folder: a conversion that did not finish
    with pytest.raises(tfrecorder.IncompleteOutputError, match="no conversion finished there"):
        tfrecorder.info(str(tmp_path))


def test_a_windows_path_gets_a_hint():
    with pytest.raises(tfrecorder.IncompleteOutputError, match="looks like a Windows path"):
        tfrecorder.info("C:\\data\\out")
