"""LitData's StreamingDataLoader, resumed the way zoo's samplers are: a run resumed from a checkpoint reads exactly
the batches an uninterrupted run would, also across epochs. Imported only by zoo.data.litdata_stream, once LitData
is known to be installed.

Two behaviours of the plain loader are changed:
- A loaded state is replayed by every new iterator until one iterator runs to its end. Lightning never runs it to
  its end (it stops at the loader's length, or at limit_train_batches), so the epoch after the resumed one would
  replay the resumed one's tail. Here the state applies to the first iterator only.
- Lightning also keeps the loader's state with its loop and loads it back only when it deems the fit loop to be
  restarting (not after a checkpoint at an epoch's end). The DataModule's copy, always restored, is the one used:
  `resume` takes it, and the `load_state_dict` Lightning calls does nothing.
"""

from __future__ import annotations

from litdata import StreamingDataLoader


class ResumableStreamingLoader(StreamingDataLoader):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._resumed_pass_started = False

    def state_dict(self, *, batches_per_epoch: int | None = None) -> dict:
        """LitData's state, and whether this rank's epoch is over (`batches_per_epoch`: Lightning's count, which
        limit_train_batches may cut below the loader's length)."""
        state = super().state_dict()
        yielded = state["num_samples_yielded"] // self.batch_size
        return {"litdata": state, "epoch_finished": batches_per_epoch is not None and yielded >= batches_per_epoch}

    def resume(self, state: dict) -> None:
        """Continue after the batches `state` counts (made by `state_dict` before the interruption)."""
        if state["epoch_finished"]:
            # Nothing of the epoch is left: the next iterator starts the next epoch, with its own order, as the
            # uninterrupted run's does (LitData would replay an empty remainder and count an extra epoch).
            self.current_epoch = state["litdata"]["current_epoch"]
            return
        super().load_state_dict(state["litdata"])

    def load_state_dict(self, obj: dict) -> None:
        """Lightning's copy of the state (see the module docstring): the DataModule's is used instead."""

    def __iter__(self):
        if self._resumed_pass_started:  # the resumed epoch is over: a new one starts
            self.restore, self._resumed_pass_started = False, False
        elif self.restore:
            self._resumed_pass_started = True
        return super().__iter__()
