"""``tfrecorder.open(out)``: an output folder at one version, as one object.

Every reader and verb of a ``Folder`` sees the version it was opened at, as
``lance.dataset(uri, version=)`` and Delta's ``DeltaTable`` do: an update published
meanwhile changes nothing a ``Folder`` reads, and ``tfrecorder.open(out)`` again sees it.
A ``Folder`` is made from one opening of the folder (``view.open_version``: one parse of
its manifest) and hands that opening to each reader (``read_version``, ``load_version``,
``access.Reader.of``, ...), so none opens the folder again. The free functions
(``tfrecorder.load``, ``read``, ``info``, ``report``, ``verify``, ``inspect``,
``versions``) are a line that opens the folder the same way and hands the opening to
the same function; they do not import this module, which sits above the readers.

Every verb checks that its version is still the conversion it opened (``_pinned``):
``mode="overwrite"`` starts a folder again at version 1, so a number alone does not
name a version for ever. The readers made from the opening (``reader``, ``load``, a
chunked ``read``) go on checking as they read; the verbs that return what they read
check again after, so what they return is the opened version's.
"""

from __future__ import annotations

import functools

from tfrecorder import _deprecation as deprecation
from tfrecorder._folder import view
from tfrecorder._errors import ConfigError
from tfrecorder._folder.manifest import Manifest


def _pinned(after: bool = True):
    """A verb of ``Folder`` run on its version only while that is still the conversion
    it opened (``view.Version.unchanged``): checked before the verb, and with ``after``
    once more when it returns. The verbs that publish or remove versions check only
    before: what they publish may replace the manifest a folder without version files
    pins (``tfrecorder.json``)."""
    def wrap(verb):
        @functools.wraps(verb)
        def checked(self, *args, **kwargs):
            self._opened.unchanged()
            done = verb(self, *args, **kwargs)
            if after:
                self._opened.unchanged()
            return done
        return checked
    return wrap


class Folder:
    """An output folder at one version: ``tfrecorder.open(out, version=None)``.

    ======================  ===============================================
    ``folder.version``      the version it reads (the latest when opened)
    ``folder.manifest``     that version's ``Manifest`` (``tfrecorder.info``)
    ``folder.read(split)``  its records as a pandas table (``tfrecorder.read``)
    ``folder.load(split)``  a ``tf.data`` pipeline (``tfrecorder.load``)
    ``folder.reader(split)``  random access (``tfrecorder.access.Reader``)
    ``folder.report()``     its data report (``tfrecorder.report``)
    ``folder.verify()``     every record checked (``tfrecorder.verify``)
    ``folder.inspect()``    a few records shown (``tfrecorder.inspect``)
    ``folder.export(dest)``  it in another format (``tfrecorder.export``)
    ``folder.versions()``   every version of the folder
    ``folder.update(t)``    an update by the table ``t``; ``compact()``, ``vacuum(keep)``
    ======================  ===============================================

    The verbs that publish a new version (``update``, ``compact``) or remove old ones
    (``vacuum``) act on the folder's latest version, and are refused on a ``Folder``
    opened at an earlier one; they return what the free function returns, and the
    ``Folder`` keeps its version (``tfrecorder.open(out)`` again for the new one).
    ``cache_dir`` and ``cache_limit`` apply to every reader of a ``gs://`` folder
    (docs/bucket.md).
    """

    def __init__(self, path: str, version: int | None = None, *,
                 cache_dir: str | None = None, cache_limit: int | str | None = None):
        #: The version opened (``view.Version``): what every reader is made from.
        self._opened = view.open_version(str(path), version)
        self.path = self._opened.output_dir
        self.manifest: Manifest = self._opened.manifest
        self.version: int = self._opened.number
        self.cache_dir = cache_dir
        self.cache_limit = cache_limit

    def __repr__(self) -> str:
        splits = ", ".join(f"{name} {info.num_examples}"
                           for name, info in self.manifest.splits.items())
        return f"tfrecorder.open({self.path!r}, version={self.version})  # records: {splits}"

    @property
    def splits(self) -> list[str]:
        """The splits of this version, in split order."""
        return list(self.manifest.splits)

    # --- reading --------------------------------------------------------------------

    @_pinned()
    def info(self) -> Manifest:
        """This version's manifest: splits, live record counts, features, label names
        (``tfrecorder.info``)."""
        return self.manifest

    @_pinned()
    def read(self, split: str | None = None, images: bool = False, *,
             chunksize: int | None = None):
        """This version's records as a pandas DataFrame (``tfrecorder.read``)."""
        from tfrecorder._readers.read import read_version

        return read_version(self._opened, split, images, chunksize=chunksize,
                            cache_dir=self.cache_dir, cache_limit=self.cache_limit)

    @_pinned()
    def load(self, split: str | None = None, **options):
        """A ``tf.data`` pipeline of this version (``tfrecorder.load``'s options)."""
        from tfrecorder._readers.loading import load_version

        options.setdefault("cache_dir", self.cache_dir)
        options.setdefault("cache_limit", self.cache_limit)
        self._given(options)
        return load_version(self._opened, split, **options)

    @_pinned()
    def reader(self, split: str = "train", **options):
        """Random access to a split of this version (``tfrecorder.access.Reader``)."""
        from tfrecorder.access import Reader

        options.setdefault("cache_dir", self.cache_dir)
        options.setdefault("cache_limit", self.cache_limit)
        self._given(options)
        return Reader.of(self._opened.view(split), **options)

    @_pinned()
    def report(self):
        """This version's data report (``tfrecorder.report``); its thumbnails show this
        version's records."""
        from tfrecorder._report.findings import report_version
        from tfrecorder.access import Reader

        # Its thumbnails are read through this Folder's shard cache, as its readers are.
        return report_version(self._opened, lambda split: Reader.of(
            split, cache_dir=self.cache_dir, cache_limit=self.cache_limit))

    @_pinned()
    def verify(self):
        """Every record of this version read and checked (``tfrecorder.verify``)."""
        from tfrecorder._readers.inspection import verify_version

        return verify_version(self._opened)

    @_pinned()
    def inspect(self, split: str = "train", num_records: int = 5,
                output_dir: str | None = None):
        """A few records of a split of this version (``tfrecorder.inspect``)."""
        from tfrecorder._readers.inspection import inspect_version

        return inspect_version(self._opened, split, num_records, output_dir)

    @_pinned()
    def versions(self):
        """Every version of the folder, as ``tfrecorder.versions`` lists them: those
        published up to this one from their own manifests, this one from the manifest
        it was opened with, and any published since."""
        from tfrecorder._versions.versions import table

        return table(self.path, self._opened)

    @_pinned(after=False)  # the export checks its version itself before it publishes
    def export(self, dest: str, format: str = "parquet", *, metadata: dict | None = None):
        """This version exported into the folder ``dest`` (``tfrecorder.export``)."""
        from tfrecorder._export.exporting import export_version

        return export_version(self._opened, dest, format, metadata=metadata)

    # --- what publishes or removes versions -------------------------------------------

    @_pinned(after=False)
    def update(self, table, mode: str = "update", **options):
        """``tfrecorder.convert(table, folder, mode=mode)``: an update (or, with
        ``mode="append"``, an append) of this version, which must still be the latest
        when the update takes the folder's lock (``_versions.update``)."""
        from tfrecorder._versions.update import of_folder

        if mode not in ("update", "append"):
            raise ConfigError(f"mode={mode!r}: a folder is updated with mode='update' or "
                              f"'append'; tfrecorder.convert writes a folder anew")
        return of_folder(self._opened, table, mode, options)

    @_pinned(after=False)
    def compact(self, splits=None):
        """``tfrecorder.compact`` of this version, the latest."""
        from tfrecorder._versions.compact import compact

        self._latest("compact")
        return compact(self.path, splits)

    @_pinned(after=False)
    def vacuum(self, keep: int):
        """``tfrecorder.vacuum``: the versions older than the last ``keep`` removed."""
        from tfrecorder._versions.vacuum import vacuum

        self._latest("vacuum")
        return vacuum(self.path, keep)

    def _given(self, options: dict) -> int:
        """ConfigError where ``options`` ask for another version than this one."""
        given = options.pop("version", self.version)
        if given != self.version:
            raise ConfigError(f"version={given!r}, but this Folder reads version "
                              f"{self.version}: tfrecorder.open({self.path!r}, "
                              f"version={given!r}) reads that one")
        return self.version

    def _latest(self, verb: str) -> None:
        latest = view.open_version(self.path).number
        if latest != self.version:
            raise ConfigError(
                f"{verb} acts on the folder's latest version ({latest}), and this Folder "
                f"reads version {self.version}: call it on tfrecorder.open({self.path!r})")


@deprecation.renamed(path="tfrecord_dir")
def open(tfrecord_dir: str, version: int | None = None, *, cache_dir: str | None = None,
         cache_limit: int | str | None = None) -> Folder:
    """The output folder ``tfrecord_dir`` at ``version`` (None: its latest): a ``Folder`` whose
    every reader and verb sees that version. IncompleteOutputError where no conversion
    finished there; ConfigError for a version it does not hold (naming those it does)."""
    return Folder(tfrecord_dir, version, cache_dir=cache_dir, cache_limit=cache_limit)
