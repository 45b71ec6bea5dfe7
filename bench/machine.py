"""What machine a benchmark ran on: CPU, threads, torch, and its measured matmul peak."""

from __future__ import annotations

import platform
import time
from pathlib import Path

import torch

from tfm.device import cpu_bf16_support


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_gflops(dtype: torch.dtype = torch.float32, n: int = 2048, repeats: int = 5) -> float:
    """Measured GFLOP/s of an n x n matrix product on this CPU with torch's threads."""
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    a @ b  # warm up
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    seconds = (time.perf_counter() - start) / repeats
    return 2 * n**3 / seconds / 1e9


def describe(measure_peak: bool = True) -> dict:
    info = {
        "cpu": cpu_name(),
        "cores": torch.get_num_threads(),
        # "AMX", "AVX-512 BF16", or None where bf16 is emulated (tfm.device)
        "native_bf16": cpu_bf16_support(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if measure_peak:
        info["fp32_gflops"] = round(matmul_gflops(torch.float32), 1)
        if info["native_bf16"]:
            info["bf16_gflops"] = round(matmul_gflops(torch.bfloat16), 1)
    return info
