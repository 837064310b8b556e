"""`zoo-export CKPT DIR` (or `python -m zoo.export CKPT DIR`): a training checkpoint as a directory that
`transformers` loads (`AutoModel*`, `AutoTokenizer` / `AutoImageProcessor`, `pipeline`), or in zoo's own format."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.entry.errors import one_line_errors
from zoo.interop import export_hf
from zoo.interop.export import EXPORT_FILES
from zoo.interop.exportable import check_exportable
from zoo.tasks import load_model_from_checkpoint, read_checkpoint
from zoo.tasks.checkpoint import check_checkpoint_file

# What the integer labels of the registered GLUE datasets mean (GLUE's own task descriptions), for checkpoints
# whose data recorded only the ids.
GLUE_LABEL_NAMES = {"sst2": ["negative", "positive"]}
ZOO_FORMAT_FILES = ("config.json", "model.safetensors", "README.md")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="zoo-export",
        description="Export a checkpoint written by train.py: by default as a Hugging Face directory (config.json, "
        "model.safetensors, tokenizer or image-processor files, generation_config.json for GPT).",
    )
    p.add_argument("checkpoint", help="a .ckpt file, e.g. logs/.../checkpoints/last.ckpt")
    p.add_argument("directory", help="where to write the files (created; must be empty unless --overwrite)")
    p.add_argument(
        "--format",
        choices=("hf", "zoo"),
        default="hf",
        help="hf: for transformers (GPT, BERT, ViT); zoo: zoo's own config.json + model.safetensors for "
        "ZooModel.from_pretrained, for any model (default: hf)",
    )
    p.add_argument(
        "--labels",
        default=None,
        metavar="A,B,...",
        help="class names in class-id order, for a classifier whose checkpoint records none",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the files of an earlier export in DIRECTORY")
    return p.parse_args(argv)


def _prepare(directory: Path, overwrite: bool, names: tuple[str, ...]) -> None:
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file; give a directory to export into")
    if directory.is_dir() and any(directory.iterdir()):
        if not overwrite:
            raise ValueError(f"{directory} is not empty; choose a new directory or pass --overwrite")
        for name in names:  # files of an earlier export that this one might not write again
            (directory / name).unlink(missing_ok=True)


def class_names(checkpoint: dict, info: dict, given: str | None) -> list[str] | None:
    """The classifier's label names: --labels, else what the checkpoint recorded, else GLUE's meaning of the ids."""
    if given is not None:
        names = [name.strip() for name in given.split(",")]
        if not all(names):
            raise ValueError(f"--labels {given!r} has an empty name; give names separated by commas")
        return names
    if info.get("class_names"):
        return [str(name) for name in info["class_names"]]
    dataset = (checkpoint.get("datamodule_hyper_parameters") or {}).get("dataset")
    if info.get("task") == "sequence_classification" and dataset in GLUE_LABEL_NAMES:
        return list(GLUE_LABEL_NAMES[dataset])
    return None


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> list[str]:
    """Export; returns the names of the files written."""
    check_checkpoint_file(args.checkpoint)  # one-line errors for a missing, truncated or foreign file
    checkpoint = read_checkpoint(args.checkpoint)
    model, info = load_model_from_checkpoint(args.checkpoint)
    directory = Path(args.directory)
    if args.format == "zoo":
        if args.labels is not None:
            raise ValueError("--labels applies to --format hf (zoo's format keeps the model config only)")
        _prepare(directory, args.overwrite, ZOO_FORMAT_FILES)
        model.save_pretrained(directory)
        return sorted(p.name for p in directory.iterdir() if p.name in ZOO_FORMAT_FILES)
    labels = class_names(checkpoint, info, args.labels)
    classifier = info.get("task") in ("sequence_classification", "image_classification")
    if labels is not None and not classifier:
        raise ValueError(
            f"--labels was given, but {args.checkpoint} holds a '{info.get('task')}' model, not a classifier"
        )
    check_exportable(model)  # before touching the directory
    _prepare(directory, args.overwrite, EXPORT_FILES)
    files = export_hf(
        model,
        directory,
        tokenizer_json=info.get("tokenizer"),
        labels=labels,
        image_mean=info.get("image_mean"),
        image_std=info.get("image_std"),
    )
    if classifier and labels is None:
        _note(
            f"{args.checkpoint} records no class names, so config.json names the classes LABEL_0, LABEL_1, ...; "
            "pass --labels to name them"
        )
    if info.get("task") in ("causal_lm", "mlm_nsp", "sequence_classification") and not info.get("tokenizer"):
        _note(f"{args.checkpoint} stores no tokenizer, so none was exported")
    if info.get("model_type") == "vit" and info.get("image_mean") is None:
        _note(f"{args.checkpoint} records no image normalization, so no preprocessor_config.json was written")
    return files


@one_line_errors(hydra_job=False)
def main(argv=None) -> None:
    args = parse_args(argv)
    files = run(args)
    print(f"exported {args.checkpoint} to {args.directory} ({args.format}): {', '.join(files)}")
