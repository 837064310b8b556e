"""Lightning callbacks that zoo's trainer config adds to every run (zoo/conf/callbacks/default.yaml): the checkpoint
written when a run stops on an exception (`progress_on_exception`) or on a cluster's pre-emption notice
(`preemption`), the random generators saved with every checkpoint (`rng_state`), and throughput with MFU
(`throughput_monitor`, over the matmul peak that `throughput` measures), and where the wall time went
(`phase_times`: start-up, training, after the last step). Lightning keys a callback's state in a
checkpoint by its class name, not its module, so checkpoints written when these lived in zoo.tasks still resume."""

from .preemption import PreemptionCheckpoint
from .progress_on_exception import ProgressOnExceptionCheckpoint
from .rng_state import RNGStateCheckpoint
from .throughput_monitor import ZooThroughputMonitor

__all__ = ["PreemptionCheckpoint", "ProgressOnExceptionCheckpoint", "RNGStateCheckpoint", "ZooThroughputMonitor"]
