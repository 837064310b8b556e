"""One process prepares a cache, the others wait for it (zoo/data/prepare_lock.py); the DDP runs that rely on it
are in tests/test_distributed.py."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time

import pytest

from zoo.data.prepare_lock import lock_file, prepare_once

from conftest import ROOT

# Another process asks for the same cache: it prints whether it made it.
OTHER = """
import logging
import sys
from pathlib import Path
from zoo.data.prepare_lock import prepare_once
logging.basicConfig(level=logging.INFO, format="%(message)s")
marker = Path(sys.argv[1])
print("made" if prepare_once(marker, lambda: marker.write_text("other"), what="a test cache") else "read", flush=True)
"""


def test_a_process_that_finds_the_lock_taken_waits_and_then_reads_what_was_made(tmp_path):
    marker = tmp_path / "cache" / "done"
    marker.parent.mkdir()
    with open(lock_file(marker), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a process in the middle of preparing
        command = [sys.executable, "-c", OTHER, str(marker)]
        other = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = other.stderr.readline()  # its first log line, once it has found the lock taken
        assert said.startswith("waiting for another process to prepare a test cache"), said
        time.sleep(0.5)
        assert other.poll() is None  # still waiting
        marker.write_text("first")
        fcntl.flock(held, fcntl.LOCK_UN)
    assert other.communicate(timeout=60)[0].strip() == "read"
    assert marker.read_text() == "first"


def test_made_once(tmp_path):
    calls = []
    marker = tmp_path / "done"
    assert prepare_once(marker, lambda: calls.append(marker.touch()), what="x")
    assert not prepare_once(marker, lambda: calls.append(1), what="x") and len(calls) == 1


def test_a_second_prepare_into_a_folder_being_written_is_refused_at_once(tmp_path):
    """Two zoo-prepare runs into one prepare.output_dir (different vocabularies, say) would leave one manifest and
    stray shards: the second is refused in one line, before it reads or writes anything, while the first holds the
    folder's lock; once the lock is free, it prepares."""
    from zoo.data.prepare import LOCK, PrepareOptions, prepare_shards

    text = tmp_path / "t.txt"
    text.write_text("".join(f"paragraph {i}: some text of mine.\n\n" for i in range(200)))
    options = PrepareOptions(tokenizer="char", documents="paragraphs", inputs={"train": [str(text)], "val": None})
    out = tmp_path / "shards"
    out.mkdir()
    with open(out / LOCK, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the first run does while it prepares (it writes its process id)
        held.write("4242")
        held.flush()
        with pytest.raises(ValueError) as refused:
            prepare_shards(options, out, log=lambda _: None)
        assert str(refused.value) == (
            f"{out} is being written by another zoo-prepare (process 4242 holds {LOCK} there); wait for it to "
            "finish, or give this one another prepare.output_dir"
        )
        assert sorted(p.name for p in out.iterdir()) == [LOCK]  # nothing read, nothing written
        fcntl.flock(held, fcntl.LOCK_UN)
    manifest = prepare_shards(options, out, log=lambda _: None)
    assert manifest["tokens"]["train"] > 0 and (out / "manifest.json").is_file()
