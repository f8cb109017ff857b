"""Old versions removed from an output folder (``vacuum``).

The versions older than the last ``keep`` (the retained ones): the files only they list, then their
manifests, oldest first, under the folder's lock. Its own module because it is a verb on
a finished output, apart from any run, with its own result (``Vacuumed``).
"""

from __future__ import annotations

import dataclasses
import functools
import os

from tfrecorder import _deprecation as deprecation
from tfrecorder import _storage as storage
from tfrecorder._errors import ConfigError, IncompleteOutputError
from tfrecorder._folder import layout
from tfrecorder._folder.ledger import new_run_id
from tfrecorder._folder.removal import _remove_empty_tree, _remove_listed
from tfrecorder._folder.survey import _inside, _listed, read_versions, survey


@dataclasses.dataclass(frozen=True)
class Vacuumed:
    """What ``vacuum`` removed: the versions and the files (names inside the folder)."""

    versions: tuple
    files: tuple
    bytes: int

    def __str__(self) -> str:
        from tfrecorder._writer.result import human_bytes

        if not self.versions:
            return "nothing to remove: every version is kept"
        return (f"removed version(s) {', '.join(map(str, self.versions))}: "
                f"{len(self.files)} file(s) of records and reports, "
                f"{human_bytes(self.bytes)}, and {len(self.versions)} version manifest(s)")


@deprecation.renamed(output_dir="tfrecord_dir")
def vacuum(tfrecord_dir: str, keep: int) -> Vacuumed:
    """Removes the versions of ``tfrecord_dir`` older than its last ``keep``: first the
    files that only those versions list (shards, index, rows and live index files, their
    data reports), then their manifests, oldest first. A file any retained version lists is
    never removed, nor the folder's own files (``tfrecorder.json``, labels, report). Runs
    under the folder's lock, as a conversion does; a reader of a removed version stops
    with ``OutputChangedError``."""
    from tfrecorder._folder.lock import acquire

    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"keep={keep!r}: give how many of the latest versions to keep, "
                          f"1 or more")
    s = survey(tfrecord_dir)
    if s.manifest is None:
        raise IncompleteOutputError(
            f"{tfrecord_dir} holds no whole conversion ({s.damaged or 'no tfrecorder.json'}); "
            f"nothing to vacuum")
    with acquire(tfrecord_dir, new_run_id(), "vacuum"):
        versions = read_versions(tfrecord_dir)
        dropped, retained = versions[:-keep], versions[-keep:]
        if not dropped:
            return Vacuumed((), (), 0)
        in_use = {layout.MANIFEST, layout.ERRORS, layout.DATASET_INFO, layout.FEATURES,
                  layout.QUALITY}
        for k, m in retained:
            in_use |= _listed(m) | {layout.version_manifest(k)}
        in_use |= _listed(s.manifest)
        # Only a version's own files go; a labels file is the folder's, whatever an
        # old version's manifest says.
        gone = sorted(n for n in set().union(*(_listed(m) for _, m in dropped)) - in_use
                      if not n.endswith(layout.LABELS_SUFFIX))
        here = functools.partial(_inside, tfrecord_dir)
        gone, size = _remove_listed(tfrecord_dir, gone, [m for _, m in dropped])
        for k, _ in dropped:  # oldest first: what is left is always the latest versions
            storage.remove(here(layout.version_manifest(k)))
        if not storage.is_remote(tfrecord_dir):
            for k, _ in dropped:
                folder = here(layout.version_dir(k))
                if os.path.isdir(folder):
                    _remove_empty_tree(folder)
        return Vacuumed(tuple(k for k, _ in dropped), tuple(gone), size)
