import ast
import pathlib
import re
import subprocess
import sys

import pytest

import tfrecorder


def test_all_is_sorted_and_complete():
    assert tfrecorder.__all__ == sorted(tfrecorder.__all__)
    for name in tfrecorder.__all__:
        assert hasattr(tfrecorder, name), name
    public = {n for n in dir(tfrecorder) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(tfrecorder, n)).__name__ == "module"}
    assert public - modules - {"annotations"} <= set(tfrecorder.__all__)


def test_tfrecorder_compatible_names():
    from tfrecorder import input_schema, types

    schema = input_schema.Schema({"split": types.SplitKey, "image_uri": types.ImageUri,
                                  "label": types.StringLabel})
    assert schema.column("image") == "image_uri"
    assert input_schema.image_csv_schema is input_schema.IMAGE_CSV_SCHEMA


@pytest.mark.slow
def test_import_is_light_silent_and_leaves_logging_alone():
    code = (
        "import logging, sys\n"
        "before = list(logging.getLogger().handlers)\n"
        "import pandas as pd, tfrecorder\n"
        "assert logging.getLogger().handlers == before\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'apache_beam', 'PIL', 'gcsfs'))\n"
        "assert not heavy, heavy\n"
        "assert hasattr(pd.DataFrame(), 'tensorflow')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""


def test_errors_subclass_the_matching_builtins():
    assert issubclass(tfrecorder.SchemaError, ValueError)
    assert issubclass(tfrecorder.ConfigError, ValueError)
    assert issubclass(tfrecorder.OutputExistsError, FileExistsError)
    assert issubclass(tfrecorder.IncompleteOutputError, FileNotFoundError)
    assert issubclass(tfrecorder.OutputChangedError, tfrecorder.CorruptRecordError)
    for cls in (tfrecorder.SchemaError, tfrecorder.ConfigError, tfrecorder.ConversionError):
        assert issubclass(cls, tfrecorder.TFRecorderError)


def _public_modules() -> set[str]:
    """The package's public modules: those whose file names have no leading underscore."""
    package = pathlib.Path(tfrecorder.__file__).parent
    return {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}


def _documentation() -> str:
    root = pathlib.Path(tfrecorder.__file__).parent.parent
    return "\n".join(p.read_text() for p in [root / "README.md", *root.glob("docs/*.md")])


def test_the_public_surface_is_what_is_documented():
    # What is public is derived, not restated: the names in __all__ and the modules
    # without a leading underscore. Each is documented, and nothing else is reachable
    # from the package without an underscore.
    docs = _documentation()
    for name in tfrecorder.__all__:
        assert re.search(rf"\b{re.escape(name)}\b", docs), f"{name} is not in the docs"
    for module in _public_modules():
        assert f"tfrecorder.{module}" in docs, f"tfrecorder.{module} is not in the docs"
    reachable = {n for n in vars(tfrecorder) if not n.startswith("_")} - {"annotations"}
    assert reachable <= set(tfrecorder.__all__) | _public_modules(), (
        reachable - set(tfrecorder.__all__) - _public_modules())


def test_internal_modules_stay_internal_in_the_docs():
    # The docs' Python blocks import public names only.
    for block in re.findall(r"```python\n(.*?)```", _documentation(), re.S):
        assert not re.search(r"from tfrecorder import _|tfrecorder\._", block), block


def test_public_exceptions_carry_the_packages_name():
    for name in tfrecorder.__all__:
        value = getattr(tfrecorder, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert value.__module__ == "tfrecorder", name
            assert f"{value.__module__}.{value.__qualname__}" == f"tfrecorder.{name}"


def test_public_functions_show_their_real_parameters():
    import inspect

    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(tfrecorder.load)[:4] == ["tfrecord_dir", "split", "batch_size", "image_size"]
    assert "as_supervised" in params(tfrecorder.load)
    assert params(tfrecorder.inspect) == ["tfrecord_dir", "split", "num_records", "output_dir",
                                          "version"]
    assert params(tfrecorder.verify) == ["tfrecord_dir", "version"]
    assert params(tfrecorder.info) == ["tfrecord_dir", "version"]
    assert params(tfrecorder.load)[-1] == params(tfrecorder.read)[-1] == "version"
    for fn in (tfrecorder.load, tfrecorder.inspect, tfrecorder.verify, tfrecorder.info):
        assert not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
        assert fn.__doc__ and fn.__module__.startswith("tfrecorder."), fn


def test_options_document_every_field_once_and_the_cli_offers_each():
    import dataclasses

    from tfrecorder import _cli as cli

    doc = tfrecorder.Options.__doc__
    convert = cli.build_parser()._subparsers._group_actions[0].choices["convert"]
    flags = {o for a in convert._actions for o in a.option_strings}
    for f in dataclasses.fields(tfrecorder.Options):
        assert f.metadata["help"] and f"``{f.name}``" in doc, f.name
        if f.metadata["cli"] is not None and f.name not in ("progress", "write_index", "mode"):
            assert {f"--{f.name.replace('_', '-')}", f"--{f.name}"} <= flags, f.name
    assert {"--no-progress", "--no-index", "--update", "--append"} <= flags


def _import_graph(package: pathlib.Path) -> dict[str, set[str]]:
    """Each module of the (flat) tfrecorder package in ``package`` -> the tfrecorder
    modules it imports anywhere in its source, function-level imports included."""
    modules = {p.stem for p in package.glob("*.py")}
    graph = {}
    for path in package.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (f"tfrecorder.{node.module}" if node.module else "tfrecorder"
                        ) if node.level else node.module or ""
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "tfrecorder" and len(parts) > 1 and parts[1] in modules:
                    imported.add(parts[1])
        graph[path.stem] = imported - {path.stem}
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's strongly connected component, as a number (Tarjan's algorithm)."""
    order, low, component, stack = {}, {}, {}, []

    def visit(node):
        order[node] = low[node] = len(order)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in order:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other not in component:
                low[node] = min(low[node], order[other])
        if low[node] == order[node]:
            while True:
                member = stack.pop()
                component[member] = order[node]
                if member == node:
                    break

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return component


def _import_cycles(graph: dict[str, set[str]]) -> set[str]:
    """Every simple cycle of the graph once, as "a -> b -> a" from its least module."""
    component = _strongly_connected(graph)
    cycles = set()

    def walk(path):
        for other in sorted(graph[path[-1]]):
            if other == path[0]:
                cycles.add(" -> ".join(path + [other]))
            elif (other > path[0] and other not in path
                  and component[other] == component[path[0]]):
                walk(path + [other])

    for node in sorted(graph):
        walk([node])
    return cycles


def test_the_import_graph_sees_every_kind_of_import(tmp_path):
    (tmp_path / "a.py").write_text(
        "import os\nimport tfrecorder.b\nfrom tfrecorder import c, VERSION\n"
        "def f():\n    from tfrecorder.d import x\n    from . import e\n    from .a import y\n")
    for name in "bcde":
        (tmp_path / f"{name}.py").write_text("")
    assert _import_graph(tmp_path)["a"] == {"b", "c", "d", "e"}


def test_the_cycle_finder_finds_every_cycle_once():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"a"}, "d": {"a"}}
    assert _import_cycles(graph) == {"a -> b -> a", "a -> b -> c -> a"}


@pytest.mark.slow  # a sweep of cases
def test_no_module_imports_itself_back():
    cycles = _import_cycles(_import_graph(pathlib.Path(tfrecorder.__file__).parent))
    assert not cycles, "import cycles between tfrecorder modules:\n  " + "\n  ".join(
        sorted(cycles))


@pytest.mark.slow  # a sweep of cases
def test_only_the_runner_code_imports_beam():
    # Reading, checking, planning, staging and writing need no Beam: only the job's
    # steps (pipeline) and running them (runners) import it, anywhere in their source.
    package = pathlib.Path(tfrecorder.__file__).parent
    importers = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "apache_beam" or n.startswith("apache_beam.") for n in names):
                importers.add(path.stem)
    assert importers == {"_pipeline", "_runners"}


def test_no_install_line_asks_the_package_index_for_another_projects_tfrecorder():
    # The index's "tfrecorder" is Google's archived TFRecorder: a line that installs
    # "tfrecorder" or "tfrecorder[extra]" by name would give a user that project.
    import importlib.metadata

    from tfrecorder import _runners as runners

    root = pathlib.Path(__file__).resolve().parent.parent
    installed = importlib.metadata.distribution(runners.DISTRIBUTION)
    assert installed.metadata["Name"] == runners.DISTRIBUTION
    assert f'name="{runners.DISTRIBUTION}"' in (root / "setup.py").read_text(encoding="utf-8")
    named = re.compile(r"""pip install\s+(?:-\S+\s+)*["']?tfrecorder(?:\[[^\]]*\])?["']?(?=\s|$|`)""")
    assert named.search('pip install "tfrecorder[torch]"') and named.search("pip install tfrecorder")
    assert not named.search('pip install -e ".[torch]"')
    lines = [f"{path.name}:{i}: {line.strip()}"
             for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if named.search(line)]
    assert lines == []


@pytest.mark.slow
def test_pytest_hides_other_packages_deprecations_and_shows_every_warning_of_ours(tmp_path):
    """pytest.ini's filters, applied by pytest itself to warnings attributed to modules
    (``warn_explicit``'s ``module``, as ``warnings.warn`` attributes them by stacklevel)."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "test_w.py").write_text(
        "import warnings\n\n"
        "def warn(category, module):\n"
        "    warnings.warn_explicit(f'{category.__name__} from {module}', category, 'x.py', 1,\n"
        "                           module=module)\n\n"
        "def test_theirs():\n"
        "    warn(DeprecationWarning, 'tensorflow.python.util')\n"
        "    warn(PendingDeprecationWarning, 'apache_beam.io')\n"
        "    warn(DeprecationWarning, 'multiprocessing.popen_fork')\n\n"
        "def test_ours():\n"
        "    warn(DeprecationWarning, 'tfrecorder._loading')\n"
        "    warn(UserWarning, 'tfrecorder')\n"
        "    warn(DeprecationWarning, 'tests.test_load')\n"
        "    warn(UserWarning, 'keras.src.trainers')  # not a deprecation: shown\n"
        "    warn(ResourceWarning, 'tfrecorder.access')  # hidden by Python, shown here\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-c", os.path.join(root, "pytest.ini"),
                        "--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-q",
                        str(tmp_path / "test_w.py")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "2 passed, 5 warnings" in p.stdout, p.stdout[-3000:]
    for shown in ["DeprecationWarning from tfrecorder._loading", "UserWarning from tfrecorder",
                  "ResourceWarning from tfrecorder.access",
                  "DeprecationWarning from tests.test_load", "UserWarning from keras.src.trainers"]:
        assert shown in p.stdout
    assert "from tensorflow" not in p.stdout and "from apache_beam" not in p.stdout
    assert "multiprocessing" not in p.stdout
