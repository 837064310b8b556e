"""Turning expected failures (bad config, missing data, wrong checkpoint) into one-line errors."""

from __future__ import annotations

import functools
import os
import sys

from hydra.errors import InstantiationException

# Errors whose message is written for the user. Anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, TypeError)


def _root_cause(error: BaseException) -> BaseException:
    while isinstance(error, InstantiationException) and error.__cause__ is not None:
        error = error.__cause__
    return error


def one_line_errors(fn):
    """Run `fn`; on a user error print `error: <message>` to stderr and exit 1 without a traceback.
    ZOO_FULL_ERROR=1 re-raises instead, for debugging."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (InstantiationException, *USER_ERRORS) as error:
            cause = _root_cause(error)
            if os.environ.get("ZOO_FULL_ERROR") == "1" or not isinstance(cause, USER_ERRORS):
                raise
            message = " ".join(str(cause).split())
            print(f"error: {message}", file=sys.stderr)
            sys.exit(1)

    return wrapper
