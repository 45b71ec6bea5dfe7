"""On a CUDA GPU: training, resuming and decoding behave as on the CPU.

Skipped where torch sees no CUDA device, as in CI; on a GPU machine run
``pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tfm.config import ModelConfig, SearchOptions, TrainConfig
from tfm.decoding.engines import load_translator
from tfm.decoding.search import beam_search
from tfm.device import resolve_precision
from tfm.model import Transformer
from tfm.training.loop import resume, train
from tfm.training.state import Overrides

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

TINY = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64,
                   dropout=0.1)
DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"


def config(**overrides) -> TrainConfig:
    values = dict(max_tokens=2048, lr=1e-3, warmup_steps=5, valid_every=10**6,
                  save_every=10**6, log_every=1, valid_bleu=False, precision="fp32", seed=3,
                  keep_last=2, device="cuda")
    values.update(overrides)
    return TrainConfig(**values)


def sources(n: int = 20) -> list[str]:
    return (DEMO / "valid.en").read_text(encoding="utf-8").splitlines()[:n]


def real_tfm(*args: str, stdin: str | None = None) -> str:
    """``tfm ARGS`` run to its end as a fresh ``python -m tfm``; its stdout. Never forked from
    the tests' preloader (conftest.tfm): a forked child cannot use CUDA where its parent had
    initialised it, and a fresh process is safe whatever the preloader loaded."""
    done = subprocess.run([sys.executable, "-m", "tfm", *args], input=stdin,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_model_trained_on_a_gpu_translates_the_same_on_the_cpu(dataset: Path,
                                                                  tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=40))
    weights = load_file(tmp_path / "m" / "model.safetensors")
    assert all(t.device.type == "cpu" and t.dtype == torch.float32 for t in weights.values())
    gpu, cpu = load_translator(tmp_path / "m", "cuda"), load_translator(tmp_path / "m", "cpu")
    assert next(gpu.model.parameters()).is_cuda
    for beam in (1, 4):
        options = gpu.default_options(beam=beam)
        assert [t.text for t in gpu.translate(sources(), options)] == \
            [t.text for t in cpu.translate(sources(), options)]


def test_padding_is_masked_by_the_gpus_attention_kernels_in_fp32_and_bf16() -> None:
    # A sentence's encoder output and next-token scores are the same alone and beside a longer
    # sentence (padded keys get no attention), with the fused kernels tfm uses on CUDA.
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**{**TINY.__dict__, "src_vocab_size": 50,
                                       "tgt_vocab_size": 50, "dropout": 0.0})).cuda().eval()
    short = torch.tensor([[7, 8, 9, 2]], device="cuda")
    batch = torch.tensor([[7, 8, 9, 2, 0, 0, 0, 0, 0], [5, 6, 7, 8, 9, 10, 11, 12, 2]],
                         device="cuda")
    tgt = torch.tensor([[1, 13, 14]], device="cuda")
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
        m = model.to(dtype)
        with torch.inference_mode():
            alone, _ = m.encode(short)
            together, _ = m.encode(batch)
            torch.testing.assert_close(together[:1, :4], alone, atol=tolerance, rtol=tolerance)
            logits_alone = m(short, tgt)
            logits_together = m(batch, torch.cat([tgt, tgt]))[:1]
            torch.testing.assert_close(logits_together, logits_alone, atol=tolerance,
                                       rtol=tolerance)


def test_beam_search_in_a_batch_finds_what_it_finds_one_sentence_at_a_time(
        dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=40))
    translator = load_translator(tmp_path / "m", "cuda")
    ids = [source.ids for source in translator.prepare(sources(8))]
    width = max(len(i) for i in ids)
    batch = torch.tensor([i + [0] * (width - len(i)) for i in ids], device="cuda")
    together = beam_search(translator.model, batch, SearchOptions(beam=4))
    for row, sentence in enumerate(ids):
        alone = beam_search(translator.model, torch.tensor([sentence], device="cuda"),
                            SearchOptions(beam=4))
        assert alone[0][0].tokens == together[row][0].tokens
        assert alone[0][0].score == pytest.approx(together[row][0].score, abs=1e-4)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_graphs_find_what_step_by_step_decoding_finds(dataset: Path, tmp_path: Path,
                                                           precision: str) -> None:
    # One sentence at a time (the latency case) and whole batches; greedy, beam, n-best. In
    # fp32 the same texts, scores to float rounding. In bf16 the two paths' attention kernels
    # round differently at bf16's 8 bits (a masked fixed cache against a growing one), which
    # can swap two near-equal tokens of this barely trained model: nearly all the same.
    train(dataset, tmp_path / "m", TINY, config(max_steps=40))
    graphs = load_translator(tmp_path / "m", "cuda", precision)
    steps = load_translator(tmp_path / "m", "cuda", precision, cuda_graphs=False)
    assert graphs.graphs is not None and steps.graphs is None
    same = compared = 0
    for beam, n_best in ((1, 1), (4, 1), (5, 3)):
        options = graphs.default_options(beam=beam, n_best=n_best)
        for batch in [sources(12), *([s] for s in sources(6))]:
            for a, b in zip(graphs.translate(batch, options), steps.translate(batch, options)):
                compared += 1
                texts = [text for text, _ in a.hypotheses] == [text for text, _ in b.hypotheses]
                same += texts
                if precision == "fp32":
                    assert texts, (a.hypotheses, b.hypotheses)
                    assert [score for _, score in a.hypotheses] == pytest.approx(
                        [score for _, score in b.hypotheses], abs=1e-5)
    assert graphs.graphs.graphs, "no batch was searched by a CUDA graph"
    assert same >= 0.9 * compared, f"{same} of {compared} the same"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_forced_decoder_start_on_a_gpu_is_the_cpus_in_every_path(precision: str) -> None:
    # tfm's search, the fixed search of CUDA graphs and an ensemble, each started from
    # <s> X: on CUDA what the CPU finds. These untrained models have near-ties that another
    # device's rounding can swap (bf16's 8 bits more often: 32 of 36 the same on a CPU in
    # bf16), so nearly all, not all; a start that did not reach the GPU's decoder would leave
    # few the same.
    from tfm.decoding.graphs import CudaGraphs
    from tfm.decoding.search import search
    from tfm.model.ensemble import Ensemble

    torch.manual_seed(0)
    members = [Transformer(ModelConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32,
                                       n_heads=2, encoder_layers=2, decoder_layers=2, d_ff=64,
                                       dropout=0.0)).eval() for _ in range(2)]
    src = torch.randint(4, 40, (6, 9))
    src[:, -1] = 3  # EOS
    start = torch.tensor([[2, 17]] * 6)  # <s>, then a forced token
    dtype = resolve_precision(precision, torch.device("cuda"), training=False)
    same = compared = 0
    for model in (members[0], Ensemble(members).eval()):
        for options in (SearchOptions(beam=1), SearchOptions(beam=4, n_best=2)):
            cpu = search(model, src, options, start=start)
            gpu_model = model.to("cuda")
            if dtype is not None:
                gpu_model = gpu_model.to(dtype)
            paths = [search(gpu_model, src.cuda(), options, start=start.cuda())]
            if isinstance(model, Transformer):
                paths.append(CudaGraphs(gpu_model).search(src.cuda(), options, start.cuda()))
            for found in paths:
                for a, b in zip(found, cpu):
                    compared += 1
                    same += [h.tokens for h in a] == [h.tokens for h in b]
            model.to("cpu").float()
    assert same >= (0.9 if precision == "fp32" else 0.7) * compared, \
        f"{same} of {compared} the same"


def test_a_run_stopped_and_resumed_on_a_gpu_ends_where_the_straight_run_ends(
        dataset: Path, tmp_path: Path) -> None:
    # Dropout draws from the GPU's generator: the resumed run must continue its stream. (The
    # GPU's kernels may sum in another order from run to run, hence a tolerance, far below
    # what other dropout masks would change.)
    straight = train(dataset, tmp_path / "straight", TINY, config(max_steps=14))
    train(dataset, tmp_path / "resumed", TINY, config(max_steps=7))
    resumed = resume(dataset, tmp_path / "resumed", Overrides.of(config(max_steps=14), "max_steps"))
    assert straight.step == resumed.step == 14
    a = load_file(tmp_path / "straight" / "last.safetensors")
    b = load_file(tmp_path / "resumed" / "last.safetensors")
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-5, rtol=1e-4, msg=name)


def test_auto_precision_trains_in_bf16_on_a_gpu_and_saves_fp32_weights(dataset: Path,
                                                                       tmp_path: Path) -> None:
    assert resolve_precision("auto", torch.device("cuda")) == (
        torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    train(dataset, tmp_path / "m", TINY, config(max_steps=20, precision="auto"))
    weights = load_file(tmp_path / "m" / "model.safetensors")
    assert all(t.dtype == torch.float32 and t.isfinite().all() for t in weights.values())


def test_the_command_line_translates_on_a_gpu(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=20))
    out = real_tfm("translate", "-m", str(tmp_path / "m"), "--device", "cuda", "--precision",
                   "auto", "--beam", "3", stdin="\n".join(sources(5)) + "\n")
    assert len(out.splitlines()) == 5


def test_constrained_beam_search_on_a_gpu_meets_the_phrases_as_on_the_cpu(
        dataset: Path, tmp_path: Path) -> None:
    # Terminology constraints (tfm.decoding.constraints) keep their banks and automaton states
    # on the GPU: the outputs are the CPU's, and each contains its phrases.
    from tfm.decoding.constraints import ConstraintSpec

    train(dataset, tmp_path / "m", TINY, config(max_steps=40))
    gpu, cpu = load_translator(tmp_path / "m", "cuda"), load_translator(tmp_path / "m", "cpu")
    references = (DEMO / "valid.de").read_text(encoding="utf-8").splitlines()
    specs = [ConstraintSpec([" ".join(ref.split()[1:3])], None) if i % 2 else
             ConstraintSpec([], " ".join(ref.split()[:2])) for i, ref in enumerate(references[:8])]
    options = gpu.default_options(beam=4)
    on_gpu = gpu.translate(sources(8), options, constraints=specs)
    on_cpu = cpu.translate(sources(8), options, constraints=specs)
    assert [t.text for t in on_gpu] == [t.text for t in on_cpu]
    for spec, result in zip(specs, on_gpu):
        assert all(phrase in result.text for phrase in spec.phrases), result.text
        assert result.text.startswith(spec.prefix or "")


def fine_tuned_on_a_gpu(data: Path, imported: Path, out: Path) -> list[str]:
    """``imported`` fine-tuned on ``data`` into ``out`` by 30 steps on the GPU in the
    precision auto picks; the names of the weights that changed (the saved ones fp32)."""
    from tfm.training.state import initial_model_config

    result = train(data, out, initial_model_config(imported),
                   config(max_steps=30, precision="auto", lr=1e-4), init_from=imported)
    assert result.step == 30
    weights = load_file(out / "model.safetensors")
    base = load_file(imported / "model.safetensors")
    assert all(t.dtype == torch.float32 and t.isfinite().all() for t in weights.values())
    return [name for name in base if not torch.equal(weights[name], base[name])]


def test_an_imported_marian_model_translates_and_fine_tunes_on_a_gpu(tmp_path: Path) -> None:
    # What tfm import adds to the model (the activation, the fixed output bias) runs on the GPU
    # as on the CPU, and train --init-from fine-tunes the import there, in the precision auto
    # picks.
    from test_import_marian import DE, EN, build_marian, generated_lines, train_spm_models

    from tfm.data.corpus import CorpusSpec
    from tfm.data.prepare import prepare
    from tfm.interop.marian_import import import_marian

    marian = build_marian(tmp_path / "marian", train_spm_models(), "swish-shared-languages")
    imported = import_marian(marian, tmp_path / "imported")
    lines = generated_lines(EN, 20, 5)
    gpu, cpu = load_translator(imported, "cuda"), load_translator(imported, "cpu")
    for beam in (1, 4):
        options = gpu.default_options(beam=beam)
        assert [t.text for t in gpu.translate(lines, options)] == \
            [t.text for t in cpu.translate(lines, options)]

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.en").write_text("\n".join(generated_lines(EN, 200, 11)) + "\n")
    (corpus / "train.de").write_text("\n".join(generated_lines(DE, 200, 12)) + "\n")
    prepare(CorpusSpec((str(corpus / "train"),), "en", "de"), imported / "tokenizer.json",
            tmp_path / "prepared")
    changed = fine_tuned_on_a_gpu(tmp_path / "prepared", imported, tmp_path / "tuned")
    assert changed and "output_bias" not in changed  # fine-tuned; the bias stays fixed
    tuned = load_translator(tmp_path / "tuned", "cuda")
    assert all(t.text for t in tuned.translate(lines[:5], tuned.default_options(beam=4)))


@pytest.fixture(scope="module")
def nllb_import(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NLLB-200 layout's stand-in of tests/test_import_m2m100.py, imported by tfm."""
    from test_import_m2m100 import build, sentencepiece_model

    from tfm.interop.m2m100_import import import_m2m100

    root = tmp_path_factory.mktemp("nllb")
    build(root / "hf", sentencepiece_model(), "nllb")
    return import_m2m100(root / "hf", root / "tfm")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_imported_nllb_model_translates_into_the_language_asked_on_a_gpu_as_on_the_cpu(
        nllb_import: Path, precision: str) -> None:
    # The NLLB-200 layout's stand-in of tests/test_import_m2m100.py (where the CPU's outputs
    # are transformers' generate()'s): its decoder starts from </s> and the target's code,
    # forced, never scored nor output, on the GPU step by step and through CUDA graphs. A start
    # that did not reach the GPU's decoder would translate into another language and leave few
    # the same; bf16's rounding may swap near-ties of this briefly trained model.
    from test_import_m2m100 import CODES, DIRECTIONS, generated, text

    imported = nllb_import
    cpu = load_translator(imported, "cpu")
    paths = [load_translator(imported, "cuda", precision),
             load_translator(imported, "cuda", precision, cuda_graphs=False)]
    same = compared = 0
    for src, tgt in DIRECTIONS:
        codes = dict(language=cpu.languages.resolve(CODES["nllb"][tgt], CODES["nllb"][src]))
        lines = [text(src, c) for c in generated(12, 5)]
        for beam in (1, 4):
            options = cpu.default_options(beam=beam)
            expected = [t.text for t in cpu.translate(lines, options, **codes)]
            for gpu in paths:
                found = [t.text for t in gpu.translate(lines, options, **codes)]
                compared += len(lines)
                same += sum(a == b for a, b in zip(found, expected))
    assert paths[0].graphs is not None and paths[0].graphs.graphs, "no CUDA graph searched"
    assert same >= (0.9 if precision == "fp32" else 0.7) * compared, \
        f"{same} of {compared} the same"


def test_an_imported_nllb_model_fine_tunes_on_a_gpu_with_its_codes_forced(
        nllb_import: Path, tmp_path: Path) -> None:
    # tfm prepare with the import's tokenizer and codes (each pair's decoder start two tokens:
    # </s> and the target's code; what is fed and labelled is test_import_m2m100's), then
    # train --init-from on the GPU in the precision auto picks: the weights fp32 and changed,
    # and the tuned model translating on the GPU as on the CPU.
    from test_import_m2m100 import CODES, generated, text

    from tfm.data.corpus import CorpusSpec
    from tfm.data.dataset import read_prepare_info
    from tfm.data.prepare import prepare

    codes, imported = CODES["nllb"], nllb_import
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    concepts = generated(200, 8)
    for lang in ("en", "de"):
        (corpus / f"train.{codes[lang]}").write_text(
            "".join(text(lang, c) + "\n" for c in concepts), encoding="utf-8")
    prepare(CorpusSpec((str(corpus / "train"),), codes["en"], codes["de"]),
            imported / "tokenizer.json", tmp_path / "prepared")
    assert len(read_prepare_info(tmp_path / "prepared").decoder_starts[0]) == 2
    assert fine_tuned_on_a_gpu(tmp_path / "prepared", imported, tmp_path / "tuned")
    lines = [text("en", c) for c in generated(8, 9)]
    gpu, cpu = load_translator(tmp_path / "tuned", "cuda"), load_translator(tmp_path / "tuned",
                                                                            "cpu")
    asked = dict(language=cpu.languages.resolve(codes["de"], codes["en"]))
    options = gpu.default_options(beam=4)
    assert [t.text for t in gpu.translate(lines, options, **asked)] == \
        [t.text for t in cpu.translate(lines, options, **asked)]


def test_a_decoder_side_language_token_and_the_levers_train_and_translate_on_a_gpu(
        tmp_path: Path) -> None:
    # The toy multi-way corpus of tests/test_multilingual.py prepared with the language token
    # in the decoder, trained on the GPU in the precision auto picks with the levers against
    # off-target output (the language loss; online back-translation, whose greedy search runs
    # on the GPU inside training): each direction in the language asked (exact match, as on
    # the CPU), the forced tag never output, the GPU's translations the CPU's.
    from test_multilingual import DIRECTIONS, run_config
    from toy_languages import write_corpus

    for split, n, seed in (("train", 1500, 1), ("valid", 40, 2), ("test", 60, 3)):
        write_corpus(tmp_path / "corpus", split, n, seed=seed)
    config, out = run_config(tmp_path), tmp_path / "model"
    real_tfm("train-tokenizer", "--config", str(config))
    real_tfm("prepare", "--config", str(config), "--language-token", "decoder")
    real_tfm("train", "--config", str(config), "--device", "cuda", "--precision", "auto",
             "--max-steps", "320", "--valid-every", "320", "--save-every", "320",
             "--language-loss", "0.5", "--online-bt-from", "200")
    saved = json.loads((out / "train_config.json").read_text())
    assert (saved["device"], saved["language_loss"], saved["online_bt_from"]) == ("cuda", 0.5,
                                                                                  200)
    assert json.loads((out / "config.json").read_text())["language_marking"] == {
        "where": "decoder_token"}
    gpu, cpu = load_translator(out, "cuda"), load_translator(out, "cpu")
    options = cpu.default_options(beam=1)
    for direction in DIRECTIONS:
        src, tgt = direction.split("-")
        lines = (tmp_path / "corpus" / f"test.{src}").read_text().splitlines()
        asked = cpu.languages.resolve(tgt)
        hyps = [t.text for t in gpu.translate(lines, options, language=asked)]
        assert hyps == [t.text for t in cpu.translate(lines, options, language=asked)]
        refs = (tmp_path / "corpus" / f"test.{tgt}").read_text().splitlines()
        exact = sum(h == r for h, r in zip(hyps, refs)) / len(refs)
        assert exact >= 0.5, f"{direction}: exact match {exact:.2f}"
        assert not any(">>" in h for h in hyps)


# --- this wave's paths: student shapes, tags placed by attention, back-translation ----------

def test_tfm_distill_trains_an_ssru_student_on_a_gpu_that_decodes_there_as_on_the_cpu(
        dataset: Path, tmp_path: Path) -> None:
    # The whole command on the GPU: the teacher's beam translation of the sources, the
    # student (an SSRU decoder, from the teacher's weights) trained in the precision auto
    # picks, its shortlist and the report; the student's greedy and beam output on the GPU
    # (step by step and CUDA graphs) is the CPU's.
    train(dataset, tmp_path / "teacher", TINY, config(max_steps=40))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang in ("en", "de"):
        lines = (DEMO / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:60]
        (corpus / f"train.{lang}").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    out = tmp_path / "run"
    real_tfm("distill", "--teacher", str(tmp_path / "teacher"), "--train", str(corpus / "train"),
             "--valid", str(DEMO / "valid"), "--test", str(DEMO / "test"), "-o", str(out),
             "--chunk", "25", "--report-sentences", "8", "--d-model", "32", "--n-heads", "2",
             "--d-ff", "64", "--encoder-layers", "2", "--decoder-layers", "1",
             "--decoder-self-attn", "ssru", "--name", "student", "--max-steps", "30",
             "--max-tokens", "512", "--warmup", "5", "--valid-every", "1000", "--save-every",
             "10", "--precision", "auto", "--device", "cuda")
    student = out / "student"
    assert json.loads((student / "config.json").read_text())["model"][
        "decoder_self_attention"] == "ssru"
    assert json.loads((student / "train_config.json").read_text())["device"] == "cuda"
    report = json.loads((out / "report-student.json").read_text())
    assert all(row["sentences_per_s"] > 0 for part in report["sets"].values()
               for row in part["rows"])
    cpu = load_translator(student, "cpu")
    for graphs in (True, False):
        gpu = load_translator(student, "cuda", "fp32", cuda_graphs=graphs)
        for beam in (1, 4):
            options = cpu.default_options(beam=beam)
            assert [t.text for t in gpu.translate(sources(), options)] == \
                [t.text for t in cpu.translate(sources(), options)], (graphs, beam)


def test_a_page_s_tags_are_placed_by_the_gpu_s_attention_as_by_the_cpu_s(
        dataset: Path, tmp_path: Path) -> None:
    # A model without an alignment lexicon places a document's inline tags by its
    # cross-attention, returned by the GPU's search: the page is the CPU's, byte for byte.
    train(dataset, tmp_path / "m", TINY, config(max_steps=40))
    words = [s.rstrip(" .").split() for s in sources(6)]
    page = tmp_path / "page.html"
    page.write_text("<html><body>\n" + "".join(
        f"<p>{' '.join(w[:1])} <b>{' '.join(w[1:3])}</b> {' '.join(w[3:-1])} "
        f"<a href=\"#{k}\">{w[-1]}</a>.</p>\n" for k, w in enumerate(words) if len(w) > 4)
        + "</body></html>\n", encoding="utf-8")
    for device in ("cuda", "cpu"):
        real_tfm("translate", "-m", str(tmp_path / "m"), "--device", device, "--precision",
                 "fp32", "--input", str(page), "--output", str(tmp_path / f"{device}.html"))
    on_gpu = (tmp_path / "cuda.html").read_text(encoding="utf-8")
    assert on_gpu == (tmp_path / "cpu.html").read_text(encoding="utf-8")
    assert on_gpu.count("<b>") == on_gpu.count("</b>") == page.read_text().count("<b>") > 0


def back_translated(model: Path, mono: Path, out: Path, device: str, *more: str,
                    launcher: tuple[str, ...] = ()) -> str:
    """``tfm backtranslate`` of the English ``mono`` into German by the en->de ``model``
    (the reverse model of a de->en run), run by ``launcher`` (torchrun) where given; the
    synthetic German."""
    args = ["backtranslate", "-i", str(mono), "--reverse-model", str(model), "--lang", "en",
            "--into", "de", "--device", device, "-o", str(out), *more]
    if launcher:
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", *launcher,
                               "-m", "tfm", *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    else:
        real_tfm(*args)
    return out.with_name(out.name + ".de").read_text(encoding="utf-8")


SAMPLED = ("--beam", "1", "--sampling-topk", "0", "--sampling-seed", "4")


def test_back_translation_on_a_gpu_samples_reproducibly_and_beams_as_the_cpu(
        dataset: Path, tmp_path: Path) -> None:
    # Sampling draws from a generator of each sentence's own on the GPU: the same draws in
    # other chunks and batches; beam search's corpus is the CPU's.
    train(dataset, tmp_path / "m", TINY, config(max_steps=40))
    mono = tmp_path / "mono.en"
    mono.write_text("\n".join(sources(30)) + "\n", encoding="utf-8")
    model = tmp_path / "m"
    sampled = back_translated(model, mono, tmp_path / "s1", "cuda", *SAMPLED, "--chunk", "7")
    assert back_translated(model, mono, tmp_path / "s2", "cuda", *SAMPLED, "--chunk", "4",
                           "--batch-tokens", "64") == sampled
    assert back_translated(model, mono, tmp_path / "b-gpu", "cuda", "--beam", "4") == \
        back_translated(model, mono, tmp_path / "b-cpu", "cpu", "--beam", "4")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_processes_on_two_gpus_back_translate_what_one_does(dataset: Path,
                                                                tmp_path: Path) -> None:
    # torchrun, one process a GPU, over NCCL: each translates its share on cuda:LOCAL_RANK
    # and rank 0 joins them in order into the one process's corpus.
    train(dataset, tmp_path / "m", TINY, config(max_steps=40))
    mono = tmp_path / "mono.en"
    mono.write_text("\n".join(sources(30)) + "\n", encoding="utf-8")
    one = back_translated(tmp_path / "m", mono, tmp_path / "one", "cuda", *SAMPLED)
    two = back_translated(tmp_path / "m", mono, tmp_path / "two", "cuda", *SAMPLED,
                          launcher=("--standalone", "--nproc_per_node=2"))
    assert two == one
