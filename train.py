"""Train a zoo model: python train.py model=gpt [overrides...]  (see zoo/conf/train.yaml). The same as `zoo-train`."""

from zoo.entry.cli import train

if __name__ == "__main__":
    train()
