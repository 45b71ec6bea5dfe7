"""Import a Hugging Face MarianMT directory (an OPUS-MT model from the hub, or what
``save_pretrained`` or ``tfm export --to marian`` wrote) as a tfm model directory.

What it reads, and nothing else (no network, no code):

    config.json                     MarianConfig
    model.safetensors               the weights (or pytorch_model.bin, read with
                                    torch.load(weights_only=True): a pickle that would run code
                                    is refused)
    source.spm, target.spm          the SentencePiece models of each side
    vocab.json, target_vocab.json   piece -> id (target_vocab.json: separate vocabularies)
    tokenizer.json, tfm_export.json instead of the four above, in tfm's own export
    generation_config.json          the beam size, if there
    tokenizer_config.json           the languages, if there

**Architecture.** MarianMT is tfm's post-norm Transformer: embeddings scaled by sqrt(d_model),
no embedding or final LayerNorm, static sinusoidal positions from 0 with no padding offset,
biased projections, a constant ``final_logits_bias`` on the logits (tfm's ``output_bias``, kept
fixed as transformers keeps it), an FFN activation from the config (relu, swish, gelu:
``ModelConfig.activation``). Marian's sinusoids put every sine before every cosine where tfm
interleaves them; the residual axis of every tensor is permuted back
(tfm.interop.marian_layout.residual_permutation, inverted), so that tfm's own table serves.

**Ids.** tfm's special ids are fixed (``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3).
OPUS-MT's layout is ``</s>`` 0, ``<unk>`` 1, the pieces, ``<pad>`` last, and decoding starts
from ``<pad>``. The import gives Marian's ``<pad>`` row to both tfm's ``<pad>`` and ``<s>``
(decoding from tfm's ``<s>`` is decoding from Marian's start), ``<unk>`` and ``</s>`` their tfm
ids, and the pieces the ids after, in Marian's order; embeddings, the output projection and the
bias are permuted alike. Marian's one ``<pad>`` entry in the softmax becomes tfm's ``<s>``;
tfm's ``<pad>`` gets the bias ``PAD_LOGIT_BIAS``, a probability of exactly 0, so the
distribution over every other token is Marian's. tfm's own exports (``<pad>`` 0, ``<s>`` 2,
``</s>`` 3, decoding from ``<s>``) come back with their ids as they are.

**Refused**, with one line, rather than imported wrong: a directory that is not a MarianMT
checkpoint, missing weights or tokenizer files, a pickle that would execute code, pre-norm or
otherwise extra LayerNorms, unscaled embeddings, learned or unknown positions, an activation
tfm does not have, different encoder and decoder sizes, special ids in neither layout, and
SentencePiece models tfm cannot read exactly (tfm.data.sentencepiece).
"""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from tokenizers import Tokenizer, models
from torch import Tensor

from tfm.checkpoint import save_model_dir
from tfm.config import ACTIVATION_NAMES, GenerationDefaults, ModelConfig
from tfm.data.sentencepiece import vocabulary_decoder
from tfm.data.tokenizer import Vocabularies, attach_segmenter, tokenizer_from_json
from tfm.errors import ModelError, UsageError
from tfm.interop.common import EXPORT_INFO_FILE, read_export_info, read_json, staged_output
from tfm.interop.marian_layout import layer_names, permuted, residual_permutation
from tfm.model import Transformer
from tfm.model.layers import sinusoidal_positions
from tfm.model_info import ModelInfo
from tfm.special_tokens import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, SPECIAL_TOKENS, UNK, UNK_ID

# The logit bias of tfm's <pad> in an import from OPUS-MT's layout: exp(-1e4) is 0 in every
# floating-point type, so <pad> takes no probability from Marian's tokens, and the bias is
# still finite, so label smoothing (which averages the log-probabilities of every token) stays
# finite when the model is fine-tuned.
PAD_LOGIT_BIAS = -1e4
# transformers' names of tfm's activations (silu is its other name of swish)
ACTIVATIONS = {**{name: name for name in ACTIVATION_NAMES}, "silu": "swish"}


def check_layers(config: dict[str, Any], directory: Path, default_activation: str,
                 family: str) -> str:
    """The tfm activation of a transformers config's FFN (``default_activation`` where it
    names none: the model type's), refused in one line where its embeddings are not scaled
    (as tfm's and ``family``'s are), where tfm has no such activation, or where its encoder
    and decoder differ in heads or FFN width (tfm's have one size)."""
    if config.get("scale_embedding", False) is not True:
        raise ModelError(f"{directory}: scale_embedding is not true; tfm scales embeddings "
                         f"by sqrt(d_model), as {family} does, so this model is refused")
    activation = config.get("activation_function", default_activation)
    if activation not in ACTIVATIONS:
        raise ModelError(f"{directory}: activation {activation!r} is not one tfm has "
                         f"({', '.join(ACTIVATIONS)})")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(a) != config.get(b):
            raise ModelError(f"{directory}: {a} ({config.get(a)}) differs from {b} "
                             f"({config.get(b)}); tfm's encoder and decoder have one size")
    return ACTIVATIONS[activation]


def import_marian(marian_dir: Path, output: Path, overwrite: bool = False) -> Path:
    """Write the MarianMT directory ``marian_dir`` as a tfm model directory ``output`` (see
    the module docstring); it appears whole or not at all. Returns ``output``."""
    marian_dir, output = Path(marian_dir), Path(output)
    if output.resolve() == marian_dir.resolve():
        raise UsageError("-o must name a new directory, not the MarianMT directory itself")
    config = read_marian_config(marian_dir)
    vocabs, maps = read_vocabularies(marian_dir, config)
    model_config = tfm_config(config, vocabs, maps)
    weights = read_weights(marian_dir)
    model = Transformer(model_config)
    model.load_state_dict(tfm_state_dict(weights, config, model_config, maps, marian_dir),
                          strict=True)
    model.eval()
    src_lang, tgt_lang = languages(marian_dir)
    info = ModelInfo(model=model_config, src_lang=src_lang, tgt_lang=tgt_lang,
                     generation=generation_defaults(marian_dir),
                     provenance={"imported_from": "marian", "source_model": marian_dir.name})
    with staged_output(output, overwrite) as stage:
        save_model_dir(stage, model, vocabs, info)
    return output


# --- configuration ---------------------------------------------------------------------------

def read_marian_config(marian_dir: Path) -> dict[str, Any]:
    """config.json, checked to describe a model tfm can hold."""
    if not marian_dir.is_dir():
        raise ModelError(f"{marian_dir}: no such directory (give a MarianMT directory, as "
                         "`huggingface-cli download` or save_pretrained writes it)")
    config = read_json(marian_dir / "config.json")
    if not isinstance(config, dict) or config.get("model_type") != "marian":
        raise ModelError(f"{marian_dir}: not a MarianMT checkpoint (no config.json with "
                         "model_type \"marian\")")
    for key, what in (("normalize_before", "pre-norm layers"),
                      ("normalize_embedding", "a LayerNorm on the embeddings"),
                      ("layernorm_embedding", "a LayerNorm on the embeddings"),
                      ("add_final_layer_norm", "a final LayerNorm")):
        if config.get(key):
            raise ModelError(f"{marian_dir}: {key} is set ({what}); tfm holds MarianMT's "
                             "post-norm layers only, so this model is refused")
    if config.get("static_position_embeddings", True) is not True:
        raise ModelError(f"{marian_dir}: learned position embeddings are not supported "
                         "(tfm's are MarianMT's static sinusoids)")
    check_layers(config, marian_dir, "gelu", "every OPUS-MT model")
    return config


def tfm_config(config: dict[str, Any], vocabs: Vocabularies, maps: dict[str, list[int]]
               ) -> ModelConfig:
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    try:
        return ModelConfig(
            src_vocab_size=len(maps["src"]), tgt_vocab_size=len(maps["tgt"]),
            d_model=config["d_model"], n_heads=config["encoder_attention_heads"],
            encoder_layers=config["encoder_layers"], decoder_layers=config["decoder_layers"],
            d_ff=config["encoder_ffn_dim"], dropout=float(config.get("dropout", 0.1)),
            attention_dropout=float(config.get("attention_dropout", 0.0)),
            activation_dropout=float(config.get("activation_dropout", 0.0)),
            max_positions=config.get("max_position_embeddings", 512), norm_first=False,
            share_embeddings=shared, tie_output=bool(config.get("tie_word_embeddings", True)),
            activation=ACTIVATIONS[config.get("activation_function", "gelu")],
            output_bias=True)
    except KeyError as e:
        raise ModelError(f"config.json has no {e.args[0]}") from e
    except UsageError as e:
        raise ModelError(f"config.json: {e}") from e


def generation_defaults(marian_dir: Path) -> GenerationDefaults:
    """tfm's defaults, with the checkpoint's beam size and length penalty if it has them."""
    g = read_json(marian_dir / "generation_config.json") or {}
    defaults = GenerationDefaults()
    if isinstance(g.get("num_beams"), int) and g["num_beams"] >= 1:
        defaults.beam = g["num_beams"]
    if isinstance(g.get("length_penalty"), (int, float)):
        defaults.length_penalty = float(g["length_penalty"])
    return defaults


def languages(marian_dir: Path) -> tuple[str | None, str | None]:
    info = read_export_info(marian_dir)
    if info is not None:
        return info.get("src_lang"), info.get("tgt_lang")
    t = read_json(marian_dir / "tokenizer_config.json") or {}
    return t.get("source_lang"), t.get("target_lang")


# --- vocabularies ----------------------------------------------------------------------------

def read_vocabularies(marian_dir: Path, config: dict[str, Any]
                      ) -> tuple[Vocabularies, dict[str, list[int]]]:
    """The tokenizers of both sides, and for each side the Marian id of every tfm id."""
    export = read_export_info(marian_dir)
    has_spm = (marian_dir / "source.spm").exists() or (marian_dir / "vocab.json").exists()
    if export is not None and export.get("format") == "marian" and not has_spm:
        return _tfm_export_vocabularies(marian_dir, config)
    files = ["source.spm", "target.spm", "vocab.json"]
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    if not shared:
        files.append("target_vocab.json")
    missing = [f for f in files if not (marian_dir / f).is_file()]
    if missing:
        raise ModelError(f"{marian_dir}: missing {', '.join(missing)} (a MarianMT tokenizer "
                         "needs source.spm, target.spm and vocab.json"
                         + (", and target_vocab.json for separate vocabularies)"
                            if not shared else ")"))
    src_vocab = _read_vocab(marian_dir / "vocab.json")
    tgt_vocab = src_vocab if shared else _read_vocab(marian_dir / "target_vocab.json")
    src_order = _tfm_order(src_vocab, marian_dir / "vocab.json", config, decoder=shared)
    tgt_order = src_order if shared else _tfm_order(
        tgt_vocab, marian_dir / "target_vocab.json", config, decoder=True)
    src_tok = _vocabulary(src_vocab, src_order)
    tgt_tok = _vocabulary(tgt_vocab, tgt_order) if not shared else _vocabulary(src_vocab,
                                                                               src_order)
    for tok, name in ((src_tok, "source.spm"), (tgt_tok, "target.spm")):
        attach_segmenter(tok, (marian_dir / name).read_bytes(), str(marian_dir / name))
    return Vocabularies(src_tok, tgt_tok, one_vocabulary=shared), {"src": src_order,
                                                                  "tgt": tgt_order}


def _read_vocab(path: Path) -> dict[str, int]:
    vocab = read_json(path)
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ModelError(f"{path}: not a vocabulary (a JSON object of piece -> id)")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ModelError(f"{path}: the ids are not 0..{len(vocab) - 1}, each once")
    return vocab


def _tfm_order(vocab: dict[str, int], path: Path, config: dict[str, Any], decoder: bool
               ) -> list[int]:
    """For each tfm id, the Marian id whose row it takes (see the module docstring)."""
    for token in (PAD, UNK, EOS):
        if token not in vocab:
            raise ModelError(f"{path}: no {token} entry; not a MarianMT vocabulary")
    pad, unk, eos = vocab[PAD], vocab[UNK], vocab[EOS]
    start = config.get("decoder_start_token_id", pad)
    if decoder and (config.get("pad_token_id") != pad or config.get("eos_token_id") != eos):
        raise ModelError(f"{path}: {PAD} is {pad} and {EOS} is {eos}, but config.json says "
                         f"{config.get('pad_token_id')} and {config.get('eos_token_id')}")
    tfm_layout = (pad, unk, eos) == (PAD_ID, UNK_ID, EOS_ID) and vocab.get(BOS) == BOS_ID
    if tfm_layout and (not decoder or start == BOS_ID):
        return list(range(len(vocab)))
    if BOS in vocab:
        raise ModelError(f"{path}: {BOS} is an ordinary entry (id {vocab[BOS]}) where tfm "
                         "needs it for the start of decoding; the special ids are in neither "
                         "OPUS-MT's layout nor tfm's")
    if decoder and start != pad:
        raise ModelError(f"{path}: decoding starts from id {start}, neither {PAD} (OPUS-MT) "
                         f"nor {BOS} (tfm); the special ids are in no layout tfm knows")
    special = {pad, unk, eos}
    rest = sorted(i for i in vocab.values() if i not in special)
    return [pad, unk, pad, eos, *rest]


def _vocabulary(vocab: dict[str, int], order: list[int]) -> Tokenizer:
    """tfm's vocabulary tokenizer: Marian's pieces under tfm's ids, SentencePiece's decoder."""
    pieces = {i: p for p, i in vocab.items()}
    tokens = list(SPECIAL_TOKENS) + [pieces[i] for i in order[len(SPECIAL_TOKENS):]]
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=UNK))
    tok.decoder = vocabulary_decoder()
    tok.encode_special_tokens = True
    return tok


def _tfm_export_vocabularies(marian_dir: Path, config: dict[str, Any]
                             ) -> tuple[Vocabularies, dict[str, list[int]]]:
    """tfm's own export: its tokenizer.json is tfm's tokenizer with tfm's normalisation, an
    appended </s> and a stripping decoder around it (tfm.interop.marian.marian_tokenizer)."""
    path = marian_dir / "tokenizer.json"
    data = read_json(path)
    if not isinstance(data, dict):
        raise ModelError(f"{marian_dir}: missing tokenizer.json ({EXPORT_INFO_FILE} says it is "
                         "tfm's own export, which has one)")
    try:
        normalizer = data["normalizer"]["normalizers"][-1]
        decoder = data["decoder"]["decoders"][0]
    except (KeyError, TypeError, IndexError) as e:
        raise ModelError(f"{path}: not the tokenizer tfm's export writes") from e
    data.update(normalizer=normalizer, decoder=decoder, post_processor=None)
    tok = tokenizer_from_json(json.dumps(data))
    for i, token in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(token) != i:
            raise ModelError(f"{path}: {token} is not id {i}; not a tfm export")
    if (config.get("pad_token_id"), config.get("eos_token_id"),
            config.get("decoder_start_token_id")) != (PAD_ID, EOS_ID, BOS_ID):
        raise ModelError(f"{marian_dir}/config.json: special ids other than tfm's export "
                         "writes")
    order = list(range(tok.get_vocab_size()))
    return Vocabularies.shared(tok), {"src": order, "tgt": order}


# --- weights ---------------------------------------------------------------------------------

def read_weights(marian_dir: Path) -> dict[str, Tensor]:
    """The checkpoint's tensors, from safetensors (preferred) or a pickle that torch loads
    without executing code."""
    st, pt = marian_dir / "model.safetensors", marian_dir / "pytorch_model.bin"
    if st.is_file():
        try:
            tensors = st_load(st.read_bytes())
        except (SafetensorError, ValueError, OSError) as e:
            raise ModelError(f"{st}: not a readable safetensors file ({e})") from e
    elif pt.is_file():
        try:
            with warnings.catch_warnings():  # (torch warns of pickle protocols it may not read)
                warnings.simplefilter("ignore")
                tensors = torch.load(pt, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            raise ModelError(f"{pt}: refused, it would execute code when loaded (only tensors "
                             "are read; convert it to safetensors with a tool you trust)") from e
        except Exception as e:  # corrupt files raise many types
            raise ModelError(f"{pt}: unreadable ({str(e).splitlines()[0][:200]})") from e
        if not isinstance(tensors, dict) or not all(isinstance(t, Tensor)
                                                    for t in tensors.values()):
            raise ModelError(f"{pt}: not a state dict of tensors")
    else:
        raise ModelError(f"{marian_dir}: no weights (model.safetensors or pytorch_model.bin)")
    return {(k if k.startswith("model.") or k in ("lm_head.weight", "final_logits_bias")
             else f"model.{k}"): v for k, v in tensors.items()}


def tfm_state_dict(w: dict[str, Tensor], config: dict[str, Any], c: ModelConfig,
                   maps: dict[str, list[int]], marian_dir: Path) -> dict[str, Tensor]:
    """tfm's state dict from Marian's tensors: names, the residual axis un-permuted, ids
    remapped (see the module docstring)."""
    inv = torch.argsort(residual_permutation(c.d_model))

    def get(name: str, *alternatives: str) -> Tensor:
        for key in (name, *alternatives):
            if key in w:
                return w[key].float()
        raise ModelError(f"{marian_dir}: the weights have no {name}")

    out: dict[str, Tensor] = {}
    for tfm_name, marian_name, reads, writes in layer_names(c):
        out[f"{tfm_name}.weight"], out[f"{tfm_name}.bias"] = permuted(
            get(f"{marian_name}.weight"), get(f"{marian_name}.bias"), inv, reads, writes)
    extra = [k for k in w if "layernorm_embedding" in k or k.startswith(
        ("model.encoder.layer_norm.", "model.decoder.layer_norm."))]
    if extra:
        raise ModelError(f"{marian_dir}: the weights have LayerNorms tfm's post-norm layers do "
                         f"not ({extra[0]}); refused")
    _check_positions(w, config, c, marian_dir)

    def rows(table: Tensor, order: list[int], pad_zero: bool) -> Tensor:
        t = table[:, inv][torch.tensor(order)]
        if pad_zero:
            t[PAD_ID] = 0.0  # tfm's padding row (Marian's <pad> serves as <s>)
        return t

    opus = maps["tgt"][PAD_ID] == maps["tgt"][BOS_ID]
    shared_key = ("model.shared.weight", "model.encoder.embed_tokens.weight")
    if c.share_embeddings:
        src = tgt = rows(get(*shared_key), maps["src"], opus)
        out["src_embed.token.weight"] = src
    else:
        src = rows(get("model.encoder.embed_tokens.weight", "model.shared.weight"),
                   maps["src"], maps["src"][PAD_ID] == maps["src"][BOS_ID])
        tgt = rows(get("model.decoder.embed_tokens.weight"), maps["tgt"], opus)
        out["src_embed.token.weight"], out["tgt_embed.token.weight"] = src, tgt
    out["tgt_embed.token.weight"] = tgt  # tied names are given the same tensor
    out["output_proj.weight"] = tgt if c.tie_output else get("lm_head.weight")[:, inv][
        torch.tensor(maps["tgt"])]
    vocab = len(maps["tgt"])
    if "final_logits_bias" in w:
        bias = w["final_logits_bias"].float().reshape(-1)[torch.tensor(maps["tgt"])]
    else:
        bias = torch.zeros(vocab)
    if opus:
        bias[PAD_ID] = PAD_LOGIT_BIAS
    out["output_bias"] = bias
    return out


def _check_positions(w: dict[str, Tensor], config: dict[str, Any], c: ModelConfig,
                     marian_dir: Path) -> None:
    """Stored positional tables (save_pretrained leaves them out) must be Marian's sinusoids."""
    expected = sinusoidal_positions(c.max_positions, c.d_model)[:, residual_permutation(
        c.d_model)]
    for side in ("encoder", "decoder"):
        table = w.get(f"model.{side}.embed_positions.weight")
        if table is not None and (table.shape != expected.shape or not torch.allclose(
                table.float(), expected, atol=1e-4)):
            raise ModelError(f"{marian_dir}: the {side}'s position embeddings are not MarianMT's "
                             "sinusoids (learned positions?); refused")

