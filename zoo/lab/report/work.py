"""What each job of a lab sweep trained on (tokens, images or sentences), for the Measured header beside the job time.
The runs do not count it, so it is computed from each job's config: optimizer steps x the global batch
(`data.batch_size`), x the block size for windows of tokens: the planned budget."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from ..decide.sweep import Sweep, read_yaml

# DataModule class -> (what one batch element is, whether it is a window of `data.block_size` tokens).
UNITS = {
    "LanguageModelDataModule": ("tokens", True),
    "TokenShardsDataModule": ("tokens", True),
    "ImageClassificationDataModule": ("images", False),
    "GlueDataModule": ("sentences", False),  # one row of the TSV (a pair task's row holds two)
}


@dataclass(frozen=True)
class Work:
    """What one job trained on: `count` `unit`, from `formula` (in words)."""

    count: int
    unit: str
    formula: str


def _select(config: DictConfig, key: str):
    try:
        return OmegaConf.select(config, key, default=None)
    except Exception:  # an interpolation that no longer resolves outside the run: the figure is not known
        return None


def _positive_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def job_work(config: DictConfig) -> Work | None:
    """The work of one job from its config; None when the config does not say (a measurement job trains nothing,
    an epoch budget or an unknown DataModule has no count without the data)."""
    if _select(config, "measure") is not None or _select(config, "train") is False:
        return None
    steps = _positive_int(_select(config, "trainer.max_steps"))
    target = str(_select(config, "data._target_") or "").rsplit(".", 1)[-1]
    if steps is None:
        return None
    if target == "TranslationDataModule":  # batches are bounded in padded tokens per side, not in sentences
        max_tokens = _positive_int(_select(config, "data.max_tokens"))
        if max_tokens is None:
            return None
        return Work(steps * max_tokens, "padded tokens per side at most", f"{steps} steps x {max_tokens}")
    batch = _positive_int(_select(config, "data.batch_size"))
    if target not in UNITS or batch is None:
        return None
    unit, windows = UNITS[target]
    if not windows:
        return Work(steps * batch, unit, f"{steps} steps x {batch}")
    block = _positive_int(_select(config, "data.block_size"))
    return None if block is None else Work(steps * batch * block, unit, f"{steps} steps x {batch} x {block}")


def sweep_work(sweep: Sweep) -> list[Work | None]:
    """One entry per finished job of the sweep, in order."""
    paths = [j.directory / "config_resolved.yaml" for j in sweep.jobs]
    configs = [read_yaml(p) if p.is_file() else None for p in paths]
    return [job_work(c) if isinstance(c, DictConfig) else None for c in configs]


def work_line(sweep: Sweep) -> str:
    """'Each job trained on 460,800 tokens (600 steps x 12 x 64, computed from the config).' or a range when the
    jobs differ; empty when no job's config says."""
    works = sweep_work(sweep)
    known = [w for w in works if w is not None]
    if not known:
        return ""
    unknown = len(works) - len(known)
    rest = f"; {unknown} of {len(works)} jobs: not known from their config" if unknown else ""
    units = list(dict.fromkeys(w.unit for w in known))
    if len(set(known)) == 1:
        w = known[0]
        return f"Each job trained on {w.count:,} {w.unit} ({w.formula}, computed from the config{rest})."
    if len(units) == 1:
        low, high = min(w.count for w in known), max(w.count for w in known)
        return f"The jobs trained on {low:,} to {high:,} {units[0]} each (computed from the config{rest})."
    shown = "; ".join(f"{w.count:,} {w.unit}" for w in dict.fromkeys(known))
    return f"The jobs trained on {shown} (computed from the config{rest})."
