"""Where a run's wall time goes: start-up (to the first training step), training, and what follows the last step:
time/* values in result.json, timings.json in the run directory and one line at the end. A later job of a multirun
(one process) counts its start-up from its own train() call (`mark_job_start`), not from the process start."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

_IMPORTED = time.time()  # where the process start cannot be read (not Linux): the figure then says so
_job_starts: list[float] = []  # when each train() call of this process started


def mark_job_start() -> None:
    _job_starts.append(time.time())


def job_start_time() -> tuple[float, str]:
    """(epoch seconds this job's start-up counts from, what that moment is)."""
    if len(_job_starts) > 1:
        return _job_starts[-1], "job start"
    started, exact = process_start_time()
    return started, "process start" if exact else "zoo import"


def process_start_time() -> tuple[float, bool]:
    """(epoch seconds at which this process started, whether that is exact): its start in clock ticks after boot
    against the uptime now, both to 10 ms (/proc/stat's btime is whole seconds only)."""
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start_ticks = int(after_name[19])  # field 22 of proc(5); the fields after the name start at field 3
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK")), True
    except (OSError, ValueError, IndexError):
        return _IMPORTED, False


class PhaseTimes(Callback):
    """Marks the first training step's start and the last one's end; train.py calls `finish()` at the end."""

    def __init__(self) -> None:
        self.started, self.started_from = job_start_time()
        self.first_step: float | None = None
        self.last_step_end: float | None = None
        self.steps = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.first_step is None:
            self.first_step = time.time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.last_step_end = time.time()
        self.steps += 1

    def phases(self, end: float | None = None) -> dict[str, float]:
        if self.first_step is None or self.last_step_end is None:
            return {}
        end = time.time() if end is None else end
        return {
            "time/startup_s": self.first_step - self.started,
            "time/train_s": self.last_step_end - self.first_step,
            "time/after_train_s": end - self.last_step_end,
            "time/total_s": end - self.started,
        }

    @rank_zero_only
    def finish(self, output_dir: str | Path) -> dict[str, float]:
        times = self.phases()
        if not times:
            return {}
        record = {**times, "steps": self.steps, "startup_from": self.started_from}
        (Path(output_dir) / "timings.json").write_text(json.dumps(record, indent=2) + "\n")
        since = {
            "job start": " (from this job's start: the jobs before it ran in the same process)",
            "zoo import": " (counted from the zoo's import: the process start is not readable here)",
        }.get(self.started_from, "")
        rank_zero_info(
            f"wall time {times['time/total_s']:.1f} s: start-up {times['time/startup_s']:.1f} s{since}, "
            f"{self.steps} training steps {times['time/train_s']:.1f} s, after the last step "
            f"{times['time/after_train_s']:.1f} s"
        )
        return times
