"""``python -m tfrecorder``: the same as the ``tfrecorder`` command."""

import sys

from tfrecorder._cli import main

sys.exit(main())
