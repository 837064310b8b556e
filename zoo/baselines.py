"""`python -m zoo.baselines data=...`: the same as the `zoo-baselines` command (zoo/entry/baselines.py)."""

from zoo.entry.cli import baselines

if __name__ == "__main__":
    baselines()
