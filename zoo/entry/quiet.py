"""What a run prints: every line once, and no warning or tip the project knows to be harmless (each filter matches
one exact message and says why; anything else still shows). Also the run's log file (`RunLogFile`, configured in
zoo/conf/train.yaml), which comes into being only once a run really starts, so that a start that fails leaves an
existing run directory as it was. Imported by `logging.config` when Hydra configures logging: keep imports light.
"""

from __future__ import annotations

import logging
import warnings

# An advertisement for a cloud logger, logged by Lightning at every Trainer construction without it installed.
_TIP = "💡 Tip: For seamless cloud logging"


def _not_a_tip(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_TIP)


def quiet() -> None:
    """Install the warning and log filters, and make Lightning's log lines appear once (on the console and in the
    run's log file). Safe to call more than once."""
    # Lightning (up to 2.6) builds torch pytree LeafSpec objects, deprecated since torch 2.10: nothing a user changes.
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
    )
    # Every fresh run gets a new directory; a checkpoint directory that holds files is the run's own, resumed in place.
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty\.")
    # Under *-mixed precision the parameters are float32, so the summary's fallback to 32 bits is the true size.
    warnings.filterwarnings("ignore", message=r"Precision .*-mixed is not supported by the model summary")
    # The zoo's samplers resume exactly from the restored global step (zoo/data/resumable.py), mid-epoch too.
    warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended before the epoch ended")
    tips = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _not_a_tip not in tips.filters:
        tips.addFilter(_not_a_tip)
    # Lightning gives its loggers console handlers of their own, so under Hydra's job logging every line was printed
    # twice and, depending on import order, never reached the log file: where the root logger has handlers,
    # Lightning's records go there alone. (Without them, in a notebook or a test, Lightning's are all there is.)
    if logging.getLogger().handlers:
        import lightning  # noqa: F401  (its import adds the handlers removed here)

        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                if type(handler) is logging.StreamHandler:
                    logger.removeHandler(handler)
            logger.propagate = True


class RunLogFile(logging.FileHandler):
    """The run's log file (`<run dir>/<task_name>.log`): records are held back until `start_run_log()` says the run
    has really started, then written with everything after."""

    # A DDP rank other than 0 never starts its file and must not keep every record of a long run in memory.
    MAX_HELD = 10_000

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = "utf-8", delay: bool = True) -> None:
        super().__init__(filename, mode=mode, encoding=encoding, delay=True)  # never opened before start()
        self._held: list[logging.LogRecord] | None = []

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
    for handler in logging.getLogger().handlers:
        if isinstance(handler, RunLogFile):
            handler.start()
