"""Old spellings that still work, each with a DeprecationWarning that names the user's
line (not tfrecorder's, however deep in it the old spelling was read)."""

from __future__ import annotations

import functools
import os
import sys
import warnings

from tfrecorder._errors import ConfigError

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _ours(code) -> bool:
    # Dataclasses generate ``__init__`` as "<string>": Options(...) is ours too.
    return (os.path.abspath(code.co_filename).startswith(_PACKAGE)
            or (code.co_filename == "<string>" and code.co_name == "__init__"))


def warn(message: str) -> None:
    """A DeprecationWarning attributed to the first caller outside this package."""
    frame, level = sys._getframe(1), 2
    while frame is not None and _ours(frame.f_code):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def renamed(**old_to_new: str):
    """A function whose keyword ``old`` is now called ``new``: ``old=`` still works,
    with a DeprecationWarning; both together are a ConfigError."""
    def wrap(f):
        name = f.__qualname__.removesuffix(".__init__")

        @functools.wraps(f)
        def call(*args, **kwargs):
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise ConfigError(f"{name}() got {old}= and {new}=: {old} is the "
                                          f"old name of {new}; give {new}= only")
                    warn(f"{name}({old}=...) is now spelt {name}({new}=...)")
                    kwargs[new] = kwargs.pop(old)
            return f(*args, **kwargs)

        return call
    return wrap
