"""Runners on a cluster: what Flink, Spark, Beam's PortableRunner and Dask need to start,
checked before anything is written, and the arguments of a run on Beam's Dask runner.

A runner that cannot start fails here in one line (a ConfigError naming what is
missing), not minutes later inside Beam: Flink and Spark without a cluster would
download a job server jar and start a JVM; a job endpoint nobody answers would be
retried for minutes; a Dask Client given the dashboard's address would wait for the
scheduler's handshake forever. Its own module because these checks talk to the network
and to Dask, which nothing else of a run does before Beam starts.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from urllib.parse import urlsplit

from tfrecorder._errors import ConfigError

#: Seconds to wait for a cluster endpoint to accept a connection.
CONNECT_TIMEOUT = 5.0
#: Flink's and Spark's "run a cluster inside this process" masters.
_LOCAL_FLINK = ("[auto]", "[local]")


def check(opts) -> None:
    """Raises ConfigError if runner ``opts.runner`` cannot start as configured."""
    name = opts.runner
    if name == "DaskRunner":
        _check_dask(opts)
        return
    if name not in ("FlinkRunner", "SparkRunner", "PortableRunner"):
        return
    endpoint = opts.flag_value("job_endpoint")
    if endpoint == "embed":
        return  # Beam's job service inside this process
    if endpoint:
        _reachable(name, "job_endpoint", endpoint, None,
                   "start the runner's job server there (Flink's or Spark's), or give "
                   "job_endpoint='embed' to run in this process")
        return
    if name == "PortableRunner":
        raise ConfigError(
            "runner='PortableRunner' needs job_endpoint='host:port' (a running Flink or "
            "Spark job server) or job_endpoint='embed' (Beam's, in this process); give it "
            "in pipeline_options")
    if name == "FlinkRunner":
        master = opts.flag_value("flink_master") or "[auto]"
        if master in _LOCAL_FLINK:
            _local_jar(name, "flink_master='host:8081' (a Flink cluster's REST endpoint) "
                       "or job_endpoint='host:8099' (a Flink job server)",
                       opts.flag_value("flink_job_server_jar"), "flink_job_server_jar")
            return
        _reachable(name, "flink_master", master, 8081,
                   "give the REST endpoint of a running Flink cluster")
        return
    master = opts.flag_value("spark_master_url") or "local[4]"
    if master.startswith("local"):
        _local_jar(name, "spark_master_url='spark://host:7077' (a Spark master) or "
                   "job_endpoint='host:8099' (a Spark job server)",
                   opts.flag_value("spark_job_server_jar"), "spark_job_server_jar")
        return
    _reachable(name, "spark_master_url", master, 7077,
               "give the master URL of a running Spark cluster")


def _local_jar(name: str, wanted: str, jar: str | None, flag: str) -> None:
    """A runner that would start its own job server from a jar: only from a jar file
    given here, with Java installed; never a download inside a conversion."""
    import shutil

    if jar and os.path.isfile(jar) and shutil.which("java"):
        return
    missing = (f"{flag}={jar!r} is not a file" if jar and not os.path.isfile(jar) else
               "no java on PATH" if jar else "no cluster given")
    raise ConfigError(
        f"runner={name!r} has {missing}: give {wanted} in pipeline_options (or, for a "
        f"cluster in this process, a local {flag} file and Java)")


def _reachable(name: str, option: str, address: str, default_port: int | None,
               fix: str) -> None:
    host, port = _host_port(address, default_port)
    if host is None:
        raise ConfigError(f"runner={name!r}: {option}={address!r} is not host:port; {fix}")
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConfigError(
            f"runner={name!r}: nothing answers at {option}={address!r} ({reason}); "
            f"{fix}") from None


def _host_port(address: str, default_port: int | None) -> tuple[str | None, int]:
    text = address.strip()
    if "://" not in text:
        text = f"tcp://{text}"
    try:
        url = urlsplit(text)
        port = url.port or default_port
    except ValueError:
        return None, 0
    if not url.hostname or port is None:
        return None, 0
    return url.hostname, port

# --- Dask -----------------------------------------------------------------------------

#: The port a Dask scheduler listens on unless told otherwise; its dashboard is on 8787.
DASK_SCHEDULER_PORT = 8786


def _check_dask(opts) -> None:
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        raise ConfigError("runner='DaskRunner' needs Dask: pip install 'tfrecorder[dask]' "
                          "(dask[distributed])") from None
    address = opts.flag_value("dask_client_address")
    if address:
        _reachable("DaskRunner", "dask_client_address", address, DASK_SCHEDULER_PORT,
                   "start a scheduler there (`dask scheduler`) or give the address of "
                   "a running one")
        _dask_scheduler(address)


def _dask_scheduler(address: str) -> None:
    """ConfigError unless ``address`` answers as a Dask scheduler within CONNECT_TIMEOUT.

    Accepting a connection is not enough: the dashboard (port 8787) or any other server
    accepts one too, and a ``dask.distributed.Client`` given its address waits forever
    for Dask's handshake, inside the run, with the output folder locked. The scheduler's
    own ``identity`` call is asked for here, bounded, in a thread of its own (the
    caller's thread may be running an event loop: a notebook's)."""
    import asyncio
    import threading

    host, port = _host_port(address, DASK_SCHEDULER_PORT)
    given = address.strip()
    kind = given.split("://", 1)[0] if "://" in given else "tcp"
    target = f"{kind}://{f'[{host}]' if ':' in host else host}:{port}"
    outcome: dict = {}

    def probe():
        try:
            outcome["identity"] = asyncio.run(
                asyncio.wait_for(_dask_identity(target), CONNECT_TIMEOUT))
        except (asyncio.TimeoutError, OSError, ValueError) as e:
            outcome["error"] = e

    thread = threading.Thread(target=probe, name="tfrecorder-dask-check", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT + 1)
    identity = outcome.get("identity")
    server = identity.get("type") if isinstance(identity, dict) else None
    if server == "Scheduler":
        return
    error = outcome.get("error")
    if identity is not None:
        reason = f"it is a Dask {server or 'server'}, not the scheduler"
    elif error is None or isinstance(error, asyncio.TimeoutError):
        reason = (f"no Dask handshake within {CONNECT_TIMEOUT:g} s: a server of another "
                  f"kind, such as the Dask dashboard on port 8787")
    else:
        reason = str(error) or type(error).__name__
    raise ConfigError(
        f"runner='DaskRunner': dask_client_address={address!r} accepts a connection but "
        f"does not answer as a Dask scheduler ({reason}); give the scheduler's address, "
        f"tcp://host:{DASK_SCHEDULER_PORT} unless it was started with another --port "
        f"(`dask scheduler` prints it as 'Scheduler at:')")


async def _dask_identity(address: str) -> dict:
    from distributed.comm import connect
    from distributed.core import send_recv
    from distributed.security import Security

    # The Client's own connection arguments (TLS from Dask's configuration).
    comm = await connect(address, timeout=CONNECT_TIMEOUT,
                         **Security().get_connection_args("client"))
    try:
        return await send_recv(comm, op="identity")
    finally:
        comm.abort()


def dask_arguments(opts) -> tuple[list[str], dict]:
    """The flags and keyword options of a run on Beam's Dask runner.

    Dask's options given as a dict become flags: Beam's Dask options take keywords by
    other names (``address``, not ``dask_client_address``), and would drop them silently.
    Without ``dask_client_address``, the scheduler of a ``dask.distributed.Client``
    already connected in this process is used; without either, Beam starts a local
    cluster. Each shard is a Dask partition of its own (Beam's Dask runner spreads work
    by the partitions of the first step only), unless partitions are set explicitly.
    """
    flags = opts.beam_flags()
    keywords = {}
    for key, value in opts.beam_keywords().items():
        if key.startswith("dask_"):
            flags.append(f"--{key}={value}")
        else:
            keywords[key] = value
    given = {f.lstrip("-").partition("=")[0] for f in flags}
    if not given & {"dask_client_address", "dask_scheduler_file"}:
        address = _connected_scheduler()
        if address:
            flags.append(f"--dask_client_address={address}")
    if not given & {"dask_npartitions", "dask_partition_size"}:
        flags.append("--dask_partition_size=1")
    return flags, keywords


def _connected_scheduler() -> str | None:
    if "distributed" not in sys.modules:
        return None  # no Client can be connected: Dask was never imported
    from distributed import default_client

    try:
        return default_client().scheduler.address
    except ValueError:  # no client
        return None


@contextlib.contextmanager
def dask_in_notebooks():
    """Lets Beam's Dask runner run a pipeline from a notebook.

    Beam's Dask runner refuses to run inside a notebook, for want of support for Beam's
    interactive mode (``InteractiveRunner``, cached PCollections). A conversion uses
    none of it: it builds and runs one batch pipeline and waits for it, as from a
    script, and a notebook with a connected ``dask.distributed.Client`` is where Dask
    users work.
    """
    from apache_beam.runners.dask import dask_runner

    check = dask_runner.is_in_notebook
    dask_runner.is_in_notebook = lambda: False
    try:
        yield
    finally:
        dask_runner.is_in_notebook = check
