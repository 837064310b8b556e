"""Putting a finished full-budget sweep into docs/lab.md: the measured table, the plots (copied to docs/lab/<name>/)
and the verdict exactly as the report computed them, with the machine they were measured on.

The text goes between the markers `<!-- measured:<name> -->` and `<!-- /measured:<name> -->` of the question's
section, so a later run replaces it and nothing in the document is typed by hand. Its first line says what kind of
run it was: a full run, or one with overrides (the command that made it), or an incomplete one.

Text and plots change together or not at all: the document and its folders are checked first, the plots are staged
beside docs/lab/<name>/, and only then are the folder and the document swapped in (the old plots come back when
writing the document fails).

A section published before the current decision rule (it lacks report.RULE_STAMP) gets a note at its top, written by
`earlier_rule_notes` whenever anything is published (or by `python -m zoo.lab publish --notes-only`): its verdict was
decided under the earlier rule and has not been re-run, and the per-seed numbers to re-decide it were not kept.

The per-seed results (report.PER_SEED_CSV) are copied beside the plots and linked from the section. The summary at
the top of the document, between `<!-- lab-summary-table -->` and `<!-- /lab-summary-table -->`, is generated from
the sections: their report.SUMMARY_STAMP (outcome, claim checks, seeds, arms that did not learn, job time), or, for
a section decided under the earlier rule, what its own generated text says (`summary_rows`). Every publish rewrites
it; `python -m zoo.lab summary [docs/lab.md]` rewrites it alone (and puts the markers in when they are missing)."""

from __future__ import annotations

import json
import platform
import re
import shutil
import tempfile
from datetime import date
from pathlib import Path

import torch

from zoo.data.atomic import replacing

from ..decide import stats
from ..decide.claims import OUTCOMES
from ..decide.sweep import Sweep, load_sweep
from ..questions.budgets import run_budget
from .report import (
    PER_SEED_CSV,
    RULE_STAMP,
    SUMMARY_STAMP,
    build_report,
    changed_overrides,
    run_command,
    wall_line,
    writable,
)


def machine_line(sweep: Sweep | None = None) -> str:
    """The CPU (model name, the threads the jobs ran with, the kernels torch picks), the GPU if any, and torch
    version: figures are only comparable on it. The threads come from the jobs' records (`threads`) when they
    have them, else from this process (the jobs inherit its environment when run by `python -m zoo.lab run`)."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), flags=re.MULTILINE)
        model = names[0].strip() if names else model
    capability = torch.backends.cpu.get_cpu_capability()
    recorded = {j.metrics["threads"] for j in sweep.jobs if "threads" in j.metrics} if sweep else set()
    threads = "/".join(f"{t:g}" for t in sorted(recorded)) if recorded else str(torch.get_num_threads())
    threads += " thread" if threads == "1" else " threads"
    line = f"{model}, {threads}, torch {torch.__version__} (CPU capability {capability})"
    if torch.cuda.is_available():  # `python -m zoo.lab gpu` runs on it: its figures are the GPU's
        line += f", GPU {torch.cuda.get_device_name(0)}"
    return line


def markers(name: str) -> tuple[str, str]:
    return f"<!-- measured:{name} -->", f"<!-- /measured:{name} -->"


EARLIER_RULE = "> **Decided under the earlier rule**"  # how the note begins (and how it is found again)
_BLOCK = re.compile(r"(<!-- measured:([^ ]+) -->\n)(.*?)(<!-- /measured:\2 -->)", flags=re.DOTALL)


def _seed_counts(body: str) -> list[int]:
    """The `seeds` column of the section's first table (the number of seeds of each point)."""
    rows = [line.split("|")[1:-1] for line in body.splitlines() if line.startswith("|")]
    if not rows or "seeds" not in [c.strip() for c in rows[0]]:
        return []
    column = [c.strip() for c in rows[0]].index("seeds")
    return [int(r[column]) for r in rows[2:] if len(r) > column and r[column].strip().isdigit()]


def earlier_rule_note(body: str) -> str:
    """The note for a section decided before RULE_STAMP existed, with the seed counts read from its own table."""
    seeds = _seed_counts(body)
    ran = ""
    if seeds:
        counts = f"{min(seeds)}" if min(seeds) == max(seeds) else f"{min(seeds)} to {max(seeds)}"
        short = max(seeds) < stats.MIN_SEEDS
        ran = f" Its points ran {counts} seeds" + (
            f", fewer than the {stats.MIN_SEEDS} the current rule needs: under it every check would be inconclusive."
            if short
            else "."
        )
    return (
        f"{EARLIER_RULE} (a difference counted when it exceeded 2 x the spread of the seeds, sqrt(sd_a² + sd_b²)); "
        "not re-run under the current rule (95% intervals, Holm's correction, at least "
        f"{stats.MIN_SEEDS} seeds per point).{ran} The per-seed results are not in the repository, so the verdict "
        "below cannot be recomputed: read it as provisional."
    )


def earlier_rule_notes(document: str) -> str:
    """The document with a note at the top of every measured section that holds a verdict decided before
    RULE_STAMP existed; sections with the stamp, with the note already, or without a verdict stay as they are."""

    def noted(match: re.Match) -> str:
        opening, _, body, closing = match.groups()
        if RULE_STAMP in body or EARLIER_RULE in body or "Verdict:" not in body:
            return match.group(0)
        return f"{opening}{earlier_rule_note(body)}\n\n{body}{closing}"

    return _BLOCK.sub(noted, document)


def note_earlier_rule(docs: str | Path) -> int:
    """Write the notes into `docs`; returns how many sections got one."""
    before, after = _rewrite(docs, earlier_rule_notes, "pass --docs with the path of docs/lab.md")
    return after.count(EARLIER_RULE) - before.count(EARLIER_RULE)


def _rewrite(docs: str | Path, change, how_to_name_it: str) -> tuple[str, str]:
    """Apply `change` to the text of `docs` and write the result in place when it differs; (before, after)."""
    docs = Path(docs)
    if not docs.is_file():
        raise ValueError(f"{docs} not found; {how_to_name_it}")
    before = docs.read_text()
    after = change(before)
    if after != before:
        if not writable(docs):
            raise ValueError(f"{docs} is read-only; make it writable (chmod u+w {docs})")
        _write_atomically(docs, after)
    return before, after


def split_at_markers(document: str, name: str, docs: Path) -> tuple[str, str]:
    """(the text before the question's opening marker, the text after its closing marker)."""
    begin, end = markers(name)
    if begin not in document or end not in document:
        raise ValueError(f"{docs} has no '{begin}' ... '{end}' markers; add them under the question's Measured heading")
    if document.count(begin) > 1 or document.count(end) > 1:
        raise ValueError(f"{docs}: '{begin}' or '{end}' appears more than once; keep one pair for '{name}'")
    before, rest = document.split(begin, 1)
    if end not in rest:
        raise ValueError(f"{docs}: '{end}' comes before '{begin}'; put the opening marker first")
    return before, rest.split(end, 1)[1]


def run_line(sweep: Sweep, name: str) -> str:
    """What kind of run the figures come from, when, on what, and the command that makes it again."""
    command = run_command(sweep, name)
    kind = "Full run"
    if changed_overrides(sweep):
        kind = "Run with overrides (not the question's own budget or grid)"
    if sweep.unfinished:
        total = len(sweep.job_dirs()) + len(sweep.unfinished)
        kind = f"Incomplete run ({len(sweep.unfinished)} of {total} jobs left no result, listed below)" + (
            ", with overrides" if changed_overrides(sweep) else ""
        )
    budget = sweep.lab.get("budget")
    if run_budget(sweep.lab):  # one of the question's other budgets: which, whatever else the run changed
        kind += f" at budget `{budget}`" if kind == "Full run" else f", from budget `{budget}`"
    elif budget is not None and kind == "Full run":  # a run with overrides is not the own budget as it stands
        kind += f" at budget `{budget}` (the question's own)"
    return f"{kind}, {date.today().isoformat()}, on {machine_line(sweep)}: `{command}`. {wall_line(sweep)}".rstrip()


def measured_block(sweep: Sweep, report: str, plots: list[Path], name: str, folder: str = "", level: int = 4) -> str:
    """The report from its measured table to the end of the verdict, under the run line; its headings at `level`,
    links to the plots (and the per-seed CSV) pointing into docs/lab/<folder, by default the name>/."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### Measured"))
    body = [line.replace("### ", "#" * level + " ", 1) if line.startswith("### ") else line for line in lines[start:]]
    text = "\n".join([run_line(sweep, name), "", *body])
    for path in plots:
        text = text.replace(f"]({path.name})", f"](lab/{folder or name}/{path.name})")
    return text.rstrip() + "\n"


def _check_writable(docs: Path, image_dir: Path) -> None:
    if not writable(docs):
        raise ValueError(
            f"{docs} is read-only; make it writable (chmod u+w {docs}) or pass --docs with a writable copy"
        )
    folder = next(p for p in (image_dir, image_dir.parent, docs.parent) if p.exists())
    if not writable(folder):
        raise ValueError(f"{folder} is read-only and the plots go there; make it writable or pass --docs elsewhere")


def _write_atomically(path: Path, text: str) -> None:
    """A write cut short (disk full) leaves the document as it was."""
    target = path.resolve()
    with replacing(target) as tmp:
        tmp.write_text(text)
        shutil.copymode(target, tmp)


def _swap_in(docs: Path, document: str, plots: list[Path], image_dir: Path) -> None:
    """Stage the plots, then swap the plot folder and the document in; on failure put the old folder back."""
    image_dir.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{image_dir.name}-new-", dir=image_dir.parent))
    shutil.copymode(image_dir.parent, staged)  # mkdtemp makes it private (0700); the plots folder is not
    old = image_dir.with_name(f".{image_dir.name}-old")
    shutil.rmtree(old, ignore_errors=True)  # left by a publish that was killed half-way
    try:
        for path in plots:
            shutil.copy2(path, staged / path.name)
        if image_dir.exists():
            image_dir.rename(old)
        staged.rename(image_dir)
        _write_atomically(docs, document)
    except OSError:
        if not staged.exists():  # the new plots went in: take them out
            shutil.rmtree(image_dir, ignore_errors=True)
        if old.exists():
            old.rename(image_dir)
        shutil.rmtree(staged, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def publish(sweep_dir: str | Path, docs: str | Path) -> tuple[str, str]:
    """Replace the question's measured block of `docs` (a markdown file) with the sweep's; returns (name, outcome)."""
    docs = Path(docs)
    if not docs.is_file():
        raise ValueError(f"{docs} not found; pass --docs with the path of docs/lab.md")
    sweep = load_sweep(sweep_dir)
    if sweep.lab.get("mode") == "quick":
        raise ValueError(f"{sweep_dir} is a quick run (a budget of seconds); publish a full-budget sweep")
    name = sweep.lab.get("name")
    budget = run_budget(sweep.lab)
    # a budget's block goes beside the question's main section, which must be there (its markers say where)
    text = docs.read_text()
    before, after = split_at_markers(text, name, docs)
    folder = budget_folder(name, budget) if budget else name
    image_dir = docs.parent / "lab" / folder
    _check_writable(docs, image_dir)
    try:
        report, outcome, plots = build_report(sweep)  # the plots and the per-seed CSV go into the sweep directory
        files = [*plots, sweep.directory / PER_SEED_CSV]
        begin, end = markers(name)
        if budget:
            block = measured_block(sweep, report, files, name, folder, level=5)
            document = with_budget_block(text, name, budget, block)
        else:
            document = f"{before}{begin}\n{measured_block(sweep, report, files, name)}{end}{after}"
        document = with_budget_tables(document)  # a new main section is a column of its question's table too
        document = earlier_rule_notes(document)
        _swap_in(docs, with_summary(document) if SUMMARY_BEGIN in document else document, files, image_dir)
    except OSError as err:
        raise ValueError(f"{err.filename or docs}: {err.strerror or err}; nothing was published") from None
    return name, outcome


# ---- a question's budgets: their blocks and the outcome-against-budget table -------------------------------------


def budget_folder(name: str, budget: str) -> str:
    """The plots of a budget: beside, not inside, docs/lab/<name>/, which a publish of the main section replaces."""
    return f"{name}-budget-{budget}"


def budget_markers(name: str) -> tuple[str, str]:
    """The region of a question's budgets: the table and one measured block per budget, `<name>@<budget>`."""
    return f"<!-- budgets:{name} -->", f"<!-- /budgets:{name} -->"


def _budget_bodies(region: str, name: str) -> dict[str, str]:
    """budget -> its published block (between its own markers) in a budgets region."""
    found = re.finditer(
        rf"<!-- measured:{re.escape(name)}@([A-Za-z0-9_]+) -->\n(.*?)<!-- /measured:{re.escape(name)}@\1 -->",
        region,
        flags=re.DOTALL,
    )
    return {m.group(1): m.group(2) for m in found}


def _stamp_facts(body: str) -> dict | None:
    """The report's facts (report.summary_stamp) in a published block; None when it has none."""
    stamp = next((line for line in body.splitlines() if line.startswith(SUMMARY_STAMP)), None)
    return None if stamp is None else json.loads(stamp[len(SUMMARY_STAMP) :].rsplit("-->", 1)[0])


def _main_body(document: str, name: str) -> str | None:
    begin, end = markers(name)
    if begin not in document or end not in document:
        return None
    return document.split(begin, 1)[1].split(end, 1)[0]


def budget_columns(document: str, name: str) -> tuple[list[tuple[str, dict]], str]:
    """The question's budgets as published, in increasing work per job (tokens seen; unknown last): [(budget, the
    block's facts)], and a line saying why the question's own budget is not among them, when it is not."""
    begin, end = budget_markers(name)
    if begin not in document or end not in document:
        return [], ""
    bodies = _budget_bodies(document.split(begin, 1)[1].split(end, 1)[0], name)
    columns = [(b, facts) for b, body in bodies.items() if not _overridden(body) and (facts := _stamp_facts(body))]
    changed = [f"`{b}`" for b, body in bodies.items() if _overridden(body)]
    main = _main_body(document, name) or ""
    facts = _stamp_facts(main)
    own = (facts or {}).get("budget") or _own_budget(name)
    named = f" (`{own}`)" if own else ""
    missing = ""
    if changed:
        missing = f"Not in the table: {', '.join(changed)}, published from a run with overrides (not the budget as "
        missing += "declared). "
    if _overridden(main):
        missing += f"The question's own budget{named}: the Measured section above is a run with overrides, not the "
        missing += "config as it stands, so it has no column."
    elif facts is not None and "claim_checks" in facts:
        columns.append((own or "own", facts))
    elif facts is not None:
        missing += f"The question's own budget{named}, the Measured section above, was published before the checks' "
        missing += "outcomes were recorded per budget; publish it again to add its column."
    elif "Verdict:" in main:
        missing += f"The question's own budget{named}, the Measured section above, was decided under the earlier "
        missing += "rule, which recorded no intervals: it has no column until it is run and published again."
    else:
        missing += f"The question's own budget{named} has not been published yet."

    def order(column):
        work = column[1].get("work")
        return (work is None, work["count"] if work else 0, column[0])

    return sorted(columns, key=order), missing.strip()


def _overridden(body: str) -> bool:
    """Does a published block come from a run with overrides (run_line), rather than from a budget as declared?"""
    return re.match(r"(Run with overrides|Incomplete run \([^)]*\), with overrides)", body.strip()) is not None


def _own_budget(name: str) -> str | None:
    """The name of the budget the question's config runs at, as the config says now (None: it does not say)."""
    from ..questions.configs import question, question_names

    return question(name).get("budget") if name in question_names() else None


def _work_text(work: dict | None) -> str:
    if not work:
        return "work per job not known"
    count = f"{work['count']:,}" if work["low"] == work["count"] else f"{work['low']:,} to {work['count']:,}"
    return f"{count} {work['unit']} per job"


def _cell(check: dict) -> str:
    """A check's outcome with its effects and 95% intervals, positive being what the claim predicts."""
    unit = f" ({check['unit']})" if check.get("unit") else ""
    effects = "; ".join(f"{e:+.3g} [{low:+.3g}, {high:+.3g}]" for e, low, high in check.get("effects") or [])
    return f"{check['outcome']}: {effects}{unit}" if effects else check["outcome"]


def budget_table(document: str, name: str) -> list[str]:
    """The outcome-against-budget table of a question, generated from its published blocks' facts."""
    columns, missing = budget_columns(document, name)
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
        names = list(dict.fromkeys(c["name"] for _, facts in columns for c in facts.get("claim_checks") or []))
        for check in names:
            cells = []
            for _, facts in columns:
                found = [c for c in facts.get("claim_checks") or [] if c["name"] == check]
                cells.append(_cell(found[0]) if found else "not a check at this budget")
            lines.append(f"| {check} | " + " | ".join(cells) + " |")
        lines.append("")
    return [*lines, *([missing, ""] if missing else [])]


def budget_region(document: str, name: str, bodies: dict[str, str]) -> str:
    """The whole region of a question's budgets: its table, then each budget's block under a heading, in the order of
    the table's columns."""
    begin, end = budget_markers(name)
    wrapped = {b: f"<!-- measured:{name}@{b} -->\n{body}<!-- /measured:{name}@{b} -->" for b, body in bodies.items()}
    # the table reads the blocks as they will stand, beside the document's main section
    probe = _replace_region(document, name, "\n".join([begin, *wrapped.values(), end]))
    columns = dict(budget_columns(probe, name)[0])
    order = [*(b for b in columns if b in wrapped), *(b for b in wrapped if b not in columns)]
    parts = [begin, *budget_table(probe, name)]
    for budget in order:
        work = _work_text((columns.get(budget) or {}).get("work"))
        parts += [f"#### Budget `{budget}` ({work})", "", wrapped[budget], ""]
    return "\n".join([*parts, end])


def _replace_region(document: str, name: str, region: str) -> str:
    """The document with the question's budgets region replaced, or put right after its main section."""
    begin, end = budget_markers(name)
    if begin in document and end in document:
        before, rest = document.split(begin, 1)
        return before + region + rest.split(end, 1)[1]
    closing = markers(name)[1]
    before, after = document.split(closing, 1)
    return f"{before}{closing}\n\n{region}{after}"


def with_budget_block(document: str, name: str, budget: str, block: str) -> str:
    """The document with the block of one budget of the question put in (replacing that budget's earlier one)."""
    begin, end = budget_markers(name)
    bodies = {}
    if begin in document and end in document:
        bodies = _budget_bodies(document.split(begin, 1)[1].split(end, 1)[0], name)
    bodies[budget] = block
    return _replace_region(document, name, budget_region(document, name, bodies))


def with_budget_tables(document: str) -> str:
    """Every question's budgets region rebuilt from its blocks (a main section published anew changes a column)."""
    for name in re.findall(r"<!-- budgets:([^ ]+) -->", document):
        begin, end = budget_markers(name)
        if end in document:
            bodies = _budget_bodies(document.split(begin, 1)[1].split(end, 1)[0], name)
            document = _replace_region(document, name, budget_region(document, name, bodies))
    return document


# ---- the summary at the top of docs/lab.md ----------------------------------------------------------------------

SUMMARY_BEGIN, SUMMARY_END = "<!-- lab-summary-table -->", "<!-- /lab-summary-table -->"
SUMMARY_HEADING = "## Summary of the measured results"
_RUN = re.compile(r"^(Full run|Run with overrides|Incomplete run)\b.*?, (\d{4}-\d{2}-\d{2}), on ")
_JOBS = re.compile(r"(\d+) jobs, (\d+) s of job time in all")  # report.wall_line
_OLD_VERDICT = re.compile(r"^#### Verdict: (.+)$", flags=re.MULTILINE)


def _title(name: str) -> str:
    from ..questions.configs import question, question_names

    return question(name).get("title", name) if name in question_names() else name


def _first_table(body: str) -> list[list[str]]:
    rows = []
    for line in body.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows


def published_shortfalls(name: str, body: str, references: dict | None = None) -> str:
    """For a section decided under the earlier rule: which of its points did not beat the question's reference, by
    the means its own table shows, the reference computed for the question's config as it is now (a full run ran
    that config; a run with overrides is not checked). `references` memoizes the references by data."""
    from ..decide.reference import UnavailableError, compute, data_identity, reference_config
    from ..questions.configs import composed_config, question_names

    if name not in question_names():
        return "not checked (no such question)"
    if not re.search(r"^Full run\b", body, flags=re.MULTILINE):
        return "not checked (not a full run of the question's config)"
    config = composed_config(name)
    ref = reference_config(config.get("lab") or {})
    table = _first_table(body)
    if ref is None or len(table) < 3 or ref["metric"] not in table[0] or "seeds" not in table[0]:
        return "not checked (no reference for its table)"
    references = {} if references is None else references
    identity = json.dumps([ref, data_identity(config)], sort_keys=True, default=str)
    if identity not in references:
        try:
            references[identity] = compute(ref, config)
        except UnavailableError as why:
            references[identity] = f"not checked ({why})"
    reference = references[identity]
    if isinstance(reference, str):
        return reference
    column, swept = table[0].index(ref["metric"]), table[0][: table[0].index("seeds")]
    short, points = [], 0
    for row in table[2:]:
        mean = re.match(r"^[-+]?\d[\d.]*(?:e[-+]?\d+)?", row[column] if len(row) > column else "")
        if mean is None:
            continue
        points += 1
        if reference.shortfall(float(mean.group(0))):
            short.append(", ".join(f"{k}={v}" for k, v in zip(swept, row)))
    listed = f": {'; '.join(short)}" if short else ""
    return f"{len(short)} of {points} by its table's means ({reference.bar_text()}){listed}"


def paper_checks(name: str, facts: dict) -> list[dict] | None:
    """The claim checks of a published stamp that restate the cited paper's claim: those the stamp marks (`paper`),
    or, for a stamp written before checks were marked, those the question's config marks now (`paper: true`),
    matched by name. None when neither says which they are."""
    checks = facts.get("claim_checks")
    if checks is None:
        return None
    if any("paper" in c for c in checks):
        return [c for c in checks if c.get("paper")]
    from ..questions.configs import question, question_names

    if name not in question_names():
        return None
    marked = {c.get("name") for c in question(name).get("checks") or [] if isinstance(c, dict) and c.get("paper")}
    return [c for c in checks if c["name"] in marked]


def paper_cell(name: str, facts: dict) -> str:
    """Does the measured outcome agree with the cited paper? agrees (every check that restates it supported),
    disagrees (one contradicted), not decided (otherwise), from the outcomes of those checks alone."""
    checks = paper_checks(name, facts)
    if checks is None:
        return "not recorded"
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
    """Is the outcome limited by scale? yes when an arm did not learn (at any published budget) or when a claim
    check's outcome changes across the question's budgets; not seen when several budgets agree; one budget only
    otherwise. `columns`: the outcome-against-budget table's (budget, facts)."""
    unlearned = {arm for f in [facts, *(f for _, f in columns)] for arm in f.get("did_not_learn") or []}
    if unlearned:
        # The summary's "arms that did not learn" column reads the question's own budget only; when every arm learned
        # there, name the budgets where some did not, or the two columns read as a contradiction.
        elsewhere = [budget for budget, f in columns if f.get("did_not_learn")]
        where = "" if facts.get("did_not_learn") or not elsewhere else f" at {', '.join(elsewhere)}"
        return f"yes: {len(unlearned)} arm(s) did not learn{where}"
    if len(columns) < 2:
        return "one budget only"
    names = list(dict.fromkeys(c["name"] for _, f in columns for c in f.get("claim_checks") or []))
    moved = [
        n
        for n in names
        if len({c["outcome"] for _, f in columns for c in f.get("claim_checks") or [] if c["name"] == n}) > 1
    ]
    if moved or len({f["outcome"] for _, f in columns}) > 1:
        return f"yes: the outcome changes with the budget ({len(moved)} of {len(names)} claim checks)"
    return f"not seen ({len(columns)} budgets agree)"


def summary_rows(document: str) -> list[dict[str, str]]:
    """One row per measured section of the document, in its order: the question, its outcome, the claim checks,
    seeds per point, the arms that did not learn, jobs and job time, and the run (its kind and date)."""
    rows = []
    references: dict = {}  # computed once per question data (published_shortfalls)
    for match in _BLOCK.finditer(document):
        _, name, body, _ = match.groups()
        if "@" in name:  # a budget's block: its question's row says how the outcome moves (below)
            continue
        row = {"question": f"`{name}`: {_title(name)}", "checks": "", "seeds": "", "did not learn": "", "jobs": ""}
        row["paper"] = row["scale"] = ""
        columns, _ = budget_columns(document, name)
        run = next((_RUN.match(line) for line in body.splitlines() if _RUN.match(line)), None)
        row["run"] = f"{run.group(1)}, {run.group(2)}" if run else ""
        stamp = next((line for line in body.splitlines() if line.startswith(SUMMARY_STAMP)), None)
        if stamp is not None:
            facts = json.loads(stamp[len(SUMMARY_STAMP) :].rsplit("-->", 1)[0])
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
            row["paper"] = paper_cell(name, facts)
            row["scale"] = scale_cell(facts, columns)
        elif "Verdict:" in body:  # decided under the earlier rule: what its own text says
            verdict = _OLD_VERDICT.search(body)
            row["outcome"] = "decided under the earlier rule" + (f" (then: {verdict.group(1)})" if verdict else "")
            row["checks"] = row["paper"] = row["scale"] = "not recorded"
            seeds = _seed_counts(body)
            row["seeds"] = (
                "" if not seeds else f"{min(seeds)}" if min(seeds) == max(seeds) else f"{min(seeds)} to {max(seeds)}"
            )
            row["did not learn"] = published_shortfalls(name, body, references)
            jobs = _JOBS.search(body)
            row["jobs"] = f"{jobs.group(1)} jobs, {jobs.group(2)} s" if jobs else ""
        else:
            row["outcome"] = "not measured yet"
        if columns:  # the outcome as the models train longer, from the question's outcome-against-budget table
            moves = " → ".join(f"`{budget}` {facts['outcome']}" for budget, facts in columns)
            row["outcome"] += f"; against budget (least to most training): {moves}"
        rows.append(row)
    return rows


def summary_block(document: str) -> str:
    """The summary between its markers: a heading, where it comes from, and the table."""
    columns = ["question", "outcome", "claim checks", "agrees with the cited paper", "limited by scale"]
    columns += ["seeds per point", "arms that did not learn", "job time", "run"]
    keys = ["question", "outcome", "checks", "paper", "scale", "seeds", "did not learn", "jobs", "run"]
    lines = [
        SUMMARY_BEGIN,
        SUMMARY_HEADING,
        "",
        "Generated from the Measured sections below by `python -m zoo.lab summary docs/lab.md` (and by every "
        "`publish`); not edited by hand. An arm that did not learn did not beat its question's reference (for the "
        "character LMs, a count trigram model scored on the same validation windows): under the current rule the "
        "claim checks on it are inconclusive. For a section decided under the earlier rule they are counted from "
        "its table's means, against the reference of the question's config as it is now. *Agrees with the cited "
        "paper* reads the claim checks that restate the paper's claim (`paper: true` in the question's config): "
        "agrees when all of them are supported, disagrees when one is contradicted, not decided otherwise. *Limited "
        "by scale*: yes when an arm did not learn or when a claim check's outcome changes across the question's "
        "budgets (its outcome-against-budget table), not seen when several budgets agree, one budget only otherwise.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in summary_rows(document):
        lines.append("| " + " | ".join(row.get(k, "") or "" for k in keys) + " |")
    return "\n".join([*lines, SUMMARY_END])


def with_summary(document: str) -> str:
    """The document with its summary rewritten between the markers, or put before its first `## ` heading."""
    if SUMMARY_BEGIN in document and SUMMARY_END in document:
        before, rest = document.split(SUMMARY_BEGIN, 1)
        after = rest.split(SUMMARY_END, 1)[1]
        return before + summary_block(document) + after
    lines = document.split("\n")
    first = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    return "\n".join([*lines[:first], summary_block(document), "", *lines[first:]])


def write_summary(docs: str | Path) -> int:
    """Rewrite the summary of `docs`; returns the number of sections it lists."""
    _, after = _rewrite(docs, with_summary, "pass the path of docs/lab.md")
    return len(summary_rows(after))
