"""Memory a training step holds for its backward pass, measured the same way on every device.

On CPU there is no allocator peak to read per job (the process's peak RSS only ever grows across the jobs of
a multirun), so the lab counts the bytes of the tensors autograd saves for backward during the forward pass:
the activation memory, which is what grows as O(n^2) for full attention and O(n w) for a window. Storages are
counted once however many ops save them, and parameters are left out. On CUDA the allocator's peak is read too.
"""

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
