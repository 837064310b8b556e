"""Memory a training step holds for its backward pass, the same way on every device: the bytes of the tensors
autograd saves during the forward (storages counted once, parameters left out), since on CPU a multirun's peak RSS
only grows; on CUDA the allocator's peak too."""

from __future__ import annotations

from contextlib import contextmanager

import torch


class SavedTensorCounter:
    def __init__(self, exclude: set[int]) -> None:
        self.exclude = exclude  # storage pointers of the parameters
        self.seen: set[int] = set()
        self.bytes = 0

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.seen and key not in self.exclude:
            self.seen.add(key)
            self.bytes += storage.nbytes()
        return tensor

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor


@contextmanager
def count_saved_tensors(module: torch.nn.Module):
    """with count_saved_tensors(net) as counter: loss = net(...)  ->  counter.bytes"""
    counter = SavedTensorCounter({p.untyped_storage().data_ptr() for p in module.parameters()})
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        yield counter


def cuda_peak_mb(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20
