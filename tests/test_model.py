"""Specifications of the Transformer model: embeddings, masks, attention, caching, sizes.

Every test builds a small model with fixed random weights (dropout 0, eval mode) and checks
a property the model must have whatever its weights are.
"""

from __future__ import annotations

import math

import pytest
import torch

from tfm.config import ModelConfig, model_config_from_preset
from tfm.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tfm.model import Transformer
from tfm.model.attention import (
    attention,
    causal_mask,
    decoder_self_attention_mask,
    padding_mask,
)
from tfm.model.layers import sinusoidal_positions
from tfm.model.transformer import count_parameters

VOCAB = 20


def make_model(seed: int = 0, norm_first: bool = False, double: bool = False,
               **overrides) -> Transformer:
    torch.manual_seed(seed)
    values = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32, n_heads=4,
                  encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0,
                  norm_first=norm_first, max_positions=64)
    values.update(overrides)
    model = Transformer(ModelConfig(**values)).eval()
    return model.double() if double else model


def random_tokens(*shape: int, low: int = 4, high: int = VOCAB) -> torch.Tensor:
    """Ids of real (non-special) tokens."""
    return torch.randint(low, high, shape)


def source(length: int) -> torch.Tensor:
    """A source sentence of ``length`` ids (EOS included): real tokens then EOS."""
    return torch.cat([random_tokens(length - 1), torch.tensor([EOS_ID])])


def target_in(length: int) -> torch.Tensor:
    """A decoder input of ``length`` ids: BOS then real tokens."""
    return torch.cat([torch.tensor([BOS_ID]), random_tokens(length - 1)])


def teacher_forced(model: Transformer, tgt_in: torch.Tensor, memory: torch.Tensor,
                   memory_mask: torch.Tensor, need_weights: bool = False):
    """Logits (B, T, V) at every target position at once, as training computes them, and the
    last layer's cross-attention (B, H, T, S) when asked: what incremental decoding must
    reproduce."""
    hidden, weights = model.decode_hidden(tgt_in, memory, memory_mask, need_weights)
    return model.logits(hidden), weights


def pad_stack(rows: list[torch.Tensor], length: int | None = None) -> torch.Tensor:
    length = length or max(r.numel() for r in rows)
    out = torch.full((len(rows), length), PAD_ID, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r
    return out


# --- embeddings -------------------------------------------------------------------------------


def test_positional_encoding_matches_the_formula():
    torch.manual_seed(0)
    d = 16
    table = sinusoidal_positions(60, d)
    assert table.shape == (60, d)
    for pos in (0, 1, 2, 7, 33, 59):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_embeddings_are_scaled_token_embedding_plus_positional_encoding():
    model = make_model(double=True)
    d = model.config.d_model
    tokens = torch.tensor([[BOS_ID, 5, 9, 17, 4], [BOS_ID, 6, 6, PAD_ID, PAD_ID]])
    pe = torch.tensor([[math.sin(p / 10000 ** (2 * (j // 2) / d)) if j % 2 == 0
                        else math.cos(p / 10000 ** (2 * (j // 2) / d)) for j in range(d)]
                       for p in range(10)], dtype=torch.float64)
    weight = model.tgt_embed.token.weight
    expected = weight[tokens] * math.sqrt(d) + pe[:5]
    torch.testing.assert_close(model.tgt_embed(tokens), expected, atol=1e-6, rtol=0)
    # With an offset (incremental decoding) the positions start there.
    expected = weight[tokens[:, 2:4]] * math.sqrt(d) + pe[6:8]
    torch.testing.assert_close(model.tgt_embed(tokens[:, 2:4], offset=6), expected,
                               atol=1e-6, rtol=0)
    # The pad row starts at zero: padding embeds to the positional encoding alone.
    assert torch.all(weight[PAD_ID] == 0)


def test_embeddings_reject_positions_beyond_max_positions():
    model = make_model(max_positions=8)
    model.tgt_embed(torch.full((1, 8), 5))
    with pytest.raises(ValueError, match="max_positions"):
        model.tgt_embed(torch.full((1, 3), 5), offset=6)


# --- masks ------------------------------------------------------------------------------------


def test_padding_mask_is_true_on_real_tokens_with_broadcast_shape():
    tokens = torch.tensor([[7, 8, 3, 0, 0], [5, 3, 0, 0, 0], [4, 4, 4, 4, 3]])
    mask = padding_mask(tokens, PAD_ID)
    assert mask.shape == (3, 1, 1, 5)
    assert mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [
        [True, True, True, False, False],
        [True, True, False, False, False],
        [True, True, True, True, True],
    ]


def test_causal_mask_is_lower_triangular():
    mask = causal_mask(5)
    assert mask.shape == (5, 5)
    for t in range(5):
        for s in range(5):
            assert mask[t, s].item() == (s <= t)


def test_decoder_self_attention_mask_combines_causal_and_padding():
    tokens = torch.tensor([[BOS_ID, 5, 6, 0], [BOS_ID, 7, 0, 0]])
    mask = decoder_self_attention_mask(tokens, PAD_ID)
    assert mask.shape == (2, 1, 4, 4)
    for b in range(2):
        for t in range(4):
            for s in range(4):
                assert mask[b, 0, t, s].item() == (s <= t and tokens[b, s].item() != PAD_ID)


# --- causality and padding --------------------------------------------------------------------


def test_decoder_output_at_a_position_ignores_later_target_tokens():
    model = make_model(double=True)
    torch.manual_seed(1)
    src = torch.stack([source(7), source(7)])
    tgt = torch.stack([target_in(8), target_in(8)])
    with torch.no_grad():
        base = model(src, tgt)
        for t in range(tgt.size(1)):
            changed = tgt.clone()
            # A different real token at every position after t.
            changed[:, t + 1:] = (tgt[:, t + 1:] - 4 + 1) % (VOCAB - 4) + 4
            logits = model(src, changed)
            torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], atol=1e-12, rtol=0)
            if t + 1 < tgt.size(1):
                # The changed tokens do matter where they are visible.
                assert (logits[:, t + 1] - base[:, t + 1]).abs().max() > 1e-3


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_logits_do_not_depend_on_padding_or_on_other_sentences(norm_first):
    model = make_model(norm_first=norm_first)
    torch.manual_seed(2)
    srcs = [source(15), source(4), source(11)]  # the short one is padded to ~4x its length
    tgts = [target_in(12), target_in(3), target_in(9)]
    src, tgt = pad_stack(srcs), pad_stack(tgts)
    with torch.no_grad():
        batch = model(src, tgt)
        for i, (s, t) in enumerate(zip(srcs, tgts)):
            alone = model(s[None], t[None])[0]
            torch.testing.assert_close(batch[i, : t.numel()], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_and_decoder_outputs_are_layer_normalised(norm_first):
    # Post-norm ends every layer with a LayerNorm; pre-norm needs a final one on each side.
    # (At initialisation LayerNorm is the plain standardisation: weight 1, bias 0.)
    model = make_model(norm_first=norm_first, double=True)
    torch.manual_seed(11)
    src = pad_stack([source(6), source(4)])
    tgt = pad_stack([target_in(5), target_in(3)])
    seen = []
    model.output_proj.register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
    with torch.no_grad():
        memory, _ = model.encode(src)
        model(src, tgt)
    for x in (memory, seen[0]):
        torch.testing.assert_close(x.mean(-1), torch.zeros(x.shape[:-1], dtype=x.dtype),
                                   atol=1e-6, rtol=0)
        torch.testing.assert_close(x.var(-1, unbiased=False),
                                   torch.ones(x.shape[:-1], dtype=x.dtype), atol=1e-3, rtol=0)


# --- attention --------------------------------------------------------------------------------


def test_padded_keys_receive_exactly_zero_attention_weight():
    torch.manual_seed(3)
    q = torch.randn(2, 4, 3, 8)
    k = torch.randn(2, 4, 6, 8)
    v = torch.randn(2, 4, 6, 8)
    keys = torch.tensor([[5, 6, 7, 3, 0, 0], [5, 3, 0, 0, 0, 0]])
    mask = padding_mask(keys, PAD_ID)
    out, weights = attention(q, k, v, mask, need_weights=True)
    assert weights.shape == (2, 4, 3, 6)
    assert torch.all(weights.masked_select(~mask.expand_as(weights)) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 3))
    torch.testing.assert_close(out, weights @ v)


def test_cross_attention_weights_of_the_model_skip_padded_source_positions():
    model = make_model()
    torch.manual_seed(4)
    src = pad_stack([source(9), source(4)])
    tgt = pad_stack([target_in(5), target_in(5)])
    src_pad = (src == PAD_ID)[:, None, None, :]  # (B, 1, 1, S)
    with torch.no_grad():
        memory, memory_mask = model.encode(src)
        _, weights = model.decode_hidden(tgt, memory, memory_mask, need_weights=True)
        assert weights.shape == (2, model.config.n_heads, 5, 9)
        assert torch.all(weights.masked_select(src_pad.expand_as(weights)) == 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, model.config.n_heads, 5))
        # The same from the incremental decoder.
        state = model.start_decoding(memory, memory_mask)
        _, _, step_weights = model.decode_step(tgt[:, 0], state, need_weights=True)
        assert step_weights.shape == (2, model.config.n_heads, 9)
        torch.testing.assert_close(step_weights, weights[:, :, 0])
        assert torch.all(step_weights.masked_select(src_pad[:, :, 0].expand_as(step_weights))
                         == 0)


@pytest.mark.parametrize("mask_kind", ["padding", "causal", "decoder"])
def test_fused_and_explicit_attention_agree(mask_kind):
    torch.manual_seed(5)
    b, h, t, dh = 2, 4, 6, 8
    q, k, v = (torch.randn(b, h, t, dh, dtype=torch.float64) for _ in range(3))
    tokens = torch.tensor([[5, 6, 7, 8, 3, 0], [BOS_ID, 5, 3, 0, 0, 0]])
    mask = {"padding": padding_mask(tokens, PAD_ID),
            "causal": causal_mask(t),
            "decoder": decoder_self_attention_mask(tokens, PAD_ID)}[mask_kind]
    fast, none = attention(q, k, v, mask)
    assert none is None
    explicit, _ = attention(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(fast, explicit, atol=1e-6, rtol=0)


def test_attention_on_cuda_never_uses_cudnns_kernel_and_leaves_torchs_flags_as_they_were():
    from tfm.model.attention import attention_kernels

    flags = torch.backends.cuda
    before = (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled(),
              flags.mem_efficient_sdp_enabled(), flags.math_sdp_enabled())
    with attention_kernels(torch.device("cuda")):
        assert not flags.cudnn_sdp_enabled()
        assert flags.flash_sdp_enabled() and flags.mem_efficient_sdp_enabled()
        assert flags.math_sdp_enabled()
    with attention_kernels(torch.device("cpu")):  # CPU: torch's own choice
        assert flags.cudnn_sdp_enabled() == before[0]
    assert (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled(),
            flags.mem_efficient_sdp_enabled(), flags.math_sdp_enabled()) == before


def test_model_logits_are_the_same_with_and_without_attention_weights():
    model = make_model(double=True)
    torch.manual_seed(6)
    src = pad_stack([source(8), source(3)])
    tgt = pad_stack([target_in(6), target_in(2)])
    with torch.no_grad():
        memory, memory_mask = model.encode(src)
        fast, _ = teacher_forced(model, tgt, memory, memory_mask)
        explicit, _ = teacher_forced(model, tgt, memory, memory_mask, need_weights=True)
    torch.testing.assert_close(fast, explicit, atol=1e-6, rtol=0)


# --- layers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_layers_wrap_each_sublayer_in_the_papers_residual_connection(norm_first):
    """Post-norm: x <- LayerNorm(x + Sublayer(x)); pre-norm: x <- x + Sublayer(LayerNorm(x)),
    for the encoder's self-attention and FFN, and the decoder's masked self-attention,
    cross-attention and FFN (dropout is off)."""
    model = make_model(norm_first=norm_first, double=True)
    torch.manual_seed(11)
    src = pad_stack([source(7), source(4)])
    tgt = torch.stack([target_in(5) for _ in range(2)])
    memory = torch.randn(2, src.size(1), 32, dtype=torch.float64)
    x = torch.randn(2, tgt.size(1), 32, dtype=torch.float64)

    def around(x, sublayer, norm):
        return x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))

    def attend(attn, mask, keys=None):
        return lambda h: attn(h, attn.project_kv(h if keys is None else keys), mask)[0]

    src_mask = padding_mask(src, PAD_ID)
    self_mask = decoder_self_attention_mask(tgt, PAD_ID)
    enc, dec = model.encoder_layers[0], model.decoder_layers[0]
    with torch.no_grad():
        h = around(memory, attend(enc.self_attn, src_mask), enc.self_attn_layer_norm)
        expected = around(h, enc.ffn, enc.final_layer_norm)
        torch.testing.assert_close(enc(memory, src_mask), expected, atol=1e-12, rtol=0)

        h = around(x, attend(dec.self_attn, self_mask), dec.self_attn_layer_norm)
        h = around(h, attend(dec.encoder_attn, src_mask, memory), dec.encoder_attn_layer_norm)
        expected = around(h, dec.ffn, dec.final_layer_norm)
        out, cache, weights = dec(x, dec.encoder_attn.project_kv(memory), self_mask, src_mask)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
        assert cache is None and weights is None


# --- incremental decoding ---------------------------------------------------------------------


def decode_incrementally(model, state, tokens: torch.Tensor, start: int = 0):
    """Feed tokens[:, start:] one position at a time -> (logits (B, T', V), final state)."""
    out = []
    for t in range(start, tokens.size(1)):
        logits, state, _ = model.decode_step(tokens[:, t], state)
        out.append(logits)
    return torch.stack(out, 1), state


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_cached_decoding_matches_the_full_forward_pass(norm_first):
    model = make_model(norm_first=norm_first, double=True)
    torch.manual_seed(7)
    src = pad_stack([source(9), source(3), source(6)])
    tgt = torch.stack([target_in(7) for _ in range(3)])
    with torch.no_grad():
        full = model(src, tgt)
        state = model.start_decoding(*model.encode(src))
        steps, state = decode_incrementally(model, state, tgt)
    assert state.step == tgt.size(1)
    torch.testing.assert_close(steps, full, atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    "perm", [[2, 1, 0], [0, 0, 2], [1, 2], [2, 2, 2, 0]],
    ids=["reverse", "duplicate-and-drop", "drop-first", "beam-like"])
def test_reordered_cache_continues_like_the_reordered_full_forward_pass(perm):
    model = make_model(double=True)
    torch.manual_seed(8)
    src = pad_stack([source(9), source(3), source(6)])
    prefix_len, total = 3, 7
    tgt = torch.stack([target_in(prefix_len) for _ in range(3)])
    index = torch.tensor(perm)
    # After reordering, every row continues with its own tokens (duplicates diverge).
    new_tgt = torch.cat([tgt[index], random_tokens(len(perm), total - prefix_len)], dim=1)
    with torch.no_grad():
        state = model.start_decoding(*model.encode(src))
        _, state = decode_incrementally(model, state, tgt)
        state = state.index_select(index)
        assert state.batch_size == len(perm)
        assert state.step == prefix_len
        steps, _ = decode_incrementally(model, state, new_tgt, start=prefix_len)
        full = model(src[index], new_tgt)
    torch.testing.assert_close(steps, full[:, prefix_len:], atol=1e-10, rtol=0)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "with-weights"])
def test_beams_sharing_a_sentence_decode_like_copies_of_it(need_weights):
    """Grouped decoding (k rows per sentence over one copy of its encoder output), reordered
    within sentences and pruned like beam search, equals the full pass over repeated
    sentences."""
    model = make_model(double=True)
    torch.manual_seed(10)
    src = pad_stack([source(9), source(3), source(6)])
    k, prefix_len, total = 3, 3, 6
    repeated = src.repeat_interleave(k, dim=0)  # (3k, S)
    tgt = torch.stack([target_in(prefix_len) for _ in range(3 * k)])
    # Keep sentences 2 and 0 (drop 1), beams shuffled and duplicated inside each sentence.
    index = torch.tensor([2 * k + 1, 2 * k + 1, 2 * k + 0, 0 * k + 2, 0 * k + 0, 0 * k + 0])
    new_tgt = torch.cat([tgt[index], random_tokens(len(index), total - prefix_len)], dim=1)
    with torch.no_grad():
        state = model.start_decoding(*model.encode(src), group=k)
        assert state.batch_size == 3 * k
        assert state.layers[0].cross_k.size(0) == 3  # one copy per sentence
        out = []
        for t in range(prefix_len):
            logits, state, weights = model.decode_step(tgt[:, t], state, need_weights)
            out.append(logits)
        state = state.index_select(index)
        assert state.layers[0].cross_k.size(0) == 2
        for t in range(prefix_len, total):
            logits, state, step_weights = model.decode_step(new_tgt[:, t], state, need_weights)
            out.append(logits)
        full, full_weights = teacher_forced(model, new_tgt, *model.encode(repeated[index]),
                                            need_weights=need_weights)
        before = model(repeated, tgt)
    torch.testing.assert_close(torch.stack(out[:prefix_len], 1), before, atol=1e-10, rtol=0)
    torch.testing.assert_close(torch.stack(out[prefix_len:], 1), full[:, prefix_len:],
                               atol=1e-10, rtol=0)
    if need_weights:  # (rows, H, S) of the last step, the same as the full pass's last row
        torch.testing.assert_close(step_weights, full_weights[:, :, -1], atol=1e-10, rtol=0)


def test_cross_attention_keys_and_values_are_projected_once_per_sentence(monkeypatch):
    model = make_model()
    calls = {"project_kv": 0, "k_proj": 0, "v_proj": 0}
    for layer in model.decoder_layers:
        attn = layer.encoder_attn
        original = attn.project_kv

        def counted(memory, original=original):
            calls["project_kv"] += 1
            return original(memory)

        monkeypatch.setattr(attn, "project_kv", counted)
        for name in ("k_proj", "v_proj"):
            getattr(attn, name).register_forward_hook(
                lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    torch.manual_seed(9)
    src = pad_stack([source(6), source(4)])
    n_layers = len(model.decoder_layers)
    with torch.no_grad():
        state = model.start_decoding(*model.encode(src))
        assert calls == {"project_kv": n_layers, "k_proj": n_layers, "v_proj": n_layers}
        tokens = torch.full((2,), BOS_ID)
        for _ in range(6):
            logits, state, _ = model.decode_step(tokens, state)
            tokens = logits.argmax(-1)
    assert calls == {"project_kv": n_layers, "k_proj": n_layers, "v_proj": n_layers}


# --- parameters -------------------------------------------------------------------------------


def _base_parameter_count(vocab: int, embeddings: int) -> int:
    """The paper's base model with ``embeddings`` vocab x 512 matrices (1 when the source
    embedding, target embedding and output projection are one tensor, 3 when none are shared).

    Encoder layer: self-attention 4 * (512*512 + 512) (W_Q, W_K, W_V, W_O with biases),
    FFN 512*2048 + 2048 + 2048*512 + 512, two LayerNorms 2 * (2*512).
    Decoder layer: two attention blocks, the FFN, three LayerNorms.
    The output projection has no bias. Post-norm: no final LayerNorms.
    """
    d, d_ff = 512, 2048
    attn = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attn + ffn + 2 * norm
    decoder_layer = 2 * attn + ffn + 3 * norm
    return embeddings * vocab * d + 6 * encoder_layer + 6 * decoder_layer


def test_base_preset_has_the_papers_parameter_count():
    torch.manual_seed(0)
    config = model_config_from_preset("base", src_vocab_size=37000, tgt_vocab_size=37000)
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        model = Transformer(config)
    assert _base_parameter_count(37000, 1) == 63_082_496
    assert count_parameters(model) == 63_082_496
    # One tensor serves as source embedding, target embedding and output projection.
    assert model.output_proj.weight is model.tgt_embed.token.weight
    assert model.src_embed.token.weight is model.tgt_embed.token.weight
    assert model.output_proj.bias is None


@pytest.mark.parametrize("share, tie, matrices", [
    (True, True, 1), (False, True, 2), (True, False, 2), (False, False, 3)])
def test_untying_embeddings_adds_one_vocabulary_matrix_each(share, tie, matrices):
    torch.manual_seed(0)
    config = model_config_from_preset("base", src_vocab_size=37000, tgt_vocab_size=37000,
                                      share_embeddings=share, tie_output=tie)
    with torch.device("meta"):
        model = Transformer(config)
    assert count_parameters(model) == _base_parameter_count(37000, matrices)
    assert (model.src_embed.token.weight is model.tgt_embed.token.weight) == share
    assert (model.output_proj.weight is model.tgt_embed.token.weight) == tie


def test_tied_output_projection_follows_the_embedding():
    model = make_model()
    with torch.no_grad():
        model.tgt_embed.token.weight[7].add_(1.0)
    assert torch.equal(model.output_proj.weight[7], model.tgt_embed.token.weight[7])


def test_padding_embedding_row_gets_no_gradient_from_lookups():
    # Untied output: the pad row is then used by embedding lookups only.
    model = make_model(tie_output=False)
    model.train()
    torch.manual_seed(10)
    src = pad_stack([source(7), source(3)])
    tgt = pad_stack([target_in(5), target_in(2)])
    out = pad_stack([torch.cat([t[1:], torch.tensor([EOS_ID])]) for t in
                     (tgt[0, :5], tgt[1, :2])], 5)
    logits = model(src, tgt)
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), out, ignore_index=PAD_ID)
    loss.backward()
    grad = model.src_embed.token.weight.grad
    assert grad is not None and grad[5:].abs().sum() > 0
    assert torch.all(grad[PAD_ID] == 0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.step()
    assert torch.all(model.src_embed.token.weight[PAD_ID] == 0)


def test_dropout_zeroes_a_fraction_p_scales_the_rest_and_backpropagates_through_its_mask():
    from tfm.model.dropout import Dropout

    torch.manual_seed(0)
    x = torch.rand(400, 500) + 0.5  # no zeros of its own
    x.requires_grad_()
    drop = Dropout(0.3)
    torch.manual_seed(1)
    y = drop(x)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - 0.3) < 0.005
    assert torch.allclose(y[kept], x[kept] / 0.7)
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)  # the forward pass's mask, not a new one
    assert torch.allclose(x.grad[kept], torch.full_like(x.grad[kept], 1 / 0.7))
    torch.manual_seed(1)
    assert torch.equal(drop(x.detach()) != 0, kept)  # the mask comes from torch's seed
    drop.eval()
    assert drop(x) is x
    assert torch.equal(Dropout(0.0).train()(x), x)
