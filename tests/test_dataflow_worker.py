"""A worker with only what a job ships: a clean virtual environment holding apache-beam
(the base of Beam's SDK container) and the wheel a Dataflow submission builds, installed
by pip from the wheel's own metadata. Real conversions run their every step in it,
through Beam's SDK worker entry point (``sdk_worker_main``), which a Dataflow worker's
container starts once it has installed the staged packages."""

import os
import subprocess
import zipfile

import pytest

import tfrecorder
from tfrecorder._folder import layout
from tfrecorder._writer.wheel import DISTRIBUTION, build_wheel
from tests.conftest import BUCKET, SAMPLES, new_venv, pip, timeless, timeless_data

pytestmark = pytest.mark.slow  # creating the environment takes minutes (docs/runners.md)


@pytest.fixture(scope="module")
def worker_env(tmp_path_factory):
    """``(python, wheel)``: the clean environment's interpreter and the wheel in it."""
    import apache_beam

    root = tmp_path_factory.mktemp("worker")
    wheel = build_wheel(str(root / "staged"))  # as run_dataflow does
    # No site-packages of this environment leak in; this environment's pip installs into
    # it, resolving from the wheel's metadata all the same.
    python = new_venv(root / "venv")
    # --no-compile: the workers compile what they import, instead of pip compiling all of
    # Beam and its requirements up front.
    pip(python, "install", "--quiet", "--no-compile",
        f"apache-beam=={apache_beam.__version__}", wheel)
    return python, wheel


def _worker_options(python: str, folder) -> list[str]:
    """A portable job whose SDK workers are ``python`` in ``folder``, isolated (-I): no
    PYTHONPATH, no current directory, so only what the environment holds is imported."""
    os.makedirs(folder, exist_ok=True)
    marker = os.path.join(folder, "started")
    command = (f"cd {folder} && echo $$ >> {marker} && "
               f"exec {python} -I -m apache_beam.runners.worker.sdk_worker_main")
    return ["--job_endpoint=embed", "--environment_type=beam:env:harness_subprocess_python:v1",
            f"--environment_config={command}"]


def test_the_environment_holds_only_beam_and_the_wheels_requirements(worker_env):
    python, wheel = worker_env
    frozen = pip(python, "freeze").lower()
    names = {line.split("==")[0].split(" @ ")[0] for line in frozen.splitlines()}
    assert {"apache-beam", DISTRIBUTION, "pillow", "gcsfs", "google-crc32c"} <= names
    assert not names & {"tensorflow", "pandas", "tqdm", "dask"}
    where = subprocess.run([python, "-I", "-c", "import tfrecorder; print(tfrecorder.__file__)"],
                           capture_output=True, text=True, check=True, cwd="/").stdout
    assert os.path.dirname(python).rsplit("/", 1)[0] in where  # from the wheel, not here
    # The wheel's entries are compressed.
    with zipfile.ZipFile(wheel) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
        assert sum(i.compress_size for i in z.infolist()) < sum(
            i.file_size for i in z.infolist()) / 2


def _files(folder) -> dict:
    """Every file of an output by relative path (rows and versions files too), but for
    what differs from run to run (``timeless``)."""
    return {p.relative_to(folder).as_posix(): timeless(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.relative_to(folder).as_posix().startswith(".")}


def test_local_paths_in_the_shipped_environment_equal_the_direct_runners(worker_env,
                                                                         tmp_path):
    python, _ = worker_env
    csv = os.path.join(SAMPLES, "data.csv")
    out, direct = tmp_path / "out", tmp_path / "direct"
    result = tfrecorder.convert(csv, str(out), runner="PortableRunner", num_shards=2,
                                pipeline_options=_worker_options(python, tmp_path / "w"))
    tfrecorder.convert(csv, str(direct), num_shards=2)
    assert result.rows_written == 36
    assert (tmp_path / "w" / "started").read_text().split()  # its workers ran
    assert _files(out) == _files(direct)


def test_gcs_in_the_shipped_environment_equals_the_direct_runner(worker_env, gcs, tmp_path):
    import pandas as pd

    python, _ = worker_env
    table = pd.read_csv(os.path.join(SAMPLES, "data.csv"))
    uris = []
    for path in table["image_uri"]:
        uri = f"{BUCKET}/worker-env/{path}"
        gcs.put(os.path.join(SAMPLES, path), uri)
        uris.append(f"gs://{uri}")
    table["image_uri"] = uris
    out, direct = f"gs://{BUCKET}/worker-env/out", f"gs://{BUCKET}/worker-env/direct"
    result = tfrecorder.convert(table, out, runner="PortableRunner", num_shards=2,
                                pipeline_options=_worker_options(python, tmp_path / "w"))
    tfrecorder.convert(table, direct, num_shards=2)
    assert result.rows_written == 36
    assert (tmp_path / "w" / "started").read_text().split()
    prefix = direct[len("gs://"):] + "/"
    names = sorted(p[len(prefix):] for p in gcs.find(direct))  # index/ files too
    assert layout.MANIFEST in names and any(".tfrecord-" in n for n in names)
    for name in names:  # (but for the time each version was published)
        assert timeless_data(name, gcs.cat(f"{out}/{name}")) == timeless_data(
            name, gcs.cat(f"{direct}/{name}")), name
