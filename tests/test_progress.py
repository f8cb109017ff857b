"""The progress bar: on a terminal and in a notebook; never in logs or with progress=False."""

import fcntl
import os
import struct
import subprocess
import sys
import termios

import pytest

from tfrecorder._writer import progress
from tests.conftest import SAMPLES


def _run_in_terminal(args):
    """Runs the CLI with stdout and stderr on a pseudo-terminal; returns what it showed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # 80x24
    proc = subprocess.Popen([sys.executable, "-m", "tfrecorder", *args], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not data:
            break
        chunks.append(data)
    proc.wait()
    os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
def test_a_terminal_shows_rows_done_of_total_rate_and_time_left(tmp_path):
    code, shown = _run_in_terminal(["convert", os.path.join(SAMPLES, "data.csv"), str(tmp_path / "o")])
    assert code == 0, shown
    assert "36/36" in shown and "rows/s" in shown and "<" in shown  # done/total, rate, ETA
    assert shown.count("\n") < 20  # redrawn in place, not a line per update


@pytest.mark.slow
def test_no_progress_on_a_terminal_when_asked(tmp_path):
    code, shown = _run_in_terminal(["convert", os.path.join(SAMPLES, "data.csv"),
                                    str(tmp_path / "o"), "--no-progress"])
    assert code == 0 and "rows/s" not in shown and "wrote 36 of 36 rows" in shown


def test_reports_are_summed_across_shards(tmp_path):
    a = progress.reporter(str(tmp_path), "shard-a")
    b = progress.reporter(str(tmp_path), "shard-b")
    a(256)
    b(100)
    a(512)
    assert progress.done_in(str(tmp_path)) == 612
    assert progress.reporter(None, "x") is None


def test_watch_returns_the_value_and_reraises_errors(tmp_path):
    assert progress.watch(lambda: 42, 10, str(tmp_path)) == 42

    def fail():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        progress.watch(fail, 10, str(tmp_path))
