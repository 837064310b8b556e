"""What `python -m zoo.lab run` and `gpu` both do to start a sweep: the train command, the check of the overrides,
and running the sweep with the stop signals passed on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ..questions.configs import ROOT


def train_command() -> list[str]:
    """The checkout's train.py, or the installed `zoo-train` script (a Python file, so DDP ranks can re-run it)."""
    script = ROOT / "train.py"
    if not script.is_file():
        beside_python = Path(sys.executable).with_name("zoo-train")  # a venv's bin (PATH may hold a shell shim)
        script = beside_python if beside_python.is_file() else Path(shutil.which("zoo-train") or beside_python)
    return [sys.executable, str(script)]


def check_run_overrides(name: str, overrides: list[str]) -> None:
    """One-line errors for overrides that would make `run <name>` run something else, or mix two sweeps."""
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "experiment" or key.startswith("experiment@"):
            raise ValueError(
                f"'{override}': `run {name}` runs experiment=lab/{name}; for another question run "
                "`python -m zoo.lab run <name>` (python -m zoo.lab list names them)"
            )
    sweep_dirs = [o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.dir=")]
    # Hydra would write the new jobs over the old ones' folders and leave the rest: one sweep, two experiments.
    if sweep_dirs and Path(sweep_dirs[-1]).is_dir() and any(Path(sweep_dirs[-1]).iterdir()):
        raise ValueError(
            f"{sweep_dirs[-1]} already holds a sweep; pass a new or empty hydra.sweep.dir (or remove that folder)"
        )


def run_forwarding_signals(command: list[str]) -> tuple[int, int | None]:
    """(exit status, the signal that stopped it or None). SIGTERM, SIGINT and SIGHUP are passed on to the sweep and
    waited for; the sweep has its own process group, so a terminal's Ctrl-C reaches it once (through here)."""
    received: list[int] = []
    child: list[subprocess.Popen] = []

    def forward(signum, _frame):
        received.append(signum)
        if child:
            child[0].send_signal(signum)

    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {s: signal.signal(s, forward) for s in stops}
    try:
        child.append(subprocess.Popen(command, cwd=os.getcwd(), start_new_session=True))
        if received:  # arrived while it was starting
            child[0].send_signal(received[0])
        code = child[0].wait()
        code = 128 - code if code < 0 else code  # killed by a signal: the shell's way of saying which
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code, received[0] if received else None
