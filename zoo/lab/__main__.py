"""python -m zoo.lab list | report <sweep_dir> | run <name> [--quick] [--budget <b>] [--dry-run] [overrides...]
| publish <sweep_dir> | summary | gpu [--cpu] [--only <a,b>] [overrides...]: the command line is zoo/lab/run/cli.py."""

import sys

from zoo.lab.run.cli import main

if __name__ == "__main__":
    sys.exit(main())
