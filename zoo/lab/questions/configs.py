"""The lab's questions: one config each under zoo/conf/experiment/lab/, with its claim in the `lab` section."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[3]
QUESTIONS_DIR = Path(__file__).resolve().parents[2] / "conf" / "experiment" / "lab"


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


def question_config_params(name: str) -> dict:
    """The question's own sweep (hydra.sweeper.params): what a budget or a GPU plan's overrides may change."""
    config = OmegaConf.to_container(OmegaConf.load(QUESTIONS_DIR / f"{name}.yaml"), resolve=False)
    return ((config.get("hydra") or {}).get("sweeper") or {}).get("params") or {}


def composed_config(name: str) -> dict:
    """The question's whole config as `python -m zoo.lab run <name>` composes it (train.yaml with
    experiment=lab/<name>), unresolved but for its data section; the data and cache folders left to the
    environment (ZOO_DATA_DIR, ZOO_CACHE_DIR) and the seed dropped, so that its data can be built outside a run."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    question(name)  # a one-line error for an unknown name
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(QUESTIONS_DIR.parents[1]), version_base="1.3"):
        composed = compose(config_name="train", overrides=[f"experiment=lab/{name}"])
    config = OmegaConf.to_container(composed)
    if composed.get("data") is not None:
        # The data section is resolved (keys that follow another, e.g. data.pretrained following model.pretrained,
        # must reach the DataModule as values), its folders first left to the environment.
        for key in ("data_dir", "cache_dir"):
            if key in composed.data:
                composed.data[key] = None
        config["data"] = OmegaConf.to_container(composed.data, resolve=True)
        config["data"].pop("seed", None)
    return config
