"""`python -m zoo.prepare ...`: the same as the `zoo-prepare` command (zoo/entry/prepare.py)."""

from zoo.entry.cli import prepare

if __name__ == "__main__":
    prepare()
