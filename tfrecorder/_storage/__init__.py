"""Every file access of tfrecorder goes through here: local paths and ``gs://`` alike.

Local paths use the operating system directly (the fast path for the common case);
anything with a ``scheme://`` goes through fsspec (gcsfs for ``gs://``), which honours
``STORAGE_EMULATOR_HOST`` for tests against a local GCS emulator. Callers import the
package (``from tfrecorder import _storage as storage``) and call ``storage.X``; the
functions live in its modules:

- ``paths``: paths as strings (kind, join, resolve), no I/O;
- ``remote``: fsspec's file systems, resolved once per scheme, and gs:// credentials;
- ``pool``: ``each``, calls in flight on the one bounded pool of the process;
  ``submit_kept``, a submit to a pool the process keeps;
- ``reading``: reads, sizes, stamps, listings, missing files;
- ``writing``: writes that never go through a link, renames, removal;
- ``generations``: object-store reads and writes fenced by an object's generation;
- ``containment``: ``inside``, the guarded path into an output folder.
"""

from tfrecorder._storage.containment import UnsafePathError, inside, is_link  # noqa: F401
from tfrecorder._storage.generations import (  # noqa: F401
    copy_new, create_new, read_with_generation, remove_if_generation, write_if_generation)
from tfrecorder._storage.paths import (  # noqa: F401
    SCHEMES, _local, all_on_gcs, basename, check_scheme, dirname, is_pattern, is_remote,
    join, parent, resolve, resolve_all, scheme, within)
from tfrecorder._storage.pool import ROUND_TRIPS, each, submit_kept  # noqa: F401
from tfrecorder._storage.reading import (  # noqa: F401
    STAT_BATCH, FileTooLargeError, NotAFileError, exists, glob, isdir,
    listdir, missing, mtime, read_bytes, read_file, read_file_stamped, read_range, size,
    stamp, walk_files)
from tfrecorder._storage.remote import (  # noqa: F401
    ADC_FILE, _fs, credentials_problem, on_google_cloud)
from tfrecorder._storage.writing import (  # noqa: F401
    TEMP_SUFFIX_BYTES, WRITE_BUFFER, create_exclusive, makedirs, move_new, open_file, remove,
    rename, temp_name, write_atomic, write_bytes, write_into, write_new)
