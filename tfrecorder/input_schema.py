"""TFRecorder's module name for schemas: ``tfrecorder.input_schema.Schema({...})``.

``Schema`` has TFRecorder's attributes (``split_key``, ``image_uri_key``, ``label_key``,
``input_schema_map``, ``get_input_keys()``) besides its own.
"""

from tfrecorder import types
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA, SEGMENTATION_CSV_SCHEMA, Schema

#: TFRecorder's names for the default AutoML image classification schema and its map.
image_csv_schema = IMAGE_CSV_SCHEMA
image_csv_schema_map = {"split": types.SplitKey, "image_uri": types.ImageUri,
                        "label": types.StringLabel}
#: TFRecorder's type alias of a schema map.
SchemaMapType = dict

__all__ = ["IMAGE_CSV_SCHEMA", "SEGMENTATION_CSV_SCHEMA", "Schema", "SchemaMapType", "image_csv_schema",
           "image_csv_schema_map"]
