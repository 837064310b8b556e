"""Train a zoo model: python train.py model=gpt [overrides...]  (see conf/train.yaml)."""

import hydra
from omegaconf import DictConfig

from zoo.entry.errors import one_line_errors
from zoo.entry.override_hint import suggest_nearest_key
from zoo.entry.train import train


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
@one_line_errors
def main(cfg: DictConfig) -> float | None:
    return train(cfg)


if __name__ == "__main__":
    with suggest_nearest_key("train"):
        main()
