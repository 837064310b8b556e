"""The notice a cluster gives before it stops a job: checkpoint the current step, requeue once, stop.

SLURM signals a job before its time limit (`sbatch --signal=USR1@120`; submitit asks for USR2). Lightning's own
handler saves an `hpc_ckpt_*.ckpt` that the run's resume never looks at; here either signal is handled as SIGTERM
is: Lightning stops at the end of the step, `checkpoints/on_exception.ckpt` is written, rank 0 requeues the job
(`scontrol requeue`), and the process exits 143 (zoo.entry.train). The requeued job resumes from that checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException


class PreemptionCheckpoint(Checkpoint):
    """On one of `signals`, stop at the end of the step with a checkpoint; under SLURM with `requeue`, requeue the
    job once that checkpoint exists. A Checkpoint, so that Lightning runs it after the on-exception checkpoint."""

    def __init__(self, signals: list[str] = ("SIGUSR1", "SIGUSR2"), requeue: bool = True) -> None:
        super().__init__()
        unknown = [s for s in signals if not isinstance(getattr(signal, str(s), None), signal.Signals)]
        if unknown:
            raise ValueError(f"callbacks.preemption.signals: unknown signal(s) {unknown}; use names like SIGUSR2")
        self.signals = [getattr(signal, s) for s in signals]
        self.requeue = requeue
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, object] = {}
        self._requeued = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        # Before Lightning installs its handlers, which then leave these signals alone; only the main thread can.
        if stage != "fit" or os.name == "nt" or threading.current_thread() is not threading.main_thread():
            return
        self._trainer = trainer
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._notice)

    def _notice(self, signum: int, frame) -> None:
        self.received = signal.Signals(signum)
        # Lightning's SIGTERM flag: every rank stops at the end of the step and the on-exception callbacks run.
        self._trainer._signal_connector.received_sigterm = True

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if self.received is None or not isinstance(exception, SIGTERMException):
            return
        saved = [Path(c.ckpt_path) for c in trainer.callbacks if hasattr(c, "ckpt_path") and c is not self]
        if not any(p.is_file() for p in saved):
            rank_zero_warn(f"{self.received.name}: no checkpoint was written, so the job is not requeued")
            return
        job = slurm_job_id()
        if self.requeue and job is not None and trainer.is_global_zero and not self._requeued:
            self._requeued = True
            result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
            if result.returncode == 0:
                print(f"{self.received.name}: checkpoint written, SLURM job {job} requeued", file=sys.stderr)
            else:
                rank_zero_warn(f"{self.received.name}: `scontrol requeue {job}` failed: {result.stderr.strip()}")

    def teardown(self, trainer, pl_module, stage: str) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def slurm_job_id() -> str | None:
    """The id `scontrol requeue` takes: `<array job>_<task>` for a job array, else the job id; None outside SLURM."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID") or None
