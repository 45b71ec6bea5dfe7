"""Specifications of int8 decoding (tfm.model.int8, ``--precision int8``).

The Linear layers compute with int8 weights (a scale per output channel) and int8 inputs (a
scale per row, found at each call): close to fp32, and the same search runs over them, with
every sentence translated as if it were alone in its batch. int8 is for decoding on a CPU:
refused in training and on CUDA.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import random_model_dir, tiny_config
from torch import nn

import tfm.device
import tfm.model.int8
from tfm.config import SearchOptions
from tfm.decoding.constraints import Phrase, TargetConstraints
from tfm.decoding.engines import load_translator
from tfm.decoding.torch_engine import TorchTranslator
from tfm.device import cpu_int8_support, resolve_precision
from tfm.errors import UsageError
from tfm.model import Transformer
from tfm.model.ensemble import Ensemble
from tfm.model.int8 import KERNELS, Int8Linear, int8_scheme, quantize_linears
from tfm.special_tokens import EOS_ID

CPU = torch.device("cpu")


def int8_layer(seed: int, kernel: str, d_in: int = 64, d_out: int = 48,
               bias: bool = True) -> tuple[nn.Linear, Int8Linear]:
    torch.manual_seed(seed)
    linear = nn.Linear(d_in, d_out, bias=bias)
    return linear, Int8Linear(linear.weight.detach(), None if not bias else linear.bias.detach(),
                              int8_scheme(kernel))


def exact_int8(layer: Int8Linear, x: torch.Tensor) -> torch.Tensor:
    """What the layer computes, in float64: each row of x rounded to integers in
    -levels..levels on its own scale, times the int8 weight, scaled back, plus the bias."""
    scale = x.double().abs().amax(dim=-1, keepdim=True) / layer.scheme.input_levels
    rounded = torch.floor(x.double() / scale + 0.5)
    y = rounded @ layer.weight_int8.double().T * scale * layer.weight_scale.double()
    return y if layer.bias is None else y + layer.bias.double()


# --- the layer -------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", KERNELS)
def test_an_int8_layer_computes_the_fp32_layer_within_rounding(kernel: str) -> None:
    linear, layer = int8_layer(0, kernel)
    x = torch.randn(3, 5, 64)
    expected = linear(x)
    got = layer(x)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert (got - expected).abs().max() < 0.05 * expected.abs().max()


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_row_is_rounded_on_its_own_scale_whatever_the_rows_beside_it(kernel: str) -> None:
    _, layer = int8_layer(1, kernel)
    x = torch.randn(6, 64)
    x[2] *= 1000.0  # one row far larger than the others: a scale for all would blur them
    together = layer(x)
    for i in range(len(x)):
        assert torch.equal(layer(x[i: i + 1])[0], together[i])
    assert torch.allclose(together.double(), exact_int8(layer, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_rounded_products_are_summed_exactly_at_the_inputs_range_this_cpu_gets(
        kernel: str) -> None:
    """The largest inputs against the largest weights: where the CPU adds pairs of products
    in 16 bits (no VNNI), 8-bit inputs would saturate there; the range chosen must not."""
    layer = Int8Linear(torch.ones(8, 256), None, int8_scheme(kernel))  # every weight 127
    x = torch.cat([torch.ones(1, 256), -torch.ones(1, 256), torch.randn(2, 256)])
    assert torch.allclose(layer(x).double(), exact_int8(layer, x), rtol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_an_all_zero_row_gives_the_bias(kernel: str) -> None:
    linear, layer = int8_layer(3, kernel)
    assert torch.equal(layer(torch.zeros(2, 64)), linear.bias.detach().expand(2, -1))


def test_the_tied_output_projection_is_quantized_and_the_embedding_lookup_stays_fp32(
        tokenizer) -> None:
    torch.manual_seed(0)
    model = Transformer(tiny_config(tokenizer.get_vocab_size())).eval()
    assert model.config.tie_output
    embedding = model.tgt_embed.token.weight
    before = embedding.detach().clone()
    quantize_linears(model)
    assert isinstance(model.output_proj, Int8Linear)
    assert model.tgt_embed.token.weight is embedding and torch.equal(embedding, before)
    assert embedding.dtype == torch.float32
    rounding = (model.output_proj.weight - before).abs().max(dim=1).values
    assert (rounding <= before.abs().amax(dim=1) / 254 + 1e-7).all()  # half a step per row


def test_every_linear_layer_of_an_ensemble_is_quantized(tokenizer) -> None:
    config = tiny_config(tokenizer.get_vocab_size())
    ensemble = Ensemble([Transformer(config), Transformer(config)])
    linears = sum(isinstance(m, nn.Linear) for m in ensemble.modules())
    quantize_linears(ensemble)
    assert not any(isinstance(m, nn.Linear) for m in ensemble.modules())
    assert sum(isinstance(m, Int8Linear) for m in ensemble.modules()) == linears


# --- decoding --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    return random_model_dir(tmp_path_factory.mktemp("int8") / "model", tokenizer, seed=3)


@pytest.fixture(scope="module", params=KERNELS)
def translator(model_dir: Path, request: pytest.FixtureRequest) -> TorchTranslator:
    """The model, its Linear layers in int8 by ``kernel``."""
    translator = TorchTranslator(model_dir, "cpu", workers=1)
    quantize_linears(translator.model, int8_scheme(request.param))
    return translator


def sources(vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(5, vocab, (n - 1,), generator=g).tolist() + [EOS_ID] for n in lengths]


LENGTHS = [6, 2, 9, 4, 7]


@pytest.mark.parametrize("beam, n_best", [(1, 1), (4, 2)])
def test_a_sentence_translates_the_same_alone_and_in_a_batch(translator: TorchTranslator,
                                                             beam: int, n_best: int) -> None:
    options = SearchOptions(beam=beam, n_best=n_best, max_len_a=1.0, max_len_b=4)
    batch = sources(translator.model.config.src_vocab_size, LENGTHS, seed=beam)
    together = translator.search(batch, options)
    for row, hyps in zip(batch, together):
        [alone] = translator.search([row], options)
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
        assert [h.score for h in alone] == pytest.approx([h.score for h in hyps], abs=1e-5)


def test_n_best_hypotheses_are_distinct_best_first_and_scored_by_the_int8_model(
        translator: TorchTranslator) -> None:
    options = SearchOptions(beam=4, n_best=3, max_len_a=1.0, max_len_b=3)
    batch = sources(translator.model.config.src_vocab_size, LENGTHS, seed=5)
    for row, hyps in zip(batch, translator.search(batch, options)):
        assert len(hyps) == 3 and len({tuple(h.tokens) for h in hyps}) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        forced = translator.forced_log_probs([row] * 3, [h.tokens for h in hyps])
        assert [h.log_prob for h in hyps] == pytest.approx([sum(f) for f in forced], abs=1e-4)


def test_constraints_are_met_in_int8_and_a_sentence_decodes_the_same_alone(
        translator: TorchTranslator) -> None:
    vocab = translator.model.config.tgt_vocab_size
    batch = sources(vocab, [6, 4, 8], seed=7)
    constraints = [TargetConstraints([Phrase("a", ((vocab - 3, vocab - 2),))]), None,
                   TargetConstraints(prefix=[vocab - 5, vocab - 4])]
    options = SearchOptions(beam=4, max_len_a=1.0, max_len_b=5)
    together = translator.search(batch, options, constraints)
    [[met]] = translator.search(batch[:1], options, constraints[:1])
    assert met.tokens == together[0][0].tokens and met.constraints_met == [True]
    assert together[2][0].tokens[:2] == [vocab - 5, vocab - 4]


def test_int8_translator_describes_the_cpu_and_kernel_it_computes_with(model_dir: Path) -> None:
    translator = load_translator(model_dir, "cpu", "int8", workers=1)
    precision = translator.describe()["precision"]
    assert precision == int8_scheme().describe()
    assert precision.startswith(f"int8 ({cpu_int8_support()}, ")
    assert not any(isinstance(m, nn.Linear) for m in translator.model.modules())


# --- where int8 is allowed, and how it is chosen ----------------------------------------------

def test_int8_resolves_for_decoding_on_a_cpu_and_auto_never_picks_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_precision("int8", CPU, training=False) is torch.int8
    for native in (True, False):
        monkeypatch.setattr(tfm.device, "cpu_has_native_bf16", lambda n=native: n)
        assert resolve_precision("auto", CPU, training=False) is not torch.int8


def test_int8_on_cuda_is_refused_in_one_line_pointing_to_bf16_and_fp16() -> None:
    with pytest.raises(UsageError) as refused:
        resolve_precision("int8", torch.device("cuda"), training=False)
    message = str(refused.value)
    assert "\n" not in message and "int8 is for CPUs" in message and "bf16 or fp16" in message


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_int8_training_is_refused_in_one_line(device: str) -> None:
    with pytest.raises(UsageError, match="int8 is for decoding") as refused:
        resolve_precision("int8", torch.device(device), training=True)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("flags", "support"), [
    ("fpu avx2 avx512f avx512_vnni amx_tile amx_int8", "AMX-INT8"),
    ("fpu avx2 avx512f avx512_vnni", "AVX-512 VNNI"),
    ("fpu avx2 avx_vnni", "AVX-VNNI"),
], ids=["xeon-amx", "avx512-vnni", "avx-vnni"])
def test_the_int8_instructions_are_read_from_the_cpu_flags(
        monkeypatch: pytest.MonkeyPatch, flags: str, support: str) -> None:
    monkeypatch.setattr(tfm.device, "cpu_flags", lambda: set(flags.split()))
    assert cpu_int8_support() == support


def test_without_vnni_the_cpu_is_named_by_torchs_vector_level(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfm.device, "cpu_flags", lambda: {"fpu", "avx2", "fma"})
    assert cpu_int8_support() == torch.backends.cpu.get_cpu_capability()


@pytest.mark.parametrize(("isa", "kernel", "levels"), [
    ("AVX2", "fbgemm", 63), ("AVX2", "oneDNN", 63), ("AVX512", "fbgemm", 63),
    ("AVX-VNNI", "fbgemm", 63), ("AVX-VNNI", "oneDNN", 127),
    ("AVX-512 VNNI", "fbgemm", 127), ("AMX-INT8", "oneDNN", 127)])
def test_inputs_get_8_bits_only_where_the_kernel_sums_products_without_saturating(
        monkeypatch: pytest.MonkeyPatch, isa: str, kernel: str, levels: int) -> None:
    monkeypatch.setattr(tfm.model.int8, "cpu_int8_support", lambda: isa)
    scheme = int8_scheme(kernel)
    assert scheme.input_levels == levels
    assert scheme.describe() == f"int8 ({isa}, {kernel}, {8 if levels == 127 else 7}-bit " \
                                "activations)"
