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


def test_the_training_entry_knows_nothing_of_the_lab():
    """The lab plugs into training through config (its callbacks, a `measure` target); train.py imports none of it."""
    for path in (ROOT / "zoo" / "entry" / "train.py", ROOT / "train.py"):
        lab = [f"{path.name}:{line} {m}" for line, m in imported_modules(path, ROOT) if m.startswith("zoo.lab")]
        assert not lab, lab


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
    write("train.py", "from zoo.lab.report.report import write\n")
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


# ---- no import circles, and the lab's rooms import one way ---------------------------------------------------------

# The rooms of zoo/lab, lowest first: each imports only the rooms before it (docs/design.md, zoo/lab/__init__.py).
LAB_ROOMS = ("probes", "measure", "decide", "questions", "report", "run")
LAB_FILES = {"__init__.py", "__main__.py"}  # what zoo/lab holds beside its rooms


def module_of(path: Path, root: Path) -> str:
    """The dotted module a file is: zoo/lab/run/cli.py -> zoo.lab.run.cli, a package's __init__.py -> the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, dict[str, str]]:
    """zoo module -> {zoo module it imports: where (file:line)}, from every import in the file, those inside functions
    too (a circle closed by an import inside a function is still a circle: the two modules cannot be read, tested or
    moved apart). `from package import name` counts as an import of the module package.name where there is one."""
    files = {module_of(p, root): p for p in sorted((root / "zoo").rglob("*.py"))}
    graph: dict[str, dict[str, str]] = {}
    for module, path in files.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                base = base if node.level else node.module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for target in targets:
                if target in files and target != module:
                    edges.setdefault(target, f"{path.relative_to(root)}:{node.lineno}")
    return graph


def import_circles(root: Path) -> list[str]:
    """Each set of zoo modules that import each other round a circle (a strongly connected component of the import
    graph, Tarjan's algorithm), with the imports that close it."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, {}):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [
        "import circle: "
        + "; ".join(f"{where} {a} imports {b}" for a in sorted(c) for b, where in sorted(graph[a].items()) if b in c)
        for c in found
    ]


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["zoo", "lab"] else None


def lab_room_violations(root: Path) -> list[str]:
    """Every import from a room of zoo/lab into a room above it (or into itself through another room), and every
    file of zoo/lab that is in no room."""
    holds = f"zoo/lab holds only {', '.join(sorted(LAB_FILES))} and its rooms ({', '.join(LAB_ROOMS)})"
    problems = [
        f"{p.relative_to(root)}: {holds}"
        for p in sorted((root / "zoo" / "lab").iterdir())
        if (p.suffix == ".py" and p.name not in LAB_FILES) or (p.is_dir() and p.name not in (*LAB_ROOMS, "__pycache__"))
    ]
    for module, edges in sorted(import_graph(root).items()):
        source = room_of(module)
        if source not in LAB_ROOMS:
            continue
        allowed = LAB_ROOMS[: LAB_ROOMS.index(source) + 1]
        for target, where in sorted(edges.items(), key=lambda e: e[1]):
            room = room_of(target)
            if room is not None and room not in allowed:
                below = ", ".join(LAB_ROOMS[: LAB_ROOMS.index(source)])
                rule = f"imports only {below} of the lab" if below else "imports no other room of the lab"
                problems.append(f"{where}: imports {target}; zoo/lab/{source} {rule}")
    return problems


def test_no_module_of_zoo_imports_round_a_circle():
    circles = import_circles(ROOT)
    assert not circles, "\n".join(circles)


def test_the_rooms_of_the_lab_import_one_way():
    problems = lab_room_violations(ROOT)
    assert not problems, "the lab's rooms import one way (zoo/lab/__init__.py):\n" + "\n".join(problems)
    assert {room_of(m) for m in import_graph(ROOT)} >= set(LAB_ROOMS)  # the rooms are there and the scan sees them


def test_a_circle_closed_inside_a_function_is_found(tmp_path):
    """The checker is not vacuous: a circle through an import inside a function, through `from package import module`
    and through a relative import is reported with the imports that close it; a chain that does not close is not."""
    files = {
        "zoo/__init__.py": "",
        "zoo/lab/__init__.py": "",
        "zoo/lab/run/__init__.py": "",
        "zoo/lab/run/cli.py": "from .gpu import run_all\n\n\ndef train_command():\n    return []\n",
        "zoo/lab/run/gpu.py": "def run_all():\n    from zoo.lab.run import cli\n\n    return cli.train_command()\n",
        "zoo/lab/report/__init__.py": "",
        "zoo/lab/report/plots.py": "from .overlay import draw\n",
        "zoo/lab/report/overlay.py": "from .pyplot import plt\n\n\ndef draw():\n    pass\n",
        "zoo/lab/report/pyplot.py": "plt = None\n",
    }
    for relpath, text in files.items():
        (tmp_path / relpath).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relpath).write_text(text)
    assert import_circles(tmp_path) == [
        "import circle: zoo/lab/run/cli.py:1 zoo.lab.run.cli imports zoo.lab.run.gpu; "
        "zoo/lab/run/gpu.py:2 zoo.lab.run.gpu imports zoo.lab.run.cli"
    ]


def test_an_import_down_the_rooms_of_the_lab_is_refused(tmp_path):
    for room in ("decide", "report", "probes"):
        (tmp_path / "zoo" / "lab" / room).mkdir(parents=True)
        (tmp_path / "zoo" / "lab" / room / "__init__.py").write_text("")
    (tmp_path / "zoo" / "lab" / "__init__.py").write_text("")
    (tmp_path / "zoo" / "lab" / "report" / "plots.py").write_text("from ..decide.stats import t\n")
    (tmp_path / "zoo" / "lab" / "decide" / "stats.py").write_text(
        "t = 1\n\n\ndef f():\n    from zoo.lab.report import plots\n"
    )
    (tmp_path / "zoo" / "lab" / "probes" / "probes.py").write_text("from zoo.lab.decide import stats\n")
    (tmp_path / "zoo" / "lab" / "loose.py").write_text("")
    assert lab_room_violations(tmp_path) == [
        "zoo/lab/loose.py: zoo/lab holds only __init__.py, __main__.py and its rooms (probes, measure, decide, "
        "questions, report, run)",
        "zoo/lab/decide/stats.py:5: imports zoo.lab.report.plots; zoo/lab/decide imports only probes, measure of the "
        "lab",
        "zoo/lab/probes/probes.py:1: imports zoo.lab.decide.stats; zoo/lab/probes imports no other room of the lab",
    ]
