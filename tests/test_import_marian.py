"""Specification of ``tfm import`` (tfm.interop.marian_import): a MarianMT (OPUS-MT) checkpoint
becomes a tfm model directory that tokenizes as MarianTokenizer does, scores and translates as
transformers does, exports back unchanged, and fine-tunes; what tfm cannot hold is refused in
one line, with nothing written.

The checkpoints are built here, offline: random-initialised MarianMTModels in OPUS-MT's layout
(``</s>`` 0, ``<unk>`` 1, ``<pad>`` last and the start of decoding), with SentencePiece models
trained on a few hundred generated lines, a joint vocab.json that lacks some of their pieces,
and a random final_logits_bias."""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import tfm as tfm_cli

from tfm.checkpoint import load_model_dir
from tfm.config import SearchOptions
from tfm.data.tokenizer import decode, encode_batch
from tfm.decoding.search import beam_search, greedy_search
from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

spm = pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

MAX_NEW = 24  # output tokens, EOS included, on both sides

EN = str.split("the a man woman dog cat is are walking running on in street park with red blue "
               "green big small two three children playing ball water beach sitting bench "
               "eating apple reading book café naïve résumé Zoë")
DE = str.split("der die das ein eine Mann Frau Hund Katze ist sind läuft rennt auf in Straße "
               "Park mit rot blau grün groß klein zwei drei Kinder spielen Ball Wasser Strand "
               "sitzt Bank isst Apfel liest Buch Größe über")

# Lines that trip tokenizers up: spaces at the ends and in runs, accents (composed and not),
# characters neither SentencePiece model knows, digits, punctuation, language tokens.
TRICKY = [
    "A man is walking .", "  leading spaces", "trailing spaces   ",
    "multiple    spaces  inside", "Café naïve résumé Zoë", "Cafe\u0301 decomposed",
    "Größe über Straße", "unknown ☃ ★ 漢字 characters", "the ☃☃ snowmen", "ß",
    "digits 12345 and 3.14",
    "punctuation !?;:,\"'()[]{}", ">>fr<< A man is walking .", ">>de<<Der Mann",
    ">>xx<< an unknown language", ">> quoted << text", "x >>fr<< in the middle",
    "tab\there", "no-break\u00a0space", "", "   ", "\u2581already a meta space",
    "fullwidth ＡＢＣ １２", "ligature ﬁne", "emoji 😀 face", "zero\u200bwidth space",
    "UPPER lower MiXeD", "...", "a",
]

VARIANTS = {
    # name: activation, shared vocabulary, language tokens, d_model, layers, heads, ffn
    "swish-shared-languages": ("swish", True, [">>de<<", ">>fr<<"], 32, (2, 2), 4, 64),
    "relu-separate": ("relu", False, [], 16, (1, 1), 2, 32),
    "gelu-shared": ("gelu", True, [], 48, (2, 1), 4, 96),
}


def generated_lines(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        line = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        if rng.random() < 0.3:
            line += " ."
        if rng.random() < 0.2:
            line = line.capitalize()
        if rng.random() < 0.1:
            line += f" {rng.randint(0, 999)}"
        lines.append(line)
    return lines


@pytest.fixture(scope="module")
def spm_models() -> dict[str, bytes]:
    return train_spm_models()


def train_spm_models() -> dict[str, bytes]:
    """SentencePiece unigram models trained on 400 generated lines per language."""
    out = {}
    for name, words, size, seed in (("source", EN, 150, 1), ("target", DE, 120, 2)):
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(generated_lines(words, 400, seed)), model_writer=model,
            vocab_size=size, model_type="unigram", character_coverage=1.0, minloglevel=2)
        out[name] = model.getvalue()
    return out


def spm_pieces(data: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor(model_proto=data)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i))]


def opus_vocab(pieces: list[str], languages: list[str]) -> dict[str, int]:
    """OPUS-MT's layout: </s> 0, <unk> 1, the pieces (every 13th from the 40th left out, as
    vocabularies built from segmented data lack rare pieces), <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    dropped = set(pieces[40::13])
    for piece in [*languages, *pieces]:
        if piece not in vocab and piece not in dropped:
            vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def build_marian(directory: Path, spm_models: dict[str, bytes], variant: str) -> Path:
    activation, shared, languages, d_model, (enc, dec), heads, ffn = VARIANTS[variant]
    src_pieces, tgt_pieces = spm_pieces(spm_models["source"]), spm_pieces(spm_models["target"])
    if shared:
        src_vocab = tgt_vocab = opus_vocab(src_pieces + tgt_pieces, languages)
    else:
        src_vocab, tgt_vocab = opus_vocab(src_pieces, languages), opus_vocab(tgt_pieces, [])
    pad = tgt_vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(src_vocab), decoder_vocab_size=len(tgt_vocab), d_model=d_model,
        encoder_layers=enc, decoder_layers=dec, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
        activation_function=activation, max_position_embeddings=64, scale_embedding=True,
        pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0,
        share_encoder_decoder_embeddings=shared, dropout=0.1)
    torch.manual_seed(sum(map(ord, variant)))
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():  # OPUS-MT's bias is not zero
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, pad] = 0.0
    train_briefly(model, src_vocab, tgt_vocab, spm_models)
    model.generation_config.num_beams = 4
    model.save_pretrained(directory)
    (directory / "source.spm").write_bytes(spm_models["source"])
    (directory / "target.spm").write_bytes(spm_models["target"])
    (directory / "vocab.json").write_text(json.dumps(src_vocab))
    if not shared:
        (directory / "target_vocab.json").write_text(json.dumps(tgt_vocab))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"source_lang": "en", "target_lang": "de", "separate_vocabs": not shared}))
    return directory


def train_briefly(model, src_vocab: dict[str, int], tgt_vocab: dict[str, int],
                  spm_models: dict[str, bytes]) -> None:
    """A few steps on 48 generated pairs: a random Marian model ignores its source and gives
    every sentence the same translation; a little training makes the outputs depend on the
    source, end, and differ between greedy and beam search, as a real model's do."""
    pieces = {side: spm.SentencePieceProcessor(model_proto=spm_models[side])
              for side in ("source", "target")}

    def ids(text: str, side: str, vocab: dict[str, int]) -> list[int]:
        return [vocab.get(p, 1) for p in pieces[side].encode(text, out_type=str)] + [0]

    pad = model.config.pad_token_id
    src = [ids(x, "source", src_vocab) for x in generated_lines(EN, 48, 21)]
    tgt = [ids(y, "target", tgt_vocab) for y in generated_lines(DE, 48, 22)]

    def batch(rows: list[list[int]], fill: int) -> torch.Tensor:
        out = torch.full((len(rows), max(map(len, rows))), fill, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row)
        return out

    s, labels = batch(src, src_vocab["<pad>"]), batch(tgt, -100)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, fused=True)
    for _ in range(60):
        loss = model(input_ids=s, attention_mask=s != src_vocab["<pad>"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    assert pad == tgt_vocab["<pad>"]


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            spm_models: dict[str, bytes]) -> dict[str, object]:
    """A MarianMT directory, transformers' tokenizer and model of it, and its tfm import."""
    from tfm.interop.marian_import import import_marian

    root = tmp_path_factory.mktemp(request.param)
    marian = build_marian(root / "marian", spm_models, request.param)
    imported = import_marian(marian, root / "tfm")
    model, vocabs, info = load_model_dir(imported)
    return {"name": request.param, "marian": marian, "tfm": imported, "model": model,
            "vocabs": vocabs, "info": info,
            "hf_tok": transformers.MarianTokenizer.from_pretrained(marian),
            "hf": transformers.MarianMTModel.from_pretrained(marian).eval()}


def sentences() -> list[str]:
    return [line for line in TRICKY if line.strip()] + generated_lines(EN, 12, 7)


def padded(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def marian_ids(variant: dict, ids: list[int], side: str) -> list[int]:
    """tfm ids -> the checkpoint's ids, through the tokens."""
    tok = variant["vocabs"].src if side == "src" else variant["vocabs"].tgt
    hf_tok = variant["hf_tok"]
    table = hf_tok.encoder if side == "src" or not hf_tok.separate_vocabs else \
        hf_tok.target_encoder
    table = {**table, "<s>": table["<pad>"]}  # tfm's <s> is Marian's start, its <pad>
    return [table[tok.id_to_token(i)] for i in ids]


# --- the tokenizer ---------------------------------------------------------------------------

def test_tfm_tokenizer_gives_marian_tokenizer_ids_on_every_line(variant: dict) -> None:
    hf_tok, vocabs = variant["hf_tok"], variant["vocabs"]
    lines = TRICKY + generated_lines(EN, 100, 3) + generated_lines(DE, 100, 4)
    for line in lines:
        theirs = hf_tok(line)["input_ids"][:-1]  # without </s>, which tfm adds by id
        assert marian_ids(variant, encode_batch(vocabs.src, [line])[0], "src") == theirs, \
            repr(line)
        theirs = hf_tok(text_target=line)["input_ids"][:-1]
        assert marian_ids(variant, encode_batch(vocabs.tgt, [line])[0], "tgt") == theirs, \
            repr(line)
    # A batch gives what each line gives alone.
    assert encode_batch(vocabs.src, lines) == [encode_batch(vocabs.src, [x])[0] for x in lines]


def test_unknown_pieces_and_characters_map_to_unk_as_in_marian(variant: dict) -> None:
    """Guards the test above: the vocabulary lacks pieces SentencePiece produces, and some
    characters are unknown to SentencePiece, so <unk> does occur."""
    hf_tok = variant["hf_tok"]
    unk = hf_tok.unk_token_id
    ids = hf_tok(generated_lines(EN, 100, 3) + ["unknown ☃"])["input_ids"]
    assert sum(row.count(unk) for row in ids) > 0


# Characters of every class tfm's own normalisation touches (tfm.data.text: _INVISIBLE,
# _WHITESPACE), which an imported model's tokenizer leaves to SentencePiece.
CHARACTER_CLASSES = {
    "C0 controls, tab and line breaks": [*range(0x00, 0x20)],
    "DEL, C1 controls, NEL": [*range(0x7F, 0xA0)],
    "zero-width, joiners, direction marks": [*range(0x200B, 0x2010), 0x2060],
    "line and paragraph separators": [0x2028, 0x2029],
    "byte-order mark": [0xFEFF],
    "spaces": [0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000],
}
IN_SENTENCES = ["a man{}is walking", "{}the dog runs", "two dogs{}", "the  {}{} park ."]


def lines_with_every_class() -> list[str]:
    return [form.format(chr(c), chr(c)) for codes in CHARACTER_CLASSES.values()
            for c in codes for form in IN_SENTENCES]


def test_translate_hands_the_text_to_sentencepiece_as_marian_tokenizer_does(
        variant: dict) -> None:
    """tfm's own normalisation (control and zero-width characters removed, whitespace runs to
    one space) is not applied before an imported model's segmenter: MarianTokenizer applies
    none, and SentencePiece reads those characters its own way (U+200B is a space to it)."""
    from tfm.decoding.engines import load_translator

    translator = load_translator(variant["tfm"], "cpu")
    lines = lines_with_every_class()
    theirs = variant["hf_tok"](lines)["input_ids"]
    for line, source, expected in zip(lines, translator.prepare(lines), theirs):
        assert marian_ids(variant, source.ids, "src") == expected, repr(line)
    # A line of which SentencePiece leaves no piece is an empty line: nothing to translate.
    assert [source.ids for source in translator.prepare(["\u200b \u3000\t", "\xa0"])] == [[], []]
    # The same through score(), which reads both sides.
    assert translator.score(["two dogs\u200b"], ["zero\u200bwidth"]) == translator.score(
        ["two dogs "], ["zero width"])


def test_a_lone_surrogate_is_read_as_the_replacement_character(variant: dict) -> None:
    """No tokenizer takes a lone surrogate (MarianTokenizer fails on one); tfm reads it as
    U+FFFD, as it does for every model, and gives MarianTokenizer's ids of that text."""
    from tfm.decoding.engines import load_translator

    translator = load_translator(variant["tfm"], "cpu")
    lines = ["a man \ud800 is walking", "\udfffthe dog", "two dogs\udbff"]
    replaced = [line.replace(line[i], "\ufffd") for line, i in zip(lines, (6, 0, 8))]
    assert replaced == ["a man \ufffd is walking", "\ufffdthe dog", "two dogs\ufffd"]
    with pytest.raises(TypeError):
        variant["hf_tok"](lines[0])
    theirs = variant["hf_tok"](replaced)["input_ids"]
    for line, source, expected in zip(lines, translator.prepare(lines), theirs):
        assert marian_ids(variant, source.ids, "src") == expected, repr(line)


def test_prepare_hands_both_sides_to_sentencepiece_as_marian_tokenizer_does(
        variant: dict, tmp_path: Path) -> None:
    from tfm.config import CleanConfig
    from tfm.data.corpus import CorpusSpec
    from tfm.data.dataset import load_split
    from tfm.data.language_marks import is_tag as is_language_token
    from tfm.data.prepare import prepare

    lines = lines_with_every_class()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"en": x, "de": x}) + "\n" for x in lines),
                      encoding="utf-8")
    report = prepare(CorpusSpec((str(corpus),), "en", "de"), variant["tfm"] / "tokenizer.json",
                     tmp_path / "prepared", clean=CleanConfig(max_ratio=0))
    assert report.splits["train"].kept == len(lines)
    assert report.splits["train"].invisible_removed == 0  # nothing removed: SentencePiece's
    split = load_split(tmp_path / "prepared", "train")
    hf_tok, src_tok = variant["hf_tok"], variant["vocabs"].src
    for i, line in enumerate(lines):
        src = split.src(i).tolist()
        if is_language_token(src_tok.id_to_token(src[0])):  # the direction's, put first
            src = src[1:]
        assert marian_ids(variant, src, "src") == hf_tok(line)["input_ids"], repr(line)
        assert marian_ids(variant, split.tgt(i).tolist(), "tgt") == hf_tok(  # without </s>
            text_target=line)["input_ids"][:-1], repr(line)


def test_a_literal_special_token_in_text_is_text(variant: dict) -> None:
    """The one deliberate difference: MarianTokenizer turns "</s>" typed in a text into the
    control token; tfm encodes it as the characters it is made of, as for every model."""
    vocabs = variant["vocabs"]
    ids = encode_batch(vocabs.src, ["a </s> b"])[0]
    assert EOS_ID not in ids and len(ids) > 3


def test_decoding_target_ids_gives_marian_tokenizer_text(variant: dict) -> None:
    """Any ids search can produce (everything but <pad> and <s>, Marian's start token: with
    separate vocabularies MarianTokenizer does not even drop the target's <pad> as special)."""
    hf_tok, vocabs = variant["hf_tok"], variant["vocabs"]
    g = random.Random(0)
    producible = [UNK_ID, EOS_ID, *range(4, vocabs.tgt.get_vocab_size())]
    for _ in range(300):
        ids = [g.choice(producible) for _ in range(g.randint(1, 20))]
        assert decode(vocabs.tgt, ids) == hf_tok.decode(
            marian_ids(variant, ids, "tgt"), skip_special_tokens=True), ids


# --- the model -------------------------------------------------------------------------------

def test_forced_target_log_probs_are_transformers_within_1e_4(variant: dict) -> None:
    model, vocabs, hf = variant["model"], variant["vocabs"], variant["hf"]
    src_texts = sentences()[:10]
    tgt_texts = generated_lines(DE, 10, 5)
    src = [x + [EOS_ID] for x in encode_batch(vocabs.src, src_texts)]
    tgt = [y + [EOS_ID] for y in encode_batch(vocabs.tgt, tgt_texts)]
    start = hf.config.decoder_start_token_id
    with torch.no_grad():
        ours = torch.log_softmax(model(padded(src), padded([[BOS_ID, *y[:-1]] for y in tgt])),
                                 -1)
        s = padded([marian_ids(variant, x, "src") for x in src])
        t_in = padded([[start, *marian_ids(variant, y[:-1], "tgt")] for y in tgt])
        theirs = torch.log_softmax(hf(input_ids=s, attention_mask=padded(src) != PAD_ID,
                                      decoder_input_ids=t_in).logits, -1)
    worst = 0.0
    for i, y in enumerate(tgt):
        for t, (a, b) in enumerate(zip(y, marian_ids(variant, y, "tgt"))):
            worst = max(worst, abs(ours[i, t, a].item() - theirs[i, t, b].item()))
    assert worst < 1e-4
    # Every other token too: tfm's distribution is Marian's, with <pad> at probability 0.
    probs = ours[0, 0].exp()
    assert probs[PAD_ID].item() == 0.0 and abs(probs.sum().item() - 1.0) < 1e-5


def generate(variant: dict, src: list[list[int]], **settings: object) -> list[list[int]]:
    """generate()'s outputs in tfm ids: no <pad> or <unk> (tfm's search never produces them),
    at most MAX_NEW tokens."""
    hf, hf_tok = variant["hf"], variant["hf_tok"]
    s = padded([marian_ids(variant, x, "src") for x in src])
    with torch.no_grad():
        out = hf.generate(input_ids=s, attention_mask=padded(src) != PAD_ID,
                          max_new_tokens=MAX_NEW, suppress_tokens=[hf.config.pad_token_id,
                                                                   hf_tok.unk_token_id],
                          **settings)
    tok = variant["vocabs"].tgt
    table = hf_tok.decoder if not hf_tok.separate_vocabs else \
        {i: p for p, i in hf_tok.target_encoder.items()}
    rows = []
    for row in out.tolist():
        row = row[1:]
        row = row[: row.index(0)] if 0 in row else row
        rows.append([tok.token_to_id(table[i]) for i in row])
    return rows


def test_greedy_search_gives_generate_tokens(variant: dict) -> None:
    model, vocabs = variant["model"], variant["vocabs"]
    src = [x + [EOS_ID] for x in encode_batch(vocabs.src, sentences())]
    ours = greedy_search(model, padded(src),
                         SearchOptions(beam=1, max_len_a=0.0, max_len_b=MAX_NEW))
    assert [h[0].tokens for h in ours] == generate(variant, src, num_beams=1, do_sample=False)


@pytest.mark.parametrize("stop_early", [True, False])
def test_beam_search_gives_generate_tokens(variant: dict, stop_early: bool) -> None:
    """Beam 4 without length normalisation, the settings under which both searches end alike
    (tfm.interop.marian), for every sentence that ends before the length limit."""
    model, vocabs = variant["model"], variant["vocabs"]
    src = [x + [EOS_ID] for x in encode_batch(vocabs.src, sentences())]
    ours = beam_search(model, padded(src),
                       SearchOptions(beam=4, length_penalty=0.0, max_len_a=0.0, max_len_b=MAX_NEW,
                                     stop_early=stop_early))
    theirs = generate(variant, src, num_beams=4, length_penalty=0.0, early_stopping=False,
                      do_sample=False)
    kept = [i for i, h in enumerate(ours) if len(h[0].tokens) + 1 < MAX_NEW]
    assert len(kept) >= len(src) // 2
    assert [ours[i][0].tokens for i in kept] == [theirs[i] for i in kept]
    greedy = greedy_search(model, padded(src),
                           SearchOptions(beam=1, max_len_a=0.0, max_len_b=MAX_NEW))
    assert any(ours[i][0].tokens != greedy[i][0].tokens for i in range(len(src)))


def test_the_import_holds_the_checkpoint_facts(variant: dict) -> None:
    c, info = variant["info"].model, variant["info"]
    activation, shared, languages, d_model, (enc, dec), heads, ffn = VARIANTS[variant["name"]]
    assert (c.activation, c.share_embeddings, c.d_model, c.encoder_layers, c.decoder_layers,
            c.n_heads, c.d_ff) == (activation, shared, d_model, enc, dec, heads, ffn)
    assert c.output_bias and not c.norm_first and c.max_positions == 64
    assert (info.src_lang, info.tgt_lang, info.generation.beam) == ("en", "de", 4)
    config = json.loads((variant["tfm"] / "config.json").read_text())
    assert config["format_version"] == 2


# --- export and import again -----------------------------------------------------------------

def test_import_export_import_is_the_identity_on_weights(variant: dict, tmp_path: Path) -> None:
    from tfm.interop.marian import export_marian
    from tfm.interop.marian_import import import_marian

    exported = export_marian(variant["tfm"], tmp_path / "marian")
    again = import_marian(exported, tmp_path / "again")
    model, vocabs, info = load_model_dir(again)
    first = variant["model"].state_dict()
    second = model.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first), \
        [k for k in first if not torch.equal(first[k], second[k])]
    assert info.model == variant["info"].model
    assert vocabs.src.to_str() == variant["vocabs"].src.to_str()
    assert vocabs.tgt.to_str() == variant["vocabs"].tgt.to_str()


def test_the_export_of_an_import_is_marian_to_transformers(variant: dict,
                                                           tmp_path: Path) -> None:
    """MarianTokenizer and MarianMTModel load the export and translate as tfm does."""
    from tfm.interop.marian import export_marian

    exported = export_marian(variant["tfm"], tmp_path / "marian")
    hf_tok = transformers.MarianTokenizer.from_pretrained(exported)
    hf = transformers.MarianMTModel.from_pretrained(exported).eval()
    model, vocabs = variant["model"], variant["vocabs"]
    texts = sentences()
    enc = hf_tok(texts, return_tensors="pt", padding=True)
    assert enc["input_ids"].tolist() == padded(
        [x + [EOS_ID] for x in encode_batch(vocabs.src, texts)]).tolist()
    ours = greedy_search(model, enc["input_ids"],
                         SearchOptions(beam=1, max_len_a=0.0, max_len_b=MAX_NEW))
    with torch.no_grad():
        out = hf.generate(**enc, num_beams=1, max_new_tokens=MAX_NEW)
    assert hf_tok.batch_decode(out, skip_special_tokens=True) == \
        [decode(vocabs.tgt, h[0].tokens) for h in ours]


def test_tfm_own_marian_export_imports_back_to_the_same_translations(
        tmp_path: Path, tokenizer) -> None:
    from conftest import PAIRS, random_model_dir

    from tfm.decoding.engines import load_translator
    from tfm.interop.marian import export_marian
    from tfm.interop.marian_import import import_marian

    original = random_model_dir(tmp_path / "model", tokenizer, seed=3)
    again = import_marian(export_marian(original, tmp_path / "marian"), tmp_path / "again")
    texts = [s for s, _ in PAIRS[:10]] + ["  Spaces\tand\u00a0tabs .  "]
    one, two = load_translator(original), load_translator(again)
    for beam in (1, 3):
        assert [t.text for t in one.translate(texts, one.default_options(beam=beam))] == \
            [t.text for t in two.translate(texts, two.default_options(beam=beam))]


# --- an ordinary tfm model directory ---------------------------------------------------------

def test_prepare_with_the_imported_tokenizer_and_train_init_from_fine_tune_it(
        tmp_path: Path, spm_models: dict[str, bytes]) -> None:
    """prepare tokenizes with the imported tokenizer (the SentencePiece models travel with it),
    train --init-from starts from the imported weights, and the result translates, exports to
    MarianMT and imports again."""
    from tfm.interop.marian_import import import_marian

    marian = build_marian(tmp_path / "marian", spm_models, "swish-shared-languages")
    imported = import_marian(marian, tmp_path / "imported")
    data = tmp_path / "corpus"
    data.mkdir()
    (data / "train.en").write_text("\n".join(generated_lines(EN, 60, 11)) + "\n")
    (data / "train.de").write_text("\n".join(generated_lines(DE, 60, 12)) + "\n")
    result = tfm_cli("prepare", "--train", str(data / "train"), "--src-lang", "en",
                     "--tgt-lang", "de", "--tokenizer", str(imported / "tokenizer.json"),
                     "-o", str(tmp_path / "prepared"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "prepared" / "tokenizer.src.spm").is_file()
    result = tfm_cli("train", "--data", str(tmp_path / "prepared"), "--init-from", str(imported),
                     "-o", str(tmp_path / "tuned"), "--max-steps", "3", "--valid-every", "3",
                     "--lr", "1e-4", "--warmup", "1", "--max-tokens", "400")
    assert result.returncode == 0, result.stderr
    model, vocabs, info = load_model_dir(tmp_path / "tuned")
    assert info.model.activation == "swish" and model.output_bias is not None
    base, _, _ = load_model_dir(imported)
    assert torch.equal(model.output_bias, base.output_bias)  # kept fixed, as transformers does
    assert not torch.equal(model.src_embed.token.weight, base.src_embed.token.weight)
    # Trained on en->de through the model's >>de<< tag (prepare put it before each source),
    # it still translates into several languages: the one wanted is named.
    assert_one_line_error(tfm_cli("translate", "--model", str(tmp_path / "tuned"),
                                  stdin="a man is walking\n"), "--target-lang is needed")
    result = tfm_cli("translate", "--model", str(tmp_path / "tuned"), "--beam", "1",
                     "--target-lang", "de", stdin="a man is walking\n")
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1, result.stderr
    result = tfm_cli("export", str(tmp_path / "tuned"), "--to", "marian", "-o",
                     str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert transformers.MarianTokenizer.from_pretrained(tmp_path / "out")("a man")["input_ids"]


def test_a_multi_target_import_prepares_several_directions_each_with_its_tag(
        tmp_path: Path, spm_models: dict[str, bytes]) -> None:
    """Fine-tuning an imported OPUS-MT model of several target languages on several
    directions goes through the same path as tfm's own multilingual models: each source
    starts with its direction's tag, found in the imported vocabulary."""
    from tfm.data.dataset import load_split
    from tfm.interop.marian_import import import_marian

    imported = import_marian(build_marian(tmp_path / "marian", spm_models,
                                          "swish-shared-languages"), tmp_path / "imported")
    data = tmp_path / "corpus"
    data.mkdir()
    for lang, words, seed in (("en", EN, 1), ("de", DE, 2), ("fr", DE, 3)):
        (data / f"train.{lang}").write_text("\n".join(generated_lines(words, 30, seed)) + "\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"corpora:\n  - train: {data / 'train'}\n    directions: [en-de, en-fr]\n"
                      f"tokenizer: {imported / 'tokenizer.json'}\noutput: {tmp_path / 'prep'}\n")
    result = tfm_cli("prepare", "--config", str(config))
    assert result.returncode == 0, result.stderr
    _, vocabs, _ = load_model_dir(imported)
    split = load_split(tmp_path / "prep", "train")
    tags = {0: vocabs.src.token_to_id(">>de<<"), 1: vocabs.src.token_to_id(">>fr<<")}
    assert sorted(set(split.directions.tolist())) == [0, 1]
    for i in range(len(split)):
        assert split.src(i)[0] == tags[int(split.directions[i])]
    # A direction into a language the imported model has no tag for is refused.
    config.write_text(config.read_text().replace("en-fr", "en-it"))
    assert_one_line_error(tfm_cli("prepare", "--config", str(config)), "no >>it<< tag")


def test_the_ctranslate2_export_of_an_import_translates_as_tfm(variant: dict,
                                                                tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    from tfm.decoding.engines import load_translator
    from tfm.interop.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(variant["tfm"], tmp_path / "ct2")
    ours, theirs = load_translator(variant["tfm"]), load_translator(out)
    texts = sentences()
    options = dict(beam=1, max_len_a=0.0, max_len_b=MAX_NEW)
    assert [t.text for t in theirs.translate(texts, theirs.default_options(**options))] == \
        [t.text for t in ours.translate(texts, ours.default_options(**options))]


# --- refusals --------------------------------------------------------------------------------

def assert_one_line_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]


class Evil:
    """Unpickling this would run a command."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("echo pwned > pwned.txt",))


def _config_edit(key: str, value: object):
    def edit(d: Path) -> None:
        config = json.loads((d / "config.json").read_text())
        config[key] = value
        (d / "config.json").write_text(json.dumps(config))
    return edit


def _pickle(d: Path) -> None:
    import pickle

    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": Evil()}))


REFUSALS = {
    "not a MarianMT checkpoint": (lambda d: (d / "config.json").write_text(
        json.dumps({"model_type": "bart"})), "not a MarianMT checkpoint"),
    "no target.spm": (lambda d: (d / "target.spm").unlink(), "missing target.spm"),
    "no vocab.json": (lambda d: (d / "vocab.json").unlink(), "missing vocab.json"),
    "a pickle that runs code": (_pickle, "would execute code"),
    "pre-norm": (_config_edit("normalize_before", True), "normalize_before"),
    "unscaled embeddings": (_config_edit("scale_embedding", False), "scale_embedding"),
    "an unknown activation": (_config_edit("activation_function", "tanh"), "'tanh'"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "no weights"),
}


@pytest.fixture(scope="module")
def small_marian(tmp_path_factory: pytest.TempPathFactory, spm_models: dict[str, bytes]
                 ) -> Path:
    return build_marian(tmp_path_factory.mktemp("small") / "marian", spm_models,
                        "relu-separate")


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_tfm_cannot_hold_is_refused_in_one_line_and_nothing_is_written(
        case: str, tmp_path: Path, small_marian: Path) -> None:
    marian = Path(shutil.copytree(small_marian, tmp_path / "marian"))
    damage, fragment = REFUSALS[case]
    damage(marian)
    result = tfm_cli("import", str(marian), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert_one_line_error(result, fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marian"]  # no pwned.txt, no out


def test_an_existing_output_is_kept_unless_overwrite_is_given(
        tmp_path: Path, small_marian: Path) -> None:
    marian = small_marian
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    result = tfm_cli("import", str(marian), "-o", str(out))
    assert_one_line_error(result, "already exists")
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    result = tfm_cli("import", str(marian), "-o", str(out), "--overwrite")
    assert result.returncode == 0, result.stderr
    assert not (out / "mine.txt").exists() and (out / "model.safetensors").is_file()


# --- target languages ------------------------------------------------------------------------

def test_translate_target_lang_puts_the_language_token_first_or_refuses(variant: dict) -> None:
    model = str(variant["tfm"])
    has_languages = bool(VARIANTS[variant["name"]][2])
    result = tfm_cli("translate", "--model", model, "--beam", "1", "--target-lang", "fr",
                     "A man is walking .", "", "two dogs")
    if not has_languages:
        assert_one_line_error(result, "no target-language tokens")
        return
    assert result.returncode == 0, result.stderr
    direct = tfm_cli("translate", "--model", model, "--beam", "1", ">>fr<< A man is walking .",
                     "", ">>fr<< two dogs")
    assert result.stdout == direct.stdout and result.stdout.split("\n")[1] == ""
    assert direct.returncode == 0 and direct.stderr == ""  # each sentence names its language
    assert_one_line_error(tfm_cli("translate", "--model", model, "A man is walking ."),
                          "--target-lang is needed: this model translates into de, fr")
    assert_one_line_error(tfm_cli("translate", "--model", model, "--target-lang", "fr",
                                  "A man >>de<< is walking ."), "inside the sentence")
    assert_one_line_error(tfm_cli("translate", "--model", model, "--target-lang", "xx", "a"),
                          "has de, fr")


def test_eval_target_lang_translates_as_translate_does_and_checks_that_language(
        variant: dict, tmp_path: Path) -> None:
    model = str(variant["tfm"])
    src, ref, hyp = tmp_path / "src.en", tmp_path / "ref.fr", tmp_path / "hyp.fr"
    src.write_text("A man is walking .\ntwo dogs\n")
    ref.write_text("Un homme marche .\ndeux chiens\n")
    result = tfm_cli("eval", "--model", model, "--src", str(src), "--ref", str(ref), "--beam",
                     "1", "--target-lang", "fr", "--save-hyp", str(hyp), "--off-target",
                     "--json")
    if not VARIANTS[variant["name"]][2]:
        assert_one_line_error(result, "--target-lang fr: this model translates into de only")
        return
    assert result.returncode == 0, result.stderr
    translated = tfm_cli("translate", "--model", model, "--beam", "1", "--target-lang", "fr",
                         "--input", str(src))
    assert hyp.read_text() == translated.stdout
    off_target = json.loads(result.stdout)[-1]
    assert off_target["metric"] == "off_target" and "|lang:fr|" in off_target["signature"]


def test_serve_lists_the_language_tokens_and_takes_target_lang(variant: dict) -> None:
    pytest.importorskip("fastapi")
    import local_http
    from test_serve import post, serving

    from tfm.decoding.engines import load_translator
    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    languages = VARIANTS[variant["name"]][2]
    translator = load_translator(variant["tfm"], "cpu")
    with serving(create_app(translator, ServeConfig(max_wait_ms=0))) as url:
        assert local_http.get(f"{url}/v1/info").json()["language_tokens"] == languages
        answer = post(url, {"text": "A man is walking .", "beam": 1, "target_lang": "fr"},
                      key=None)
        if not languages:
            assert answer.status_code == 422 and "target_lang fr" in answer.text
            return
        direct = post(url, {"text": ">>fr<< A man is walking .", "beam": 1}, key=None)
        assert answer.status_code == 200
        assert answer.json()["translations"] == direct.json()["translations"]


def test_a_plain_pytorch_model_bin_imports_as_its_safetensors_do(
        tmp_path: Path, small_marian: Path) -> None:
    """A pickle of tensors only (what older hub checkpoints hold, with the positional tables)
    is read, without executing code, to the same model as the safetensors."""
    from tfm.interop.marian_import import import_marian

    marian = Path(shutil.copytree(small_marian, tmp_path / "marian"))
    hf = transformers.MarianMTModel.from_pretrained(marian)
    torch.save(hf.state_dict(), marian / "pytorch_model.bin")
    (marian / "model.safetensors").unlink()
    one, _, _ = load_model_dir(import_marian(small_marian, tmp_path / "one"))
    two, _, _ = load_model_dir(import_marian(marian, tmp_path / "two"))
    assert all(torch.equal(a, b) for a, b in zip(one.state_dict().values(),
                                                 two.state_dict().values()))
