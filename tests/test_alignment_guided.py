"""Guided alignment: one cross-attention head trained towards word alignments (Garg et al.,
2019), recorded in the model's config, and the head alignments are read from at decoding."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tfm
from toy_languages import write_corpus

from tfm.config import ModelConfig, SearchOptions, TrainConfig
from tfm.data.batching import alignment_targets, pad_pairs
from tfm.data.lexical_alignment import LEXICON_FILE
from tfm.data.tokenizer import BOS_ID, EOS_ID
from tfm.decoding.search import greedy_search
from tfm.model import Transformer
from tfm.model.transformer import DecoderState
from tfm.model_info import ModelInfo
from tfm.training.loop import guided_model_config
from tfm.training.objective import guided_alignment_loss, label_smoothed_loss

VOCAB, HEADS = 20, 4


def tiny(alignment_layer: int | None, seed: int = 0, dropout: float = 0.0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32,
                                   n_heads=HEADS, encoder_layers=1, decoder_layers=3, d_ff=64,
                                   dropout=dropout, attention_dropout=dropout,
                                   alignment_layer=alignment_layer))


def reversed_copies(n: int, seed: int) -> tuple[list[list[int]], list[list[int]], list]:
    """Sources of random tokens, targets their reversal (another token for each), and the
    token alignments (source position, target position) that say so."""
    rng = np.random.default_rng(seed)
    sources, targets, links = [], [], []
    for _ in range(n):
        length = int(rng.integers(3, 8))
        src = [int(t) for t in rng.integers(4, VOCAB, length)]
        sources.append([*src, EOS_ID])
        targets.append([4 + (t - 4 + 3) % (VOCAB - 4) for t in reversed(src)])
        links.append(np.array([(length - 1 - j, j) for j in range(length)], dtype=np.int32))
    return sources, targets, links


def batch_of(n: int, seed: int):
    sources, targets, links = reversed_copies(n, seed)
    batch = pad_pairs(sources, targets)
    batch.alignment = alignment_targets(links, [0] * n, tuple(batch.tgt_out.shape),
                                        batch.src.size(1))
    return batch


def test_targets_put_each_label_on_its_aligned_source_tokens() -> None:
    links = [np.array([(0, 0), (1, 0), (2, 1)]), np.zeros((0, 2), dtype=np.int32)]
    got = alignment_targets(links, [1, 0], (2, 4), 4)
    # row 0 has one forced token before its labels: target token 0 is label column 1
    assert got[0, 1].tolist() == [0.5, 0.5, 0.0, 0.0]
    assert got[0, 2].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert got[0, 0].sum() == 0 and got[0, 3].sum() == 0  # unaligned labels: no target
    assert got[1].sum() == 0


def test_the_guided_loss_reaches_only_the_chosen_head() -> None:
    model = tiny(alignment_layer=1).train()
    batch = batch_of(8, seed=1)
    _, weights = model(batch.src, batch.tgt_in, batch.tgt_mask, alignment=True)
    guided_alignment_loss(weights, batch.alignment).backward()
    attn = model.decoder_layers[1].encoder_attn
    d_head = attn.d_head
    for proj in (attn.q_proj, attn.k_proj):
        grad = proj.weight.grad.view(HEADS, d_head, -1)
        assert grad[0].abs().sum() > 0
        assert torch.all(grad[1:] == 0)  # the other heads' projections: no gradient
    for name, p in model.decoder_layers[2].named_parameters():  # the layer above
        assert p.grad is None or torch.all(p.grad == 0), name


def head_accuracy(model: Transformer, batch) -> float:
    """How often the guided head's argmax is the aligned source token, over aligned labels."""
    model.eval()
    with torch.no_grad():
        _, weights = model(batch.src, batch.tgt_in, batch.tgt_mask, alignment=True)
    aligned = batch.alignment.sum(dim=2) > 0
    right = batch.alignment.argmax(dim=2) == weights.argmax(dim=2)
    return float(right[aligned].float().mean())


def train_a_little(weight: float, steps: int = 80) -> Transformer:
    model = tiny(alignment_layer=1, seed=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        batch = batch_of(32, seed=100 + step)
        model.train()
        logits, weights = model(batch.src, batch.tgt_in, batch.tgt_mask, alignment=True)
        loss = label_smoothed_loss(logits, batch.tgt_out[batch.tgt_mask], 0.1)[0]
        loss = loss + weight * guided_alignment_loss(weights, batch.alignment)
        optimizer.zero_grad()
        (loss / batch.n_tgt_tokens).backward()
        optimizer.step()
    return model


def test_guidance_pulls_the_head_towards_the_alignment() -> None:
    held_out = batch_of(64, seed=7)
    guided = head_accuracy(train_a_little(1.0), held_out)
    unguided = head_accuracy(train_a_little(0.0), held_out)
    assert guided > 0.8
    assert guided > unguided + 0.2


def test_returned_weights_are_the_distribution_before_attention_dropout() -> None:
    model = tiny(alignment_layer=0, dropout=0.5).train()
    batch = batch_of(4, seed=3)
    _, weights = model(batch.src, batch.tgt_in, batch.tgt_mask, alignment=True)
    real = batch.tgt_mask
    assert torch.allclose(weights.sum(dim=2)[real], torch.ones(int(real.sum())), atol=1e-5)


def test_a_guided_run_records_garg_s_layer() -> None:
    model = ModelConfig(decoder_layers=6)
    assert guided_model_config(model, TrainConfig()) is model
    assert guided_model_config(model, TrainConfig(guided_alignment_weight=0.05)
                               ).alignment_layer == 4
    assert guided_model_config(replace(model, decoder_layers=1),
                               TrainConfig(guided_alignment_weight=0.05)).alignment_layer == 0


def test_the_layer_is_saved_in_the_model_config_and_only_there_raises_the_format() -> None:
    plain = ModelInfo(model=ModelConfig()).to_json()
    assert "alignment_layer" not in plain["model"] and plain["format_version"] < 6
    guided = ModelInfo(model=ModelConfig(alignment_layer=4)).to_json()
    assert guided["format_version"] == 6
    read = ModelInfo.from_json(json.loads(json.dumps(guided)), "config.json")
    assert read.model.alignment_layer == 4


def test_decoding_reads_alignments_from_the_guided_head() -> None:
    model = tiny(alignment_layer=1).eval()
    src = batch_of(3, seed=4).src
    with torch.no_grad():
        results = greedy_search(model, src, SearchOptions(beam=1, max_len_b=6, attention=True))
        for i, hyps in enumerate(results):
            tokens = hyps[0].tokens
            if not tokens:
                continue
            tgt_in = torch.tensor([[BOS_ID, *tokens]])
            _, weights = model(src[i:i + 1], tgt_in, alignment=True)  # (1, T, S): the head
            got = torch.tensor(hyps[0].attention)
            assert torch.allclose(got, weights[0, :len(tokens)], atol=1e-5)


def decode_step_before(model: Transformer, tokens: torch.Tensor, state: DecoderState):
    """Transformer.decode_step as it was before guided alignment, verbatim: every layer
    computes its weights when asked, the last layer's are returned."""
    x = model.tgt_embed(tokens[:, None], offset=state.step)
    new_layers, weights = [], None
    for layer, cache in zip(model.decoder_layers, state.layers):
        x, new_cache, weights = layer(x, (cache.cross_k, cache.cross_v), None,
                                      state.memory_mask, cache, True, state.group)
        new_layers.append(new_cache)
    logits = model.logits(model.decoder_norm(x))[:, 0]
    new_state = DecoderState(state.memory_mask, new_layers, state.step + 1, state.group)
    return logits, new_state, weights[:, :, 0]


def test_a_model_without_the_layer_decodes_exactly_as_before() -> None:
    model = tiny(alignment_layer=None).eval()
    batch = batch_of(3, seed=5)
    with torch.no_grad():
        memory, mask = model.encode(batch.src)
        now = before = model.start_decoding(memory, mask)
        for step in range(batch.tgt_in.size(1)):
            tokens = batch.tgt_in[:, step]
            logits, now, weights = model.decode_step(tokens, now, need_weights=True)
            logits_before, before, weights_before = decode_step_before(model, tokens, before)
            assert torch.equal(logits, logits_before)
            assert torch.equal(weights, weights_before)  # all heads (B, H, S), bit for bit
            assert weights.size(1) == HEADS


def prepared_toy(root: Path, seed: int) -> Path:
    """300 toy aa -> cc pairs (cc reverses the word order) under ``root``, a tokenizer of
    theirs and the prepared dataset (``root/data``, returned), through the command line."""
    prefix = write_corpus(root / "corpus", "train", 300, seed=seed)
    for args in [("train-tokenizer", "--train", str(prefix), "-s", "aa", "-t", "cc",
                  "--vocab-size", "300", "-o", str(root / "tok.json")),
                 ("prepare", "--train", str(prefix), "--valid", str(prefix), "-s", "aa", "-t",
                  "cc", "--tokenizer", str(root / "tok.json"), "-o", str(root / "data"))]:
        result = tfm(*args)
        assert result.returncode == 0, result.stderr
    return root / "data"


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_toy(tmp_path_factory.mktemp("guided"), seed=1)


def train(data: Path, output: Path, *extra: str):
    return tfm("train", "--data", str(data), "--output", str(output), "--preset", "tiny",
               "--max-steps", "4", "--valid-every", "4", "--max-tokens", "512",
               "--precision", "fp32", *extra)


def test_a_guided_run_needs_tfm_align_first_then_saves_its_head(toy_data: Path,
                                                                 tmp_path: Path) -> None:
    refused = train(toy_data, tmp_path / "m0", "--guided-alignment", "0.05")
    assert refused.returncode != 0 and "tfm align" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert tfm("align", str(toy_data)).returncode == 0
    done = train(toy_data, tmp_path / "m1", "--guided-alignment", "0.05")
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "m1" / "config.json").read_text())
    layers = config["model"]["decoder_layers"]
    assert config["model"]["alignment_layer"] == max(layers - 2, 0)
    translated = tfm("translate", "--model", str(tmp_path / "m1"), "--alignments",
                     "--format", "jsonl", stdin="pa ki\n")
    assert translated.returncode == 0, translated.stderr
    assert "alignment" in json.loads(translated.stdout)
    # `tfm align` counted a lexicon of the corpus, which the model took along: it places a
    # document's inline tags.
    lexicon = (toy_data / LEXICON_FILE).read_bytes()
    assert (tmp_path / "m1" / LEXICON_FILE).read_bytes() == lexicon
    page = tmp_path / "page.html"
    page.write_text("<p>pa <b>ki</b> tu</p>\n", encoding="utf-8")
    tagged = tfm("translate", "--model", str(tmp_path / "m1"), "--input", str(page),
                 "--output", str(tmp_path / "out.html"))
    assert tagged.returncode == 0, tagged.stderr
    out = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert out.count("<b>") == 1 and out.count("</b>") == 1


@pytest.mark.parametrize("layer", [None, 1])
def test_a_ctranslate2_export_reads_alignments_where_tfm_does(layer: int | None) -> None:
    pytest.importorskip("ctranslate2")
    from tfm.interop.ctranslate2 import build_spec

    tokens = [f"t{i}" for i in range(VOCAB)]
    spec = build_spec(tiny(alignment_layer=layer), tokens, tokens)
    got = (int(spec.decoder.alignment_layer.numpy()), int(spec.decoder.alignment_heads.numpy()))
    assert got == ((-1, HEADS) if layer is None else (1, 1))
