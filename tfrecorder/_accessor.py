"""The ``df.tensorflow`` accessor, registered when ``tfrecorder`` is imported.

pandas builds a new accessor object on every ``df.tensorflow`` access, so it holds
nothing but the frame and does no work until a method is called.
"""

from __future__ import annotations

import pandas as pd


@pd.api.extensions.register_dataframe_accessor("tensorflow")
class TensorFlowAccessor:
    """``df.tensorflow.to_tfrecord(output_dir, **options)``; see ``tfrecorder.convert``."""

    def __init__(self, frame: pd.DataFrame):
        self._frame = frame

    def to_tfrecord(self, output_dir: str = "./tfrecords", *, schema=None, **options):
        """Converts this DataFrame to TFRecord files; returns a ConversionResult. The
        options are ``convert``'s: keywords (``mode="update"``), or ``options=Options(...)``."""
        from tfrecorder._convert import convert

        return convert(self._frame, output_dir, schema=schema, **options)

    def to_tfr(self, output_dir: str, schema=None, runner: str | None = None,
               project=None, region=None, tfrecorder_wheel=None, dataflow_options=None,
               job_label=None, compression=None, num_shards=None, **options):
        """TFRecorder's spelling of ``to_tfrecord``, with its positional order.

        The defaults are tfrecorder's (the DirectRunner, no compression; None is not
        given); every other option of ``to_tfrecord``, ``options=`` too, is accepted by
        keyword.
        """
        return self.to_tfrecord(
            output_dir, schema=schema, runner=runner, project=project, region=region,
            tfrecorder_wheel=tfrecorder_wheel, dataflow_options=dataflow_options,
            job_label=job_label, compression=compression, num_shards=num_shards, **options)
