"""Devices and numeric precision: detected from the machine, never assumed.

torch is imported by the functions that need it, not by the module: the CPU's features and the
precision names serve engines that load without torch (a CTranslate2 export)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from tfm.errors import UsageError

if TYPE_CHECKING:
    import torch

PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when available, else CPU; ``cuda`` without a GPU is an error."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is available here; use --device cpu")
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise UsageError(f"--device {name}: not a device (use auto, cpu or cuda)") from e


def cpu_flags() -> set[str]:
    """The CPU's feature flags, as Linux names them in /proc/cpuinfo; elsewhere the few that
    torch's CPU probe answers for (private helpers, hence getattr)."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags.update(line.split(":", 1)[1].split())
                break
    except OSError:  # not Linux
        import torch

        probe = {"amx_bf16": "_is_amx_tile_supported", "avx512_bf16": "_is_avx512_bf16_supported",
                 "amx_int8": "_is_amx_tile_supported", "avx512_vnni": "_is_vnni_supported"}
        flags = {flag for flag, name in probe.items()
                 if getattr(torch.cpu, name, lambda: False)()}
    return flags


def cpu_bf16_support() -> str | None:
    """How this CPU computes bf16 in hardware: "AMX" (Intel Xeon since Sapphire Rapids),
    "AVX-512 BF16" (AMD Zen 4/5, Intel Cooper Lake), or None where bf16 is emulated (AVX2-only
    CPUs, older AVX-512 ones): there a bf16 matrix product is far slower than fp32's
    (docs/BENCHMARKS.md)."""
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX-512 BF16"
    return None


def cpu_int8_support() -> str:
    """This CPU's int8 dot products (tfm.model.int8): "AMX-INT8" (Intel Xeon since Sapphire
    Rapids), "AVX-512 VNNI" (Intel since Cascade Lake, AMD Zen 4/5), "AVX-VNNI" (256-bit VNNI
    without AVX-512), else torch's vector level ("AVX2", "AVX512", ...): without VNNI, int8
    products are summed in pairs into 16 bits, which can saturate."""
    flags = cpu_flags()
    for flag, name in (("amx_int8", "AMX-INT8"), ("avx512_vnni", "AVX-512 VNNI"),
                       ("avx_vnni", "AVX-VNNI")):
        if flag in flags:
            return name
    import torch

    return torch.backends.cpu.get_cpu_capability()


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
    ``auto`` never picks int8, which changes the output.

    ``int8``: torch.int8, int8 weights and activations in the Linear layers (tfm.model.int8),
    for decoding on a CPU only: refused in training and on CUDA, where bf16 and fp16 serve.
    """
    import torch

    if name not in PRECISIONS:
        raise UsageError(f"--precision {name}: choose one of {', '.join(PRECISIONS)}")
    if name == "fp32":
        return None
    if name == "int8":
        return _int8_precision(device, training)
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if cpu_has_native_bf16() else None
    if name == "fp16" and device.type == "cpu":
        raise UsageError("--precision fp16 is for CUDA; on CPU use bf16 or fp32")
    return torch.bfloat16 if name == "bf16" else torch.float16


def _int8_precision(device: torch.device, training: bool) -> torch.dtype:
    import torch

    if training:
        raise UsageError("--precision int8 is for decoding (translate, eval, serve); train in "
                         "fp32, bf16 or fp16")
    if device.type != "cpu":
        raise UsageError(f"--precision int8 is for CPUs; on {device.type} use bf16 or fp16")
    return torch.int8


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    import torch

    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def precision_name(dtype: torch.dtype | None) -> str:
    import torch

    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int8: "int8"}[dtype]
