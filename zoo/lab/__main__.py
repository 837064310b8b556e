"""python -m zoo.lab list | report <sweep_dir> | run <name> [--quick] [overrides...]"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from .questions import ROOT, question, question_names


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
    return 0


def cmd_report(args) -> int:
    from .report import write_report

    path, outcome, plots = write_report(args.sweep_dir)
    print(f"{path} (verdict: {outcome}; plots: {', '.join(p.name for p in plots) or 'none'})")
    return 0


def train_command() -> list[str]:
    """The checkout's train.py, or the installed `zoo-train` script (a Python file, so DDP ranks can re-run it)."""
    script = ROOT / "train.py"
    if not script.is_file():
        beside_python = Path(sys.executable).with_name("zoo-train")  # a venv's bin (PATH may hold a shell shim)
        script = beside_python if beside_python.is_file() else Path(shutil.which("zoo-train") or beside_python)
    return [sys.executable, str(script)]


def cmd_publish(args) -> int:
    from .publish import publish

    name, outcome = publish(args.sweep_dir, args.docs)
    print(f"{args.docs}: measured results of '{name}' (verdict: {outcome})")
    return 0


def cmd_run(args) -> int:
    lab = question(args.name)
    overrides = list(lab.get("quick", [])) + ["lab.mode=quick"] if args.quick else []
    command = [*train_command(), "-m", f"experiment=lab/{args.name}", *overrides, *args.overrides]
    print("running: " + " ".join(command[1:]), flush=True)
    done = subprocess.run(command, cwd=os.getcwd())
    if done.returncode != 0:
        print(
            f"error: the sweep of lab question '{args.name}' failed (exit {done.returncode}); see its output above",
            file=sys.stderr,
        )
        return done.returncode
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
    publish = sub.add_parser("publish", help="put a full sweep's table, plots and verdict into docs/lab.md")
    publish.add_argument("sweep_dir")
    publish.add_argument("--docs", default=str(ROOT / "docs" / "lab.md"), help="the lab document (docs/lab.md)")
    publish.set_defaults(fn=cmd_publish)
    run = sub.add_parser("run", help="run a question's sweep (train.py -m experiment=lab/<name>) and its report")
    run.add_argument("name")
    run.add_argument("--quick", action="store_true", help="a budget of seconds: tiny steps, few val batches")
    run.set_defaults(fn=cmd_run)
    # Anything after the question's name that is not an option is a Hydra override (e.g. hydra.sweep.dir=...).
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "run" or any(e.startswith("-") for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra
    try:
        return args.fn(args)
    except ValueError as err:  # bad question name, not a lab sweep, a malformed check: one line
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
