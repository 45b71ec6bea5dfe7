"""Monolingual corpora in `tfm prepare`: a run config's entry of one language is back-translated
by prepare itself, through the same library call as `tfm backtranslate` (the same synthetic
pairs), resumably (OUTPUT.bt/), its pairs synthetic; each refusal of `tfm backtranslate` one
line in the entry's keys; a run without such an entry prepares what it did before."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from conftest import PAIRS, random_model_dir, tfm, write_corpus, write_lines
from test_backtranslate import FRENCH  # French text: a language the reverse model does not read

from tfm.data.corpus import CorpusSpec
from tfm.data.directions import corpora_from_config
from tfm.data.prepare import prepare
from tfm.data.tokenizer import load_vocabularies, save_tokenizer
from tfm.decoding.backtranslation import backtranslate_corpora, output_paths, work_directory
from tfm.errors import UsageError

GERMAN = [t for _, t in PAIRS]
# How the tests back-translate: sampled (seeded) and noised, in chunks of 7 lines, on the CPU.
SEARCH = {"beam": 1, "sampling_topk": 0, "sampling_seed": 3}
BT = {**SEARCH, "noise": True, "chunk": 7, "device": "cpu", "workers": 1}
COMMAND = ["--beam", "1", "--sampling-topk", "0", "--sampling-seed", "3", "--noise",
           "--chunk", "7", "--device", "cpu", "--workers", "1"]


@pytest.fixture(scope="module")
def reverse_model(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    """An untrained de -> en model of the tiny tokenizer (its translations are noise, but
    they are the translations compared here)."""
    return random_model_dir(tmp_path_factory.mktemp("rev") / "model", tokenizer, seed=1,
                            src="de", tgt="en")


def files(tmp_path: Path) -> tuple[Path, Path]:
    """The real pairs (PAIRS[:10] as c/real.en, c/real.de) and German text (mono.de: the
    German of PAIRS[10:30], whose English is never read)."""
    write_corpus(tmp_path / "c", PAIRS[:10], "real")
    return tmp_path / "c" / "real", write_lines(tmp_path / "mono.de", GERMAN[10:30])


def run_config(tmp_path: Path, reverse: Path, name: str = "run.yaml", **entry) -> Path:
    """A run config of the real pairs (written twice: upsample 2) and the German text as a
    monolingual entry (``entry``: its keys over the defaults), tagged <BT>."""
    real, mono = files(tmp_path)
    mono_entry = {"train": str(mono), "tgt_lang": "de", "reverse_model": str(reverse),
                  "backtranslate": dict(BT), **entry}
    path = tmp_path / name
    path.write_text(yaml.safe_dump({
        "corpora": [{"train": str(real), "src_lang": "en", "tgt_lang": "de", "upsample": 2},
                    {k: v for k, v in mono_entry.items() if v is not None}],
        "synthetic_tag": "<BT>"}))
    return path


def rows(data: Path, split: str = "train") -> list[dict]:
    import datasets

    return list(datasets.load_from_disk(str(data))[split])


def prepare_cli(config: Path, tokenizer: Path, output: Path, *extra: str):
    return tfm("prepare", "--config", str(config), "--tokenizer", str(tokenizer), "-o",
               str(output), *extra)


def one_line_error(result) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_monolingual_entry_gives_the_pairs_of_backtranslate_then_a_synthetic_entry(
        reverse_model, tokenizer_path, tmp_path) -> None:
    config = run_config(tmp_path, reverse_model)
    # (--max-ratio 0: every pair kept, although the untrained reverse model writes noise)
    result = prepare_cli(config, tokenizer_path, tmp_path / "data", "--max-ratio", "0")
    assert result.returncode == 0, result.stderr
    assert "Back-translating corpora, entry 2" in result.stderr  # progress on stderr
    assert "Back-translated 20 pairs of 20 lines" in result.stderr

    # By hand: tfm backtranslate, then its output as a corpus marked synthetic.
    mono = tmp_path / "mono.de"
    made = tfm("backtranslate", "-i", str(mono), "--reverse-model", str(reverse_model),
               "--lang", "de", "--into", "en", "-o", str(tmp_path / "synth"), *COMMAND)
    assert made.returncode == 0, made.stderr
    by_hand = tmp_path / "by-hand.yaml"
    by_hand.write_text(yaml.safe_dump({"corpora": [
        {"train": str(tmp_path / "c" / "real"), "src_lang": "en", "tgt_lang": "de",
         "upsample": 2},
        {"train": str(tmp_path / "synth"), "src_lang": "en", "tgt_lang": "de",
         "synthetic": True}], "synthetic_tag": "<BT>"}))
    manual = prepare_cli(by_hand, tokenizer_path, tmp_path / "data-by-hand", "--max-ratio",
                         "0")
    assert manual.returncode == 0, manual.stderr

    # The same synthetic corpus, byte for byte, kept beside the dataset ...
    kept = work_directory(tmp_path / "data") / "2-mono"
    for ours, theirs in zip(output_paths(kept, "en", "de")[:2],
                            output_paths(tmp_path / "synth", "en", "de")[:2]):
        assert ours.read_bytes() == theirs.read_bytes()
    # ... and the same training pairs: the real ones twice, the synthetic ones tagged.
    train = rows(tmp_path / "data")
    assert train == rows(tmp_path / "data-by-hand")
    bt = load_vocabularies(tmp_path / "data" / "tokenizer.json").src.token_to_id("<BT>")
    assert len(train) == 2 * 10 + 20
    assert [r["src_ids"][0] == bt for r in train] == [False] * 20 + [True] * 20
    # Run again: the back-translation is found made, the dataset up to date.
    again = prepare_cli(config, tokenizer_path, tmp_path / "data", "--max-ratio", "0")
    assert again.returncode == 0 and "(20 found done)" in again.stderr
    assert "is up to date" in again.stderr


class Killed(Exception):
    pass


def test_a_prepare_interrupted_while_back_translating_resumes_where_it_stopped(
        reverse_model, tokenizer_path, tmp_path) -> None:
    config = run_config(tmp_path, reverse_model)
    corpora = corpora_from_config(yaml.safe_load(config.read_text())["corpora"])
    done: list[int] = []

    def killed_in_the_third_chunk(bt, total, options):
        from contextlib import nullcontext

        def advance(n: int) -> None:
            done.append(n)
            if sum(done) > 14:  # two chunks of 7 written, the third in flight
                raise Killed

        return nullcontext(advance)

    with pytest.raises(Killed):
        backtranslate_corpora(corpora, tokenizer_path, tmp_path / "data",
                              killed_in_the_third_chunk)
    assert not (tmp_path / "data").exists()
    assert not output_paths(work_directory(tmp_path / "data") / "2-mono", "en", "de")[0].exists()
    # The same command goes on: the two chunks kept, the rest translated.
    resumed = prepare_cli(config, tokenizer_path, tmp_path / "data")
    assert resumed.returncode == 0, resumed.stderr
    assert "(14 found done)" in resumed.stderr
    whole = prepare_cli(run_config(tmp_path / "w", reverse_model), tokenizer_path,
                        tmp_path / "w" / "data")
    assert whole.returncode == 0 and "(0 found done)" in whole.stderr
    assert rows(tmp_path / "data") == rows(tmp_path / "w" / "data")
    for ours, theirs in zip(
            output_paths(work_directory(tmp_path / "data") / "2-mono", "en", "de"),
            output_paths(work_directory(tmp_path / "w" / "data") / "2-mono", "en", "de")):
        if ours.suffix != ".json":
            assert ours.read_bytes() == theirs.read_bytes()
    assert not (work_directory(tmp_path / "data") / "2-mono.work").exists()


@pytest.mark.parametrize("case", [
    "no reverse model", "no such reverse model", "wrong direction", "wrong tokenizer",
    "a language the model does not read", "text of another language", "empty file",
    "binary file", "blank file", "unknown option", "bad option value", "options that clash",
    "source-language text", "no direction into its language"])
def test_each_refusal_is_one_line_in_the_entry_s_keys_and_nothing_is_written(
        case, reverse_model, tokenizer, tokenizer_path, tmp_path) -> None:
    from tfm.data.tokenizer import train_tokenizer

    entry: dict = {}
    mono = tmp_path / "mono.de"
    says = "corpora, entry 2"
    if case == "no reverse model":
        entry, says = {"reverse_model": None}, "give reverse_model:"
    elif case == "no such reverse model":
        entry, says = {"reverse_model": str(tmp_path / "nowhere")}, "reverse_model: "
    elif case == "wrong direction":
        entry = {"reverse_model": str(random_model_dir(tmp_path / "fwd", tokenizer))}
        says = "reverse_model translates en-de, not de-en"
    elif case == "wrong tokenizer":
        other = train_tokenizer(["Ein ganz anderer Text .", "Noch einer ."], vocab_size=280)
        save_tokenizer(other, tmp_path / "other.json")
        entry = {"reverse_model": str(random_model_dir(tmp_path / "other", other, src="de",
                                                       tgt="en"))}
        says = "is not the reverse_model's tokenizer"
    elif case == "a language the model does not read":  # (French text, said to be French)
        write_lines(tmp_path / "mono.fr", FRENCH)
        entry = {"train": str(tmp_path / "mono.fr"), "tgt_lang": "fr",
                 "backtranslate": {**BT, "into": "en"}}
        says = "reverse_model translates de-en, not fr-en"
    elif case == "text of another language":  # (where the langid extra can tell)
        pytest.importorskip("py3langid")
        entry, says = {"train": str(tmp_path / "mono.fr")}, "train: "
        write_lines(tmp_path / "mono.fr", FRENCH)
    elif case == "empty file":
        entry, says = {"train": str(tmp_path / "empty.de")}, "train: "
        (tmp_path / "empty.de").write_bytes(b"")
    elif case == "binary file":
        entry, says = {"train": str(tmp_path / "bin.de")}, "NUL byte"
        (tmp_path / "bin.de").write_bytes(b"\x00\x01\x02 PK\x03\x04\n\x00\x00\n")
    elif case == "blank file":
        entry, says = {"train": str(tmp_path / "blank.de")}, "no text"
        (tmp_path / "blank.de").write_text("\n  \n\n")
    elif case == "unknown option":
        entry, says = {"backtranslate": {"sampling_top_k": 10}}, "did you mean sampling_topk"
    elif case == "bad option value":
        entry, says = {"backtranslate": {"beam": "five"}}, "backtranslate, beam 'five'"
    elif case == "options that clash":
        entry, says = {"backtranslate": {"beam": 4, "sampling_topk": 10}}, \
            "backtranslate: --sampling-topk 10 draws one token at a time: give --beam 1"
    elif case == "source-language text":
        entry, says = {"tgt_lang": None, "src_lang": "en"}, "tfm backtranslate --lang SRC"
    elif case == "no direction into its language":
        entry, says = {"tgt_lang": "fr"}, "no corpus of pairs translates into fr"
    config = run_config(tmp_path, reverse_model, **entry)
    line = one_line_error(prepare_cli(config, tokenizer_path, tmp_path / "data"))
    assert "corpora, entry 2" in line and says in line, line
    assert not (tmp_path / "data").exists() and not work_directory(tmp_path / "data").exists()
    assert mono.exists()  # (the text is never touched)


def test_a_mistake_of_prepare_itself_is_found_before_back_translating(
        reverse_model, tokenizer, tokenizer_path, tmp_path) -> None:
    word = next(t for t in sorted(tokenizer.get_vocab()) if t.isalpha() and len(t) > 2)
    config = run_config(tmp_path, reverse_model)
    line = one_line_error(prepare_cli(config, tokenizer_path, tmp_path / "data",
                                      "--synthetic-tag", word))
    assert "vocabulary entry" in line
    assert not work_directory(tmp_path / "data").exists()


def test_the_entry_takes_the_options_of_tfm_backtranslate_by_their_names() -> None:
    # Every option of `tfm backtranslate` but those the entry's own keys give is a key of
    # its backtranslate: (one owner: the dataclass fields both derive from).
    import typer.main

    from tfm.cli import app
    from tfm.data.monolingual import ENTRY_KEYS, backtranslate_keys

    command = typer.main.get_command(app).commands["backtranslate"]
    options = {p.name for p in command.params if p.param_type_name == "option"
               and not p.hidden}
    named_by_the_entry = {"input", "reverse_model", "lang", "into", "output", "tokenizer",
                          "config"}
    assert options - named_by_the_entry == set(backtranslate_keys())
    assert {v.lstrip("-").replace("-", "_") for v in ENTRY_KEYS.values()} < options
    corpora = corpora_from_config([
        {"train": "real", "src_lang": "en", "tgt_lang": "de"},
        {"train": "mono.de", "tgt_lang": "de", "reverse_model": "rev",
         "backtranslate": {"sampling-topk": 10, "beam": 1, "max_ratio": 2, "noise": True,
                           "batch_tokens": 800, "device": "cpu"}}])
    (mono,) = corpora.monolingual
    bt = mono.backtranslation
    assert mono.synthetic and str(mono.direction) == "en-de" and bt.into == "en"
    assert bt.search == {"sampling_topk": 10, "beam": 1, "batch_tokens": 800}
    assert bt.config.max_ratio == 2.0 and bt.config.noise and bt.engine.device == "cpu"
    with pytest.raises(UsageError, match="entry 2: its text is back-translated"):
        prepare(corpora, Path("tokenizer.json"), Path("data"))


def dataset_digest(data: Path) -> dict[str, str]:
    return {str(p.relative_to(data)): hashlib.sha256(p.read_bytes()).hexdigest()
            # (state.json holds a fingerprint that datasets draws at random)
            for p in sorted(data.rglob("*")) if p.is_file() and p.name != "state.json"}


def test_a_run_without_a_monolingual_corpus_prepares_what_it_did_before(
        tokenizer_path, tmp_path) -> None:
    # Through the command (which looks for monolingual entries) and through the library's
    # one-corpus path, which has no corpora list: the same files, byte for byte, and no
    # OUTPUT.bt/. The tokenizer trained from the config ignores nothing it read before.
    write_corpus(tmp_path / "corpus", PAIRS)
    train = str(tmp_path / "corpus" / "train")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"corpora": [
        {"train": train, "src_lang": "en", "tgt_lang": "de"}]}))
    result = prepare_cli(config, tokenizer_path, tmp_path / "a")
    assert result.returncode == 0, result.stderr
    assert "Back-translat" not in result.stderr
    prepare(CorpusSpec((train,), "en", "de"), tokenizer_path, tmp_path / "b")
    assert dataset_digest(tmp_path / "a") == dataset_digest(tmp_path / "b")
    assert not work_directory(tmp_path / "a").exists()


def test_the_tokenizer_of_a_run_config_learns_from_its_pairs_only(tmp_path) -> None:
    # The reverse model is trained with the run's tokenizer before any synthetic pair exists:
    # train-tokenizer reads the corpora of pairs of the same config and not the text (which
    # need not exist yet), and learns what it learns without the entry.
    from tfm.data.prepare import train_vocabularies

    write_corpus(tmp_path / "c", PAIRS)
    pairs = {"train": str(tmp_path / "c" / "train"), "src_lang": "en", "tgt_lang": "de"}
    mono = {"train": str(tmp_path / "not-yet.de"), "tgt_lang": "de", "reverse_model": "rev"}
    for separate in (False, True):
        alone = train_vocabularies(corpora_from_config([pairs]), 300, separate=separate)
        beside = train_vocabularies(corpora_from_config([pairs, mono]), 300,
                                    separate=separate)
        assert beside.src.to_str() == alone.src.to_str()
        assert beside.tgt.to_str() == alone.tgt.to_str()
