"""Lightning callbacks of zoo's trainer config (zoo/conf/callbacks/default.yaml): the checkpoints written on an
exception (`progress_on_exception`) or a pre-emption notice (`preemption`), the RNG state in every checkpoint
(`rng_state`), throughput and MFU (`throughput_monitor`, `throughput`) and where the wall time went (`phase_times`)."""
