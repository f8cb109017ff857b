"""tfrecorder: image and tabular datasets to sharded TFRecord files, and back.

    import tfrecorder
    result = df.tensorflow.to_tfrecord("out/")          # or tfrecorder.convert(...)
    train = tfrecorder.load("out/", split="train", batch_size=64, image_size=(224, 224))
    table = tfrecorder.read("out/")                     # back to a DataFrame
    folder = tfrecorder.open("out/")                    # the folder at one version

Importing this package registers the ``df.tensorflow`` accessor; TensorFlow and Beam
are imported only when a conversion or a load needs them.

The public API is what ``__all__`` lists and the modules whose names have no leading
underscore: ``input_schema`` and ``types`` (TFRecorder's names), ``access``, ``torch`` and
``grain`` (readers for other frameworks). The ``_``-named modules are internal and may
change in any release.
"""

from __future__ import annotations

try:
    import pandas as _pandas  # noqa: F401
except ImportError:  # a Beam worker: the shipped wheel comes without pandas (wheel.build_wheel)
    pass
else:
    from tfrecorder import _accessor  # noqa: F401  (registers df.tensorflow)
from tfrecorder import input_schema, types
from tfrecorder._convert import convert, convert_and_load, create_tfrecords
from tfrecorder._versions.folder import Folder, open
from tfrecorder._export.exporting import export
from tfrecorder._errors import (
    ConfigError,
    ConversionError,
    CorruptRecordError,
    IncompleteOutputError,
    OutputBusyError,
    OutputChangedError,
    OutputExistsError,
    Problem,
    SchemaError,
    TFRecorderError,
)
from tfrecorder._readers.inspection import Inspection, Verification, check_tfrecords, inspect, verify
from tfrecorder._folder.layout import FeatureSpec
from tfrecorder._readers.loading import Datasets, info, load
from tfrecorder._folder.manifest import Manifest, ShardInfo, SplitInfo
from tfrecorder._options import Dataflow, Options
from tfrecorder._versions.indexing import build_index
from tfrecorder._versions.vacuum import vacuum
from tfrecorder._versions.compact import compact
from tfrecorder._readers.preview import Preview, show
from tfrecorder._readers.read import read
from tfrecorder._report.findings import Report, report
from tfrecorder._writer.result import ConversionResult, DataflowJob
from tfrecorder._inputs.sources import create_image_csv
from tfrecorder._version import __version__
from tfrecorder._versions.versions import versions
from tfrecorder._inputs.vertex import from_vertex

__all__ = [
    "ConfigError",
    "ConversionError",
    "ConversionResult",
    "CorruptRecordError",
    "Dataflow",
    "DataflowJob",
    "Datasets",
    "FeatureSpec",
    "Folder",
    "IncompleteOutputError",
    "Inspection",
    "Manifest",
    "Options",
    "OutputBusyError",
    "OutputChangedError",
    "OutputExistsError",
    "Preview",
    "Problem",
    "Report",
    "SchemaError",
    "ShardInfo",
    "SplitInfo",
    "TFRecorderError",
    "Verification",
    "build_index",
    "check_tfrecords",
    "compact",
    "convert",
    "convert_and_load",
    "create_image_csv",
    "create_tfrecords",
    "export",
    "from_vertex",
    "info",
    "input_schema",
    "inspect",
    "load",
    "open",
    "read",
    "report",
    "show",
    "types",
    "vacuum",
    "verify",
    "versions",
]

# The exceptions are public under this package's name, wherever they are defined: a
# traceback says ``tfrecorder.ConversionError``, not the internal module's path.
for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type) and issubclass(_value, Exception):
        _value.__module__ = __name__
del _name, _value
