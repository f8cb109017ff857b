"""``python -m tfrecorder``: the same as the ``tfrecorder`` command."""

from tfrecorder._cli import command

command()
