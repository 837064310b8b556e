"""torch.load(weights_only=True) of a checkpoint file with its failures as one-line errors naming the file. In
zoo/core because every layer reads checkpoints: the tasks (resume, evaluation) and the data (a pretrained BERT's
tokenizer stored in its checkpoint), and zoo/data may not import zoo/tasks."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

# What torch's weights-only unpickler says when a pickle would import or call something (as opposed to bytes that
# are no pickle at all, "Unsupported operand"): a global it does not allow, an object it will not build.
_CODE_MARKS = ("GLOBAL", "allowlisted", "reduce for unrecognized")


def names_code(error: pickle.UnpicklingError) -> bool:
    detail = str(error).split("WeightsUnpickler error:")[-1]
    return any(mark in detail for mark in _CODE_MARKS)


def code_refused(path: str | Path) -> ValueError:
    return ValueError(
        f"{path} was refused: it contains code (pickled Python objects), not weights; use a checkpoint written by "
        "zoo, or re-save its tensors from a trusted copy"
    )


def not_a_checkpoint_file(path: str | Path, option: str = "the path") -> Exception:
    """The one-line error for a checkpoint path that is no file: a directory (the run directory, or its
    checkpoints/ folder, given instead of a file in it) names the checkpoint files inside it; else not found."""
    path = Path(path)
    if not path.is_dir():
        return FileNotFoundError(f"checkpoint not found: {path.resolve()}; check {option}")
    inside = [path, path / "checkpoints"]
    files = [f for folder in inside if folder.is_dir() for f in folder.glob("*.ckpt") if f.is_file()]
    # last.ckpt first (where a run's newest state is), then the newest
    files.sort(key=lambda f: (f.name != "last.ckpt", -f.stat().st_mtime_ns))
    if files:
        shown = ", ".join(str(f.resolve()) for f in files[:3]) + (f" ({len(files) - 3} more)" if len(files) > 3 else "")
        fix = f"give one of the checkpoint files in it: {shown}"
    else:
        fix = "it holds no .ckpt file (nor does a checkpoints/ folder in it); give the path of a checkpoint file"
    return ValueError(f"{path.resolve()} is a directory, not a checkpoint file; check {option}: {fix}")


def torch_load_weights(path: str | Path, *, mmap: bool = False):
    """torch.load(weights_only=True) with its failures as one-line errors naming the file: a pickle that would run
    code is refused as such, a truncated or foreign file is unreadable. mmap=True reads tensors only when touched
    (cheap for the step counter of a large checkpoint)."""
    path = Path(path)
    if not path.is_file():
        raise not_a_checkpoint_file(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        if not names_code(error):
            detail = str(error).split("WeightsUnpickler error:")[-1].split("Check the documentation")[0]
            reason = " ".join(detail.split())[:200]
            raise ValueError(
                f"{path} is not a readable checkpoint (not written by torch.save, or damaged: {reason})"
            ) from error
        raise code_refused(path) from error
    except Exception as error:  # torch raises several types (RuntimeError, EOFError, ...) for truncated files
        reason = " ".join(str(error).split())[:200]
        raise ValueError(
            f"{path} is not a readable checkpoint (truncated, or not written by torch.save: {reason})"
        ) from error
