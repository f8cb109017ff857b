"""The README's commands are the ones that run."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme_commands():
    text = open(os.path.join(ROOT, "README.md")).read()
    return re.findall(r"```bash\n(python3 -m venv .venv && [^\n]+)\n```", text)


def test_ci_runs_the_readme_test_command():
    commands = _readme_commands()
    tests = [c for c in commands if "pytest" in c]
    assert len(tests) == 1
    ci = open(os.path.join(ROOT, ".ci", "run")).read().splitlines()
    assert tests[0] in ci


def test_readme_main_command_converts_the_bundled_samples():
    (main,) = [c for c in _readme_commands() if "pytest" not in c]
    assert "tfrecorder convert samples/data.csv" in main
    assert os.path.exists(os.path.join(ROOT, "samples", "data.csv"))


def _anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    heads = re.findall(r"^#+ (.+)$", open(path).read(), re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in heads}


def test_every_linked_doc_and_anchor_exists():
    for source in ["README.md", *(os.path.join("docs", f) for f in os.listdir(
            os.path.join(ROOT, "docs")))]:
        folder = os.path.dirname(os.path.join(ROOT, source))
        text = open(os.path.join(ROOT, source)).read()
        for link in re.findall(r"\]\(([\w\-./]+\.md)(#[\w\-]+)?\)", text):
            path = os.path.normpath(os.path.join(folder, link[0]))
            assert os.path.exists(path), (source, link)
            if link[1]:
                assert link[1][1:] in _anchors(path), (source, link)


@pytest.mark.slow
def test_getting_started_steps_run_as_written(tmp_path):
    """docs/getting-started.md, steps 2 to 4, in a fresh folder, as a new user runs them."""
    import shutil
    import subprocess
    import sys

    text = open(os.path.join(ROOT, "docs", "getting-started.md")).read()
    (step4,) = re.findall(r"```python\n(.*?)```", text, re.S)
    shutil.copytree(os.path.join(ROOT, "samples"), tmp_path / "samples",
                    ignore=shutil.ignore_patterns("*.ipynb", "out"))
    exe = [sys.executable, "-m", "tfrecorder"]
    for step in re.findall(r"```bash\n\.venv/bin/tfrecorder ([^\n]+)\n```", text):
        p = subprocess.run(exe + step.split(), cwd=tmp_path, capture_output=True, text=True)
        assert p.returncode == 0, (step, p.stderr)
    assert "data.csv" in os.listdir(tmp_path / "out" / "look")
    p = subprocess.run([sys.executable, "-c", step4], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Epoch 2/2" in p.stdout
