"""`zoo-export CKPT DIR` (or `python -m zoo.export CKPT DIR`): a training checkpoint as a directory that
`transformers` loads (`AutoModel*`, `AutoTokenizer` / `AutoImageProcessor`, `pipeline`), or in zoo's own format."""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import shlex
import shutil
import sys
from pathlib import Path

import yaml

from zoo.checkpointing.reading import check_checkpoint_file, load_model_from_checkpoint, read_checkpoint
from zoo.entry.errors import one_line_errors
from zoo.interop import export_hf
from zoo.interop.export import EXPORT_FILES
from zoo.interop.exportable import check_exportable
from zoo.interop.limits import trained_context
from zoo.interop.model_card import TrainingRun, write_model_card

# What the integer labels of the registered GLUE datasets mean, for checkpoints whose data recorded only the ids.
GLUE_LABEL_NAMES = {"sst2": ["negative", "positive"]}
ZOO_FORMAT_FILES = ("config.json", "model.safetensors", "README.md")
# What --overwrite may replace: only files that an export writes (a home directory given by mistake is refused).
EXPORTED_NAMES = frozenset(EXPORT_FILES) | frozenset(ZOO_FORMAT_FILES)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="zoo-export",
        description="Export a checkpoint written by train.py: by default as a Hugging Face directory (config.json, "
        "model.safetensors, tokenizer or image-processor files, generation_config.json for GPT), always with a model "
        "card (README.md) that takes the metrics and command from the run directory of the checkpoint.",
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
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier export in DIRECTORY: its whole content, swapped in once this export is written",
    )
    return p.parse_args(argv)


def _check_target(directory: Path, overwrite: bool) -> None:
    """Before anything is written: DIRECTORY is new, empty, or (with --overwrite) an earlier export."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file; give a directory to export into")
    if not directory.is_dir() or not any(directory.iterdir()):
        return
    if not overwrite:
        raise ValueError(f"{directory} is not empty; choose a new directory or pass --overwrite")
    foreign = sorted(p.name + ("/" if p.is_dir() else "") for p in directory.iterdir() if p.name not in EXPORTED_NAMES)
    if foreign:
        raise ValueError(
            f"{directory} holds {', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}, which no export "
            "writes; --overwrite replaces only an earlier export's directory: choose a new directory"
        )


@contextlib.contextmanager
def _staged(directory: Path):
    """Yield a staging directory; once the export in it is complete, its files replace `directory`'s content whole
    (no stale file of an earlier export remains); a failing export leaves the earlier one as it was."""
    real = directory.resolve()  # beside the real folder: renames stay on one file system
    real.parent.mkdir(parents=True, exist_ok=True)
    staging = real.with_name(f".{real.name}.export-{secrets.token_hex(4)}")
    staging.mkdir()
    try:
        yield staging
        if real.is_dir():
            _swap_files(staging, real)
        else:
            staging.rename(real)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already after a swap into a new directory


def _swap_files(staging: Path, directory: Path) -> None:
    """Move `directory`'s files aside, the staged ones in, then drop the earlier ones; put everything back if a
    rename fails."""
    aside = directory.with_name(f".{directory.name}.replaced-{secrets.token_hex(4)}")
    aside.mkdir()
    moved_in: list[str] = []
    try:
        for path in list(directory.iterdir()):
            path.rename(aside / path.name)
        for path in list(staging.iterdir()):
            path.rename(directory / path.name)
            moved_in.append(path.name)
    except BaseException:
        for name in moved_in:
            (directory / name).rename(staging / name)
        for path in list(aside.iterdir()):
            path.rename(directory / path.name)
        aside.rmdir()
        raise
    shutil.rmtree(aside)


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


def run_directory(checkpoint_path: str | Path) -> Path | None:
    """The run directory train.py wrote the checkpoint into (`<run>/checkpoints/last.ckpt`), if it is one."""
    path = Path(checkpoint_path).resolve()
    folder = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    markers = ("result.json", ".hydra", "config_resolved.yaml")
    return folder if any((folder / name).exists() for name in markers) else None


def _read(path: Path, parse):
    """A run file parsed, or None (with a note) when it is missing or damaged: the card then says it is unknown."""
    if not path.is_file():
        return None
    try:
        return parse(path.read_text(encoding="utf-8"))
    except (ValueError, yaml.YAMLError, UnicodeDecodeError) as error:
        _note(f"{path} is unreadable ({type(error).__name__}); the model card leaves out what it holds")
        return None


def training_run(checkpoint_path: str | Path, checkpoint: dict, info: dict) -> TrainingRun:
    """What the model card tells of the training: the checkpoint's records, and the run directory's result.json,
    .hydra/overrides.yaml (the command) and config_resolved.yaml (the preset's name)."""
    folder = run_directory(checkpoint_path)
    result = overrides = resolved = None
    if folder is not None:
        result = _read(folder / "result.json", json.loads)
        overrides = _read(folder / ".hydra" / "overrides.yaml", yaml.safe_load)
        resolved = _read(folder / "config_resolved.yaml", yaml.safe_load)
    metrics = {}
    if isinstance(result, dict):
        metrics = dict(result.get("metrics") or {})
        if result.get("metric") and result.get("value") is not None:
            metrics.setdefault(result["metric"], result["value"])
        if overrides is None:
            overrides = result.get("overrides")
    metrics = {str(k): float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    command = None
    if isinstance(overrides, list):
        command = " ".join(["python train.py", *(shlex.quote(str(o)) for o in overrides)])
    net = ((resolved or {}).get("model") or {}).get("net") if isinstance(resolved, dict) else None
    tokenizer = json.loads(info["tokenizer"]).get("kind") if info.get("tokenizer") else None
    return TrainingRun(
        task=info.get("task"),
        data=dict(checkpoint.get("datamodule_hyper_parameters") or {}),
        hparams=dict(checkpoint.get("hyper_parameters") or {}),
        step=checkpoint.get("global_step"),
        metrics=metrics,
        command=command,
        checkpoint=str(checkpoint_path),
        preset=net.get("name") if isinstance(net, dict) else None,
        tokenizer_kind=tokenizer,
    )


def run(args: argparse.Namespace) -> list[str]:
    check_checkpoint_file(args.checkpoint, option="the CHECKPOINT argument")
    checkpoint = read_checkpoint(args.checkpoint)
    model, info = load_model_from_checkpoint(args.checkpoint)
    directory = Path(args.directory)
    run = training_run(args.checkpoint, checkpoint, info)
    if args.format == "zoo":
        if args.labels is not None:
            raise ValueError("--labels applies to --format hf (zoo's format keeps the model config only)")
        _check_target(directory, args.overwrite)
        with _staged(directory) as staging:
            model.save_pretrained(staging)
            write_model_card(staging, model, fmt="zoo", context=trained_context(model, run.data), run=run)
            files = sorted(p.name for p in staging.iterdir() if p.name in ZOO_FORMAT_FILES)
        return files
    labels = class_names(checkpoint, info, args.labels)
    classifier = info.get("task") in ("sequence_classification", "image_classification")
    if labels is not None and not classifier:
        raise ValueError(
            f"--labels was given, but {args.checkpoint} holds a '{info.get('task')}' model, not a classifier"
        )
    check_exportable(model)  # before touching the directory
    _check_target(directory, args.overwrite)
    tokenizer_json = info.get("tokenizer")
    with _staged(directory) as staging:
        files = export_hf(
            model,
            staging,
            tokenizer_json=tokenizer_json,
            labels=labels,
            image_mean=info.get("image_mean"),
            image_std=info.get("image_std"),
            run=run,
        )
    if classifier and labels is None:
        _note(
            f"{args.checkpoint} records no class names, so config.json names the classes LABEL_0, LABEL_1, ...; "
            "pass --labels to name them"
        )
    if info.get("task") in ("causal_lm", "mlm_nsp", "sequence_classification", "seq2seq") and not info.get("tokenizer"):
        _note(f"{args.checkpoint} stores no tokenizer, so none was exported")
    if info.get("model_type") == "vit" and info.get("image_mean") is None:
        _note(f"{args.checkpoint} records no image normalization, so no preprocessor_config.json was written")
    return files


@one_line_errors(hydra_job=False, elsewhere="export into another DIRECTORY")
def main(argv=None) -> None:
    args = parse_args(argv)
    files = run(args)
    print(f"exported {args.checkpoint} to {args.directory} ({args.format}): {', '.join(files)}")
