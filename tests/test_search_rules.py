"""Specifications of the search's bookkeeping, written once (tfm.decoding.rules and its tensor
form tfm.decoding.steps) and followed by every path: tfm's search step by step, the fixed
search of CUDA graphs (on a CPU, its steps run as they are), and the CTranslate2 engine. The
rules are declared (rules.STEP_RULES), and an engine that does not map one stops, naming it;
the length limit, greedy search's length penalty and the forced decoder start are each
checked on every path, so that changing one of them anywhere turns a test red."""

from __future__ import annotations

import random
from enum import Enum
from pathlib import Path

import pytest
import torch
from conftest import random_model_dir
from test_search import sources, tiny_model

from tfm.config import SearchOptions
from tfm.decoding import rules
from tfm.decoding.graphs import CudaGraphs
from tfm.decoding.rules import Hypothesis, UnmappedRule, keep, length_limit, rank
from tfm.decoding.search import search
from tfm.decoding.steps import best_first
from tfm.special_tokens import BOS_ID, EOS_ID

VOCAB = 12
X = 7  # a forced token after <s>


def paths(model):
    """Each of tfm's searches over ``model``: step by step, and in fixed buffers."""
    graphs = CudaGraphs(model)
    return {"search": lambda src, o, start=None: search(model, src, o, start=start),
            "graphs": lambda src, o, start=None: graphs.search(src, o, start)}


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    """An untrained tiny model's CTranslate2 export."""
    pytest.importorskip("ctranslate2")
    from tfm.interop.ctranslate2 import export_ctranslate2

    root = tmp_path_factory.mktemp("rules")
    return export_ctranslate2(random_model_dir(root / "model", tokenizer), root / "ct2")


class Extra(Enum):
    NEW_RULE = "a rule added to the declared list, mapped by no engine yet"


def test_a_declared_rule_no_engine_maps_stops_every_engine_naming_it(monkeypatch,
                                                                     export) -> None:
    from tfm.decoding.ctranslate2_engine import CTranslate2Translator

    model = tiny_model(0, vocab=VOCAB)
    src = sources([4, 6], VOCAB, 0)
    ct2 = CTranslate2Translator(export, "cpu", "fp32", exact=True)
    one_pass = CTranslate2Translator(export, "cpu", "fp32")
    # Every engine maps every rule declared today.
    for how in (dict(beam=1), dict(beam=3)):
        for run in paths(model).values():
            run(src, SearchOptions(**how))
        ct2.search([[9, 10, EOS_ID]], SearchOptions(**how))
    monkeypatch.setattr(rules, "STEP_RULES", (*rules.STEP_RULES, Extra.NEW_RULE))
    for how in (dict(beam=1), dict(beam=3)):
        for run in paths(model).values():
            with pytest.raises(UnmappedRule, match="tfm's search has no mapping for the "
                                                   "search rule NEW_RULE"):
                run(src, SearchOptions(**how))
        for engine in (ct2, one_pass):
            with pytest.raises(UnmappedRule, match="the ctranslate2 engine has no mapping for "
                                                   "the search rule NEW_RULE"):
                engine.search([[9, 10, EOS_ID]], SearchOptions(**how))


@pytest.mark.parametrize("forced", [1, 2])
@pytest.mark.parametrize("beam", [1, 3])
def test_an_output_that_never_ends_stops_at_the_length_limit_on_every_path(forced: int,
                                                                          beam: int) -> None:
    # min_len above every limit: EOS comes only where the limit forces it, so each output is
    # exactly its limit long (EOS included): rules.length_limit of its source, within the
    # positions the decoder has left after its forced start tokens (9 of 10 here for two).
    model = tiny_model(1, vocab=VOCAB, max_positions=10)
    lengths = [2, 3, 5, 9]
    src = sources(lengths, VOCAB, 1)
    start = torch.tensor([[BOS_ID, X][:forced]] * len(lengths))
    o = SearchOptions(beam=beam, n_best=beam, max_len_a=1.0, max_len_b=1, min_len=50)
    limits = [length_limit(n, 1.0, 1, 10 - (forced - 1)) for n in lengths]
    assert limits == ([3, 4, 6, 10] if forced == 1 else [3, 4, 6, 9])
    for name, run in paths(model).items():
        for hyps, limit in zip(run(src, o, start), limits):
            assert [len(h.tokens) + 1 for h in hyps] == [limit] * len(hyps), name


def test_at_the_limit_is_the_last_position_the_limit_allows() -> None:
    assert [rules.at_limit(3, position) for position in range(4)] == [False, False, True,
                                                                        False]


@pytest.mark.parametrize("forced", [1, 2])
def test_greedy_search_scores_with_length_penalty_1_whatever_the_options_say(
        forced: int, export) -> None:
    # log P / (tokens + forced after the first + EOS) ** 1, on every path, though the options
    # carry another length penalty (beam search's).
    from tfm.decoding.ctranslate2_engine import CTranslate2Translator

    model = tiny_model(2, vocab=VOCAB)
    src = sources([3, 5, 8], VOCAB, 2)
    start = torch.tensor([[BOS_ID, X][:forced]] * 3)
    for penalty in (0.0, 0.6, 2.0):
        o = SearchOptions(beam=1, length_penalty=penalty, max_len_a=1.5, max_len_b=2)
        for name, run in paths(model).items():
            for [h] in run(src, o, start):
                assert h.score == pytest.approx(h.log_prob / (len(h.tokens) + forced), rel=1e-6
                                                ), name
    for exact in (True, False):
        ct2 = CTranslate2Translator(export, "cpu", "fp32", exact=exact)
        for penalty in (0.0, 2.0):
            o = SearchOptions(beam=1, length_penalty=penalty)
            for [h] in ct2.search([[9, 10, 11, EOS_ID], [12, EOS_ID]], o):
                assert h.score == pytest.approx(h.log_prob / (len(h.tokens) + 1), rel=1e-6)
    assert rules.length_penalty_of(SearchOptions(beam=3, length_penalty=0.6)) == 0.6


@pytest.mark.parametrize("beam", [1, 3])
def test_the_forced_start_is_fed_before_the_first_step_on_every_path(beam: int) -> None:
    # The hypotheses of a decoder fed <s> X are those of the same search whose first output
    # token is forced to X, without X: the same tokens after it and X's log P left out.
    model = tiny_model(3, vocab=VOCAB, layers=2)
    src = sources([4, 6, 7], VOCAB, 3)
    o = SearchOptions(beam=beam, n_best=beam, max_len_a=1.5, max_len_b=3)
    start = torch.tensor([[BOS_ID, X]] * 3)
    for name, run in paths(model).items():
        found = run(src, o, start)
        for row, hyps in enumerate(found):
            for h in hyps:
                tgt_in = torch.tensor([[BOS_ID, X, *h.tokens]])
                with torch.no_grad():
                    logp = torch.log_softmax(model(src[row:row + 1], tgt_in)[0].double(), -1)
                gold = [*h.tokens, EOS_ID]
                expected = float(sum(logp[1 + i, t] for i, t in enumerate(gold)))
                assert h.log_prob == pytest.approx(expected, abs=1e-4), name
        assert [[h.tokens for h in hyps] for hyps in found] != [
            [h.tokens for h in hyps] for hyps in run(src, o)], name  # X matters


def test_the_tensor_ranking_is_rules_rank() -> None:
    # steps.best_first (FixedSearch's kept hypotheses) orders as rules.keep (the step-by-step
    # search's and the CTranslate2 engine's sort by rules.rank), ties and unmet constraints
    # included: the earlier first among equal ranks.
    rng = random.Random(0)
    for _ in range(200):
        m = rng.randint(1, 8)
        hyps = [Hypothesis([i], rng.choice([-1.0, -2.0, -2.5, float("-inf")]), 0.0,
                           constraints_met=[rng.random() < 0.7]) for i in range(m)]
        kept: list[Hypothesis] = []
        for h in hyps:
            keep(kept, h, most=m)
        assert kept == sorted(hyps, key=rank, reverse=True)
        scores = torch.tensor([[h.score for h in hyps]], dtype=torch.float64)
        complete = torch.tensor([[h.complete for h in hyps]])
        assert [hyps[i] for i in best_first(scores, complete)[0].tolist()] == kept
        without = [Hypothesis(h.tokens, h.score, 0.0) for h in hyps]
        assert [without[i] for i in best_first(scores)[0].tolist()] == sorted(
            without, key=rank, reverse=True)


def test_the_two_searches_share_one_vocabulary_and_neither_imports_the_other() -> None:
    from test_architecture import MODULES, tfm_imports

    graphs = tfm_imports(MODULES["tfm.decoding.graphs"])
    eager = tfm_imports(MODULES["tfm.decoding.search"])
    assert "tfm.decoding.search" not in graphs and "tfm.decoding.graphs" not in eager
    assert {"tfm.decoding.steps", "tfm.decoding.rules"} <= graphs & eager
    assert "tfm.decoding.allocation" in eager - graphs  # phrases: the step-by-step search's
