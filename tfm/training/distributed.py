"""Multi-process training under torchrun: who this process is, the process group, and the few
collectives the training loop needs.

torchrun starts one process per device and tells each who it is in environment variables
(``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, plus ``MASTER_ADDR``/``MASTER_PORT`` for the
rendezvous). Without them, or with a world of one, tfm trains in a single process and every
function here is a no-op. Backend: NCCL on CUDA, each process on ``cuda:LOCAL_RANK``; gloo on
the CPU.

No state is kept here beyond the process group torch.distributed itself holds: the training
loop carries a :class:`Distributed` value and passes it to the helpers.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tfm.errors import UsageError

ENV_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK")


@dataclass(frozen=True)
class Distributed:
    """This process's place in a multi-process run; the defaults describe a single process."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str = ""  # "gloo" or "nccl"; "" for a single process
    # Where collective tensors live: the CPU for gloo, this process's GPU for NCCL.
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and reports progress."""
        return self.rank == 0


def launched_by_torchrun(environ: Mapping[str, str] = os.environ) -> tuple[int, int, int] | None:
    """(rank, local_rank, world_size) from torchrun's environment variables, or None when they
    are absent (a plain single-process run)."""
    if not all(name in environ for name in ENV_VARS):
        return None
    try:
        names = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
        rank, local_rank, world_size = (int(environ[name]) for name in names)
    except ValueError as e:
        raise UsageError(f"torchrun variables RANK/LOCAL_RANK/WORLD_SIZE are not numbers "
                         f"({e}); start tfm with torchrun or without those variables") from e
    return rank, local_rank, world_size


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[tuple[Distributed, torch.device]]:
    """Join torchrun's process group for the duration of a run and leave it afterwards.

    Yields this process's :class:`Distributed` and the device it trains on: under torchrun on
    CUDA that is ``cuda:LOCAL_RANK`` whatever ``device`` says; otherwise ``device`` itself. A
    process group that the caller already initialised is used and left alone.
    """
    ranks = launched_by_torchrun()
    if ranks is None or ranks[2] <= 1:
        yield Distributed(), device
        return
    rank, local_rank, world_size = ranks
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise UsageError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} "
                             "CUDA devices: start at most one process per GPU "
                             "(torchrun --nproc_per_node)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend, collective_device = "nccl", device
    else:
        backend, collective_device = "gloo", torch.device("cpu")
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                device_id=device if backend == "nccl" else None)
    try:
        yield Distributed(rank, local_rank, world_size, backend, collective_device), device
    finally:
        if owned and dist.is_initialized():
            dist.destroy_process_group()


def all_reduce(values: Sequence[float], d: Distributed, op: str = "sum") -> list[float]:
    """``values`` summed (``op="sum"``) or maximised (``op="max"``) over all processes, in one
    collective. Counts below 2**53 stay exact (float64)."""
    if not d.enabled:
        return [float(v) for v in values]
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=d.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return tensor.tolist()


def broadcast(value: Any, d: Distributed) -> Any:
    """Rank 0's ``value`` (any picklable object of plain data) on every process; the other
    processes wait here until rank 0 gets here too."""
    if not d.enabled:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, device=d.device)
    return box[0]


def barrier(d: Distributed) -> None:
    """Wait until every process gets here."""
    if d.enabled:
        dist.barrier()


def wrap_model(model: torch.nn.Module, d: Distributed) -> torch.nn.Module:
    """The model for training steps: DistributedDataParallel (which all-reduces gradients in
    backward and makes rank 0's initial weights everyone's) across processes, else the model.

    Buffers are not synchronised at each forward: the only ones are the sinusoidal position
    tables, the same in every process, and syncing them would cost a collective per forward.
    """
    if not d.enabled:
        return model
    device_ids = [d.local_rank] if d.backend == "nccl" else None
    # torch >= 2.13 names the option forward_sync_buffers; older versions broadcast_buffers.
    parameters = inspect.signature(DistributedDataParallel.__init__).parameters
    no_buffer_sync = {"forward_sync_buffers": False} if "forward_sync_buffers" in parameters \
        else {"broadcast_buffers": False}
    return DistributedDataParallel(model, device_ids=device_ids, **no_buffer_sync)


def no_sync(module: torch.nn.Module) -> Callable[[], contextlib.AbstractContextManager]:
    """A context factory for the micro-batches before the last of a gradient-accumulation
    step: DDP's ``no_sync`` (gradients accumulate locally, one all-reduce in the last
    backward), or nothing for a plain module."""
    if isinstance(module, DistributedDataParallel):
        return module.no_sync
    return contextlib.nullcontext


def dropout_seed(seed: int, rank: int, step: int) -> int:
    """The seed of rank ``rank``'s random generator (dropout) when it (re)starts at ``step``.

    At the start of a run it is ``seed + rank``. On resume only rank 0's generator state was
    saved, so the other ranks draw a fresh stream from (seed, rank, step): their dropout masks
    differ from an uninterrupted run's, which is why exact resume is promised for a single
    process only.
    """
    if step == 0:
        return seed + rank
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1, np.uint64)[0]
               % 2**63)


def resume_position(position: int, saved_world_size: int, world_size: int) -> int:
    """Where in the epoch to go on when a run saved by ``saved_world_size`` processes resumes
    with ``world_size``.

    Each process steps through every ``world_size``-th batch of the epoch (see
    ``tfm.data.batching.shard``), so after ``position`` updates the run has consumed a prefix of the
    epoch's batch list, ``position * saved_world_size`` update-groups long. The new position
    covers no more than that prefix: no batch is skipped, a few may be seen twice.
    """
    if saved_world_size == world_size:
        return position
    return math.floor(position * saved_world_size / world_size)


__all__ = [
    "Distributed",
    "all_reduce",
    "barrier",
    "broadcast",
    "dropout_seed",
    "launched_by_torchrun",
    "no_sync",
    "process_group",
    "resume_position",
    "wrap_model",
]
