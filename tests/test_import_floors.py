"""The import floors of docs/design.md, read from the source (ast), not from what happens to be imported at run time:
core <- models <- optim/checkpointing/callbacks/strategies <- tasks <- lab <- entry, with interop beside tasks
above models (importing core, models and data only, none of the floor below tasks); data beside models, importing
neither models nor what sits above them; the four packages of the floor below tasks import each other freely; the
lab imported only by the entries and the top-level scripts. No import runs back up a floor."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

ENTRY = "entry"  # zoo/entry, the zoo/*.py shims (python -m zoo.export) and the top-level scripts
# What each package of zoo may import besides itself, and the rule a violation quotes.
# The floor between models and tasks: what the LightningModules use but do not define (optimizers and schedules,
# checkpoint files, callbacks, the sharded strategy). Its packages may import each other.
TRAINING_PARTS = {"optim", "checkpointing", "callbacks", "strategies"}
TRAINING_PARTS_RULE = (
    "zoo/optim, zoo/checkpointing, zoo/callbacks and zoo/strategies import only zoo/core, zoo/models, zoo/data "
    "and each other"
)
ALLOWED = {
    "core": (set(), "zoo/core imports nothing of zoo"),
    "conf": (set(), "zoo/conf holds the Hydra configs and imports nothing"),
    "models": ({"core"}, "zoo/models imports only zoo/core"),
    "data": ({"core"}, "zoo/data imports neither models nor tasks (nor anything above them)"),
    **{part: ({"core", "models", "data", *TRAINING_PARTS}, TRAINING_PARTS_RULE) for part in TRAINING_PARTS},
    "tasks": ({"core", "models", "interop", "data", *TRAINING_PARTS}, "zoo/tasks sits below the lab and the entries"),
    # interop reads and writes weight files: it needs the models, never the LightningModules above them
    "interop": ({"core", "models", "data"}, "zoo/interop imports only zoo/core, zoo/models and zoo/data"),
    "lab": ({"core", "models", "tasks", "interop", "data", *TRAINING_PARTS}, "zoo/lab sits below the entries"),
    ENTRY: ({"core", "models", "tasks", "interop", "data", "lab", *TRAINING_PARTS}, ""),
}
LAB_RULE = "zoo/lab is imported only by zoo/entry and the top-level scripts"


def package_of(path: Path, root: Path) -> str:
    """The floor a file belongs to: zoo/<package>/..., or the entry floor for everything on top."""
    parts = path.relative_to(root).parts
    if parts[0] == "zoo" and len(parts) > 2:
        return parts[1]
    return ENTRY


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for every import in the file, relative imports resolved against its package."""
    rel = path.relative_to(root).with_suffix("").parts
    package = list(rel[:-1])  # the package a relative import starts from (also right for __init__.py)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                # `from . import x` may name a submodule: count x as the module imported.
                found += (
                    [(node.lineno, f"{module}.{a.name}") for a in node.names]
                    if not node.module
                    else [(node.lineno, module)]
                )
            else:
                found.append((node.lineno, node.module))
    return found


def violations(root: Path) -> list[str]:
    files = [*sorted((root / "zoo").rglob("*.py")), *sorted(root.glob("*.py"))]
    files += sorted((root / "benchmarks").rglob("*.py"))
    problems = []
    for path in files:
        source = package_of(path, root)
        allowed, rule = ALLOWED[source]
        for line, module in imported_modules(path, root):
            parts = module.split(".")
            if parts[0] != "zoo" or len(parts) < 2 or not (root / "zoo" / parts[1]).is_dir():
                continue  # not zoo, or `import zoo` / a zoo/*.py module (the version, the -m shims)
            target = parts[1]
            where = f"{path.relative_to(root)}:{line}"
            if target == "lab" and source not in ("lab", ENTRY):
                problems.append(f"{where}: imports {module}; {LAB_RULE}")
            elif target != source and target not in allowed:
                problems.append(f"{where}: imports {module}; {rule}")
    return problems


def test_the_code_keeps_its_floors():
    problems = violations(ROOT)
    assert not problems, "import floors broken (docs/design.md):\n" + "\n".join(problems)


def test_the_scan_sees_the_real_imports():
    """The checker is not vacuous: it resolves relative imports and finds the known edges of the tree."""
    edges = {
        (package_of(p, ROOT), m.split(".")[1])
        for p in (ROOT / "zoo").rglob("*.py")
        for _, m in imported_modules(p, ROOT)
        if m.startswith("zoo.") and m.count(".") >= 1
    }
    assert {("models", "core"), ("tasks", "models"), ("interop", "models"), ("entry", "interop")} <= edges
    below_tasks = {("tasks", "optim"), ("tasks", "checkpointing"), ("checkpointing", "models"), ("entry", "callbacks")}
    assert below_tasks <= edges
    gpt = [m for _, m in imported_modules(ROOT / "zoo" / "models" / "gpt.py", ROOT)]
    assert any(m.startswith("zoo.core") for m in gpt)


def test_each_kind_of_violation_is_named_with_file_line_and_rule(tmp_path):
    def write(relpath: str, text: str) -> None:
        path = tmp_path / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    for package in ("core", "models", "data", "tasks", "interop", "lab", "entry"):
        write(f"zoo/{package}/__init__.py", "")
    write("zoo/core/attention.py", "import torch\nfrom zoo.models import gpt\n")
    write("zoo/models/gpt.py", "from ..core import attention\nfrom ..tasks.base import Task\n")
    write("zoo/data/lm.py", "from .sources import x\n\n\ndef f():\n    from zoo.models.gpt import GPT\n")
    write("zoo/tasks/base.py", "from ..models import gpt\nfrom ..lab import probes\n")
    write("zoo/interop/hf.py", "from zoo import __version__\nfrom zoo.entry.train import main\n")
    write("zoo/entry/train.py", "from zoo.lab import probes\nfrom zoo.tasks import base\n")
    write("train.py", "from zoo.lab.report import write\n")
    problems = violations(tmp_path)
    assert problems == [
        "zoo/core/attention.py:2: imports zoo.models; zoo/core imports nothing of zoo",
        "zoo/data/lm.py:5: imports zoo.models.gpt; zoo/data imports neither models nor tasks (nor anything above them)",
        "zoo/interop/hf.py:2: imports zoo.entry.train; zoo/interop imports only zoo/core, zoo/models and zoo/data",
        "zoo/models/gpt.py:2: imports zoo.tasks.base; zoo/models imports only zoo/core",
        f"zoo/tasks/base.py:2: imports zoo.lab; {LAB_RULE}",
    ]


def test_an_import_from_interop_up_to_tasks_is_refused(tmp_path):
    """The rule itself is tested: a tree whose interop imports from tasks (even inside a function) is reported."""
    for package in ("core", "models", "tasks", "interop"):
        (tmp_path / "zoo" / package).mkdir(parents=True)
        (tmp_path / "zoo" / package / "__init__.py").write_text("")
    (tmp_path / "zoo" / "interop" / "files.py").write_text(
        "def load(path):\n    from zoo.tasks.base import ZooTask\n\n    return ZooTask.load_from_checkpoint(path)\n",
    )
    assert violations(tmp_path) == [
        "zoo/interop/files.py:2: imports zoo.tasks.base; zoo/interop imports only zoo/core, zoo/models and zoo/data"
    ]


def test_the_floor_below_tasks_imports_down_and_sideways_only(tmp_path):
    """optim, checkpointing, callbacks and strategies may import each other and the floors below, never tasks;
    tasks and the entries may import them, interop may not."""
    for package in ("core", "models", "data", "tasks", "interop", *sorted(TRAINING_PARTS), "entry"):
        (tmp_path / "zoo" / package).mkdir(parents=True)
        (tmp_path / "zoo" / package / "__init__.py").write_text("")
    files = {
        "zoo/optim/muon.py": "from zoo.core import Block\nfrom zoo.strategies.fsdp import is_sharded\n",
        "zoo/checkpointing/reading.py": "from zoo.models import ZooModel\nfrom ..optim.former_names import x\n",
        "zoo/callbacks/monitor.py": "from zoo.tasks.base import ZooTask\n",
        "zoo/strategies/fsdp.py": "from zoo.interop.hf import y\n",
        "zoo/tasks/base.py": "from zoo.optim.build import b\nfrom zoo.callbacks import c\n",
        "zoo/interop/files.py": "from zoo.checkpointing.reading import read_checkpoint\n",
        "zoo/entry/train.py": "from zoo.strategies.fsdp import FSDP2Strategy\n",
    }
    for relpath, text in files.items():
        (tmp_path / relpath).write_text(text)
    assert violations(tmp_path) == [
        f"zoo/callbacks/monitor.py:1: imports zoo.tasks.base; {TRAINING_PARTS_RULE}",
        "zoo/interop/files.py:1: imports zoo.checkpointing.reading; zoo/interop imports only zoo/core, zoo/models "
        "and zoo/data",
        f"zoo/strategies/fsdp.py:1: imports zoo.interop.hf; {TRAINING_PARTS_RULE}",
    ]
