"""The rank side of test_distributed's gradient test, in a module of its own: each rank of
``torch.multiprocessing.spawn`` is a new interpreter that imports the module of the function it
runs, and this one imports only what a rank needs (the test module imports pytest, the suite's
helpers and much of tfm)."""

from __future__ import annotations

import torch

from tfm.config import ModelConfig, TrainConfig
from tfm.data.batching import Batch
from tfm.model import Transformer
from tfm.training import distributed
from tfm.training.loop import _update


def _batch(rows: int, length: int, seed: int) -> Batch:
    g = torch.Generator().manual_seed(seed)
    tgt = torch.randint(4, 60, (rows, length + 1), generator=g)
    tgt[1:, length // 2:] = 0  # padding: the processes hold different numbers of tokens
    return Batch(torch.randint(4, 60, (rows, length), generator=g), tgt[:, :-1], tgt[:, 1:])


GRAD_BATCHES = [[_batch(3, 7, 0), _batch(2, 9, 1)], [_batch(5, 4, 2), _batch(1, 12, 3)]]
GRAD_CONFIG = TrainConfig(lr=0.0, clip_norm=0.0, label_smoothing=0.1, update_freq=2)
GRAD_MODEL = ModelConfig(src_vocab_size=60, tgt_vocab_size=60, d_model=16, n_heads=2,
                         encoder_layers=1, decoder_layers=1, d_ff=32, dropout=0.0)


def gradients(model: torch.nn.Module, dist: distributed.Distributed,
              group: list[Batch]) -> dict[str, torch.Tensor]:
    """The gradient of one update of ``model`` over ``group`` (lr 0: the weights stay)."""
    wrapped = distributed.wrap_model(model, dist)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    _update(wrapped, optimizer, group, GRAD_CONFIG, None, 1, dist,
            torch.amp.GradScaler("cpu", enabled=False), no_sync=distributed.no_sync(wrapped))
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def rank_gradients(rank: int, port: int, out: str) -> None:
    """Rank ``rank`` of two: its gradient over its batches, saved to ``out/rank{rank}.pt``."""
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        grads = gradients(Transformer(GRAD_MODEL), distributed.Distributed(rank, rank, 2, "gloo"),
                          GRAD_BATCHES[rank])
        torch.save(grads, f"{out}/rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()
