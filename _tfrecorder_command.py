"""The ``tfrecorder`` console script's first module, outside the package.

Python imports a package's ``__init__`` before any module in it, and tfrecorder's
imports pandas and its own modules: about a second in which a Ctrl-C would be Python's
own KeyboardInterrupt, with its traceback. This module imports nothing of tfrecorder's
at the top, so the command's answer to Ctrl-C holds from its first instruction. It
then hands the signal back to Python and runs ``tfrecorder._cli.command``, which takes
it over for the rest of the command.
"""

import os
import signal
import sys

#: The command's exit code for Ctrl-C (tfrecorder._cli.INTERRUPTED; the shell's 128 + 2).
_INTERRUPTED = 130


def _interrupted_while_starting(signum, frame):
    # Nothing has run yet: nothing was read, locked or written.
    sys.stderr.write("interrupted: nothing was published\n")
    sys.stderr.flush()
    os._exit(_INTERRUPTED)


def main() -> None:
    """Ctrl-C answered with one line from here on; then the command itself."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
        from tfrecorder import _cli

        signal.signal(signal.SIGINT, signal.default_int_handler)
    else:  # Ctrl-C ignored by whoever started us (nohup, a background job): keep it so
        from tfrecorder import _cli
    _cli.command()


if __name__ == "__main__":
    main()
