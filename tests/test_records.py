"""The code a run records in its result.json (zoo.entry.records.code_version): the checkout's commit, marked +dirty
when tracked files differ from it, and the installed package's version outside a checkout."""

from __future__ import annotations

import importlib.metadata
import subprocess

import zoo.entry.records as records


def test_a_checkout_gives_its_commit_and_says_when_files_differ(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short=12", "HEAD"], capture_output=True)
    monkeypatch.setattr(records, "_CHECKOUT", tmp_path)
    assert records.code_version() == head.stdout.decode().strip()
    (tmp_path / "a.py").write_text("x = 2\n")
    assert records.code_version() == head.stdout.decode().strip() + "+dirty"


def test_outside_a_checkout_the_package_version(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_CHECKOUT", tmp_path)  # no repository here or above (a temporary folder)
    assert records.code_version() == f"transformer-zoo {importlib.metadata.version('transformer-zoo')}"
