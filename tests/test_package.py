import ast
import dataclasses
import functools
import pathlib
import re
import shutil
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
        "steps = sorted(m for m in sys.modules if m in ('tfrecorder._writer.launch', "
        "'tfrecorder._versions.update', 'tfrecorder._inputs.spill'))\n"
        "assert not steps, steps\n"  # the writer's steps come with the first conversion
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


def test_access_lists_every_name_the_docs_use_of_it():
    # tfrecorder.access is public under its own name: its __all__ is what the docs use
    # of it (tfrecorder.access.Reader, access.part, from tfrecorder.access import ...).
    from tfrecorder import access

    docs = _documentation()
    used = set(re.findall(r"\baccess\.([A-Za-z]\w*)", docs)) - {"py", "md"}
    for names in re.findall(r"from tfrecorder\.access import \(?([\w, ]+)", docs):
        used |= {n.strip() for n in names.split(",") if n.strip()}
    assert "Reader" in used and "shard_order" in used
    assert access.__all__ == sorted(access.__all__)
    assert set(access.__all__) == used, (used - set(access.__all__), set(access.__all__) - used)
    for name in access.__all__:
        assert getattr(access, name).__module__ == "tfrecorder.access", name


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
    assert params(tfrecorder.load)[-1] == "version"
    assert params(tfrecorder.read)[-3:] == ["version", "cache_dir", "cache_limit"]
    for fn in (tfrecorder.load, tfrecorder.inspect, tfrecorder.verify, tfrecorder.info):
        assert not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
        assert fn.__doc__ and fn.__module__.startswith("tfrecorder."), fn


#: Everything that reads or acts on a folder a conversion wrote: it comes first, and is
#: called ``tfrecord_dir`` (TFRecorder's name in ``load``); ``output_dir`` is only ever
#: where a call writes (``convert``'s folder, ``inspect``'s images).
FOLDER_READERS = ["load", "info", "verify", "inspect", "check_tfrecords", "read", "report",
                  "versions", "compact", "vacuum", "build_index", "open", "export"]


@pytest.mark.slow  # imports torch and grain
def test_the_folder_a_conversion_wrote_has_one_name_everywhere():
    import inspect
    import tfrecorder.access
    import tfrecorder.grain
    import tfrecorder.torch

    readers = [getattr(tfrecorder, n) for n in FOLDER_READERS] + [
        tfrecorder.access.Reader, tfrecorder.torch.Dataset, tfrecorder.grain.DataSource]
    for fn in readers:
        assert next(iter(inspect.signature(fn).parameters)) == "tfrecord_dir", fn
    for fn in (tfrecorder.convert, tfrecorder.create_tfrecords, tfrecorder.inspect):
        assert "output_dir" in inspect.signature(fn).parameters, fn


@pytest.mark.parametrize("name", ["read", "report", "versions", "compact", "vacuum",
                                  "build_index", "open"])
def test_the_folders_old_keyword_still_works_and_says_so(tmp_path, name):
    # Each of these took the folder as output_dir= (open: path=) before; a call by the
    # old keyword reaches the same function, warned from the caller's own line.
    old = "path" if name == "open" else "output_dir"
    more = {"keep": 1} if name == "vacuum" else {}
    with pytest.warns(DeprecationWarning, match=f"{name}\\({old}=...\\) is now spelt "
                      f"{name}\\(tfrecord_dir=...\\)") as caught, \
            pytest.raises(tfrecorder.TFRecorderError):
        getattr(tfrecorder, name)(**{old: str(tmp_path / "none")}, **more)
    assert caught[0].filename == __file__
    with pytest.raises(tfrecorder.ConfigError, match="give tfrecord_dir= only"):
        getattr(tfrecorder, name)(**{old: "a", "tfrecord_dir": "b"}, **more)


def test_options_document_every_field_once_and_the_cli_offers_each():
    import dataclasses

    from tfrecorder import _cli_parser

    doc = tfrecorder.Options.__doc__
    convert = _cli_parser.build_parser()._subparsers._group_actions[0].choices["convert"]
    flags = {o for a in convert._actions for o in a.option_strings}
    for f in dataclasses.fields(tfrecorder.Options):
        assert f.metadata["help"] and f"``{f.name}``" in doc, f.name
        if f.metadata["cli"] is not None and f.name not in ("progress", "write_index", "mode"):
            assert {f"--{f.name.replace('_', '-')}", f"--{f.name}"} <= flags, f.name
    assert {"--no-progress", "--no-index", "--update", "--append"} <= flags


def test_an_options_words_live_in_its_field_only():
    """A flag's help and metavar are its field's (``option(cli={"help": ...})``): the
    parser says nothing of an option itself, so its words cannot drift apart."""
    from tfrecorder import _cli_parser, _option_fields

    convert = _cli_parser.build_parser()._subparsers._group_actions[0].choices["convert"]
    actions = {a.option_strings[0]: a for a in convert._actions if a.option_strings}
    texts = []
    for f in _option_fields.flag_fields(tfrecorder.Options):
        cli = f.metadata["cli"]
        flag = (cli.get("flags") or [f"--{f.name.replace('_', '-')}"])[0]
        said = cli.get("help") or f.metadata["help"]
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        shown = str(default) + (f", {default >> 20} MiB" if f.name == "max_image_bytes" else "")
        assert actions[flag].help == said.replace("{default}", shown), f.name
        assert actions[flag].metavar == cli.get("metavar"), f.name
        texts.append(said)
    source = pathlib.Path(_cli_parser.__file__).read_text(encoding="utf-8")
    literals = [n.value for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    for text in texts:  # no part of an option's help is written again in the parser
        words = text.split("{default}")[0][:40]
        assert not any(words in literal for literal in literals), words


#: Import cycles between the package's modules that are there on purpose, each with why
#: (an import kept inside a function to save start-up time is not a cycle by itself; only
#: a loop back to where it started is). Written as ``_import_cycles`` writes them.
DELIBERATE_CYCLES: dict[str, str] = {}


@functools.cache
def _parsed(source: str) -> ast.Module:
    """``source``'s syntax tree, parsed once for every test that reads the package."""
    return ast.parse(source)


@dataclasses.dataclass
class _Imports:
    """The tfrecorder imports of a package's source, as ``ast`` reads them.

    Modules are named by their path in the package, dotted, without ``.py``:
    ``__init__`` (the package's own), ``_convert``, ``wing.__init__``, ``wing.plan``.
    ``edges[a][b]`` is True where every import of ``b`` by ``a`` is inside a function
    (lazy), False where one runs when ``a`` is imported. ``taken`` lists, per module, the
    names it imports from the package's ``__init__`` (``from tfrecorder import X``, X
    not a module)."""

    edges: dict[str, dict[str, bool]]
    taken: dict[str, set[str]]


def _import_graph(package: pathlib.Path, name: str = "tfrecorder") -> _Imports:
    """Every import of ``name`` (the package in folder ``package``) by its modules, at
    module level and inside functions, absolute and relative; importing a module of a
    subpackage also imports that subpackage's ``__init__``."""
    modules = {".".join(p.relative_to(package).with_suffix("").parts)
               for p in package.rglob("*.py")}

    def module(dotted: str) -> str | None:  # "wing._plan" or "wing" -> its module
        for candidate in (dotted, f"{dotted}.__init__" if dotted else "__init__"):
            if candidate in modules:
                return candidate
        return None

    edges = {m: {} for m in modules}
    taken = {m: set() for m in modules}
    for importer in sorted(modules):
        here = importer.split(".")[:-1]  # the importer's (sub)package, as parts

        def add(target: str, lazy: bool) -> None:
            parts = target.split(".")
            # The subpackages on the way, but those the importer is in, run first.
            for k in range(1, len(parts)):
                init = module(".".join(parts[:k]))
                if init is not None and parts[:k] != here[:k]:
                    edges[importer][init] = edges[importer].get(init, True) and lazy
            if target != importer:
                edges[importer][target] = edges[importer].get(target, True) and lazy

        def visit(node: ast.AST, lazy: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.Lambda))
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        parts = alias.name.split(".")
                        if parts[0] == name:
                            target = module(".".join(parts[1:]))
                            if target is not None:
                                add(target, inner)
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = here[:len(here) - (child.level - 1)] if child.level > 1 else here
                        base = [*base, *(child.module or "").split(".")] if child.module else base
                    elif (child.module or "").split(".")[0] == name:
                        base = child.module.split(".")[1:]
                    else:
                        continue
                    source = module(".".join(base))
                    for alias in child.names:
                        target = module(".".join([*base, alias.name]))
                        if target is None and source is not None:
                            target = source  # a name from a module or a package's __init__
                            if source == "__init__":
                                taken[importer].add(alias.name)
                        if target is not None:
                            add(target, inner)
                visit(child, inner)

        visit(_parsed((package / f"{importer.replace('.', '/')}.py").read_text(
            encoding="utf-8")), False)
    return _Imports(edges, {m: names for m, names in taken.items() if names})


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


def _import_cycles(graph: dict[str, dict[str, bool]]) -> set[str]:
    """Every simple cycle of the graph once, from its least module: "a -> b ..> a", where
    ``..>`` is a lazy import (inside a function) and ``->`` one at module level."""
    component = _strongly_connected(graph)
    cycles = set()

    def walk(path, text):
        for other in sorted(graph[path[-1]]):
            step = f"{text} {'..>' if graph[path[-1]][other] else '->'} {other}"
            if other == path[0]:
                cycles.add(step)
            elif (other > path[0] and other not in path
                  and component[other] == component[path[0]]):
                walk(path + [other], step)

    for node in sorted(graph):
        walk([node], node)
    return cycles


def test_the_import_graph_sees_every_kind_of_import(tmp_path):
    (tmp_path / "a.py").write_text(
        "import os\nimport tfrecorder.b\nfrom tfrecorder import c, VERSION\n"
        "def f():\n    from tfrecorder.d import x\n    from . import e\n    from .a import y\n"
        "    import tfrecorder.wing.g\n")
    for name in ["b", "c", "d", "e", "__init__", "wing/__init__", "wing/g", "wing/h"]:
        (tmp_path / f"{name}.py").parent.mkdir(exist_ok=True)
        (tmp_path / f"{name}.py").write_text("")
    (tmp_path / "wing" / "g.py").write_text("from .. import b\nfrom . import h, NAME\n")
    imports = _import_graph(tmp_path)
    assert imports.edges["a"] == {"b": False, "c": False, "__init__": False, "d": True,
                                  "e": True, "wing.__init__": True, "wing.g": True}
    assert imports.edges["wing.g"] == {"b": False, "wing.h": False, "wing.__init__": False}
    assert imports.taken == {"a": {"VERSION"}}


def test_the_cycle_finder_finds_every_cycle_once():
    graph = {"a": {"b": False}, "b": {"a": True, "c": False}, "c": {"a": False},
             "d": {"a": False}}
    assert _import_cycles(graph) == {"a -> b ..> a", "a -> b -> c -> a"}


def _package() -> pathlib.Path:
    return pathlib.Path(tfrecorder.__file__).parent


@pytest.mark.slow
def test_no_module_imports_a_name_from_the_packages_init():
    # The package's __init__ imports nearly every module: a module that takes a name
    # from it (rather than from the module that defines it) loops back to it.
    taken = _import_graph(_package()).taken
    assert not taken, f"names imported from tfrecorder/__init__.py: {taken}; import them " \
                      f"from the module that defines them (__version__: tfrecorder._version)"


def test_no_module_imports_itself_back_even_lazily():
    cycles = _import_cycles(_import_graph(_package()).edges)
    new = cycles - set(DELIBERATE_CYCLES)
    assert not new, ("import cycles between tfrecorder modules (..> an import inside a "
                     "function):\n  " + "\n  ".join(sorted(new)))
    assert set(DELIBERATE_CYCLES) <= cycles, "DELIBERATE_CYCLES lists a cycle that is gone"


#: The floor each wing stands on (a module's wing: the first part of its dotted name),
#: from the bottom; docs/design.md says why. A wing imports only its own floor and those
#: below, lazily too. The public readers (access, torch, grain) are the readers' floor.
FLOORS: dict[str, int] = {
    "_errors": 0, "_version": 0, "_deprecation": 0, "_extras": 0, "_storage": 0, "types": 0,
    "_folder": 1,
    "_report": 2,
    "_inputs": 3, "input_schema": 3,
    "_writer": 4,
    "_readers": 5, "access": 5, "torch": 5, "grain": 5,
    "_versions": 6, "_export": 6, "_options": 6, "_option_fields": 6, "_dataflow_settings": 6,
    "__init__": 7, "__main__": 7, "_convert": 7, "_cli": 7, "_cli_parser": 7, "_accessor": 7,
}

#: Imports of a wing above the importer's that stay, each with why. Written as
#: ``_look_ups`` writes them (``..>`` an import inside a function). None stays today:
#: what two wings shared has moved down a floor (docs/design.md, "Wings are floors").
DELIBERATE_LOOK_UPS: dict[str, str] = {
}


def _look_ups(graph: dict[str, dict[str, bool]]) -> set[str]:
    """Every import of a module on a higher floor than its importer's, "a -> b" or
    "a ..> b" (lazy); a wing's ``__init__`` is left out where a module of that wing is
    imported with it."""
    wing = lambda module: module.split(".")[0]  # noqa: E731
    unplaced = sorted({wing(m) for m in graph} - set(FLOORS))
    assert not unplaced, f"wings without a floor in FLOORS: {unplaced}"
    found = set()
    for importer, targets in graph.items():
        for target, lazy in targets.items():
            if FLOORS[wing(target)] <= FLOORS[wing(importer)]:
                continue
            if target.endswith(".__init__") and any(
                    t != target and wing(t) == wing(target) for t in targets):
                continue
            found.add(f"{importer} {'..>' if lazy else '->'} {target}")
    return found


def test_the_floor_finder_sees_a_lazy_look_up_and_the_wing_it_goes_to():
    graph = {"_writer.shard": {"_folder.layout": False, "_readers.__init__": True,
                               "_readers.cache": True},
             "_folder.layout": {"_inputs.__init__": False}, "_readers.cache": {},
             "_readers.__init__": {}, "_inputs.__init__": {}}
    assert _look_ups(graph) == {"_writer.shard ..> _readers.cache",
                                "_folder.layout -> _inputs.__init__"}
    with pytest.raises(AssertionError, match="_elsewhere"):
        _look_ups({"_elsewhere.parquet": {}})


def test_no_wing_imports_a_wing_above_it_even_lazily():
    look_ups = _look_ups(_import_graph(_package()).edges)
    new = look_ups - set(DELIBERATE_LOOK_UPS)
    assert not new, ("imports of a wing on a higher floor (..> an import inside a "
                     "function); move what both need down a floor:\n  "
                     + "\n  ".join(sorted(new)))
    gone = set(DELIBERATE_LOOK_UPS) - look_ups
    assert not gone, f"DELIBERATE_LOOK_UPS lists imports that are gone: {sorted(gone)}"


def _package_with(tmp_path, module: str, code: str):
    """A copy of the package in ``tmp_path`` with ``code`` added at the end of ``module``
    (a path inside the package)."""
    copy = tmp_path / "tfrecorder"
    shutil.copytree(_package(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / module, "a", encoding="utf-8") as f:
        f.write("\n\n" + code)
    return copy


def test_the_floor_check_catches_a_lazy_look_up_added_to_the_package(tmp_path):
    # The package as it is, but for one function-level import of the writer by the
    # format: the kind of look-up the floors' test keeps out.
    copy = _package_with(tmp_path, "_folder/legacy.py",
                         "def _prepare(data):\n    from tfrecorder._writer.image import prepare\n"
                         "    return prepare(data)\n")
    new = _look_ups(_import_graph(copy).edges) - set(DELIBERATE_LOOK_UPS)
    assert new == {"_folder.legacy ..> _writer.image"}


def test_the_cycle_checks_catch_a_lazy_import_from_the_packages_init(tmp_path):
    # The package as it is, but for one function-level import of __version__ from the
    # package's __init__ in the runners: the loop the release before closed.
    copy = _package_with(tmp_path, "_writer/runners.py",
                         "def _version():\n    from tfrecorder import __version__\n"
                         "    return __version__\n")
    imports = _import_graph(copy)
    assert imports.taken == {"_writer.runners": {"__version__"}}
    cycles = _import_cycles(imports.edges) - set(DELIBERATE_CYCLES)
    assert {"__init__ -> _convert ..> _writer.launch -> _writer.runners ..> __init__",
            "__init__ -> _convert -> _options ..> _writer.runners ..> __init__"
            } <= cycles


@pytest.mark.slow
def test_the_version_is_one_value(tmp_path):
    from tfrecorder import _version
    from tfrecorder._writer import wheel

    root = _package().parent
    said = subprocess.run([sys.executable, "setup.py", "--version"], cwd=root,
                          capture_output=True, text=True, check=True).stdout.split()[-1]
    assert tfrecorder.__version__ == _version.__version__ == said
    assert pathlib.Path(wheel.build_wheel(str(tmp_path))).name == (
        f"{wheel.DISTRIBUTION.replace('-', '_')}-{said}-py3-none-any.whl")


@pytest.mark.slow  # a sweep of cases
def test_only_the_runner_code_imports_beam():
    # Reading, checking, planning, staging and writing need no Beam: only the job's
    # steps (pipeline) and running them (runners and the runners' modules) import it,
    # anywhere in their source.
    package = pathlib.Path(tfrecorder.__file__).parent
    importers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(_parsed(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "apache_beam" or n.startswith("apache_beam.") for n in names):
                importers.add(".".join(path.relative_to(package).with_suffix("").parts))
    assert importers == {"_writer.pipeline", "_writer.runners", "_writer.cluster",
                         "_writer.direct", "_writer.dataflow", "_writer.sampler"}


def _uses_of(package: pathlib.Path, module: str, function: str,
             name: str = "tfrecorder") -> set[tuple[str, str]]:
    """``(module, enclosing function)`` of every use of ``module.function`` (both dotted
    from the package ``name`` in folder ``package``: ``_writer.publishing``, ``finish``)
    in the package's source, called or passed on: as an attribute of the module under
    any name it is imported by (absolute or relative), as the whole dotted path, or as a
    name imported from the module. ``<module>`` where it is used outside a function."""
    parent, _, leaf = f"{name}.{module}".rpartition(".")
    found = set()
    for path in package.rglob("*.py"):
        text = path.read_text()
        if function not in text:  # every spelling of a use names it, an import's too
            continue
        here = path.relative_to(package).with_suffix("").parts
        tree = _parsed(text)
        modules, functions = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {a.asname for a in node.names
                            if a.asname and a.name == f"{parent}.{leaf}"}
            elif isinstance(node, ast.ImportFrom):
                base = (name, *here[:-1])[:len(here) + 1 - node.level] if node.level else ()
                source = ".".join((*base, *([node.module] if node.module else [])))
                modules |= {a.asname or a.name for a in node.names
                            if source == parent and a.name == leaf}
                functions |= {a.asname or a.name for a in node.names
                              if source == f"{parent}.{leaf}" and a.name == function}

        def visit(node: ast.AST, where: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(child, child.name)
                    continue
                used = (isinstance(child, ast.Name) and child.id in functions
                        or isinstance(child, ast.Attribute) and child.attr == function and (
                            ast.unparse(child.value) in {*modules, f"{parent}.{leaf}"}))
                if used:
                    found.add((".".join(here), where))
                visit(child, where)

        visit(tree, "<module>")
    return found


def test_the_use_finder_sees_every_spelling_of_a_functions_use(tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "pub.py").write_text("def finish():\n    pass\n")
    (tmp_path / "w" / "a.py").write_text(
        "from . import pub\nfrom .pub import finish as done\n"
        "def f():\n    pub.finish()\n"
        "def g():\n    return map(done, [])\n"
        "def h():\n    import tfrecorder.w.pub\n    tfrecorder.w.pub.finish()\n"
        "def finish():\n    return 1\n"
        "def own():\n    finish()\n")
    (tmp_path / "b.py").write_text(
        "import tfrecorder.w.pub as p\nfrom tfrecorder.w import pub as q\n"
        "class K:\n    def m(self):\n        p.finish()\n"
        "RUN = q.finish\n")
    assert _uses_of(tmp_path, "w.pub", "finish") == {
        ("w.a", "f"), ("w.a", "g"), ("w.a", "h"), ("b", "m"), ("b", "<module>")}


def test_every_run_is_published_from_its_last_step_only():
    # One way to finish a run: every run's last step (``steps.finish``, which the Beam
    # pipeline and a run in this process both end with) publishes it, and ``launch``
    # stops a run over its error budget before it starts through the same function.
    # No verb publishes a version by itself, an update that only retires records
    # included.
    assert _uses_of(_package(), "_writer.publishing", "finish") == {
        ("_writer.steps", "finish"), ("_writer.launch", "stop_over_budget")}


def test_no_install_line_asks_the_package_index_for_another_projects_tfrecorder():
    # The index's "tfrecorder" is Google's archived TFRecorder: a line that installs
    # "tfrecorder" or "tfrecorder[extra]" by name would give a user that project.
    import importlib.metadata

    from tfrecorder._writer import wheel

    root = pathlib.Path(__file__).resolve().parent.parent
    installed = importlib.metadata.distribution(wheel.DISTRIBUTION)
    assert installed.metadata["Name"] == wheel.DISTRIBUTION
    assert f'name="{wheel.DISTRIBUTION}"' in (root / "setup.py").read_text(encoding="utf-8")
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
        "    warn(DeprecationWarning, 'tfrecorder._readers.loading')\n"
        "    warn(UserWarning, 'tfrecorder')\n"
        "    warn(DeprecationWarning, 'tests.test_load')\n"
        "    warn(UserWarning, 'keras.src.trainers')  # not a deprecation: shown\n"
        "    warn(ResourceWarning, 'tfrecorder.access')  # hidden by Python, shown here\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-c", os.path.join(root, "pytest.ini"),
                        "--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-q",
                        str(tmp_path / "test_w.py")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "2 passed, 5 warnings" in p.stdout, p.stdout[-3000:]
    for shown in ["DeprecationWarning from tfrecorder._readers.loading", "UserWarning from tfrecorder",
                  "ResourceWarning from tfrecorder.access",
                  "DeprecationWarning from tests.test_load", "UserWarning from keras.src.trainers"]:
        assert shown in p.stdout
    assert "from tensorflow" not in p.stdout and "from apache_beam" not in p.stdout
    assert "multiprocessing" not in p.stdout


#: Modules that number files of their own, not the output folder's, with why: they may
#: write five-digit numbers without layout.py.
OWN_NUMBERED_FILES = {
    "_export/exporting.py": "an export's Parquet files (data/train-00000-of-00002.parquet)",
    "_export/webdataset.py": "an export's tar files and sample keys (train-00000.tar)",
    "_readers/inspection.py": "the image files inspect writes for a person (00000_cat.jpg)",
}


#: What a module that spells a name of the folder holds somewhere (others are not parsed).
_MAY_SPELL = re.compile(r'05d|\\d\{5\}|ledger\.json|\.idx|"index')


def _spelt_names(source: str) -> list[str]:
    """The on-disk names ``source`` spells itself: a five-digit number format
    (``f"{k:05d}"``) or pattern (``\\d{5}``), the ledger's or an index file's name, or
    the index folder as a path (joined, a member of a set, assigned)."""
    tree = _parsed(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        value, parent = node.value, parents.get(node)
        as_path = (isinstance(parent, (ast.Set, ast.Assign))
                   or isinstance(parent, ast.Call) and getattr(parent.func, "attr", None) == "join")
        if (value == "05d" or r"\d{5}" in value or value in ("ledger.json", ".idx")
                or value.startswith("index/") or (value == "index" and as_path)):
            found.append(f"line {node.lineno}: {value!r}")
    return found


def test_the_folders_names_are_spelt_in_layout_only():
    """File and folder names and their number formats are layout.py's: a module that
    spells one itself could drift from what the readers parse."""
    package = _package()
    spelt = {}
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        if module != "_folder/layout.py" and module not in OWN_NUMBERED_FILES:
            text = path.read_text(encoding="utf-8")
            found = _spelt_names(text) if _MAY_SPELL.search(text) else []
            if found:
                spelt[module] = found
    assert spelt == {}


def test_the_spelling_search_finds_each_kind_of_name():
    source = ('import os\nA = "index"\nB = f"{k:05d}"\nC = re.compile(r"x-\\d{5}")\n'
              'D = os.path.join(out, "index")\nE = "ledger.json"\nF = {"index", "x"}\n'
              'G = cli.add_parser("index")\nH = m.get("index")\n')
    assert sorted(f.split(":")[0] for f in _spelt_names(source)) == [
        "line 2", "line 3", "line 4", "line 5", "line 6", "line 7"]


def test_each_test_file_is_named_after_a_module_or_says_what_it_tests():
    # tests/ as a map: test_X.py tests tfrecorder's module or wing X, or its docstring
    # says which behaviour, across modules, it tests (docs/design.md, "The test suite").
    modules = {p.stem for p in _package().rglob("*.py")} | {
        p.name.lstrip("_") for p in _package().iterdir() if p.is_dir()}
    modules |= {m.lstrip("_") for m in modules} | {"package"}
    unmapped = []
    for path in sorted(pathlib.Path(__file__).parent.glob("test_*.py")):
        named = path.stem[len("test_"):]
        if named in modules:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if not doc:
            unmapped.append(path.name)
    assert not unmapped, (f"test files named after no module and saying nothing of what "
                          f"they test: {unmapped}; name one after its module, or give it a "
                          f"docstring")
