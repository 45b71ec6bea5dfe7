"""int8 Linear layers for decoding on a CPU (``--precision int8``).

Every ``nn.Linear`` of a model becomes an ``Int8Linear``: its weight rounded once to int8 with
one scale per output channel, and at each call its input rounded to int8 with one scale per
row (per token), both symmetric: the scheme of torchao's int8_dynamic_activation_int8_weight.
A row's scale depends on that row alone, so a sentence translates the same alone and in any
batch, and search (tfm.decoding.search) runs unchanged over the quantized model.

The products are summed in int32 by one of torch's own CPU kernels (torchao, the maintained
home of this scheme, is not a dependency of tfm; docs/BENCHMARKS.md has the measurements):

- fbgemm (``quantized::linear_with_input_q_dq_qweight_dq_output_fp32``), wherever torch has
  it: the faster of the two at every size measured, from one row to hundreds. It rounds its
  input itself, with one scale for the whole input, so each row is first divided by its own
  scale. Its packed weights are made from a ``torch.qint8`` tensor, a dtype torch 2.13
  deprecates; hence
- oneDNN (``onednn::qlinear_pointwise``), on plain int8/uint8 tensors, where fbgemm is
  missing: the same results, slower on few rows.

``torch._int_mm`` (what torchao calls on a CPU outside torch.compile) was far slower than fp32
here, and ``torch.ao.quantization.quantize_dynamic`` (deprecated) takes one activation scale
for the whole batch, which makes a sentence's translation depend on its batch.

Both kernels add pairs of u8 x s8 products in 16 bits on CPUs without VNNI, which saturates
for large inputs: there inputs get 7 bits (-63..63, as fbgemm's own ``reduce_range``), 8 bits
(-127..127) where the kernel multiplies with VNNI or AMX (``Int8Scheme``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tfm.device import cpu_int8_support
from tfm.errors import UsageError

KERNELS = ("fbgemm", "oneDNN")

# The CPU instructions (tfm.device.cpu_int8_support) with which each kernel sums int8
# products in 32 bits, without the 16-bit pairs that saturate: fbgemm has VNNI kernels for
# AVX-512 only (AMX CPUs have AVX-512 VNNI too); oneDNN uses AVX-VNNI and AMX as well.
_UNSATURATED = {"fbgemm": {"AMX-INT8", "AVX-512 VNNI"},
                "oneDNN": {"AMX-INT8", "AVX-512 VNNI", "AVX-VNNI"}}


@dataclass(frozen=True)
class Int8Scheme:
    """How int8 Linear layers compute on this CPU: with which ``kernel`` (KERNELS), and input
    rows rounded to integers in -``input_levels``..``input_levels``."""

    isa: str
    kernel: str
    input_levels: int

    def describe(self) -> str:
        bits = 8 if self.input_levels == 127 else 7
        return f"int8 ({self.isa}, {self.kernel}, {bits}-bit activations)"


def int8_scheme(kernel: str | None = None) -> Int8Scheme:
    """The scheme for this CPU: ``kernel`` (None: fbgemm where torch has it, else oneDNN) and
    the input range that kernel sums without saturating on this CPU's instructions."""
    if kernel is None:
        kernel = next((k for k in KERNELS if _kernel_works(k)), None)
        if kernel is None:
            raise UsageError("--precision int8: this torch has no int8 kernel for this CPU "
                             f"({torch.backends.cpu.get_cpu_capability()}); use fp32")
    elif kernel not in KERNELS:
        raise ValueError(f"int8 kernel {kernel!r}: choose one of {', '.join(KERNELS)}")
    isa = cpu_int8_support()
    return Int8Scheme(isa, kernel, 127 if isa in _UNSATURATED[kernel] else 63)


def quantize_linears(model: nn.Module, scheme: Int8Scheme | None = None) -> Int8Scheme:
    """Replace every ``nn.Linear`` of ``model`` (ensemble members too) by an ``Int8Linear``,
    in place; returns the scheme used (None: ``int8_scheme()``).

    The output projection is quantized too: it is the largest matrix product of a decoding
    step. When it is tied to the target embedding, the int8 layer takes a rounded copy and the
    embedding keeps the fp32 weight: looking up a row costs nothing in fp32, and a rounded
    embedding would add its error to every layer's input.
    """
    scheme = scheme or int8_scheme()
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear(child.weight, child.bias, scheme))
    return scheme


class Int8Linear(nn.Module):
    """y = x W^T + b with W in int8 (one scale per output channel) and each row of x rounded
    to int8 at every call (one scale per row): decoding only, no gradients."""

    def __init__(self, weight: Tensor, bias: Tensor | None, scheme: Int8Scheme) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.scheme = scheme
        weight = weight.detach().float().cpu()
        scale = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
        self.register_buffer("weight_int8", torch.round(weight / scale[:, None]).to(torch.int8))
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", None if bias is None else bias.detach().float().cpu().clone())
        kernel = _FbgemmKernel if scheme.kernel == "fbgemm" else _OnednnKernel
        self.kernel = kernel(self.weight_int8, scale, scheme.input_levels)

    @property
    def weight(self) -> Tensor:
        """The weight as the int8 layer computes with it, in fp32 (out, in): for code that
        reads a Linear's weight, such as a vocabulary shortlist's output rows."""
        return self.weight_int8.float() * self.weight_scale[:, None]

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) -> (..., out), in fp32."""
        rows = x.reshape(-1, self.in_features).float()  # (N, in)
        # Each row's scale maps its largest magnitude to input_levels; an all-zero row gets
        # the smallest scale, and stays zero.
        scale = rows.abs().amax(dim=-1, keepdim=True).clamp_(
            min=torch.finfo(torch.float32).tiny).div_(self.scheme.input_levels)  # (N, 1)
        y = self.kernel(rows, scale)  # (N, out), before the rows' scales
        y = y.mul_(scale) if self.bias is None else torch.addcmul(self.bias, y, scale)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, {self.scheme.describe()}")


class _FbgemmKernel:
    """sum_k round(x / scale)_k W_int8[n, k] * weight_scale[n] by fbgemm, which rounds its
    input itself with one scale and zero point: given x / scale, that scale is 1."""

    def __init__(self, weight_int8: Tensor, weight_scale: Tensor, levels: int) -> None:
        self.zero_point = levels + 1  # rounded inputs become levels + 1 +- levels: 1..255 or 1..127
        with warnings.catch_warnings():  # torch.qint8 is deprecated: see the module docstring
            warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")
            weight = torch.quantize_per_channel(
                weight_int8.float() * weight_scale[:, None], weight_scale.double(),
                torch.zeros(len(weight_scale), dtype=torch.long), 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(weight, None)

    def __call__(self, x: Tensor, scale: Tensor) -> Tensor:
        return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
            x / scale, 1.0, self.zero_point, self.packed)


class _OnednnKernel:
    """The same sum by oneDNN, from inputs rounded here to uint8 around a zero point. Told
    that zero point, oneDNN works out its correction anew at every call, over the whole
    weight; told zero, it sums (q_k + zero_point) W[n, k], and a bias of -zero_point
    sum_k W[n, k] (times the weight's scale), made once, takes the zero point back out."""

    def __init__(self, weight_int8: Tensor, weight_scale: Tensor, levels: int) -> None:
        self.zero_point_and_half = torch.tensor(levels + 1.5)  # + 0.5: truncation rounds
        self.packed = torch.ops.onednn.qlinear_prepack(weight_int8, None)
        self.weight_scale = weight_scale
        self.weight_zero_points = torch.zeros(len(weight_scale), dtype=torch.int32)
        row_sums = weight_int8.sum(dim=1, dtype=torch.int64).float()
        self.correction = -(levels + 1) * weight_scale * row_sums

    def __call__(self, x: Tensor, scale: Tensor) -> Tensor:
        rounded = torch.addcdiv(self.zero_point_and_half, x, scale).to(torch.uint8)  # (N, in)
        return torch.ops.onednn.qlinear_pointwise(
            rounded, 1.0, 0, self.packed, self.weight_scale, self.weight_zero_points,
            self.correction, 1.0, 0, torch.float32, "none", [], "")


def _kernel_works(kernel: str) -> bool:
    """Whether this torch has ``kernel`` for this CPU: a 1 x 1 layer, tried."""
    try:
        Int8Linear(torch.ones(1, 1), None, Int8Scheme("", kernel, 63))(torch.ones(1, 1))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return True
