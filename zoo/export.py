"""`python -m zoo.export CKPT DIR`: the same as the `zoo-export` command (zoo/entry/export.py)."""

from zoo.entry.export import main

if __name__ == "__main__":
    main()
