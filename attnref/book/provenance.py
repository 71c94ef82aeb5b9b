"""What a stored result was computed on: the CPU kernel path, the BLAS, the versions.

The last bits of a float32 or float64 result depend on which vectorised kernels torch picks at
start-up (``torch.backends.cpu.get_cpu_capability()``: AVX512, AVX2 or DEFAULT, the best the CPU
supports unless ``ATEN_CPU_CAPABILITY`` caps it) and on the BLAS path (MKL picks its own code
path per CPU unless ``MKL_ENABLE_INSTRUCTIONS`` caps it). Every stored measurement records them,
so that a difference between machines can be traced to its cause.
"""

from __future__ import annotations

import os
import platform
import re


def machine() -> dict:
    """The kernel path, BLAS and versions of this process (JSON-ready; no paths, no host name)."""
    import numpy
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY"),
        "MKL_ENABLE_INSTRUCTIONS": os.environ.get("MKL_ENABLE_INSTRUCTIONS"),
        "blas": blas.group(1) if blas else "unknown",
        "mkl": torch.backends.mkl.is_available(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__, "numpy": numpy.__version__, "python": platform.python_version(),
    }


#: A stored float32 result may lie this many times this machine's float32 error from the float64
#: value of the same computation: two float32 evaluations differ in summation order and kernels
#: (AVX-512, AVX2, default), and their errors were measured within a factor 8 of each other.
FLOAT32_ERROR_FACTOR = 32
#: The smallest float32 error assumed (4 units of round-off, relative), for a result this machine
#: happens to get almost exactly.
FLOAT32_ERROR_FLOOR = 4 * 2.0 ** -24


def float32_drift(stored, again, reference) -> tuple[float, float]:
    """For a stored float32 result: (its relative distance from ``reference``, the same computation
    run here in float64; the tolerance: :data:`FLOAT32_ERROR_FACTOR` × the float32 error of
    ``again``, the same computation run here in float32, at least the floor). Distances are
    relative to the largest |reference|. The tolerance never depends on the stored values, so a
    wrong stored value cannot widen it."""
    import torch

    reference = torch.as_tensor(reference, dtype=torch.float64)
    scale = reference.abs().max().clamp(min=1e-300)
    distance = lambda x: float((torch.as_tensor(x).double() - reference).abs().max() / scale)
    return distance(stored), FLOAT32_ERROR_FACTOR * max(distance(again), FLOAT32_ERROR_FLOOR)
