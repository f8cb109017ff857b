"""The docs run as written: every Python and shell block of README.md and docs/*.md.

Each block is saved as a file and run as ``python block.py`` or ``bash block.sh`` runs it,
as a newcomer who copies it into a script does; a file's blocks run in order in one fresh
folder laid out like a clone of the repository after its install step (``samples/``
copied, ``tfrecorder``, ``python`` and ``.venv/bin/...`` on hand), so a block finds the
files the ones before it wrote, never their variables. One Python process runs the Python
blocks one after the other, each as its own ``__main__`` (``_RUNNER``), but for those that
fork worker processes or set up ``tf.distribute``, which run in a process of their own.
A block is left out only by a marker in the Markdown just before it, which the test
report lists with its reason::

    <!-- test: skip (needs Google Cloud) -->
    <!-- test: needs: torch, grain -->       (runs when these modules import)

Blocks that install packages or create environments must carry a skip marker. Those of
docs/detection.md that need torchvision, which does not install beside this environment's
torch, run in tests/test_torchvision.py, in an environment of their own.
"""

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


@pytest.mark.slow
def test_readme_main_command_converts_the_bundled_samples(tmp_path):
    """The README's "Try it" conversion, run as written after its install steps (done:
    ``.venv/bin`` holds this checkout's ``tfrecorder``), in a folder holding ``samples/``;
    its output holds one record per row of ``samples/data.csv``."""
    import pandas as pd

    import tfrecorder

    (main,) = [c for c in _readme_commands() if "pytest" not in c]
    steps = [s for s in main.split(" && ") if not _INSTALLS.search(s)]
    assert steps and all("tfrecorder" in s for s in steps), main
    shutil.copytree(os.path.join(ROOT, "samples"), tmp_path / "samples",
                    ignore=shutil.ignore_patterns("*.ipynb", "out", ".ipynb_checkpoints"))
    _shims(str(tmp_path / ".venv" / "bin"))
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", " && ".join(steps)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{' && '.join(steps)}: exit code {p.returncode}\n{p.stderr[-3000:]}"

    manifests = [m for m in tmp_path.rglob("tfrecorder.json")
                 if m.relative_to(tmp_path).parts[0] != "samples"]
    assert len(manifests) == 1, (manifests, p.stdout)
    table = pd.read_csv(os.path.join(ROOT, "samples", "data.csv"))
    checked = tfrecorder.verify(str(manifests[0].parent))  # reads every record
    assert checked.records == len(table)
    # Rows with a split are in it; the unassigned ones (empty split) go where their hash says.
    assigned = table["split"].dropna().str.lower().value_counts().to_dict()
    assert set(checked.records_per_split) == set(assigned)
    assert all(checked.records_per_split[s] >= n for s, n in assigned.items())


def _options_doc():
    """scripts/options_doc.py, which writes docs/options.md from ``tfrecorder.Options``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "options_doc", os.path.join(ROOT, "scripts", "options_doc.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_options_doc_is_rendered_from_the_options_dataclass():
    import dataclasses
    import difflib

    import tfrecorder

    script = _options_doc()
    rendered = script.render()
    for f in dataclasses.fields(tfrecorder.Options):  # one row per field, its text in it
        rows = [line for line in rendered.splitlines() if line.startswith(f"| `{f.name}` |")]
        assert len(rows) == 1, f"option {f.name!r} has {len(rows)} rows in the rendered table"
        assert (f.metadata["doc"] or f.metadata["help"]) in rows[0], f.name
    with open(script.PATH, encoding="utf-8") as fh:
        written = fh.read()
    diff = "".join(difflib.unified_diff(written.splitlines(True), rendered.splitlines(True),
                                        "docs/options.md", "rendered", n=0))
    assert written == rendered, (
        f"docs/options.md differs from tfrecorder.Options; regenerate it with "
        f"`{script.COMMAND}`\n{diff[:3000]}")


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
        # a page's links to its own headings, "](#anchor)"
        own = _anchors(os.path.join(ROOT, source))
        for anchor in re.findall(r"\]\(#([\w\-]+)\)", text):
            assert anchor in own, (source, f"#{anchor}")


# --- The blocks of every Markdown file, run as a newcomer runs them ---------------------

import importlib.util
import json
import select
import shutil
import subprocess
import sys

DOCS = ["README.md", *sorted(os.path.join("docs", f) for f in os.listdir(
    os.path.join(ROOT, "docs")) if f.endswith(".md"))]
RUN = {"python": "python", "py": "python", "bash": "shell", "sh": "shell",
       "shell": "shell", "console": "console"}
_MARKER = re.compile(r"<!--\s*test:\s*(.*?)\s*-->")
_INSTALLS = re.compile(r"\bpip3? install\b|-m venv\b|\bvirtualenv\b|\bconda (create|install)\b")
#: How many characters one bare expression may show (a REPL prints its repr).
MAX_REPR = 3000


def blocks(doc: str) -> list[dict]:
    """The runnable blocks of ``doc``: language, first line number, source, marker."""
    lines = open(os.path.join(ROOT, doc), encoding="utf-8").read().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)```\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2).lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        body = "\n".join(line[len(indent):] for line in lines[i + 1:end])
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.search(before)
        if lang in RUN:
            out.append({"id": f"{doc}:{i + 1}", "kind": RUN[lang], "source": body,
                        "line": i + 2, "marker": marker.group(1) if marker else None})
        i = end + 1
    return out


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return False


def _why_not_run(block: dict) -> str | None:
    """The reason a block is skipped, from its marker (None: it runs)."""
    marker = block["marker"]
    if marker is None:
        return None
    if marker.startswith("skip"):
        return marker[4:].strip(" :()") or "marked skip"
    if marker.startswith("needs"):
        wanted = [m.strip() for m in marker.split(":", 1)[1].split(",") if m.strip()]
        absent = [m for m in wanted if not _importable(m)]
        return f"needs {', '.join(absent)} (not installed)" if absent else None
    raise AssertionError(f"{block['id']}: unknown marker <!-- test: {marker} -->; use "
                         f"'skip (reason)' or 'needs: module, ...'")


#: Runs blocks saved as files, each as ``python FILE`` runs it: the file is ``__main__``
#: (a module of its own, so no variable of one block reaches the next), its folder is
#: first on ``sys.path``, the working folder and the environment variables are those the
#: process started with, and what it prints (file descriptors 1 and 2, so TensorFlow's
#: and child processes' output too) goes to files of its own. A bare expression is shown as
#: a REPL shows it, and one that would print more than ``max_repr`` characters fails.
#: Each line of standard input names a block (``[path, stdout file, stderr file, folder,
#: environment]``, the last two null for those the process started with); the exit code
#: ``python FILE`` would end with is written back as a line. One process runs every block
#: that ``_needs_own_process`` leaves to it, one after the other (those of every page in a
#: test run); the others run in a process each, as the only block it runs.
_RUNNER = r'''
import ast, builtins, json, os, sys, traceback, types
max_repr = int(sys.argv[1])
commands, control = os.fdopen(os.dup(0)), os.fdopen(os.dup(1), "w")
first_out, first_err = os.dup(1), os.dup(2)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
home, environ = os.getcwd(), dict(os.environ)
shown = []

def display(value):  # what a REPL prints for a bare expression
    if value is None:
        return
    text = repr(value)
    shown.append(len(text))
    print(text[:500] + (" ..." if len(text) > 500 else ""))

def run(path):
    main = types.ModuleType("__main__")
    main.__file__, main.__builtins__, main.__spec__ = path, builtins, None
    sys.modules["__main__"] = main
    sys.argv[:] = [path]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    sys.displayhook = display
    source = open(path, encoding="utf-8").read()
    for stmt in ast.parse(source, path).body:
        if isinstance(stmt, ast.Expr):
            code = compile(ast.Interactive([stmt]), path, "single")
        else:
            code = compile(ast.Module([stmt], []), path, "exec")
        del shown[:]
        exec(code, main.__dict__)
        sys.stdout.flush()
        if shown and shown[0] > max_repr:
            raise AssertionError(f"line {stmt.lineno}: `{ast.unparse(stmt)}` shows "
                                 f"{shown[0]} characters in a REPL (more than {max_repr})")

def exit_code(e):  # what the interpreter does with a SystemExit's code
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    print(e.code, file=sys.stderr)
    return 1

for line in commands:
    path, out, err, folder, env = json.loads(line)
    os.chdir(folder or home)
    os.environ.clear()
    os.environ.update(env or environ)
    with open(out, "w") as o, open(err, "w") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
        try:
            run(path)
            code = 0
        except SystemExit as ex:
            code = exit_code(ex)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(first_out, 1)
        os.dup2(first_err, 2)
    control.write(json.dumps(code) + "\n")
    control.flush()
'''

#: What a Python block does that another block run before it in the same process could
#: change: it forks worker processes (a forked worker copies the process as the earlier
#: blocks left it; PyTorch's DataLoader forks, ``multiprocessing`` may) or sets up
#: TensorFlow's distribution, which has to come before any other TensorFlow work in a
#: process. Grain's workers are spawned, new interpreters that import the block's file
#: again as they would a script's, so a Grain block needs no process of its own.
_OWN_PROCESS = re.compile(r"\bnum_workers\s*=\s*[1-9]|\bmultiprocessing\b|\bos\.fork\b|"
                          r"\btf\.distribute\b")


def _needs_own_process(block: dict) -> bool:
    return block["kind"] != "python" or bool(_OWN_PROCESS.search(block["source"]))


def _block_file(folder: str, block: dict) -> str:
    """``block`` saved as a file in ``folder/blocks``, as a newcomer saves it."""
    os.makedirs(os.path.join(folder, "blocks"), exist_ok=True)
    name = re.sub(r"\W", "_", block["id"].replace(".md:", "_line"))
    path = os.path.join(folder, "blocks", name + (".py" if block["kind"] == "python" else ".sh"))
    source = block["source"]
    if block["kind"] == "console":
        source = "\n".join(line[2:] for line in source.splitlines() if line.startswith("$ "))
    with open(path, "w", encoding="utf-8") as f:
        f.write(source + "\n")
    return path


def _shims(folder, names=("tfrecorder", "python", "python3")):
    os.makedirs(folder, exist_ok=True)
    for name in names:
        target = [sys.executable, "-m", "tfrecorder"] if name == "tfrecorder" else [sys.executable]
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexec " + " ".join(target) + ' "$@"\n')
        os.chmod(path, 0o755)


def _prepare(folder: str) -> dict:
    """``folder`` laid out as a clone after its install step; the environment to run in."""
    shutil.copytree(os.path.join(ROOT, "samples"), os.path.join(folder, "samples"),
                    ignore=shutil.ignore_patterns("*.ipynb", "out", ".ipynb_checkpoints"))
    _shims(os.path.join(folder, "bin"))
    _shims(os.path.join(folder, ".venv", "bin"))  # the install step is done
    return _environment(folder)


def _environment(folder: str) -> dict:
    """The environment blocks run in, in ``folder`` (``_prepare``)."""
    return {**os.environ, "PATH": os.path.join(folder, "bin") + os.pathsep + os.environ["PATH"],
            "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "MPLBACKEND": "Agg",
            "PYTHONWARNINGS": "ignore",
            # Blocks that hand an export to Hugging Face's libraries stay offline.
            "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "HF_HOME": os.path.join(folder, "hf-home")}


class _Python:
    """A Python process running ``_RUNNER`` in ``folder``: ``run(block)`` runs one saved
    block in it and waits for its exit code; ``close()`` ends the process and gives the
    exit code and what it printed outside the blocks (at exit, for instance). The
    interpreter is this one, or ``executable`` (another environment's)."""

    def __init__(self, folder: str, env: dict, executable: str | None = None):
        self.folder = folder
        os.makedirs(os.path.join(folder, "blocks"), exist_ok=True)
        self.log = open(os.path.join(folder, "blocks", f"python-{id(self)}.err"), "w+")
        self.proc = subprocess.Popen([executable or sys.executable, "-c", _RUNNER,
                                      str(MAX_REPR)],
                                     cwd=folder, env=env, text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log)

    def run(self, path: str, folder: str | None = None, env: dict | None = None
            ) -> tuple[int | None, str, str]:
        """The exit code ``python path`` ends with (None: no end in 900 s), and what it
        printed to standard output and to standard error; run in ``folder`` with ``env``
        (by default, the process's own)."""
        out, err = path + ".out", path + ".err"
        self.proc.stdin.write(json.dumps([path, out, err, folder, env]) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], 900)
        line = self.proc.stdout.readline() if ready else ""
        if line:
            code = json.loads(line)
        elif ready:  # the process ended in the block (os._exit, a crash)
            code = self.proc.wait()
        else:
            self.proc.kill()
            code = None

        def text(name):
            return open(name, encoding="utf-8", errors="replace").read() if os.path.exists(
                name) else ""

        return code, text(out), text(err)

    def close(self) -> tuple[int, str]:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:  # it ended already
            pass
        try:
            code = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.seek(0)
        return code, self.log.read()


def _run_block(folder: str, block: dict, env: dict, python: _Python | None = None
               ) -> tuple[dict, str]:
    """``block`` saved as a file and run in ``folder``, by ``python`` or, without it, in
    a process of its own: its result (``status``, ``error``, ``stdout``) and what it
    printed, headed by its name."""
    path = _block_file(folder, block)
    name = os.path.relpath(path, folder)
    if block["kind"] != "python":
        try:
            p = subprocess.run(["bash", "-euo", "pipefail", path], cwd=folder, env=env,
                               capture_output=True, text=True, timeout=900)
            code, stdout, stderr = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            code, stdout, stderr = None, "", ""
    else:
        own = python or _Python(folder, env)
        code, stdout, stderr = own.run(path, folder, env)
        if python is None:  # as ``python FILE``: the end of the process is the block's
            exit, at_exit = own.close()
            if code == 0:
                code, stderr = exit, stderr + at_exit
    printed = f"----- {block['id']} ({block['kind']}, {name})\n{stdout[-3000:]}"
    if code is None:
        return {"status": "fail", "error": f"{name}: no end after 900 s",
                "stdout": stdout}, printed
    if code != 0:
        return {"status": "fail", "error": f"{name}: exit code {code}\n{stderr[-4000:]}",
                "stdout": stdout}, printed
    return {"status": "ok", "stdout": stdout}, printed


def run_doc(doc: str, folder: str, python: _Python | None = None) -> tuple[dict, str]:
    """Runs ``doc``'s blocks that are not skipped, in order, each saved as a file, all in
    ``folder``: what one block leaves on disk the next finds, but no variable carries over.
    Shell blocks run as ``bash FILE``; Python blocks as ``python FILE`` would, in one
    process (``python``, or one for the page) but for those that ``_needs_own_process``.
    After a failing block the later ones are not run. Returns each block's result (``status``, ``error``,
    ``stdout``) by id, and the end of what they printed."""
    todo = [b for b in blocks(doc) if _why_not_run(b) is None]
    if not todo:
        return {}, ""
    env = _prepare(folder)
    results, output, shared, last = {}, [], None, None
    try:
        for b in todo:
            if any(r["status"] == "fail" for r in results.values()):
                results[b["id"]] = {"status": "fail",
                                    "error": "not run: an earlier block failed"}
                continue
            if not _needs_own_process(b):
                shared = shared or python or _Python(folder, env)
                last = b["id"]
            results[b["id"]], printed = _run_block(
                folder, b, env, None if _needs_own_process(b) else shared)
            output.append(printed)
    finally:
        if shared is not None and python is None:
            code, at_exit = shared.close()
            if code != 0 and results[last]["status"] == "ok":
                # A process that fails as it ends fails its last block, as it would alone.
                results[last] = {"status": "fail", "stdout": results[last]["stdout"],
                                 "error": f"the process that ran {doc}'s blocks up to "
                                          f"{last} ended with exit code {code}\n"
                                          f"{at_exit[-4000:]}"}
    return results, "".join(output)[-8000:]


def _all_blocks():
    return [pytest.param(doc, b["id"], id=b["id"]) for doc in DOCS for b in blocks(doc)]


@pytest.mark.slow
@pytest.mark.parametrize("doc,block_id", _all_blocks())
def test_doc_block_runs_as_written(doc, block_id, doc_runs):
    (block,) = [b for b in blocks(doc) if b["id"] == block_id]
    why = _why_not_run(block)
    if why is not None:
        pytest.skip(f"{block_id}: {why}")
    assert not _INSTALLS.search(block["source"]), (
        f"{block_id} installs packages or creates an environment: mark it "
        f"<!-- test: skip (installs ...) -->")
    results, output, _ = doc_runs.page(doc)
    result = results.get(block_id)
    assert result is not None, f"{block_id} did not run:\n{output}"
    assert result["status"] == "ok", f"{block_id}:\n{result['error']}\n--- output ---\n{output}"


def test_markers_are_read_and_blocks_found():
    """The runner's own parsing: a marker applies to the block right after it."""
    found = {b["id"]: b for doc in DOCS for b in blocks(doc)}
    assert sum(b["kind"] == "python" for b in found.values()) >= 10
    skipped = [b for b in found.values() if _why_not_run(b) is not None]
    assert skipped and all(b["marker"] for b in skipped)
    for b in found.values():  # every install step is marked
        if _INSTALLS.search(b["source"]):
            assert b["marker"] and b["marker"].startswith("skip"), b["id"]


#: Module names a block uses that a newcomer copying just that block must import in it.
MODULES = {"tfrecorder", "tf", "pd", "np", "tfds", "torch", "grain", "dask"}


@pytest.mark.parametrize("doc", DOCS)
def test_each_block_imports_the_modules_it_uses(doc):
    """A block copied on its own into a fresh Python works as far as imports go: the
    shared namespace of a file's run would hide a missing ``import tfrecorder``."""
    import ast

    for b in blocks(doc):
        if b["kind"] != "python" or (b["marker"] or "").startswith("skip"):
            continue
        tree = ast.parse(b["source"])
        bound = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Load)}
        missing = sorted((used & MODULES) - bound)
        assert not missing, f"{b['id']} uses {missing} without importing them"


def test_docs_name_the_pythons_setup_py_requires():
    """getting-started.md once said 3.10 while setup.py required 3.11."""
    setup = open(os.path.join(ROOT, "setup.py")).read()
    least = int(re.search(r'python_requires=">=3\.(\d+)"', setup).group(1))
    for doc in DOCS:
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        for minor in re.findall(r"Python 3\.(\d+)", text):
            assert int(minor) >= least, f"{doc} names Python 3.{minor}; setup.py needs 3.{least}"
    assert f"Python 3.{least}" in open(os.path.join(ROOT, "docs", "getting-started.md")).read()


@pytest.mark.slow
def test_the_readme_first_block_runs_again_after_try_it(tmp_path, doc_runs):
    """README's first block, in a folder where the "Try it" conversion wrote
    ``out/samples``, then once more: a newcomer runs it again."""
    import tfrecorder

    first = next(b for b in blocks("README.md") if b["kind"] == "python")
    env = _prepare(str(tmp_path))
    (main,) = [c for c in _readme_commands() if "pytest" not in c]
    try_it = " && ".join(s for s in main.split(" && ") if not _INSTALLS.search(s))
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", try_it], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "out" / "samples" / "tfrecorder.json").exists()
    for run in (1, 2):  # each run as its file, in the process that runs the docs' blocks
        result, printed = _run_block(str(tmp_path), first, env, doc_runs.python())
        assert result["status"] == "ok", f"run {run}: {result.get('error')}\n{printed}"
        assert tfrecorder.verify(str(tmp_path / "out")).records == 36
    assert tfrecorder.verify(str(tmp_path / "out" / "samples")).records == 36  # left alone
