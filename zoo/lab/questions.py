"""The lab's questions: one config each under zoo/conf/experiment/lab/, with its claim in the `lab` section."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS_DIR = Path(__file__).resolve().parents[1] / "conf" / "experiment" / "lab"


def question_names() -> list[str]:
    return sorted(p.stem for p in QUESTIONS_DIR.glob("*.yaml"))


def question(name: str) -> dict:
    """The `lab` section of a question's config; a one-line error naming the known questions otherwise."""
    names = question_names()
    if name not in names:
        raise ValueError(f"unknown lab question '{name}'; known questions: {', '.join(names)}")
    lab = OmegaConf.load(QUESTIONS_DIR / f"{name}.yaml").get("lab")
    if lab is None:
        raise ValueError(f"{QUESTIONS_DIR / name}.yaml has no `lab` section (title, claim, checks, quick)")
    return OmegaConf.to_container(lab, resolve=False)
