"""Which dtypes this machine computes natively, so that the default run measures what the hardware is built for.

bf16 autocast on a CPU without bf16 instructions is correct but several times slower than fp32, so measuring it
there says little and takes long: the default run measures bf16 only where `zoo.core.hardware.native_bf16` says
the machine has it.
"""

from __future__ import annotations

import torch

from zoo.core.hardware import native_bf16


def default_dtypes(device: torch.device) -> tuple[list[str], list[str]]:
    """(dtypes to measure by default, a line for each one left out and why)."""
    ok, why = native_bf16(device)
    if ok:
        return ["fp32", "bf16"], []
    return ["fp32"], [f"skipped bf16: not native here ({why}); --dtypes fp32,bf16 measures it anyway (slowly)"]
