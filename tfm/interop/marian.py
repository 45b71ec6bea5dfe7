"""Export a tfm model directory to a Hugging Face MarianMT directory, which
``AutoModelForSeq2SeqLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load with no
network and no custom code.

The export needs only torch, safetensors and tokenizers (tfm's own dependencies); Transformers
is needed to *use* the result, not to write it. What it writes:

    config.json             MarianConfig: post-norm, the model's activation (ReLU unless it
                            was imported with another), embeddings scaled by sqrt(d_model)
    model.safetensors       the weights under Marian's names, the residual axis permuted;
                            final_logits_bias the model's output bias (zeros without one)
    generation_config.json  start from <s>, end at </s>, never emit <pad>/<unk>/<s>, the
                            model's beam size and length penalty
    tokenizer.json          tfm's tokenizer plus tfm's text normalisation and "$A </s>"
    tokenizer_config.json   a PreTrainedTokenizerFast (no sentencepiece needed)
    special_tokens_map.json
    tfm_export.json         what was exported, from which model, by which tfm

A model imported from MarianMT (tfm.interop.marian_import) has SentencePiece models instead
of a tfm tokenizer: its export is a MarianTokenizer directory again (source.spm, target.spm,
vocab.json, and target_vocab.json for separate vocabularies) under tfm's ids, which
``tfm import`` reads back as they are.

**Positions.** Both models add a sinusoidal table with the same frequencies, but tfm
interleaves it (sin at even dimensions, cos at odd ones) where Marian puts every sine first and
every cosine after. The network is equivariant to a permutation of its residual dimension (every
operation on it is either position-wise linear, or a LayerNorm, whose mean and variance do not
depend on the order), so the export permutes that axis in every tensor that touches it: rows of
the matrices that write to it (attention output, second FFN layer) and their biases, columns of
the matrices that read it (query/key/value projections, first FFN layer, output projection),
embedding columns, LayerNorm weights and biases. tfm's own layout is unchanged.

**Refused**, with one line, rather than exported wrong: pre-norm models (Marian is post-norm,
with no final LayerNorm), and models with separate source and target vocabularies (MarianMT
holds two embedding tables, but a fast tokenizer is one vocabulary: text could be encoded for
the encoder or decoded from the decoder, not both).

**Decoding differences** that remain (checked against transformers 5.24's generate):

- Greedy search gives tfm's tokens. Beam search keeps the same beams and scores finished
  hypotheses the same way (sum of log-probabilities, EOS included, divided by the number of
  generated tokens, EOS included, to the power ``length_penalty``), but it stops differently:
  Transformers waits for ``num_beams`` finished hypotheses, as tfm's ``--no-stop-early`` does
  (tfm's default ends a sentence once its best hypothesis has ended), and it bounds what a
  live beam could still score by its log-probability over its current length, where tfm
  divides by the length with EOS added. With ``length_penalty`` 0 no hypothesis can catch up
  with one that has ended, the rules agree, and beam search returns tfm's best hypothesis
  whether tfm stops early or not. With a length penalty the results can differ, mostly from
  tfm's default and rarely from its ``--no-stop-early`` (docs/BENCHMARKS.md has the counts).
- tfm bounds the output at ``max_len_a * source length + max_len_b`` tokens per sentence;
  ``generate`` has one ``max_length``/``max_new_tokens`` for the batch. The exported
  ``max_length`` is the model's own limit; pass ``max_new_tokens`` for a tighter one.
- At the length limit both force EOS, but Transformers scores the forced EOS as log-probability
  0 where tfm keeps its log-probability: beams cut off at the limit can rank differently.
- tfm's ``translate`` replaces line breaks inside a translation with spaces; ``decode`` of the
  exported tokenizer returns them as generated.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, normalizers, processors
from torch import Tensor

from tfm.config import ModelConfig
from tfm.data.text import removed_and_spaced_characters
from tfm.data.tokenizer import Vocabularies, segmenter_of
from tfm.errors import UsageError
from tfm.interop.common import load_source, staged_output, write_export_info
from tfm.interop.marian_layout import layer_names, permuted, residual_permutation
from tfm.model import Transformer
from tfm.model.layers import sinusoidal_positions
from tfm.model_info import ModelInfo
from tfm.special_tokens import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    UNK,
    UNK_ID,
)

FORMAT = "marian"
WEIGHTS_FILE = "model.safetensors"


def export_marian(model_dir: Path, output: Path, overwrite: bool = False) -> Path:
    """Write the model directory ``model_dir`` as a Hugging Face MarianMT directory at
    ``output`` (see the module docstring); returns ``output``. Nothing is written unless the
    whole export succeeds; an existing ``output`` is replaced only with ``overwrite``."""
    model_dir, output = Path(model_dir), Path(output)
    model, vocabs, info = load_source(model_dir, output, "the model directory being exported")
    check_exportable(info.model, vocabs)
    if info.language_marking is not None and info.language_marking.in_decoder:
        raise UsageError("cannot export a model whose target-language token is the decoder's "
                         "first token (--language-token) to MarianMT: a MarianMT decoder "
                         "starts from its one start token")
    with staged_output(output, overwrite) as stage:
        save_file(marian_state_dict(model), str(stage / WEIGHTS_FILE), metadata={"format": "pt"})
        _write_json(stage / "config.json", marian_config(info.model))
        _write_json(stage / "generation_config.json", generation_config(info))
        if segmenter_of(vocabs.src) is not None:
            write_sentencepiece_tokenizer(stage, vocabs, info)
        else:
            tokenizer = marian_tokenizer(vocabs.src)
            (stage / "tokenizer.json").write_text(tokenizer.to_str(pretty=True),
                                                  encoding="utf-8")
            _write_json(stage / "tokenizer_config.json", tokenizer_config(info.model))
        _write_json(stage / "special_tokens_map.json", _special_tokens())
        write_export_info(stage, FORMAT, model_dir, info)
    return output


def check_exportable(config: ModelConfig, vocabs: Vocabularies) -> None:
    """Refuse, in one line, what MarianMT cannot express."""
    if config.decoder_self_attention != "attention":
        raise UsageError("cannot export a model whose decoder has SSRU layers "
                         "(--decoder-self-attn ssru) to MarianMT: its decoder layers "
                         "have self-attention")
    if config.drop_residual_layer:
        raise UsageError("cannot export a model trained with --drop-residual-layer to "
                         "MarianMT: its encoder layers all have their residual connections")
    if config.norm_first:
        raise UsageError("cannot export a pre-norm model (norm_first) to MarianMT: Marian is "
                         "post-norm only, with no final LayerNorm")
    if not vocabs.joint and segmenter_of(vocabs.src) is None:
        raise UsageError("cannot export a model with separate source and target vocabularies "
                         "to MarianMT: its fast tokenizer holds one vocabulary; train with a "
                         "joint vocabulary to export this way")


# --- weights ---------------------------------------------------------------------------------

def marian_state_dict(model: Transformer) -> dict[str, Tensor]:
    """The model's weights under MarianMTModel's names, the residual axis permuted.

    Tied tensors are written once, under the name Marian ties the others to; a tensor tfm ties
    but Marian cannot (shared source/target embeddings with an untied output projection: Marian
    ties nothing without ``tie_word_embeddings``) is written under each of its names."""
    c = model.config
    perm = residual_permutation(c.d_model)

    def cols(t: Tensor) -> Tensor:  # reads the residual stream
        return t[:, perm]

    out: dict[str, Tensor] = {}
    state = model.state_dict()
    for tfm_name, marian_name, reads, writes in layer_names(c):
        out[f"{marian_name}.weight"], out[f"{marian_name}.bias"] = permuted(
            state[f"{tfm_name}.weight"].detach(), state[f"{tfm_name}.bias"].detach(), perm,
            reads, writes)

    # Marian's table is a function of the shape too; writing tfm's (permuted) makes the
    # exported model add exactly what tfm adds.
    positions = cols(sinusoidal_positions(c.max_positions, c.d_model))
    out["model.encoder.embed_positions.weight"] = positions
    out["model.decoder.embed_positions.weight"] = positions.clone()

    src = cols(model.src_embed.token.weight.detach())
    tgt = cols(model.tgt_embed.token.weight.detach())
    if c.share_embeddings and c.tie_output:
        out["model.shared.weight"] = src  # Marian ties both embeddings and lm_head to it
    elif c.tie_output:
        out["model.encoder.embed_tokens.weight"] = src
        out["model.decoder.embed_tokens.weight"] = tgt  # lm_head is tied to it
    else:
        if c.share_embeddings:
            out["model.shared.weight"] = src.clone()
        out["model.encoder.embed_tokens.weight"] = src
        out["model.decoder.embed_tokens.weight"] = tgt if not c.share_embeddings else src.clone()
        out["lm_head.weight"] = cols(model.output_proj.weight.detach())
    bias = model.output_bias
    out["final_logits_bias"] = (torch.zeros(1, c.tgt_vocab_size) if bias is None
                                else bias.detach().reshape(1, -1))
    return {k: v.float().contiguous() for k, v in out.items()}


# --- configuration ---------------------------------------------------------------------------

def marian_config(c: ModelConfig) -> dict[str, Any]:
    """config.json: a MarianConfig describing exactly tfm's architecture."""
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": c.src_vocab_size,
        "decoder_vocab_size": c.tgt_vocab_size,
        "d_model": c.d_model,
        "encoder_layers": c.encoder_layers,
        "decoder_layers": c.decoder_layers,
        "encoder_attention_heads": c.n_heads,
        "decoder_attention_heads": c.n_heads,
        "encoder_ffn_dim": c.d_ff,
        "decoder_ffn_dim": c.d_ff,
        "activation_function": c.activation,
        "max_position_embeddings": c.max_positions,
        "scale_embedding": True,
        "dropout": c.dropout,
        "attention_dropout": c.attention_dropout,
        "activation_dropout": c.activation_dropout,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "share_encoder_decoder_embeddings": c.share_embeddings,
        "tie_word_embeddings": c.tie_output,
        "pad_token_id": PAD_ID,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "decoder_start_token_id": BOS_ID,
        "forced_eos_token_id": EOS_ID,
        "is_encoder_decoder": True,
        "use_cache": True,
        "dtype": "float32",
    }


def generation_config(info: ModelInfo) -> dict[str, Any]:
    """generation_config.json: tfm's decoding as far as ``generate`` can express it (see the
    module docstring for what it cannot)."""
    g = info.generation
    config: dict[str, Any] = {
        "decoder_start_token_id": BOS_ID,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "forced_eos_token_id": EOS_ID,  # EOS at the length limit, as tfm forces it
        "suppress_tokens": [PAD_ID, UNK_ID, BOS_ID],  # never produced, as in tfm's search
        # the model's own limit: max_positions output tokens, EOS included, after <s>
        "max_length": info.model.max_positions + 1,
        "num_beams": g.beam,
        "do_sample": False,
    }
    if g.beam > 1:
        config["length_penalty"] = g.length_penalty
        config["early_stopping"] = False
    return config


def tokenizer_config(c: ModelConfig) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": c.max_positions,
        "padding_side": "right",
        "truncation_side": "right",
        "clean_up_tokenization_spaces": False,
        # As in tfm: "<s>" typed in a text is text, never the control token.
        "split_special_tokens": True,
        "model_input_names": ["input_ids", "attention_mask"],
        **_special_tokens(),
    }


def write_sentencepiece_tokenizer(stage: Path, vocabs: Vocabularies, info: ModelInfo) -> None:
    """MarianTokenizer's files for a model imported from MarianMT: its SentencePiece models
    and its vocabularies under tfm's ids."""
    for tok, name in ((vocabs.src, "source.spm"), (vocabs.tgt, "target.spm")):
        (stage / name).write_bytes(segmenter_of(tok).model.data)  # type: ignore[union-attr]

    def by_id(tok: Tokenizer) -> dict[str, int]:
        return dict(sorted(tok.get_vocab().items(), key=lambda item: item[1]))

    _write_json(stage / "vocab.json", by_id(vocabs.src))
    if not vocabs.joint:
        _write_json(stage / "target_vocab.json", by_id(vocabs.tgt))
    _write_json(stage / "tokenizer_config.json", {
        "tokenizer_class": "MarianTokenizer", "separate_vocabs": not vocabs.joint,
        "source_lang": info.src_lang, "target_lang": info.tgt_lang,
        "model_max_length": info.model.max_positions,
        "pad_token": PAD, "unk_token": UNK, "eos_token": EOS})


def _special_tokens() -> dict[str, str]:
    return {"pad_token": PAD, "unk_token": UNK, "bos_token": BOS, "eos_token": EOS}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --- tokenizer -------------------------------------------------------------------------------

def marian_tokenizer(tok: Tokenizer) -> Tokenizer:
    """A copy of tfm's tokenizer that does on its own what tfm does around it: normalise the
    text as tfm.data.text.normalize_text does (before the tokenizer's own NFC), end the source
    with </s> (and no <s>), and strip the decoded text."""
    invisible, whitespace = _character_classes()
    out = Tokenizer.from_str(tok.to_str())  # its special tokens are tfm's (load_tokenizer)
    steps = [normalizers.Replace(Regex(invisible), ""),
             normalizers.Replace(Regex(f"{whitespace}+"), " "),
             normalizers.Strip(left=True, right=True)]
    if out.normalizer is not None:
        steps.append(out.normalizer)
    out.normalizer = normalizers.Sequence(steps)
    out.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A $B {EOS}", special_tokens=[(EOS, EOS_ID)])
    # tfm's decode strips the text (byte-level BPE gives it a leading space); the byte-level
    # decoder returns one string, so this Replace sees the whole text.
    ends = f"\\A{whitespace}+|{whitespace}+\\z"
    if out.decoder is not None:
        out.decoder = decoders.Sequence([out.decoder, decoders.Replace(Regex(ends), "")])
    return out


@lru_cache(maxsize=1)
def _character_classes() -> tuple[str, str]:
    """Regex character classes (Oniguruma syntax, as the tokenizers library reads them) of the
    characters tfm's normalize_text removes and of those it treats as whitespace, read off
    normalize_text's own patterns so that the exported tokenizer follows it exactly."""
    invisible, whitespace = removed_and_spaced_characters()
    return _char_class(invisible), _char_class(whitespace)


def _char_class(codes: list[int]) -> str:
    """[\\x{a}-\\x{b}...] for sorted code points, consecutive ones as ranges."""
    parts = []
    start = prev = codes[0]
    for code in [*codes[1:], None]:
        if code is not None and code == prev + 1:
            prev = code
            continue
        parts.append(f"\\x{{{start:x}}}" if start == prev else f"\\x{{{start:x}}}-\\x{{{prev:x}}}")
        if code is not None:
            start = prev = code
    return "[" + "".join(parts) + "]"
