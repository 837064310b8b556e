"""What a run prints: every line once, and no warning or tip the project knows to be harmless.

`quiet()` is called at the start of train and eval (inside the Hydra job, after Hydra has set up logging). Each
filter below matches one exact message and says why it is harmless here; anything else still shows, so a real
warning is not lost in noise. The run's log file (`RunLogFile`, configured in zoo/conf/hydra/default.yaml) only
comes into being once a run really starts, so that a start that fails leaves an existing run directory as it was.

This module is imported by `logging.config` when Hydra configures the job's logging: keep its imports light.
"""

from __future__ import annotations

import logging
import warnings

# Lightning messages logged (not warned) that say nothing about this run.
_LOG_FILTERS = {
    # An advertisement for a cloud logger, printed at every Trainer construction without it installed.
    "lightning.pytorch.utilities.rank_zero": ("💡 Tip: For seamless cloud logging",),
}


class _DropMessages(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def quiet() -> None:
    """Install the warning and log filters, and make Lightning's log lines appear once (on the console and in the
    run's log file). Safe to call more than once."""
    # Lightning (up to 2.6) builds torch pytree LeafSpec objects, deprecated since torch 2.10: Lightning's code,
    # nothing a zoo user can change, and it works the same.
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
    )
    # Every fresh run gets a new directory; a checkpoint directory that already holds files is the run's own, being
    # resumed in place (train.py says so), not another run's files about to be mixed in.
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty\.")
    # Under *-mixed precision the parameters are kept in float32, so the summary's fallback to 32 bits per
    # parameter is the true size (Lightning's summary only knows the true-precision names).
    warnings.filterwarnings("ignore", message=r"Precision .*-mixed is not supported by the model summary")
    # Lightning asks DataLoaders themselves to be stateful. The zoo's samplers resume exactly from the global step
    # restored from the checkpoint (zoo/data/resumable.py, tests/test_resume.py), so mid-epoch resume is exact.
    warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended before the epoch ended")
    for name, prefixes in _LOG_FILTERS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) for f in logger.filters):
            logger.addFilter(_DropMessages(prefixes))
    _one_handler_for_lightning()


def _one_handler_for_lightning() -> None:
    """Lightning gives its `lightning` logger a console handler of its own (and `lightning.pytorch` /
    `lightning.fabric` one too when imported before logging was set up), so under Hydra every line was printed twice
    and, depending on import order, never reached the log file. Where the root logger has handlers (Hydra's job
    logging), Lightning's records go there alone."""
    if not logging.getLogger().handlers:
        return  # not under Hydra's logging (a notebook, a test): Lightning's own handlers are all there is
    import lightning  # noqa: F401  (its import adds the handlers removed here)

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:
                logger.removeHandler(handler)
        logger.propagate = True


class RunLogFile(logging.FileHandler):
    """The run's log file (`<run dir>/<task_name>.log`). Records are held back until `start_run_log()` says the
    run has really started, then written with everything after: a start that fails first (bad value, missing data)
    creates no file and appends nothing to an earlier run's log."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = "utf-8", delay: bool = True) -> None:
        super().__init__(filename, mode=mode, encoding=encoding, delay=True)  # never opened before start()
        self._held: list[logging.LogRecord] | None = []

    # A bound on what is held: a DDP rank other than 0 never starts its file (rank-zero-only output) and must not
    # keep every record of a long run in memory.
    MAX_HELD = 10_000

    def emit(self, record: logging.LogRecord) -> None:
        if self._held is None:
            super().emit(record)
        elif len(self._held) < self.MAX_HELD:
            self._held.append(record)

    def start(self) -> None:
        held, self._held = self._held or [], None
        for record in held:
            super().emit(record)
        self.flush()


def start_run_log() -> None:
    """Open the run's log file (see RunLogFile) with the lines logged so far."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, RunLogFile):
            handler.start()
