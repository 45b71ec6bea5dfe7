"""Specifications of the student shapes: the presets with a deep encoder and a shallow decoder,
and the SSRU decoder layer (tfm.model.ssru) in place of masked self-attention: its recurrence
against a loop written out here, incremental and fixed-buffer decoding against the full
forward pass, reordered beams, batches, both searches, int8, a trained model through the
command line, and the exports that cannot hold it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from conftest import tfm
from test_model import make_model, pad_stack, random_tokens, source, target_in
from test_search import all_outputs, sources, teacher_forced_log_probs, tiny_model

from tfm.config import PRESETS, SearchOptions, model_config_from_dict, model_config_from_preset
from tfm.decoding.graphs import CudaGraphs
from tfm.decoding.search import beam_search, greedy_search, search
from tfm.model import Transformer
from tfm.model.int8 import Int8Linear, quantize_linears
from tfm.model.layers import DecoderLayer
from tfm.model.ssru import SSRU
from tfm.model_info import ModelInfo

SSRU_MODEL = dict(decoder_self_attention="ssru")


def ssru_model(seed: int = 0, norm_first: bool = False, double: bool = True,
               **overrides) -> Transformer:
    """test_model's small model (d_model 32, 2+2 layers) with SSRU decoder layers, its forget
    biases drawn too (they start at zero)."""
    model = make_model(seed, norm_first, double, **{**SSRU_MODEL, **overrides})
    with torch.no_grad():
        for layer in model.decoder_layers:
            layer.ssru.forget_bias.normal_()
    return model


# --- the presets -----------------------------------------------------------------------------

@pytest.mark.parametrize("preset, encoder, decoder, d_model, d_ff", [
    ("student-3-1", 3, 1, 256, 1024), ("student-3-2", 3, 2, 256, 1024),
    ("student-6-1", 6, 1, 256, 1024),
    ("student-12-1", 12, 1, 256, 1024),
    ("student-tiny", 6, 2, 256, 1536)])
def test_student_presets_have_a_deep_encoder_and_a_shallow_decoder(preset, encoder, decoder,
                                                                   d_model, d_ff) -> None:
    config = model_config_from_preset(preset, src_vocab_size=100, tgt_vocab_size=100)
    assert (config.encoder_layers, config.decoder_layers) == (encoder, decoder)
    assert (config.d_model, config.d_ff) == (d_model, d_ff)
    assert config.decoder_self_attention == "attention"  # exportable; SSRU is an option
    ssru = model_config_from_preset(preset, decoder_self_attention="ssru")
    assert ssru.decoder_self_attention == "ssru" and ssru.decoder_layers == decoder
    # Kasai et al.'s students are `small` made deep and shallow: the same width.
    assert {k: PRESETS["small"][k] for k in ("d_model", "n_heads", "d_ff")} == {
        k: PRESETS["student-6-1"][k] for k in ("d_model", "n_heads", "d_ff")}


# --- the recurrence --------------------------------------------------------------------------

def recurrence_by_hand(ssru: SSRU, x: torch.Tensor) -> torch.Tensor:
    """Kim et al.'s SSRU, one position after the other: x (B, T, D) -> o (B, T, D)."""
    d = x.size(-1)
    w, w_f = ssru.proj.weight[:d], ssru.proj.weight[d:]
    cell = torch.zeros_like(x[:, 0])
    out = []
    for t in range(x.size(1)):
        f = torch.sigmoid(x[:, t] @ w_f.T + ssru.forget_bias)
        cell = f * cell + (1 - f) * (x[:, t] @ w.T)
        out.append(torch.relu(cell))
    return torch.stack(out, dim=1)


def test_the_ssru_over_a_sequence_is_the_recurrence_written_out() -> None:
    torch.manual_seed(0)
    ssru = SSRU(16).double()
    with torch.no_grad():
        ssru.forget_bias.normal_()
        x = torch.randn(3, 37, 16, dtype=torch.float64)  # 37: not a power of two
        expected = recurrence_by_hand(ssru, x)
        whole, last = ssru(x)
        torch.testing.assert_close(whole, expected, atol=1e-12, rtol=0)
        # One step at a time from the cell the step before left.
        cell = torch.zeros(3, 16, dtype=torch.float64)
        for t in range(x.size(1)):
            out, cell = ssru(x[:, t: t + 1], None, cell)
            torch.testing.assert_close(out[:, 0], expected[:, t], atol=1e-12, rtol=0)
        torch.testing.assert_close(last, cell, atol=1e-12, rtol=0)
    # Padding leaves the cell as it was: what follows it is as if it were not there.
    real = torch.ones(3, 37, dtype=torch.bool)
    real[:, 5:9] = False
    with torch.no_grad():
        masked = ssru(x, real)[0]
        skipped = recurrence_by_hand(ssru, torch.cat([x[:, :5], x[:, 9:]], dim=1))
    torch.testing.assert_close(masked[:, 9:], skipped[:, 5:], atol=1e-12, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_an_ssru_layer_wraps_the_recurrence_in_the_residual_and_layernorm(norm_first) -> None:
    torch.manual_seed(1)
    layer = DecoderLayer(16, 2, 32, 0.0, 0.0, 0.0, norm_first, self_attention="ssru")
    layer = layer.double().eval()
    assert not hasattr(layer, "self_attn")
    x, memory = torch.randn(2, 6, 16).double(), torch.randn(2, 4, 16).double()
    src_mask = torch.ones(2, 1, 1, 4, dtype=torch.bool)
    norm = layer.self_attn_layer_norm
    with torch.no_grad():
        layer.ssru.forget_bias.normal_()
        # What the first sub-layer gives, by hand.
        first = (x + recurrence_by_hand(layer.ssru, norm(x)) if norm_first
                 else norm(x + recurrence_by_hand(layer.ssru, x)))
    # The layer with its cross-attention and FFN giving zeros: the first sub-layer alone.
    with torch.no_grad():
        for p in [*layer.encoder_attn.out_proj.parameters(), *layer.ffn.fc2.parameters()]:
            p.zero_()
        only_first = layer(x, layer.encoder_attn.project_kv(memory),
                           torch.ones(2, 6, dtype=torch.bool), src_mask)[0]
        if norm_first:
            expected = first
        else:  # two more LayerNorms of an unchanged sum
            expected = layer.final_layer_norm(layer.encoder_attn_layer_norm(first))
    torch.testing.assert_close(only_first, expected, atol=1e-12, rtol=0)


# --- incremental decoding --------------------------------------------------------------------

def decode_incrementally(model, state, tokens: torch.Tensor, start: int = 0):
    """Feed tokens[:, start:] one position at a time -> (logits (B, T', V), final state)."""
    out = []
    for t in range(start, tokens.size(1)):
        logits, state, _ = model.decode_step(tokens[:, t], state)
        out.append(logits)
    return torch.stack(out, 1), state


def decode_in_place(model, state, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
    """The same through the fixed buffers a CUDA graph replays (decode_step_in_place)."""
    out = []
    for t in range(start, tokens.size(1)):
        out.append(model.decode_step_in_place(tokens[:, t], state))
        state.position += 1
    return torch.stack(out, 1)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoding_step_by_step_equals_the_full_forward_pass(norm_first) -> None:
    model = ssru_model(norm_first=norm_first)
    torch.manual_seed(7)
    src = pad_stack([source(9), source(3), source(6)])
    tgt = torch.stack([target_in(7) for _ in range(3)])
    with torch.no_grad():
        full = model(src, tgt)
        memory, memory_mask = model.encode(src)
        steps, state = decode_incrementally(model, model.start_decoding(memory, memory_mask),
                                            tgt)
        fixed = model.fixed_decoder_state(3, src.size(1), tgt.size(1))
        model.load_memory(fixed, memory, memory_mask)
        in_place = decode_in_place(model, fixed, tgt)
        # The buffers serve the next batch with nothing of this one left in them.
        other = torch.stack([target_in(7) for _ in range(3)])
        model.load_memory(fixed, memory, memory_mask)
        again = decode_in_place(model, fixed, other)
        full_other = model(src, other)
    torch.testing.assert_close(steps, full, atol=1e-10, rtol=0)
    torch.testing.assert_close(in_place, full, atol=1e-10, rtol=0)
    torch.testing.assert_close(again, full_other, atol=1e-10, rtol=0)
    # The state is one cell per layer and row, whatever the length.
    assert [tuple(layer.cell.shape) for layer in state.layers] == [(3, 32)] * 2


@pytest.mark.parametrize("perm", [[2, 1, 0], [0, 0, 2], [2, 2, 2, 0]],
                         ids=["reverse", "duplicate-and-drop", "beam-like"])
def test_reordered_state_continues_like_the_reordered_full_forward_pass(perm) -> None:
    model = ssru_model()
    torch.manual_seed(8)
    src = pad_stack([source(9), source(3), source(6)])
    prefix_len, total = 3, 7
    tgt = torch.stack([target_in(prefix_len) for _ in range(3)])
    index = torch.tensor(perm)
    new_tgt = torch.cat([tgt[index], random_tokens(len(perm), total - prefix_len)], dim=1)
    with torch.no_grad():
        state = model.start_decoding(*model.encode(src))
        _, state = decode_incrementally(model, state, tgt)
        steps, _ = decode_incrementally(model, state.index_select(index), new_tgt, prefix_len)
        full = model(src[index], new_tgt)
    torch.testing.assert_close(steps, full[:, prefix_len:], atol=1e-10, rtol=0)


def test_reordered_fixed_buffers_continue_like_the_reordered_full_forward_pass() -> None:
    """Beams of one sentence (group 3) reordered in place, as the graph search does."""
    model = ssru_model(3)
    torch.manual_seed(9)
    k, prefix_len, total = 3, 3, 7
    src = pad_stack([source(8), source(5)])
    tgt = torch.stack([target_in(prefix_len) for _ in range(2 * k)])
    index = torch.tensor([2, 2, 0, 4, 3, 3])  # within each sentence's rows
    new_tgt = torch.cat([tgt[index], random_tokens(2 * k, total - prefix_len)], dim=1)
    with torch.no_grad():
        memory, memory_mask = model.encode(src)
        state = model.fixed_decoder_state(2, src.size(1), total, group=k)
        model.load_memory(state, memory, memory_mask)
        decode_in_place(model, state, tgt)
        state.reorder(index)
        steps = decode_in_place(model, state, new_tgt, prefix_len)
        full = model(src.repeat_interleave(k, dim=0), new_tgt)
    torch.testing.assert_close(steps, full[:, prefix_len:], atol=1e-10, rtol=0)


# --- batches and searches --------------------------------------------------------------------

def test_logits_do_not_depend_on_padding_or_on_other_sentences() -> None:
    model = ssru_model(double=False)
    torch.manual_seed(2)
    srcs = [source(15), source(4), source(11)]
    tgts = [target_in(12), target_in(3), target_in(9)]
    with torch.no_grad():
        batch = model(pad_stack(srcs), pad_stack(tgts))
        for i, (s, t) in enumerate(zip(srcs, tgts)):
            alone = model(s[None], t[None])[0]
            torch.testing.assert_close(batch[i, : t.numel()], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("beam", [1, 4])
def test_each_sentence_is_translated_as_if_it_were_alone(beam) -> None:
    model = tiny_model(0, layers=2, d_model=32, n_heads=4, **SSRU_MODEL)
    lengths = [5, 2, 9, 3, 7]
    src = sources(lengths, 10, 10)
    options = SearchOptions(beam=beam, max_len_a=1.0, max_len_b=2, n_best=min(beam, 2))
    batched = search(model, src, options)
    for i, n in enumerate(lengths):
        [alone] = search(model, src[i: i + 1, :n], options)
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]],
                                                         abs=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_beam_as_wide_as_the_search_space_ranks_every_output_as_teacher_forcing(seed) -> None:
    """Every hypothesis's log-probability is the teacher-forced one of its tokens: beams whose
    SSRU cells did not follow them would score some other prefix's continuation."""
    vocab, limit = 8, 4
    model = tiny_model(seed, vocab=vocab, layers=2, **SSRU_MODEL)
    with torch.no_grad():
        for layer in model.decoder_layers:
            layer.ssru.forget_bias.normal_()
    src = sources([4], vocab, seed)
    candidates = all_outputs(vocab, limit, 0)
    log_probs = teacher_forced_log_probs(model, src, candidates)
    ranked = sorted(range(len(candidates)), key=lambda i: float(log_probs[i]), reverse=True)
    k = len(candidates)
    [hyps] = beam_search(model, src, SearchOptions(beam=k, length_penalty=0.0, max_len_a=0.0,
                                                   max_len_b=limit, n_best=k))
    assert [h.tokens for h in hyps] == [candidates[i] for i in ranked]
    assert [h.log_prob for h in hyps] == pytest.approx([float(log_probs[i]) for i in ranked],
                                                       abs=1e-5)


@pytest.mark.parametrize("seed, how", list(itertools.product(range(2), [
    dict(beam=1), dict(beam=3), dict(beam=4, length_penalty=0.6, stop_early=False, n_best=2)])))
def test_the_fixed_search_finds_what_the_search_finds(seed, how) -> None:
    model = tiny_model(seed, vocab=12, layers=2, **SSRU_MODEL)
    src = sources([5, 3, 7, 2, 6], 12, seed)
    options = SearchOptions(max_len_a=1.5, max_len_b=4, **how)
    expected = search(model, src, options)
    found = CudaGraphs(model, check_every=1).search(src, options)
    assert [[h.tokens for h in hyps] for hyps in found] == [
        [h.tokens for h in hyps] for hyps in expected]
    for mine, theirs in zip(itertools.chain(*found), itertools.chain(*expected)):
        assert mine.score == pytest.approx(theirs.score, abs=1e-5)


def test_a_shortlist_decodes_an_ssru_model_over_its_output_rows() -> None:
    """The shortlist scores the output layer's rows of its candidates: with every target id
    a candidate, an SSRU model's beams come out as without it."""
    from tfm.decoding.shortlist import ShortlistModel

    model = tiny_model(2, vocab=12, layers=2, **SSRU_MODEL)
    src = sources([5, 3, 7], 12, 2)
    ids = torch.arange(12)
    shortlisted = ShortlistModel(model, ids, torch.ones(3, 12, dtype=torch.bool))
    options = SearchOptions(beam=3, n_best=2, max_len_a=1.0, max_len_b=3)
    expected, found = beam_search(model, src, options), beam_search(shortlisted, src, options)
    assert [[h.tokens for h in hyps] for hyps in found] == [
        [h.tokens for h in hyps] for hyps in expected]
    assert [h.score for h in itertools.chain(*found)] == pytest.approx(
        [h.score for h in itertools.chain(*expected)], abs=1e-5)


def test_greedy_search_of_an_int8_ssru_model_stays_close_to_fp32() -> None:
    model = tiny_model(4, vocab=30, d_model=64, layers=2, n_heads=4, **SSRU_MODEL)
    src = sources([6, 9, 4], 30, 4)
    tgt = torch.stack([target_in(6) for _ in range(3)]).clamp(max=29)
    with torch.no_grad():
        fp32 = model(src, tgt).log_softmax(-1)
    quantize_linears(model)
    assert all(isinstance(layer.ssru.proj, Int8Linear) for layer in model.decoder_layers)
    with torch.no_grad():
        int8 = model(src, tgt).log_softmax(-1)
    assert (int8 - fp32).abs().max() < 0.05 * fp32.abs().max()
    found = greedy_search(model, src, SearchOptions(beam=1, max_len_a=1.0, max_len_b=3))
    assert all(hyps and hyps[0].tokens is not None for hyps in found)


def test_training_under_bf16_autocast_runs_the_recurrence_in_float32() -> None:
    model = ssru_model(double=False).train()
    torch.manual_seed(5)
    src, tgt = pad_stack([source(7), source(4)]), pad_stack([target_in(6), target_in(3)])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(src, tgt).float().logsumexp(-1).mean()
    loss.backward()
    grad = model.decoder_layers[0].ssru.forget_bias.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


# --- model directories -----------------------------------------------------------------------

def test_an_ssru_model_is_format_5_and_older_models_stay_as_they_were() -> None:
    attention = model_config_from_preset("student-6-1")
    ssru = model_config_from_preset("student-6-1", decoder_self_attention="ssru")
    assert ModelInfo(ssru).to_json()["format_version"] == 5
    old = ModelInfo(attention).to_json()
    assert old["format_version"] == 1 and "decoder_self_attention" not in old["model"]
    # A model saved before the field existed reads as self-attention.
    assert model_config_from_dict(old["model"]).decoder_self_attention == "attention"
    with pytest.raises(Exception, match="--decoder-self-attn lstm"):
        model_config_from_preset("small", decoder_self_attention="lstm")


@pytest.fixture(scope="module")
def trained_ssru_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model of SSRU decoder layers trained briefly on the demo corpus by the command line."""
    from test_cli import train_demo_model

    return train_demo_model(tmp_path_factory.mktemp("ssru"), train_options=(
        "--decoder-self-attn", "ssru", "--encoder-layers", "3", "--decoder-layers", "1"))


def test_a_trained_ssru_model_is_saved_and_translates_through_the_command_line(
        trained_ssru_model: Path) -> None:
    from tfm.checkpoint import load_model_dir

    config = json.loads((trained_ssru_model / "config.json").read_text())
    assert config["format_version"] == 5
    assert config["model"]["decoder_self_attention"] == "ssru"
    model = load_model_dir(trained_ssru_model)[0]
    assert [layer.ssru is not None for layer in model.decoder_layers] == [True]
    sentences = ["A man is riding a bike .", "Two dogs play in the snow ."]
    for beam in ("1", "4"):
        result = tfm("translate", "-m", str(trained_ssru_model), "--beam", beam,
                     "--format", "jsonl", *sentences)
        assert result.returncode == 0, result.stderr
        records = [json.loads(line) for line in result.stdout.splitlines()]
        assert len(records) == 2 and all(r["translation"] for r in records)


@pytest.mark.parametrize("to", ["ctranslate2", "marian"])
def test_exports_that_cannot_hold_an_ssru_decoder_refuse_it_in_one_line(
        trained_ssru_model: Path, tmp_path: Path, to: str) -> None:
    if to == "ctranslate2":
        pytest.importorskip("ctranslate2")
    out = tmp_path / "out"
    result = tfm("export", str(trained_ssru_model), "--to", to, "-o", str(out))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0
    assert len(lines) == 1 and "SSRU" in lines[0], result.stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_a_deep_encoder_shallow_decoder_student_exports_to_ctranslate2(tmp_path: Path,
                                                                       tokenizer) -> None:
    """A student of the 6-1 shape (at a test's width) translates in CTranslate2 as in tfm."""
    pytest.importorskip("ctranslate2")
    from test_export_ctranslate2 import SOURCES, assert_same_translations

    from tfm.checkpoint import save_model_dir
    from tfm.config import ModelConfig
    from tfm.decoding.ctranslate2_engine import CTranslate2Translator
    from tfm.decoding.torch_engine import TorchTranslator
    from tfm.interop.ctranslate2 import export_ctranslate2

    torch.manual_seed(0)
    vocab = tokenizer.get_vocab_size()
    config = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4,
                         encoder_layers=6, decoder_layers=1, d_ff=64, dropout=0.0)
    save_model_dir(tmp_path / "model", Transformer(config), tokenizer,
                   ModelInfo(config, src_lang="en", tgt_lang="de"))
    export = export_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    ours = TorchTranslator(tmp_path / "model", "cpu")
    theirs = CTranslate2Translator(export, "cpu", "fp32", exact=True)
    for options in (SearchOptions(beam=1), SearchOptions(beam=4, length_penalty=0.0)):
        assert_same_translations(ours.translate(SOURCES, options),
                                 theirs.translate(SOURCES, options))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_ssru_model_decodes_on_a_gpu_as_on_the_cpu_in_both_searches(precision: str) -> None:
    # The eager search and the CUDA graphs' fixed search on the GPU find what the CPU finds:
    # nearly all, as tests/test_cuda.py allows for the near-ties of untrained models.
    from tfm.device import resolve_precision

    model = tiny_model(0, vocab=40, d_model=32, layers=2, n_heads=2, **SSRU_MODEL)
    src = sources([9, 5, 7, 3, 8, 6], 40, 0)
    dtype = resolve_precision(precision, torch.device("cuda"), training=False)
    same = compared = 0
    for options in (SearchOptions(beam=1), SearchOptions(beam=4, n_best=2)):
        cpu = search(model, src, options)
        gpu_model = model.to("cuda") if dtype is None else model.to("cuda").to(dtype)
        paths = [search(gpu_model, src.cuda(), options),
                 CudaGraphs(gpu_model).search(src.cuda(), options)]
        for found in paths:
            for a, b in zip(found, cpu):
                compared += 1
                same += [h.tokens for h in a] == [h.tokens for h in b]
        model.to("cpu").float()
    assert same >= (0.9 if precision == "fp32" else 0.7) * compared, \
        f"{same} of {compared} the same"
