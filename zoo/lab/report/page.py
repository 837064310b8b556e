"""docs/lab.md rendered from the published results (docs/lab/<folder>/result.json, written by publish.py) and the
hand-written text around its generated regions, which are never read back: `<!-- measured:<name> -->` (a question's
result), `<!-- budgets:<name> -->` right after it (the outcome-against-budget table and a block per budget) and
`<!-- lab-summary-table -->`. Rendering the committed page again changes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..decide.claims import OUTCOMES

RESULT = "result.json"
NOT_MEASURED = "Not measured yet: `python -m zoo.lab run {name}`, then `python -m zoo.lab publish <its sweep folder>`."
SUMMARY_BEGIN, SUMMARY_END = "<!-- lab-summary-table -->", "<!-- /lab-summary-table -->"
_MEASURED = re.compile(r"(<!-- measured:([^ @]+) -->\n)(.*?)(<!-- /measured:\2 -->)", flags=re.DOTALL)
_BUDGETS = re.compile(r"\n\n<!-- budgets:([^ ]+) -->\n.*?<!-- /budgets:\1 -->", flags=re.DOTALL)


def markers(name: str) -> tuple[str, str]:
    return f"<!-- measured:{name} -->", f"<!-- /measured:{name} -->"


def budget_folder(name: str, budget: str) -> str:
    """The files of a budget: beside, not inside, docs/lab/<name>/, which a publish of the main section replaces."""
    return f"{name}-budget-{budget}"


def load_results(lab_dir: Path) -> dict[str, dict]:
    """'<name>' or '<name>@<budget>' -> the published result, from docs/lab/*/result.json."""
    results = {}
    for path in sorted(Path(lab_dir).glob(f"*/{RESULT}")):
        try:
            result = json.loads(path.read_text())
            missing = [f for f in ("question", "budget", "run", "facts", "files", "report") if f not in result]
        except (json.JSONDecodeError, TypeError) as err:
            missing = [str(err)]
        if missing:
            raise ValueError(
                f"{path}: not a published result (lacks or cannot read {missing[0]}); restore it from git or publish "
                "its sweep again"
            )
        key = result["question"] + (f"@{result['budget']}" if result["budget"] else "")
        results[key] = {**result, "folder": path.parent.name}
    return results


def run_text(run: dict) -> str:
    """What kind of run the figures come from, when, on what, and the command that makes it again."""
    line = f"{run['kind']}, {run['date']}, on {run['machine']}: `{run['command']}`."
    if "commit" in run:  # results published before the jobs recorded their commit have none of these
        line += f" Code: {run['commit']}; config hash {run['config_hash']}; {run['jobs_at_once']} job(s) at once"
        line += f", {run['sweep_wall_s']} s of wall time." if run.get("sweep_wall_s") is not None else "."
    return f"{line} {run.get('wall', '')}".rstrip()


def block_text(result: dict, level: int) -> str:
    """The run line, then the report from its measured table on, headings at `level`, links into its folder."""
    lines = [("#" * level + line[3:]) if line.startswith("### ") else line for line in result["report"]]
    text = "\n".join([run_text(result["run"]), "", *lines])
    for name in result["files"]:
        text = text.replace(f"]({name})", f"](lab/{result['folder']}/{name})")
    return text.rstrip() + "\n"


def overridden(result: dict) -> bool:
    return "with overrides" in result["run"]["kind"]


def _config(name: str) -> dict:
    """The question's `lab` section as its config says now ({} for a name that is not a question)."""
    from ..questions.configs import question, question_names

    return question(name) if name in question_names() else {}


def _budgets(name: str, results: dict[str, dict]) -> dict[str, dict]:
    return {r["budget"]: r for r in results.values() if r["question"] == name and r.get("budget")}


def _check_names(columns: list[tuple[str, dict]]) -> list[str]:
    return list(dict.fromkeys(c["name"] for _, facts in columns for c in facts.get("claim_checks") or []))


def budget_columns(name: str, results: dict[str, dict]) -> tuple[list[tuple[str, dict]], str]:
    """The question's budgets as published, in increasing work per job (unknown last): [(budget, the result's
    facts)], and a line saying why a budget is not among them."""
    budgets = _budgets(name, results)
    if not budgets:
        return [], ""
    columns = [(b, r["facts"]) for b, r in budgets.items() if not overridden(r)]
    changed = [f"`{b}`" for b, r in budgets.items() if overridden(r)]
    main = results.get(name)
    own = (main["facts"].get("budget") if main else None) or _config(name).get("budget")
    named = f" (`{own}`)" if own else ""
    missing = ""
    if changed:
        missing = f"Not in the table: {', '.join(changed)}, published from a run with overrides (not the budget as "
        missing += "declared). "
    if main is None:
        missing += f"The question's own budget{named} has not been published yet."
    elif overridden(main):
        missing += f"The question's own budget{named}: the Measured section above is a run with overrides, not the "
        missing += "config as it stands, so it has no column."
    else:
        columns.append((own or "own", main["facts"]))

    def order(column):
        work = column[1].get("work")
        return (work is None, work["count"] if work else 0, column[0])

    return sorted(columns, key=order), missing.strip()


def _work_text(work: dict | None) -> str:
    if not work:
        return "work per job not known"
    count = f"{work['count']:,}" if work["low"] == work["count"] else f"{work['low']:,} to {work['count']:,}"
    return f"{count} {work['unit']} per job"


def _cell(check: dict) -> str:
    unit = f" ({check['unit']})" if check.get("unit") else ""
    effects = "; ".join(f"{e:+.3g} [{low:+.3g}, {high:+.3g}]" for e, low, high in check.get("effects") or [])
    return f"{check['outcome']}: {effects}{unit}" if effects else check["outcome"]


def budget_table(columns: list[tuple[str, dict]], missing: str) -> list[str]:
    lines = [
        "#### Outcome against budget",
        "",
        "Generated by `publish` from the Measured results of each budget of this question (the question's own above, "
        "the others below); not edited by hand. Columns go from the least to the most training (what each job "
        "trained on, computed from its config). Each cell is the claim check's outcome, its effect and the effect's "
        "95% interval, oriented so that a positive effect is what the claim predicts (one per comparison for a "
        "trend or an interior optimum).",
        "",
    ]
    if columns:
        head = ["claim check", *(f"`{budget}`: {_work_text(facts.get('work'))}" for budget, facts in columns)]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines.append("| **verdict** | " + " | ".join(facts["outcome"] for _, facts in columns) + " |")
        for check in _check_names(columns):
            cells = []
            for _, facts in columns:
                found = [c for c in facts.get("claim_checks") or [] if c["name"] == check]
                cells.append(_cell(found[0]) if found else "not a check at this budget")
            lines.append(f"| {check} | " + " | ".join(cells) + " |")
        lines.append("")
    return [*lines, *([missing, ""] if missing else [])]


def budget_region(name: str, results: dict[str, dict]) -> str:
    """The table, then each budget's block under a heading, in the order of the table's columns."""
    budgets = _budgets(name, results)
    columns, missing = budget_columns(name, results)
    works = dict(columns)
    order = [*(b for b in works if b in budgets), *(b for b in budgets if b not in works)]
    parts = [f"<!-- budgets:{name} -->", *budget_table(columns, missing)]
    for budget in order:
        begin, end = markers(f"{name}@{budget}")
        work = _work_text(budgets[budget]["facts"].get("work"))
        parts += [f"#### Budget `{budget}` ({work})", "", f"{begin}\n{block_text(budgets[budget], 5)}{end}", ""]
    return "\n".join([*parts, f"<!-- /budgets:{name} -->"])


SUMMARY_TEXT = (
    "Generated from the published results (docs/lab/*/result.json) by `python -m zoo.lab render` (and by every "
    "`publish`); not edited by hand. An arm that did not learn did not beat its question's reference (for the "
    "character LMs, a count n-gram model scored on the same validation windows): the claim checks on it are "
    "inconclusive. *Agrees with the cited paper* reads the claim checks that restate the paper's claim (`paper: true` "
    "in the question's config): agrees when all of them are supported, disagrees when one is contradicted, not decided "
    "otherwise. *Limited by scale*: yes when an arm did not learn or when a claim check's outcome changes across the "
    "question's budgets (its outcome-against-budget table), not seen when several budgets agree, one budget only "
    "otherwise."
)


def paper_cell(facts: dict) -> str:
    """agrees (every check that restates the paper supported), disagrees (one contradicted), not decided (otherwise)."""
    if facts.get("claim_checks") is None:
        return "not recorded"
    checks = [c for c in facts["claim_checks"] if c.get("paper")]
    if not checks:
        return "no check restates it"
    outcomes = [c["outcome"] for c in checks]
    counts = ", ".join(f"{outcomes.count(o)} {o}" for o in OUTCOMES if outcomes.count(o))
    if "contradicted" in outcomes:
        return f"disagrees ({counts} of {len(checks)})"
    if outcomes.count("supported") == len(checks):
        return f"agrees ({counts} of {len(checks)})"
    return f"not decided ({counts} of {len(checks)})"


def scale_cell(facts: dict, columns: list[tuple[str, dict]]) -> str:
    """Is the outcome limited by scale (SUMMARY_TEXT)? `columns`: the outcome-against-budget table's (budget, facts)."""
    unlearned = {arm for f in [facts, *(f for _, f in columns)] for arm in f.get("did_not_learn") or []}
    if unlearned:
        # the "arms that did not learn" column reads the own budget only: name the budgets where some did not
        elsewhere = [budget for budget, f in columns if f.get("did_not_learn")]
        where = "" if facts.get("did_not_learn") or not elsewhere else f" at {', '.join(elsewhere)}"
        return f"yes: {len(unlearned)} arm(s) did not learn{where}"
    if len(columns) < 2:
        return "one budget only"
    names = _check_names(columns)
    moved = [
        n
        for n in names
        if len({c["outcome"] for _, f in columns for c in f.get("claim_checks") or [] if c["name"] == n}) > 1
    ]
    if moved or len({f["outcome"] for _, f in columns}) > 1:
        return f"yes: the outcome changes with the budget ({len(moved)} of {len(names)} claim checks)"
    return f"not seen ({len(columns)} budgets agree)"


def summary_row(name: str, results: dict[str, dict]) -> dict[str, str]:
    row = {"question": f"`{name}`: {_config(name).get('title', name)}", "outcome": "not measured yet"}
    result = results.get(name)
    if result is None:
        return row
    facts, run = result["facts"], result["run"]
    columns, _ = budget_columns(name, results)
    row["outcome"] = facts["outcome"]
    row["checks"] = ", ".join(f"{n} {o}" for o, n in facts["checks"].items())
    low, high = facts["seeds"]
    row["seeds"] = f"{low}" if low == high else f"{low} to {high}"
    unlearned = facts.get("did_not_learn") or []
    if facts.get("reference"):
        listed = f": {'; '.join(unlearned)}" if unlearned else ""
        row["did not learn"] = f"{len(unlearned)} of {facts['points']} ({facts['reference']}){listed}"
    else:
        row["did not learn"] = "no reference"
    if facts.get("job_time_s") is not None:
        row["jobs"] = f"{facts['jobs']} jobs, {facts['job_time_s']} s"
    row["paper"] = paper_cell(facts)
    row["scale"] = scale_cell(facts, columns)
    row["run"] = f"{re.match(r'Full run|Run with overrides|Incomplete run', run['kind']).group(0)}, {run['date']}"
    if columns:  # the outcome as the models train longer, from the question's outcome-against-budget table
        moves = " → ".join(f"`{budget}` {f['outcome']}" for budget, f in columns)
        row["outcome"] += f"; against budget (least to most training): {moves}"
    return row


def summary_block(names: list[str], results: dict[str, dict]) -> str:
    columns = ["question", "outcome", "claim checks", "agrees with the cited paper", "limited by scale"]
    columns += ["seeds per point", "arms that did not learn", "job time", "run"]
    keys = ["question", "outcome", "checks", "paper", "scale", "seeds", "did not learn", "jobs", "run"]
    lines = [SUMMARY_BEGIN, "## Summary of the measured results", "", SUMMARY_TEXT, ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name in names:
        row = summary_row(name, results)
        lines.append("| " + " | ".join(row.get(k, "") for k in keys) + " |")
    return "\n".join([*lines, SUMMARY_END])


def render(document: str, results: dict[str, dict]) -> str:
    """The page with every generated region rendered from `results` (load_results) and its hand-written text kept."""
    document = _BUDGETS.sub("", document)
    names = [m.group(2) for m in _MEASURED.finditer(document)]
    unplaced = sorted({r["question"] for r in results.values()} - set(names))
    if unplaced:
        raise ValueError(f"no '<!-- measured:{unplaced[0]} -->' markers for a published result; add them")

    def measured(match: re.Match) -> str:
        opening, name, _, closing = match.groups()
        result = results.get(name)
        body = block_text(result, 4) if result else NOT_MEASURED.format(name=name) + "\n"
        region = f"{opening}{body}{closing}"
        if any(r["question"] == name and r.get("budget") for r in results.values()):
            region += "\n\n" + budget_region(name, results)
        return region

    document = _MEASURED.sub(measured, document)
    if SUMMARY_BEGIN in document and SUMMARY_END in document:
        before, rest = document.split(SUMMARY_BEGIN, 1)
        document = before + summary_block(names, results) + rest.split(SUMMARY_END, 1)[1]
    return document


def page_paths(docs: str | Path) -> tuple[Path, Path]:
    """(docs/lab.md, docs/lab/, where its results are)."""
    docs = Path(docs)
    if not docs.is_file():
        raise ValueError(f"{docs} not found; pass the path of docs/lab.md")
    return docs, docs.parent / "lab"
