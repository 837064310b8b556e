"""A question's budgets (issue 26, item 4): the config's `lab.budgets` is checked with one-line errors naming the
question and the key, `run --budget` adds exactly the budget's overrides, and publishing a question's budgets puts
them beside its section with an outcome-against-budget table computed from their numbers; publishing one again
replaces it.

The sweeps are made by hand in tmp_path as a lab multirun leaves them (test_lab_integrity.make_sweep); no training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from scipy import stats as scipy_stats
from test_lab_integrity import check, make_sweep
from test_lab_plots import lm_configs

from zoo.lab.decide.sweep import load_sweep
from zoo.lab.questions.budgets import budgets, question_budgets, run_overrides
from zoo.lab.questions.configs import QUESTIONS_DIR, question_names
from zoo.lab.report.page import SUMMARY_BEGIN, SUMMARY_END, run_text
from zoo.lab.report.publish import publish, run_facts
from zoo.lab.report.report import DECISION_JSON, write_report

# ---- the config ----------------------------------------------------------------------------------------------------

GOOD = {"budget": "steps600", "budgets": {"steps300": ["trainer.max_steps=300", "trainer.val_check_interval=150"]}}


@pytest.mark.parametrize(
    "lab, says",
    [
        ({"budget": "steps600", "budgets": ["trainer.max_steps=300"]}, "lab.budgets must map a budget's name"),
        ({"budgets": GOOD["budgets"]}, "lab.budget must name the budget the config itself runs at"),
        ({**GOOD, "budgets": {"300 steps": ["trainer.max_steps=300"]}}, "lab.budgets.300 steps: a budget's name"),
        ({**GOOD, "budgets": {"steps600": ["trainer.max_steps=600"]}}, "lab.budgets.steps600: 'steps600' is the"),
        ({**GOOD, "budgets": {"steps300": []}}, "lab.budgets.steps300 must be a non-empty list"),
        ({**GOOD, "budgets": {"steps300": "trainer.max_steps=300"}}, "lab.budgets.steps300 must be a non-empty list"),
        ({**GOOD, "budgets": {"steps300": ["trainer.max_steps"]}}, "lab.budgets.steps300: 'trainer.max_steps' is not"),
        ({**GOOD, "budgets": {"steps300": ["experiment=lab/qk_proj"]}}, "'experiment=lab/qk_proj' changes the"),
        ({**GOOD, "budgets": {"steps300": ["lab.mode=quick"]}}, "lab.budgets.steps300: 'lab.mode=quick' changes"),
        ({**GOOD, "budgets": {"steps300": ["hydra.sweep.dir=x"]}}, "'hydra.sweep.dir=x' changes the question"),
        ({**GOOD, "budgets": {"steps300": ["model.net.n_head=1,2"]}}, "'model.net.n_head=1,2' changes the question"),
    ],
)
def test_a_malformed_budget_is_a_one_line_error_naming_the_question_and_the_key(lab, says):
    with pytest.raises(ValueError) as error:
        budgets("heads", lab, swept=["model.net.n_head", "seed"])
    message = str(error.value)
    assert message.startswith("lab question 'heads': ") and says in message and "\n" not in message


def test_the_shipped_budgets_are_valid_and_the_four_questions_have_them():
    declared = {name: question_budgets(name) for name in question_names()}
    for name in ("heads", "activation", "residual", "ln_placement"):
        assert declared[name], name
        steps = [int(o.split("=")[1]) for b in declared[name].values() for o in b if o.startswith("trainer.max_steps=")]
        own = OmegaConf.load(QUESTIONS_DIR / f"{name}.yaml").trainer.max_steps
        assert len(steps) == len(declared[name]) and own not in steps  # each budget trains a different length


# ---- run --budget -------------------------------------------------------------------------------------------------


def compose_run(name: str, overrides: list[str]):
    """The job config `run` would give (the sweep folder aside: claiming it makes a folder)."""
    GlobalHydra.instance().clear()
    kept = [o for o in overrides if not o.startswith("hydra.sweep.dir=")]
    with initialize_config_dir(config_dir=str(QUESTIONS_DIR.parents[1]), version_base="1.3"):
        return compose(config_name="train", overrides=[f"experiment=lab/{name}", *kept])


def test_run_budget_adds_the_budgets_overrides_its_name_and_its_own_sweep_folder(capsys):
    from zoo.lab.run.cli import main

    # `python -m zoo.lab run heads --budget steps500 --dry-run`, by its main() in this process
    assert main(["run", "heads", "--budget", "steps500", "--dry-run"]) == 0, capsys.readouterr().err
    line = capsys.readouterr().out.strip()
    assert line.startswith("would run: ") and "-m experiment=lab/heads trainer.max_steps=500" in line
    assert "lab.budget=steps500" in line and "${task_name}/budget_steps500/multiruns" in line

    config = compose_run("heads", run_overrides("heads", "steps500"))
    assert (config.trainer.max_steps, config.trainer.val_check_interval, config.lab.budget) == (500, 250, "steps500")
    assert run_overrides("heads", "steps1000") == []  # the config's own budget is the plain run
    plain = compose_run("heads", [])
    assert (plain.trainer.max_steps, plain.lab.budget) == (1000, "steps1000")
    # a quick run of a budget: quick's steps win (they come later), and its jobs still say which budget it stands for
    quick = compose_run("heads", [*run_overrides("heads", "steps500"), "trainer.max_steps=6", "lab.mode=quick"])
    assert (quick.trainer.max_steps, quick.lab.budget, quick.lab.mode) == (6, "steps500", "quick")

    with pytest.raises(ValueError, match="'heads' has no budget 'steps9'; its budgets: steps1000, steps250, steps500"):
        run_overrides("heads", "steps9")
    with pytest.raises(ValueError, match="'scaling' has no budget 'steps300'; it declares no budgets"):
        run_overrides("scaling", "steps300")


# ---- publishing budgets -------------------------------------------------------------------------------------------

A = [1.0, 1.1, 1.2, 1.3, 1.4]
# b - a per seed at each budget: nothing to tell at the short one, reversed at the own (mid) one, clear at the long one
DIFFERENCES = {
    "short": [0.02, -0.02, 0.01, -0.01, 0.01],
    "mid": [-0.3, -0.32, -0.29, -0.31, -0.3],
    "long": [0.5, 0.52, 0.49, 0.51, 0.5],
}
STEPS = {"short": 100, "mid": 200, "long": 400}  # named so that their alphabetical order is not the order of work
DECLARED = {"short": ["trainer.max_steps=100"], "long": ["trainer.max_steps=400"]}


def budget_sweep(root: Path, budget: str, differences: list[float] | None = None, extra: tuple[str, ...] = ()) -> Path:
    """A 5-seed sweep of `a < b` at one budget of a question whose own budget is `mid`: a `--budget` run adds the
    budget's overrides and its name to the command line, then the command's own (`extra`); the own one is the plain
    run."""
    b = [x + d for x, d in zip(A, differences or DIFFERENCES[budget])]
    task = (*DECLARED[budget], f"lab.budget={budget}", *extra) if budget in DECLARED else extra
    make_sweep(root, {"a": A, "b": b}, [check("a < b", "less", "a", "b")], task=task)
    for path in [root / "multirun.yaml", *root.glob("*/config_resolved.yaml")]:
        config = OmegaConf.load(path)
        config.lab.budget, config.lab.budgets = budget, DECLARED
        OmegaConf.save(config, path)
    lm_configs(root, steps=STEPS[budget])
    return root


def docs_with_summary(folder: Path) -> Path:
    docs = folder / "docs" / "lab.md"
    docs.parent.mkdir(parents=True)
    main = "## The question\n\n### Measured\n\n<!-- measured:handmade -->\nPending.\n<!-- /measured:handmade -->\n"
    docs.write_text(f"# Lab\n\n{SUMMARY_BEGIN}\n{SUMMARY_END}\n\n{main}\nWhat the numbers say.\n")
    return docs


def by_hand(differences: list[float]) -> str:
    """The cell of `a < b` from scipy's paired t interval of b - a over the seeds."""
    b = [x + d for x, d in zip(A, differences)]
    interval = scipy_stats.ttest_rel(b, A).confidence_interval(0.95)
    effect = sum(y - x for x, y in zip(A, b)) / len(A)
    return f"{effect:+.3g} [{interval.low:+.3g}, {interval.high:+.3g}]"


def table_of(text: str) -> list[list[str]]:
    region = text.split("<!-- budgets:handmade -->", 1)[1].split("#### Budget ", 1)[0]  # the blocks have tables too
    rows = [line for line in region.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]


def test_the_report_of_a_budget_run_says_its_budget(tmp_path):
    path, _, _ = write_report(budget_sweep(tmp_path / "short", "short"))
    text = path.read_text()
    assert "Budget: `short` (`--budget short`: trainer.max_steps=100)." in text
    assert "Overrides:" not in text  # the budget's own overrides make it that budget, not a run with overrides
    stamp = json.loads((path.parent / DECISION_JSON).read_text())
    assert stamp["budget"] == "short" and stamp["work"] == {"count": 76800, "low": 76800, "unit": "tokens"}
    path, _, _ = write_report(budget_sweep(tmp_path / "mid", "mid"))
    assert "Budget: `mid` (the question's own config)." in path.read_text()
    path, _, _ = write_report(budget_sweep(tmp_path / "quick", "short", extra=("trainer.max_steps=6",)))
    text = path.read_text()
    assert "Budget: `short` (`--budget short`: trainer.max_steps=100), then changed by the overrides below." in text
    assert "Overrides: `trainer.max_steps=6`" in text


def test_a_budget_run_is_a_full_run_of_that_budget_and_more_overrides_make_it_a_run_with_overrides(tmp_path):
    line = run_text(run_facts(load_sweep(budget_sweep(tmp_path / "short", "short")), "handmade"))
    assert line.startswith("Full run at budget `short`, ") and "`python -m zoo.lab run handmade --budget short`" in line
    line = run_text(run_facts(load_sweep(budget_sweep(tmp_path / "mid", "mid")), "handmade"))
    assert line.startswith("Full run at budget `mid` (the question's own), ")
    shorter = budget_sweep(tmp_path / "shorter", "short", extra=("trainer.max_steps=50",))
    line = run_text(run_facts(load_sweep(shorter), "handmade"))
    assert line.startswith("Run with overrides (not the question's own budget or grid), from budget `short`, ")
    assert "`python -m zoo.lab run handmade --budget short trainer.max_steps=50`" in line
    own_shorter = budget_sweep(tmp_path / "mid_shorter", "mid", extra=("trainer.max_steps=50",))
    # a shortened own budget is not that budget any more
    line = run_text(run_facts(load_sweep(own_shorter), "handmade"))
    assert line.startswith("Run with overrides (not the question's own budget or grid), 20")


def test_publishing_budgets_gives_the_outcome_against_budget_table_and_again_replaces_not_adds(tmp_path):
    docs = docs_with_summary(tmp_path)
    publish(budget_sweep(tmp_path / "long", "long"), docs)
    publish(budget_sweep(tmp_path / "short", "short"), docs)
    text = docs.read_text()
    assert "Not measured yet: `python -m zoo.lab run handmade`" in text  # a budget is not the main section
    assert "The question's own budget has not been published yet." in text  # (not a question: its name unknown)
    head, verdicts, checks = table_of(text)
    assert head == ["claim check", "`short`: 76,800 tokens per job", "`long`: 307,200 tokens per job"]
    assert verdicts == ["**verdict**", "inconclusive", "supported"]
    short, long = by_hand(DIFFERENCES["short"]), by_hand(DIFFERENCES["long"])
    assert checks == ["a < b", f"inconclusive: {short}", f"supported: {long}"]

    publish(budget_sweep(tmp_path / "mid", "mid"), docs)  # the question's own budget: its main section, a column
    text = docs.read_text()
    assert "Not measured yet" not in text and "has not been published yet" not in text
    head, verdicts, checks = table_of(text)
    assert [h.split(":")[0] for h in head[1:]] == ["`short`", "`mid`", "`long`"]  # by tokens seen, not by name
    assert verdicts[1:] == ["inconclusive", "contradicted", "supported"]
    assert checks[2] == f"contradicted: {by_hand(DIFFERENCES['mid'])}"
    # each budget's block, with its run line, plots beside the question's, and the summary's row says how it moves
    short_block = text.split("<!-- measured:handmade@short -->\n", 1)[1]
    assert short_block.startswith("Full run at budget `short`, ")
    assert "`python -m zoo.lab run handmade --budget short`" in short_block
    assert "](lab/handmade-budget-short/lab_per_seed.csv)" in short_block
    assert (docs.parent / "lab" / "handmade-budget-short" / "lab_per_seed.csv").is_file()
    summary = text.split(SUMMARY_BEGIN, 1)[1].split(SUMMARY_END, 1)[0]
    rows = [line for line in summary.splitlines() if line.startswith("| `handmade`")]
    assert len(rows) == 1  # the budgets are not questions of their own
    moves = "`short` inconclusive → `mid` contradicted → `long` supported"
    assert f"against budget (least to most training): {moves}" in rows[0]
    places = ["<!-- /measured:handmade -->", "#### Outcome against budget", "#### Budget `short`", "#### Budget `long`"]
    order = [text.index(marker) for marker in [*places, "What the numbers say."]]
    assert order == sorted(order)  # right after the main section, the budgets in the table's order

    # the short budget again, with numbers that now support the claim: replaced, not added
    publish(budget_sweep(tmp_path / "short2", "short", DIFFERENCES["long"]), docs)
    again = docs.read_text()
    assert again.count("<!-- measured:handmade@short -->") == again.count("<!-- budgets:handmade -->") == 1
    assert again.count("#### Outcome against budget") == 1
    _, verdicts, checks = table_of(again)
    assert verdicts[1:] == ["supported", "contradicted", "supported"] and checks[1] == checks[3]
    after_region = again.split("<!-- /budgets:handmade -->", 1)[1]
    assert after_region == text.split("<!-- /budgets:handmade -->", 1)[1]  # the rest of the page as it was

    # the own budget run with more overrides is not the own budget: its column goes, and the table says why
    publish(budget_sweep(tmp_path / "mid_shorter", "mid", extra=("trainer.max_steps=50",)), docs)
    text = docs.read_text()
    head, verdicts, _ = table_of(text)
    assert [h.split(":")[0] for h in head[1:]] == ["`short`", "`long`"] and verdicts[1:] == ["supported", "supported"]
    assert "The question's own budget (`mid`): the Measured section above is a run with overrides" in text
