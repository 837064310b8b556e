"""What the machine computes natively: bf16 on a CPU only where it has bf16 instructions.

bf16 on a CPU without bf16 instructions falls back to converting around fp32 kernels: correct but several times
slower than fp32. The rule: on CUDA, bf16 where `torch.cuda.is_bf16_supported()`; on a CPU, bf16 where
/proc/cpuinfo lists `avx512_bf16` or `amx_bf16` (Linux; elsewhere the flags cannot be read and bf16 counts as not
native). `torch.backends.cpu.get_cpu_capability()` (AVX2, AVX512, ...) is reported beside it: it names the vector
width torch dispatches to, not bf16 support. Used by the benchmark (which dtypes to measure) and by the batched
Muon (which dtype its Newton-Schulz iteration runs in).
"""

from __future__ import annotations

import torch

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags() -> set[str] | None:
    """The CPU feature flags of /proc/cpuinfo, or None where there is no such file."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def native_bf16(device: torch.device) -> tuple[bool, str]:
    """(whether bf16 runs natively, the reason in words)."""
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return ok, f"torch.cuda.is_bf16_supported() is {ok}"
    capability = torch.backends.cpu.get_cpu_capability()
    flags = cpu_flags()
    if flags is None:
        return False, f"no /proc/cpuinfo to read bf16 flags from (torch CPU capability {capability})"
    found = [f for f in BF16_FLAGS if f in flags]
    if found:
        return True, f"{'/'.join(found)} in /proc/cpuinfo (torch CPU capability {capability})"
    return False, f"no {' or '.join(BF16_FLAGS)} in /proc/cpuinfo (torch CPU capability {capability})"
