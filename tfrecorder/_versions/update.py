"""The update verb: a folder's latest version updated by an edited table.

``tfrecorder.convert(table, out, mode="update")`` (or ``"append"``) and
``tfrecorder.open(out).update(table)`` are two spellings of this one verb. With the
folder locked, it picks the version it updates once (the parent), reads the table
against that version's label ids and splits, decides what is kept, added and retired
(``updating.plan``), writes the added rows through the writer and publishes the new
version as every run does (``launch.execute``). A folder with no version yet is given
its first, as a conversion would (docs/versions.md). Its own module because an update
is a verb on versions, as ``compact`` and ``vacuum`` are; ``_convert`` creates folders.
"""

from __future__ import annotations

import dataclasses
import logging

from tfrecorder import _storage as storage
from tfrecorder._errors import ConfigError, IncompleteOutputError
from tfrecorder._folder import layout, ledger, removal, rows, survey
from tfrecorder._folder.manifest import loads
from tfrecorder._inputs import sources, spill
from tfrecorder._options import Options
from tfrecorder._versions import compatibility, stored_records, updating
from tfrecorder._writer import launch, publishing, shard, staging
from tfrecorder._writer.result import ConversionResult

log = logging.getLogger(__name__)


def options_of(options, flat: dict, kwargs: dict) -> Options:
    """The run's Options: ``options`` as given, or built from the keywords (``flat``:
    those given as None where not given). Keywords beside ``options`` are refused: which
    of the two would hold is not obvious."""
    given = {**{k: v for k, v in flat.items() if v is not None}, **kwargs}
    if options is None:
        return Options.from_kwargs(**given)
    if not isinstance(options, Options):
        raise ConfigError(f"options={options!r}; give a tfrecorder.Options(...)")
    if given:
        names = ", ".join(f"{k}=" for k in given)
        raise ConfigError(
            f"options= and {names} given together; give every option in one of them, e.g. "
            f"options=dataclasses.replace(options, {next(iter(given))}=...)")
    return options


def of_folder(opened, source, mode: str, options: dict):
    """``Folder.update``: the update of the version ``opened`` (a ``view.Version``) by
    ``source``, with ``tfrecorder.convert``'s keyword options (None: not given). The
    version it updates is decided with the folder locked, and must be ``opened``."""
    options = dict(options)
    schema = options.pop("schema", None)
    header = options.pop("header", "infer")
    names = options.pop("names", None)
    opts = options_of(options.pop("options", None), {"mode": mode, **options}, {})
    if not opts.updates:
        raise ConfigError(f"mode={opts.mode!r}: a folder is updated with mode='update' or "
                          f"'append'; tfrecorder.convert writes a folder anew")
    return update(source, opened.output_dir, opts, schema, header, names, pinned=opened)


def update(source, output_dir: str, opts: Options, schema=None, header="infer", names=None,
           *, pinned=None, in_process_max: int | None = None):
    """The update of ``output_dir``'s latest version by ``source`` (``opts.mode``:
    ``"update"`` or ``"append"``); returns a ConversionResult (a DataflowJob on
    Dataflow). ``pinned``: the ``view.Version`` a ``Folder`` opened, which the version
    decided under the lock must be (OutputChangedError, or ConfigError where another
    version was published since, as ``Folder``'s verbs refuse)."""
    given = launch.check_given(opts, schema, output_dir)
    output_dir, schema = given.output_dir, given.schema
    if pinned is None:
        found = survey.survey(output_dir)
        if found.latest is None and not found.damaged:
            # An update of a folder with no version yet is a first conversion: its table
            # is read and checked first, and a folder that holds data is refused before
            # the lock is taken.
            table = given.read(source, header, names)
            try:
                planned = launch.planned(opts, table)
                survey.check_target(survey.survey(output_dir, planned.declared),
                                    opts.overwrite, planned.files, update=True)
                with launch.lock(output_dir, opts) as held:
                    before = survey.survey(output_dir, planned.declared)
                    notes, counts = list(table.notes), table.annotations
                    return launch.noted(launch.create(opts, held, before, table, planned,
                                                      given.schema, source, log,
                                                      in_process_max),
                                        notes, counts)
            finally:
                table.remove()
    table = None
    try:
        with launch.lock(output_dir, opts) as held:
            # With the lock held the folder cannot change under us: the version it
            # updates is decided here, once.
            before = survey.survey(output_dir)
            if before.damaged:
                # Its versions cannot be trusted: nothing to update, nor to convert over.
                raise IncompleteOutputError(f"{output_dir} cannot be updated: {before.damaged}")
            parent = before.latest
            if pinned is not None:
                _check_pinned(pinned, parent)
            table, stored = _read(given, source, header, names, parent)
            # The schema the table was read in (a segmentation table's, where the
            # default schema was given for one).
            schema = given.schema
            if parent is None:
                # A folder with no version yet: the update is a first conversion.
                planned = launch.planned(opts, table)
                before = survey.survey(output_dir, planned.declared)
                notes, counts = list(table.notes), table.annotations
                return launch.noted(launch.create(opts, held, before, table, planned, schema,
                                                  source, log, in_process_max), notes, counts)
            compatibility.check_updatable(output_dir, parent, opts, table.features,
                                          table.vocabularies, schema.column("label"))
            notes = [*table.notes, *_near_dropped(output_dir, parent, opts)]
            return launch.noted(_update(opts, held, before, parent, table, schema, source,
                                        stored, in_process_max), notes, table.annotations)
    finally:
        if table is not None:
            table.remove()


def _check_pinned(pinned, parent) -> None:
    """Refuses the update of a ``Folder`` whose version is no longer the folder's
    latest, as decided with the lock held: OutputChangedError where its version was
    written again, ConfigError where another version was published since."""
    pinned.unchanged()
    latest = None if parent is None else parent.version or 1
    if latest != pinned.number:
        raise ConfigError(
            f"update acts on the folder's latest version ({latest}), and this Folder "
            f"reads version {pinned.number}: call it on "
            f"tfrecorder.open({pinned.output_dir!r})")


def _read(given: launch.Given, source, header, names, parent):
    """The table, read against ``parent``: with its stored label ids, new labels after
    them, and its unassigned rows of images the folder holds keeping the split they are
    stored in; ``(table, StoredSplits or None)``. An update looks for the image files
    of the rows it writes only, once it knows them."""
    if parent is None:
        return given.read(source, header, names), None
    given.schema = sources.schema_of(source, given.schema, header, names)
    label_column = given.schema.column("label")
    vocabulary = compatibility.label_vocabulary(parent, label_column, given.vocabulary)
    if label_column is None and given.vocabulary is None:
        # A segmentation table's class names, kept as they are stored.
        vocabulary = parent.vocabularies.get(layout.SEGMENTATION_MASK)
    stored = stored_records.StoredSplits(given.output_dir, parent)
    table = given.read(source, header, names, vocabulary=vocabulary,
                       extend=given.vocabulary is None, stored=stored, look=False)
    return table, stored


def _update(opts: Options, held, before: survey.Survey, parent, table: spill.Spilled,
            schema, source, stored_splits: stored_records.StoredSplits,
            in_process_max: int | None):
    """The update of ``parent``, the latest version of the folder ``before`` surveyed with
    ``held`` locked, by ``table``: the rows that changed go through the pipeline into new
    shards, the records they replace or that left the table are retired, and the new
    version is published; an update that changes nothing writes nothing.
    ``stored_splits``: what the table's unassigned rows were read with (``parent``'s
    rows files, read once)."""
    output_dir = before.output_dir
    run_id = held.holder["run_id"]
    subset = None
    try:
        survey.check_target(before, True, [], run_id)
        removal.clear_leftovers(before, run_id)
        publishing.complete_latest(before)  # a run killed while it published
        version = max([k for k, _ in before.versions] + [parent.version or 1]) + 1
        # A version is written in its folder's layout, whatever the call's default.
        opts = dataclasses.replace(opts, layout=parent.layout)
        rows_of = launch.row_settings(opts, table, schema)
        decided = updating.plan(output_dir, parent, version, table,
                                shard.WriteSettings(None, table.columns, **rows_of), opts,
                                stored_splits.read)
        # New label names are a change even where no record is (an append's new label
        # on a stored row, a label_vocabulary that grew): the version lists them.
        if decided.unchanged and table.vocabularies == parent.vocabularies:
            result = ConversionResult.from_output(output_dir, opts.runner, None, parent)
            return _existing(dataclasses.replace(result, unchanged=True, changes={
                s: {"added": 0, "retired": 0, "kept": c["kept"]}
                for s, c in decided.update.changes.items()}), decided.update)
        subset = spill.subset(table, decided.picked, look=launch.looks(opts))
        planned = launch.planned(opts, subset, version, tuple(decided.update.live_indexes),
                                 decided.update.tag)
        survey.check_target(before, True, planned.files, run_id)
        # The error budget is the whole table's: rows quarantined before are tried again
        # in every update, and must not make a small update fail.
        run = launch.prepare(opts, output_dir, run_id, before, subset, planned.shards, schema,
                             source, update=decided.update, rows_in=table.rows_in,
                             in_process_max=in_process_max)
        folder = run.settings.run.folder
        ledger.write_ledger(folder, planned.files)
        launch.stop_over_budget(run, subset)
        for name, data in decided.live_index_data.items():
            storage.write_into(storage.join(folder, name), data)
        rows.write_renumbered(folder, decided.renumbered)
        # An update that only retires records stages no task: its run has the kept
        # shards' looks to gather and a version to publish, here (``Run.without_beam``).
        staging.stage(subset, planned.plans, run.task_dir, name=opts.name,
                      gzip=opts.compression == "gzip", version=version,
                      tag=decided.update.tag)
        # The shards it keeps are read too (their rows files), for the data report.
        run = dataclasses.replace(run, kept=staging.stage_kept(run.task_dir,
                                                               decided.update.kept))
        if run.without_beam:  # the kept shards' rows files, as read: not read again
            run = dataclasses.replace(run, rows_read=decided.rows_read)
        else:
            decided.rows_read.clear()
    finally:
        if subset is not None:
            subset.remove()
    result = _existing(launch.execute(run, held, log), decided.update)
    if isinstance(result, ConversionResult) and result.version == parent.version:
        # Nothing was published: every row the update tried was quarantined again.
        return dataclasses.replace(result, unchanged=True, changes={
            s: {"added": 0, "retired": 0, "kept": c["kept"]}
            for s, c in decided.update.changes.items()})
    return result


def _near_dropped(output_dir: str, parent, opts: Options) -> list[str]:
    """The note of an update without ``near_duplicates`` of a version whose data report
    has near duplicates: the new version's report has none, not even among the records
    it keeps. Not found again by itself: ``near_duplicates=False`` is also the default."""
    if opts.near_duplicates or not parent.quality:
        return []
    try:
        near = loads(storage.read_bytes(storage.join(output_dir, parent.quality)))
        near = near.get("near_duplicates") if isinstance(near, dict) else None
    except (OSError, ValueError):
        return []  # no report to compare with: nothing to say
    if not near:
        return []
    return [f"near duplicates not searched: version {parent.version or 1} was converted "
            f"with near_duplicates=True (--near-duplicates), this update without it, so its "
            f"data report lists none, of the records it keeps either, and a later update "
            f"with it is refused (these new records have no hash). To have them again, "
            f"convert the whole table with --near-duplicates --overwrite; give it to every "
            f"update to keep them"]


def _existing(result, update: updating.Update):
    """``result`` with the rows an append left out because their key was stored, and
    how many of them differ from what is stored, in what."""
    if not isinstance(result, ConversionResult) or not update.existing_count:
        return result
    return dataclasses.replace(result, existing_count=update.existing_count,
                               existing_keys=list(update.existing),
                               existing_differ=update.existing_differ,
                               existing_differ_in=list(update.differ_in))
