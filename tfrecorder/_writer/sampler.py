"""Beam's state sampler with short ticks, for the ``tfrecorder convert`` command only.

Each bundle Beam runs in this process starts a thread that samples which step is
running, sleeping 2 ms between samples at first, then 1.2 times longer each time, up to
200 ms; when the bundle ends, Beam waits for that sleep to end. The conversion's writing
step lasts about a second, by which time the sleep is 200 ms: it waits 0 to 200 ms for
nothing, 100 ms on average (docs/performance.md). Beam has no option for the period,
only the default of ``StateSampler``'s constructor, which holds for every pipeline of
the process. A library call has no right to it: the process is its user's. The command
owns its process, so it, and only it, asks for a shorter period (``asked_by_the_command``
in ``_cli._run_convert``); the period is set only while a Beam pipeline runs in this
process for it (``while_beam_runs`` in ``direct._run_beam``), so that a conversion run
without Beam (``Run.without_beam``) does not import Beam for it. In a library call
nothing was asked and nothing is set. In the writer's wing with the other modules that
touch Beam.
"""

from __future__ import annotations

import contextlib

#: The command's period, in ms (``--beam-sampler-ms``).
COMMAND_TICK_MS = 20

#: The period the command asked for while its conversion runs; None: nothing asked (a
#: library call, whose process is its user's).
_asked: int | None = None


@contextlib.contextmanager
def asked_by_the_command(ms: int):
    """The ``tfrecorder`` command's own process asks for ticks of at most ``ms`` for the
    Beam pipelines that run in it while this runs. Imports nothing."""
    global _asked
    before, _asked = _asked, ms
    try:
        yield
    finally:
        _asked = before


def while_beam_runs():
    """Where a Beam pipeline runs in this process: the command's short ticks if it asked
    for them (``asked_by_the_command``), else nothing changed."""
    return contextlib.nullcontext() if _asked is None else short_sampler_ticks(_asked)


@contextlib.contextmanager
def short_sampler_ticks(ms: int):
    """Beam's state sampler ticks at most every ``ms`` while this runs, then as before.
    A Beam whose sampler takes its period some other way is left as it is; so are
    worker processes (``num_workers`` > 1, Dataflow), which keep Beam's period."""
    try:
        from apache_beam.runners.worker import statesampler
        init = statesampler.StateSampler.__init__
        code, beams = init.__code__, init.__defaults__
        known = (isinstance(beams, tuple) and len(beams) == 1 and type(beams[0]) is int
                 and code.co_varnames[code.co_argcount - 1] == "sampling_period_ms")
    except (ImportError, AttributeError):
        known = False
    if known:
        init.__defaults__ = (min(ms, beams[0]),)  # never longer than Beam's own
    try:
        yield
    finally:
        if known:
            init.__defaults__ = beams
