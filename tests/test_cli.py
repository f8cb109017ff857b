"""The command line: its output and exit code. Most tests call ``tfrecorder._cli.main``
in this process (the process boundary is not what they test); the few that are about the
process itself run ``python -m tfrecorder`` as a user does: the exit code the interpreter
ends with, a fresh interpreter's logging on stderr, the console script."""

import csv
import os
import subprocess
import sys

import pytest

from tests.conftest import SAMPLES, encode


def cli(*args, cwd=None):
    """``python -m tfrecorder ARGS``, a new process (a few seconds each)."""
    return subprocess.run([sys.executable, "-m", "tfrecorder", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.mark.slow
def test_convert_prints_the_result_and_exits_0(tmp_path):
    out = tmp_path / "out"
    p = cli("convert", os.path.join(SAMPLES, "data.csv"), str(out), "--num-shards", "2")
    assert p.returncode == 0, p.stderr
    assert "wrote 36 of 36 rows" in p.stdout
    assert "data-train.tfrecord-00001-of-00002" in os.listdir(out)
    assert "it/s" not in p.stderr and "rows/s" not in p.stderr  # no bar off a terminal


@pytest.mark.slow
def test_usage_and_validation_errors_exit_2_with_one_error_line(tmp_path, run_cli):
    p = cli("convert")  # the interpreter's own exit code, from argparse's usage error
    assert p.returncode == 2 and "usage:" in p.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("TRAIN,a.jpg,cat\nSOMETIMES,b.jpg,dog\n")
    p = run_cli("convert", str(bad), str(tmp_path / "out"))
    assert p.returncode == 2
    assert p.stderr.startswith("Error: The input table has 1 problem(s):")
    assert "row 2, column 'split'" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(tmp_path / "o"),
                "--compression", "zip")
    assert p.returncode == 2 and "invalid choice" in p.stderr
    p = run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(tmp_path / "o2"),
                "--runner", "DataflowRunner")
    assert p.returncode == 2 and p.stderr.startswith("Error: runner='DataflowRunner' needs project=")


@pytest.mark.slow
def test_a_run_over_the_error_budget_exits_1(tmp_path, image_table, run_cli):
    good = image_table("a.jpg", encode())
    data = tmp_path / "d.csv"
    data.write_text(f"TRAIN,{good},x\nTRAIN,{tmp_path}/missing.jpg,x\n")
    p = run_cli("convert", str(data), str(tmp_path / "out"), "--max-error-fraction", "0.1")
    assert p.returncode == 1
    assert p.stderr.startswith("Error: 1 of 2 rows were quarantined") and "Traceback" not in p.stderr


@pytest.mark.slow
def test_existing_output_exits_2_and_names_the_flag(tmp_path, run_cli):
    out = tmp_path / "out"
    assert run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(out)).returncode == 0
    p = run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(out))
    assert p.returncode == 2 and "--overwrite" in p.stderr


@pytest.mark.slow
def test_inspect_writes_files_and_prints(tmp_path, run_cli):
    out = tmp_path / "out"
    run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(out))
    p = run_cli("inspect", str(out), "--split", "test", "-n", "2",
                "--output-dir", str(tmp_path / "i"))
    assert p.returncode == 0, p.stderr
    assert "train 27, validation 6, test 3" in p.stdout
    assert "data.csv" in os.listdir(tmp_path / "i")
    p = run_cli("inspect", str(tmp_path / "nothing-here"))
    assert p.returncode == 2 and "nothing-here does not exist" in p.stderr


@pytest.mark.slow
def test_inspect_takes_tfrecorders_flag_names(tmp_path, run_cli):
    """TFRecorder's README: inspect --tfrecord-dir=DIR --split=TRAIN --num_records=5
    --output_dir=OUT."""
    out = tmp_path / "out"
    assert run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(out)).returncode == 0
    p = run_cli("inspect", f"--tfrecord-dir={out}", "--split=TRAIN", "--num_records=2",
                f"--output_dir={tmp_path / 'look'}")
    assert p.returncode == 0, p.stderr
    assert "first 2 records of train" in p.stdout
    assert sorted(os.listdir(tmp_path / "look"))[-1] == "data.csv"
    assert len(os.listdir(tmp_path / "look")) == 4  # and .tfrecorder-inspect, their list
    p = run_cli("inspect", f"--tfrecord_dir={out}", "--split", "test", "-n", "1")
    assert p.returncode == 0 and "first 1 records of test" in p.stdout
    p = run_cli("inspect", "--split", "test")
    assert p.returncode == 2 and p.stderr.startswith("Error: inspect needs one TFRECORD_DIR")


@pytest.mark.slow
def test_verbose_before_or_after_the_command(tmp_path):
    # New processes: the command sets up logging for a fresh interpreter, which a test
    # process (whose logging pytest has set up) is not.
    for i, args in enumerate([["-v", "convert"], ["convert", "-v"]]):
        p = cli(*args, os.path.join(SAMPLES, "data.csv"), str(tmp_path / f"o{i}"))
        assert p.returncode == 0, p.stderr
        assert "INFO tfrecorder._convert: converting 36 records" in p.stderr
    p = cli("convert", os.path.join(SAMPLES, "data.csv"), str(tmp_path / "o3"))
    assert "INFO" not in p.stderr


def test_help_speaks_of_flags_and_files_not_python_values(run_cli):
    convert = run_cli("convert", "--help").stdout
    inspect = run_cli("inspect", "--help").stdout
    for text in (convert, inspect):
        assert "None" not in text and "dict" not in text and "output_dir" not in text.split(
            "TFRecorder's")[0], text
    assert "--no-progress" in convert and "terminal" in convert
    assert "train=8,validation=2" in convert
    assert "TFRECORD_DIR" in inspect and "--output-dir DIR" in inspect


def test_flag_help_says_what_the_flag_does_and_the_options_own_default():
    """A flag that turns an option off is described by what giving it does, and a
    default is the option's, not a copy that can drift from it."""
    from tfrecorder import _cli_parser
    from tfrecorder._options import Options

    convert = _cli_parser.build_parser()._subparsers._group_actions[0].choices["convert"]
    helps = {a.dest: a.help for a in convert._actions}
    assert helps["write_index"].startswith("write no index/"), helps["write_index"]
    default = Options.__dataclass_fields__["near_distance"].default
    assert f"(0 to 16, default {default})" in helps["near_distance"]


def test_report_given_near_duplicates_says_they_are_found_when_converting(tmp_path,
                                                                          run_cli):
    out = tmp_path / "out"
    p = run_cli("report", out, "--near-duplicates")
    assert p.returncode == 2
    assert p.stderr.startswith("Error: --near-duplicates is a flag of convert, not of "
                               "report: near duplicates are searched when converting")
    assert f"tfrecorder convert SOURCE {out} --near-duplicates --overwrite" in p.stderr
    assert "usage:" not in p.stderr and len(p.stderr.splitlines()) == 1


@pytest.mark.slow
def test_shards_per_split_on_the_command_line(tmp_path, run_cli):
    out = tmp_path / "out"
    p = run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(out), "--num-shards",
                "train=3,validation=2")
    assert p.returncode == 0, p.stderr
    assert "data-train.tfrecord-00002-of-00003" in os.listdir(out)
    assert "data-validation.tfrecord-00001-of-00002" in os.listdir(out)
    p = run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(out), "--num-shards", "many")
    assert p.returncode == 2 and "give a whole number" in p.stderr


@pytest.mark.slow
def test_create_image_csv_from_a_folder(tmp_path, image_table, run_cli):
    for rel in ["train/cat/1.png", "test/dog/2.png"]:
        image_table(f"tree/{rel}", encode(fmt="PNG"))
    p = run_cli("create-image-csv", str(tmp_path / "tree"), str(tmp_path / "t.csv"))
    assert p.returncode == 0 and "wrote 2 rows" in p.stdout
    rows = sorted(csv.reader(open(tmp_path / "t.csv")))
    assert rows == [["TEST", str(tmp_path / "tree/test/dog/2.png"), "dog"],
                    ["TRAIN", str(tmp_path / "tree/train/cat/1.png"), "cat"]]
    assert run_cli("convert", str(tmp_path / "t.csv"), str(tmp_path / "o")).returncode == 0


@pytest.mark.parametrize("command", [[], ["convert"], ["inspect"], ["create-image-csv"]])
def test_every_command_and_option_has_help(command, run_cli):
    p = run_cli(*command, "--help")
    assert p.returncode == 0
    lines = [l for l in p.stdout.splitlines() if l.strip().startswith("-")]
    for line in lines:  # an option line without words after it has no help text
        assert len(line.split("  ")) > 1 or line.strip().startswith("-h"), line


@pytest.mark.slow
def test_python_dash_m_and_console_script_agree():
    exe = os.path.join(os.path.dirname(sys.executable), "tfrecorder")
    a = subprocess.run([exe, "--help"], capture_output=True, text=True).stdout
    assert a == cli("--help").stdout


@pytest.mark.slow
def test_schema_file_and_beam_flags_pass_through(tmp_path, run_cli):
    schema = tmp_path / "schema.json"
    schema.write_text('{"split": "SplitKey", "x": "FloatInput", "name": "StringInput"}')
    data = tmp_path / "t.csv"
    data.write_text("split,x,name\nTRAIN,1.5,a\nTEST,2.5,b\n")
    p = run_cli("convert", str(data), str(tmp_path / "o"), "--schema", str(schema),
                "--direct_running_mode=in_memory", "--direct_num_workers=1")
    assert p.returncode == 0, p.stderr
    assert "wrote 2 of 2 rows" in p.stdout
    p = run_cli("convert", str(data), str(tmp_path / "o2"), "--schema",
                str(tmp_path / "none.json"))
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow  # another Python process
def test_the_command_freezes_what_survives_a_full_collection_and_a_library_call_does_not():
    # The command's own process only: a full collection (the imports of a conversion set
    # off several) leaves its survivors frozen; importing the package changes nothing.
    code = """
import gc, sys
import tfrecorder
from tfrecorder import _cli
assert _cli.freeze_survivors not in gc.callbacks
def main():
    before = gc.get_freeze_count()
    gc.collect(1)
    young = gc.get_freeze_count()
    gc.collect()
    print(before, young, gc.get_freeze_count())
    return 3
_cli.main = main
_cli.command()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 3 and done.stderr == "", done.stderr  # exits quietly
    before, young, after = map(int, done.stdout.split())
    assert before == young == 0 and after > 1000


@pytest.mark.slow
def test_the_commands_stderr_is_its_one_line_whatever_the_libraries_beneath_log(tmp_path):
    """Beam's worker processes talk gRPC, whose C++ core logs to file descriptor 2: with
    its debug logging and tracers asked for in the environment, the command's stderr is
    still its one error line."""
    from tfrecorder._writer.runners import IN_PROCESS_MAX_ROWS

    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    n = IN_PROCESS_MAX_ROWS + 1  # worker processes, which Beam reaches through gRPC
    table = tmp_path / "data.csv"
    table.write_text("".join(f"TRAIN,{broken},x\n" for _ in range(n)))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "GRPC_VERBOSITY": "debug",
           "GRPC_TRACE": "api,channel", "TF_CPP_MIN_LOG_LEVEL": "0"}
    p = subprocess.run([sys.executable, "-m", "tfrecorder", "convert", str(table),
                        str(tmp_path / "out"), "--num-workers", "2", "--num-shards", "2"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 1, p.stderr[-2000:]
    assert p.stderr.startswith(f"Error: {n} of {n} rows were quarantined"), p.stderr[:2000]
    assert p.stderr.count("\n") == 1, p.stderr[:2000]


# --- flags: ours in either spelling, unknown ones refused, Beam's passed on ------------

def test_our_options_take_both_spellings(tmp_path, run_cli):
    rows = [["TRAIN", os.path.join(SAMPLES, "images", "circle_01.jpg"), "a"],
            ["TRAIN", str(tmp_path / "gone.jpg"), "b"]] + [
           ["TRAIN", os.path.join(SAMPLES, "images", f"square_{i:02d}.jpg"), "c"]
           for i in (1, 2, 4, 5, 7, 8, 10, 11)]
    path = tmp_path / "d.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    p = run_cli("convert", str(path), str(tmp_path / "a"), "--max_error_fraction=0")
    assert p.returncode == 1 and "max_error_fraction=0" in p.stderr  # taken as ours, not passed to Beam
    p = run_cli("convert", str(path), str(tmp_path / "b"),
                "--max-error-fraction", "0.2", "--num_shards=1")
    assert p.returncode == 0 and "wrote 9 of 10 rows" in p.stdout and "1 shard(s)" in p.stdout


@pytest.mark.parametrize("flag,hint", [("--compresion=gzip", "--compression"),
                                       ("--max_num_worker=3", "--max_num_workers"),
                                       ("--no-such-thing", None)])
def test_unknown_flags_are_refused_with_a_suggestion(tmp_path, flag, hint, run_cli):
    p = run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(tmp_path / "out"), flag)
    assert p.returncode == 2 and f"unknown flag {flag.split('=')[0]}" in p.stderr
    if hint:
        assert f"did you mean {hint}?" in p.stderr
    assert not (tmp_path / "out").exists()


def test_beam_flags_still_pass_through(tmp_path, run_cli):
    p = run_cli("convert", os.path.join(SAMPLES, "data.csv"), str(tmp_path / "out"),
                "--direct_running_mode=multi_threading", "--max_num_workers", "4")
    assert p.returncode == 0, p.stderr
    assert "wrote 36 of 36 rows" in p.stdout


def test_create_image_csv_writes_over_no_file(tmp_path, image_table, run_cli):
    image_table("tree/train/cat/1.png", encode(fmt="PNG"))
    manifest = tmp_path / "tfrecorder.json"
    manifest.write_text('{"format_version": 3}')
    p = run_cli("create-image-csv", tmp_path / "tree", manifest)
    assert p.returncode == 2
    assert p.stderr.startswith(f"Error: {manifest} is a file there already; nothing was "
                               f"written over it")
    assert manifest.read_text() == '{"format_version": 3}'


def _interrupted_convert(tmp_path, ready):
    """``python -m tfrecorder convert`` of 1500 images, sent Ctrl-C (SIGINT to its process
    group, as a terminal sends it) once ``ready(out)`` holds; the finished process."""
    import glob
    import signal
    import time

    from tests.conftest import write_images

    table = tmp_path / "t.csv"
    paths = write_images(tmp_path, 1500)
    table.write_text("".join(f"TRAIN,{p},{i % 2}\n" for i, p in enumerate(paths)))
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "tfrecorder", "convert", str(table), str(out),
                          "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    while not ready(str(out)) and p.poll() is None:
        time.sleep(0.005)  # polling the folder for the point to interrupt at
    os.killpg(p.pid, signal.SIGINT)
    p.communicate_out = p.communicate(timeout=120)
    return p, out


@pytest.mark.slow
@pytest.mark.parametrize("point", ["planning", "pipeline"])
def test_ctrl_c_stops_convert_with_one_line_and_exit_130(tmp_path, point):
    import glob

    def ready(out):
        if point == "planning":  # the folder is locked: the table is being read
            return os.path.exists(os.path.join(out, ".tfrecorder.lock"))
        # a shard is being written by Beam's WriteShards step
        return bool(glob.glob(os.path.join(out, ".tfrecorder-tmp", "*", "*.part")))

    p, out = _interrupted_convert(tmp_path, ready)
    stdout, stderr = p.communicate_out
    assert (p.returncode, stderr) == (130, f"interrupted: nothing was published; {out} is "
                                           f"as it was\n")
    assert stdout == ""
    assert not [n for n in os.listdir(out) if not n.startswith(".")]  # no manifest, no shard
    assert not os.path.exists(os.path.join(out, ".tfrecorder.lock"))


def test_ctrl_c_while_the_command_imports_its_libraries_is_one_line_too(tmp_path):
    # A stand-in for pandas, the first thing `import tfrecorder` imports, that presses
    # Ctrl-C while it is being imported: the command's first second, made exact.
    (tmp_path / "pandas").mkdir()
    (tmp_path / "pandas" / "__init__.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(60)\n")
    script = os.path.join(os.path.dirname(sys.executable), "tfrecorder")
    p = subprocess.run([sys.executable, script, "convert", "t.csv", "out"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert (p.returncode, p.stderr, p.stdout) == (130, "interrupted: nothing was published\n",
                                                  "")


@pytest.mark.slow
def test_ctrl_c_after_publishing_says_the_version_was_published(tmp_path, monkeypatch,
                                                                capsys):
    """Ctrl-C as the result is printed: the version is published, and the line says so."""
    from tfrecorder._cli import main

    class Interrupted:  # a terminal's Ctrl-C while the summary is written to it
        def write(self, text):
            raise KeyboardInterrupt

        def flush(self):
            pass

    out = tmp_path / "out"
    monkeypatch.setattr(sys, "stdout", Interrupted())
    code = main(["convert", os.path.join(SAMPLES, "data.csv"), str(out), "--no-progress"])
    monkeypatch.undo()
    assert (code, capsys.readouterr().err) == (
        130, f"interrupted after version 1 was published: {out} holds it whole\n")
    assert (out / "tfrecorder.json").exists()


_CTRL_C_IN_EVERY_COLLECTION = """
import functools, gc, signal, sys, time
from tfrecorder import _cli
# Every full collection meets a Ctrl-C inside the command's callback.
_cli.gc = type("G", (), {"freeze": staticmethod(
    functools.partial(signal.raise_signal, signal.SIGINT))})
_cli.FREEZES = 10**9
signal.signal(signal.SIGINT, _cli._interrupt)
gc.callbacks.append(_cli.freeze_survivors)
got = 0
for _ in range(int(sys.argv[1])):
    try:
        junk, deadline = [], time.monotonic() + 5
        while time.monotonic() < deadline:  # allocations: collections, some full
            junk.append([[] for _ in range(50)])
            if len(junk) > 2000:
                junk.clear()
                gc.collect()
    except KeyboardInterrupt:
        got += 1
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C said twice ends here
print(got)
"""


@pytest.mark.slow
def test_ctrl_c_met_in_collection_after_collection_is_raised_each_time(tmp_path):
    # A Ctrl-C raised again after the callback can meet the callback again, and the
    # handler's own work can start a collection: nothing nests, and none is lost.
    n = 100
    p = subprocess.run([sys.executable, "-c", _CTRL_C_IN_EVERY_COLLECTION, str(n)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": os.path.dirname(SAMPLES)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(n)] and p.stderr == "", p.stderr[-2000:]


@pytest.mark.slow
def test_ctrl_c_in_the_collector_callback_is_not_lost(monkeypatch):
    """The command freezes the collector's survivors from a ``gc.callbacks`` entry, where
    Python drops any exception: Ctrl-C landing there must still stop the command. The
    collector's timing cannot be chosen, so its freeze raises the signal itself."""
    import functools
    import gc
    import signal
    import time
    import types

    from tfrecorder import _cli

    monkeypatch.setattr(_cli, "gc", types.SimpleNamespace(
        freeze=functools.partial(signal.raise_signal, signal.SIGINT)))
    monkeypatch.setattr(_cli, "_frozen", 0)
    previous = signal.signal(signal.SIGINT, _cli._interrupt)
    gc.callbacks.append(_cli.freeze_survivors)
    try:
        with pytest.raises(KeyboardInterrupt):
            gc.collect()
            deadline = time.monotonic() + 10  # it comes at once; lost, it never comes
            while time.monotonic() < deadline:
                time.sleep(0.001)
    finally:
        gc.callbacks.remove(_cli.freeze_survivors)
        signal.signal(signal.SIGINT, previous)
