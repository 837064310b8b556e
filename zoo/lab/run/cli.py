"""python -m zoo.lab list | report <sweep_dir> | run <name> [--quick] [--budget <b>] [--dry-run] [overrides...]
| publish <sweep_dir> | render | gpu [--cpu] [--only <a,b>] [overrides...]"""

from __future__ import annotations

import argparse
import signal
import sys
import textwrap

from ..questions.configs import ROOT, question, question_names
from .commands import check_run_overrides, run_forwarding_signals, train_command
from .gpu import cmd_gpu


def cmd_list(_args) -> int:
    for name in question_names():
        lab = question(name)
        print(f"{name}: {lab.get('title', '')}")
        print(
            textwrap.fill(
                f"claim: {lab.get('claim', '(none)')}", width=110, initial_indent="    ", subsequent_indent="    "
            )
        )
        print(f"    python -m zoo.lab run {name} [--quick]")
        if lab.get("budgets"):  # the others than the config's own, which is the plain run above
            print(f"    budgets: {lab.get('budget')} (the above), {', '.join(lab['budgets'])} (--budget <name>)")
    return 0


def cmd_report(args) -> int:
    from ..report.report import write_report

    path, outcome, plots = write_report(args.sweep_dir)
    print("### Verdict" + path.read_text().split("### Verdict", 1)[-1])  # the checks with their intervals and outcomes
    print(f"{path} (verdict: {outcome}; plots: {', '.join(p.name for p in plots) or 'none'})")
    return 0


def cmd_publish(args) -> int:
    from ..report.publish import publish

    name, outcome = publish(args.sweep_dir, args.docs)
    print(f"{args.docs}: measured results of '{name}' (verdict: {outcome})")
    return 0


def cmd_render(args) -> int:
    from ..report.publish import write_page

    print(f"{args.docs}: rendered from {write_page(args.docs)} published result(s)")
    return 0


def cmd_run(args) -> int:
    from ..decide.tuning import tune_config
    from ..questions.budgets import question_budgets, run_overrides
    from ..report.paper_overlay import overlay_config

    lab = question(args.name)
    question_budgets(args.name)  # a malformed lab.budgets fails here, whichever budget is asked for
    tune_config(lab)  # so does a malformed lab.tune, before a sweep is spent on it
    overlay_config(lab)  # and a malformed lab.paper_overlay
    check_run_overrides(args.name, args.overrides)
    # The budget first, then quick (a quick run of a budget is seconds long, and says which budget it stands for),
    # then the command line's own: the last value of a key wins, as on Hydra's command line.
    overrides = run_overrides(args.name, args.budget) if args.budget else []
    overrides += list(lab.get("quick", [])) + ["lab.mode=quick"] if args.quick else []
    command = [*train_command(), "-m", f"experiment=lab/{args.name}", *overrides, *args.overrides]
    if args.dry_run:
        print("would run: " + " ".join(command[1:]))
        return 0
    print("running: " + " ".join(command[1:]), flush=True)
    code, stopped_by = run_forwarding_signals(command)
    if stopped_by is not None:
        name = signal.Signals(stopped_by).name
        print(f"error: the sweep of lab question '{args.name}' was stopped by {name}", file=sys.stderr)
        return 128 + stopped_by  # 143 for SIGTERM, 130 for SIGINT: what a scheduler or shell reads
    if code != 0:
        print(
            f"error: the sweep of lab question '{args.name}' failed (exit {code}); see its output above",
            file=sys.stderr,
        )
        return code
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.lab",
        description="The lab: questions about Transformers, "
        "answered by experiment (zoo/conf/experiment/lab/<name>.yaml)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the questions and their claims").set_defaults(fn=cmd_list)
    report = sub.add_parser("report", help="report.md + plots + verdict of a finished lab sweep")
    report.add_argument("sweep_dir")
    report.set_defaults(fn=cmd_report)
    publish = sub.add_parser("publish", help="write a full sweep's result into docs/lab/ and render docs/lab.md")
    publish.add_argument("sweep_dir")
    publish.add_argument("--docs", default=str(ROOT / "docs" / "lab.md"), help="the lab document (docs/lab.md)")
    publish.set_defaults(fn=cmd_publish)
    render = sub.add_parser("render", help="render docs/lab.md from docs/lab/*/result.json")
    render.add_argument("docs", nargs="?", default=str(ROOT / "docs" / "lab.md"), help="the lab document")
    render.set_defaults(fn=cmd_render)
    run = sub.add_parser("run", help="run a question's sweep (train.py -m experiment=lab/<name>) and its report")
    run.add_argument("name")
    run.add_argument("--quick", action="store_true", help="a budget of seconds: tiny steps, few val batches")
    run.add_argument("--budget", help="one of the question's budgets (lab.budgets), in a sweep folder of its own")
    run.add_argument("--dry-run", action="store_true", help="print the command of the sweep; run nothing")
    run.set_defaults(fn=cmd_run)
    gpu = sub.add_parser("gpu", help="the questions that need a GPU, at their GPU budget, several jobs at once")
    gpu.add_argument(
        "--only", type=lambda s: s.split(","), metavar="A,B", help="these questions (default: zoo.lab.run.gpu.PLAN)"
    )
    gpu.add_argument("--jobs", type=int, default=16, help="jobs at once on the one GPU (default 16)")
    gpu.add_argument("--budget-min", type=float, default=12, help="skip a question whose estimate does not fit")
    gpu.add_argument("--out", help="folder of the sweeps, one per question (default logs/lab_gpu/<time>)")
    gpu.add_argument("--cpu", action="store_true", help="scaled down to seconds on a CPU (a test, a dry run)")
    gpu.add_argument("--dry-run", action="store_true", help="print each question's estimate and command; run nothing")
    gpu.set_defaults(fn=cmd_gpu)
    # Anything after the question's name (or gpu's options) that is not an option is a Hydra override.
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("run", "gpu") or any(e.startswith("-") for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra
    try:
        return args.fn(args)
    except ValueError as err:  # bad question name, not a lab sweep, a malformed check: one line
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the machine (permissions, a full disk) rather than the input: the path and the reason
        print(f"error: {err}", file=sys.stderr)
        return 1
