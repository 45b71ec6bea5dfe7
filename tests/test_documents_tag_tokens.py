"""Specifications of inline tags sent as tokens to a model trained to copy them
(tfm/documents/tag_tokens.py, and its path through tfm/documents/translate.py): each tag inside
a sentence goes in as the token of its kind and order at a word edge, as training put them;
the translation's tokens say where the tags go, and a tag the model lost or doubled is placed by
alignment instead. Translators here are fakes that rewrite the tokens as a test wants."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace

from test_documents_translate import UpperTranslator

from tfm.config import SearchOptions
from tfm.data.tag_augment import TAG_TOKENS
from tfm.decoding.alignment import word_ids
from tfm.decoding.translator import Translation
from tfm.documents.formats import Limits
from tfm.documents.html import read as read_html
from tfm.documents.segments import Segment, Tag
from tfm.documents.tag_tokens import clean_words, mark, read

TAGS = re.compile("(" + "|".join(re.escape(t) for t in TAG_TOKENS) + ")")


def marked(segment: Segment) -> str | None:
    found = mark(segment, 0, segment.text, TAG_TOKENS)
    return found.text if found is not None else None


def test_tags_inside_a_sentence_become_tokens_glued_to_word_edges_as_in_training():
    # "The <b>dog</b> sleeps <br> in the <a>big <i>garden</i></a>."
    text = "The dog sleeps in the big garden."
    segment = Segment(text, (Tag(4, 7, 1), Tag(15, 15, 2), Tag(22, 32, 3), Tag(26, 32, 4)))
    # words are what the tokenizer's word-start marks make them: "garden." is one
    assert marked(segment) == "The<g1> dog</g1> sleeps<x1/> in the<g2> big<g3> garden.</g3></g2>"


def test_a_tag_at_the_start_or_inside_a_word_is_moved_to_the_word_s_edges():
    assert marked(Segment("Dogs sleep.", (Tag(0, 4, 1),))) == "<g1>Dogs</g1> sleep."
    assert marked(Segment("unhappy dogs", (Tag(2, 7, 1),))) == "<g1>unhappy</g1> dogs"


def test_tags_that_projection_maps_exactly_or_that_cannot_be_tokens_are_not_sent():
    assert marked(Segment("The dog sleeps.", (Tag(0, 15, 1),))) is None  # the whole sentence
    assert marked(Segment("a b c d e f", tuple(Tag(2 * k, 2 * k + 1, k) for k in range(5)))
                  ) is None  # five pairs: the inventory numbers four
    crossing = Segment("unhappy dogs", (Tag(0, 2, 1), Tag(2, 7, 2)))  # "<1>un</1><2>happy</2>"
    assert marked(crossing) is None  # moved to word edges they would cross


def test_the_tokens_read_back_give_the_clean_text_and_each_tag_s_place():
    sent = mark(Segment("The dog sleeps.", (Tag(4, 7, 1),)), 0, "The dog sleeps.", TAG_TOKENS)
    text, placed = read("Der<g1> Hund</g1> schläft.", TAG_TOKENS, sent)
    assert text == "Der Hund schläft."
    assert placed == {("open", 1): 4, ("close", 1): 8}
    assert read("<g1> Der Hund</g1> schläft.", TAG_TOKENS, sent) == (
        "Der Hund schläft.", {("open", 1): 0, ("close", 1): 8})


def test_a_lost_doubled_added_or_reversed_tag_reads_as_none_and_leaves_no_token():
    sent = mark(Segment("The dog sleeps.", (Tag(4, 7, 1),)), 0, "The dog sleeps.", TAG_TOKENS)
    for output in ["Der Hund schläft.", "Der<g1> Hund</g1></g1> schläft.",
                   "Der<g1> Hund</g1> schläft<x1/>.", "Der</g1> Hund<g1> schläft."]:
        text, placed = read(output, TAG_TOKENS, sent)
        assert placed is None and not TAGS.search(text) and "  " not in text


def test_words_of_tag_tokens_only_map_to_no_clean_word():
    assert clean_words("<g1> Der Hund</g1> <x1/> schläft", TAG_TOKENS) == [None, 0, 1, None, 2]


# --- through the document path, with a fake model of inline tags ----------------------------

def _symbols(text: str) -> list[str]:
    """A text's symbols as the byte-level tokenizer cuts it: a word's first piece marked
    with Ġ, tag tokens pieces of their own without it."""
    symbols = []
    for word in text.split():
        first = True
        for piece in (p for p in TAGS.split(word) if p):
            symbols.append(piece if piece in TAG_TOKENS or not first else "Ġ" + piece)
            first = first and piece in TAG_TOKENS
    return symbols


def _alignment(source: list[str], target: list[str]) -> list[tuple[int, int]]:
    """Monotone: the k-th word with letters of each side aligned together, as word_ids
    counts the words."""
    def words(symbols: list[str]) -> list[int]:
        ids = word_ids(symbols)
        return sorted({ids[k] for k, s in enumerate(symbols) if s not in TAG_TOKENS})
    return list(zip(words(source), words(target)))


@dataclass
class TagTranslator(UpperTranslator):
    """Upper-cases, then hands the text to ``rewrite`` (what the model did with the tags);
    its alignment is monotone, as attention would give it."""

    rewrite: object = staticmethod(lambda text: text)
    info: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(
        inline_tags=list(TAG_TOKENS), directions=[], tgt_lang="de", src_lang="en"))

    def translate_prepared(self, sources, options, progress=None):
        self.calls.append(([s.sentence for s in sources], options.attention))
        results = []
        for s in sources:
            upper = re.sub(TAGS.pattern, lambda m: m.group(0).lower(), s.sentence.upper(),
                           flags=re.IGNORECASE)
            text = self.rewrite(upper)
            result = Translation(s.sentence, [(text, -1.0)])
            if options.attention:
                result.source_symbols = _symbols(s.sentence) + ["</s>"]
                result.target_symbols = _symbols(text)
                result.alignment = _alignment(result.source_symbols[:-1],
                                              result.target_symbols)
            results.append(result)
        if progress is not None:
            progress(len(sources))
        return results


PAGE = b"<p>The <b>dog</b> sleeps in the garden.</p>"


def _translate(translator, page: bytes = PAGE) -> str:
    from tfm.documents.translate import translate_document

    document = read_html(page, Limits())
    return translate_document(document, translator, SearchOptions(beam=1)).decode()


def test_a_model_of_inline_tags_reads_tag_tokens_and_its_output_places_the_tags():
    # The model moved the tag onto "SLEEPS"; the monotone alignment would say "DOG".
    def moved(text: str) -> str:
        return text.replace("<g1> DOG</g1> SLEEPS", " DOG<g1> SLEEPS</g1>")
    translator = TagTranslator(rewrite=moved)
    out = _translate(translator)
    assert translator.calls[0][0] == ["The<g1> dog</g1> sleeps in the garden."]
    assert "THE DOG <b>SLEEPS</b> IN THE GARDEN." in out
    assert "g1" not in out


def test_punctuation_a_source_tag_left_out_is_left_out_of_the_copied_tag():
    def moved(text: str) -> str:
        return text.replace(" GARDEN.", "<g1> GARDEN.</g1>").replace("<g1> DOG</g1>", " DOG")
    out = _translate(TagTranslator(rewrite=moved), b"<p>The dog sleeps in the <b>garden</b>.</p>")
    assert "THE DOG SLEEPS IN THE <b>GARDEN</b>." in out


def test_a_tag_the_model_lost_or_doubled_is_placed_by_alignment_instead():
    from test_bench_peers import load

    run = load("tags_run")
    for rewrite in (lambda t: TAGS.sub("", t),
                    lambda t: t.replace("</g1>", "</g1></g1>")):
        out = _translate(TagTranslator(rewrite=rewrite))
        assert "THE <b>DOG</b> SLEEPS IN THE GARDEN." in out  # the alignment's place
        assert "g1" not in out and out.count("<b>") == 1
        translator, counts = TagTranslator(rewrite=rewrite), {}
        translator.default_options = lambda beam=None: SearchOptions(beam=1)
        run.translate(translator, ["The <b>dog</b> sleeps."], None, tokens=True, counts=counts)
        assert counts == {"sent": 1, "fell_back": 1}  # what the bench reports


def test_tags_a_model_adds_to_a_sentence_sent_without_any_are_taken_out():
    out = _translate(TagTranslator(rewrite=lambda t: t + "<x1/>"), b"<p>The dog sleeps.</p>")
    assert "THE DOG SLEEPS." in out and "x1" not in out


def test_a_tag_token_s_string_in_the_text_is_the_text_s_own_kept_and_never_a_tag():
    # A manual about tfm: "<g1>" is a word of its text. The sentence goes without tag tokens
    # (the model could not tell which "<g1>" is the tag), its tag is placed by alignment,
    # and the text's "<g1>" stays in the translation, where another sentence's is taken out.
    translator = TagTranslator()
    page = b"<p>The <b>dog</b> writes &lt;g1&gt; here. A <i>cat</i> sleeps.</p>"
    out = _translate(translator, page)
    sent = translator.calls[0][0]
    assert sent == ["The dog writes <g1> here.", "A<g1> cat</g1> sleeps."]
    assert "THE <b>DOG</b> WRITES &lt;g1&gt; HERE." in out
    assert "A <i>CAT</i> SLEEPS." in out


def test_every_other_model_is_sent_the_sentence_without_tokens():
    translator = UpperTranslator()
    out = _translate(translator)
    assert translator.calls[0][0] == ["The dog sleeps in the garden."]
    assert "THE <b>DOG</b> SLEEPS IN THE GARDEN." in out


def test_the_bench_s_tokens_method_sends_tokens_and_the_others_hide_them():
    from test_bench_peers import load

    run = load("tags_run")
    line = ['A <b>dog</b> sleeps in the <a href="g.html">garden</a>.']
    for tokens, sent in [(True, "A<g1> dog</g1> sleeps in the<g2> garden.</g2>"),
                         (False, "A dog sleeps in the garden.")]:
        translator = TagTranslator()
        translator.default_options = lambda beam=None: SearchOptions(beam=1)
        counts: dict[str, int] = {}
        hyps, _ = run.translate(translator, line, None, tokens=tokens, counts=counts)
        assert translator.calls[0][0] == [sent]
        assert counts == {"sent": int(tokens), "fell_back": 0}
        assert hyps == ['A <b>DOG</b> SLEEPS IN THE <a href="g.html">GARDEN</a>.']


def test_each_sentence_of_a_segment_is_sent_with_its_own_tags_numbered_afresh():
    translator = TagTranslator()
    page = b"<p>The <b>dog</b> sleeps. A <i>cat</i> runs<br>home. <u>All of it.</u></p>"
    out = _translate(translator, page)
    sent = sorted(translator.calls[0][0])
    assert sent == ["A<g1> cat</g1> runs<x1/> home.", "All of it.", "The<g1> dog</g1> sleeps."]
    assert "THE <b>DOG</b> SLEEPS. A <i>CAT</i> RUNS<br> HOME. <u>ALL OF IT.</u>" in out


def test_the_server_and_the_command_line_send_tag_tokens_as_the_library_does(tmp_path):
    """A model with inline tags (random weights: what it writes does not matter here) gets
    tag tokens by `tfm translate --input` and by the server's /v1/document, and both answer
    what translate_document gives."""
    import local_http
    from conftest import PAIRS, tfm, tiny_config
    from test_serve import serving

    from tfm.checkpoint import save_model_dir
    from tfm.config import GenerationDefaults
    from tfm.data.tagged_dataset import with_tag_tokens
    from tfm.data.tokenizer import Vocabularies, train_tokenizer
    from tfm.decoding.engines import load_translator
    from tfm.documents.translate import DocumentWork, model_inline_tags, translate_document
    from tfm.model import Transformer
    from tfm.model_info import ModelInfo
    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    tok = train_tokenizer((t for pair in PAIRS for t in pair), vocab_size=300)
    vocabs, *_ = with_tag_tokens(Vocabularies.shared(tok), tmp_path / "tok.json")
    config = tiny_config(vocabs.src.get_vocab_size())
    save_model_dir(tmp_path / "m", Transformer(config).eval(), vocabs.src, ModelInfo(
        config, src_lang="en", tgt_lang="de", inline_tags=list(TAG_TOKENS),
        generation=GenerationDefaults(beam=1, max_len_a=1.0, max_len_b=5)))
    translator = load_translator(tmp_path / "m", "cpu")
    page = b"<p>The <b>dog</b> sleeps in the <i>garden</i>.</p>"
    document = read_html(page, Limits())
    work = DocumentWork.of(document, inline_tags=model_inline_tags(translator))
    assert work.sentences == ["The<g1> dog</g1> sleeps in the<g2> garden.</g2>"]
    want = translate_document(document, translator, translator.default_options())
    with serving(create_app(translator, ServeConfig())) as url:
        got = local_http.post(f"{url}/v1/document", content=page,
                              params={"filename": "p.html"}, timeout=60)
    assert got.status_code == 200 and got.content == want
    (tmp_path / "p.html").write_bytes(page)
    done = tfm("translate", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "p.html"),
               "--output", str(tmp_path / "out.html"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.html").read_bytes() == want
