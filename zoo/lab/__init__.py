"""The lab: probes, measurement jobs and the report (table, plots, verdict) of a lab sweep.

Each question is a config, `zoo/conf/experiment/lab/<name>.yaml`; `python -m zoo.lab list|run|report` drives them.
Only the entries import this package (it may use tasks, models and the core).
"""
