"""int8 Linear kernels against fp32 on a decoder's shapes (rows x in -> out), one CPU thread.

    python bench/int8_kernels.py [--reps 7]

Each kernel's time over fp32's (below 1: faster), interleaved repetitions, best of each.
fbgemm / oneDNN: tfm.model.int8.Int8Linear (per-row inputs, per-channel weights); int_mm:
torch._int_mm with the same rounding (what torchao calls on a CPU outside torch.compile);
per-tensor: torch.ao's quantize_dynamic op (one input scale for the whole batch: not
batch-invariant, for reference only).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tfm.model.int8 import Int8Linear, int8_scheme  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"CPU: {int8_scheme().describe()}, torch {torch.__version__}")
    for rows in (1, 5, 40, 150, 300):
        for d_in, d_out in ((512, 512), (512, 2048), (2048, 512), (512, 10000)):
            linear = torch.nn.Linear(d_in, d_out)
            w, b = linear.weight.detach(), linear.bias.detach()
            layers = {k: Int8Linear(w, b, int8_scheme(k)) for k in ("fbgemm", "oneDNN")}
            wq = layers["fbgemm"].weight_int8.t().contiguous()
            ws = layers["fbgemm"].weight_scale
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                packed = layers["fbgemm"].kernel.packed

            def int_mm(x, wq=wq, ws=ws, b=b):
                s = x.abs().amax(-1, keepdim=True) / 127
                return torch._int_mm(torch.round(x / s).to(torch.int8), wq) * s * ws + b

            fns = {"fp32": lambda x, w=w, b=b: F.linear(x, w, b), **layers, "int_mm": int_mm,
                   "per-tensor": lambda x, packed=packed, b=b:
                   torch.ops.quantized.linear_dynamic(x, packed, True) + b}
            x = torch.randn(rows, d_in)
            n = max(3, int(3e7 / (rows * d_in * d_out)))
            best = {k: float("inf") for k in fns}
            for _ in range(args.reps):
                for k, f in fns.items():
                    start = time.perf_counter()
                    for _ in range(n):
                        f(x)
                    best[k] = min(best[k], (time.perf_counter() - start) / n)
            print(f"| {rows} x {d_in} -> {d_out} | {best['fp32'] * 1e6:.0f} | " +
                  " | ".join(f"{best[k] / best['fp32']:.2f}" for k in fns if k != "fp32") +
                  " |", flush=True)


if __name__ == "__main__":
    main()
