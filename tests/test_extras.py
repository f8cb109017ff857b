"""What each extra adds: TensorFlow and PyTorch are extras (setup.py), so every path that
does not need them runs without them, and one that does names the extra to install."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import write_images
from tfrecorder import _extras

#: Run first in a new process: a finder that answers for TensorFlow (and, for the second
#: test, PyTorch) as pip does when the extra is not installed.
_WITHOUT = textwrap.dedent("""
    import importlib.abc, sys

    class Missing(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in MISSING:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, Missing())
""")


def _run_without(missing: tuple[str, ...], code: str, tmp_path) -> subprocess.CompletedProcess:
    script = f"MISSING = {missing!r}\n" + _WITHOUT + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)


@pytest.mark.slow
def test_everything_but_tf_data_runs_without_tensorflow(tmp_path):
    (tmp_path / "images").mkdir()
    images = write_images(tmp_path / "images", 4)
    with open(tmp_path / "data.csv", "w") as f:
        f.writelines(f"{split},{path},{label}\n" for split, path, label in
                     zip(["TRAIN", "TRAIN", "TRAIN", "TEST"], images, "abab"))
    proc = _run_without(("tensorflow", "tensorflow_datasets"), """
        import sys
        import tfrecorder
        from tfrecorder import access
        import tfrecorder.torch as tt

        result = tfrecorder.convert("data.csv", "out", progress=False)
        assert result.rows_per_split == {"train": 3, "test": 1}, result.rows_per_split
        folder = tfrecorder.open("out")
        assert len(folder.read(split="train")) == 3
        assert folder.verify().records_per_split == {"train": 3, "test": 1}
        assert folder.report().leaks.empty
        reader = access.Reader("out", "train")
        assert reader.features(0)["label"] in (0, 1)
        assert tt.Dataset("out", "train")[0][0].shape[0] == 3
        tfrecorder.inspect("out", split="train", output_dir="look")
        try:
            tfrecorder.load("out", split="train")
        except ModuleNotFoundError as e:
            print(e)
        loaded = sorted(m for m in sys.modules if m.split(".")[0].startswith("tensorflow"))
        assert not loaded, loaded
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout.strip().splitlines()[-1]
    assert said.startswith("tfrecorder.load() needs TensorFlow, which is not installed")
    assert "pip install 'tfrecorder-tables[tensorflow]'" in said
    assert os.path.exists(tmp_path / "out" / "tfrecorder.json")


@pytest.mark.slow
def test_a_missing_framework_names_its_extra(tmp_path):
    proc = _run_without(("torch",), """
        try:
            import tfrecorder.torch
        except ModuleNotFoundError as e:
            print(e.name, e)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("torch tfrecorder.torch needs PyTorch, which is not installed")
    assert "'tfrecorder-tables[torch]'" in proc.stdout


def test_a_module_whose_own_import_fails_is_not_called_missing(tmp_path, monkeypatch):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("import a_module_nobody_has\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    with pytest.raises(ModuleNotFoundError) as caught:
        _extras.require("torch", "tfrecorder.torch")
    assert caught.value.name == "a_module_nobody_has"
    assert "extra" not in str(caught.value)
