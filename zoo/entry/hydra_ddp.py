"""Lightning's DDP launcher re-runs the script per extra rank with the parent's command line and `hydra.run.dir`: in
a multirun the children would start a multirun of their own (`-m`) and write outside the job's directory. This
runs them with the job's own overrides, in RUN mode, into the job's output directory.
"""

from __future__ import annotations

import sys

from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_original_cwd, to_absolute_path


def job_subprocess_command(local_rank: int):
    import __main__

    hydra_cfg = HydraConfig.get()
    if __main__.__spec__ is None:
        command = [sys.executable, to_absolute_path(sys.argv[0])]
    else:
        command = [sys.executable, "-m", __main__.__spec__.name]
    command += list(hydra_cfg.overrides.task)
    command += [
        f'hydra.run.dir="{hydra_cfg.runtime.output_dir}"',
        f"hydra.job.name=train_ddp_process_{local_rank}",
        "hydra.output_subdir=null",
        "hydra.mode=RUN",  # an hparams_search config sets MULTIRUN; a rank is one run
    ]
    return command, get_original_cwd()


def install() -> None:
    from lightning.fabric.strategies.launchers import subprocess_script

    subprocess_script._hydra_subprocess_cmd = job_subprocess_command
