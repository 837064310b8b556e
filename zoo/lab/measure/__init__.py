"""Cost measurements: timing arms interleaved in one process (also the benchmarks' timer), memory, the measurement
jobs of a question's `measure`, and the callbacks that time or weigh a run (cost, activation cost, BatchNorm
folding). Imports only the probes' helpers of the lab."""
