"""A question's budgets: the same sweep and checks at other lengths of training (docs/lab.md, "Outcome against
budget"). `lab.budget` names the config's own, `lab.budgets` the others, {name: [overrides]}, run by `python -m
zoo.lab run <name> --budget <b>` into a sweep folder of their own. A budget changes how long the models train,
nothing else: not the question (experiment, lab.*), the sweep folder (hydra.sweep.*) or the grid the checks select on
(hydra.sweeper.params), else the outcome-against-budget table would not compare the same checks."""

from __future__ import annotations

import re

from .configs import question, question_config_params

NAME = re.compile(r"^[A-Za-z0-9_]+$")  # goes into folder names, document markers and a command-line option
# Set by `run --budget` itself, or not a budget's to change (see above).
FORBIDDEN_PREFIXES = ("experiment", "lab.", "hydra.sweep.", "hydra.sweeper.")


def budgets(name: str, lab: dict, swept: list[str] = ()) -> dict[str, list[str]]:
    """The question's declared budgets {name: overrides}, checked. `swept`: the question's swept parameters."""
    declared = lab.get("budgets")
    if declared in (None, {}):
        return {}
    where = f"lab question '{name}'"
    if not isinstance(declared, dict):
        raise ValueError(
            f"{where}: lab.budgets must map a budget's name to its list of overrides "
            f"({{steps300: [trainer.max_steps=300]}}), got {type(declared).__name__}"
        )
    own = lab.get("budget")
    if not isinstance(own, str) or not NAME.match(own):
        raise ValueError(
            f"{where}: lab.budget must name the budget the config itself runs at (letters, digits, _), "
            f"e.g. steps600, when lab.budgets is given; got {own!r}"
        )
    checked = {}
    for budget, overrides in declared.items():
        key = f"lab.budgets.{budget}"
        if not isinstance(budget, str) or not NAME.match(budget):
            raise ValueError(f"{where}: {key}: a budget's name is letters, digits and _ (it names a folder)")
        if budget == own:
            raise ValueError(f"{where}: {key}: '{own}' is the config's own budget (lab.budget); it needs no overrides")
        if not isinstance(overrides, list) or not overrides:
            raise ValueError(f"{where}: {key} must be a non-empty list of overrides (key=value), got {overrides!r}")
        for override in overrides:
            if not isinstance(override, str) or "=" not in override:
                raise ValueError(f"{where}: {key}: {override!r} is not an override (key=value)")
            target = override.split("=", 1)[0].lstrip("+~")
            if target.startswith(FORBIDDEN_PREFIXES) or target in swept:
                raise ValueError(
                    f"{where}: {key}: '{override}' changes the question, its grid or its sweep folder; "
                    "a budget changes only how long the models train (steps, schedule, validation)"
                )
        checked[budget] = list(overrides)
    return checked


def question_budgets(name: str) -> dict[str, list[str]]:
    """The budgets of a question by its name, checked against its config's grid."""
    return budgets(name, question(name), list(question_config_params(name)))


def run_overrides(name: str, budget: str) -> list[str]:
    """What `run <name> --budget <budget>` adds to the command line: the budget's overrides, its name for the jobs'
    configs, and a sweep folder of its own (the `zoo.sweep_dir` resolver of zoo/entry/resolvers.py); the config's
    own budget adds nothing."""
    lab = question(name)
    declared = question_budgets(name)
    if budget == lab.get("budget") and declared:
        return []
    if budget not in declared:
        known = [lab["budget"], *declared] if declared else []
        listed = f"its budgets: {', '.join(known)}" if known else "it declares no budgets (lab.budgets in its config)"
        raise ValueError(f"lab question '{name}' has no budget '{budget}'; {listed}")
    folder = "${zoo.sweep_dir:${paths.log_dir}/${task_name}/budget_" + budget + "/multiruns,${now:%Y-%m-%d_%H-%M-%S}}"
    # quoted: the comma and the colons inside would otherwise read as a sweep and as grammar (Hydra's overrides)
    return [*declared[budget], f"lab.budget={budget}", f"hydra.sweep.dir='{folder}'"]


def run_budget(lab: dict) -> str | None:
    """The budget a sweep ran at when it is one of the question's declared others; None for its own budget."""
    budget = lab.get("budget")
    return budget if budget is not None and budget in (lab.get("budgets") or {}) else None


def budget_overrides(lab: dict) -> list[str]:
    """The command-line overrides a budget run added (they make it that budget, not a run with overrides)."""
    budget = run_budget(lab)
    return [*lab["budgets"][budget], f"lab.budget={budget}"] if budget else []
