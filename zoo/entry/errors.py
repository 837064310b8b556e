"""Expected failures (bad config, missing data, wrong checkpoint, a full disk) as one `error: <message>` line, exit 1.

In a Hydra multirun a failed job is reported in one line naming its directory, leaves a failure record for the sweep
summary, and the sweep goes on (it exits non-zero at the end: zoo.entry.sweep_summary). HYDRA_FULL_ERROR=1 or
ZOO_FULL_ERROR=1 shows the traceback.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import sys
import traceback
from collections.abc import Callable

from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException, InstantiationException
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import (
    InterpolationResolutionError,
    InterpolationToMissingValueError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

# Errors whose message is written for the user; anything else is a bug and keeps its traceback. Python raises
# TypeError for bugs too (`None + 1`), so a TypeError is the user's only where `_is_users_type_error` says so.
USER_ERRORS = (ValueError, FileNotFoundError, TypeError)
_ZOO_SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Python's words for a call whose keywords do not fit the signature: under Hydra's instantiate, a config key.
_SIGNATURE_MISMATCH = re.compile(r"unexpected keyword argument|missing \d+ required|got multiple values for")

# How to write elsewhere with train.py / eval.py; the argparse commands (zoo-export, generate.py) name their own.
WRITE_ELSEWHERE = (
    "write elsewhere with hydra.run.dir=DIR (or paths.log_dir=DIR; ZOO_DATA_DIR for datasets, ZOO_CACHE_DIR for "
    "tokenizer and token caches)"
)
# OSErrors that the machine causes, not the code: the path and what to do about it.
OS_ADVICE = {
    errno.ENOSPC: "the disk is full; free space there or {elsewhere}",
    errno.EDQUOT: "the disk quota is used up; free space there or {elsewhere}",
    errno.EACCES: "fix the permissions or {elsewhere}",
    errno.EPERM: "fix the permissions or {elsewhere}",
    errno.EROFS: "a read-only file system; {elsewhere}",
    errno.ENOTDIR: "a part of the path is a file, not a folder; give a folder path",
}

# Set while `hydra_errors_in_one_line` has asked Hydra to re-raise (HYDRA_FULL_ERROR=1), not the user; inherited by
# DDP child processes.
_REQUESTED_BY_ZOO = "ZOO_HYDRA_RERAISE"


def _root_cause(error: BaseException) -> BaseException:
    # Hydra wraps what a constructor raises, OmegaConf what a resolver raises; the inner message is the user's.
    while isinstance(error, (InstantiationException, InterpolationResolutionError)) and error.__cause__ is not None:
        error = error.__cause__
    return error


def full_error_requested() -> bool:
    hydra_full = os.environ.get("HYDRA_FULL_ERROR") == "1" and os.environ.get(_REQUESTED_BY_ZOO) != "1"
    return os.environ.get("ZOO_FULL_ERROR") == "1" or hydra_full


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def os_error_message(error: OSError, elsewhere: str = WRITE_ELSEWHERE) -> str:
    """`<path>: <what the system said>; <what to do>`; a write without a file name names the run's directory."""
    path = error.filename
    if path is None:
        run_dir = HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else None
        path = f"writing in {run_dir}" if run_dir else "writing a file"
    advice = OS_ADVICE[error.errno].format(elsewhere=elsewhere)
    return f"{path}: {error.strerror or errno.errorcode.get(error.errno, error.errno)}; {advice}"


def user_message(error: BaseException, elsewhere: str = WRITE_ELSEWHERE) -> str | None:
    """The one line to print for a user error, or None for a bug (which keeps its traceback)."""
    cause = _root_cause(error)
    if isinstance(cause, OSError) and cause.errno in OS_ADVICE:
        return os_error_message(cause, elsewhere)
    if isinstance(cause, (MissingMandatoryValue, InterpolationToMissingValueError)):
        # The key left as ???; an interpolation to it names it only in its message.
        named = re.search(r"Missing mandatory value: (\S+)", str(cause))
        key = named.group(1) if named else cause.full_key
        return f"{key} has no value (it is ??? in the config); give one on the command line: {key}=..."
    if isinstance(cause, OmegaConfBaseException) and isinstance(cause, USER_ERRORS):
        # OmegaConf's first line, without the internals after it, and the key it was reading.
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return f"{first} (in {cause.full_key})" if getattr(cause, "full_key", None) else first
    if isinstance(cause, TypeError) and not _is_users_type_error(cause, instantiated=cause is not error):
        return None
    return one_line(cause) if isinstance(cause, USER_ERRORS) else None


def _is_users_type_error(error: TypeError, *, instantiated: bool) -> bool:
    """Raised by a `raise` statement of zoo's own code, or a signature mismatch where Hydra instantiated a configured
    class (a key the class does not take); not by Python inside an expression of zoo's code (a bug)."""
    if instantiated and _SIGNATURE_MISMATCH.search(str(error)):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return True  # raised and caught without a traceback: only zoo's own code does that
    innermost = frames[-1]
    in_zoo = os.path.abspath(innermost.filename).startswith(_ZOO_SOURCE + os.sep)
    return in_zoo and (innermost.line or "").lstrip().startswith("raise ")


def _exit_with(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def one_line_errors(fn=None, *, hydra_job: bool = True, elsewhere: str = WRITE_ELSEWHERE):
    """Run `fn`; on a user error print `error: <message>` to stderr and exit 1 (in a multirun: `_failed_job`).
    `hydra_job=False` for the argparse commands (generate, export), never a job of a sweep; `elsewhere`: how to
    write elsewhere with this command's options, for a full disk or a permission error."""
    if fn is None:
        return functools.partial(one_line_errors, hydra_job=hydra_job, elsewhere=elsewhere)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            if hydra_job and HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
                return _failed_job(error)
            message = user_message(error, elsewhere)
            if full_error_requested() or message is None:
                raise
            _exit_with(message)

    return wrapper


@contextlib.contextmanager
def hydra_errors_in_one_line(on_config_error: Callable[[], None] | None = None):
    """Around a `@hydra.main` call: what fails around the task (creating the output directory, a resolver refusing a
    value) is one `error:` line too (Hydra re-raises only with HYDRA_FULL_ERROR=1, set for the call). A rejected
    override keeps Hydra's own short message, followed by `on_config_error` (a hint of the nearest key)."""
    if full_error_requested():
        yield
        return
    saved = {name: os.environ.get(name) for name in ("HYDRA_FULL_ERROR", _REQUESTED_BY_ZOO)}
    os.environ.update({"HYDRA_FULL_ERROR": "1", _REQUESTED_BY_ZOO: "1"})
    try:
        yield
    except CompactHydraException as error:  # Hydra's message for a bad override or config: already one line
        print(error, file=sys.stderr)
        if isinstance(error.__cause__, OmegaConfBaseException):
            print(error.__cause__, file=sys.stderr)
        if on_config_error is not None:
            on_config_error()
        sys.exit(1)
    except Exception as error:
        message = user_message(error)
        if message is None:
            raise
        _exit_with(message)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _failed_job(error: Exception):
    """One job of a multirun failed: one line (with the traceback for a bug or when asked), a failure record in its
    directory, and the sweep goes on. Sweepers that handle failed jobs themselves (Optuna, `max_failure_rate`) get
    the exception; Hydra's basic sweeper would stop the sweep on it, so there the job returns None instead."""
    from zoo.entry.sweep_summary import write_failure

    hydra_cfg = HydraConfig.get()
    job_dir = hydra_cfg.runtime.output_dir
    message = user_message(error)
    if full_error_requested() or message is None:
        traceback.print_exception(error, file=sys.stderr)
    message = message or one_line(_root_cause(error))
    job = hydra_cfg.job.num
    print(f"error: job {job} failed ({job_dir}): {message}", file=sys.stderr, flush=True)
    write_failure(job_dir, job=job, overrides=list(hydra_cfg.overrides.task), error=message)
    if OmegaConf.select(hydra_cfg, "sweeper.max_failure_rate") is not None:
        raise error
    return None
