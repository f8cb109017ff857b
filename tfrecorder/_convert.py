"""One conversion, as one story: source -> checks -> plan -> stage -> run -> result.

Every table takes the same way: ``spill.read`` reads, checks and spills it, chunk by
chunk; ``plan.split_plans`` cuts each split into shards from its row count; ``staging.stage``
writes the shard tasks the workers read; a runner (``direct``, ``dataflow``) runs the
Beam pipeline; its last step publishes the output folder (``publishing``). The steps
are ``_writer/launch.py``'s, which the update verb (``_versions/update.py``) shares:
``convert`` creates a folder's first version (or overwrites it), and hands
``mode="update"`` and ``"append"`` to that verb.
"""

from __future__ import annotations

import logging

from tfrecorder._options import Options

log = logging.getLogger(__name__)


def convert(source, output_dir: str = "./tfrecords", schema=None, header="infer", names=None,
            runner: str | None = None, project: str | None = None,
            region: str | None = None, tfrecorder_wheel: str | None = None,
            dataflow_options=None, job_label: str | None = None,
            compression: str | None = None, num_shards=None, *,
            options: Options | None = None, **kwargs):
    """Converts ``source`` to sharded TFRecord files in ``output_dir``.

    ``source`` is a pandas DataFrame, a CSV path (local or ``gs://``), an image
    directory, Vertex AI JSON Lines (a ``.jsonl`` file, a pattern, a list of them, a
    folder of them, or ``tfrecorder.from_vertex()`` in a custom training job) or a COCO
    file (``instances_train.json``, or a dict of one per split). ``schema`` defaults to
    AutoML's ``split, image_uri, label``. ``header`` and ``names`` read a CSV as
    ``pandas.read_csv`` does. The positional order is TFRecorder 2.0's; the other
    options are those of ``tfrecorder.Options``, by keyword, or all of them in one
    ``options=Options(...)`` (then no other option may be given; None means not given).

    ``mode`` says what happens to what ``output_dir`` holds: ``"create"`` (the default)
    refuses a folder with data, ``"overwrite"`` replaces it,
    ``"update"`` compares the table with the latest version (by ``key``) and publishes a
    new version holding only what changed, ``"append"`` only adds rows with a new key
    (docs/versions.md).

    Returns a ConversionResult (a DataflowJob on Dataflow). Raises SchemaError (every
    problem in the table, before anything runs), ConfigError, OutputExistsError
    (OutputBusyError while another conversion writes there), or ConversionError; bad
    images do not raise, their rows are quarantined. Every check runs before anything is
    written or removed, and a run that fails leaves a previous complete output in
    ``output_dir`` as it was.
    """
    # The writer's steps are imported at the first conversion, not with the package:
    # ``import tfrecorder`` stays light for those who only read (docs/performance.md).
    from tfrecorder._folder import survey
    from tfrecorder._versions.update import update
    from tfrecorder._writer import launch

    opts = _options(options, dict(
        runner=runner, project=project, region=region, tfrecorder_wheel=tfrecorder_wheel,
        dataflow_options=dataflow_options, job_label=job_label, compression=compression,
        num_shards=num_shards), kwargs)
    if opts.updates:
        # "update" and "append" are spellings of the update verb, which decides the
        # version it updates with the folder locked.
        return update(source, output_dir, opts, schema, header, names)
    given = launch.check_given(opts, schema, output_dir)
    output_dir = given.output_dir
    # A new conversion reads and checks its table first: a table with problems leaves
    # no folder behind, and a folder that holds data is refused before the lock is
    # taken.
    table = given.read(source, header, names)
    try:
        planned = launch.planned(opts, table)
        survey.check_target(survey.survey(output_dir, planned.declared), opts.overwrite,
                            planned.files)
        # Nothing has been written so far. From here on the directory is this run's.
        with launch.lock(output_dir, opts) as held:
            # With the lock held the directory cannot change under us: look again, as
            # another run may have finished there since the first look.
            before = survey.survey(output_dir, planned.declared)
            notes, counts = list(table.notes), table.annotations
            return launch.noted(launch.create(opts, held, before, table, planned,
                                              given.schema, source, log),
                                notes, counts)
    finally:
        table.remove()


def _options(options, flat: dict, kwargs: dict) -> Options:
    """The run's Options, as the update verb builds them (``update.options_of``)."""
    from tfrecorder._versions.update import options_of

    return options_of(options, flat, kwargs)


def create_tfrecords(input_data, output_dir: str = "./tfrecords", **kwargs):
    """TFRecorder 1.x's name of ``convert``: ``create_tfrecords(input_data=..., output_dir=...)``."""
    return convert(input_data, output_dir, **kwargs)


def convert_and_load(*args, load_options=None, **kwargs):
    """Converts like ``convert`` (same arguments), then returns
    ``load(output_dir, **load_options)``: every split's dataset."""
    from tfrecorder._readers.loading import load

    result = convert(*args, **kwargs)
    return load(result["tfrecord_dir"], **(load_options or {}))
