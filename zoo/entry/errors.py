"""Turning expected failures (bad config, missing data, wrong checkpoint) into one-line errors.

A single run prints `error: <message>` and exits 1. In a Hydra multirun one bad job (an invalid sampled value, a
job that runs out of memory) must not end the sweep: the job is reported in one line naming its directory, a
failure record is left there for the sweep summary, and the next job runs; the multirun exits non-zero at the
end (zoo.entry.sweep_summary). HYDRA_FULL_ERROR=1 or ZOO_FULL_ERROR=1 shows the traceback.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback

from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from omegaconf import OmegaConf

# Errors whose message is written for the user. Anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, TypeError)


def _root_cause(error: BaseException) -> BaseException:
    while isinstance(error, InstantiationException) and error.__cause__ is not None:
        error = error.__cause__
    return error


def full_error_requested() -> bool:
    return os.environ.get("ZOO_FULL_ERROR") == "1" or os.environ.get("HYDRA_FULL_ERROR") == "1"


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def one_line_errors(fn=None, *, hydra_job: bool = True):
    """Run `fn`; on a user error print `error: <message>` to stderr and exit 1 without a traceback (in a multirun:
    see `_failed_job`). `hydra_job=False` for the argparse commands (generate, export), which are never a job of a
    sweep, whatever Hydra state the process holds."""
    if fn is None:
        return functools.partial(one_line_errors, hydra_job=hydra_job)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            if hydra_job and _in_multirun():
                return _failed_job(error)
            cause = _root_cause(error)
            if full_error_requested() or not isinstance(cause, USER_ERRORS):
                raise
            print(f"error: {one_line(cause)}", file=sys.stderr)
            sys.exit(1)

    return wrapper


def _failed_job(error: Exception):
    """One job of a multirun failed: say so in one line (with the traceback for a bug or when asked), leave a
    failure record in its directory, and let the sweep go on.

    Hydra records a job that raises as FAILED (JobReturn.status). Sweepers that handle failed jobs themselves
    (Optuna: the trial becomes FAIL, up to `max_failure_rate`) get the exception; Hydra's basic sweeper would
    stop the sweep on it after the batch, so there the job returns None instead, its failure being recorded.
    """
    from zoo.entry.sweep_summary import write_failure

    hydra_cfg = HydraConfig.get()
    cause = _root_cause(error)
    job_dir = hydra_cfg.runtime.output_dir
    if full_error_requested() or not isinstance(cause, USER_ERRORS):
        traceback.print_exception(error, file=sys.stderr)
    message = one_line(cause)
    job = hydra_cfg.job.num
    print(f"error: job {job} failed ({job_dir}): {message}", file=sys.stderr, flush=True)
    write_failure(job_dir, job=job, overrides=list(hydra_cfg.overrides.task), error=message)
    if OmegaConf.select(hydra_cfg, "sweeper.max_failure_rate") is not None:
        raise error
    return None
