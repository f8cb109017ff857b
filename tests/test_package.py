import subprocess
import sys

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


#: The public names; a change here is a change of the public API.
PUBLIC = [
    "ConfigError", "ConversionError", "ConversionResult", "CorruptRecordError", "DataflowJob",
    "Datasets", "IncompleteOutputError", "Inspection", "Manifest", "Options",
    "OutputBusyError", "OutputChangedError", "OutputExistsError", "Problem", "SchemaError", "TFRecorderError", "Verification",
    "build_index", "check_tfrecords", "convert", "convert_and_load", "create_image_csv",
    "create_tfrecords",
    "info", "input_schema", "inspect",
    "load", "types", "verify",
]


def test_the_public_names_are_pinned():
    assert tfrecorder.__all__ == PUBLIC


def test_public_functions_show_their_real_parameters():
    import inspect

    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(tfrecorder.load)[:4] == ["tfrecord_dir", "split", "batch_size", "image_size"]
    assert "as_supervised" in params(tfrecorder.load)
    assert params(tfrecorder.inspect) == ["tfrecord_dir", "split", "num_records", "output_dir"]
    assert params(tfrecorder.verify) == ["tfrecord_dir"]
    assert params(tfrecorder.info) == ["tfrecord_dir"]
    for fn in (tfrecorder.load, tfrecorder.inspect, tfrecorder.verify, tfrecorder.info):
        assert not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
        assert fn.__doc__ and fn.__module__.startswith("tfrecorder."), fn


def test_options_document_every_field_once_and_the_cli_offers_each():
    import dataclasses

    from tfrecorder import cli

    doc = tfrecorder.Options.__doc__
    convert = cli.build_parser()._subparsers._group_actions[0].choices["convert"]
    flags = {o for a in convert._actions for o in a.option_strings}
    for f in dataclasses.fields(tfrecorder.Options):
        assert f.metadata["help"] and f"``{f.name}``" in doc, f.name
        if f.metadata["cli"] is not None and f.name not in ("progress", "write_index"):
            assert {f"--{f.name.replace('_', '-')}", f"--{f.name}"} <= flags, f.name
    assert {"--no-progress", "--no-index"} <= flags
