"""Writes docs/options.md from ``tfrecorder.Options``: the prose below around the table
that ``tfrecorder._option_fields.markdown_table`` renders from the fields' help.

    python scripts/options_doc.py            # rewrite docs/options.md
    python scripts/options_doc.py --check    # exit 1 when docs/options.md is stale

To change what an option's row says, edit the field's ``doc`` (or ``help``) in
tfrecorder/_options.py (``Dataflow``'s in tfrecorder/_dataflow_settings.py), then run
this; tests/test_docs.py fails while the file differs.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "docs", "options.md")
COMMAND = "python scripts/options_doc.py"

HEADER = f"""\
# Options

<!-- Written by `{COMMAND}` from tfrecorder/_options.py: edit the fields there. -->

`tfrecorder.convert(source, output_dir, schema=None, header="infer", names=None, **options)`,
`df.tensorflow.to_tfrecord(output_dir, schema=None, **options)` and TFRecorder's
`df.tensorflow.to_tfr(output_dir, schema=None, runner="DirectRunner", **options)` accept
the same options, checked before anything runs (`tfrecorder.Options` holds them). An
unknown or misspelt name is a `ConfigError` with a suggestion. They are given by keyword,
or all at once as `options=tfrecorder.Options(...)`, as TFDS's `download_and_prepare`
takes a `DownloadConfig`; an option given by keyword beside `options=` is a
`ConfigError` (change one with `dataclasses.replace(options, num_shards=8)`). An option
that means something only beside another (a `dataflow` setting and
`runner="DataflowRunner"`, `near_distance` and `near_duplicates`, `jpeg_quality` and
`shorter_side`, `compare` and `mode="update"` or `"append"`) is a `ConfigError` without
it, naming the option it needs.

"""

FOOTER = """
## Schemas

`schema=` maps column names to column types from `tfrecorder.types`; the default is
AutoML's `{"split": SplitKey, "image_uri": ImageUri, "label": Label}`. TFRecorder's
spelling works:

```python
from tfrecorder import input_schema, types
schema = input_schema.Schema({"split": types.SplitKey, "image_uri": types.ImageUri,
                              "label": types.StringLabel})
```

| type | writes |
|---|---|
| `SplitKey` | nothing; picks the split |
| `ImageUri` | `image` and the `image_*` features |
| `Label` | int64 id: whole numbers pass through, anything else through the sorted vocabulary |
| `StringLabel` | int64 id in the sorted vocabulary, always |
| `IntegerLabel` | int64, the value itself (must be a non-negative whole number) |
| `IntegerInput`, `FloatInput`, `StringInput` | int64, float, bytes |
| `CategoricalInput` | int64 id in the sorted vocabulary of the column, written to `<column>.labels.txt` |

A schema has at most one `ImageUri`, one `SplitKey` and one label column; without a
`SplitKey` every row is train.
"""


def render() -> str:
    """The text docs/options.md should hold."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tfrecorder import _option_fields
    from tfrecorder._options import Options

    return HEADER + _option_fields.markdown_table(Options) + FOOTER


def main(argv: list[str]) -> int:
    text = render()
    with open(PATH, encoding="utf-8") as f:
        current = f.read()
    if "--check" in argv:
        if current != text:
            print(f"docs/options.md is stale; run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        with open(PATH, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
