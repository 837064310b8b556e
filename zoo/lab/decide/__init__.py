"""The decision rule: statistics, claim checks and their verdicts, evidence, reference lines (n-gram baselines),
tuning, metric names and the reading of a sweep's folder. Imports only probes and measure of the lab (the timing
companions' names), never questions, report or run."""
