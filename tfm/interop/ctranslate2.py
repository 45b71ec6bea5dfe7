"""Export a tfm model directory to CTranslate2, the fast C++ inference runtime.

The CTranslate2 model is built from tfm's own weights through CTranslate2's model specification
API (a Transformer encoder-decoder spec), not through its Marian or OpenNMT converters, whose
assumptions about padding and the decoder start token are not tfm's. Everything the spec
holds is written explicitly, so that CTranslate2 computes what tfm computes:

* the sinusoidal position table (tfm interleaves sin and cos), added after the token
  embeddings are scaled by sqrt(d_model);
* post-norm or pre-norm layers as the model is, with the final LayerNorm of pre-norm models;
  LayerNorm epsilon 1e-5 (PyTorch's); the feed-forward activation of the model (ReLU,
  swish or exact GELU, which CTranslate2 has as RELU, SWISH and GELU);
* q, k, v projections fused as CTranslate2 expects them (q+k+v for self-attention, k+v for
  cross-attention); the output projection with the model's output bias, if it has one;
  tied embeddings stored once;
* the special tokens: the source goes in as tfm's tokens (ending with ``</s>``, no ``<s>``),
  nothing is added to it, and decoding starts from ``<s>``.

The output directory holds CTranslate2's files (model.bin, config.json, the vocabulary),
the model's tokenizer file(s) and ``tfm_export.json`` (tfm.interop.common), which
``tfm translate`` / ``tfm eval`` read to decode the export with CTranslate2
(tfm.decoding.ctranslate2_engine). A model directory with a vocabulary shortlist
(tfm.data.shortlist) is exported with it as CTranslate2's vocabulary map ``vmap.txt``, which
``translate_batch(..., use_vmap=True)`` decodes with.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tfm.checkpoint import load_model_dir
from tfm.config import ModelConfig
from tfm.data.language_marks import LanguageMarking
from tfm.data.lexical_alignment import LEXICON_FILE
from tfm.data.shortlist import Shortlist, read_shortlist
from tfm.data.tokenizer import vocabulary_files
from tfm.errors import ModelError, UsageError
from tfm.extras import require
from tfm.interop.common import staged_output, write_export_info
from tfm.layout import ModelDir
from tfm.model import Transformer
from tfm.model.layers import position_table
from tfm.special_tokens import BOS, EOS, SPECIAL_TOKENS, UNK

FORMAT = "ctranslate2"
VMAP_FILE = "vmap.txt"  # the name CTranslate2 reads its vocabulary map from
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which tfm's layers use
# Weight types CTranslate2 stores (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES).
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16", "float32")
# The ModelConfig fields this export writes into the spec. A field added to ModelConfig later
# (another activation, learned positions, ...) is refused until the export learns it, rather
# than written into a model that would silently compute something else.
_EXPORTED_FIELDS = {
    "src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "encoder_layers",
    "decoder_layers", "d_ff", "max_positions", "norm_first", "share_embeddings", "tie_output",
    "activation", "output_bias", "positions",
    "drop_residual_layer",  # its default only: 0, every residual (check_supported)
    "decoder_self_attention",  # its default only: attention (check_supported)
    "alignment_layer",  # the decoder spec's alignment_layer and alignment_heads (_spec)
    # training-only: no effect on inference
    "dropout", "attention_dropout", "activation_dropout",
}


def export_ctranslate2(model_dir: Path, output: Path, quantization: str | None = None,
                       overwrite: bool = False) -> Path:
    """Write the CTranslate2 model of the tfm model directory ``model_dir`` to ``output``, with
    its tokenizer and tfm_export.json. ``quantization``: the type the weights are stored in
    (int8, int16, float16, ...; None: float32). ``output`` appears whole or not at all.
    Returns ``output``."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UsageError(f"--quantization {quantization}: choose one of "
                         f"{', '.join(QUANTIZATIONS)}")
    require("ctranslate2", "export")
    model_dir, output = Path(model_dir), Path(output)
    if output.resolve() == model_dir.resolve():
        raise UsageError("-o must name a new directory, not the model directory itself")
    with staged_output(output, overwrite) as stage:
        model, vocabs, info = load_model_dir(model_dir)
        check_supported(info.model, model_dir)
        src_tokens, tgt_tokens = vocabulary_tokens(vocabs.src), vocabulary_tokens(vocabs.tgt)
        spec = build_spec(model, src_tokens, tgt_tokens, decoder_start_token(info))
        spec.optimize(quantization=quantization)  # aliases tied weights, quantizes
        spec.save(str(stage))
        shortlist_file = ModelDir(model_dir).shortlist
        if shortlist_file.is_file():
            vmap = vocabulary_map(read_shortlist(shortlist_file, vocabs), src_tokens,
                                  tgt_tokens)
            (stage / VMAP_FILE).write_text(vmap, encoding="utf-8")
        for path in vocabulary_files(ModelDir(model_dir).tokenizer):
            shutil.copyfile(path, stage / path.name)
        if (model_dir / LEXICON_FILE).is_file():  # it places documents' tags there too
            shutil.copyfile(model_dir / LEXICON_FILE, stage / LEXICON_FILE)
        write_export_info(stage, FORMAT, model_dir, info,
                          quantization=quantization or "float32")
    return output


def vocabulary_tokens(tok: Any) -> list[str]:
    """The tokens of a tokenizer in id order: CTranslate2's vocabulary, so that token strings
    map to the same ids in both."""
    return [tok.id_to_token(i) for i in range(tok.get_vocab_size())]


def vocabulary_map(shortlist: Shortlist, src_tokens: list[str], tgt_tokens: list[str]) -> str:
    """The shortlist as CTranslate2's vocabulary map: a line per source token, ``token<TAB>
    target tokens separated by spaces``, the first with an empty source for the frequent
    tokens, always candidates (CTranslate2 adds its special tokens itself). A token holding
    whitespace cannot be written there and is left out."""
    def writable(token: str | None) -> bool:
        return bool(token) and not any(c.isspace() for c in token)

    def joined(ids: list[int]) -> str:
        return " ".join(tgt_tokens[i] for i in ids if i >= 0 and writable(tgt_tokens[i]))

    lines = [f"\t{joined(shortlist.frequent.tolist())}\n"]
    for token, targets in zip(src_tokens, shortlist.per_source.tolist()):
        if writable(token) and joined(targets):
            lines.append(f"{token}\t{joined(targets)}\n")
    return "".join(lines)


def check_supported(config: ModelConfig, model_dir: Path) -> None:
    """Refuse a model whose architecture the export cannot write faithfully."""
    from dataclasses import asdict

    if config.decoder_self_attention != "attention":
        raise ModelError(f"{model_dir}: cannot export a model whose decoder has SSRU layers "
                         "(--decoder-self-attn ssru) to CTranslate2: it runs "
                         "self-attention decoders only; translate it with tfm")
    unknown = sorted(set(asdict(config)) - _EXPORTED_FIELDS)
    if config.drop_residual_layer:  # CTranslate2's encoder layers all have their residuals
        unknown.append("drop_residual_layer")
    if unknown:
        raise ModelError(f"{model_dir}: the CTranslate2 export does not support this "
                         f"architecture (model options {', '.join(unknown)})")


def decoder_start_token(info: Any) -> str:
    """The token every decoder of the model starts from (``LanguageMarking.decoder_start``:
    a model of language codes' target code follows it, as a target prefix)."""
    return SPECIAL_TOKENS[(info.language_marking or LanguageMarking()).decoder_start]


def build_spec(model: Transformer, src_tokens: list[str], tgt_tokens: list[str],
               decoder_start: str = BOS) -> Any:
    """The validated, not yet quantized ctranslate2 TransformerSpec of ``model``, decoding
    from ``decoder_start``."""
    ct2_specs = require("ctranslate2.specs", "export")
    c = model.config
    activation = getattr(ct2_specs.common_spec.Activation, {"relu": "RELU", "swish": "SWISH",
                                                        "gelu": "GELU"}[c.activation])
    spec_module = ct2_specs.transformer_spec
    encoder = spec_module.TransformerEncoderSpec(c.encoder_layers, c.n_heads,
                                                 pre_norm=c.norm_first, activation=activation)
    # Attention returned for alignments, as in tfm: the last layer's, averaged over all heads,
    # or the guided layer's first head (ModelConfig.alignment_layer).
    guided = c.alignment_layer is not None
    decoder = spec_module.TransformerDecoderSpec(
        c.decoder_layers, c.n_heads, pre_norm=c.norm_first, activation=activation,
        alignment_layer=c.alignment_layer if guided else -1,
        alignment_heads=1 if guided else c.n_heads)
    spec = spec_module.TransformerSpec(encoder, decoder)
    positions = _array(position_table(c))  # (P, D)

    encoder.embeddings[0].weight = _array(model.src_embed.token.weight)
    encoder.scale_embeddings = True  # token * sqrt(d_model), then + position
    encoder.position_encodings.encodings = positions
    for layer_spec, layer in zip(encoder.layer, model.encoder_layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.final_layer_norm)

    decoder.embeddings.weight = _array(model.tgt_embed.token.weight)
    decoder.scale_embeddings = True
    decoder.position_encodings.encodings = positions
    decoder.projection.weight = _array(model.output_proj.weight)  # (V, D)
    if model.output_bias is not None:
        decoder.projection.bias = _array(model.output_bias)
    for layer_spec, layer in zip(decoder.layer, model.decoder_layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm)
        _cross_attention(layer_spec.attention, layer.encoder_attn, layer.encoder_attn_layer_norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.final_layer_norm)
    if c.norm_first:  # pre-norm: the last residual sum is normalised once at the end
        _layer_norm(encoder.layer_norm, model.encoder_norm)
        _layer_norm(decoder.layer_norm, model.decoder_norm)

    config = spec.config
    config.unk_token, config.bos_token, config.eos_token = UNK, BOS, EOS
    config.decoder_start_token = decoder_start  # as in tfm
    config.add_source_bos = False  # tfm's source ids already end with </s> and have no <s>
    config.add_source_eos = False
    config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    try:
        spec.validate()
    except ValueError as e:  # a bug in this module rather than a user error
        raise ModelError(f"the CTranslate2 model spec is incomplete ({e})") from e
    return spec


def _array(tensor: torch.Tensor) -> Any:
    return tensor.detach().to("cpu", torch.float32).contiguous().numpy().copy()


def _linear(spec: Any, *linears: nn.Linear) -> None:
    """One linear layer of the spec from one or several (fused along the output) of tfm's."""
    spec.weight = _array(torch.cat([lin.weight for lin in linears], dim=0))
    if all(lin.bias is not None for lin in linears):
        spec.bias = _array(torch.cat([lin.bias for lin in linears], dim=0))


def _layer_norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _self_attention(spec: Any, attn: nn.Module, norm: nn.LayerNorm) -> None:
    _layer_norm(spec.layer_norm, norm)
    _linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
    _linear(spec.linear[1], attn.out_proj)


def _cross_attention(spec: Any, attn: nn.Module, norm: nn.LayerNorm) -> None:
    _layer_norm(spec.layer_norm, norm)
    _linear(spec.linear[0], attn.q_proj)
    _linear(spec.linear[1], attn.k_proj, attn.v_proj)
    _linear(spec.linear[2], attn.out_proj)


def _ffn(spec: Any, ffn: nn.Module, norm: nn.LayerNorm) -> None:
    _layer_norm(spec.layer_norm, norm)
    _linear(spec.linear_0, ffn.fc1)
    _linear(spec.linear_1, ffn.fc2)
