"""Specification of ``tfm import`` for NLLB-200 and M2M100 checkpoints
(tfm.interop.m2m100_import): the directory becomes a tfm model that tokenizes as transformers'
NllbTokenizer and M2M100Tokenizer do, scores as M2M100ForConditionalGeneration does, and
translates as its ``generate()`` does with ``forced_bos_token_id``, in the language asked for;
what tfm cannot hold is refused in one line, with nothing written.

The checkpoints are built here, offline, by transformers' own code: random-initialised
M2M100ForConditionalGeneration models at two sizes, trained for a few steps on generated
en/de/fr pairs, with tokenizers built by transformers from a SentencePiece BPE model trained on
a few hundred generated lines: NllbTokenizer (with and without ``legacy_behaviour``; built by
transformers 5, so ``<mask>`` comes before the language codes) and M2M100Tokenizer (its
vocab.json lacking some of the SentencePiece model's pieces, as a fairseq dictionary built from
segmented data does)."""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from conftest import tfm as tfm_cli

from tfm.checkpoint import load_model_dir
from tfm.config import SearchOptions
from tfm.data.tokenizer import encode_batch
from tfm.errors import UsageError
from tfm.special_tokens import EOS_ID

spm = pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

MAX_NEW = 40  # generate()'s new tokens: the language code, the output and </s>

# One concept per column, in three languages: a sentence is the same concepts in each.
WORDS = {
    "en": str.split("the a man woman dog cat is are walking running on in street park with red "
                    "blue green big small two children playing ball water beach bench eating "
                    "apple reading book café naïve"),
    "de": str.split("der ein Mann Frau Hund Katze ist sind läuft rennt auf in Straße Park mit "
                    "rot blau grün groß klein zwei Kinder spielen Ball Wasser Strand Bank isst "
                    "Apfel liest Buch Größe über"),
    "fr": str.split("le un homme femme chien chat est sont marche court sur dans rue parc avec "
                    "rouge bleu vert grand petit deux enfants jouent balle eau plage banc mange "
                    "pomme lit livre été où"),
}
CODES = {"nllb": {"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn"},
         "m2m100": {"en": "en", "de": "de", "fr": "fr"}}
DIRECTIONS = [("en", "de"), ("de", "fr"), ("fr", "en")]

# Text that trips tokenizers up: controls, format characters, odd spaces, combining accents,
# CJK, emoji, characters the SentencePiece model never saw.
UNUSUAL = [
    "  leading spaces", "trailing spaces   ", "multiple    spaces  inside", "tab\there",
    "no-break\u00a0space", "ideographic\u3000space", "zero\u200bwidth", "joiner\u200dhere",
    "bom\ufeffinside", "bidi \u202eoverride", "control \x01\x07 chars", "line\u2028separator",
    "Cafe\u0301 decomposed", "Größe über Straße", "ﬁ ligature ＡＢＣ １２", "漢字 かな 한국어",
    "emoji 😀 👩‍👩‍👧 🇩🇪", "unknown ☃ ★ ∰", "digits 12345 and 3.14", "punctuation !?;:,\"'()[]",
    "\u2581already a meta space", "x", ">>de<< a tag", "<mask> spelled", "eng_Latn spelled",
]

VARIANTS = {
    # family, legacy_behaviour, d_model, (encoder, decoder) layers, heads, ffn
    "nllb": ("nllb", False, 32, (2, 2), 4, 64),
    "nllb-legacy": ("nllb", True, 48, (2, 2), 4, 96),
    "m2m100": ("m2m100", False, 48, (2, 1), 2, 96),
}


def generated(n: int, seed: int) -> list[list[int]]:
    """n sentences of 2 to 8 concepts."""
    rng = random.Random(seed)
    return [[rng.randrange(len(WORDS["en"])) for _ in range(rng.randint(2, 8))]
            for _ in range(n)]


def text(lang: str, concepts: list[int]) -> str:
    return " ".join(WORDS[lang][c] for c in concepts)


def demo_lines() -> list[str]:
    """The bundled demo corpus (tfm's own), the first 60 lines of each side."""
    root = Path(__file__).resolve().parent.parent / "data" / "demo"
    return [line for name in ("train.en", "train.de")
            for line in (root / name).read_text(encoding="utf-8").splitlines()[:60]]


@pytest.fixture(scope="module")
def spm_model() -> bytes:
    return sentencepiece_model()


def sentencepiece_model() -> bytes:
    """A SentencePiece BPE model of 400 pieces over the three languages' generated lines."""
    lines = [text(lang, c) for c in generated(300, 1) for lang in WORDS] + demo_lines()
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=400,
        character_coverage=0.9995, normalization_rule_name="nmt_nfkc", minloglevel=2)
    return model.getvalue()


def hf_tokenizer(directory: Path, spm_model: bytes, family: str, legacy: bool):
    """The tokenizer transformers builds from the SentencePiece model, saved in ``directory``."""
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sentencepiece.bpe.model").write_bytes(spm_model)
    if family == "nllb":
        return transformers.NllbTokenizer.from_pretrained(
            directory, additional_special_tokens=list(FAIRSEQ_LANGUAGE_CODES),
            legacy_behaviour=legacy)
    sp = spm.SentencePieceProcessor(model_proto=spm_model)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
              if not (sp.is_control(i) or sp.is_unknown(i))]
    dropped = set(pieces[60::17])  # a fairseq dictionary lacks pieces its data never used
    for piece in pieces:
        if piece not in dropped:
            vocab[piece] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False),
                                          encoding="utf-8")
    return transformers.M2M100Tokenizer(str(directory / "vocab.json"),
                                        str(directory / "sentencepiece.bpe.model"))


def model_rows(tok, family: str) -> int:
    """NLLB: one row per tokenizer entry; M2M100: vocab.json, 100 codes and 8 madeup words."""
    return len(tok) if family == "nllb" else tok.encoder_size + len(tok.lang_code_to_id) + 8


def build(directory: Path, spm_model: bytes, variant: str):
    family, legacy, d_model, (enc, dec), heads, ffn = VARIANTS[variant]
    tok = hf_tokenizer(directory, spm_model, family, legacy)
    config = transformers.M2M100Config(
        vocab_size=model_rows(tok, family), d_model=d_model, encoder_layers=enc,
        decoder_layers=dec, encoder_attention_heads=heads, decoder_attention_heads=heads,
        encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, max_position_embeddings=128,
        scale_embedding=True, dropout=0.1, attention_dropout=0.0, encoder_layerdrop=0.0,
        decoder_layerdrop=0.0)
    torch.manual_seed(sum(map(ord, variant)))
    model = transformers.M2M100ForConditionalGeneration(config)
    train_briefly(model, tok, family)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return tok, model


def train_briefly(model, tok, family: str) -> None:
    """100 steps on 96 generated pairs of four directions, the sources tokenized by the
    checkpoint's tokenizer and the labels ``[tgt_code] X </s>``, as fairseq trained NLLB-200
    and M2M100 (a legacy_behaviour tokenizer would write target labels ``X </s> [tgt_code]``,
    which no NLLB model was trained on): a random model gives every sentence the same output;
    a little training makes the outputs depend on the source and the target language, end,
    and differ between greedy and beam search, as a real model's do."""
    pairs = []
    for i, concepts in enumerate(generated(96, 2)):
        src, tgt = [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en")][i % 4]
        tok.src_lang = CODES[family][src]
        source = tok(text(src, concepts))["input_ids"]
        code = tok.convert_tokens_to_ids(tok_code(family, tgt))
        target = [code, *tok(text(tgt, concepts), add_special_tokens=False)["input_ids"], 2]
        pairs.append((source, target))

    def batch(rows: list[list[int]], fill: int) -> torch.Tensor:
        out = torch.full((len(rows), max(map(len, rows))), fill, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row)
        return out

    src = batch([s for s, _ in pairs], 1)
    labels = batch([t for _, t in pairs], -100)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, fused=True)
    for _ in range(100):
        loss = model(input_ids=src, attention_mask=src != 1, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            spm_model: bytes) -> dict:
    """A checkpoint directory, transformers' tokenizer and model of it, and its tfm import."""
    from tfm.decoding.engines import load_translator
    from tfm.interop.m2m100_import import import_m2m100

    root = tmp_path_factory.mktemp(request.param)
    tok, hf = build(root / "hf", spm_model, request.param)
    imported = import_m2m100(root / "hf", root / "tfm")
    model, vocabs, info = load_model_dir(imported)
    family = VARIANTS[request.param][0]
    return {"name": request.param, "family": family, "hf_dir": root / "hf", "tfm": imported,
            "model": model, "vocabs": vocabs, "info": info, "tok": tok, "hf": hf,
            "translator": load_translator(imported, "cpu")}


def tok_code(family: str, lang: str) -> str:
    """The token of ``lang``'s code in the tokenizer's vocabulary."""
    return CODES[family][lang] if family == "nllb" else f"__{lang}__"


# tfm's id of each fairseq id: the four special ids swapped, every other the same.
TO_FAIRSEQ = {0: 1, 1: 3, 2: 0, 3: 2}
FROM_FAIRSEQ = {f: t for t, f in TO_FAIRSEQ.items()}


def fairseq(ids: list[int]) -> list[int]:
    return [TO_FAIRSEQ.get(i, i) for i in ids]


def code_id(v: dict, lang: str) -> int:
    tok = v["tok"]
    return tok.get_lang_id(lang) if v["family"] == "m2m100" else tok.convert_tokens_to_ids(
        CODES["nllb"][lang])


def hf_source_ids(v: dict, lang: str, lines: list[str]) -> list[list[int]]:
    v["tok"].src_lang = CODES[v["family"]][lang]
    return v["tok"](lines)["input_ids"]


# --- the tokenizer ---------------------------------------------------------------------------

def lines_to_check() -> list[str]:
    return ([text(lang, c) for c in generated(40, 3) for lang in WORDS] + demo_lines()
            + UNUSUAL[:-3])  # (the last three spell tokens: see the test below)


def test_sources_are_read_as_transformers_tokenizes_them(variant: dict) -> None:
    """Every line, in every source language: tfm's ids (the specials swapped) are the ids the
    checkpoint's tokenizer gives, the language code where the layout puts it."""
    translator, lines = variant["translator"], lines_to_check()
    for lang in WORDS:
        theirs = hf_source_ids(variant, lang, lines)
        ours = translator.prepare(lines, language=translator.languages.resolve(
            CODES[variant["family"]]["de"], CODES[variant["family"]][lang]))
        for line, source, expected in zip(lines, ours, theirs):
            assert fairseq(source.ids) == expected, repr(line)


def test_the_layout_is_the_variants_own(variant: dict) -> None:
    """Guards the test above: the code comes first (NLLB, M2M100) or after </s> (legacy), and
    <unk> occurs (characters the SentencePiece model never saw; pieces vocab.json lacks)."""
    ids = hf_source_ids(variant, "en", ["a man ☃"])[0]
    code = code_id(variant, "en")
    assert (ids[-1] == code and ids[-2] == 2) if variant["name"] == "nllb-legacy" else (
        ids[0] == code and ids[-1] == 2)
    assert 3 in ids
    marking = variant["info"].language_marking
    assert marking.by_codes and marking.decoder_start == EOS_ID  # then the target code
    assert len(marking.codes) == (202 if variant["family"] == "nllb" else 100)


def test_text_that_spells_a_token_is_text(variant: dict) -> None:
    """The one deliberate difference: transformers reads ``<mask>`` or a language code typed in
    a text as that token; tfm encodes it as the characters it is made of, as for every model."""
    vocabs, marking = variant["vocabs"], variant["info"].language_marking
    tokens = {"<mask>", *(marking.token(code) for code in marking.codes)}
    for line in UNUSUAL[-3:] + ["__en__ spelled"]:
        ids = encode_batch(vocabs.src, [line])[0]
        assert not tokens & {vocabs.src.id_to_token(i) for i in ids}, line


def test_the_tokenizer_files_list_the_codes_after_mask(variant: dict) -> None:
    """transformers 5 puts <mask> before the codes; the ids are read, never assumed."""
    if variant["family"] != "nllb":
        pytest.skip("M2M100 has no <mask>")
    tok = variant["tok"]
    assert tok.convert_tokens_to_ids("<mask>") < tok.convert_tokens_to_ids("ace_Arab")
    assert variant["vocabs"].src.token_to_id("eng_Latn") == code_id(variant, "en")


# --- scores and translations -----------------------------------------------------------------

def test_forced_target_log_probabilities_match_transformers(variant: dict) -> None:
    model, hf = variant["model"], variant["hf"]
    for src, tgt in DIRECTIONS:
        concepts = generated(6, 4)
        sources = hf_source_ids(variant, src, [text(src, c) for c in concepts])
        variant["tok"].src_lang = CODES[variant["family"]][tgt]
        targets = [variant["tok"](text(tgt, c))["input_ids"] for c in concepts]
        for s, t in zip(sources, targets):
            t = [code_id(variant, tgt), *[i for i in t if i != code_id(variant, tgt)]]
            decoder_in = torch.tensor([[2, *t[:-1]]])
            with torch.no_grad():
                theirs = hf(input_ids=torch.tensor([s]), decoder_input_ids=decoder_in
                            ).logits.log_softmax(-1)[0]
                ours = model(torch.tensor([[FROM_FAIRSEQ.get(i, i) for i in s]]),
                             torch.tensor([[FROM_FAIRSEQ.get(i, i) for i in
                                            decoder_in[0].tolist()]])).log_softmax(-1)[0]
            order = torch.tensor(fairseq(list(range(ours.size(-1)))))
            reordered = torch.empty_like(ours)
            reordered[:, order] = ours
            assert torch.allclose(reordered, theirs, atol=1e-4), (src, tgt)


def generate(v: dict, src: str, tgt: str, lines: list[str], beam: int
             ) -> list[list[int] | None]:
    """transformers' translations: ``generate()`` with the target code forced first; <s>,
    <pad> and <unk> suppressed, as tfm never emits them (tfm.decoding.rules.NEVER_EMITTED).
    None for a translation that reached the length limit: there tfm ends it with </s>
    (``eos_at_the_limit``) where transformers stops without one."""
    v["tok"].src_lang = CODES[v["family"]][src]
    enc = v["tok"](lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = v["hf"].generate(**enc, forced_bos_token_id=code_id(v, tgt), num_beams=beam,
                               max_new_tokens=MAX_NEW, do_sample=False, length_penalty=1.0,
                               early_stopping=True, suppress_tokens=[0, 1, 3])
    rows = []
    for row in out.tolist():
        assert row[:2] == [2, code_id(v, tgt)]
        body = row[2:]
        rows.append(body[:body.index(2)] if 2 in body else None)
    return rows


@pytest.mark.parametrize("beam", [1, 4])
def test_translations_are_generates_token_for_token(variant: dict, beam: int) -> None:
    translator = variant["translator"]
    options = SearchOptions(beam=beam, max_len_a=0.0, max_len_b=MAX_NEW - 1, length_penalty=1.0,
                            stop_early=False)
    for src, tgt in DIRECTIONS:
        lines = [text(src, c) for c in generated(16, 5)]
        theirs = generate(variant, src, tgt, lines, beam)
        ended = [i for i, row in enumerate(theirs) if row is not None]
        assert len(ended) >= 8, "too few translations end: the model needs more training"
        lines, theirs = [lines[i] for i in ended], [theirs[i] for i in ended]
        asked = translator.languages.resolve(CODES[variant["family"]][tgt],
                                             CODES[variant["family"]][src])
        sources = translator.prepare(lines, language=asked)
        ours = [translator.search([s.ids], options, start=[s.start])[0][0].tokens
                for s in sources]
        assert [fairseq(t) for t in ours] == theirs, (src, tgt, beam)
        # The texts too, but for one difference: M2M100Tokenizer writes out a language code
        # the model produced inside its output (``__en__``), where tfm drops it as it drops
        # every special token.
        codes = {code_id(variant, lang) for lang in WORDS}
        texts = [t.text for t in translator.translate(lines, options, language=asked)]
        assert texts == variant["tok"].batch_decode(
            [[i for i in row if i not in codes] for row in theirs], skip_special_tokens=True), \
            (src, tgt, beam)


# --- as a user runs it -----------------------------------------------------------------------

def test_tfm_import_then_translate_and_eval_by_the_models_codes(variant: dict,
                                                                  tmp_path: Path) -> None:
    """The command line end to end: imported by ``tfm import``, translated by ``tfm
    translate --source-lang X --target-lang Y`` as the Python API translates, scored by
    ``tfm eval`` with the same languages."""
    codes = CODES[variant["family"]]
    out = tmp_path / "model"
    result = tfm_cli("import", str(variant["hf_dir"]), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "--source-lang" in result.stderr
    lines = [text("en", c) for c in generated(5, 6)]
    result = tfm_cli("translate", "--model", str(out), "--beam", "2", "--source-lang",
                     codes["en"], "--target-lang", codes["fr"], *lines)
    assert result.returncode == 0, result.stderr
    expected = variant["translator"].translate(lines, SearchOptions(beam=2), language=variant[
        "translator"].languages.resolve(codes["fr"], codes["en"]))
    assert result.stdout.splitlines() == [t.text for t in expected]
    (tmp_path / "src.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(text("fr", c) for c in generated(5, 6)) + "\n",
                                      encoding="utf-8")
    result = tfm_cli("eval", "--model", str(out), "--src", str(tmp_path / "src.txt"), "--ref",
                     str(tmp_path / "ref.txt"), "--source-lang", codes["en"], "--target-lang",
                     codes["fr"], "--beam", "2", "--json")
    assert result.returncode == 0, result.stderr
    assert [s["metric"] for s in json.loads(result.stdout)] == ["bleu"]


def assert_one_line_error(result, fragment: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]


def test_both_languages_are_needed_and_an_unknown_code_names_the_nearest(variant: dict
                                                                           ) -> None:
    model, codes = str(variant["tfm"]), CODES[variant["family"]]
    missing = tfm_cli("translate", "--model", model, "--target-lang", codes["de"], "a man")
    assert_one_line_error(missing, "--source-lang is needed")
    missing = tfm_cli("translate", "--model", model, "--source-lang", codes["en"], "a man")
    assert_one_line_error(missing, "--target-lang is needed")
    wrong = "deu_Latm" if variant["family"] == "nllb" else "dee"
    unknown = tfm_cli("translate", "--model", model, "--source-lang", codes["en"],
                      "--target-lang", wrong, "a man")
    assert_one_line_error(unknown, f"--target-lang {wrong}: not a language code of this model")
    assert codes["de"] in unknown.stderr
    unknown = tfm_cli("translate", "--model", model, "--source-lang", "englisch",
                      "--target-lang", codes["de"], "a man")  # neither a code nor a name
    assert_one_line_error(unknown, "--source-lang englisch: not a language code")
    # In Python, the same refusals (a UsageError that each edge words with its option).
    with pytest.raises(UsageError, match="source language is needed"):
        variant["translator"].languages.resolve(codes["de"])


def test_m2m100_codes_may_be_given_as_their_tokens(variant: dict) -> None:
    if variant["family"] != "m2m100":
        pytest.skip("NLLB's tokens are its codes")
    translator = variant["translator"]
    assert translator.languages.resolve("__de__", "__en__") == \
        translator.languages.resolve("de", "en")
    assert translator.languages.targets[:3] == ["af", "am", "ar"]


class Evil:
    """Unpickling this would run a command."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("echo pwned > pwned.txt",))


def _pickle(d: Path) -> None:
    import pickle

    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": Evil()}))


def _config_edit(**values: object):
    def edit(d: Path) -> None:
        config = json.loads((d / "config.json").read_text())
        config.update(values)
        (d / "config.json").write_text(json.dumps(config))
    return edit


def _no_tokenizer(d: Path) -> None:
    for name in ("tokenizer.json", "vocab.json", "sentencepiece.bpe.model"):
        (d / name).unlink(missing_ok=True)


def _extra_weight(d: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(d / "model.safetensors")
    weights["model.encoder.layernorm_embedding.weight"] = torch.ones(4)
    save_file(weights, d / "model.safetensors")


REFUSALS = {
    "not a checkpoint": (lambda d: (d / "config.json").unlink(), "nor an NLLB-200 or M2M100"),
    "NLLB-MoE": (_config_edit(model_type="nllb-moe"), "NLLB-MoE"),
    "unscaled embeddings": (_config_edit(scale_embedding=False), "scale_embedding"),
    "an unknown activation": (_config_edit(activation_function="tanh"), "'tanh'"),
    "other special ids": (_config_edit(decoder_start_token_id=0), "special ids"),
    "no tokenizer files": (_no_tokenizer, "missing tokenizer files"),
    "a pickle that runs code": (_pickle, "would execute code"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "no weights"),
    "weights tfm has no place for": (_extra_weight, "layernorm_embedding"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_tfm_cannot_hold_is_refused_in_one_line_and_nothing_is_written(
        case: str, tmp_path: Path, variant: dict) -> None:
    if variant["name"] != "nllb":
        pytest.skip("one variant is enough")
    checkpoint = Path(shutil.copytree(variant["hf_dir"], tmp_path / "hf"))
    damage, fragment = REFUSALS[case]
    damage(checkpoint)
    result = tfm_cli("import", str(checkpoint), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert_one_line_error(result, fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no pwned.txt, no out


def test_a_hub_cache_snapshot_is_found_from_its_model_directory(variant: dict,
                                                                 tmp_path: Path) -> None:
    """``models--org--name`` as huggingface_hub leaves it: refs/main names the snapshot."""
    from tfm.interop.m2m100_import import snapshot

    if variant["name"] != "nllb":
        pytest.skip("one variant is enough")
    cache = tmp_path / "models--facebook--nllb-standin"
    shutil.copytree(variant["hf_dir"], cache / "snapshots" / "abc123")
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("abc123")
    assert snapshot(cache) == cache / "snapshots" / "abc123"
    result = tfm_cli("import", str(cache), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    _, _, info = load_model_dir(tmp_path / "out")
    assert info.language_marking == variant["info"].language_marking


# --- out again -------------------------------------------------------------------------------

def test_the_ctranslate2_export_translates_as_ctranslate2s_own_converter(
        variant: dict, tmp_path: Path) -> None:
    """``tfm export --to ctranslate2`` of the import against ctranslate2's
    TransformersConverter of the checkpoint itself: the same translations with the same
    scores from CTranslate2, greedy and beam, the target code as the target prefix; and tfm's
    CTranslate2 engine on the export gives tfm's own greedy translations. (ctranslate2 4.8's
    converter cannot convert an M2M100Tokenizer checkpoint of transformers 5: it looks for the
    language codes in ``special_tokens_map``, where transformers 5 no longer lists them, and
    refuses the vocabulary as 100 entries short; the M2M100 variant checks tfm's engine only.)"""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from tfm.decoding.engines import load_translator
    from tfm.interop.ctranslate2 import export_ctranslate2

    ours = export_ctranslate2(variant["tfm"], tmp_path / "tfm-ct2")
    theirs = tmp_path / "converter-ct2"
    converts = variant["family"] == "nllb"
    if converts:
        ctranslate2.converters.TransformersConverter(str(variant["hf_dir"])).convert(
            str(theirs))
    tok, codes = variant["tok"], CODES[variant["family"]]
    for src, tgt in DIRECTIONS:
        lines = [text(src, c) for c in generated(8, 7)]
        tokens = [tok.convert_ids_to_tokens(ids) for ids in hf_source_ids(variant, src, lines)]
        prefix = [[tok_code(variant["family"], tgt)]] * len(lines)
        for beam in (1, 4) if converts else ():
            found = [ctranslate2.Translator(str(d)).translate_batch(
                tokens, target_prefix=prefix, beam_size=beam, max_decoding_length=MAX_NEW,
                return_scores=True) for d in (ours, theirs)]
            assert [r.hypotheses[0] for r in found[0]] == [r.hypotheses[0] for r in found[1]]
            assert [r.scores[0] for r in found[0]] == pytest.approx(
                [r.scores[0] for r in found[1]], abs=1e-4)
        options = SearchOptions(beam=1, max_len_a=0.0, max_len_b=MAX_NEW - 1)
        engine = load_translator(ours, "cpu")
        asked = engine.languages.resolve(codes[tgt], codes[src])
        assert asked == variant["translator"].languages.resolve(codes[tgt], codes[src])
        assert [t.text for t in engine.translate(lines, options, language=asked)] == [
            t.text for t in variant["translator"].translate(lines, options, language=asked)]


def test_the_m2m100_export_is_the_checkpoint_again(variant: dict, tmp_path: Path) -> None:
    """``tfm export --to m2m100``: transformers loads it (its own classes, no network) and
    ``generate`` translates as tfm does; ``tfm import`` of it is the model imported first,
    weights, tokenizer and marking alike."""
    from tfm.interop.m2m100_import import import_m2m100

    out = tmp_path / "hf"
    result = tfm_cli("export", str(variant["tfm"]), "--to", "m2m100", "-o", str(out))
    assert result.returncode == 0, result.stderr
    again = import_m2m100(out, tmp_path / "again")
    model, vocabs, info = load_model_dir(again)
    assert info.model == variant["info"].model
    assert info.language_marking == variant["info"].language_marking
    for name, tensor in variant["model"].state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name
    lines = lines_to_check()
    assert encode_batch(vocabs.src, lines) == encode_batch(variant["vocabs"].src, lines)
    assert vocabs.src.get_vocab() == variant["vocabs"].src.get_vocab()
    # transformers reads the export as it read the checkpoint
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    hf = transformers.M2M100ForConditionalGeneration.from_pretrained(out).eval()
    exported = {**variant, "tok": hf_tok, "hf": hf}
    assert hf_source_ids(exported, "de", lines) == hf_source_ids(variant, "de", lines)
    assert generate(exported, "de", "en", lines[:12], 4) == generate(variant, "de", "en",
                                                                     lines[:12], 4)


# --- fine-tuning -----------------------------------------------------------------------------

def test_fine_tuning_feeds_the_target_code_first_and_keeps_the_models_codes(
        variant: dict, tmp_path: Path) -> None:
    """``tfm prepare`` with the imported tokenizer writes each source as the checkpoint's
    tokenizer does (the source code where the layout puts it), ``tfm train --init-from``
    feeds the decoder ``</s>`` and the target code before the target and learns what follows
    (the code is no label), and the fine-tuned model translates by the same codes."""
    from tfm.data.batching import collate
    from tfm.data.dataset import load_split, read_prepare_info

    codes = CODES[variant["family"]]
    concepts = generated(64, 8)
    for name, part in (("train", concepts[:56]), ("valid", concepts[56:])):
        for lang in ("en", "de"):
            (tmp_path / f"{name}.{codes[lang]}").write_text(
                "".join(text(lang, c) + "\n" for c in part), encoding="utf-8")
    data, out = tmp_path / "data", tmp_path / "tuned"
    result = tfm_cli("prepare", "--train", str(tmp_path / "train"), "--valid",
                     str(tmp_path / "valid"), "--src-lang", codes["en"], "--tgt-lang",
                     codes["de"], "--tokenizer", str(variant["tfm"] / "tokenizer.json"),
                     "-o", str(data))
    assert result.returncode == 0, result.stderr
    split = load_split(data, "train")
    lines = [text("en", c) for c in concepts[:56]]
    assert [fairseq(split.src(i).tolist()) for i in range(4)] == hf_source_ids(
        variant, "en", lines[:4])
    starts = read_prepare_info(data).decoder_starts
    assert starts == [(3, FROM_FAIRSEQ.get(code_id(variant, "de"), code_id(variant, "de")))]
    batch = collate(split, __import__("numpy").arange(2), starts=starts)
    assert batch.tgt_in[:, :2].tolist() == [list(starts[0])] * 2
    assert batch.tgt_out[:, 0].tolist() == [0, 0]  # the code: fed, no label
    assert batch.tgt_out[0, 1:1 + len(split.tgt(0))].tolist() == split.tgt(0).tolist()
    result = tfm_cli("train", "--data", str(data), "--output", str(out), "--init-from",
                     str(variant["tfm"]), "--max-steps", "20", "--warmup", "5", "--lr", "1e-3",
                     "--max-tokens", "1024", "--valid-every", "10")
    assert result.returncode == 0, result.stderr
    _, _, info = load_model_dir(out)
    assert info.language_marking == variant["info"].language_marking
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    valid = [m for m in metrics if m.get("kind") == "valid"]
    assert valid[-1]["loss"] < valid[0]["loss"] and "bleu" in valid[-1]
    result = tfm_cli("translate", "--model", str(out), "--source-lang", codes["en"],
                     "--target-lang", codes["de"], "--beam", "1", lines[0])
    assert result.returncode == 0 and result.stdout.strip(), result.stderr


# --- trimming --------------------------------------------------------------------------------

def test_a_trimmed_model_translates_its_corpus_as_the_full_one(variant: dict,
                                                               tmp_path: Path) -> None:
    """``tfm trim`` to an en/de corpus: far fewer rows, the same tokens for the corpus's text
    (renumbered), the same greedy translations; the codes dropped are refused after;
    exported again, trimmed, it still loads in transformers (NLLB) and CTranslate2."""
    from tfm.decoding.engines import load_translator

    codes = CODES[variant["family"]]
    concepts = generated(40, 9)
    for lang in ("en", "de"):
        (tmp_path / f"corpus.{codes[lang]}").write_text(
            "".join(text(lang, c) + "\n" for c in concepts), encoding="utf-8")
    out = tmp_path / "trimmed"
    result = tfm_cli("trim", str(variant["tfm"]), "-o", str(out), "--corpus",
                     str(tmp_path / f"corpus.{codes['en']}"), "--corpus",
                     str(tmp_path / f"corpus.{codes['de']}"))
    assert result.returncode == 0, result.stderr
    model, vocabs, info = load_model_dir(out)
    full_rows = variant["info"].model.tgt_vocab_size
    assert info.model.tgt_vocab_size < full_rows / 2
    assert info.language_marking.codes == tuple(sorted(
        (codes["en"], codes["de"]), key=variant["info"].language_marking.codes.index))
    assert info.provenance["rows_kept"] == info.model.tgt_vocab_size
    lines = [text("en", c) for c in concepts]
    full, small = variant["translator"], load_translator(out, "cpu")
    for src, tgt in (("en", "de"), ("de", "en")):
        lines = [text(src, c) for c in concepts]
        ours = full.prepare(lines, language=full.languages.resolve(codes[tgt], codes[src]))
        theirs = small.prepare(lines, language=small.languages.resolve(codes[tgt], codes[src]))
        for a, b in zip(ours, theirs):  # the same tokens, by their text
            assert [full.vocabs.src.id_to_token(i) for i in a.ids] == [
                small.vocabs.src.id_to_token(i) for i in b.ids]
        kept = small.vocabs.src.get_vocab()
        # Greedy: where the full model's translation needs no removed entry (a toy model also
        # writes words of the third language, which the trim removed), the same one. (Beam
        # search compares log-probabilities, which the trimmed model normalises over the kept
        # entries only: hypotheses can rank otherwise where the removed ones had mass.)
        for beam in (1,):
            options = SearchOptions(beam=beam, max_len_a=0.0, max_len_b=MAX_NEW - 1)
            found = [full.search([s.ids], options, start=[s.start])[0][0].tokens for s in ours]
            same = [i for i, tokens in enumerate(found)
                    if all(full.vocabs.src.id_to_token(t) in kept for t in tokens)]
            assert len(same) >= len(lines) // 3, (src, tgt, beam)
            chosen = [lines[i] for i in same]
            assert [t.text for t in full.translate(
                chosen, options, language=full.languages.resolve(codes[tgt], codes[src]))] == [
                t.text for t in small.translate(
                    chosen, options, language=small.languages.resolve(codes[tgt], codes[src]))]
    dropped = tfm_cli("translate", "--model", str(out), "--source-lang", codes["en"],
                      "--target-lang", codes["fr"], "a man")
    assert_one_line_error(dropped, f"--target-lang {codes['fr']}: not a language code")
    ct2 = tfm_cli("export", str(out), "--to", "ctranslate2", "-o", str(tmp_path / "ct2"))
    assert ct2.returncode == 0, ct2.stderr
    if variant["family"] == "nllb":
        hf = tfm_cli("export", str(out), "--to", "m2m100", "-o", str(tmp_path / "hf"))
        assert hf.returncode == 0, hf.stderr
        transformers.M2M100ForConditionalGeneration.from_pretrained(tmp_path / "hf")


def test_a_trim_that_would_drop_a_corpus_language_is_refused(variant: dict,
                                                             tmp_path: Path) -> None:
    if variant["name"] != "nllb":
        pytest.skip("one variant is enough")
    corpus = tmp_path / "train.fra_Latn"
    corpus.write_text("un chien\n", encoding="utf-8")
    result = tfm_cli("trim", str(variant["tfm"]), "-o", str(tmp_path / "out"), "--corpus",
                     str(corpus), "--languages", "eng_Latn,deu_Latn")
    assert_one_line_error(result, "a corpus in fra_Latn, which --languages drops")
    result = tfm_cli("trim", str(variant["tfm"]), "-o", str(tmp_path / "out"), "--corpus",
                     str(corpus), "--languages", "eng_Latn,klingon")
    assert_one_line_error(result, "--languages klingon: not a language code")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.fra_Latn"]


def test_a_trim_to_languages_without_a_corpus_is_refused(variant: dict, tmp_path: Path
                                                         ) -> None:
    """A language code says nothing of the words its language uses (the vocabulary is shared
    by all of them): ``--languages`` without ``--corpus`` (or a corpus without text) would
    keep the specials and the codes only, a model that translates everything into nothing.
    Refused in one line, nothing written."""
    codes = CODES[variant["family"]]
    out = tmp_path / "out"
    result = tfm_cli("trim", str(variant["tfm"]), "-o", str(out), "--languages",
                     ",".join(codes[lang] for lang in ("en", "de", "fr")))
    assert_one_line_error(result, "--corpus: give the text whose entries to keep")
    empty = tmp_path / f"train.{codes['en']}"
    empty.write_text("\n\n", encoding="utf-8")
    result = tfm_cli("trim", str(variant["tfm"]), "-o", str(out), "--corpus", str(empty))
    assert_one_line_error(result, "no text to keep the entries of")
    assert sorted(p.name for p in tmp_path.iterdir()) == [empty.name]


def test_an_added_language_starts_as_the_one_it_is_like(variant: dict, tmp_path: Path) -> None:
    """``tfm add-language``: a new code, its embedding a copy of --like's, translates as that
    language did before any fine-tuning; prepare takes corpora in it; a code the model has
    already, or a --like it lacks, is refused in one line."""
    from tfm.data.dataset import read_prepare_info
    from tfm.decoding.engines import load_translator

    codes = CODES[variant["family"]]
    new = "qqq_Latn" if variant["family"] == "nllb" else "qq"
    out = tmp_path / "grown"
    result = tfm_cli("add-language", str(variant["tfm"]), new, "--like", codes["fr"], "-o",
                     str(out))
    assert result.returncode == 0, result.stderr
    grown = load_translator(out, "cpu")
    assert new in grown.languages.targets
    assert grown.info.model.tgt_vocab_size == variant["info"].model.tgt_vocab_size + 1
    lines = [text("en", c) for c in generated(12, 10)]
    options = SearchOptions(beam=1, max_len_a=0.0, max_len_b=MAX_NEW - 1)
    old = variant["translator"]
    assert [t.text for t in grown.translate(
        lines, options, language=grown.languages.resolve(new, codes["en"]))] == [
        t.text for t in old.translate(
            lines, options, language=old.languages.resolve(codes["fr"], codes["en"]))]
    (tmp_path / f"train.{codes['en']}").write_text("a man\n", encoding="utf-8")
    (tmp_path / f"train.{new}").write_text("un homme\n", encoding="utf-8")
    result = tfm_cli("prepare", "--train", str(tmp_path / "train"), "-s", codes["en"], "-t", new,
                     "--tokenizer", str(out / "tokenizer.json"), "-o", str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    assert read_prepare_info(tmp_path / "data").decoder_starts == [  # </s>, then the code
        (3, grown.vocabs.tgt.token_to_id(grown.languages.resolve(new, codes["en"]).token))]
    again = tfm_cli("add-language", str(out), new, "--like", codes["fr"], "-o",
                    str(tmp_path / "again"))
    assert_one_line_error(again, "has this language code already")
    unknown = tfm_cli("add-language", str(variant["tfm"]), new, "--like", "klingon", "-o",
                      str(tmp_path / "again"))
    assert_one_line_error(unknown, "--like klingon: not a language code")


def test_the_server_takes_both_languages_and_lists_them(variant: dict) -> None:
    """``tfm serve``: /v1/info lists the model's codes as source_languages and
    target_languages; a request names both (source_lang, target_lang) and is translated as
    tfm translate does; one without source_lang, or with an unknown code, is a 422 naming it."""
    pytest.importorskip("httpx")
    import local_http
    from test_serve import serving

    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    if variant["name"] != "m2m100":
        pytest.skip("one variant is enough")
    codes = CODES[variant["family"]]
    app = create_app(variant["translator"], ServeConfig(max_wait_ms=0))
    lines = [text("en", c) for c in generated(3, 11)]
    with serving(app) as url:
        info = local_http.get(f"{url}/v1/info").json()
        assert info["source_languages"] == info["target_languages"] == sorted(
            variant["info"].language_marking.codes)
        answer = local_http.post(f"{url}/v1/translate", json={
            "text": lines, "source_lang": codes["en"], "target_lang": codes["de"],
            "beam": 1, "split": False})
        assert answer.status_code == 200, answer.text
        expected = variant["translator"].translate(
            lines, SearchOptions(beam=1),
            language=variant["translator"].languages.resolve(codes["de"], codes["en"]))
        assert [t["text"] for t in answer.json()["translations"]] == [t.text for t in expected]
        missing = local_http.post(f"{url}/v1/translate", json={"text": "a man",
                                                          "target_lang": codes["de"]})
        assert missing.status_code == 422 and "source_lang is needed" in missing.text
        unknown = local_http.post(f"{url}/v1/translate", json={
            "text": "a man", "source_lang": "xx", "target_lang": codes["de"]})
        assert unknown.status_code == 422 and "source_lang xx" in unknown.text


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="no Chromium to drive the page: apt-get install -y chromium")
def test_the_page_asks_for_both_languages_and_translates(variant: dict) -> None:
    """The server's page in a headless Chromium: with a model of language codes it shows a
    source chooser beside the target one, refuses to send without a source, and shows the
    translation of the direction chosen."""
    from test_serve import serving
    from test_serve_page import ARGS, CHROMIUM, open_page, translate_in_page

    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    if variant["name"] != "nllb":
        pytest.skip("one variant is enough")
    from playwright.sync_api import sync_playwright

    codes = CODES[variant["family"]]
    line = text("en", generated(1, 12)[0])
    translator = variant["translator"]
    expected = translator.translate([line], translator.default_options(),
                                    language=translator.languages.resolve(
                                        codes["de"], codes["en"]))[0].text
    with sync_playwright() as playwright, serving(
            create_app(variant["translator"], ServeConfig())) as url:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        posts: list = []
        page = open_page(browser, url + "/", posts=posts)
        assert page.is_visible("#source-box") and page.is_visible("#target-box")
        page.fill("#target-lang", codes["de"])
        translate_in_page(page, line)  # no source picked: the server identifies it, or says
        assert "source_lang" not in posts[-1]  # it took the model's (never the page's guess)
        page.fill("#source-choice", codes["en"])
        assert translate_in_page(page, line) == expected
        assert posts[-1] == {"text": line, "target_lang": codes["de"],
                             "source_lang": codes["en"]}
        browser.close()
