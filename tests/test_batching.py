"""Specification of tfm.data.batching: token-sized length-bucketed batches that are a pure function
of (lengths, max_tokens, seed, epoch), sharding between processes, and padding into tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfm.data.batching import Batch, batch_sizes, collate, make_batches, shard
from tfm.data.dataset import TokenizedSplit
from tfm.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


def realistic_lengths(n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Source lengths 5..40 (EOS included) and target lengths near them (no BOS/EOS)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(5, 41, size=n)
    tgt = np.clip(src + rng.integers(-4, 5, size=n), 1, None)
    return src, tgt


def split_from_rows(src_rows: list[list[int]], tgt_rows: list[list[int]]) -> TokenizedSplit:
    """A TokenizedSplit holding the given rows (source rows should end with EOS)."""
    def flat(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        values = np.array([v for row in rows for v in row], dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        return values, offsets

    return TokenizedSplit(*flat(src_rows), *flat(tgt_rows))


def positions(batch: np.ndarray, src: np.ndarray, tgt: np.ndarray) -> int:
    """Padded positions of a batch: rows x its longest example."""
    return len(batch) * int(batch_sizes(src[batch], tgt[batch]).max())


# ---------------------------------------------------------------------------- make_batches


def test_batch_size_of_an_example_is_its_source_or_decoder_input_length() -> None:
    src, tgt = np.array([5, 5, 3]), np.array([4, 5, 9])
    assert list(batch_sizes(src, tgt)) == [5, 6, 10]  # max(src, 1 + tgt)


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_example_appears_exactly_once_per_epoch(shuffle: bool) -> None:
    src, tgt = realistic_lengths()
    for epoch in range(3):
        batches = make_batches(src, tgt, max_tokens=300, seed=1, epoch=epoch, shuffle=shuffle)
        assert all(len(b) > 0 for b in batches)
        everything = np.concatenate(batches)
        assert len(everything) == len(src)
        assert sorted(everything.tolist()) == list(range(len(src)))


@pytest.mark.parametrize("max_tokens", [41, 100, 256, 1000, 4096])
def test_no_batch_holds_more_padded_positions_than_max_tokens(max_tokens: int) -> None:
    src, tgt = realistic_lengths()
    for batch in make_batches(src, tgt, max_tokens=max_tokens, seed=3, epoch=2):
        # ... unless the batch is one example that is itself larger (40 + 4 + BOS here).
        assert positions(batch, src, tgt) <= max_tokens or len(batch) == 1


def test_an_example_larger_than_max_tokens_gets_a_batch_of_its_own() -> None:
    src = np.array([10, 10, 200, 10, 10, 150])
    tgt = np.array([9, 9, 10, 9, 9, 300])
    batches = make_batches(src, tgt, max_tokens=100)
    big = [b for b in batches if {2, 5} & set(b.tolist())]
    assert sorted(b.tolist() for b in big) == [[2], [5]]
    for batch in batches:
        if len(batch) > 1:
            assert positions(batch, src, tgt) <= 100
    assert sorted(np.concatenate(batches).tolist()) == list(range(6))


def test_batches_are_full_up_to_max_tokens() -> None:
    src, tgt = np.full(100, 10), np.full(100, 9)  # every example needs 10 positions
    batches = make_batches(src, tgt, max_tokens=95)
    assert sorted(len(b) for b in batches) == [1] + [9] * 11  # 9 x 10 <= 95 < 10 x 10


def test_the_same_seed_and_epoch_give_the_same_batches() -> None:
    src, tgt = realistic_lengths()
    first = make_batches(src, tgt, max_tokens=500, seed=7, epoch=4)
    again = make_batches(src.copy(), tgt.copy(), max_tokens=500, seed=7, epoch=4)
    assert len(first) == len(again)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_other_epochs_and_seeds_give_other_batch_orders() -> None:
    src, tgt = realistic_lengths()

    def order(seed: int, epoch: int) -> list[list[int]]:
        return [b.tolist() for b in make_batches(src, tgt, max_tokens=500, seed=seed,
                                                 epoch=epoch)]

    epochs = [order(1, e) for e in range(3)]
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    assert order(1, 0) != order(2, 0)
    # Not just the order of the batches: ties are broken differently, so the batches differ.
    assert sorted(epochs[0]) != sorted(epochs[1])


def test_without_shuffling_examples_come_sorted_by_length() -> None:
    src, tgt = realistic_lengths(500)
    batches = make_batches(src, tgt, max_tokens=400, shuffle=False)
    order = np.concatenate(batches)
    size = np.maximum(src, tgt + 1)
    keys = list(zip(size[order].tolist(), src[order].tolist(), tgt[order].tolist(),
                    order.tolist()))
    assert keys == sorted(keys)  # padded size, source length, target length, then index
    again = make_batches(src, tgt, max_tokens=400, seed=9, epoch=5, shuffle=False)
    assert [b.tolist() for b in again] == [b.tolist() for b in batches]


def test_padding_is_a_small_fraction_of_a_realistic_corpus() -> None:
    src, tgt = realistic_lengths(5000)
    batches = make_batches(src, tgt, max_tokens=2048, seed=1, epoch=0)
    # Positions of the padded tensors (src: B x S, tgt_in/tgt_out: B x T) vs real tokens.
    src_padded = sum(len(b) * int(src[b].max()) for b in batches)
    tgt_padded = sum(len(b) * int(tgt[b].max() + 1) for b in batches)
    src_real, tgt_real = int(src.sum()), int((tgt + 1).sum())
    assert 1 - (src_real + tgt_real) / (src_padded + tgt_padded) < 0.10
    # Sorted by padded size first: both sides are padded little.
    assert 1 - src_real / src_padded < 0.08
    assert 1 - tgt_real / tgt_padded < 0.08
    # Few batches are wasted: on average they are filled to at least 80% of max_tokens.
    assert sum(positions(b, src, tgt) for b in batches) / len(batches) > 0.8 * 2048


def test_an_empty_split_has_no_batches() -> None:
    empty = np.array([], dtype=np.int64)
    assert make_batches(empty, empty, max_tokens=100) == []


# ---------------------------------------------------------------------------- shard


@pytest.mark.parametrize("n_batches", [0, 1, 6, 7])
def test_two_shards_are_disjoint_equal_and_cover_the_first_even_batches(n_batches: int) -> None:
    batches = [np.array([i]) for i in range(n_batches)]
    first, second = shard(batches, 0, 2), shard(batches, 1, 2)
    assert len(first) == len(second) == n_batches // 2
    a, b = {int(x[0]) for x in first}, {int(x[0]) for x in second}
    assert not a & b
    assert a | b == set(range(n_batches // 2 * 2))


def test_shards_of_real_batches_hold_each_example_at_most_once() -> None:
    src, tgt = realistic_lengths(1000)
    batches = make_batches(src, tgt, max_tokens=300, seed=1, epoch=1)
    shards = [shard(batches, rank, 3) for rank in range(3)]
    assert len({len(s) for s in shards}) == 1
    seen = np.concatenate([np.concatenate(s) for s in shards])
    assert len(seen) == len(set(seen.tolist()))
    usable = len(batches) // 3 * 3
    assert len(seen) == sum(len(b) for b in batches[:usable])


def test_a_single_process_takes_every_batch() -> None:
    batches = [np.array([i]) for i in range(5)]
    assert shard(batches, 0, 1) == batches


# ---------------------------------------------------------------------------- collate


@pytest.fixture
def split() -> TokenizedSplit:
    return split_from_rows(
        src_rows=[[10, 11, 12, EOS_ID], [20, EOS_ID], [30, 31, 32, 33, 34, EOS_ID]],
        tgt_rows=[[40, 41], [50, 51, 52, 53], [60]],
    )


def test_collate_pads_source_and_target_into_tensors(split: TokenizedSplit) -> None:
    batch = collate(split, np.array([0, 1]))
    assert isinstance(batch, Batch)
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.int64
    assert batch.src.tolist() == [[10, 11, 12, EOS_ID], [20, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 40, 41, PAD_ID, PAD_ID],
                                     [BOS_ID, 50, 51, 52, 53]]
    assert batch.tgt_out.tolist() == [[40, 41, EOS_ID, PAD_ID, PAD_ID],
                                      [50, 51, 52, 53, EOS_ID]]


def test_collate_follows_the_order_of_the_indices(split: TokenizedSplit) -> None:
    batch = collate(split, np.array([2, 0]))
    assert batch.src.shape == (2, 6)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (2, 3)
    assert batch.src[0].tolist() == [30, 31, 32, 33, 34, EOS_ID]
    assert batch.tgt_in[0].tolist() == [BOS_ID, 60, PAD_ID]
    assert batch.tgt_out[0].tolist() == [60, EOS_ID, PAD_ID]


def test_collate_rows_are_bos_plus_target_and_target_plus_eos(split: TokenizedSplit) -> None:
    indices = np.array([1, 2, 0])
    batch = collate(split, indices)
    for row, i in enumerate(indices):
        s, t = split.src(i).tolist(), split.tgt(i).tolist()
        src, tgt_in, tgt_out = (x[row].tolist() for x in (batch.src, batch.tgt_in, batch.tgt_out))
        assert src == s + [PAD_ID] * (batch.src.size(1) - len(s))
        assert src[len(s) - 1] == EOS_ID
        assert tgt_in == [BOS_ID] + t + [PAD_ID] * (batch.tgt_in.size(1) - len(t) - 1)
        assert tgt_out == t + [EOS_ID] + [PAD_ID] * (batch.tgt_out.size(1) - len(t) - 1)
        # Shifting by one: the label at position p is the input at position p + 1.
        assert tgt_out[: len(t)] == tgt_in[1 : len(t) + 1]


def test_masks_are_true_exactly_on_real_tokens(split: TokenizedSplit) -> None:
    batch = collate(split, np.array([0, 1, 2]))
    assert batch.src_mask.dtype == torch.bool
    assert batch.src_mask.tolist() == [[True] * 4 + [False] * 2,
                                       [True] * 2 + [False] * 4,
                                       [True] * 6]
    # Target positions: each target token plus EOS (labels), equally BOS plus target (inputs).
    assert batch.tgt_mask.tolist() == [[True] * 3 + [False] * 2,
                                       [True] * 5,
                                       [True] * 2 + [False] * 3]
    assert torch.equal(batch.tgt_mask, batch.tgt_in != PAD_ID)
    assert batch.n_src_tokens == 4 + 2 + 6
    assert batch.n_tgt_tokens == 3 + 5 + 2


def test_an_empty_target_becomes_bos_in_and_eos_out() -> None:
    split = split_from_rows([[7, EOS_ID], [8, 9, EOS_ID]], [[], [5]])
    batch = collate(split, np.array([0, 1]))
    assert batch.tgt_in.tolist() == [[BOS_ID, PAD_ID], [BOS_ID, 5]]
    assert batch.tgt_out.tolist() == [[EOS_ID, PAD_ID], [5, EOS_ID]]
    assert batch.n_tgt_tokens == 1 + 2


def test_collate_of_made_batches_stays_within_max_tokens() -> None:
    rng = np.random.default_rng(0)
    src_rows = [[*rng.integers(4, 300, size=n).tolist(), EOS_ID] for n in rng.integers(1, 30, 200)]
    tgt_rows = [rng.integers(4, 300, size=n).tolist() for n in rng.integers(1, 30, 200)]
    split = split_from_rows(src_rows, tgt_rows)
    seen = 0
    for indices in make_batches(split.src_lengths, split.tgt_lengths, max_tokens=256):
        batch = collate(split, indices)
        assert batch.src.numel() <= 256 and batch.tgt_in.numel() <= 256
        seen += len(indices)
        assert batch.n_src_tokens == int(split.src_lengths[indices].sum())
        assert batch.n_tgt_tokens == int(split.tgt_lengths[indices].sum()) + len(indices)
    assert seen == len(split)


def test_batch_to_moves_all_three_tensors(split: TokenizedSplit) -> None:
    batch = collate(split, np.array([0, 1]))
    moved = batch.to(torch.device("cpu"))
    for name in ("src", "tgt_in", "tgt_out"):
        assert torch.equal(getattr(moved, name), getattr(batch, name))


@pytest.mark.parametrize("multiple", [1, 4, 8])
def test_collate_pads_wider_to_a_multiple_keeping_rows_and_tokens(split: TokenizedSplit,
                                                                  multiple: int) -> None:
    indices = np.array([0, 2, 1])
    plain, wide = collate(split, indices), collate(split, indices, width_multiple=multiple)
    for a, b in ((plain.src, wide.src), (plain.tgt_in, wide.tgt_in),
                 (plain.tgt_out, wide.tgt_out)):
        assert b.shape[0] == a.shape[0] and b.shape[1] % multiple == 0
        assert a.shape[1] <= b.shape[1] < a.shape[1] + multiple
        assert torch.equal(b[:, : a.shape[1]], a) and (b[:, a.shape[1]:] == PAD_ID).all()
    assert (wide.n_src_tokens, wide.n_tgt_tokens) == (plain.n_src_tokens, plain.n_tgt_tokens)
