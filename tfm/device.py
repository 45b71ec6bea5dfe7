"""Devices and numeric precision: detected from the machine, never assumed."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from pathlib import Path

import torch

from tfm.errors import UsageError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when available, else CPU; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is available here; use --device cpu")
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise UsageError(f"--device {name}: not a device (use auto, cpu or cuda)") from e


def cpu_bf16_support() -> str | None:
    """How this CPU computes bf16 in hardware: "AMX" (Intel Xeon since Sapphire Rapids),
    "AVX-512 BF16" (AMD Zen 4/5, Intel Cooper Lake), or None where bf16 is emulated (AVX2-only
    CPUs, older AVX-512 ones): there a bf16 matrix product is far slower than fp32's
    (docs/BENCHMARKS.md)."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags.update(line.split(":", 1)[1].split())
                break
    except OSError:  # not Linux: ask torch's CPU probe (private helpers, hence getattr)
        probe = {"amx_bf16": "_is_amx_tile_supported", "avx512_bf16": "_is_avx512_bf16_supported"}
        flags = {flag for flag, name in probe.items()
                 if getattr(torch.cpu, name, lambda: False)()}
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX-512 BF16"
    return None


def cpu_has_native_bf16() -> bool:
    """True when the CPU computes bf16 in hardware (AVX-512 BF16 or AMX): there bf16 matmul
    runs faster than fp32; elsewhere it is emulated and far slower (docs/BENCHMARKS.md)."""
    return cpu_bf16_support() is not None


def resolve_precision(name: str, device: torch.device, training: bool = True
                      ) -> torch.dtype | None:
    """The dtype for ``name`` on ``device`` (in training: autocast's on CUDA, the bf16 model's
    on CPU (tfm.training.bf16); in decoding, the weights'), or None for plain fp32.

    ``auto``: bf16 on CUDA GPUs that support it (else fp16). On CPUs, bf16 where the CPU has
    native bf16 (``cpu_has_native_bf16``), fp32 elsewhere, in training and decoding alike:
    with native bf16 a bf16 model with fp32 master weights trains faster than fp32
    and bf16 weights decode faster with the same BLEU (docs/BENCHMARKS.md); without
    it bf16 is emulated, and ``bf16`` asked for there trains (slowly, with a warning).
    """
    if name not in PRECISIONS:
        raise UsageError(f"--precision {name}: choose one of {', '.join(PRECISIONS)}")
    if name == "fp32":
        return None
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if cpu_has_native_bf16() else None
    if name == "fp16" and device.type == "cpu":
        raise UsageError("--precision fp16 is for CUDA; on CPU use bf16 or fp32")
    return torch.bfloat16 if name == "bf16" else torch.float16


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def precision_name(dtype: torch.dtype | None) -> str:
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def decoding_workers(requested: int | None, device: torch.device) -> int:
    """Batches decoded at once, each by a thread of its own with its share of the CPU threads.

    ``None`` (auto): on CPU with two threads or more, 2; else 1. A decoding step of a batch of a
    few hundred sentences leaves one of two cores idle much of the time (small matrices, Python
    between the operations); two single-threaded workers, each decoding its own batches, keep
    both busy, and were the faster on 2 cores (docs/BENCHMARKS.md, "Decoding workers"). More
    workers were not measured; on CUDA one worker keeps the GPU busy.
    """
    if requested is not None:
        if requested < 1:
            raise UsageError(f"--workers {requested}: give 1 or more")
        return requested
    return 2 if device.type == "cpu" and torch.get_num_threads() >= 2 else 1


def share_cpu_threads(workers: int) -> Callable[[], None]:
    """The calling thread's torch CPU threads (one a core by default) shared among ``workers``
    decoding threads: returns the function each of them calls once, first (a thread pool's
    initializer), to take its share. torch's CPU threads (OpenMP) are set up per calling
    thread, so this thread keeps one: had it kept all of them (loading the model, say), their
    pool and the workers' would share the cores, and contend for them (decoding was several
    times slower). Call it before loading the model. A second call in the same thread finds
    one thread to share: to load another translator there, ``torch.set_num_threads`` first."""
    threads = max(1, torch.get_num_threads() // workers)
    torch.set_num_threads(1)
    return functools.partial(torch.set_num_threads, threads)
