"""The package works when installed as a wheel (not editable), run from another directory: the configs ship inside
it (pkg://zoo.conf), the console scripts exist, and tiny shakespeare comes with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Top-level folders that are not part of the package (zoo/conf/data must stay: only the checkout's root is pruned).
NOT_PACKAGED = {
    ".git",
    ".venv",
    "venv",
    "logs",
    "data",
    "tests",
    "build",
    "benchmarks",
    "docs",
    "outputs",
    "multirun",
    "wandb",
    "lightning_logs",
}


def skip(directory: str, names: list[str]) -> set[str]:
    top = Path(directory) == ROOT
    return {n for n in names if (top and n in NOT_PACKAGED) or n == "__pycache__" or n.endswith(".egg-info")}


def run(*command, cwd, env=None, timeout=300):
    result = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{command}\nSTDOUT:\n{result.stdout[-3000:]}\nSTDERR:\n{result.stderr[-3000:]}"
    return result


def venv_purelib(env_dir: Path) -> str:
    return sysconfig.get_paths(vars={"base": str(env_dir), "platbase": str(env_dir)})["purelib"]


@pytest.mark.slow
def test_wheel_installs_and_trains_from_another_directory(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=skip)
    # The torch, Lightning, Hydra ... of the environment this suite runs in are reused (--no-deps); only zoo is new.
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        tmp_path / "dist",
        source,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("transformer_zoo-*.whl")
    env_dir = tmp_path / "env"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # Not --system-site-packages: that is the base interpreter's, which on a fresh machine has none of the
    # dependencies. A .pth file appends this suite's own site-packages instead. Paths named in a .pth are not
    # processed as site directories, so the editable install of zoo found there stays inactive: zoo comes only from
    # the wheel (asserted below).
    env_site = Path(venv_purelib(env_dir))
    suite_dirs = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (env_site / "zz_suite_packages.pth").write_text("".join(f"{d}\n" for d in suite_dirs))
    run(python, "-m", "pip", "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # No data directory and no network: the shipped text must be what trains.
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_DATA_DIR", "PYTHONPATH")}
    env.update(ZOO_OFFLINE="1", ZOO_CACHE_DIR=str(tmp_path / "cache"), WANDB_MODE="offline")
    where = run(python, "-c", "import zoo; print(zoo.__file__)", cwd=elsewhere, env=env).stdout.strip()
    assert Path(where).is_relative_to(env_dir), f"zoo imported from {where}, not from the wheel"
    # The modelling code a remote-code export writes (templates, and zoo's own modules it copies) and the
    # two-vocabulary tokenizer's class (package data, read as text) are in the wheel.
    read = (
        "from importlib import resources; from zoo.interop.remote_code import REMOTE_FILES, template; "
        "from zoo.interop.hf_tokenizer import TRANSLATION_CODE; "
        "code = (resources.files('zoo.interop') / 'remote' / TRANSLATION_CODE).read_text(); "
        "print(min(len(template(f)) for f in REMOTE_FILES) * len(code))"
    )
    assert int(run(python, "-c", read, cwd=elsewhere, env=env).stdout) > 0

    job = run(env_dir / "bin" / "zoo-train", "--cfg", "job", cwd=elsewhere, env=env).stdout
    assert "zoo.tasks.CausalLMTask" in job and "shakespeare" in job

    run(env_dir / "bin" / "zoo-train", "debug=fdr", cwd=elsewhere, env=env)
    checkpoints = list((elsewhere / "logs").rglob("*.ckpt"))
    assert checkpoints, "the fast_dev_run wrote no checkpoint under ./logs of the directory it ran in"
    for script in ("zoo-eval", "zoo-generate", "zoo-export"):
        assert (env_dir / "bin" / script).is_file(), f"console script {script} missing from the wheel"
