"""The off-target rate of ``tfm eval --off-target``: the share of translations identified as
another language than the one asked for (tfm.decoding.language_id, py3langid)."""

from __future__ import annotations

import sys

import pytest

from tfm.decoding.language_id import TargetLanguageCheck, identify, language_code
from tfm.errors import UsageError

GERMAN = [
    "Zwei Hunde spielen im Schnee.",
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "Die Frau liest ein Buch über Katzen.",
    "Kinder spielen auf der Straße vor dem Haus.",
]
FRENCH = [
    "Deux chiens jouent dans la neige.",
    "Un homme traverse la ville à vélo.",
    "La femme lit un livre sur les chats.",
    "Des enfants jouent dans la rue devant la maison.",
]
ENGLISH = [
    "Two dogs are playing in the snow.",
    "A man rides his bicycle through the city.",
    "The woman is reading a book about cats.",
    "Children are playing in the street in front of the house.",
]


@pytest.mark.parametrize("lang, sentences", [("de", GERMAN), ("fr", FRENCH), ("en", ENGLISH)])
def test_sentences_of_each_language_are_identified_as_that_language(
        lang: str, sentences: list[str]) -> None:
    result = TargetLanguageCheck(lang)(sentences)
    assert result.found == {lang: len(sentences)}
    assert (result.off_target, result.rate) == (0, 0.0)


def test_the_rate_is_the_share_of_identified_translations_in_another_language() -> None:
    hypotheses = [*GERMAN, ENGLISH[0], "", "   ", FRENCH[1]]
    result = TargetLanguageCheck("de")(hypotheses)
    assert (result.total, result.empty, result.identified, result.off_target) == (8, 2, 6, 2)
    assert result.found == {"de": 4, "en": 1, "fr": 1}
    assert result.rate == pytest.approx(100 * 2 / 6)
    assert result.text == ("off-target 33.3% (2 of 6 not identified as de; 2 empty, "
                           "0 unidentifiable)")
    assert result.signature.endswith("|lang:de|candidates:all")


def test_text_that_is_in_no_language_is_counted_apart() -> None:
    result = TargetLanguageCheck("de")(["12:30", "!!!", "OK", "https://example.com/a/b", GERMAN[0]])
    assert (result.unidentifiable, result.identified, result.off_target) == (4, 1, 0)


def test_nothing_to_identify_is_a_rate_of_zero() -> None:
    result = TargetLanguageCheck("de")(["", "42"])
    assert (result.identified, result.rate) == (0, 0.0)


def test_candidate_languages_restrict_the_choice_and_always_hold_the_target() -> None:
    check = TargetLanguageCheck("de", ["en", "fr"])
    assert check.languages == ("de", "en", "fr")
    result = check([*GERMAN, ENGLISH[0], "Dit is een Nederlandse zin over honden."])
    assert set(result.found) <= {"de", "en", "fr"}
    assert result.signature.endswith("|lang:de|candidates:de,en,fr")


def test_checks_restricted_to_other_languages_keep_their_own_choice() -> None:
    # (Each check copies the model read once a process: a restriction stays with its check.)
    dutch = "Dit is een Nederlandse zin over honden die in het park spelen."
    narrow = TargetLanguageCheck("de", ["en"])
    wide = TargetLanguageCheck("de")
    narrower = TargetLanguageCheck("de", ["fr"])
    assert set(narrow([dutch]).found) <= {"de", "en"}
    assert wide([dutch]).found == {"nl": 1}
    assert set(narrower([dutch]).found) <= {"de", "fr"}
    assert set(narrow([dutch]).found) <= {"de", "en"}


def test_one_identifier_serves_several_calls() -> None:
    check = TargetLanguageCheck("fr")
    assert check(FRENCH).off_target == 0
    assert check(ENGLISH).off_target == len(ENGLISH)


@pytest.mark.parametrize("given, code", [
    ("de", "de"), (">>fr<<", "fr"), ("pt_br", "pt"), ("de-AT", "de"), ("fra", "fr"),
    (">>cmn_Hans<<", "zh"), ("DEU", "de"), ("yue", "yue"), ("German", "de"),
    (" french ", "fr")])
def test_a_language_is_taken_with_brackets_region_script_or_three_letters(
        given: str, code: str) -> None:
    assert language_code(given) == code


def test_a_language_py3langid_does_not_know_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match="language xx: py3langid does not know it") as e:
        TargetLanguageCheck("xx")(GERMAN)
    assert "\n" not in str(e.value)


def test_without_py3langid_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "py3langid", None)  # makes `import py3langid` fail
    with pytest.raises(UsageError, match=r'pip install "tfm\[langid\]"') as e:
        TargetLanguageCheck("de")(GERMAN)
    assert "\n" not in str(e.value)


def test_a_text_s_language_is_identified_among_a_model_s_or_left_unknown() -> None:
    german = "Der Hund schläft im Garten. Meine Schwester kauft Brot auf dem Markt."
    assert identify(german, ["en", "de", "cs"]) == "de"
    assert identify(german, ["eng_Latn", "deu_Latn", "zzz_Arab"]) == "deu_Latn"
    assert identify("Pes spí na zahradě.", ["en", "de", "cs"]) == "cs"
    # Nothing to tell a language by, or no choice to make: unknown rather than a guess.
    assert identify("1234 5678", ["en", "de", "cs"]) is None
    assert identify(german, ["de"]) is None and identify(german, ["de", "zzz"]) is None
    assert identify("", ["en", "de"]) is None
    # Two candidates it does not tell apart (one language, two scripts).
    assert identify("Пас спава у башти.", ["srp_Cyrl", "srp_Latn", "eng_Latn"]) is None
