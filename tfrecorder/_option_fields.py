"""An option's field, documented once, and what is rendered from the fields.

``option()`` gives a dataclass field its help text, its command-line settings (argparse's,
with the flag's own ``help`` in command-line words and its ``metavar``) and its longer
Markdown ``doc``: all that is said of an option is said in its field. From them come the table of the ``Options`` docstring
(``docstring_table``), the table of docs/options.md (``markdown_table``, written by
``python scripts/options_doc.py``), the fields that get a flag (``flag_fields``) and
each flag's help (``flag_help``). A
field whose default is itself a dataclass (``Options.dataflow``) is a group: its
settings follow it, as ``dataflow.project``. Its own module, a leaf: both ``Options``
and ``Dataflow`` declare their fields with it, and the rendering reads any such class.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping


def option(default=dataclasses.MISSING, help: str = "", *, cli: dict | None = None,
           factory=dataclasses.MISSING, doc: str | None = None):
    """A field with its help text; ``cli`` holds argparse settings, None for no flag (its
    ``help``, in command-line words, may say ``{default}``: see ``flag_help``); ``doc`` is
    its longer Markdown for docs/options.md (``markdown_table``), else ``help``."""
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={"help": help, "cli": cli, "doc": doc})


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _mib(value) -> str | None:
    """A default that is a whole number of MiB, in MiB ("256 MiB"), else None."""
    if type(value) is int and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value >> 20} MiB"
    return None


def _markdown_value(value) -> str:
    """A default as the docs write it: Python, with the double quotes of their examples."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)}: {_markdown_value(v)}"
                               for k, v in value.items()) + "}"
    return repr(value)


def markdown_table(cls: type) -> str:
    """The Markdown table of every option (name, default, its ``doc`` or else its
    ``help``), in field order: the table of docs/options.md (scripts/options_doc.py)."""
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for name, f in named_fields(cls):
        value = _default(f)
        default = (f"`{_markdown_value(value)}`" if not dataclasses.is_dataclass(value)
                   else f"`{type(value).__name__}()`")
        if _mib(value):
            default += f" ({_mib(value)})"
        lines.append(f"| `{name}` | {default} | {f.metadata['doc'] or f.metadata['help']} |")
    return "\n".join(lines) + "\n"


def named_fields(cls: type):
    """``(name, field)`` of every option of ``cls`` in field order, the settings of a
    group (a field whose default is a dataclass) after it, as ``dataflow.project``."""
    for f in dataclasses.fields(cls):
        yield f.name, f
        group = f.default_factory
        if dataclasses.is_dataclass(group):
            yield from ((f"{f.name}.{g.name}", g) for g in dataclasses.fields(group))


def flag_fields(cls: type) -> list:
    """The fields with a command-line flag: every option's, a group's by their flat name."""
    return [f for _, f in named_fields(cls) if f.metadata["cli"] is not None]


def flag_help(f: dataclasses.Field) -> str:
    """The help of ``f``'s flag: its ``cli`` help, else its ``help``, with ``{default}``
    replaced by the option's default (so that the text cannot drift from it)."""
    text = f.metadata["cli"].get("help") or f.metadata["help"]
    value = _default(f)
    shown = str(value) + (f", {_mib(value)}" if _mib(value) else "")
    return text.replace("{default}", shown)


def docstring_table(cls: type) -> str:
    """The table of ``cls``'s docstring: every option's name, default and ``help``."""
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for name, f in named_fields(cls):
        default = _default(f)
        shown = f"{type(default).__name__}()" if dataclasses.is_dataclass(default) else repr(default)
        lines.append(f"| ``{name}`` | ``{shown}`` | {f.metadata['help']} |")
    return "\n".join(lines)
