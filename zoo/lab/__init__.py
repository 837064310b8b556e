"""The lab: probes, measurement jobs and the report (table, plots, verdict) of a lab sweep.

Each question is a config, `zoo/conf/experiment/lab/<name>.yaml`; `python -m zoo.lab list|run|report` drives them.
Only the entries import this package (it may use tasks, models and the core).

Its rooms, each importing only the rooms before it (tests/test_import_floors.py):
probes (callbacks recording during training) <- measure (measurement jobs) <- decide (statistics, claims,
references, reading a sweep) <- questions (the questions' configs and budgets) <- report (report, plots, overlays,
publishing) <- run (the command line and the GPU runner; `python -m zoo.lab` is zoo/lab/run/cli.py).
"""
