"""The verbs that publish or remove versions of a finished folder: update, compact,
vacuum, build_index, the versions table, and Folder, the object tfrecorder.open returns.

Internal: see docs/design.md for why each module lives here."""
