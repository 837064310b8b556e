"""LitData's StreamingDataLoader, resumed the way zoo's samplers are: a resumed run reads exactly the batches an
uninterrupted run would, also across epochs (imported once LitData is known to be installed). Two changes:
- The plain loader replays a loaded state in every new iterator until one runs to its end, which Lightning never
  does; here the state applies to the first iterator only.
- Lightning loads its own copy of the state back only when it deems the fit loop to be restarting; the
  DataModule's copy, always restored, is used instead (`resume`), and `load_state_dict` does nothing.
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
            # The next iterator starts the next epoch (LitData would replay an empty remainder and count an epoch).
            self.current_epoch = state["litdata"]["current_epoch"]
            return
        super().load_state_dict(state["litdata"])

    def load_state_dict(self, obj: dict) -> None:
        """Lightning's copy of the state: the DataModule's is used instead."""

    def __iter__(self):
        if self._resumed_pass_started:  # the resumed epoch is over: a new one starts
            self.restore, self._resumed_pass_started = False, False
        elif self.restore:
            self._resumed_pass_started = True
        return super().__iter__()
