"""Export a tfm model of NLLB-200's or M2M100's kind (imported by tfm.interop.m2m100_import,
and fine-tuned or not) to a Hugging Face M2M100 directory, which
``M2M100ForConditionalGeneration.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load
with no network and no custom code, and ``tfm import`` reads back as it was.

The export needs only torch, safetensors and tokenizers; Transformers is needed to *use* the
result. What it writes:

    config.json             M2M100Config: the model's sizes, fairseq's special ids, layer drop 0
    model.safetensors       the weights under transformers' names, fairseq's ids
                            (tfm.interop.m2m100_import.FAIRSEQ_ORDER undone)
    generation_config.json  decoding from </s>, the model's beam size and length penalty,
                            early_stopping (tfm's --no-stop-early: the same hypotheses)
    tokenizer.json          NLLB: the tokenizer under fairseq's ids, its codes as added tokens
    vocab.json,             M2M100: the vocabulary under fairseq's ids and the SentencePiece
    sentencepiece.bpe.model model that cuts text for it
    tokenizer_config.json   NllbTokenizer (legacy_behaviour as imported) or M2M100Tokenizer
    tfm_export.json         what was exported, from which model, by which tfm

``generate(..., forced_bos_token_id=tokenizer.convert_tokens_to_ids(code))`` gives tfm's
translations (tests/test_import_m2m100.py), with the one difference of every export: at the
length limit tfm ends a translation with </s> where ``generate`` stops without one.

**Refused**, with one line: a model that is not of this kind (tfm's own models have other
positions or no language codes: export them to MarianMT or CTranslate2), and an M2M100 model
whose codes are not one of M2M100Tokenizer's lists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor

from tfm.data.tokenizer import Vocabularies, segmenter_of
from tfm.errors import UsageError
from tfm.interop.common import load_source, staged_output, write_export_info
from tfm.interop.m2m100_import import FAIRSEQ_ORDER, FAIRSEQ_SPECIALS, M2M100_CODES
from tfm.layout import WEIGHTS_FILE
from tfm.model import Transformer
from tfm.model_info import ModelInfo

FORMAT = "m2m100"


def export_m2m100(model_dir: Path, output: Path, overwrite: bool = False) -> Path:
    """``model_dir`` (a model of language codes) as the M2M100 directory ``output`` that
    transformers loads (the module docstring says what it holds), written whole or not at all,
    over an existing one only with ``overwrite``. Returns ``output``."""
    model_dir, output = Path(model_dir), Path(output)
    model, vocabs, info = load_source(model_dir, output, "the model directory being exported")
    check_exportable(info, vocabs)
    with staged_output(output, overwrite) as stage:
        save_file(m2m100_state_dict(model), str(stage / WEIGHTS_FILE),
                  metadata={"format": "pt"})
        _write_json(stage / "config.json", m2m100_config(info))
        _write_json(stage / "generation_config.json", generation_config(info))
        if segmenter_of(vocabs.src) is not None:
            _write_m2m100_tokenizer(stage, vocabs, info)
        else:
            _write_nllb_tokenizer(stage, vocabs, info)
        write_export_info(stage, FORMAT, model_dir, info)
    return output


def check_exportable(info: ModelInfo, vocabs: Vocabularies) -> None:
    c, marking = info.model, info.language_marking
    if not (c.positions == "fairseq" and c.norm_first and c.share_embeddings and c.tie_output
            and not c.output_bias and marking is not None
            and marking.by_codes):
        raise UsageError("only a model of NLLB-200's or M2M100's kind (imported with `tfm "
                         "import`, fine-tuned or not) exports to M2M100; export this one "
                         "--to marian or --to ctranslate2")
    if segmenter_of(vocabs.src) is not None and _code_list(info) is None:
        raise UsageError("this M2M100 model's language codes are not one of M2M100Tokenizer's "
                         f"lists ({', '.join(M2M100_CODES)}), which it cannot express")


def _code_list(info: ModelInfo) -> str | None:
    codes = tuple(info.language_marking.codes)  # type: ignore[union-attr]
    return next((name for name, listed in M2M100_CODES.items() if tuple(listed) == codes), None)


# --- weights ---------------------------------------------------------------------------------

def hf_name(name: str) -> str:
    """transformers' name of a tfm parameter (tfm.interop.m2m100_import.tfm_name undone)."""
    parts = name.split(".")
    if parts[0] in ("encoder_norm", "decoder_norm"):
        return f"model.{parts[0].split('_')[0]}.layer_norm.{parts[1]}"
    side = parts[0].split("_")[0]  # encoder_layers -> encoder
    rest = [p for p in parts[2:] if p != "ffn"]
    return ".".join(["model", side, "layers", parts[1], *rest])


def fairseq_rows(table: Tensor) -> Tensor:
    """(V, D) rows from tfm's ids back to fairseq's."""
    order = torch.tensor(list(FAIRSEQ_ORDER) + list(range(len(FAIRSEQ_ORDER), table.size(0))))
    out = torch.empty_like(table)
    out[order] = table
    return out


def m2m100_state_dict(model: Transformer) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name in ("src_embed.token.weight", "tgt_embed.token.weight", "output_proj.weight"):
            continue
        out[hf_name(name)] = tensor.detach().float().contiguous()
    # One tensor, stored once: transformers ties the other names to model.shared.
    out["model.shared.weight"] = fairseq_rows(model.src_embed.token.weight.detach().float())
    return out


def m2m100_config(info: ModelInfo) -> dict[str, Any]:
    c = info.model
    activation = {"swish": "silu"}.get(c.activation, c.activation)
    return {
        "architectures": ["M2M100ForConditionalGeneration"], "model_type": "m2m_100",
        "vocab_size": c.tgt_vocab_size, "d_model": c.d_model,
        "encoder_layers": c.encoder_layers, "decoder_layers": c.decoder_layers,
        "encoder_attention_heads": c.n_heads, "decoder_attention_heads": c.n_heads,
        "encoder_ffn_dim": c.d_ff, "decoder_ffn_dim": c.d_ff,
        "max_position_embeddings": c.max_positions, "activation_function": activation,
        "dropout": c.dropout, "attention_dropout": c.attention_dropout,
        "activation_dropout": c.activation_dropout, "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0, "scale_embedding": True, "tie_word_embeddings": True,
        "bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2,
        "is_encoder_decoder": True, "use_cache": True,
    }


def generation_config(info: ModelInfo) -> dict[str, Any]:
    g = info.generation
    return {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2,
            "decoder_start_token_id": 2, "num_beams": g.beam,
            "length_penalty": g.length_penalty, "early_stopping": True,
            "max_length": info.model.max_positions, "do_sample": False}


# --- tokenizers ------------------------------------------------------------------------------

def _fairseq_id(i: int) -> int:
    return FAIRSEQ_ORDER[i] if i < len(FAIRSEQ_ORDER) else i


def _write_nllb_tokenizer(stage: Path, vocabs: Vocabularies, info: ModelInfo) -> None:
    data = json.loads(vocabs.src.to_str())
    vocab = data["model"]["vocab"]
    for token in FAIRSEQ_SPECIALS:
        vocab[token] = _fairseq_id(vocab[token])
    for entry in data["added_tokens"]:
        if entry["content"] in FAIRSEQ_SPECIALS:
            entry["id"] = _fairseq_id(entry["id"])
    data["added_tokens"].sort(key=lambda e: e["id"])
    (stage / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False),
                                          encoding="utf-8")
    marking = info.language_marking
    _write_json(stage / "tokenizer_config.json", {
        "tokenizer_class": "NllbTokenizer", **_specials(), "mask_token": "<mask>",
        "sep_token": "</s>", "cls_token": "<s>",
        "extra_special_tokens": list(marking.codes),  # type: ignore[union-attr]
        "legacy_behaviour": marking.source_code == "suffix",  # type: ignore[union-attr]
        "model_max_length": info.model.max_positions})


def _write_m2m100_tokenizer(stage: Path, vocabs: Vocabularies, info: ModelInfo) -> None:
    tok = vocabs.src
    codes = info.language_marking.codes  # type: ignore[union-attr]
    first_code = tok.token_to_id(info.language_marking.token(codes[0]))  # type: ignore
    entries = sorted(((t, i) for t, i in tok.get_vocab().items() if i < first_code),
                     key=lambda item: _fairseq_id(item[1]))
    _write_json(stage / "vocab.json", {t: _fairseq_id(i) for t, i in entries})
    (stage / "sentencepiece.bpe.model").write_bytes(
        segmenter_of(tok).model.data)  # type: ignore[union-attr]
    _write_json(stage / "tokenizer_config.json", {
        "tokenizer_class": "M2M100Tokenizer", **_specials(), "sep_token": "</s>",
        "language_codes": _code_list(info),
        "num_madeup_words": tok.get_vocab_size() - first_code - len(codes),
        "model_max_length": info.model.max_positions})


def _specials() -> dict[str, str]:
    return {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
