"""Evaluate a checkpoint: python eval.py ckpt_path=logs/.../last.ckpt split=test  (the same as `zoo-eval`)."""

from zoo.entry.cli import evaluate

if __name__ == "__main__":
    evaluate()
