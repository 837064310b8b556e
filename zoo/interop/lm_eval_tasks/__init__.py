"""Two lm-evaluation-harness tasks on a held-out text for zoo's causal LM exports: `zoo_text_ppl` (perplexity) and
`zoo_text_gen` (greedy continuation of a line, exact match). lm-eval's YAMLs name their data by path, so
`write_tasks` copies them beside the documents (JSON lines) into the folder given as `--include_path`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zoo.data import resolve_dataset

HERE = Path(__file__).parent
TASKS = ("zoo_text_ppl", "zoo_text_gen")
PROMPT_CHARS = CONTINUATION_CHARS = 16  # as zoo_text_gen.yaml's max_gen_toks
VAL_FRACTION = 0.1  # LanguageModelDataModule's default: the end of the text that training never reads


def held_out_text(text_file: str | Path | None = None, data_dir: str | Path | None = None) -> str:
    """The given file, else the validation part of tiny shakespeare (its last tenth, as zoo's data module cuts it,
    less the end of the passage the cut falls in)."""
    if text_file is not None:
        return Path(text_file).read_text(encoding="utf-8")
    (path,) = resolve_dataset("tinyshakespeare", data_dir)
    text = path.read_text(encoding="utf-8")
    held_out = text[int(len(text) * (1 - VAL_FRACTION)) :]
    return held_out[held_out.find("\n\n") + 2 :]  # from the first whole passage: the cut falls inside one


def passages(text: str) -> list[str]:
    """The perplexity documents: the text between blank lines (lm-eval scores each after the bos, the newline)."""
    return [p.strip("\n") for p in text.split("\n\n") if p.strip()]


def line_continuations(text: str) -> list[dict[str, str]]:
    """The generation documents: each line long enough gives a prompt and the characters that follow it."""
    n = PROMPT_CHARS + CONTINUATION_CHARS
    return [
        {"prompt": line[:PROMPT_CHARS], "continuation": line[PROMPT_CHARS:n]}
        for line in text.splitlines()
        if len(line) >= n
    ]


def write_tasks(folder: str | Path, text_file: str | Path | None = None, data_dir: str | Path | None = None) -> Path:
    """Write both tasks and their documents into `folder` (created); returns it, the path for `--include_path`."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    text = held_out_text(text_file, data_dir)
    documents = {"zoo_text_ppl": [{"text": p} for p in passages(text)], "zoo_text_gen": line_continuations(text)}
    for task, docs in documents.items():
        if not docs:
            raise ValueError(f"{task}: the held-out text gives no documents")
        data = folder / f"{task}.jsonl"
        data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        spec = (HERE / f"{task}.yaml").read_text(encoding="utf-8")
        # A JSON string is a YAML string: the path needs no quoting rules of its own.
        spec += f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data))}\n"
        (folder / f"{task}.yaml").write_text(spec, encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.interop.lm_eval_tasks",
        description="Write zoo's lm-eval tasks (zoo_text_ppl, zoo_text_gen) and their held-out text into a folder.",
    )
    parser.add_argument("folder", help="where to write them; pass it to lm_eval as --include_path")
    parser.add_argument("--text", help="a held-out text file (default: tiny shakespeare's validation part)")
    args = parser.parse_args(argv)
    folder = write_tasks(args.folder, args.text)
    print(f"lm_eval --model hf --model_args pretrained=<export> --include_path {folder} --tasks {','.join(TASKS)}")
