"""docs/lab.md is rendered from the published results (docs/lab/*/result.json) and its hand-written text: the
committed page renders again byte for byte, and nothing inside a generated region is read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zoo.lab.report.page import RESULT, load_results, render

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_committed_page_renders_byte_identically_from_its_results():
    page = (DOCS / "lab.md").read_text()
    assert render(page, load_results(DOCS / "lab")) == page, "run `python -m zoo.lab render` and commit docs/lab.md"


def test_what_stands_inside_the_generated_regions_is_never_read():
    page = (DOCS / "lab.md").read_text()
    results = load_results(DOCS / "lab")
    scribbled = re.sub(
        r"(<!-- measured:([^ @]+) -->\n).*?(<!-- /measured:\2 -->)", r"\1scribbled\n\3", page, flags=re.DOTALL
    )
    scribbled = re.sub(r"(<!-- lab-summary-table -->).*?(<!-- /lab-summary-table -->)", r"\1\2", scribbled, flags=re.S)
    assert scribbled != page and render(scribbled, results) == page


def test_every_result_names_its_question_and_files_that_are_there():
    results = load_results(DOCS / "lab")
    assert results and {p.parent.name for p in (DOCS / "lab").glob(f"*/{RESULT}")} == {
        r["folder"] for r in results.values()
    }
    for result in results.values():
        folder = DOCS / "lab" / result["folder"]
        assert all((folder / name).is_file() for name in result["files"]), folder
        assert {"outcome", "claim_checks", "seeds", "did_not_learn"} <= set(result["facts"]), folder


def test_a_result_without_its_questions_markers_is_refused():
    results = load_results(DOCS / "lab")
    with pytest.raises(ValueError, match="no '<!-- measured:"):
        render("# Lab\n", results)


@pytest.mark.parametrize("text", ['{"question": "heads", "budget": null', '{"question": "heads", "budget": null}'])
def test_a_damaged_or_incomplete_result_file_is_named_with_how_to_restore_it(tmp_path, text):
    (tmp_path / "heads").mkdir()
    (tmp_path / "heads" / RESULT).write_text(text)
    with pytest.raises(ValueError, match=r"heads/result.json: not a published result .*restore it from git"):
        load_results(tmp_path)
