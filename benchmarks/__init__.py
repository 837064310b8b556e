"""Benchmarks of zoo against the implementations our users would otherwise pick, in one process."""
