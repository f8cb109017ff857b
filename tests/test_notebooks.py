"""The sample notebooks run top to bottom (executed, not just parsed)."""

import glob
import os
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import SAMPLES

NOTEBOOKS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(SAMPLES, "*.ipynb")))


def test_the_five_notebooks_are_there():
    assert NOTEBOOKS == ["basic_usage.ipynb", "dataflow_dry_run.ipynb", "image_directory.ipynb",
                         "loading_and_inspecting.ipynb", "tabular_data.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
@pytest.mark.slow
def test_notebook_runs(name, tmp_path, request):
    if name.startswith("dataflow"):
        request.getfixturevalue("gcs")  # a local GCS emulator stands in for a bucket
    work = tmp_path / "samples"
    shutil.copytree(SAMPLES, work, ignore=shutil.ignore_patterns("out", "*.ipynb_checkpoints"))
    nb = nbformat.read(str(work / name), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(work)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    html = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "text/html" in o.get("data", {})]
    if name in ("basic_usage.ipynb", "loading_and_inspecting.ipynb"):
        assert html  # the result / inspection rendered as HTML
    if name == "basic_usage.ipynb":
        streams = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                          for o in c.get("outputs", []) if o.get("name") == "stderr")
        assert "36/36" in streams  # the progress bar, drawn in the notebook
