"""Greedy and beam search in fixed buffers, replayed as CUDA graphs: short batches on a GPU.

On a GPU, one short sentence is decoded in the time its kernels take to launch: each step of
tfm.decoding.search launches many small kernels and reads results back to the host.
Here one step of the search (the decoder over caches of a fixed size, the rules of
tfm.decoding.rules, the choice of the next tokens, the finished hypotheses kept best first) is
one function of tensors whose shapes never change and that reads nothing back. On CUDA it is
captured once per batch shape as a CUDA graph and replayed (``CudaGraphs``); the host looks
only every ``check_every`` steps whether every sentence is done.

It finds what tfm.decoding.search finds: both are written in the same vocabulary,
tfm.decoding.steps' tensor functions (the forced start, the limits, the rules of a step, the
choice, the ranking) over tfm.decoding.rules' numbers, and neither imports the other. Two things
differ in the arithmetic, never in the rules: the self-attention reads a fixed number of
positions, the later ones masked, where the search's cache grows by one a step (scores equal
to float rounding, not bit for bit), and finished sentences stay in the batch (ignored) where
the search prunes them. It covers the searches without constraints, attention weights, a
shortlist or an ensemble (``CudaGraphs.takes``); the others go to tfm.decoding.search.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import astuple

import torch
from torch import Tensor

from tfm.config import SearchOptions
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.rules import (
    Hypothesis,
    at_limit,
    counted,
    hypotheses_needed,
    hypothesis,
    length_factor,
    length_penalty_of,
    live_counted,
    sentence_done,
)
from tfm.decoding.steps import (
    best_first,
    decoder_start,
    expand,
    greedy_choice,
    limits,
    prime_in_place,
    step_log_probs,
    top_candidates,
)
from tfm.model import Transformer
from tfm.special_tokens import PAD_ID

NEG_INF = float("-inf")
MOST_ROWS = 64  # sentences x beam: larger batches are bound by arithmetic, not launches
MOST_GRAPHS = 64  # batch shapes kept captured, the least recently used dropped first,
MOST_BYTES = 1 << 30  # and fewer where their buffers would take more than this


class FixedSearch:
    """One batch shape's search: ``sentences`` sources of ``source_length`` positions, beam
    ``options.beam`` (1: greedy), at most ``length`` output positions (EOS included), the
    decoder started from ``forced`` tokens (steps.decoder_start: 1, ``<s>``).
    ``load`` takes a batch, ``step`` advances every sentence by one position without reading
    anything back, ``over`` says whether all are done, ``hypotheses`` reads the results."""

    def __init__(self, model: Transformer, sentences: int, source_length: int, length: int,
                 options: SearchOptions, forced: int = 1) -> None:
        self.model, self.o = model, options
        self.b, self.k, self.length = sentences, options.beam, length
        rows = sentences * self.k
        self.forced = forced
        self.state = model.fixed_decoder_state(sentences, source_length, length + forced - 1,
                                               self.k)
        device = self.state.position.device
        # (1,) the output position chosen next; the decoder's (state.position) is forced - 1
        # ahead of it, past the start tokens but the last.
        self.position = torch.zeros(1, dtype=torch.long, device=device)

        def full(shape: tuple[int, ...], value: float | int, dtype: torch.dtype) -> Tensor:
            return torch.full(shape, value, dtype=dtype, device=device)

        self.max_len = full((rows,), length, torch.long)  # each row's length limit
        self.tokens = full((rows,), PAD_ID, torch.long)  # fed next
        self.history = full((rows, length), PAD_ID, torch.long)  # tokens chosen so far
        if self.k == 1:  # greedy: each row's log P, length, and whether it has ended
            self.log_prob = full((rows,), 0.0, torch.float64)  # summed as Python floats are
            self.lengths = full((rows,), 0, torch.long)
            self.ended = full((rows,), False, torch.bool)
        else:
            self.needed = hypotheses_needed(self.k, options.n_best, options.stop_early)
            self.scores = full((sentences, self.k), NEG_INF, torch.float32)
            # Each sentence's finished hypotheses, best first (at most k), and whether it is done.
            self.kept_score = full((sentences, self.k), NEG_INF, torch.float64)
            self.kept_log_prob = full((sentences, self.k), NEG_INF, torch.float32)
            self.kept_length = full((sentences, self.k), 0, torch.long)
            self.kept_tokens = full((sentences, self.k, length), PAD_ID, torch.long)
            self.done = full((sentences,), False, torch.bool)
            # rules.score's length factors, by position, computed as the search computes them:
            # a hypothesis ending at position t has t tokens before its EOS; the best live beam
            # is scored as if it ended at the next position, in float32.
            lp = length_penalty_of(options)
            self.ending_factor = torch.tensor(
                [length_factor(counted(t, forced), lp) for t in range(length)],
                dtype=torch.float64, device=device)
            self.live_factor = torch.tensor(
                [length_factor(live_counted(t, forced), lp) for t in range(length)],
                dtype=torch.float32, device=device)
            self.sentence_rows = torch.arange(sentences, device=device)[:, None] * self.k

    @torch.inference_mode()
    def load(self, src: Tensor, max_len: Tensor, start: Tensor | None = None) -> None:
        """A batch: ``src`` (sentences, source_length) ids, ``max_len`` (sentences,) their
        length limits (steps.limits), ``start`` (sentences, forced) the decoder's forced
        tokens (None: ``<s>``), fed here but the last (steps.prime_in_place). Everything else
        starts afresh."""
        memory, memory_mask = self.model.encode(src)
        self.model.load_memory(self.state, memory, memory_mask)
        self.max_len.copy_(max_len.repeat_interleave(self.k))
        start = decoder_start(start, self.b, src.device).repeat_interleave(self.k, dim=0)
        self.tokens.copy_(prime_in_place(self.model, self.state, start))
        self.position.zero_()
        self.history.fill_(PAD_ID)
        if self.k == 1:
            self.log_prob.zero_()
            self.lengths.zero_()
            self.ended.zero_()
        else:
            self.scores.fill_(NEG_INF)
            self.scores[:, 0] = 0.0  # all beams start identical: expand only the first
            self.kept_score.fill_(NEG_INF)
            self.kept_log_prob.fill_(NEG_INF)
            self.kept_length.zero_()
            self.kept_tokens.fill_(PAD_ID)
            self.done.zero_()

    def step(self) -> None:
        """One position for every row: what a CUDA graph captures (no host reads, no shapes
        that change)."""
        logits = self.model.decode_step_in_place(self.tokens, self.state)
        logp = step_log_probs(logits, self.position, self.o.min_len, self.max_len)
        if self.k == 1:
            self._greedy(logp)
        else:
            self._beam(logp)
        self.position += 1
        self.state.position += 1

    def _greedy(self, logp: Tensor) -> None:
        """search.greedy_search's step: each live row takes its most probable token."""
        best, token, ends = greedy_choice(logp)
        live = ~self.ended
        self.log_prob += torch.where(live, best.double(), 0.0)
        grows = live & ~ends
        self.history.index_copy_(1, self.position, torch.where(grows, token, PAD_ID)[:, None])
        self.lengths += grows
        self.ended |= ends
        self.tokens.copy_(token)

    def _beam(self, logp: Tensor) -> None:
        """search._BeamSearch's expand, allocate, finish and stop; sentences that are done are
        left as they are instead of pruned."""
        k = self.k
        top = top_candidates(expand(self.scores, logp))
        self._finish(top.is_eos[:, :k] & ~self.done[:, None], top.beam[:, :k], top.scores[:, :k])
        self._stop(top.cont_scores[:, 0])
        source_rows = (self.sentence_rows + top.cont_beam).view(-1)
        self.state.reorder(source_rows)
        self.history.copy_(self.history.index_select(0, source_rows))
        self.history.index_copy_(1, self.position, top.cont_token.view(-1, 1))
        self.tokens.copy_(top.cont_token.view(-1))
        self.scores.copy_(top.cont_scores)

    def _finish(self, ends: Tensor, beam: Tensor, log_prob: Tensor) -> None:
        """Beams ``beam`` (b, k) that end (``ends``) with their summed ``log_prob`` join their
        sentence's kept hypotheses, which keep the k best, best first (steps.best_first: the
        order of rules.keep, which search._BeamSearch.finish calls)."""
        b, k, length = self.b, self.k, self.length
        factor = self.ending_factor.index_select(0, self.position)
        new_score = torch.where(ends, log_prob.double() / factor, NEG_INF)
        scores = torch.cat([self.kept_score, new_score], dim=1)  # (b, 2k)
        order = best_first(scores)[:, :k]
        ending = self.history.view(b, k, length).gather(1, beam[..., None].expand(b, k, length))
        tokens = torch.cat([self.kept_tokens, ending], dim=1)
        log_probs = torch.cat([self.kept_log_prob, log_prob], dim=1)
        lengths = torch.cat([self.kept_length, self.position.expand(b, k)], dim=1)
        self.kept_score.copy_(scores.gather(1, order))
        self.kept_log_prob.copy_(log_probs.gather(1, order))
        self.kept_length.copy_(lengths.gather(1, order))
        self.kept_tokens.copy_(tokens.gather(1, order[..., None].expand(b, k, length)))

    def _stop(self, best: Tensor) -> None:
        """rules.sentence_done for every sentence: at its length limit, or with ``needed``
        kept hypotheses (with ``stop_early``: the worst of which scores at least its best
        live beam ended now)."""
        last = at_limit(self.max_len.view(self.b, self.k)[:, 0], self.position)
        best_live = best / self.live_factor.index_select(0, self.position)  # float32
        worst_kept = self.kept_score[:, self.needed - 1]  # -inf while fewer are kept
        self.done |= sentence_done(worst_kept, best_live.double(), last, self.o.stop_early)

    @property
    def nbytes(self) -> int:
        """The memory its buffers take (a captured graph's temporaries come on top)."""
        return self.state.nbytes + sum(t.numel() * t.element_size()
                                       for t in vars(self).values() if isinstance(t, Tensor))

    def over(self) -> bool:
        """Whether every sentence is done (reads one number back)."""
        return bool((self.ended if self.k == 1 else self.done).all())

    def hypotheses(self, n_best: int | None = None) -> list[list[Hypothesis]]:
        """Each sentence's hypotheses, best first, ``n_best`` of them (None: the options'),
        scored by rules.score (rules.hypothesis)."""
        n_best = self.o.n_best if n_best is None else n_best
        lp = length_penalty_of(self.o)
        if self.k == 1:
            lengths, log_probs = self.lengths.tolist(), self.log_prob.tolist()
            history = self.history.tolist()
            return [[hypothesis(row[:n], log_prob, self.forced, lp)]
                    for row, n, log_prob in zip(history, lengths, log_probs)]
        kept = (self.kept_score > NEG_INF).sum(dim=1).tolist()
        lengths, log_probs = self.kept_length.tolist(), self.kept_log_prob.tolist()
        tokens = self.kept_tokens.tolist()
        return [[hypothesis(tokens[s][j][:lengths[s][j]], log_probs[s][j], self.forced, lp)
                 for j in range(min(kept[s], n_best))]
                for s in range(self.b)]


class CudaGraphs:
    """``model``'s searches of short batches on CUDA, one captured graph per batch shape
    (``graph_key``: sentences, source length, output limit, start tokens and the options),
    the ``most`` most recently used kept while their buffers take at most ``most_bytes``.
    ``check_every``: steps replayed between two looks at whether every sentence is done (a
    look waits for the GPU)."""

    def __init__(self, model: Transformer, most: int = MOST_GRAPHS,
                 most_bytes: int = MOST_BYTES, check_every: int = 4) -> None:
        self.model, self.most, self.most_bytes = model, most, most_bytes
        self.check_every = check_every
        self.graphs: OrderedDict[tuple, tuple[FixedSearch, Callable[[], None]]] = OrderedDict()
        self.lock = threading.Lock()  # one batch at a time replays a shape's buffers

    @staticmethod
    def takes(options: SearchOptions, constraints: list[TargetConstraints | None] | None,
              sentences: int) -> bool:
        """Whether a batch is one this path searches: no constraints, no attention weights,
        no sampling (the step-by-step search draws), at most MOST_ROWS decoder rows."""
        unconstrained = constraints is None or all(
            c is None or not (c.phrases or c.prefix) for c in constraints)
        return (unconstrained and not options.attention and options.sampling_topk == 1
                and sentences * options.beam <= MOST_ROWS)

    def search(self, src: Tensor, options: SearchOptions, start: Tensor | None = None
               ) -> list[list[Hypothesis]]:
        """``src`` (B, S) on the model's device: its hypotheses, as search.search's, the
        decoder started from ``start`` (B, P) (None: ``<s>``). (On a CPU, where tests run it,
        each step runs as it is, without a graph.)"""
        forced = 1 if start is None else start.size(1)
        max_len = limits(self.model, src, options, forced)
        length = int(max_len.max())
        key = graph_key(src, length, forced, options)
        with self.lock, torch.inference_mode():
            fixed, replay = self._graph(key, src, max_len, options, start)
            fixed.load(src, max_len, start)
            for replayed in range(1, length + 1):
                replay()
                if replayed % self.check_every == 0 and fixed.over():
                    break
            return fixed.hypotheses(options.n_best)

    def _graph(self, key: tuple, src: Tensor, max_len: Tensor, options: SearchOptions,
               start: Tensor | None) -> tuple[FixedSearch, Callable[[], None]]:
        """The search and its replay for ``key``'s batch shape: kept, or made and captured."""
        if key in self.graphs:
            self.graphs.move_to_end(key)
            return self.graphs[key]
        length, forced = key[2], key[3]
        fixed = FixedSearch(self.model, src.size(0), src.size(1), length, options, forced)
        fixed.load(src, max_len, start)  # real numbers for the warm-up steps before the capture
        self.graphs[key] = fixed, _captured(fixed)
        while len(self.graphs) > 1 and (
                len(self.graphs) > self.most
                or sum(f.nbytes for f, _ in self.graphs.values()) > self.most_bytes):
            self.graphs.popitem(last=False)
        return self.graphs[key]


def graph_key(src: Tensor, length: int, forced: int, options: SearchOptions) -> tuple:
    """What a captured search is kept under: the batch's shape (sentences, source length),
    its output limit, the number of forced start tokens, and every field of the options
    (astuple: a new field is part of the key without anyone adding it; one that does not
    change the step only makes another graph)."""
    return (*src.shape, length, forced, *astuple(options))


def _captured(fixed: FixedSearch) -> Callable[[], None]:
    """``fixed.step`` captured as a CUDA graph: its replay. Off CUDA (the tests on a CPU),
    ``fixed.step`` itself."""
    if fixed.position.device.type != "cuda":
        return fixed.step
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: kernels chosen and workspaces made
        for _ in range(2):
            fixed.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: CUDA work of other threads (a server's) does not break the capture.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        fixed.step()
    return graph.replay
