"""Evaluate a checkpoint: python eval.py ckpt_path=logs/.../last.ckpt split=test"""

import hydra
from omegaconf import DictConfig

from zoo.entry.errors import one_line_errors
from zoo.entry.override_hint import suggest_nearest_key
from zoo.entry.evaluate import evaluate


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
@one_line_errors
def main(cfg: DictConfig) -> dict:
    return evaluate(cfg)


if __name__ == "__main__":
    with suggest_nearest_key("eval"):
        main()
