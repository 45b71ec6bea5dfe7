"""Specification of the MarianMT export (tfm.interop.marian): Hugging Face Transformers loads
the exported directory with AutoTokenizer and AutoModelForSeq2SeqLM, offline and with no custom
code, and then encodes, scores and translates as tfm does; what Marian cannot express is
refused and nothing is left half-written."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import PAIRS
from tokenizers import Tokenizer

from tfm.checkpoint import load_model_dir, save_model_dir
from tfm.config import GenerationDefaults, ModelConfig, SearchOptions
from tfm.data.text import normalize_text
from tfm.data.tokenizer import Vocabularies, decode, encode_batch
from tfm.decoding.search import beam_search, greedy_search
from tfm.errors import ModelError, UsageError
from tfm.interop.common import read_export_info
from tfm.interop.marian import export_marian
from tfm.interop.marian_layout import residual_permutation
from tfm.model import Transformer
from tfm.model.layers import sinusoidal_positions
from tfm.model_info import ModelInfo
from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

MAX_NEW = 40  # output tokens, EOS included, for both tfm and generate()

# Unseen recombinations of the training vocabulary: the model is unsure of these, so greedy
# and beam search disagree and the scores matter.
NOVEL = [
    "A woman is walking her dog on the beach .",
    "Two children are reading a book in the kitchen .",
    "The old man is eating an apple on the bench .",
    "A dog is sleeping in the garden .",
    "The girl is playing the guitar .",
    "Three men are waiting for the boat .",
]


def small_config(vocab: int, **overrides: object) -> ModelConfig:
    values: dict[str, object] = dict(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4, encoder_layers=2,
        decoder_layers=2, d_ff=64, dropout=0.0, max_positions=64)
    values.update(overrides)
    return ModelConfig(**values)  # type: ignore[arg-type]


def padded(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def trained_model(tok: Tokenizer, steps: int = 100) -> Transformer:
    """A small model fitted to the 40 conftest pairs: real, confident outputs on them and
    uncertain ones on unseen sentences."""
    torch.manual_seed(0)
    vocab = tok.get_vocab_size()
    model = Transformer(small_config(vocab))
    src = encode_batch(tok, [s for s, _ in PAIRS])
    tgt = encode_batch(tok, [t for _, t in PAIRS])
    s = padded([x + [EOS_ID] for x in src])
    t_in, t_out = padded([[BOS_ID, *y] for y in tgt]), padded([[*y, EOS_ID] for y in tgt])
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, fused=True)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(
            model(s, t_in).view(-1, vocab), t_out.view(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny matrices: one thread is fastest, and the CPU is shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer) -> Path:
    """A trained model directory whose generation defaults are beam 4 without length
    normalisation (the settings under which both beam searches provably agree)."""
    directory = tmp_path_factory.mktemp("tfm") / "model"
    info = ModelInfo(small_config(tokenizer.get_vocab_size()), src_lang="en", tgt_lang="de",
                     generation=GenerationDefaults(beam=4, length_penalty=0.0))
    save_model_dir(directory, trained_model(tokenizer), tokenizer, info)
    return directory


@pytest.fixture(scope="module")
def exported(model_dir: Path) -> Path:
    return export_marian(model_dir, model_dir.parent / "marian")


@pytest.fixture(scope="module")
def hf(exported: Path) -> Iterator[tuple[object, object]]:
    """(tokenizer, model) as Transformers loads them from the export, offline."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        transformers = pytest.importorskip("transformers")
        tok = transformers.AutoTokenizer.from_pretrained(exported)
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
        yield tok, model


@pytest.fixture(scope="module")
def tfm_model(model_dir: Path) -> tuple[Transformer, Vocabularies]:
    model, vocabs, _ = load_model_dir(model_dir)
    return model, vocabs


def generated(sequences: torch.Tensor) -> list[list[int]]:
    """generate()'s rows without the start token, up to EOS (excluded); finished rows are
    padded after EOS."""
    out = []
    for row in sequences.tolist():
        row = row[1:]
        out.append(row[: row.index(EOS_ID)] if EOS_ID in row else row)
    return out


SOURCES = [s for s, _ in PAIRS[:8]] + NOVEL


# --- what is written -------------------------------------------------------------------------

def test_the_export_is_a_marian_directory_with_its_provenance(exported: Path,
                                                             model_dir: Path) -> None:
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "tfm_export.json"} <= names
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "marian" and config["architectures"] == ["MarianMTModel"]
    assert config["activation_function"] == "relu" and config["scale_embedding"] is True
    assert config["decoder_start_token_id"] == BOS_ID
    info = read_export_info(exported)
    assert info is not None and info["format"] == "marian"
    assert info["source_model"] == model_dir.name and info["tgt_lang"] == "de"


def test_generation_config_starts_from_bos_and_suppresses_pad_unk_bos(exported: Path) -> None:
    g = json.loads((exported / "generation_config.json").read_text())
    assert g["decoder_start_token_id"] == BOS_ID and g["eos_token_id"] == EOS_ID
    assert g["pad_token_id"] == PAD_ID and g["forced_eos_token_id"] == EOS_ID
    assert set(g["suppress_tokens"]) == {PAD_ID, UNK_ID, BOS_ID}
    assert g["num_beams"] == 4 and g["length_penalty"] == 0.0  # the model's defaults


def test_the_permuted_positional_table_is_marians(exported: Path) -> None:
    """tfm interleaves sines and cosines; Marian puts the sines first: the permutation maps one
    onto the other, for odd widths too."""
    for d in (32, 15):
        table = sinusoidal_positions(50, d)[:, residual_permutation(d)]
        half = (d + 1) // 2
        pos = torch.arange(50, dtype=torch.float64)[:, None]
        freq = torch.pow(10000.0, 2 * torch.arange(half, dtype=torch.float64) / d)
        assert torch.allclose(table[:, :half], torch.sin(pos / freq).float(), atol=1e-6)
        assert torch.allclose(table[:, half:], torch.cos(pos / freq[: d // 2]).float(),
                              atol=1e-6)


def test_exporting_needs_no_transformers(model_dir: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # any import of it fails
    out = export_marian(model_dir, tmp_path / "out")
    assert (out / "model.safetensors").is_file()


# --- Transformers loads it and agrees with tfm -----------------------------------------------

def test_transformers_loads_every_weight_with_none_missing_or_left_over(exported: Path,
                                                                        hf) -> None:
    from transformers import AutoModelForSeq2SeqLM

    _, info = AutoModelForSeq2SeqLM.from_pretrained(exported, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    tok, _ = hf
    assert tok.is_fast


def test_the_tokenizer_normalises_and_encodes_as_tfm_does(hf, tfm_model) -> None:
    tok, _ = hf
    _, vocabs = tfm_model
    texts = [*SOURCES, "  A\tman\u00a0 is\u3000walking .  ", "Tab\u200bs\ufeff and\x00 NUL\x07 .",
             "Cafe\u0301 cre\u0300me \u200c\u200d", "line\nbreak\u2028here\x85.", "\u00a0", "",
             "A literal </s> and <s> or <pad> is text ."]
    for text in texts:
        expected = encode_batch(vocabs.src, [normalize_text(text)])[0] + [EOS_ID]
        assert tok(text)["input_ids"] == expected, repr(text)


def test_the_tokenizer_decodes_any_ids_to_tfm_text(hf, tfm_model) -> None:
    """Special tokens dropped, the text stripped at its ends only, whatever the ids (random
    byte-level tokens include line breaks, tabs and broken UTF-8)."""
    tok, _ = hf
    _, vocabs = tfm_model
    g = torch.Generator().manual_seed(0)
    vocab = vocabs.tgt.get_vocab_size()
    rows = [torch.randint(0, vocab, (int(n),), generator=g).tolist()
            for n in torch.randint(1, 30, (200,), generator=g)]
    rows += [[vocabs.tgt.token_to_id(t) for t in ("Ġ", "Ċ", "Ġ", "a", "Ċ", "Ġ", "b", "ĉ")]]
    assert tok.batch_decode(rows, skip_special_tokens=True) == \
        [decode(vocabs.tgt, row) for row in rows]


def test_forced_target_log_probs_agree_within_1e_4(hf, tfm_model) -> None:
    tok, hf_model = hf
    model, vocabs = tfm_model
    sources = [s for s, _ in PAIRS[:6]] + NOVEL[:3]
    targets = [t for _, t in PAIRS[6:15]]  # other sentences: unlikely targets, varied scores
    enc = tok(sources, return_tensors="pt", padding=True)
    tgt_in = padded([[BOS_ID, *y] for y in encode_batch(vocabs.tgt, targets)])
    with torch.no_grad():
        ours = torch.log_softmax(model(enc["input_ids"], tgt_in), dim=-1)
        theirs = torch.log_softmax(hf_model(**enc, decoder_input_ids=tgt_in).logits, dim=-1)
    real = tgt_in != PAD_ID
    real[:, 0] = True
    assert (ours - theirs)[real].abs().max().item() < 1e-4


def test_the_model_saved_again_by_transformers_still_agrees(hf, tfm_model,
                                                            tmp_path: Path) -> None:
    """save_pretrained drops the positional tables and from_pretrained rebuilds them with
    Marian's own formula: the export's permuted residual axis must match that formula."""
    from transformers import AutoModelForSeq2SeqLM

    tok, hf_model = hf
    model, vocabs = tfm_model
    hf_model.save_pretrained(tmp_path / "again")
    again = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "again").eval()
    rebuilt = again.model.encoder.embed_positions.weight
    assert torch.equal(rebuilt, again.model.encoder.embed_positions.create_weight())
    assert torch.allclose(rebuilt, hf_model.model.encoder.embed_positions.weight, atol=1e-6)
    enc = tok(NOVEL, return_tensors="pt", padding=True)
    tgt_in = padded([[BOS_ID, *y] for y in encode_batch(vocabs.tgt, [t for _, t in PAIRS[:6]])])
    with torch.no_grad():
        ours = torch.log_softmax(model(enc["input_ids"], tgt_in), dim=-1)
        theirs = torch.log_softmax(again(**enc, decoder_input_ids=tgt_in).logits, dim=-1)
    assert (ours - theirs)[tgt_in != PAD_ID].abs().max().item() < 1e-4


def test_greedy_search_gives_tfm_tokens_and_text(hf, tfm_model) -> None:
    tok, hf_model = hf
    model, vocabs = tfm_model
    enc = tok(SOURCES, return_tensors="pt", padding=True)
    ours = greedy_search(model, enc["input_ids"],
                         SearchOptions(beam=1, max_len_a=0.0, max_len_b=MAX_NEW))
    with torch.no_grad():
        theirs = hf_model.generate(**enc, num_beams=1, max_new_tokens=MAX_NEW)
    assert [h[0].tokens for h in ours] == generated(theirs)
    assert tok.batch_decode(theirs, skip_special_tokens=True) == \
        [decode(vocabs.tgt, h[0].tokens) for h in ours]
    assert [h[0].tokens for h in ours][:8] == encode_batch(vocabs.tgt, [t for _, t in PAIRS[:8]])


@pytest.mark.parametrize("stop_early", [True, False])
def test_beam_search_with_the_exported_settings_gives_tfm_hypotheses(hf, tfm_model,
                                                                      stop_early: bool) -> None:
    """Beam 4 without length normalisation (the model's defaults, exported): the same best
    hypothesis with the same score, whether tfm stops once the best has ended or waits for
    the whole beam, for every sentence that ends before the length limit."""
    tok, hf_model = hf
    model, _ = tfm_model
    enc = tok(SOURCES, return_tensors="pt", padding=True)
    ours = beam_search(model, enc["input_ids"],
                       SearchOptions(beam=4, length_penalty=0.0, max_len_a=0.0, max_len_b=MAX_NEW,
                                     stop_early=stop_early))
    with torch.no_grad():
        theirs = hf_model.generate(**enc, max_new_tokens=MAX_NEW, output_scores=True,
                                   return_dict_in_generate=True)
    # At the length limit both force EOS, but generate() scores it 0 (see tfm.interop.marian).
    kept = [i for i, h in enumerate(ours) if len(h[0].tokens) + 1 < MAX_NEW]
    assert len(kept) >= len(SOURCES) - 2
    theirs_tokens = generated(theirs.sequences)
    assert [ours[i][0].tokens for i in kept] == [theirs_tokens[i] for i in kept]
    assert torch.allclose(torch.tensor([ours[i][0].score for i in kept]),
                          theirs.sequences_scores[kept], atol=1e-4)
    greedy = greedy_search(model, enc["input_ids"],
                           SearchOptions(beam=1, max_len_a=0.0, max_len_b=MAX_NEW))
    assert any(ours[i][0].tokens != greedy[i][0].tokens for i in kept)  # beam did matter


def test_generate_never_emits_pad_unk_or_bos_even_when_the_model_prefers_them(hf) -> None:
    tok, hf_model = hf
    enc = tok(NOVEL[:2], return_tensors="pt", padding=True)
    bias = hf_model.final_logits_bias.clone()
    try:
        with torch.no_grad():
            hf_model.final_logits_bias[0, [PAD_ID, UNK_ID, BOS_ID]] = 50.0
            for beams in (1, 4):
                out = hf_model.generate(**enc, num_beams=beams, max_new_tokens=8)
                body = out[:, 1:]
                assert not torch.isin(body, torch.tensor([UNK_ID, BOS_ID])).any()
                for row in body.tolist():  # padding only after the end
                    end = row.index(EOS_ID) if EOS_ID in row else len(row)
                    assert PAD_ID not in row[:end]
    finally:
        hf_model.final_logits_bias.copy_(bias)


@pytest.mark.parametrize("overrides", [
    dict(share_embeddings=False, tie_output=True),
    dict(share_embeddings=True, tie_output=False),
    dict(share_embeddings=False, tie_output=False),
    dict(d_model=30, n_heads=3),  # an odd number of dimensions per half of the table
])
def test_untied_and_odd_sized_models_score_alike(tmp_path: Path, tokenizer: Tokenizer,
                                                 overrides: dict[str, object]) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    config = small_config(tokenizer.get_vocab_size(), encoder_layers=1, decoder_layers=1,
                          **overrides)
    model = Transformer(config).eval()
    with torch.no_grad():  # untied weights start equal to their twins: make them differ
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    save_model_dir(tmp_path / "m", model, tokenizer, ModelInfo(config))
    out = export_marian(tmp_path / "m", tmp_path / "hf")
    hf_model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    src = padded([[5, 9, 40, EOS_ID], [7, 8, 9, 10, 11, EOS_ID]])
    tgt_in = padded([[BOS_ID, 12, 13, 14], [BOS_ID, 20]])
    with torch.no_grad():
        ours = torch.log_softmax(model(src, tgt_in), -1)
        theirs = torch.log_softmax(hf_model(input_ids=src, attention_mask=src != PAD_ID,
                                            decoder_input_ids=tgt_in).logits, -1)
    real = tgt_in != PAD_ID
    assert (ours - theirs)[real].abs().max().item() < 1e-4


# --- refusals --------------------------------------------------------------------------------

def test_a_directory_that_is_not_a_model_is_refused_and_nothing_is_written(
        tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    with pytest.raises(ModelError, match="not a tfm model directory"):
        export_marian(tmp_path / "notes", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_pre_norm_model_is_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    config = small_config(tokenizer.get_vocab_size(), norm_first=True)
    save_model_dir(tmp_path / "m", Transformer(config), tokenizer, ModelInfo(config))
    with pytest.raises(UsageError, match="pre-norm"):
        export_marian(tmp_path / "m", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_separate_vocabularies_are_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    from tfm.data.tokenizer import train_tokenizer

    tgt = train_tokenizer([t for _, t in PAIRS], vocab_size=280)
    config = small_config(tokenizer.get_vocab_size(), tgt_vocab_size=tgt.get_vocab_size(),
                          share_embeddings=False, tie_output=True)
    save_model_dir(tmp_path / "m", Transformer(config), Vocabularies(tokenizer, tgt),
                   ModelInfo(config))
    with pytest.raises(UsageError, match="separate source and target vocabularies"):
        export_marian(tmp_path / "m", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_kept_unless_overwrite_is_given(model_dir: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(UsageError, match="already exists"):
        export_marian(model_dir, out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    export_marian(model_dir, out, overwrite=True)
    assert not (out / "mine.txt").exists() and (out / "model.safetensors").is_file()


def test_the_model_directory_itself_is_never_the_output(model_dir: Path) -> None:
    for output in (model_dir, model_dir.parent):
        with pytest.raises(UsageError, match="model directory being exported"):
            export_marian(model_dir, output, overwrite=True)
    assert (model_dir / "model.safetensors").is_file()


def test_a_failure_midway_leaves_nothing_behind(model_dir: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import tfm.interop.marian as marian

    def broken(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(marian, "marian_tokenizer", broken)
    with pytest.raises(OSError):
        export_marian(model_dir, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
