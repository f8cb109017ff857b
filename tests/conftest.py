"""Shared fixtures: tiny real images made in tmp_path, and TensorFlow for reading back."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import os
import random
import socket
import subprocess
import sys
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# gcsfs probes a bucket's type over gRPC, which the GCS emulator does not serve; it reads
# this when imported. And no Google Compute Engine metadata server to look for here.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("NO_GCE_CHECK", "true")

BUCKET = "tfr-test"
SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples")


def encode(mode: str = "RGB", size=(24, 16), fmt: str = "JPEG", seed: int = 0, **save) -> bytes:
    """Bytes of a small noisy image (noise, so that every image differs)."""
    from PIL import Image

    rng = random.Random(seed)
    img = Image.new("RGB", size)
    img.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range(size[0] * size[1])])
    if mode == "P":
        img = img.convert("P")
    elif mode != "RGB":
        img = img.convert(mode)
    out = io.BytesIO()
    img.save(out, fmt, **save)
    return out.getvalue()


def write_images(folder, n: int) -> list[str]:
    """``n`` small distinct JPEGs ``0.jpg``... in ``folder``; their paths."""
    paths = []
    for i in range(n):
        path = os.path.join(str(folder), f"{i}.jpg")
        with open(path, "wb") as f:
            f.write(encode(seed=i))
        paths.append(path)
    return paths


#: A test that takes this long or longer by itself is marked slow (pytest.ini), so that
#: ``pytest -m "not slow"`` stays the quick run. Those that are not are listed at the end
#: of a run: a list to act on, never a failure (a test's speed is the machine's).
SLOW_SECONDS = 1.0
_unmarked_slow: list[tuple[float, str]] = []


def pytest_runtest_logreport(report):
    if (report.when == "call" and report.duration >= SLOW_SECONDS
            and "slow" not in report.keywords):
        _unmarked_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter):
    if not _unmarked_slow:
        return
    terminalreporter.section(f"over {SLOW_SECONDS:g} s but not marked slow")
    listed = sorted(_unmarked_slow, reverse=True)
    for seconds, nodeid in listed[:10]:
        terminalreporter.write_line(f"{seconds:5.1f} s  {nodeid}")
    if len(listed) > 10:
        terminalreporter.write_line(f"and {len(listed) - 10} more")


@pytest.fixture(scope="session", autouse=True)
def _session_tmpdir(tmp_path_factory):
    """Temporary files of the whole session (Beam's, our default inspect() folders, the
    default shard cache) go under pytest's own temporary root, which pytest prunes, not into the machine's."""
    import tempfile

    folder = str(tmp_path_factory.mktemp("tmpdir"))
    # And the default shard cache of gs:// readers (docs/bucket.md), not the user's.
    before = (tempfile.tempdir, os.environ.get("TMPDIR"),
              os.environ.get("TFRECORDER_CACHE"))
    tempfile.tempdir = os.environ["TMPDIR"] = folder
    os.environ["TFRECORDER_CACHE"] = str(tmp_path_factory.mktemp("shard-cache"))
    yield folder
    tempfile.tempdir = before[0]
    for name, value in (("TMPDIR", before[1]), ("TFRECORDER_CACHE", before[2])):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def tf():
    import tensorflow as tf

    return tf


@pytest.fixture
def image_table(tmp_path):
    """A function writing images into tmp_path; returns the path of each."""

    def make(name: str, data: bytes) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return str(path)

    return make


def read_examples(tf, files, compression=None):
    """Every record of ``files`` parsed into a dict of numpy values, in file order."""
    out = []
    for raw in tf.data.TFRecordDataset(list(files), compression_type=compression or ""):
        ex = tf.train.Example.FromString(raw.numpy())
        row = {}
        for key, feat in ex.features.feature.items():
            kind = feat.WhichOneof("kind")
            row[key] = list(getattr(feat, kind).value)
        out.append(row)
    return out


def split_files(out, split, manifest=None) -> list[str]:
    """The shard paths of ``split`` in output directory ``out``, as its manifest lists them."""
    from tfrecorder._folder import metadata

    m = manifest or metadata.read_manifest(str(out))
    return [os.path.join(str(out), f) for f in m.files(split)]


def read_split(tf, out, split=None):
    """Every record of ``split`` (None: of every split, in split order) in ``out``,
    parsed by TensorFlow into dicts of value lists."""
    from tfrecorder._folder import metadata

    m = metadata.read_manifest(str(out))
    compression = (m.compression or "").upper()
    names = list(m.splits) if split is None else [split]
    return [ex for name in names
            for ex in read_examples(tf, split_files(out, name, m), compression)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def gcs():
    """A gcp-storage-emulator server on 127.0.0.1 with one bucket; yields gcsfs."""
    port = _free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "gcp-storage-emulator")
    proc = subprocess.Popen([exe, "start", "--host", "127.0.0.1", "--port", str(port),
                             "--in-memory"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("the GCS emulator did not start")
            time.sleep(0.05)
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    import gcsfs

    fs = gcsfs.GCSFileSystem(token="anon")
    fs.mkdir(BUCKET)
    try:
        yield fs
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if old is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = old


@pytest.fixture
def run_cli(capsys):
    """``tfrecorder ARGS`` run in this process (``tfrecorder._cli.main``), for tests that
    check a command's output and exit code but not the process around it: returns what a
    process would give (``returncode``, ``stdout``, ``stderr``). argparse's usage errors
    and ``--help`` exit; their exit code is the return code, as in a process."""
    import types

    from tfrecorder._cli import main

    def run(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code
        captured = capsys.readouterr()
        return types.SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)

    return run



def docs_snippets(doc: str, heading: str) -> list[str]:
    """The ```python blocks under ``heading`` (any level) of docs/``doc``, up to the next
    heading of the same or a higher level (lines in fences are never headings)."""
    level, blocks, fence = None, [], None
    for line in open(os.path.join(os.path.dirname(SAMPLES), "docs", doc)).read().splitlines():
        if fence is not None:
            if not line.startswith("```"):
                fence[1].append(line)
                continue
            if fence[0] == "python" and level is not None:
                blocks.append("\n".join(fence[1]) + "\n")
            fence = None
        elif line.startswith("```"):
            fence = (line[3:].strip(), [])
        else:
            hashes = len(line) - len(line.lstrip("#"))
            if hashes and line[hashes:hashes + 1] == " ":
                if level is not None and hashes <= level:
                    break
                if line[hashes + 1:] == heading:
                    level = hashes
    assert level is not None, f"no heading {heading!r} in docs/{doc}"
    return blocks


@dataclasses.dataclass
class Checked:
    """A table checked and grouped as a conversion checks it, its records in memory."""

    rows: list                               # block.Row, split by split, in spill order
    columns: tuple[str, ...]                 # names of Row.values
    features: dict                           # every feature an Example holds
    vocabularies: dict[str, list[str]]       # feature -> names (line i = id i)


def check_table(source, schema, header="infer", names=None, **kw) -> Checked:
    """``source`` checked exactly as a conversion checks it (``spill.read``, which takes
    ``kw``), its records read back from the spill: what a conversion would write."""
    from tfrecorder._folder import layout
    from tfrecorder._inputs import spill

    spilled = spill.read(source, schema, header, names, **kw)
    try:
        rows = [row for split in sorted(spilled.counts, key=layout.split_order)
                for row in spilled.rows(split)]
    finally:
        spilled.remove()
    return Checked(rows, spilled.columns, spilled.features, spilled.vocabularies)


def validate(frame, row_ids, schema, *, base_dir=None, **kw) -> Checked:
    """A table in memory checked as a conversion checks it (``check_table``)."""
    from tfrecorder._inputs.table import Table

    return check_table(Table(frame, list(row_ids), base_dir, "dataframe"), schema,
                       **kw)


def stage_rows(rows, folder, *, name="d", num_shards=1, seed=0):
    """Stages hand-made ``block.Row`` as a conversion stages a table's rows; returns the
    staged shard tasks, read back, in plan order."""
    from tfrecorder._writer import plan, staging
    from tfrecorder._inputs import block, spill

    writer = spill._Writer()
    by_split = {}
    for r in rows:
        by_split.setdefault(r.split, []).append(r)
    for split, group in by_split.items():
        names = list(group[0].features)
        writer.write(split, block.Block(
            [r.row for r in group], [r.image_uri for r in group], names,
            [[r.features[n] for r in group] for n in names],
            [list(c) for c in zip(*(r.values for r in group))],
            [r.labels for r in group], [r.merged for r in group]))
    spilled = writer.spilled((), {}, {}, len(rows))
    try:
        plans = plan.split_plans(spilled.counts, num_shards=num_shards, seed=seed)
        shards = staging.stage(spilled, plans, str(folder), name=name, gzip=False)
    finally:
        spilled.remove()
    return [staging.read_task(staging.task_path(str(folder), s)) for s in shards]


def convert_ids(out, n: int, num_shards: int, value: str = "x") -> str:
    """A tabular conversion of ``n`` records in ``num_shards`` shards, each with a
    distinct int ``id`` and a float column ``value`` (``id / 4``); returns its folder."""
    import pandas as pd

    import tfrecorder

    df = pd.DataFrame({"split": ["TRAIN"] * n, "id": range(n), value: [i / 4 for i in range(n)]})
    schema = tfrecorder.input_schema.Schema({
        "split": tfrecorder.types.SplitKey, "id": tfrecorder.types.IntegerInput,
        value: tfrecorder.types.FloatInput})
    tfrecorder.convert(df, str(out), schema=schema, num_shards=num_shards)
    return str(out)


def new_venv(folder, inherit: bool = False) -> str:
    """A virtual environment made in ``folder`` by the interpreter's own venv module, so
    that none of this environment's packages leak in; its interpreter. It has no pip of
    its own (ensurepip takes seconds): ``pip(python, ...)`` installs into it. With
    ``inherit``, a ``.pth`` file puts this environment's site-packages after its own: what
    is installed into it comes first, what it lacks is taken from here (pip too sees
    those as installed, and installs only the rest)."""
    import sysconfig

    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = os.path.join(str(folder), "bin", "python")
    if inherit:
        theirs = subprocess.run([python, "-c", "import sysconfig; print("
                                 "sysconfig.get_paths()['purelib'])"], check=True,
                                capture_output=True, text=True).stdout.strip()
        ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
        with open(os.path.join(theirs, "zz-inherited.pth"), "w") as f:
            f.write("".join(f"{path}\n" for path in ours))
    return python


def pip(python: str, *args: str) -> str:
    """This environment's pip run on the environment of ``python``; what it printed."""
    done = subprocess.run([sys.executable, "-m", "pip", "--python", python,
                           "--disable-pip-version-check", *args], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def timeless(path) -> bytes:
    """A file's bytes, but for what differs from one machine or day to the next: the
    time a manifest was published, the modification times of the images in rows files."""
    return timeless_data(path.as_posix(), path.read_bytes())


def timeless_data(name: str, data: bytes) -> bytes:
    """``timeless`` of the bytes of a file called ``name`` (its path, or its path in the
    output folder)."""
    base = name.rsplit("/", 1)[-1]
    if base.endswith(".rows.jsonl.gz"):
        lines = [json.loads(line) for line in gzip.decompress(data).splitlines()]
        return b"".join(json.dumps({k: v for k, v in e.items() if k != "stamp"},
                                   sort_keys=True).encode() + b"\n" for e in lines)
    folder = name.rsplit("/", 2)[-2] if "/" in name else ""
    if base == "tfrecorder.json" or (folder == "versions" and base.endswith(".json")):
        d = json.loads(data)
        d["published"] = "..."
        return json.dumps(d, sort_keys=True).encode()
    return data


@pytest.fixture(scope="session")
def samples_converted(tmp_path_factory):
    """``samples_converted(**options)``: ``samples/data.csv`` converted with ``options``,
    as ``(folder, ConversionResult)``. Each set of options is converted once per test run
    and the folder is shared by every test that asks for it, so tests only read it; a test
    (or a module's fixture) that changes files works on a copy (``shutil.copytree``), which
    holds the same bytes a conversion of its own would."""
    made = {}

    def converted(**options):
        key = json.dumps(options, sort_keys=True)
        if key not in made:
            import tfrecorder

            folder = tmp_path_factory.mktemp("samples") / "out"
            result = tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), str(folder),
                                        **options)
            made[key] = str(folder), result
        return made[key]

    return converted


@pytest.fixture(scope="session")
def doc_runs(tmp_path_factory):
    """The blocks of README.md and docs/*.md run as ``tests/test_docs.py`` runs them, each
    page once per test run, in a folder of its own: ``doc_runs.page(doc)`` gives ``(results
    by block id, the end of what they printed, folder)``; ``doc_runs.block(doc, source)``
    the result (``status``, ``error``, ``stdout``) of the block holding ``source`` and the
    folder; ``doc_runs.python()`` the process that runs them (``test_docs._Python``).
    Tests of what a block prints assert on these instead of running it again."""
    import types

    from tests import test_docs

    made, python = {}, []

    def shared():
        """The one Python process that runs the blocks of every page."""
        if not python:
            folder = str(tmp_path_factory.mktemp("docs"))
            python.append(test_docs._Python(folder, test_docs._environment(folder)))
        return python[0]

    def page(doc):
        if doc not in made:
            folder = str(tmp_path_factory.mktemp("doc"))
            made[doc] = (*test_docs.run_doc(doc, folder, shared()), folder)
        return made[doc]

    def block(doc, source):
        (found,) = [b for b in test_docs.blocks(doc) if b["source"].strip() == source.strip()]
        results, output, folder = page(doc)
        result = results.get(found["id"])
        assert result is not None, f"{found['id']} did not run:\n{output}"
        return result, folder

    yield types.SimpleNamespace(page=page, block=block, python=shared)
    if python:
        code, at_exit = python[0].close()
        assert code == 0, (f"the process that ran the docs' blocks ({', '.join(made)}) "
                           f"ended with exit code {code}\n{at_exit[-4000:]}")


@pytest.fixture(scope="session")
def two_tables(tmp_path_factory):
    """Two CSVs of 2000 distinct tiny PNGs each (``tests/test_load_isolation.py``), the
    first labelled cat and dog, the second ant, bee, cow and doe: a conversion and the one
    that replaces it."""
    from tests.test_load_isolation import _tiny_pngs

    root = tmp_path_factory.mktemp("tables")
    return (_tiny_pngs(root, "a", ("cat", "dog")),
            _tiny_pngs(root, "b", ("ant", "bee", "cow", "doe")))


@pytest.fixture(scope="session")
def first_of_two(two_tables, tmp_path_factory):
    """The first of ``two_tables`` converted (in SHARDS shards), once per test run: a test
    that converts over it or reads it while another process does works on a copy."""
    from tests.test_load_isolation import SHARDS

    import tfrecorder

    out = str(tmp_path_factory.mktemp("first") / "out")
    tfrecorder.convert(two_tables[0], out, num_shards=SHARDS)
    return out


def supervision_dataset(folder):
    """A supervision DetectionDataset of two images (one without boxes) and the boxes it
    was given, in pixels: ``(dataset, {image name: [(class name, xyxy)]}, (w, h))``.
    Fixtures in YOLO's and Pascal VOC's formats are written by its own writers."""
    import numpy as np
    import supervision as sv

    os.makedirs(folder, exist_ok=True)
    size = (40, 30)
    paths = []
    for i in range(2):
        path = os.path.join(str(folder), f"{i}.jpg")
        with open(path, "wb") as f:
            f.write(encode(seed=i, size=size))
        paths.append(path)
    classes = ["cat", "dog"]
    xyxy = np.array([[4.0, 3.0, 24.0, 18.0], [0.0, 0.0, 40.0, 30.0], [7.0, 2.0, 13.0, 29.0]])
    class_id = np.array([1, 0, 1])
    dataset = sv.DetectionDataset(classes=classes, images=paths, annotations={
        paths[0]: sv.Detections(xyxy=xyxy, class_id=class_id),
        paths[1]: sv.Detections.empty()})
    given = {"0.jpg": [(classes[c], list(b)) for c, b in zip(class_id, xyxy)], "1.jpg": []}
    return dataset, given, size


@pytest.fixture
def fenced_gcs(gcs):
    """The GCS emulator behind a proxy that enforces generation preconditions
    (``ifGenerationMatch``), which the emulator ignores (tests/gcs_preconditions.py);
    yields its state: ``refused``, the requests it refused, and ``before``, a hook
    called with each request's method and path before it is served."""
    import types

    from tests import gcs_preconditions

    state = types.SimpleNamespace(refused=[], before=None)
    with emulator_behind(lambda upstream, port: gcs_preconditions.serve(upstream, port, state)):
        yield state


@contextlib.contextmanager
def emulator_behind(serve):
    """The GCS emulator reached, for the ``with`` block, through a proxy that
    ``serve(upstream "host:port", port)`` starts (it returns a server with ``shutdown``);
    gcsfs made anew on both sides, so that its clients take the proxy and then leave it."""
    import gcsfs

    upstream = os.environ["STORAGE_EMULATOR_HOST"]
    server = serve(upstream.split("//", 1)[1], port := _free_port())
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    gcsfs.GCSFileSystem.clear_instance_cache()  # a new one, through the proxy
    try:
        yield
    finally:
        server.shutdown()
        os.environ["STORAGE_EMULATOR_HOST"] = upstream
        gcsfs.GCSFileSystem.clear_instance_cache()


@pytest.fixture(scope="session")
def photos(tmp_path_factory):
    """40 small distinct JPEGs, a table of them (cat and dog, train and test) converted
    into 4 shards per split, once for the run, as ``(table, folder)``: the exports' tests
    read it; tests that change it work on a copy."""
    import pandas as pd

    import tfrecorder

    root = tmp_path_factory.mktemp("photos")
    paths = []
    for i in range(40):
        path = root / f"{i}.jpg"
        path.write_bytes(encode(seed=i))
        paths.append(str(path))
    table = pd.DataFrame({"split": ["TRAIN" if i % 4 else "TEST" for i in range(40)],
                          "image_uri": paths, "label": ["cat", "dog"] * 20})
    out = str(root / "out")
    tfrecorder.convert(table, out, num_shards=4)
    return table, out


#: A child Python that ends with a Ctrl-C landing as a thread of ``prefix`` starts: the
#: moment the pool has started its thread and not yet recorded it, where Python's exit
#: hook for such pools would never tell it to end. A real Ctrl-C lands there now and then;
#: the child puts it there every time. Its exit must not wait for that thread forever.
INTERRUPTED_AS_A_POOL_STARTS = """
import faulthandler, sys, threading
prefix = sys.argv[1]
start = threading.Thread.start
def start_then_interrupt(thread):
    start(thread)
    if thread.name.startswith(prefix):
        threading.Thread.start = start
        raise KeyboardInterrupt
threading.Thread.start = start_then_interrupt
try:
    exec(sys.argv[2])
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
exec(sys.argv[3])
faulthandler.dump_traceback_later(20, exit=True)  # a hung exit: rc 1 and every thread's stack
"""


def exits_after_interrupt(prefix: str, interrupted: str, then: str = ""):
    """The child's (returncode, stdout, stderr): ``interrupted`` run with the Ctrl-C
    landing as ``prefix``'s pool starts a thread, then ``then``, then the exit."""
    out = subprocess.run([sys.executable, "-c", INTERRUPTED_AS_A_POOL_STARTS, prefix,
                          interrupted, then], capture_output=True, text=True,
                         cwd=os.path.dirname(SAMPLES), timeout=120)
    return out.returncode, out.stdout, out.stderr
