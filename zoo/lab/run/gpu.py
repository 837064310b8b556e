"""`python -m zoo.lab gpu`: the questions that outgrow a 2-core CPU, at their GPU budget (`lab.gpu`: overrides and a
guess of one job's seconds) on one GPU, several jobs at once (`hydra/launcher=parallel`), one question after another.
Each is an ordinary lab multirun (`python -m zoo.lab run <name>` with those overrides). `--cpu` shrinks the plan to
seconds on a CPU (the `quick` overrides on top, one seed, fp32): the test of this script, and a dry run."""

from __future__ import annotations

import math
import os
import time
from datetime import datetime
from pathlib import Path

from ..questions.configs import question, question_config_params
from .commands import check_run_overrides, run_forwarding_signals, train_command

# The questions that outgrow the CPU budget, in the order they run: the last one only if the time left allows it.
PLAN = ["ln_placement", "heads_multi30k", "dot_vs_additive"]
GPU = ["trainer.accelerator=gpu", "trainer.devices=1", "trainer.precision=bf16-mixed"]
# fp32 on CPU: bf16 autocast is slow on CPUs without native bf16 (docs/design.md, "Performance facts: machines vary").
CPU = ["trainer.accelerator=cpu", "trainer.devices=1", "trainer.precision=32-true", "seed=1", "lab.mode=scaled_down"]


def gpu_section(name: str) -> dict:
    gpu = question(name).get("gpu")
    if not gpu or not gpu.get("overrides"):
        raise ValueError(f"lab question '{name}' has no GPU budget (lab.gpu.overrides in its config)")
    return gpu


def overrides(name: str, n_jobs: int, cpu: bool, extra: list[str] = ()) -> list[str]:
    """The question's GPU overrides, then the device and launcher, then the command line's own (`extra`); one per
    key, the last (as on Hydra's command line)."""
    lab = question(name)
    plan = list(gpu_section(name)["overrides"])
    plan += [*lab.get("quick", []), *CPU] if cpu else GPU
    plan += ["hydra/launcher=parallel", f"hydra.launcher.n_jobs={n_jobs}", *extra]
    last = {o.partition("=")[0]: o for o in plan}
    return [o for o in plan if last[o.partition("=")[0]] == o]


def estimate_s(name: str, plan: list[str], n_jobs: int) -> tuple[int, float]:
    """(jobs, seconds): whole waves of n_jobs jobs at the config's guess of one job's time (`lab.gpu.job_s`)."""
    params = {k: str(v) for k, v in question_config_params(name).items()}
    params.update(o.split("=", 1) for o in plan if "=" in o and not o.startswith("hydra"))
    jobs = math.prod(len(v.split(",")) for v in params.values())
    return jobs, math.ceil(jobs / n_jobs) * float(gpu_section(name).get("job_s", 60))


def prepare_data(name: str) -> None:
    """The question's tokenizer and encoded splits built once before its jobs start (else every job of the first
    wave builds them); a failure is only a note: the jobs then prepare the data themselves, and say what is wrong."""
    from hydra.utils import instantiate

    from ..questions.configs import composed_config

    try:
        instantiate(composed_config(name)["data"]).prepare_data()
    except Exception as err:  # noqa: BLE001 - see above: the jobs report the real error
        print(f"note: {name}'s data not prepared ahead ({err}); its jobs prepare it themselves", flush=True)


def run_question(name: str, plan: list[str], sweep_dir: Path) -> tuple[int, str]:
    """Run one question's sweep and report it: (exit status of the sweep, a line that says how it went)."""
    from ..decide.sweep import load_sweep
    from ..report.report import write_report

    args = [*plan, f"hydra.sweep.dir={sweep_dir}"]
    check_run_overrides(name, args)
    command = [*train_command(), "-m", f"experiment=lab/{name}", *args]
    prepare_data(name)
    print("running: python -m zoo.lab run " + " ".join([name, *args]), flush=True)
    code, stopped_by = run_forwarding_signals(command)
    if stopped_by is not None:
        return 128 + stopped_by, f"stopped by signal {stopped_by}"
    try:  # the multirun wrote the report already; again here, so its verdict reaches this summary
        path, outcome, _ = write_report(sweep_dir)
        sweep = load_sweep(sweep_dir)
    except ValueError as err:  # e.g. every job failed: no report, but the other questions still run
        return code or 1, f"no report ({err})"
    failed = [f"job {u.name}: {u.why}" for u in sweep.unfinished]
    line = f"{len(sweep.jobs)} of {len(sweep.jobs) + len(failed)} jobs done, verdict: {outcome} ({path})"
    return code, line + "".join(f"\n    {f}" for f in failed)


def _check_machine(cpu: bool) -> None:
    import importlib.util

    import torch

    if importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is None:
        raise ValueError("the parallel jobs need Hydra's joblib launcher: pip install 'transformer-zoo[sweep]'")
    if not cpu and not torch.cuda.is_available():
        raise ValueError("no CUDA GPU on this machine: run it on one, or pass --cpu for the scaled-down run")


def cmd_gpu(args) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: run at least one job at a time")
    names = args.only or PLAN
    for name in names:
        gpu_section(name)  # every question named has a GPU budget, before anything runs
    out = Path(args.out or f"logs/lab_gpu/{datetime.now():%Y-%m-%d_%H-%M-%S}")
    if not args.dry_run:
        _check_machine(args.cpu)
    # A job is mostly Python driving small kernels: its share of the cores, not all of them each.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.jobs)))
    started, results = time.monotonic(), {}
    for name in names:
        plan = overrides(name, args.jobs, args.cpu, args.overrides)
        jobs, guess = estimate_s(name, plan, args.jobs)
        left = args.budget_min * 60 - (time.monotonic() - started)
        print(
            f"== {name}: {jobs} jobs, {args.jobs} at a time; estimate on one H100/H200 {guess / 60:.1f} min "
            f"(a guess from lab.gpu.job_s, not yet measured), {max(left, 0) / 60:.1f} min of the budget left",
            flush=True,
        )
        if args.dry_run:
            print("would run: python -m zoo.lab run " + " ".join([name, *plan, f"hydra.sweep.dir={out / name}"]))
            continue
        if not args.cpu and guess > left:  # the scaled-down run is the test: it runs every question it is given
            results[name] = (0, f"skipped: the estimate does not fit the {args.budget_min:g} min budget")
            print(f"== {name}: {results[name][1]}", flush=True)
            continue
        try:
            results[name] = run_question(name, plan, out / name)
        except ValueError as err:  # e.g. its folder holds an earlier sweep: the next questions still run
            results[name] = (2, f"not run: {err}")
        print(f"== {name}: {results[name][1]}", flush=True)
        if results[name][0] >= 128:  # stopped by a signal: the run as a whole stops
            break
    if args.dry_run:
        return 0
    print(f"\nlab gpu run in {out} ({(time.monotonic() - started) / 60:.1f} min):")
    for name, (code, line) in results.items():
        print(f"  {name}: {'ok' if code == 0 else f'exit {code}'}: {line}")
    print(f"publish each with: python -m zoo.lab publish {out}/<question>")
    return max((code for code, _ in results.values()), default=0)
