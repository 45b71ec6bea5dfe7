"""The levers of a multilingual model against zero-shot off-target output (tfm.training.
multilingual, ModelConfig.drop_residual_layer, `tfm prepare --language-token`), on the toy
multi-way corpus of tests/toy_languages.py, whose three languages share no letter: a text is in
a language exactly when its words are that language's."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tfm
from safetensors.torch import load_file
from test_bad_inputs import refused
from test_multilingual import DIRECTIONS, ok, prepared_toy, run_config
from toy_languages import lexicon

from tfm.checkpoint import load_model_dir
from tfm.config import ModelConfig, TrainConfig
from tfm.data.batching import collate
from tfm.data.dataset import load_split, read_prepare_info
from tfm.data.directions import Direction
from tfm.data.language_marks import LanguageMarking, ModelLanguages, ResolvedLanguage, mark
from tfm.data.tokenizer import decode_batch, load_vocabularies
from tfm.errors import UsageError
from tfm.model import Transformer
from tfm.special_tokens import BOS_ID, EOS_ID
from tfm.training.loop import resume, train
from tfm.training.multilingual import BackTranslator, LanguageLoss
from tfm.training.state import Overrides

PAIRS = [Direction.parse(d) for d in DIRECTIONS]
TOY_TAGS = {">>aa<<": 5, ">>bb<<": 6, ">>cc<<": 7}


def toy_languages(where: str = "source_tag", ids: dict[str, int] = TOY_TAGS) -> ModelLanguages:
    """The languages of a toy model whose tags are ``ids`` and marked as ``where`` says."""
    return ModelLanguages(LanguageMarking(where), tuple(sorted(ids)), ids.get, ids.get)


TINY = ModelConfig(d_model=32, n_heads=2, encoder_layers=2, decoder_layers=1, d_ff=64,
                   dropout=0.0)
SHORT = TrainConfig(max_tokens=1024, max_steps=24, warmup_steps=4, valid_every=10**6,
                    valid_bleu=False, save_every=10**6, keep_last=0, precision="fp32",
                    device="cpu")


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy corpus, its tokenizer (with >>aa<< >>bb<< >>cc<<) and the data prepared with
    the tag before the source (the default), as tests/test_multilingual.py has them."""
    root = tmp_path_factory.mktemp("levers")
    prepared_toy(root)
    return root


@pytest.fixture(scope="module")
def trained(toy: Path) -> Path:
    """A model of the four directions that translates them well enough to back-translate."""
    model = ModelConfig(d_model=64, n_heads=4, encoder_layers=1, decoder_layers=2, d_ff=128,
                        dropout=0.0)
    config = replace(SHORT, max_steps=170, lr=5e-3, warmup_steps=30, lr_schedule="linear")
    train(toy / "data", toy / "trained", model, config)
    return toy / "trained"


def words_of(text: str) -> set[str]:
    return set(text.split())


def language_of(text: str) -> str | None:
    """The toy language all of ``text``'s words belong to, or None."""
    for lang in ("aa", "bb", "cc"):
        if text.split() and words_of(text) <= set(lexicon(lang)):
            return lang
    return None


# --- the residual switch ------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_the_residual_switch_removes_one_encoder_layers_attention_residual_only(
        norm_first: bool) -> None:
    config = replace(TINY, encoder_layers=3, norm_first=norm_first)
    torch.manual_seed(0)
    plain = Transformer(config).eval()
    torch.manual_seed(0)
    dropped = Transformer(replace(config, drop_residual_layer=2)).eval()
    assert [layer.attention_residual for layer in dropped.encoder_layers] == [True, False, True]
    dropped.load_state_dict(plain.state_dict())  # the same parameters: none is added
    x = torch.randn(2, 5, config.d_model)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    for layer_plain, layer_dropped, residual in zip(plain.encoder_layers,
                                                    dropped.encoder_layers, [1, 0, 1]):
        with torch.no_grad():
            norm = layer_dropped.self_attn_layer_norm
            h = norm(x) if norm_first else x
            attended = layer_dropped.self_attention(h, mask)
            after = residual * x + attended
            after = after if norm_first else norm(after)
            final = layer_dropped.final_layer_norm
            ffn_in = final(after) if norm_first else after
            expected = after + layer_dropped.ffn(ffn_in)
            expected = expected if norm_first else final(expected)
            assert torch.allclose(layer_dropped(x, mask), expected, atol=1e-6)
            same = torch.allclose(layer_plain(x, mask), layer_dropped(x, mask))
            assert same == bool(residual)
    with pytest.raises(UsageError, match="--drop-residual-layer 4: the encoder has 3 layers"):
        replace(config, drop_residual_layer=4)


def test_a_model_without_the_residual_keeps_it_and_the_exports_refuse_it(
        toy: Path, tmp_path: Path) -> None:
    out = tmp_path / "model"
    ok(tfm("train", "--config", str(run_config(toy)), "-o", str(out), "--max-steps", "20",
           "--drop-residual-layer", "1", "--encoder-layers", "2"))
    info = json.loads((out / "config.json").read_text())
    assert info["format_version"] == 4 and info["model"]["drop_residual_layer"] == 1
    ok(tfm("translate", "--model", str(out), "--target-lang", "bb", "paku titu"))
    refused(tfm("export", str(out), "--to", "ctranslate2", "-o", str(tmp_path / "c")),
            4, "drop_residual_layer")
    refused(tfm("export", str(out), "--to", "marian", "-o", str(tmp_path / "m")), 2,
            "--drop-residual-layer")
    # Without the switch a model is written in the format it was before.
    plain = json.loads((toy / "data" / "prepare.json").read_text())
    assert "language_marking" not in plain


# --- the language loss --------------------------------------------------------------------

def test_the_language_loss_is_the_cross_entropy_of_the_tags_logits_at_every_position() -> None:
    loss = LanguageLoss(0.5, toy_languages(), PAIRS)
    torch.manual_seed(0)
    tgt_out = torch.tensor([[9, 9, EOS_ID], [9, EOS_ID, 0]])  # row 1 has one padding position
    logits = torch.randn(int((tgt_out != 0).sum()), 12)  # (N, V): the real positions
    from tfm.data.batching import Batch

    batch = Batch(tgt_out, tgt_out, tgt_out, torch.tensor([0, 3]))  # aa-bb, cc-aa
    labels = torch.tensor([1, 1, 1, 0, 0])  # bb thrice, then aa twice
    expected = 0.5 * torch.nn.functional.cross_entropy(logits[:, [5, 6, 7]], labels,
                                                       reduction="sum")
    assert torch.allclose(loss(logits, batch), expected)


def test_the_language_loss_changes_the_training_and_a_bilingual_run_refuses_it(
        toy: Path, tmp_path: Path) -> None:
    plain = train(toy / "data", tmp_path / "plain", TINY, SHORT)
    aux = train(toy / "data", tmp_path / "aux", TINY, replace(SHORT, language_loss=1.0))
    assert plain.step == aux.step == 24
    a = load_file(tmp_path / "plain" / "last.safetensors")
    b = load_file(tmp_path / "aux" / "last.safetensors")
    assert not all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(UsageError, match="--language-loss needs several target languages"):
        LanguageLoss(1.0, toy_languages(), [Direction("aa", "bb"), Direction("cc", "bb")])


# --- online back-translation --------------------------------------------------------------

def test_back_translated_pairs_are_in_the_language_asked_and_as_the_model_translates(
        toy: Path, trained: Path) -> None:
    """A model of source tags: the third language is asked by the tag before the source."""
    back_translations_are_the_models_own(toy / "data", trained)


def back_translations_are_the_models_own(data: Path, model_dir: Path) -> None:
    """Online back-translation of 200 rows, with the model in ``model_dir`` trained on the
    toy directions prepared in ``data`` (marked as its prepare.json says): each row of a
    direction from aa, the only source translated into two languages, is translated into the
    third language, exactly as the model translates it into that language (greedy `tfm
    translate --target-lang`: the source marked and the decoder started as that language
    asks), and paired with its own target, marked as its own direction."""
    prep = read_prepare_info(data)
    split = load_split(data, "train")
    vocabs = load_vocabularies(data / "tokenizer.json")
    languages = ModelLanguages.of(vocabs, prep.language_marking)
    bt = BackTranslator(languages, PAIRS, seed=1)
    model = load_model_dir(model_dir)[0]
    rows = np.arange(0, len(split.directions), len(split.directions) // 200)[:200]  # all four
    made = bt.batch(model.train(), split, rows, step=7, device=torch.device("cpu"))
    assert model.training  # its mode restored
    hub = [int(i) for i in rows if PAIRS[split.directions[i]].src == "aa"]
    assert made is not None and made.src.size(0) == len(hub)  # aa-bb and aa-cc rows only
    third = {"aa-bb": "cc", "aa-cc": "bb"}
    decoded, asked = [], []
    for k, i in enumerate(hub):
        direction = PAIRS[split.directions[i]]
        own = languages.direction(direction)  # how the row's own direction is marked
        src = [t for t in made.src[k].tolist() if t != 0]
        assert src == own.source_ids(own.text_ids(src))  # its own tag (if any), then EOS
        fed = len(own.start) - 1
        assert made.tgt_in[k, :len(own.start)].tolist() == list(own.start)
        assert made.tgt_out[k].tolist()[fed:fed + len(split.tgt(i))] == split.tgt(i).tolist()
        assert made.directions[k] == split.directions[i]
        decoded.append(decode_batch(vocabs.tgt, [own.text_ids(src)])[0])
        asked.append((i, third[direction.name]))
    in_third = sum(language_of(text) == lang for text, (_, lang) in zip(decoded, asked))
    assert in_third >= 0.9 * len(hub), (in_third, len(hub))
    # Each back-translation is the model's own greedy translation into that language.
    for lang in ("bb", "cc"):
        mine = [(text, i) for text, (i, want) in zip(decoded, asked) if want == lang]
        sources = decode_batch(vocabs.src, [languages.direction(PAIRS[split.directions[i]])
                                            .text_ids(split.src(i)) for _, i in mine])
        out = ok(tfm("translate", "--model", str(model_dir), "--beam", "1", "--target-lang",
                     lang, stdin="".join(s + "\n" for s in sources)))
        assert out.splitlines() == [text for text, _ in mine]
    # The draws come from (seed, step): the same step draws the same, a resumed run too.
    again = bt.batch(model, split, rows, step=7, device=torch.device("cpu"))
    assert torch.equal(made.src, again.src)


def test_a_run_resumed_across_the_back_translation_phase_is_bit_exact(
        toy: Path, tmp_path: Path) -> None:
    config = replace(SHORT, online_bt_from=12)
    straight = train(toy / "data", tmp_path / "straight", TINY, config)
    train(toy / "data", tmp_path / "resumed", TINY, replace(config, max_steps=8))
    resume(toy / "data", tmp_path / "resumed", Overrides.of(config, "max_steps"))
    without = train(toy / "data", tmp_path / "without", TINY, SHORT)
    assert straight.step == without.step == 24
    a = load_file(tmp_path / "straight" / "last.safetensors")
    b = load_file(tmp_path / "resumed" / "last.safetensors")
    c = load_file(tmp_path / "without" / "last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)  # the phase trained on something


def test_a_run_trained_without_the_phase_takes_it_on_resume_as_if_asked_from_the_start(
        toy: Path, tmp_path: Path) -> None:
    config = replace(SHORT, online_bt_from=12)
    straight = train(toy / "data", tmp_path / "straight", TINY, config)
    train(toy / "data", tmp_path / "added", TINY, replace(SHORT, max_steps=8))  # no phase
    resume(toy / "data", tmp_path / "added", Overrides.of(config, "max_steps", "online_bt_from"))
    assert straight.step == 24
    a = load_file(tmp_path / "straight" / "last.safetensors")
    b = load_file(tmp_path / "added" / "last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    saved = json.loads((tmp_path / "added" / "train_config.json").read_text())
    assert saved["online_bt_from"] == 12  # recorded: a later resume keeps the phase
    # Once the phase has begun it stays; and it cannot begin in steps already trained.
    with pytest.raises(UsageError, match="its phase began at step 12"):
        resume(toy / "data", tmp_path / "added",
               Overrides.of(replace(config, max_steps=30, online_bt_from=20), "max_steps",
                            "online_bt_from"))
    train(toy / "data", tmp_path / "late", TINY, replace(SHORT, max_steps=8))
    with pytest.raises(UsageError, match="the run being resumed is at step 8"):
        resume(toy / "data", tmp_path / "late",
               Overrides.of(replace(config, online_bt_from=4), "max_steps", "online_bt_from"))


def test_a_share_of_the_budget_places_the_phase_as_its_step_would(
        toy: Path, tmp_path: Path) -> None:
    by_step = train(toy / "data", tmp_path / "step", TINY, replace(SHORT, online_bt_from=12))
    by_share = train(toy / "data", tmp_path / "share", TINY, replace(SHORT, online_bt_share=0.5))
    assert by_step.step == by_share.step == 24
    a = load_file(tmp_path / "step" / "last.safetensors")
    b = load_file(tmp_path / "share" / "last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)  # the last half of 24 steps: from 12
    for wrong, why in ((dict(online_bt_from=12, online_bt_share=0.5), "give one"),
                       (dict(online_bt_share=1.5), "from 0 to 1"),
                       (dict(online_bt_share=0.5, max_steps=0, patience=3), "give --max-steps")):
        with pytest.raises(UsageError, match=why):
            train(toy / "data", tmp_path / "wrong", TINY, replace(SHORT, **wrong))


def test_back_translation_needs_a_third_language_and_tags() -> None:
    with pytest.raises(UsageError, match="no direction's source language is also translated"):
        BackTranslator(toy_languages(), PAIRS[:2], 1)
    with pytest.raises(UsageError, match="needs several target languages"):
        BackTranslator(toy_languages(), PAIRS[:1], 1)
    with pytest.raises(UsageError, match="--online-bt-from needs a tokenizer with the >>xx<<"):
        BackTranslator(toy_languages(ids={">>aa<<": 5, ">>bb<<": 6}), PAIRS, 1)
    bt = BackTranslator(toy_languages(), PAIRS, 1)
    assert bt.routes == [(2,), (), (0,), ()]  # aa-bb via aa-cc, and back


# --- the language token in the decoder ----------------------------------------------------

@pytest.mark.parametrize("where", ["decoder", "both"])
def test_a_decoder_side_language_token_is_prepared_trained_and_decoded(
        toy: Path, tmp_path: Path, where: str) -> None:
    """Prepared, batched, trained and decoded through the command line; the forced start's
    search itself is tests/test_forced_start.py's."""
    config = run_config(toy)
    data = tmp_path / "data"
    ok(tfm("prepare", "--config", str(config), "-o", str(data), "--language-token", where))
    prep = json.loads((data / "prepare.json").read_text())
    marking = {"decoder": "decoder_token", "both": "source_and_decoder"}[where]
    assert prep["language_marking"] == {"where": marking}
    vocabs = load_vocabularies(data / "tokenizer.json")
    tag_id = vocabs.tgt.token_to_id
    assert prep["decoder_starts"] == [[BOS_ID, tag_id(f">>{d[-2:]}<<")] for d in DIRECTIONS]
    split = load_split(data, "train")
    first = {vocabs.src.id_to_token(int(split.src(i)[0])) for i in range(50)}
    assert all(t.startswith(">>") for t in first) == (where == "both")
    batch = collate(split, np.arange(4), starts=prep["decoder_starts"])
    assert batch.tgt_in[:, 1].tolist() == [s[1] for s in (prep["decoder_starts"][d] for d in
                                                           split.directions[:4])]
    assert (batch.tgt_out[:, 0] == 0).all()  # the tag is fed, never a label
    if where == "both":  # the rest is the decoder's path, with the source tags of before
        both = mark(LanguageMarking("source_and_decoder"), ">>bb<<", tag_id)
        assert both == ResolvedLanguage("source_and_decoder", token=">>bb<<",
                                        source_tag=">>bb<<", start=(BOS_ID, tag_id(">>bb<<")))
        return
    out = tmp_path / "model"
    ok(tfm("train", "--config", str(config), "--data", str(data), "-o", str(out),
           "--max-steps", "240", "--valid-every", "240", "--save-every", "240"))
    info = json.loads((out / "config.json").read_text())
    assert info["language_marking"] == {"where": marking}
    assert info["format_version"] == 2  # ("both" is format 4: tfm before it cannot read it)
    # Online back-translation, the multilingual recipe's default marking: the third language
    # is asked by the decoder's start alone.
    back_translations_are_the_models_own(data, out)
    for direction in DIRECTIONS:
        src, tgt = direction.split("-")
        hyps = ok(tfm("translate", "--model", str(out), "--target-lang", tgt, "--beam", "1",
                      "--input", str(toy / "corpus" / f"test.{src}"))).splitlines()
        refs = (toy / "corpus" / f"test.{tgt}").read_text().splitlines()
        exact = sum(h == r for h, r in zip(hyps, refs)) / len(refs)
        print(f"{direction}: exact match {exact:.3f}")
        assert exact >= 0.5, f"{direction}: exact match {exact:.2f}"
        assert not any(">>" in h for h in hyps)  # the forced tag is never output
    refused(tfm("translate", "--model", str(out), "--beam", "1", "paku titu"), 2,
            "--target-lang is needed")
    # A CTranslate2 export feeds the tag as its target prefix.
    pytest.importorskip("ctranslate2")
    ok(tfm("export", str(out), "--to", "ctranslate2", "-o", str(tmp_path / "ct2")))
    for engine in (out, tmp_path / "ct2"):
        hyps = ok(tfm("translate", "--model", str(engine), "--target-lang", "cc", "--beam",
                      "2", "--input", str(toy / "corpus" / "test.aa")))
        if engine == out:
            ours = hyps
    assert hyps == ours
    refused(tfm("export", str(out), "--to", "marian", "-o", str(tmp_path / "hf")), 2,
            "decoder's first token")
    # The server: the same request path, the language a field of the request.
    pytest.importorskip("fastapi")
    import local_http
    from test_serve import post, serving

    from tfm.decoding.engines import load_translator
    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    sentences = (toy / "corpus" / "test.aa").read_text().splitlines()
    with serving(create_app(load_translator(out, "cpu"), ServeConfig(max_wait_ms=0))) as url:
        assert local_http.get(f"{url}/v1/info").json()["target_languages"] == ["aa", "bb", "cc"]
        answer = post(url, {"text": sentences, "beam": 2, "target_lang": "cc"}, key=None)
        assert answer.status_code == 200, answer.text
        assert [t["text"] for t in answer.json()["translations"]] == ours.splitlines()
        missing = post(url, {"text": sentences[0]}, key=None)
        assert missing.status_code == 422 and "target_lang is needed" in missing.text


def test_the_levers_refuse_a_bilingual_run_in_one_line(toy: Path, tmp_path: Path) -> None:
    corpus = toy / "corpus" / "train"
    tokenizer, data = tmp_path / "tok.json", tmp_path / "data"
    ok(tfm("train-tokenizer", "--train", str(corpus), "--src-lang", "aa", "--tgt-lang", "bb",
           "--vocab-size", "300", "-o", str(tokenizer)))
    refused(tfm("prepare", "--train", str(corpus), "--src-lang", "aa", "--tgt-lang", "bb",
                "--tokenizer", str(tokenizer), "-o", str(data), "--language-token", "decoder"),
            2, "--language-token decoder", "no >>xx<< target-language tags")
    ok(tfm("prepare", "--train", str(corpus), "--src-lang", "aa", "--tgt-lang", "bb",
           "--tokenizer", str(tokenizer), "-o", str(data)))
    for option in (["--language-loss", "0.3"], ["--online-bt-from", "10"],
                   ["--online-bt-share", "0.5"], ["--drop-residual-layer", "1"]):
        refused(tfm("train", "--data", str(data), "-o", str(tmp_path / "m"), "--max-steps", "2",
                    "--d-model", "32", "--n-heads", "2", *option), 2, option[0],
                "several target languages")
        assert not (tmp_path / "m").exists()
