"""Vocabulary trimming (``tfm trim``), and a language code added (``tfm add-language``): an
NLLB-200 or M2M100 model (imported by
tfm.interop.m2m100_import, fine-tuned or not) cut down to the entries a corpus and the chosen
languages use, so that fine-tuning and decoding stop paying for the rest of a 256k-entry
vocabulary. The embedding (which is also the output layer) keeps only those rows; the
tokenizer only those entries, renumbered in their old order.

**Kept**: the four special tokens, ``<mask>``, the codes of the chosen languages, every entry
the corpus's text is tokenized into, and, for NLLB-200's BPE tokenizer, every entry a merge
builds them from (the closure through the merges that make each kept entry): every
intermediate a BPE run on that text goes through is such an entry, so it runs exactly as
before. M2M100's SentencePiece model cuts text as it did; a piece it produces that was
removed becomes ``<unk>``.

**Exact where it can be**: on any text whose tokens under the full model are all kept (the
corpus's, by construction), the trimmed model reads the same tokens and computes the same
logits for the kept entries; the softmax normalises over those only. So greedy search gives
the full model's translation wherever that needs no removed entry (tests/test_import_m2m100.py);
beam search compares log-probabilities, which move by the probability the removed entries
had, and can rank hypotheses otherwise where that was not negligible. Codes not chosen are
removed, and refused as languages after.

**Refused**, with one line: a model without language codes, a language the model lacks, a
corpus in a language (its file's suffix, as ``tfm prepare`` names them) not among those kept,
and no corpus (or corpora without text): a language code says nothing of the words a language
uses, NLLB-200's and M2M100's vocabularies are shared by all their languages, so a trim to
codes alone would keep the specials and the codes only, a model that writes nothing.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, models

from tfm.checkpoint import save_model_dir
from tfm.data.language_marks import LanguageMarking
from tfm.data.sentencepiece import vocabulary_decoder
from tfm.data.tokenizer import (
    Vocabularies,
    attach_segmenter,
    encode_batch,
    segmenter_of,
    text_normalizer,
    tokenizer_from_json,
)
from tfm.errors import DataError, UsageError
from tfm.interop.common import load_source, staged_output
from tfm.model import Transformer
from tfm.model_info import ModelInfo
from tfm.special_tokens import SPECIAL_TOKENS, UNK

MASK = "<mask>"


def trim(model_dir: Path, output: Path, corpora: Sequence[Path], languages: Sequence[str],
         overwrite: bool = False) -> dict[str, int]:
    """Write ``model_dir`` trimmed to ``corpora`` and ``languages`` (codes; with those the
    corpora's file names give) as the model directory ``output``; returns the rows before
    and after."""
    if not corpora:
        raise UsageError("--corpus: give the text whose entries to keep (the train sides); "
                         "--languages alone keeps only the language codes, a model that "
                         "writes nothing")
    model, vocabs, info, marking = _coded_model(
        Path(model_dir), Path(output), "the model being trimmed",
        "tfm trim cuts the vocabulary of NLLB-200 and M2M100 models")
    chosen = _languages(marking, corpora, languages)
    tok = vocabs.src
    used = {i for ids in encode_batch(tok, list(_texts(tok, corpora))) for i in ids}
    if not used:
        raise UsageError(f"--corpus {', '.join(map(str, corpora))}: no text to keep the "
                         "entries of")
    named = [*SPECIAL_TOKENS, MASK, *(marking.token(code) for code in chosen)]
    kept = used | {tok.token_to_id(t) for t in named if tok.token_to_id(t) is not None}
    if segmenter_of(tok) is None:
        kept = _merge_closure(tok, kept)
    order = sorted(kept)
    new_tok = _trimmed_tokenizer(tok, order, marking)
    trimmed_marking = replace(marking, codes=tuple(chosen))
    trimmed = _trimmed_model(model, order)
    provenance = {**info.provenance, "trimmed_from": model_dir.name,
                  "rows_before": tok.get_vocab_size(), "rows_kept": len(order)}
    new_info = replace(info, model=trimmed.config, provenance=provenance,
                       language_marking=trimmed_marking)
    with staged_output(output, overwrite) as stage:
        save_model_dir(stage, trimmed, Vocabularies(new_tok, new_tok,
                                                    one_vocabulary=True), new_info)
    return {"rows_before": tok.get_vocab_size(), "rows_kept": len(order)}


def _languages(marking: LanguageMarking, corpora: Sequence[Path], languages: Sequence[str]
               ) -> list[str]:
    """The codes kept: those given (each one of the model's), else those the corpora's
    suffixes name; a corpus in a language not kept is refused."""
    chosen = [marking.code(lang, "--languages") for lang in languages]
    for path in corpora:
        suffix = Path(path).name.removesuffix(".gz").rsplit(".", 1)[-1]
        if suffix in marking.codes or marking.token(suffix) in map(marking.token,
                                                                   marking.codes):
            if languages and suffix not in chosen:
                raise UsageError(f"{path}: a corpus in {suffix}, which --languages drops; "
                                 "keep it, or leave the file out")
            if suffix not in chosen:
                chosen.append(suffix)
    if not chosen:
        raise UsageError("give --languages (the model's codes to keep), or corpora named by "
                         "their language (train.eng_Latn)")
    return sorted(set(chosen), key=marking.codes.index)


def _texts(tok: Tokenizer, corpora: Sequence[Path]) -> Iterable[str]:
    normalize = text_normalizer(tok)
    for path in corpora:
        opener = gzip.open if str(path).endswith(".gz") else open
        try:
            with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
                for line in f:
                    yield normalize(line.rstrip("\n"))
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: not readable as UTF-8 text ({e})") from e


def _merge_closure(tok: Tokenizer, kept: set[int]) -> set[int]:
    """``kept`` with every entry a BPE merge builds a kept entry from, recursively."""
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    parts: dict[str, list[tuple[str, str]]] = {}
    for merge in data["model"]["merges"]:
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        parts.setdefault(a + b, []).append((a, b))
    names = {i: t for t, i in vocab.items()}
    todo = [names[i] for i in kept if i in names]
    out = set(kept)
    while todo:
        for a, b in parts.get(todo.pop(), ()):
            for piece in (a, b):
                if vocab[piece] not in out:
                    out.add(vocab[piece])
                    todo.append(piece)
    return out


def _trimmed_tokenizer(tok: Tokenizer, order: list[int], marking: LanguageMarking
                       ) -> Tokenizer:
    new_id = {old: new for new, old in enumerate(order)}
    if segmenter_of(tok) is not None:  # M2M100: the vocabulary, cut by the same SentencePiece
        tokens = [tok.id_to_token(i) for i in order]
        new = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=UNK))
        new.decoder = vocabulary_decoder()
        specials = {marking.token(c) for c in marking.codes}
        new.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t in tokens if t in specials])
        new.encode_special_tokens = True
        seg = segmenter_of(tok)
        return attach_segmenter(new, seg.model.data, "segmenter")  # type: ignore[union-attr]
    data = json.loads(tok.to_str())  # NLLB: its BPE, the merges of what is kept
    vocab = data["model"]["vocab"]
    data["model"]["vocab"] = {t: new_id[i] for t, i in vocab.items() if i in new_id}
    kept = data["model"]["vocab"]
    merges = []
    for merge in data["model"]["merges"]:
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        if a in kept and b in kept and a + b in kept:
            merges.append(merge)
    data["model"]["merges"] = merges
    data["added_tokens"] = [{**e, "id": new_id[e["id"]]} for e in data["added_tokens"]
                            if e["id"] in new_id]
    return tokenizer_from_json(json.dumps(data))


def _trimmed_model(model: Transformer, order: list[int]) -> Transformer:
    c = replace(model.config, src_vocab_size=len(order), tgt_vocab_size=len(order))
    trimmed = Transformer(c)
    state = model.state_dict()
    rows = torch.tensor(order)
    table = state["src_embed.token.weight"][rows].clone()
    for name in ("src_embed.token.weight", "tgt_embed.token.weight", "output_proj.weight"):
        state[name] = table
    trimmed.load_state_dict(state, strict=True)
    return trimmed.eval()


def add_language(model_dir: Path, output: Path, code: str, like: str,
                 overwrite: bool = False) -> int:
    """Write ``model_dir`` with the language ``code`` added as the model's last vocabulary
    entry, its embedding (and output row) a copy of the code ``like``'s, as the model
    directory ``output``: fine-tuning on the new language then goes through the usual path
    (tfm prepare, tfm train --init-from). Returns the new code's id."""
    model, vocabs, info, marking = _coded_model(
        Path(model_dir), Path(output), "the model it adds to",
        "tfm add-language adds a code to an NLLB-200 or M2M100 model")
    if code in marking.codes:
        raise UsageError(f"{code}: the model has this language code already")
    if not code or not all(c.isalnum() or c == "_" for c in code) or len(code) > 16:
        raise UsageError(f"{code!r}: a language code is letters, digits and _ (eng_Latn), at "
                         "most 16")
    source = vocabs.src.token_to_id(marking.token(marking.code(like, "--like")))
    token = marking.token(code)
    if vocabs.src.token_to_id(token) is not None:
        raise UsageError(f"{token}: the vocabulary has this entry already, as an ordinary one")
    tok = tokenizer_from_json(vocabs.src.to_str()) if segmenter_of(vocabs.src) is None else \
        _copy_with_segmenter(vocabs.src)
    new_id = tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(token, special=True, normalized=False)])
    assert tok.token_to_id(token) == new_id
    grown = _grown_model(model, source)
    new_info = replace(
        info, model=grown.config,
        provenance={**info.provenance, "language_added": code, "started_from": like},
        language_marking=replace(marking, codes=(*marking.codes, code)))
    with staged_output(output, overwrite) as stage:
        save_model_dir(stage, grown, Vocabularies(tok, tok, one_vocabulary=True), new_info)
    return new_id


def _copy_with_segmenter(tok: Tokenizer) -> Tokenizer:
    copy = Tokenizer.from_str(tok.to_str())
    copy.encode_special_tokens = True
    seg = segmenter_of(tok)
    return attach_segmenter(copy, seg.model.data, "segmenter")  # type: ignore[union-attr]


def _grown_model(model: Transformer, source: int) -> Transformer:
    """``model`` with one more vocabulary row, a copy of row ``source``."""
    rows = model.config.tgt_vocab_size + 1
    grown = Transformer(replace(model.config, src_vocab_size=rows, tgt_vocab_size=rows))
    state = model.state_dict()
    old = state["src_embed.token.weight"]
    table = torch.cat([old, old[source:source + 1]], dim=0)
    for name in ("src_embed.token.weight", "tgt_embed.token.weight", "output_proj.weight"):
        state[name] = table
    grown.load_state_dict(state, strict=True)
    return grown.eval()


def _coded_model(model_dir: Path, output: Path, what: str, purpose: str
                 ) -> tuple[Transformer, Vocabularies, ModelInfo, LanguageMarking]:
    """The model of language codes that trim and add-language read, and its marking; refused
    in one line (saying the command's ``purpose``) for a model without codes."""
    model, vocabs, info = load_source(model_dir, output, what)
    marking = info.language_marking
    if marking is None or not marking.by_codes:
        raise UsageError(f"{model_dir}: {purpose} (imported with `tfm import`); this model has "
                         "no language codes")
    return model, vocabs, info, marking
