"""The file systems of ``scheme://`` paths, through fsspec (gcsfs for ``gs://``, which
honours ``STORAGE_EMULATOR_HOST`` for tests against a local GCS emulator): each resolved
once per process under a lock a forked child renews, and ``gs://``'s credentials looked
for first, without a network request. Its own module because it is the one place that
imports fsspec and knows about Google Cloud's credentials.
"""

from __future__ import annotations

import os
import threading

from tfrecorder._storage.paths import SCHEMES, check_scheme, scheme

#: Held while a scheme's file system is resolved for the first time in this process.
_FS_LOCK = threading.Lock()
#: Schemes whose file system has been resolved once (fsspec caches the instance).
_RESOLVED: set[str] = set()


def _new_fs_lock() -> None:
    # A process forked while another thread held the lock (a DataLoader's workers,
    # forked while reader threads make their first reads) would wait for it forever.
    global _FS_LOCK
    _FS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # no fork on Windows
    os.register_at_fork(after_in_child=_new_fs_lock)


def _fs(path: str):
    """The fsspec file system of ``path``; ConfigError naming the scheme when no file
    system for it can be imported (``s3://`` without s3fs, a scheme fsspec does not
    know), instead of fsspec's ImportError or ValueError.

    The first resolution of each scheme (importing fsspec and gcsfs, creating the file
    system) happens under one lock: reader threads make a process's first reads at
    once, and each would otherwise create a file system of its own (its credentials,
    its connection pool) or meet a module another thread is still importing. Later
    calls take fsspec's cached instance without the lock."""
    kind = scheme(path)
    if kind not in _RESOLVED:
        with _FS_LOCK:
            if kind not in _RESOLVED:
                fs = _resolve(path, kind)
                _RESOLVED.add(kind)
                return fs
    return _resolve(path, kind)


def _resolve(path: str, kind: str):
    import fsspec

    if kind == "gs":
        problem = credentials_problem(path)
        if problem is not None:
            from tfrecorder._errors import ConfigError

            raise ConfigError(problem)

    try:
        fsspec.get_filesystem_class(kind)
    except (ImportError, ValueError) as e:
        from tfrecorder._errors import ConfigError

        if kind in SCHEMES:  # a dependency of ours missing or broken
            raise ConfigError(f"{path}: {kind}:// needs gcsfs, which cannot be imported "
                              f"({e}); install it: pip install gcsfs") from None
        raise ConfigError(f"{path}: {check_scheme(path)}") from None
    fs, _ = fsspec.core.url_to_fs(path)
    return fs


#: Where ``gcloud auth application-default login`` writes its credentials, below the
#: gcloud configuration folder (``CLOUDSDK_CONFIG``, else ~/.config/gcloud, or
#: %APPDATA%\gcloud on Windows).
ADC_FILE = "application_default_credentials.json"
#: Variables set on Google Cloud's serverless runtimes (Cloud Run services and jobs,
#: Cloud Functions, App Engine), where the metadata server gives credentials.
_SERVERLESS = ("K_SERVICE", "CLOUD_RUN_JOB", "FUNCTION_TARGET", "GAE_ENV")
#: The file Linux fills from the machine's firmware; "Google ..." on Google's machines.
_PRODUCT_NAME = "/sys/class/dmi/id/product_name"


def _gcloud_folder() -> str:
    folder = os.environ.get("CLOUDSDK_CONFIG")
    if folder:
        return folder
    if os.name == "nt" and os.environ.get("APPDATA"):
        return os.path.join(os.environ["APPDATA"], "gcloud")
    return os.path.join(os.path.expanduser("~"), ".config", "gcloud")


def on_google_cloud() -> bool:
    """True when this machine is Google's (Compute Engine, GKE, Dataflow and Vertex AI
    workers, Cloud Run...), judged from local signs only: its firmware's product name or a
    serverless runtime's variables. ``NO_GCE_CHECK=true`` tells google.auth to not use
    the metadata server, so then it is False too."""
    if os.environ.get("NO_GCE_CHECK", "").lower() == "true":
        return False
    if any(os.environ.get(v) for v in _SERVERLESS):
        return True
    if os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_ROOT"):
        return True  # a metadata server named by the user
    try:
        with open(_PRODUCT_NAME) as f:
            return f.read().strip().startswith("Google")
    except OSError:
        return False


def credentials_problem(path: str) -> str | None:
    """Why ``gs://`` cannot be reached from here, in one line naming the fix; None when
    credentials are at hand (or not needed: a GCS emulator, fsspec's ``token`` set).

    It looks where google.auth looks (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
    application-default file, a Google Cloud machine) without any network request. On a
    machine that is not Google's, google.auth would ask the Compute Engine metadata
    server, which is not there: that costs seconds of timeouts, then gcsfs goes on
    anonymously and retries each request for half a minute. So the metadata server is
    never asked; a Google machine is known by its firmware's name, as google.auth itself
    falls back to when the server does not answer.
    """
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return None
    if _fsspec_token():
        return None
    explicit = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if explicit:
        if not os.path.isfile(os.path.expanduser(explicit)):
            return (f"{path}: GOOGLE_APPLICATION_CREDENTIALS={explicit} is not a file; set it "
                    f"to a service account key file (JSON), or unset it and run `gcloud auth "
                    f"application-default login`")
        return None
    adc = os.path.join(_gcloud_folder(), ADC_FILE)
    if os.path.isfile(adc) or on_google_cloud():
        return None
    return (f"{path}: no Google Cloud credentials found (GOOGLE_APPLICATION_CREDENTIALS is "
            f"not set, {adc} does not exist, and this is not a Google Cloud machine); run "
            f"`gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
            f"to a service account key file (for a public bucket, FSSPEC_GS_TOKEN=anon reads "
            f"it without credentials)")


def _fsspec_token() -> bool:
    """True when fsspec's configuration gives gcsfs a ``token`` (``FSSPEC_GS_TOKEN=anon``,
    a key file): the user chose how to connect."""
    import fsspec.config

    return any(fsspec.config.conf.get(p, {}).get("token") for p in ("gs", "gcs"))
