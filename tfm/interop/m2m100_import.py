"""Import a Hugging Face M2M100 directory (``model_type: m2m_100``: NLLB-200 and M2M100, as
the hub ships them, ``save_pretrained`` writes them, or a hub cache holds them) as a tfm model
directory.

What it reads, and nothing else (no network, no code):

    config.json                 M2M100Config
    model.safetensors           the weights (or pytorch_model.bin, read with
                                torch.load(weights_only=True): a pickle that would run code is
                                refused)
    tokenizer.json              NLLB: the tokenizer, with its language codes as added tokens
    sentencepiece.bpe.model     M2M100: the SentencePiece BPE model that cuts text into pieces,
    vocab.json                  and piece -> id
    tokenizer_config.json       NLLB's legacy_behaviour, M2M100's language_codes list name
    special_tokens_map.json     the language codes, where tokenizer_config.json has none
    generation_config.json      the beam size, if there

**Architecture.** fairseq's pre-norm Transformer: LayerNorm before every sub-layer and once at
the end of each stack (tfm's ``norm_first``), no LayerNorm on the embeddings, embeddings scaled
by sqrt(d_model), biased projections, ReLU, the output projection tied to the embeddings with
no bias, and fairseq's sinusoidal positions (``ModelConfig.positions = "fairseq"``: sines then
cosines, counted from 2). Layer drop is a training-time regulariser only; fine-tuning in tfm
runs without it.

**Ids.** fairseq's dictionary is ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, then the
pieces, the language codes and ``<mask>`` (or ``<mask>`` first: transformers 5 builds it so),
and for M2M100 eight ``madeupword`` rows. tfm's special ids are ``<pad>`` 0, ``<unk>`` 1,
``<s>`` 2, ``</s>`` 3: the import swaps the first four rows (``FAIRSEQ_ORDER``) and keeps every
other id, so the codes' ids are the checkpoint's own. Rows no tokenizer entry names get a
placeholder token, so that the distribution over the others is the checkpoint's.

**Direction.** The source is ``[src_code] X </s>`` (NLLB; ``X </s> [src_code]`` with
``legacy_behaviour``) or ``__en__ X </s>`` (M2M100); the decoder starts from ``</s>`` and the
target code is forced after it (tfm.data.language_marks, ``language_codes``).

**Refused**, with one line, rather than imported wrong: a directory that is not such a
checkpoint (NLLB-MoE and other model types named), missing weights or tokenizer files, a pickle
that would execute code, unscaled embeddings, an activation tfm does not have, different
encoder and decoder sizes, weights tfm's model has no place for, special ids in another layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, models
from torch import Tensor

from tfm.checkpoint import save_model_dir
from tfm.config import ModelConfig
from tfm.data.language_marks import LanguageMarking
from tfm.data.sentencepiece import vocabulary_decoder
from tfm.data.tokenizer import Vocabularies, attach_segmenter, tokenizer_from_json
from tfm.errors import ModelError, UsageError
from tfm.interop.common import check_new_output, read_json, staged_output
from tfm.interop.marian_import import (
    ACTIVATIONS,
    check_layers,
    generation_defaults,
    read_weights,
)
from tfm.model import Transformer
from tfm.model_info import ModelInfo
from tfm.special_tokens import BOS, EOS, PAD, SPECIAL_TOKENS, UNK

# fairseq's special tokens, in its ids' order.
FAIRSEQ_SPECIALS = (BOS, PAD, EOS, UNK)
# For each tfm id of a special token, the fairseq id whose row it takes: tfm's <pad> 0 is
# fairseq's 1, <unk> 1 is 3, <s> 2 is 0, </s> 3 is 2. Every other id is the same in both.
FAIRSEQ_ORDER = tuple(FAIRSEQ_SPECIALS.index(t) for t in SPECIAL_TOKENS)
# transformers' names of tfm's activations
# M2M100's language codes, in the order of their ids after vocab.json's entries, by the name
# tokenizer_config.json gives the list ("language_codes"): fairseq's, as M2M100Tokenizer has
# them.
M2M100_CODES = {
    "m2m100": (  # noqa: SIM905
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg "
        "mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw "
        "ta th tl tn tr uk ur uz vi wo xh yi yo zh zu").split(),
    "wmt21": "en ha is ja cs ru zh de".split(),  # noqa: SIM905
}
M2M100_SPELLING = "__{}__"


def import_m2m100(source: Path, output: Path, overwrite: bool = False) -> Path:
    """Write the M2M100/NLLB directory ``source`` as a tfm model directory ``output`` (see
    the module docstring); it appears whole or not at all. Returns ``output``."""
    source, output = snapshot(Path(source)), Path(output)
    check_new_output(source, output, "the checkpoint being imported")
    config = read_m2m100_config(source)
    vocabs, marking, family = read_tokenizer(source, config)
    model_config = tfm_config(config, vocabs.src.get_vocab_size())
    model = Transformer(model_config)
    state = tfm_state_dict(read_weights(source), model_config, source)
    missing = [k for k in model.state_dict() if k not in state]
    if missing:
        raise ModelError(f"{source}: the weights have no {missing[0]} (as transformers names it: "
                         f"model.{missing[0]}); {len(missing)} tensors missing in all")
    model.load_state_dict(state, strict=True)
    model.eval()
    info = ModelInfo(model=model_config, generation=generation_defaults(source),
                     provenance={"imported_from": family, "source_model": source.name},
                     language_marking=marking)
    with staged_output(output, overwrite) as stage:
        save_model_dir(stage, model, vocabs, info)
    return output


def snapshot(directory: Path) -> Path:
    """A hub cache's model directory (``models--org--name``, with refs/ and snapshots/) as its
    snapshot of ``refs/main`` (or its only one); any other directory as it is."""
    snapshots = directory / "snapshots"
    if not (snapshots.is_dir() and not (directory / "config.json").exists()):
        return directory
    ref = directory / "refs" / "main"
    if ref.is_file():
        chosen = snapshots / ref.read_text(encoding="utf-8").strip()
        if chosen.is_dir():
            return chosen
    found = sorted(p for p in snapshots.iterdir() if p.is_dir())
    if len(found) == 1:
        return found[0]
    raise ModelError(f"{directory}: a hub cache with {len(found)} snapshots and no refs/main; "
                     "give the snapshot's directory")


# --- configuration ---------------------------------------------------------------------------

def read_m2m100_config(directory: Path) -> dict[str, Any]:
    """config.json, checked to describe a model tfm can hold."""
    if not directory.is_dir():
        raise ModelError(f"{directory}: no such directory (give an NLLB-200 or M2M100 "
                         "directory, as `huggingface-cli download` or save_pretrained writes "
                         "it)")
    config = read_json(directory / "config.json")
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind != "m2m_100":
        raise ModelError(f"{directory}: not an NLLB-200 or M2M100 checkpoint (no config.json "
                         "with model_type \"m2m_100\")")
    check_layers(config, directory, "relu", "every NLLB-200 and M2M100 model")
    ids = (config.get("bos_token_id", 0), config.get("pad_token_id", 1),
           config.get("eos_token_id", 2), config.get("decoder_start_token_id", 2))
    if ids != (0, 1, 2, 2):
        raise ModelError(f"{directory}: special ids bos/pad/eos/decoder_start {ids} are not "
                         "fairseq's (0, 1, 2, 2); refused rather than imported wrong")
    if config.get("tie_word_embeddings", True) is not True:
        raise ModelError(f"{directory}: tie_word_embeddings is false; tfm holds NLLB-200's and "
                         "M2M100's tied output projection only")
    return config


def tfm_config(config: dict[str, Any], vocab_size: int) -> ModelConfig:
    try:
        rows = int(config["vocab_size"])
        if vocab_size != rows:
            raise ModelError(f"config.json: vocab_size {rows}, but the tokenizer has "
                             f"{vocab_size} entries")
        return ModelConfig(
            src_vocab_size=rows, tgt_vocab_size=rows, d_model=config["d_model"],
            n_heads=config["encoder_attention_heads"], encoder_layers=config["encoder_layers"],
            decoder_layers=config["decoder_layers"], d_ff=config["encoder_ffn_dim"],
            dropout=float(config.get("dropout", 0.1)),
            attention_dropout=float(config.get("attention_dropout", 0.0)),
            activation_dropout=float(config.get("activation_dropout", 0.0)),
            max_positions=int(config.get("max_position_embeddings", 1024)), norm_first=True,
            share_embeddings=True, tie_output=True,
            activation=ACTIVATIONS[config.get("activation_function", "relu")],
            output_bias=False, positions="fairseq")
    except KeyError as e:
        raise ModelError(f"config.json has no {e.args[0]}") from e
    except (UsageError, TypeError, ValueError) as e:
        raise ModelError(f"config.json: {e}") from e


# --- tokenizers ------------------------------------------------------------------------------

def read_tokenizer(directory: Path, config: dict[str, Any]
                   ) -> tuple[Vocabularies, LanguageMarking, str]:
    """The tokenizer under tfm's special ids, padded to the model's rows, its language
    marking, and the family ("nllb", "m2m100") it was read as."""
    rows = int(config.get("vocab_size", 0))
    tok_config = read_json(directory / "tokenizer_config.json") or {}
    if (directory / "tokenizer.json").is_file():
        tok, marking = _nllb_tokenizer(directory, tok_config, rows)
        return Vocabularies.shared(tok), marking, "nllb"
    missing = [f for f in ("sentencepiece.bpe.model", "vocab.json")
               if not (directory / f).is_file()]
    if missing:
        raise ModelError(f"{directory}: missing tokenizer files: tokenizer.json (NLLB-200), or "
                         f"{' and '.join(missing)} (M2M100)")
    tok, marking = _m2m100_tokenizer(directory, tok_config, rows)
    # One vocabulary, the same SentencePiece model cutting both sides.
    return Vocabularies(tok, tok, one_vocabulary=True), marking, "m2m100"


def _listed_codes(directory: Path, tok_config: dict[str, Any]) -> list[str]:
    """The language codes the tokenizer files list (tokenizer_config.json's
    extra_special_tokens or additional_special_tokens, else special_tokens_map.json's)."""
    sources = [tok_config, read_json(directory / "special_tokens_map.json") or {}]
    for data in sources:
        for key in ("extra_special_tokens", "additional_special_tokens"):
            listed = data.get(key) if isinstance(data, dict) else None
            if isinstance(listed, list):
                names = [t.get("content") if isinstance(t, dict) else t for t in listed]
                names = [t for t in names if isinstance(t, str) and t not in FAIRSEQ_SPECIALS]
                if names:
                    return names
    return []


def _nllb_tokenizer(directory: Path, tok_config: dict[str, Any], rows: int
                    ) -> tuple[Tokenizer, LanguageMarking]:
    """NLLB's tokenizer.json with the four special ids swapped to tfm's, its post-processor
    (which adds the language code and </s>: tfm adds them by id) removed."""
    path = directory / "tokenizer.json"
    data = read_json(path)
    try:
        vocab = data["model"]["vocab"]
        added = data["added_tokens"]
        if data["model"]["type"] != "BPE" or not isinstance(vocab, dict):
            raise TypeError
    except (KeyError, TypeError) as e:
        raise ModelError(f"{path}: not an NLLB tokenizer (a BPE tokenizer.json)") from e
    for i, token in enumerate(FAIRSEQ_SPECIALS):
        if vocab.get(token) != i:
            raise ModelError(f"{path}: {token} is not id {i} (fairseq's layout); refused")
    swap = {f: t for t, f in enumerate(FAIRSEQ_ORDER)}  # fairseq id -> tfm id
    for token in FAIRSEQ_SPECIALS:
        vocab[token] = swap[vocab[token]]
    for entry in added:
        if entry.get("id") in swap and entry.get("content") in FAIRSEQ_SPECIALS:
            entry["id"] = swap[entry["id"]]
    data["post_processor"] = None
    ids = {**vocab, **{e["content"]: e["id"] for e in added}}
    specials = {e["content"] for e in added if e.get("special")}
    mask = tok_config.get("mask_token", "<mask>")
    mask = mask.get("content") if isinstance(mask, dict) else mask
    listed = _listed_codes(directory, tok_config)
    codes = [c for c in listed if c in ids] or sorted(
        (t for t in specials if t not in FAIRSEQ_SPECIALS and t != mask), key=ids.get)
    if not codes:
        raise ModelError(f"{path}: no language codes among its tokens; not an NLLB tokenizer")
    tok = tokenizer_from_json(json.dumps(data))
    _placeholders(tok, rows, path)
    legacy = bool(tok_config.get("legacy_behaviour", False))
    marking = LanguageMarking("language_codes", tuple(codes), "{}",
                              "suffix" if legacy else "prefix")
    return tok, marking


def _m2m100_tokenizer(directory: Path, tok_config: dict[str, Any], rows: int
                      ) -> tuple[Tokenizer, LanguageMarking]:
    """M2M100's vocab.json as tfm's vocabulary (specials swapped, the language codes after its
    entries, madeup words to the model's rows), cut by its SentencePiece BPE model."""
    path = directory / "vocab.json"
    vocab = read_json(path)
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()) \
            or sorted(vocab.values()) != list(range(len(vocab))):
        raise ModelError(f"{path}: not a vocabulary (a JSON object of piece -> ids 0..n-1)")
    for i, token in enumerate(FAIRSEQ_SPECIALS):
        if vocab.get(token) != i:
            raise ModelError(f"{path}: {token} is not id {i} (fairseq's layout); refused")
    name = tok_config.get("language_codes", "m2m100")
    if name not in M2M100_CODES:
        raise ModelError(f"{directory}/tokenizer_config.json: language_codes {name!r} is not a "
                         f"list tfm knows ({', '.join(M2M100_CODES)})")
    codes = M2M100_CODES[name]
    pieces = [p for p, _ in sorted(vocab.items(), key=lambda item: item[1])]
    tokens = list(SPECIAL_TOKENS) + pieces[len(SPECIAL_TOKENS):]
    tokens += [M2M100_SPELLING.format(c) for c in codes]
    if len(tokens) > rows:
        raise ModelError(f"{directory}: vocab.json and {len(codes)} language codes make "
                         f"{len(tokens)} entries, more than the model's {rows} rows")
    extra = [f"madeupword{i:04d}" for i in range(rows - len(tokens))]
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens + extra)},
                                     unk_token=UNK))
    tok.decoder = vocabulary_decoder()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in tokens[len(pieces):] + extra])
    tok.encode_special_tokens = True
    spm = directory / "sentencepiece.bpe.model"
    attach_segmenter(tok, spm.read_bytes(), str(spm))
    return tok, LanguageMarking("language_codes", tuple(codes), M2M100_SPELLING, "prefix")


def _placeholders(tok: Tokenizer, rows: int, path: Path) -> None:
    """Entries for the model's rows past the tokenizer's last id (NLLB-200 has two), so that
    every row keeps its id; refused where the tokenizer has more entries, or gaps."""
    size = tok.get_vocab_size()
    if size > rows:
        raise ModelError(f"{path}: {size} entries, more than the model's {rows} rows")
    if sorted(tok.get_vocab().values()) != list(range(size)):
        raise ModelError(f"{path}: the ids are not 0..{size - 1}, each once")
    if size < rows:
        tok.add_special_tokens([AddedToken(f"<unused_{i}>", special=True, normalized=False)
                                for i in range(size, rows)])


# --- weights ---------------------------------------------------------------------------------

def tfm_name(name: str) -> str | None:
    """tfm's parameter name for an M2M100 weight's (``model.`` dropped), or None for one it
    has no place for."""
    parts = name.split(".")
    if parts[0] in ("encoder", "decoder"):
        side = parts[0]
        if parts[1] == "layers" and len(parts) >= 5:
            rest = parts[3:]
            if rest[0] in ("fc1", "fc2"):
                rest = ["ffn", *rest]
            if rest[0] in ("self_attn", "encoder_attn") and rest[1] not in (
                    "q_proj", "k_proj", "v_proj", "out_proj"):
                return None
            if rest[0] not in ("self_attn", "encoder_attn", "self_attn_layer_norm",
                               "encoder_attn_layer_norm", "ffn", "final_layer_norm"):
                return None
            if side == "encoder" and rest[0].startswith("encoder_attn"):
                return None
            return ".".join([f"{side}_layers", parts[2], *rest])
        if parts[1] == "layer_norm" and len(parts) == 3:
            return f"{side}_norm.{parts[2]}"
    return None


def tfm_state_dict(w: dict[str, Tensor], c: ModelConfig, directory: Path) -> dict[str, Tensor]:
    """tfm's state dict from an M2M100 checkpoint's tensors: names mapped, the special rows
    swapped (``FAIRSEQ_ORDER``), sinusoidal tables (not weights) dropped."""
    out: dict[str, Tensor] = {}
    for key, tensor in w.items():
        name = key[len("model."):] if key.startswith("model.") else key
        if name in ("shared.weight", "encoder.embed_tokens.weight",
                    "decoder.embed_tokens.weight", "lm_head.weight") or "embed_positions" in name:
            continue
        mapped = tfm_name(name)
        if mapped is None:
            raise ModelError(f"{directory}: the weights have {key}, which tfm's model has no "
                             "place for (layernorm_embedding, experts, adapters?); refused")
        out[mapped] = tensor.float()
    table = next((w[k] for k in ("model.shared.weight", "model.encoder.embed_tokens.weight",
                                 "model.decoder.embed_tokens.weight", "lm_head.weight")
                  if k in w), None)
    if table is None:
        raise ModelError(f"{directory}: the weights have no embeddings (model.shared.weight)")
    if table.shape != (c.src_vocab_size, c.d_model):
        raise ModelError(f"{directory}: the embeddings are {tuple(table.shape)}, config.json "
                         f"says ({c.src_vocab_size}, {c.d_model})")
    order = torch.tensor(list(FAIRSEQ_ORDER) + list(range(len(FAIRSEQ_ORDER), table.size(0))))
    rows = table.float()[order]
    for name in ("src_embed.token.weight", "tgt_embed.token.weight", "output_proj.weight"):
        out[name] = rows  # tied: one tensor under each of its names
    return out
