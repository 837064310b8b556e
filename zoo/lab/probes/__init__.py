"""The probes: Lightning callbacks that record what happens inside a model during a lab run (gradients,
activations, attention, BatchNorm statistics, per-example results, ...), and the helpers only they use.
Imports none of the lab's other rooms."""
