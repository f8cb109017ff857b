"""The sample notebooks run top to bottom (executed, not just parsed)."""

import glob
import os
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import SAMPLES

NOTEBOOKS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(SAMPLES, "*.ipynb")))


def _execute(nb, folder, allow_errors=False):
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=allow_errors,
                   resources={"metadata": {"path": str(folder)}}).execute()
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _stderr(outputs) -> str:
    return "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")


def _copy_samples(tmp_path):
    work = tmp_path / "samples"
    shutil.copytree(SAMPLES, work, ignore=shutil.ignore_patterns("out", "*.ipynb_checkpoints"))
    return work


def test_the_five_notebooks_are_there():
    assert NOTEBOOKS == ["basic_usage.ipynb", "dataflow_dry_run.ipynb", "image_directory.ipynb",
                         "loading_and_inspecting.ipynb", "tabular_data.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
@pytest.mark.slow
def test_notebook_runs(name, tmp_path, request, monkeypatch):
    if name.startswith("dataflow"):
        request.getfixturevalue("gcs")  # a local GCS emulator stands in for a bucket
        # As a user's shell has it: none of the test suite's gcsfs settings, and a bucket
        # the emulator does not have yet (the notebook creates it).
        monkeypatch.delenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", raising=False)
        monkeypatch.delenv("NO_GCE_CHECK", raising=False)
        monkeypatch.setenv("TFRECORDER_BUCKET", "tfr-notebook")
    work = _copy_samples(tmp_path)
    nb = nbformat.read(str(work / name), as_version=4)
    outputs = _execute(nb, work)
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors
    html = [o for o in outputs if "text/html" in o.get("data", {})]
    if name in ("basic_usage.ipynb", "loading_and_inspecting.ipynb"):
        assert html  # the result / inspection rendered as HTML
    if name == "basic_usage.ipynb":
        # The progress bar is a Jupyter widget (ipywidgets is installed), filled to the end.
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                   for o in outputs)
        state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        bars = [m["state"] for m in state.values() if m["model_name"] == "FloatProgressModel"]
        assert bars and all(b["value"] == b["max"] == 36 for b in bars)
    if name.startswith("dataflow"):
        assert "staging to gs://tfr-notebook on the local GCS emulator" in "".join(
            o.get("text", "") for o in outputs)
        assert _stderr(outputs).count("\n") < 5, _stderr(outputs)  # no credential warnings


@pytest.mark.slow
def test_the_progress_bar_is_plain_text_without_ipywidgets(tmp_path):
    work = _copy_samples(tmp_path)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'import sys\nsys.modules["ipywidgets"] = None  # as if it were not installed\n'
        'import tfrecorder\n'
        'tfrecorder.convert("data.csv", "out/plain")')])
    outputs = _execute(nb, work)
    assert "36/36" in _stderr(outputs)
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                   for o in outputs)


@pytest.mark.slow
def test_the_dataflow_notebook_says_what_to_start_without_a_bucket(tmp_path, monkeypatch):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("TFRECORDER_BUCKET", raising=False)
    work = _copy_samples(tmp_path)
    nb = nbformat.read(str(work / "dataflow_dry_run.ipynb"), as_version=4)
    nb.cells = nb.cells[:2]  # the explanation and the cell that looks for a bucket
    (error,) = [o for o in _execute(nb, work, allow_errors=True)
                if o.get("output_type") == "error"]
    assert "gcp-storage-emulator start" in error["evalue"]
    assert "--default-bucket tfr-test" in error["evalue"]
    assert "STORAGE_EMULATOR_HOST" in error["evalue"] and "TFRECORDER_BUCKET" in error["evalue"]
    # And an emulator that is not running is named too.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    nb = nbformat.read(str(work / "dataflow_dry_run.ipynb"), as_version=4)
    nb.cells = nb.cells[:2]
    (error,) = [o for o in _execute(nb, work, allow_errors=True)
                if o.get("output_type") == "error"]
    assert "Nothing answers at STORAGE_EMULATOR_HOST=http://127.0.0.1:9" in error["evalue"]
