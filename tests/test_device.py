"""Precision choice: what `--precision auto` means for training and for decoding."""

from __future__ import annotations

import pytest
import torch

import tfm.device
from tfm.device import resolve_precision
from tfm.errors import UsageError

CPU = torch.device("cpu")


@pytest.mark.parametrize("native", [True, False], ids=["native-bf16", "no-bf16"])
def test_auto_trains_in_bf16_only_on_a_cpu_with_native_bf16(monkeypatch: pytest.MonkeyPatch,
                                                           native: bool) -> None:
    """Without native bf16 (an AVX2-only CPU) bf16 is emulated and many times slower."""
    monkeypatch.setattr(tfm.device, "cpu_has_native_bf16", lambda: native)
    assert resolve_precision("auto", CPU) is (torch.bfloat16 if native else None)


@pytest.mark.parametrize(("flags", "support"), [
    ("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "AMX"),
    ("fpu avx2 avx512f avx512_bf16", "AVX-512 BF16"),
    ("fpu avx2 fma", None),
], ids=["xeon-amx", "zen4", "avx2-only"])
def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch: pytest.MonkeyPatch, flags: str,
                                                support: str | None) -> None:
    class CpuInfo:
        def __init__(self, path: str) -> None:
            assert path == "/proc/cpuinfo"

        def read_text(self) -> str:
            return f"processor\t: 0\nflags\t\t: {flags}\nbugs\t\t: spectre_v1\n"

    monkeypatch.setattr(tfm.device, "Path", CpuInfo)
    assert tfm.device.cpu_bf16_support() == support
    assert tfm.device.cpu_has_native_bf16() is (support is not None)


def test_auto_decodes_with_bf16_weights_only_where_the_cpu_has_bf16(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfm.device, "cpu_has_native_bf16", lambda: True)
    assert resolve_precision("auto", CPU, training=False) is torch.bfloat16
    monkeypatch.setattr(tfm.device, "cpu_has_native_bf16", lambda: False)
    assert resolve_precision("auto", CPU, training=False) is None


def test_explicit_precisions_are_obeyed_and_impossible_ones_refused() -> None:
    assert resolve_precision("fp32", CPU) is None
    assert resolve_precision("bf16", CPU) is torch.bfloat16
    with pytest.raises(UsageError, match="fp16 is for CUDA"):
        resolve_precision("fp16", CPU)
    with pytest.raises(UsageError, match="choose one of auto, fp32, bf16, fp16"):
        resolve_precision("fp64", CPU)
