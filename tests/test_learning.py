"""End to end, a Transformer must really learn: reversing sequences of symbols.

Reversal cannot be solved by copying aligned positions or by a language model of the target:
every output position must attend to the right source position, and the decoder must count.
If the masks, the loss, the optimizer, batching or decoding were wrong together or apart, the
accuracy here would collapse.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import sacrebleu

from tfm.config import ModelConfig, SearchOptions, TrainConfig
from tfm.data.corpus import CorpusSpec
from tfm.data.prepare import prepare
from tfm.data.tokenizer import save_tokenizer, train_tokenizer
from tfm.decoding.torch_engine import TorchTranslator
from tfm.training.loop import train

LETTERS = "abcdefgh"


def _write_split(directory: Path, name: str, n: int, rng: random.Random) -> CorpusSpec:
    sources = [" ".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 8)))
               for _ in range(n)]
    targets = [" ".join(reversed(s.split())) for s in sources]
    (directory / f"{name}.src").write_text("\n".join(sources) + "\n")
    (directory / f"{name}.tgt").write_text("\n".join(targets) + "\n")
    return CorpusSpec((str(directory / f"{name}.src"), str(directory / f"{name}.tgt")))


@pytest.fixture(scope="module")
def reversal_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("reverse")
    rng = random.Random(0)
    train_spec = _write_split(root, "train", 3000, rng)
    valid_spec = _write_split(root, "valid", 100, rng)
    _write_split(root, "test", 200, rng)
    tokenizer = train_tokenizer((root / "train.src").read_text().splitlines(), vocab_size=300)
    save_tokenizer(tokenizer, root / "tokenizer.json")
    prepare(train_spec, root / "tokenizer.json", root / "data", valid=valid_spec)
    # One encoder layer is enough to find the source's end; the decoder's two count back
    # from it. This model and schedule learn reversal as surely as two encoder layers and
    # twice the positions a batch did, in less time (docs/BENCHMARKS.md, the test suite).
    model_config = ModelConfig(d_model=64, n_heads=4, encoder_layers=1, decoder_layers=2,
                               d_ff=128, dropout=0.0)
    # An epoch is about 20 steps: validate once an epoch and keep the best model. 500 steps
    # at a peak of 4e-3 learn as well as 600 at 3e-3 did (docs/BENCHMARKS.md, the test suite).
    train_config = TrainConfig(max_tokens=1024, lr=4e-3, warmup_steps=50, lr_schedule="linear",
                               max_steps=500, valid_every=20, save_every=10**9,
                               valid_bleu=True, precision="fp32", keep_last=0, seed=1,
                               device="cpu")
    result = train(root / "data", root / "model", model_config, train_config)
    assert result.step == 500
    return root, root / "model"


@pytest.mark.parametrize("beam", [1, 4])
def test_a_small_transformer_learns_to_reverse_sequences(reversal_model, beam: int) -> None:
    root, model_dir = reversal_model
    sources = (root / "test.src").read_text().splitlines()
    references = (root / "test.tgt").read_text().splitlines()
    translator = TorchTranslator(model_dir, "cpu")
    hypotheses = [t.text for t in translator.translate(sources, SearchOptions(beam=beam))]
    exact = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    print(f"beam {beam}: exact match {exact:.3f}, BLEU {bleu:.2f}")
    assert exact >= 0.95, f"exact match {exact:.2f}, BLEU {bleu:.1f}"
    assert bleu >= 95.0


def test_training_keeps_the_best_validation_model(reversal_model) -> None:
    _, model_dir = reversal_model
    import json

    provenance = json.loads((model_dir / "config.json").read_text())["provenance"]
    assert provenance["valid_bleu"] >= 90.0
    assert provenance["valid_bleu_signature"].startswith("nrefs:1|")
