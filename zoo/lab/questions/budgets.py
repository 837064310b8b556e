"""A question's budgets: the same sweep and checks at other lengths of training, so that the page can show which way
a verdict moves as the models train longer.

A question's config names its own budget and may declare others in its `lab:` section:

    lab:
      budget: steps600                      # the name of the budget the config itself runs at
      budgets:                              # other budgets: name -> the overrides that make it
        steps300: [trainer.max_steps=300, trainer.val_check_interval=150]

`python -m zoo.lab run <name> --budget steps300` runs the question's sweep with those overrides and `lab.budget=
steps300` (so every job's config, the report and the published block say which budget it is), into a sweep folder of
its own, logs/lab_<name>/budget_steps300/multiruns/<time>. `--budget steps600` (the config's own) is a plain run.

A budget changes how long the models train, nothing else: not the question (experiment, lab.*), not where the sweep
is written (hydra.sweep.*), and not the grid the checks select on (the keys of hydra.sweeper.params), else the
columns of the outcome-against-budget table would not compare the same checks."""

from __future__ import annotations

import re

NAME = re.compile(r"^[A-Za-z0-9_]+$")  # goes into folder names, document markers and a command-line option
# Set by `run --budget` itself, or not a budget's to change (see above).
FORBIDDEN_PREFIXES = ("experiment", "lab.", "hydra.sweep.", "hydra.sweeper.")


def budgets(name: str, lab: dict, swept: list[str] = ()) -> dict[str, list[str]]:
    """The question's declared budgets {name: overrides} (empty when it declares none), checked: a one-line error
    that names the question and the bad key otherwise. `swept`: the question's swept parameters."""
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


def swept_parameters(name: str) -> list[str]:
    """The parameters the question's config sweeps (hydra.sweeper.params), the seed among them."""
    from .configs import question_config_params

    return list(question_config_params(name))


def question_budgets(name: str) -> dict[str, list[str]]:
    """The budgets of a question by its name, checked against its config's grid."""
    from .configs import question

    return budgets(name, question(name), swept_parameters(name))


def run_overrides(name: str, budget: str) -> list[str]:
    """What `run <name> --budget <budget>` adds to the command line: the budget's overrides, the budget's name for the
    jobs' configs, and a sweep folder of its own (claimed like every sweep folder, zoo.entry.resolvers.sweep_dir).
    The config's own budget adds nothing: it is the plain run."""
    from .configs import question

    lab = question(name)
    declared = budgets(name, lab, swept_parameters(name))
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
    """The budget a sweep ran at when it is one of the question's declared others (its block goes beside the main
    section); None for the question's own budget, or a question without budgets (the main section)."""
    budget = lab.get("budget")
    return budget if budget is not None and budget in (lab.get("budgets") or {}) else None


def budget_overrides(lab: dict) -> list[str]:
    """The command-line overrides a budget run added (they make it that budget, not a run with overrides)."""
    budget = run_budget(lab)
    return [*lab["budgets"][budget], f"lab.budget={budget}"] if budget else []
