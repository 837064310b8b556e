"""pyproject.toml declares what the code uses: every third-party import of the package (and of the tests and
benchmarks, against the dev extra) maps to a declared distribution, floors cover the APIs used, licence metadata."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import ROOT

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11; the check itself needs no particular Python

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REMOTE_TEMPLATES = ROOT / "zoo" / "interop" / "remote"  # see test_every_package_import_is_a_declared_dependency
# Oldest releases with an API the code calls (raise a floor here and in pyproject together).
API_FLOORS = {
    "torch": ("2.9", "torch.optim.Muon; torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)"),
    "torchvision": ("0.18", "ImageFolder(allow_empty=True)"),
    "lightning": ("2.1", "ThroughputMonitor, lightning.fabric.utilities.throughput.get_available_flops"),
    "hydra-core": ("1.3", "hydra.experimental.callback.Callback, version_base=1.3"),
}
# Imported by the package only where an optional feature is used, and declared in that feature's extra instead of
# the dependencies: module -> extra. zoo must still import without them (tests/test_litdata_stream.py).
EXTRA_IMPORTS = {"litdata": "litdata"}
# Declared but reached through configs rather than imports.
USED_BY_CONFIG = {"tensorboard": "logger=tensorboard (lightning's TensorBoardLogger)"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extra: str | None = None) -> dict[str, Requirement]:
    """Declared requirements by canonical name; an extra includes what it pulls in of this project's extras."""
    reqs = [Requirement(r) for r in PROJECT["project"]["dependencies"]]
    if extra is not None:
        pending = [extra]
        while pending:
            for r in map(Requirement, PROJECT["project"]["optional-dependencies"][pending.pop()]):
                if canonical(r.name) == canonical(PROJECT["project"]["name"]):
                    pending.extend(r.extras)
                else:
                    reqs.append(r)
    return {canonical(r.name): r for r in reqs}


def local_names(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def third_party_imports(files: list[Path], local: set[str]) -> dict[str, list[str]]:
    """Top-level module -> the files (and lines) importing it, for modules neither stdlib nor local."""
    found: dict[str, list[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local and top != "__main__":
                    found.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def config_targets() -> dict[str, list[str]]:
    """Top-level modules named by `_target_` in the configs (the sweep/launcher plugins belong to their extras)."""
    found: dict[str, list[str]] = {}
    for path in (ROOT / "zoo" / "conf").rglob("*.yaml"):
        if {"hparams_search", "hydra"} & set(path.relative_to(ROOT / "zoo" / "conf").parts[:-1]):
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            match = re.match(r"\s*_target_:\s*([A-Za-z_][\w.]*)", line)
            if match and not match.group(1).startswith("zoo."):
                found.setdefault(match.group(1).split(".")[0], []).append(f"{path.relative_to(ROOT)}:{lineno}")
    return found


def undeclared(modules: dict[str, list[str]], declared: dict[str, Requirement]) -> list[str]:
    provided_by = importlib.metadata.packages_distributions()
    problems = []
    for module, where in sorted(modules.items()):
        dists = {canonical(d) for d in provided_by.get(module, [])}
        if not dists:
            problems.append(f"{module} (imported at {where[0]}) is not installed, so its distribution is unknown")
        elif not dists & set(declared):
            problems.append(
                f"{module} (imported at {', '.join(where[:3])}) comes from {', '.join(sorted(dists))}, "
                "which pyproject.toml does not declare"
            )
    return problems


def test_every_package_import_is_a_declared_dependency():
    files = sorted((ROOT / "zoo").rglob("*.py")) + [ROOT / f for f in ("train.py", "eval.py", "generate.py")]
    # zoo/interop/remote holds templates that an export copies out for transformers (trust_remote_code): zoo never
    # imports them, so their transformers import is the reader's, not a dependency of zoo.
    files = [f for f in files if REMOTE_TEMPLATES not in f.parents]
    imports = third_party_imports([f for f in files if f.is_file()], {"zoo"})
    assert {"torch", "lightning", "PIL", "omegaconf", "rich"} <= set(imports)  # the scan sees real imports
    declared = requirements()
    optional = {m: imports.pop(m) for m in EXTRA_IMPORTS if m in imports}
    assert set(optional) == set(EXTRA_IMPORTS), "an optional import is gone: drop it from EXTRA_IMPORTS"
    problems = undeclared(imports, declared) + undeclared(config_targets(), declared)
    for module, where in optional.items():
        extra = EXTRA_IMPORTS[module]
        if importlib.util.find_spec(module) is not None:
            problems += undeclared({module: where}, requirements(extra))
        elif canonical(module) not in requirements(extra):  # not installed here: its distribution is its name
            problems.append(f"{module} (imported at {where[0]}) is not in the [{extra}] extra")
        if canonical(module) in declared:
            problems.append(f"{module} is a dependency of every install; it belongs in the [{extra}] extra only")
    assert not problems, "\n".join(problems)
    # And nothing declared is unused: each declared distribution provides an imported module, or a config uses it.
    provided_by = importlib.metadata.packages_distributions()
    used = {canonical(d) for m in [*imports, *config_targets()] for d in provided_by.get(m, [])}
    assert set(declared) - used - set(USED_BY_CONFIG) == set()


def test_tests_and_benchmarks_imports_are_in_the_dev_extra():
    files = sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py"))
    local = {"zoo", "benchmarks"} | local_names(ROOT / "tests")
    imports = third_party_imports(files, local)
    assert {"pytest", "transformers"} <= set(imports)
    problems = undeclared(imports, requirements("dev"))
    assert not problems, "\n".join(problems)


def test_floors_cover_the_apis_used_and_the_installed_versions_meet_them():
    declared = requirements("dev")
    for name, (floor, api) in API_FLOORS.items():
        specifier = declared[name].specifier
        lowest = min((Version(s.version) for s in specifier if s.operator in (">=", "==")), default=None)
        message = f"{name}: declared '{specifier}', but {api} needs >= {floor}"
        assert lowest is not None and lowest >= Version(floor), message
    for name, req in declared.items():
        assert req.specifier, f"{name} has no minimum version"
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            assert name not in requirements(), f"{name} is a runtime dependency but not installed"
            continue  # a dev tool not installed here (e.g. pre-commit)
        assert req.specifier.contains(installed, prereleases=True), f"installed {name} {installed} !~ {req.specifier}"


def test_licence_is_an_spdx_string_with_a_new_enough_setuptools():
    assert PROJECT["project"]["license"] == "MIT"
    setuptools = next(Requirement(r) for r in PROJECT["build-system"]["requires"] if r.startswith("setuptools"))
    assert setuptools.specifier.contains("77") and not setuptools.specifier.contains("76.9")
    package_data = PROJECT["tool"]["setuptools"]["package-data"]["zoo.data.builtin"]
    assert any(Path("tinyshakespeare.txt.gz").match(pattern) for pattern in package_data)
    templates = PROJECT["tool"]["setuptools"]["package-data"]["zoo.interop"]
    for template in REMOTE_TEMPLATES.glob("*.py"):  # the remote-code exports' modelling code ships in the wheel
        assert any(template.relative_to(ROOT / "zoo" / "interop").match(pattern) for pattern in templates)
