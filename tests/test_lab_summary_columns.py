"""The summary of docs/lab.md says whether each measured outcome agrees with the cited paper and whether it is
limited by scale, computed from the published results (result.json): the claim checks marked `paper: true` and
their outcomes; the arms that did not learn and the outcome against the question's budgets."""

from __future__ import annotations

import json

import pytest
from test_lab_integrity import check, make_sweep

from zoo.lab.decide.claims import check_config
from zoo.lab.report.page import paper_cell, scale_cell, summary_block, summary_row
from zoo.lab.report.report import DECISION_JSON, write_report


def claim(name: str, outcome: str, paper: bool | None = None) -> dict:
    entry = {"name": name, "outcome": outcome, "effects": [], "unit": ""}
    return entry if paper is None else {**entry, "paper": paper}


def facts(*checks: dict, did_not_learn=(), outcome: str = "supported", budget: str | None = None) -> dict:
    return {"outcome": outcome, "claim_checks": list(checks), "did_not_learn": list(did_not_learn), "budget": budget}


@pytest.mark.parametrize(
    ("checks", "reads"),
    [
        ([claim("a", "supported", True), claim("b", "contradicted", False)], "agrees (1 supported of 1)"),
        ([claim("a", "supported", True), claim("b", "contradicted", True)], "disagrees (1 supported, 1 contradicted"),
        ([claim("a", "supported", True), claim("b", "inconclusive", True)], "not decided (1 supported, 1 inconclusive"),
        ([claim("a", "supported", False)], "no check restates it"),
    ],
)
def test_agreement_with_the_paper_is_read_from_the_checks_that_restate_it(checks, reads):
    assert paper_cell(facts(*checks)).startswith(reads)


def test_a_result_without_marked_checks_says_none_restates_the_paper_and_one_without_checks_is_not_recorded():
    unmarked = facts(claim("one head is worse than four heads of d_k 32", "supported"))  # no `paper` key
    assert paper_cell(unmarked) == "no check restates it"
    assert paper_cell({"outcome": "supported"}) == "not recorded"  # a result without its checks' outcomes


def test_limited_by_scale_when_an_arm_did_not_learn_or_the_outcome_moves_with_the_budget():
    learned = facts(claim("a", "supported"), claim("b", "inconclusive"))
    assert scale_cell(facts(did_not_learn=["p=a"]), []) == "yes: 1 arm(s) did not learn"
    assert scale_cell(learned, [("own", learned)]) == "one budget only"
    assert scale_cell(learned, []) == "one budget only"
    shorter = facts(claim("a", "supported"), claim("b", "contradicted"))
    changed = scale_cell(learned, [("steps300", shorter), ("own", learned)])
    assert changed == "yes: the outcome changes with the budget (1 of 2 claim checks)"
    assert scale_cell(learned, [("steps300", learned), ("own", learned)]) == "not seen (2 budgets agree)"
    # an arm that did not learn at a shorter budget only: still limited by scale
    unlearned_short = facts(claim("a", "supported"), claim("b", "inconclusive"), did_not_learn=["p=b"])
    # named, since the own budget's "arms that did not learn" column reads 0 there
    assert (
        scale_cell(learned, [("steps300", unlearned_short), ("own", learned)])
        == "yes: 1 arm(s) did not learn at steps300"
    )


def test_the_summary_table_has_both_columns_and_an_unmeasured_question_says_so():
    payload = {
        "question": "handmade",
        "outcome": "supported in part",
        "checks": {"supported": 1, "contradicted": 1, "inconclusive": 0},
        "seeds": [5, 5],
        "jobs": 10,
        "job_time_s": 100,
        "did_not_learn": [],
        "reference": None,
        "points": 2,
        "claim_checks": [claim("a < b", "supported", True), claim("b < c", "contradicted", False)],
    }
    run = {"kind": "Full run", "date": "2026-12-03", "machine": "a CPU", "command": "c", "wall": ""}
    results = {"handmade": {"question": "handmade", "budget": None, "run": run, "facts": payload}}
    row = summary_row("handmade", results)
    assert row["paper"] == "agrees (1 supported of 1)" and row["scale"] == "one budget only"
    assert row["run"] == "Full run, 2026-12-03" and row["jobs"] == "10 jobs, 100 s"
    assert summary_row("pending", results)["outcome"] == "not measured yet"
    table = summary_block(["handmade", "pending"], results)
    assert "| agrees with the cited paper | limited by scale |" in table
    assert "| supported in part | 1 supported, 1 contradicted, 0 inconclusive | agrees (1 supported of 1) |" in table
    assert "| `pending`: pending | not measured yet |" in table


def test_the_report_stamps_which_claim_checks_restate_the_paper(tmp_path):
    checks = [check("a < b", "less", "a", "b", paper=True), check("a < c", "less", "a", "c")]
    values = {"a": [1.0, 1.01, 0.99, 1.02, 0.98], "b": [2.0, 2.02, 1.97, 2.01, 2.0], "c": [3.0, 3.1, 2.9, 3.0, 3.05]}
    path, _, _ = write_report(make_sweep(tmp_path / "sweep", values, checks))
    published = json.loads((path.parent / DECISION_JSON).read_text())
    assert [(c["name"], c["paper"]) for c in published["claim_checks"]] == [("a < b", True), ("a < c", False)]
    assert paper_cell(published) == "agrees (1 supported of 1)"


@pytest.mark.parametrize(
    ("extra", "says"),
    [({"paper": "yes"}, "paper must be true"), ({"paper": True, "kind": "sanity"}, "drop paper: true")],
)
def test_a_bad_paper_mark_is_a_one_line_error_naming_the_check(extra, says):
    with pytest.raises(ValueError, match=r"lab.checks\[0\] \('x'\)") as err:
        check_config({"name": "x", "metric": "m", "expect": "less", "points": [{}, {}], **extra}, 0)
    assert says in str(err.value)
