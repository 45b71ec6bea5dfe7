"""Joint or separate vocabularies: one BPE for both languages (the default), or one per
language, from `train-tokenizer` through `prepare`, training, the model directory and
translation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import tfm

from tfm.data.corpus import CorpusSpec
from tfm.data.dataset import load_split
from tfm.data.prepare import prepare, train_vocabularies
from tfm.data.tokenizer import (
    Vocabularies,
    decode,
    load_vocabularies,
    save_vocabularies,
    separate_paths,
)
from tfm.errors import ModelError

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "data" / "demo"


@pytest.fixture
def spec(corpus: tuple[Path, Path]) -> CorpusSpec:
    return CorpusSpec((str(corpus[0]), str(corpus[1])))


def test_separate_vocabularies_are_learnt_from_their_own_side(spec: CorpusSpec) -> None:
    vocabs = train_vocabularies(spec, vocab_size=300, separate=True)
    assert not vocabs.joint
    src, tgt = vocabs.src.get_vocab(), vocabs.tgt.get_vocab()
    # Merges of words seen on one side only: German words are not in the English vocabulary.
    assert "ĠEin" in tgt and "ĠEin" not in src
    assert "Ġthe" in src and "Ġthe" not in tgt
    assert train_vocabularies(spec, vocab_size=300).joint


def test_separate_vocabularies_are_two_files_named_after_one(spec: CorpusSpec,
                                                             tmp_path: Path) -> None:
    path = tmp_path / "tok.json"
    assert separate_paths(path) == (tmp_path / "tok.src.json", tmp_path / "tok.tgt.json")
    vocabs = train_vocabularies(spec, vocab_size=300, separate=True)
    assert save_vocabularies(vocabs, path) == list(separate_paths(path))
    loaded = load_vocabularies(path)
    assert not loaded.joint
    assert loaded.src.get_vocab() == vocabs.src.get_vocab()
    assert loaded.tgt.get_vocab() == vocabs.tgt.get_vocab()


def test_writing_one_form_removes_the_other(spec: CorpusSpec, tmp_path: Path) -> None:
    path = tmp_path / "vocab" / "tok.json"
    path.parent.mkdir()
    joint = train_vocabularies(spec, vocab_size=300)
    save_vocabularies(train_vocabularies(spec, vocab_size=300, separate=True), path)
    save_vocabularies(joint, path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["tok.json"]
    assert load_vocabularies(path).joint
    save_vocabularies(Vocabularies(joint.src, joint.tgt.__class__.from_str(joint.tgt.to_str())),
                      path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["tok.src.json", "tok.tgt.json"]


def test_one_of_the_pair_missing_is_a_model_error(spec: CorpusSpec, tmp_path: Path) -> None:
    path = tmp_path / "tok.json"
    save_vocabularies(train_vocabularies(spec, vocab_size=300, separate=True), path)
    separate_paths(path)[1].unlink()
    with pytest.raises(ModelError, match=r"tok\.tgt\.json: no such tokenizer file"):
        load_vocabularies(path)


def test_prepare_encodes_each_side_with_its_own_vocabulary(spec: CorpusSpec,
                                                           tmp_path: Path) -> None:
    vocabs = train_vocabularies(spec, vocab_size=300, separate=True)
    save_vocabularies(vocabs, tmp_path / "tok.json")
    prepare(spec, tmp_path / "tok.json", tmp_path / "data", valid=spec)
    assert load_vocabularies(tmp_path / "data" / "tokenizer.json").tgt.get_vocab() == \
        vocabs.tgt.get_vocab()
    split = load_split(tmp_path / "data", "valid")
    src_ids, tgt_ids = split.src(0).tolist(), split.tgt(0).tolist()
    assert decode(vocabs.src, src_ids) == split.src_text[0]
    assert decode(vocabs.tgt, tgt_ids) == split.tgt_text[0]
    # A new target vocabulary is a new dataset.
    save_vocabularies(Vocabularies(vocabs.src, train_vocabularies(spec, 280, separate=True).tgt),
                      tmp_path / "tok.json")
    assert not prepare(spec, tmp_path / "tok.json", tmp_path / "data", valid=spec).up_to_date


def test_the_whole_pipeline_with_separate_vocabularies(tmp_path: Path) -> None:
    steps = [
        ("train-tokenizer", "--train", str(DEMO / "train"), "-s", "en", "-t", "de",
         "--vocab-size", "500", "--separate", "-o", str(tmp_path / "tok.json")),
        ("prepare", "--train", str(DEMO / "train"), "--valid", str(DEMO / "valid"),
         "-s", "en", "-t", "de", "--tokenizer", str(tmp_path / "tok.json"),
         "-o", str(tmp_path / "data")),
        # A small model, and one validation (greedy BLEU with the target vocabulary), at the
        # last step.
        ("train", "--data", str(tmp_path / "data"), "--output", str(tmp_path / "model"),
         "--preset", "tiny", "--d-model", "32", "--n-heads", "2", "--d-ff", "64",
         "--max-steps", "3", "--valid-every", "3", "--max-tokens", "1024", "--warmup", "2",
         "--precision", "fp32"),
    ]
    results = []
    for args in steps:
        results.append(tfm(*args))
        assert results[-1].returncode == 0, f"{args[0]} failed:\n{results[-1].stderr}"
    assert "tok.src.json (500 entries), " in results[0].stderr.replace("\n", "")
    model = tmp_path / "model"
    records = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "bleu" in r) for r in records if r["kind"] == "valid"] == [(3, True)]
    assert {"tokenizer.src.json", "tokenizer.tgt.json"} <= {p.name for p in model.iterdir()}
    assert not (model / "tokenizer.json").exists()
    config = json.loads((model / "config.json").read_text())["model"]
    assert config["share_embeddings"] is False and config["tie_output"] is True
    assert config["src_vocab_size"] == config["tgt_vocab_size"] == 500

    out = tfm("translate", "--model", str(model), "--beam", "2", "A dog runs.", "")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2  # one line per input, empty stays empty
    averaged = tfm("average", "--model", str(model), "--last", "1")
    assert averaged.returncode == 0, averaged.stderr
    assert (model / "averaged" / "tokenizer.tgt.json").is_file()
