"""The documentation a newcomer reads: README.md stays a front door (at most 200 lines), and every relative link in
README.md, CONTRIBUTING.md and docs/ reaches a file of the repository, and a heading of that file when the link
names an #anchor.

Links are read as GitHub renders them: `[text](path)`, `![alt](path)`, `[text](path#anchor)`, `[text](#anchor)` and
reference definitions `[name]: path`; nothing inside code (fenced blocks, inline code spans) is a link. Anchors follow
GitHub's rule for headings: lowercase, punctuation other than hyphens and underscores removed, each space a hyphen,
and a repeated heading gets -1, -2, ... http(s) and mailto links are not followed (the tests never use the network)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from conftest import ROOT

README_MAX_LINES = 200

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
# [text](target) or ![alt](target); the text may hold one level of brackets and span lines; an optional "title".
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)", re.MULTILINE)
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=[\"']([^\"']+)[\"']", re.IGNORECASE)
EXTERNAL = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)
GITHUB_LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")


def documentation_files(root: Path) -> list[Path]:
    """README.md, CONTRIBUTING.md and every markdown page under docs/."""
    return [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").rglob("*.md"))]


def without_code(text: str) -> str:
    """The text with fenced code blocks and inline code spans blanked (newlines kept, so line numbers stay)."""
    lines, fence = [], None
    for line in text.split("\n"):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)[0] * len(opening.group(1))
            lines.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            lines.append("")
        else:
            lines.append(line)
    return INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), "\n".join(lines))


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: its text (links reduced to their text) lowercased, every character that is
    not a letter, digit, underscore, hyphen or space removed, spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a markdown file offers: its headings' ids (a repeated one numbered) and explicit <a id/name>."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    for line in without_code(text).split("\n"):
        heading = ATX_HEADING.match(line)
        if heading:
            base = github_anchor(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    found.update(HTML_ANCHOR.findall(text))
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in a markdown file, code excluded."""
    text = without_code(path.read_text(encoding="utf-8"))
    found = [(m.start(1), m.group(1)) for m in INLINE_LINK.finditer(text)]
    found += [(m.start(1), m.group(1)) for m in REFERENCE_DEFINITION.finditer(text)]
    return sorted((text.count("\n", 0, offset) + 1, target.strip("<>")) for offset, target in found)


def broken_links(path: Path, root: Path) -> list[str]:
    """One line per relative link of `path` that does not resolve: no such file in `root`, a target outside `root`,
    or an #anchor that names no heading of the target."""
    problems = []
    where = path.relative_to(root)
    for line, target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = unquote(target).partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        if not resolved.is_relative_to(root.resolve()):
            problems.append(f"{where}:{line}: {target}: leaves the repository")
            continue
        if not resolved.exists():
            problems.append(f"{where}:{line}: {target}: no file {resolved.relative_to(root.resolve())}")
            continue
        if not anchor:
            continue
        if resolved.suffix.lower() == ".md":
            if anchor not in anchors(resolved):
                problems.append(f"{where}:{line}: {target}: no heading with anchor #{anchor} in {resolved.name}")
        elif not (resolved.is_file() and GITHUB_LINE_ANCHOR.match(anchor)):
            problems.append(f"{where}:{line}: {target}: #{anchor} is neither a heading nor a line of a file")
    return problems


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the details to a page under docs/"
    )


def test_every_relative_link_of_the_documentation_resolves():
    files = documentation_files(ROOT)
    assert {"README.md", "design.md", "lab.md"} <= {p.name for p in files}
    checked = [target for path in files for _, target in links(path) if not EXTERNAL.match(target)]
    assert len(checked) >= 30, f"only {len(checked)} relative links found: is the link pattern still read?"
    problems = [problem for path in files for problem in broken_links(path, ROOT)]
    assert not problems, "broken links in the documentation:\n" + "\n".join(problems)


def test_the_readme_links_every_page_under_docs():
    """A page no one links from the front door is a page a newcomer never finds."""
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in links(ROOT / "README.md")}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md")}
    assert not pages - linked, f"pages not linked from README.md: {sorted(p.name for p in pages - linked)}"


def test_github_anchor_rule():
    assert github_anchor("Set up and test") == "set-up-and-test"
    assert github_anchor("Scale out, sweep, log, resume") == "scale-out-sweep-log-resume"
    assert github_anchor("Adding a question (or a probe)") == "adding-a-question-or-a-probe"
    assert github_anchor("1. Why scale the dot product by 1/sqrt(d_k)? (`scaling`)") == (
        "1-why-scale-the-dot-product-by-1sqrtd_k-scaling"
    )
    assert github_anchor("Encoder-decoder Transformer (Multi30k translation)") == (
        "encoder-decoder-transformer-multi30k-translation"
    )
    assert github_anchor("See [the lab](docs/lab.md)") == "see-the-lab"


def test_the_checker_reports_each_kind_of_broken_link(tmp_path):
    """The checker the documentation passes fails on a file that is not there, a heading that is not there, a link
    out of the repository; and it reads links only where GitHub renders them."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text("# Guide\n\n## Set up and test (CPU)\n\n## Notes\n\n## Notes\n")
    (root / "docs" / "plot.png").write_bytes(b"\x89PNG")
    (root / "tool.py").write_text("x = 1\n")
    page = root / "README.md"
    page.write_text(
        "# Front door\n"
        "\n"
        "[guide](docs/guide.md), [set-up](docs/guide.md#set-up-and-test-cpu), [notes again](docs/guide.md#notes-1),\n"
        "![plot](docs/plot.png), [here](#front-door), [web](https://example.org/missing.md#x), [line](tool.py#L1)\n"
        "[a link whose text\nspans two lines](docs/guide.md)\n"
        "[missing file](docs/nowhere.md)\n"
        "[missing heading](docs/guide.md#install)\n"
        "[missing here](#back-door)\n"
        "[outside](../elsewhere.md)\n"
        "[not a line](tool.py#x)\n"
        "[ref]: docs/gone.md\n"
        "\n"
        "```markdown\n"
        "[in a code block](docs/absent.md)\n"
        "```\n"
        "Inline `[in code](docs/absent.md)` is not a link either.\n"
    )
    problems = broken_links(page, root)
    assert problems == [
        "README.md:7: docs/nowhere.md: no file docs/nowhere.md",
        "README.md:8: docs/guide.md#install: no heading with anchor #install in guide.md",
        "README.md:9: #back-door: no heading with anchor #back-door in README.md",
        "README.md:10: ../elsewhere.md: leaves the repository",
        "README.md:11: tool.py#x: #x is neither a heading nor a line of a file",
        "README.md:12: docs/gone.md: no file docs/gone.md",
    ], problems
    # The same page with its broken links taken out passes.
    page.write_text("\n".join(page.read_text().split("\n")[:6]) + "\n")
    assert broken_links(page, root) == []
