"""bf16 training on CPU (tfm.training.bf16): a bf16 copy of the model runs the steps, the fp32
master weights are updated, saved and resumed; chosen by --precision auto only on CPUs that
compute bf16 natively."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tfm.config import ModelConfig, TrainConfig
from tfm.layout import ModelDir
from tfm.model import Transformer
from tfm.training.bf16 import BATCH_WIDTH_MULTIPLE, Bf16Copy
from tfm.training.distributed import Distributed
from tfm.training.loop import _update, resume, train
from tfm.training.objective import label_smoothed_loss
from tfm.training.state import Overrides

ROOT = Path(__file__).resolve().parent.parent
TINY = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64,
                   dropout=0.1)


def config(**overrides) -> TrainConfig:
    values = dict(max_tokens=512, lr=1e-3, warmup_steps=5, valid_every=10**6, save_every=10**6,
                  log_every=1, valid_bleu=False, precision="bf16", seed=3, keep_last=2,
                  device="cpu")
    values.update(overrides)
    return TrainConfig(**values)


def records(model_dir: Path, kind: str = "train") -> list[dict]:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_bf16_copy_keeps_the_tied_weights_tied_and_rounds_the_masters() -> None:
    torch.manual_seed(0)
    master = Transformer(ModelConfig(**{**TINY.__dict__, "src_vocab_size": 50,
                                        "tgt_vocab_size": 50}))
    copy = Bf16Copy(master)
    net = copy.model
    assert net.output_proj.weight is net.tgt_embed.token.weight is net.src_embed.token.weight
    assert all(p.dtype == torch.bfloat16 for p in net.parameters())
    assert all(p.dtype == torch.float32 for p in master.parameters())
    with torch.no_grad():
        master.output_proj.weight.add_(1.0)
    copy.weights_from_master()
    for a, b in zip(master.parameters(), net.parameters()):
        assert torch.equal(a.to(torch.bfloat16), b)


def test_updates_accumulate_on_the_fp32_masters_below_bf16_resolution(dataset: Path) -> None:
    """An update far smaller than a bf16 weight's last bit is lost in a bf16 weight but kept
    by its fp32 master: after the step the copy is the master rounded."""
    from tfm.data.batching import collate, make_batches
    from tfm.data.dataset import load_split

    split = load_split(dataset, "train")
    group = [collate(split, make_batches(split.src_lengths, split.tgt_lengths, 512,
                                         shuffle=False)[0])]
    torch.manual_seed(0)
    master = Transformer(ModelConfig(**{**TINY.__dict__, "src_vocab_size": 400,
                                        "tgt_vocab_size": 400, "dropout": 0.0}))
    before = {k: v.clone() for k, v in master.state_dict().items()}
    copy = Bf16Copy(master)
    optimizer = torch.optim.Adam(master.parameters(), lr=1e-6)
    cfg = config(warmup_steps=1)
    one_process, no_scaling = Distributed(), torch.amp.GradScaler("cpu", enabled=False)
    for step in range(1, 4):
        loss, nll, n = _update(copy.model, optimizer, group, cfg, None, step, one_process,
                               no_scaling, bf16=copy)
        assert n > 0 and loss > 0
    moved = lost = 0  # weights the updates moved; of those, how many a bf16 weight lost
    for name, after in master.state_dict().items():
        changed = after != before[name]
        moved += int(changed.sum())
        lost += int((changed & (after.to(torch.bfloat16) == before[name].to(torch.bfloat16)))
                    .sum())
    assert moved and lost  # three updates of 1e-6: kept by the masters, some below bf16's bit
    assert all(p.grad is None for p in copy.model.parameters())
    for a, b in zip(master.parameters(), copy.model.parameters()):
        assert torch.equal(a.to(torch.bfloat16), b)


def test_a_bf16_run_learns_and_saves_fp32_weights(dataset: Path, tmp_path: Path) -> None:
    result = train(dataset, tmp_path / "m", TINY, config(max_steps=30))
    assert result.step == 30
    curve = [r["loss"] for r in records(tmp_path / "m")]
    assert sum(curve[-5:]) / 5 < sum(curve[:5]) / 5 - 0.5  # it learns
    files = ModelDir(tmp_path / "m")
    for path in (files.weights, files.last_weights):
        assert {t.dtype for t in load_file(path).values()} == {torch.float32}
    state = torch.load(files.train_state, weights_only=True)
    assert {t.dtype for t in state["model"].values()} == {torch.float32}
    assert state["scaler"] == {}  # bf16 needs no loss scaling


def test_the_same_seed_repeats_a_bf16_run_and_a_resumed_one_ends_identical(
        dataset: Path, tmp_path: Path) -> None:
    k = 7
    straight = train(dataset, tmp_path / "straight", TINY,
                     config(max_steps=2 * k, max_tokens=2048))
    again = train(dataset, tmp_path / "again", TINY, config(max_steps=2 * k, max_tokens=2048))
    train(dataset, tmp_path / "resumed", TINY, config(max_steps=k, max_tokens=2048))
    resumed = resume(dataset, tmp_path / "resumed",
                     Overrides.of(config(max_steps=2 * k), "max_steps"))
    assert straight.step == again.step == resumed.step == 2 * k
    a = load_file(tmp_path / "straight" / "last.safetensors")
    for other in ("again", "resumed"):
        b = load_file(tmp_path / other / "last.safetensors")
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), (other, name)
        assert [r["loss"] for r in records(tmp_path / other)] == \
            [r["loss"] for r in records(tmp_path / "straight")]


def test_a_bf16_run_validates_and_its_model_decodes(dataset: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import tfm.training.validation as validation
    from tfm.data.dataset import load_split
    from tfm.decoding.torch_engine import TorchTranslator

    scored = []  # (hypotheses, references, BLEU) of each validation

    def recording(hypotheses, references, *args, **kwargs):
        result = real(hypotheses, references, *args, **kwargs)
        scored.append((list(hypotheses), list(references), result.score))
        return result

    real = validation.bleu
    monkeypatch.setattr(validation, "bleu", recording)
    train(dataset, tmp_path / "m", TINY, config(max_steps=4, valid_every=2, valid_bleu=True))
    valid = records(tmp_path / "m", "valid")
    assert [r["step"] for r in valid] == [2, 4]
    # Its BLEU is that of step 4's model translating the whole validation split greedily (a
    # model of 4 steps scores 0: what it scored, not the score, shows it validated).
    assert [r["bleu"] for r in valid] == [bleu for _, _, bleu in scored]
    hypotheses, references, _ = scored[-1]
    assert references == load_split(dataset, "valid").tgt_text
    last = TorchTranslator(tmp_path / "m", "cpu", weights_file="last.safetensors", workers=1)
    sources = (ROOT / "data" / "demo" / "valid.en").read_text(encoding="utf-8").splitlines()
    assert hypotheses == [t.text for t in last.translate(sources, last.default_options(beam=1))]
    assert any(hypotheses)

    translators = {}
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        translator = translators[precision] = TorchTranslator(tmp_path / "m", "cpu",
                                                              precision=precision)
        assert {p.dtype for p in translator.model.parameters()} == {dtype}
        [out] = translator.translate(["A dog runs."], translator.default_options(
            beam=2, max_len_a=0.0, max_len_b=5))
        assert out.text
    # bf16 weights score that translation close to fp32 weights, but not as they do
    [source] = translators["fp32"].prepare(["A dog runs."])
    target = translators["fp32"].vocabs.tgt.encode(out.text, add_special_tokens=False).ids
    [fp32], [bf16] = (t.forced_log_probs([source.ids], [target]) for t in translators.values())
    assert bf16 == pytest.approx(fp32, abs=0.05) and bf16 != fp32


def test_a_bf16_run_validates_its_fp32_masters_the_weights_it_saves(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tfm.training.loop as loop

    validated = []

    def recording(model, *args, **kwargs):
        validated.append({p.dtype for p in model.parameters()})
        return real(model, *args, **kwargs)

    real = loop.validate
    monkeypatch.setattr(loop, "validate", recording)
    train(dataset, tmp_path / "m", TINY, config(max_steps=2, valid_every=1))
    assert validated == [{torch.float32}, {torch.float32}]


@pytest.mark.parametrize("support", ["AMX", None], ids=["amx", "no-bf16"])
def test_the_training_log_names_the_bf16_path_and_warns_where_it_is_emulated(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        support: str | None) -> None:
    from tfm.training.reporting import TrainReporter

    class Recorder(TrainReporter):
        def __init__(self) -> None:
            self.info: dict = {}
            self.messages: list[str] = []

        def start(self, info: dict) -> None:
            self.info = info

        def message(self, text: str) -> None:
            self.messages.append(text)

    monkeypatch.setattr("tfm.training.loop.cpu_bf16_support", lambda: support)
    reporter = Recorder()
    train(dataset, tmp_path / "m", TINY, config(max_steps=1), reporter=reporter)
    assert reporter.info["precision"].startswith("bf16: bf16 model, fp32 master weights")
    warnings = [m for m in reporter.messages if "no native bf16" in m]
    if support:
        assert f"native bf16 ({support})" in reporter.info["precision"]
        assert not warnings
    else:
        assert len(warnings) == 1 and "\n" not in warnings[0]


def test_the_rowwise_loss_of_bf16_logits_equals_the_fp32_loss_of_the_same_values() -> None:
    torch.manual_seed(0)
    logits = (torch.randn(70, 301) * 4).to(torch.bfloat16)  # rows beyond a multiple of ROWS
    target = torch.randint(4, 301, (70,))
    mine = logits.clone().requires_grad_()
    reference = logits.float().requires_grad_()
    loss, nll = label_smoothed_loss(mine, target, 0.1)
    expected, expected_nll = label_smoothed_loss(reference, target, 0.1)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, expected_nll)
    (loss * 0.5).backward()
    (expected * 0.5).backward()
    assert mine.grad.dtype == torch.bfloat16
    torch.testing.assert_close(mine.grad, reference.grad.to(torch.bfloat16))


def test_a_run_may_change_its_precision_when_resumed(dataset: Path, tmp_path: Path) -> None:
    """fp32 and bf16 runs keep the same state (fp32 weights, Adam over them): either resumes
    the other."""
    train(dataset, tmp_path / "m", TINY, config(max_steps=3, precision="fp32"))
    resume(dataset, tmp_path / "m", Overrides.of(config(max_steps=6), "max_steps", "precision"))
    resume(dataset, tmp_path / "m",
           Overrides.of(config(max_steps=8, precision="fp32"), "max_steps", "precision"))
    assert [r["step"] for r in records(tmp_path / "m")] == list(range(1, 9))
    weights = load_file(ModelDir(tmp_path / "m").last_weights)
    assert {t.dtype for t in weights.values()} == {torch.float32}


def test_a_batch_padded_wider_gives_the_same_loss_and_gradients(dataset: Path) -> None:
    # What lets a bf16 run pad its batches to a few widths (BATCH_WIDTH_MULTIPLE): the extra
    # columns are masked keys and unlabelled positions, so they change nothing.
    from tfm.data.batching import collate, make_batches
    from tfm.data.dataset import load_split

    split = load_split(dataset, "train")
    indices = make_batches(split.src_lengths, split.tgt_lengths, 512, shuffle=False)[3]
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**{**TINY.__dict__, "src_vocab_size": 400,
                                       "tgt_vocab_size": 400, "dropout": 0.0}))
    losses, gradients = [], []
    for multiple in (1, 8):
        batch = collate(split, indices, width_multiple=multiple)
        model.zero_grad()
        loss, _ = label_smoothed_loss(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1)
        loss.backward()
        losses.append(loss.item())
        gradients.append([p.grad.clone() for p in model.parameters()])
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
    for a, b in zip(*gradients):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)  # sums in another order


def test_a_bf16_run_on_a_cpu_pads_its_batches_to_a_few_widths(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tfm.training.loop as loop
    from tfm.data.batching import collate

    widths: set[int] = set()

    def recording(split, indices, width_multiple=1, starts=None, alignments=None):
        batch = collate(split, indices, width_multiple, starts, alignments)
        widths.update((batch.src.shape[1], batch.tgt_in.shape[1]))
        return batch

    monkeypatch.setattr(loop, "collate", recording)
    train(dataset, tmp_path / "bf16", TINY, config(max_steps=12))
    assert widths and all(w % BATCH_WIDTH_MULTIPLE == 0 for w in widths)
    widths.clear()
    train(dataset, tmp_path / "fp32", TINY, config(max_steps=12, precision="fp32"))
    assert any(w % BATCH_WIDTH_MULTIPLE for w in widths)  # fp32 pads no wider
