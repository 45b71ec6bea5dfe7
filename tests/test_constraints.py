"""Specifications of terminology constraints (tfm.decoding.constraints, .glossary, the
constrained beam search of tfm.decoding.search), in the library, on the command line and in
the server.

The model is a small one fitted to the 40 test pairs (confident on them, unsure elsewhere): its
translations are real enough that a constraint changes them, and deterministic.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import torch
from conftest import PAIRS, fit_to_pairs, padded, tfm
from test_search import teacher_forced_log_probs

from tfm.config import ModelConfig, SearchOptions
from tfm.data.tokenizer import BOS_ID, EOS_ID, train_tokenizer
from tfm.decoding.constraints import (
    MAX_CONSTRAINTS,
    Automaton,
    ConstraintError,
    ConstraintSpec,
    Phrase,
    TargetConstraints,
    compile_constraints,
)
from tfm.decoding.glossary import Glossary, load_glossary
from tfm.decoding.search import beam_search, greedy_search
from tfm.errors import UsageError
from tfm.model import Transformer

SOURCES = [s for s, _ in PAIRS[:10]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model fitted to the test pairs for 120 steps, beam 4 by default."""
    tok = train_tokenizer((t for pair in PAIRS for t in pair), vocab_size=300)
    return fit_to_pairs(tmp_path_factory.mktemp("constraints") / "model", tok)


@pytest.fixture(scope="module")
def translator(model_dir: Path):
    from tfm.decoding.engines import load_translator

    return load_translator(model_dir, "cpu", workers=1)


def spec(*phrases: str, prefix: str | None = None) -> ConstraintSpec:
    return ConstraintSpec(list(phrases), prefix)


# --- the automaton: which outputs meet which phrases ---------------------------------------

def test_a_phrase_is_met_where_its_tokens_appear_even_inside_another_one():
    # "7 8" inside "6 7 8 9", "8" within both, and a phrase after a false start ("7 7 8")
    phrases = [Phrase("a", ((7, 8),)), Phrase("b", ((6, 7, 8, 9),)), Phrase("c", ((8,),))]
    tc = TargetConstraints(phrases)
    assert tc.met([6, 7, 8, 9]) == [True, True, True]
    assert tc.met([7, 7, 8]) == [True, False, True]
    assert tc.met([6, 7, 8, 5]) == [True, False, True]
    assert tc.met([5, 5]) == [False, False, False]


def test_the_sentence_initial_form_counts_only_at_the_start():
    tc = TargetConstraints([Phrase("x", ((10, 11), (BOS_ID, 12, 11)))])
    assert tc.met([12, 11, 5]) == [True]
    assert tc.met([5, 12, 11]) == [False]
    assert tc.met([5, 10, 11]) == [True]


def test_banks_count_the_constraint_tokens_met_and_the_progress_into_the_next():
    a = Automaton([Phrase("a", ((7, 8, 9),)), Phrase("b", ((5,),))])
    state = a.start
    assert a.bank(state) == 0 and set(a.next_tokens(state)) == {7, 5}
    state = a.advance(state, 7)
    assert a.bank(state) == 1 and set(a.next_tokens(state)) == {8, 7, 5}
    state = a.advance(state, 5)  # progress lost, "b" met
    assert a.bank(state) == 1 and a.next_tokens(state) == (7,)
    for token in (7, 8, 9):
        state = a.advance(state, token)
    assert a.all_met(state) and a.bank(state) == a.total == 4 and a.next_tokens(state) == ()


def test_tfm_tokenizers_write_a_phrase_the_same_at_the_start_and_inside(translator):
    compiled = compile_constraints(translator.vocabs.tgt, spec("Fahrrad", "rote Jacke"), 50)
    for phrase in compiled.phrases:
        assert len(phrase.forms) == 1  # add_prefix_space: one form
        inside = translator.vocabs.tgt.encode("x " + phrase.text, add_special_tokens=False)
        assert list(phrase.forms[0]) == inside.ids[-len(phrase.forms[0]):]


@pytest.mark.parametrize("phrases, prefix, says", [
    (["  "], None, "constraints[0]: the phrase is empty"),
    (["ok", ""], None, "constraints[1]: the phrase is empty"),
    (["\u200b"], None, "constraints[0]: the phrase is empty"),
    (["x" * 80], None, "constraints[0]: the phrase is"),
    ([f"w{i}" for i in range(MAX_CONSTRAINTS + 1)], None, f"the {MAX_CONSTRAINTS} a sentence"),
    ([], "y" * 80, "prefix: "),
])
def test_bad_constraints_are_refused_naming_the_field(translator, phrases, prefix, says):
    with pytest.raises(ConstraintError) as e:
        compile_constraints(translator.vocabs.tgt, spec(*phrases, prefix=prefix), 20)
    assert says in str(e.value)


def test_a_phrase_given_twice_counts_once_and_an_empty_prefix_is_none(translator):
    compiled = compile_constraints(translator.vocabs.tgt, spec("Hund", " Hund ", prefix=" "),
                                   20)
    assert [p.text for p in compiled.phrases] == ["Hund"] and compiled.prefix == []


# --- the search -------------------------------------------------------------------------------

def tiny(seed: int, vocab: int = 8) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16,
                                   n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=32,
                                   dropout=0.0, max_positions=64)).eval()


def teacher_forced(model: Transformer, src: torch.Tensor, outputs: list[list[int]]) -> list[float]:
    return teacher_forced_log_probs(model, src, outputs).tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_wide_constrained_beam_finds_the_best_output_that_contains_the_phrases(seed):
    vocab, limit = 8, 5  # tokens 4..7, at most 4 before EOS
    model = tiny(seed, vocab)
    src = torch.tensor([[5, 6, 4, EOS_ID]])
    tc = TargetConstraints([Phrase("a", ((6, 7),)), Phrase("b", ((5,),))])
    outputs = [list(o) for n in range(limit) for o in itertools.product(range(4, vocab),
                                                                          repeat=n)]
    allowed = [o for o in outputs if all(tc.met(o))]
    scores = [lp / (len(o) + 1) for o, lp in zip(allowed, teacher_forced(model, src, allowed))]
    best = max(range(len(allowed)), key=lambda i: scores[i])
    [hyps] = beam_search(model, src,
                         SearchOptions(beam=len(outputs), max_len_a=0.0, max_len_b=limit,
                                       stop_early=False),
                         [tc])
    assert hyps[0].tokens == allowed[best] and hyps[0].constraints_met == [True, True]
    assert hyps[0].score == pytest.approx(scores[best], abs=1e-5)


def test_a_sentence_translates_the_same_alone_and_with_others_of_other_constraints():
    model = tiny(3, vocab=20)
    torch.manual_seed(4)
    lengths = [6, 3, 9, 4, 7, 5]
    rows = [torch.randint(4, 20, (n - 1,)).tolist() + [EOS_ID] for n in lengths]
    src = padded(rows)
    constraints = [
        None,
        TargetConstraints([Phrase("a", ((7, 8),))]),
        TargetConstraints([Phrase("a", ((9,),)), Phrase("b", ((10, 11, 12),)),
                           Phrase("c", ((4, 4),))]),
        TargetConstraints([Phrase("a", ((5, 6),)), Phrase("b", ((13,),))], prefix=[17]),
        TargetConstraints(prefix=[15, 16]),
        TargetConstraints([Phrase("x", ((18, 19),))]),
    ]
    together = beam_search(model, src, SearchOptions(beam=3, max_len_a=1.0, max_len_b=6, n_best=2),
                           constraints)
    for i, row in enumerate(rows):
        [alone] = beam_search(model, padded([row]),
                              SearchOptions(beam=3, max_len_a=1.0, max_len_b=6, n_best=2),
                              [constraints[i]])
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in together[i]],
                                                         abs=1e-5)
        assert [h.constraints_met for h in alone] == [h.constraints_met for h in together[i]]
        c = constraints[i]
        if c is not None and c.phrases:
            assert together[i][0].constraints_met == c.met(together[i][0].tokens)
            assert all(together[i][0].constraints_met)
        if c is not None and c.prefix:
            assert together[i][0].tokens[: len(c.prefix)] == c.prefix


def test_sentences_without_constraints_keep_the_unconstrained_search_beside_others():
    model = tiny(5, vocab=20)
    torch.manual_seed(6)
    rows = [torch.randint(4, 20, (n - 1,)).tolist() + [EOS_ID] for n in (5, 8, 3, 6)]
    src = padded(rows)
    plain = beam_search(model, src, SearchOptions(beam=4, max_len_a=1.2, max_len_b=4, n_best=3))
    mixed = beam_search(model, src, SearchOptions(beam=4, max_len_a=1.2, max_len_b=4, n_best=3),
                        [None, TargetConstraints([Phrase("a", ((9, 9),))]), None,
                                     TargetConstraints()])
    for i in (0, 2, 3):
        assert [(h.tokens, h.score, h.log_prob) for h in plain[i]] == \
            [(h.tokens, h.score, h.log_prob) for h in mixed[i]]
    none = beam_search(model, src, SearchOptions(beam=4, max_len_a=1.2, max_len_b=4, n_best=3),
                       [None] * 4)
    assert [[h.tokens for h in hs] for hs in none] == [[h.tokens for h in hs] for hs in plain]


def test_a_forced_prefix_starts_greedy_and_beam_outputs_scored_as_the_model_scores_them():
    model = tiny(7, vocab=20)
    src = padded([[5, 9, 11, EOS_ID], [6, 6, EOS_ID]])
    prefix = [TargetConstraints(prefix=[12, 13, 14]), None]
    for hyps in (greedy_search(model, src, SearchOptions(beam=1, max_len_a=1.0, max_len_b=5),
                               prefix),
                 beam_search(model, src, SearchOptions(beam=3, max_len_a=1.0, max_len_b=5),
                             prefix)):
        assert hyps[0][0].tokens[:3] == [12, 13, 14]
        [expected] = teacher_forced(model, src[:1], [hyps[0][0].tokens])
        assert hyps[0][0].log_prob == pytest.approx(expected, abs=1e-5)
    assert greedy_search(model, src,
                         SearchOptions(beam=1, max_len_a=1.0,
                                       max_len_b=5))[1] == greedy_search(model,
                         src, SearchOptions(beam=1, max_len_a=1.0, max_len_b=5), prefix)[1]


def test_phrases_that_cannot_fit_the_length_limit_are_reported_unmet():
    model = tiny(8, vocab=20)
    src = padded([[5, 9, EOS_ID]])
    tc = TargetConstraints([Phrase("a", ((10, 11, 12),)), Phrase("b", ((13, 14, 15),))])
    [hyps] = beam_search(model, src, SearchOptions(beam=3, max_len_a=0.0, max_len_b=5, n_best=3),
                         [tc])  # 4 tokens at most: both need 6
    assert hyps and all(not h.complete for h in hyps)
    assert all(h.constraints_met == tc.met(h.tokens) for h in hyps)
    assert all(len(h.tokens) == 4 for h in hyps)  # ended at the limit


def test_an_ensemble_is_searched_with_constraints_unchanged():
    from tfm.model.ensemble import Ensemble

    models = Ensemble([tiny(11, vocab=20), tiny(12, vocab=20)]).eval()
    src = padded([[5, 9, 11, EOS_ID], [6, 7, EOS_ID]])
    constraints = [TargetConstraints([Phrase("a", ((8, 9),)), Phrase("b", ((13,),))],
                                     prefix=[16]), None]
    hyps = beam_search(models, src, SearchOptions(beam=3, max_len_a=1.0, max_len_b=6), constraints)
    assert hyps[0][0].tokens[0] == 16 and hyps[0][0].constraints_met == [True, True]
    # The unconstrained sentence finds what it finds alone (its scores summed in another order
    # within a batch: equal to float precision, not to the last bit, on AVX2 kernels).
    alone = beam_search(models, src[1:, :3], SearchOptions(beam=3, max_len_a=1.0, max_len_b=6))[0]
    assert [h.tokens for h in hyps[1]] == [h.tokens for h in alone]
    assert [h.score for h in hyps[1]] == pytest.approx([h.score for h in alone], abs=1e-5)
    assert [h.constraints_met for h in hyps[1]] == [h.constraints_met for h in alone]


def test_greedy_search_refuses_phrases():
    with pytest.raises(ValueError, match="beam search"):
        greedy_search(tiny(0), torch.tensor([[5, EOS_ID]]), SearchOptions(beam=1),
                      [TargetConstraints([Phrase("a", ((5,),))])])


# --- the translator, on the fitted model -------------------------------------------------------

def test_without_constraints_the_translations_are_those_of_plain_beam_search(translator):
    options = translator.default_options(n_best=2)
    plain = translator.translate(SOURCES, options)
    specs = [None] * len(SOURCES)
    specs[3] = spec("Fahrrad")
    specs[6] = spec("rote Jacke", "Hund")
    mixed = translator.translate(SOURCES, options, constraints=specs)
    for i, (p, m) in enumerate(zip(plain, mixed)):
        if specs[i] is None:
            assert p.hypotheses == m.hypotheses and m.constraints is None


def test_every_constraint_appears_in_the_translation(translator):
    wanted = [("Fahrrad",), ("rote Jacke", "Hund"), ("Katze", "im Park", "Bus"), ()]
    specs = [spec(*w) if w else None for w in wanted]
    results = translator.translate(SOURCES[:4], translator.default_options(),
                                   constraints=specs)
    for phrases, result in zip(wanted, results):
        for phrase in phrases:
            assert phrase in result.text
        if phrases:
            assert result.constraints == [(p, True, None) for p in phrases]
            assert result.constraints_met is True
    for source, constraint, result in zip(SOURCES, specs, results):  # alone as in the batch
        [alone] = translator.translate([source], translator.default_options(),
                                       constraints=[constraint])
        assert alone.text == result.text
        assert alone.hypotheses[0][1] == pytest.approx(result.hypotheses[0][1], abs=1e-5)


def test_a_constraint_that_does_not_fit_is_reported_not_dropped(translator):
    options = translator.default_options(max_len_a=0.0, max_len_b=9)  # 8 tokens: each fits
    [result] = translator.translate(["The dog ."], options,
                                    constraints=[spec("Fahrrad", "Gemüse")])
    assert result.constraints_met is False
    assert [met for _, met, _ in result.constraints].count(False) >= 1


def test_a_prefix_starts_the_translation(translator):
    for beam in (1, 4):
        [result] = translator.translate([SOURCES[0]], translator.default_options(beam=beam),
                                        constraints=[spec(prefix="Zwei Frauen")])
        assert result.text.startswith("Zwei Frauen")


def test_constraints_need_beam_search_and_name_the_sentence(translator):
    with pytest.raises(ConstraintError, match="beam search") as e:
        translator.translate(SOURCES[:2], translator.default_options(beam=1),
                             constraints=[None, spec("Hund")])
    assert e.value.sentence == 1


# --- glossaries ---------------------------------------------------------------------------------

def glossary(**terms: str) -> Glossary:
    return Glossary(dict(terms))


def test_glossary_terms_match_whole_words_and_lowercase_terms_in_any_case():
    g = Glossary({"cat": "Katze", "US": "USA", "dog": "Hund"})
    assert g.hits("A Cat and a DOG.") == [("cat", "Katze"), ("dog", "Hund")]
    assert g.hits("cats, concat, dogs") == []
    assert g.hits("us and the US") == [("US", "USA")]
    assert g.hits("the cat's toy") == [("cat", "Katze")]


def test_overlapping_glossary_terms_take_the_longest_leftmost_and_repeats_count_once():
    g = Glossary({"jacket": "Jacke", "red jacket": "rote Jacke", "new york": "New York",
                  "york street": "York-Straße", "bike": "Fahrrad", "bicycle": "Fahrrad"})
    assert g.hits("a red jacket and a jacket") == [("red jacket", "rote Jacke"),
                                                   ("jacket", "Jacke")]
    assert g.hits("New York Street") == [("new york", "New York")]
    assert g.hits("a bike, a bicycle, a bike") == [("bike", "Fahrrad")]


def test_a_glossary_file_is_read_with_comments_and_refused_line_by_line(tmp_path):
    good = tmp_path / "g.tsv"
    good.write_text("# terms\nbicycle\tFahrrad\n\nred  jacket\trote Jacke\n", encoding="utf-8")
    assert load_glossary(good).terms == {"bicycle": "Fahrrad", "red jacket": "rote Jacke"}
    for text, says in [("a\tb\tc\n", "line 1: 3 tab-separated fields"),
                       ("a\tb\n\t c\n", "line 2: the source term is empty"),
                       ("a\tb\na\tc\n", "line 2: 'a' is given line 1 already"),
                       ("# nothing\n", "no terms")]:
        bad = tmp_path / "bad.tsv"
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(UsageError, match=says):
            load_glossary(bad)


# --- the command line ------------------------------------------------------------------------

def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def test_translate_reads_jsonl_requests_and_reports_the_constraints_met(model_dir, tmp_path,
                                                                          translator):
    plain = tmp_path / "in.txt"
    plain.write_text("".join(s + "\n" for s in SOURCES[:4]), encoding="utf-8")
    requests = write_jsonl(tmp_path / "in.jsonl", [
        {"src": SOURCES[0]}, {"src": SOURCES[1], "constraints": ["Fahrrad"]},
        {"src": SOURCES[2], "prefix": "Eine Katze"}, {"src": SOURCES[3]}])
    base = ("translate", "-m", str(model_dir), "--device", "cpu")
    text = tfm(*base, "--input", str(plain))
    assert text.returncode == 0, text.stderr
    as_jsonl = tfm(*base, "--input", str(requests), "--format", "jsonl")
    assert as_jsonl.returncode == 0, as_jsonl.stderr
    records = [json.loads(line) for line in as_jsonl.stdout.splitlines()]
    lines = text.stdout.splitlines()
    assert [records[i]["translation"] for i in (0, 3)] == [lines[0], lines[3]]
    assert "constraints" not in records[0]
    assert records[1]["constraints"] == [{"phrase": "Fahrrad", "met": True}]
    assert records[1]["constraints_met"] is True and "Fahrrad" in records[1]["translation"]
    assert records[2]["translation"].startswith("Eine Katze")
    as_text = tfm(*base, "--input", str(requests))
    assert as_text.stdout.splitlines() == [r["translation"] for r in records]


def test_translate_applies_a_glossary_prefix_and_constraint_options(model_dir, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("dog\tKatze\n", encoding="utf-8")
    result = tfm("translate", "-m", str(model_dir), "--device", "cpu", "--format", "jsonl",
                 "--glossary", str(terms), "A dog runs through the snow .")
    assert result.returncode == 0, result.stderr
    [record] = [json.loads(line) for line in result.stdout.splitlines()]
    assert record["constraints"] == [{"phrase": "Katze", "met": True, "source_term": "dog"}]
    result = tfm("translate", "-m", str(model_dir), "--device", "cpu", "--prefix", "Drei",
                 "--constraint", "Hund", stdin="The girl is eating an apple .\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Drei") and "Hund" in result.stdout


@pytest.mark.parametrize("lines, says", [
    (['{"src": "a"}', '{"src": "a", "constraint": ["x"]}'], "line 2: unknown key "
     "'constraint'"),
    (['{"src": "a"}', "not json"], "line 2: not JSON"),
    (['{"src": "a"}', ""], "line 2: empty"),
    (['{"src": ["a"]}'], '"src" must be'),
    (['{"src": "a", "constraints": "Hund"}'], '"constraints" must be a list'),
    (['{"src": "a", "constraints": [1]}'], '"constraints" must be a list'),
    (['{"src": "a", "prefix": 3}'], '"prefix" must be a string'),
])
def test_jsonl_requests_are_read_strictly_naming_the_line(tmp_path, lines, says):
    from tfm.decoding.requests import read_requests

    source = tmp_path / "in.jsonl"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(UsageError, match=re.escape(says)):
        read_requests(source)


def test_jsonl_requests_give_sentences_and_what_each_asks(tmp_path):
    from tfm.decoding.requests import read_requests

    source = write_jsonl(tmp_path / "in.jsonl", [
        {"src": "a", "constraints": ["x", "y"], "prefix": "p"}, {"src": ""},
        {"src": "b", "constraints": []}])
    sentences, specs = read_requests(source)
    assert sentences == ["a", "", "b"]
    assert specs == [ConstraintSpec(["x", "y"], "p"), None, None]


@pytest.mark.parametrize("lines, options, says", [
    (['{"src": "a dog", "constraints": [""]}'], (), "line 1: constraints[0]: the phrase is "
     "empty"),
    (['{"src": "a"}', '{"src": "a", "constraint": ["x"]}'], (), "line 2: unknown key "
     "'constraint'"),
    (['{"src": "a", "constraints": ["Hund"]}'], ("--beam", "1"), "need beam search"),
    (['{"src": "a", "constraints": [' + ", ".join(f'"w{i}"' for i in range(20)) + "]}"],
     (), "more than the 16"),
])
def test_bad_jsonl_input_is_one_line_exit_2_and_nothing_written(model_dir, tmp_path, lines,
                                                                 options, says):
    source = tmp_path / "bad.jsonl"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    output = tmp_path / "out.txt"
    result = tfm("translate", "-m", str(model_dir), "--device", "cpu", "--input", str(source),
                 "--output", str(output), *options)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not output.exists()


def test_a_bad_glossary_is_one_line_exit_2(model_dir, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("dog Hund\n", encoding="utf-8")
    result = tfm("translate", "-m", str(model_dir), "--glossary", str(terms), "A dog .")
    assert result.returncode == 2 and "line 1: 1 tab-separated fields" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_serve_refuses_a_bad_glossary_in_one_line_before_loading_the_model(model_dir,
                                                                             tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("dog\tHund\ndog\tKatze\n", encoding="utf-8")
    result = tfm("serve", "-m", str(model_dir), "--port", "0", "--glossary", str(terms))
    assert result.returncode == 2 and "line 2: 'dog' is given line 1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- the server ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client(translator):
    from fastapi.testclient import TestClient

    from tfm.serve.app import create_app

    app = create_app(translator, glossary=Glossary({"snow": "Schnee"}))
    with TestClient(app) as c:
        yield c


def test_serve_takes_constraints_and_a_prefix_per_text_and_reports_them(client, translator):
    body = {"text": [SOURCES[0], SOURCES[1], "A dog runs through the snow ."],
            "constraints": [["Fahrrad"], [], []],
            "prefix": [None, "Drei", None]}
    response = client.post("/v1/translate", json=body)
    assert response.status_code == 200, response.text
    first, second, third = response.json()["translations"]
    assert "Fahrrad" in first["text"] and first["constraints"] == [
        {"phrase": "Fahrrad", "met": True}] and first["constraints_met"] is True
    assert second["text"].startswith("Drei") and "constraints" not in second
    assert third["constraints"] == [{"phrase": "Schnee", "met": True, "source_term": "snow"}]
    expected = translator.translate([SOURCES[0]], translator.default_options(),
                                    constraints=[spec("Fahrrad")])
    assert first["text"] == expected[0].text
    plain = client.post("/v1/translate", json={"text": "The snow .", "glossary": False,
                                               "constraints": []})
    assert "constraints" not in plain.json()["translations"][0]
    assert client.get("/v1/info").json()["glossary_terms"] == 1


@pytest.mark.parametrize("body, says", [
    ({"text": "a", "constraints": [""]}, "constraints[0]: the phrase is empty"),
    ({"text": ["a", "b"], "constraints": [[], ["ok", " "]]},
     "constraints[1][1]: the phrase is empty"),
    ({"text": ["a", "b"], "constraints": [["x"]]}, "constraints: 1 lists for 2 texts"),
    ({"text": "a", "constraints": [["x"]]}, "constraints: for one text"),
    ({"text": "a", "constraints": "x"}, "constraints"),
    ({"text": "a", "constraints": [1]}, "constraints"),
    ({"text": ["a", "b"], "constraints": [["x"], "y"]}, "constraints"),
    ({"text": "a", "prefix": ["x"]}, "prefix: give a string"),
    ({"text": "a", "prefix": "x " * 40}, "prefix: "),
    ({"text": "a", "constraints": ["Hund"], "beam": 1}, "need beam search"),
    ({"text": "the snow", "beam": 1}, "need beam search"),
])
def test_serve_refuses_bad_constraints_with_422_naming_the_field(client, body, says):
    response = client.post("/v1/translate", json=body)
    assert response.status_code == 422, response.text
    assert says in response.json()["error"]


# --- CTranslate2 --------------------------------------------------------------------------------

def test_ctranslate2_forces_prefixes_as_tfm_does_and_refuses_phrases(model_dir, translator,
                                                                     tmp_path):
    pytest.importorskip("ctranslate2")
    from tfm.decoding.ctranslate2_engine import CTranslate2Translator
    from tfm.interop.ctranslate2 import export_ctranslate2

    ct2 = CTranslate2Translator(export_ctranslate2(model_dir, tmp_path / "ct2"), "cpu", "fp32")
    specs = [spec(prefix="Zwei Frauen"), None, spec(prefix="Der")]
    for beam in (1, 4):
        options = translator.default_options(beam=beam)
        ours = translator.translate(SOURCES[:3], options, constraints=specs)
        theirs = ct2.translate(SOURCES[:3], options, constraints=specs)
        assert theirs[0].text.startswith("Zwei Frauen") and theirs[2].text.startswith("Der")
        if beam == 1:  # greedy search is the same search: the same outputs and scores
            assert [t.text for t in theirs] == [t.text for t in ours]
            assert [t.hypotheses[0][1] for t in theirs] == pytest.approx(
                [t.hypotheses[0][1] for t in ours], abs=1e-4)
    with pytest.raises(UsageError, match="cannot make a translation contain"):
        ct2.translate(SOURCES[:1], translator.default_options(), constraints=[spec("Hund")])
    with pytest.raises(UsageError, match="cannot make a translation contain"):  # searched
        ct2.search([[5, EOS_ID]], translator.default_options(),
                   [TargetConstraints([Phrase("a", ((5,),))])])
