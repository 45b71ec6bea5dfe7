"""``tfm distill``: a teacher model and its training corpus to a small, fast student, in one run
directory, resumable (sequence-level knowledge distillation, Kim & Rush 2016, as Firefox
Translations' students are made).

::

    OUT/distill.json            what the run is of: the teacher (its weights' sha256), the
                                corpus, the direction, the teacher's search, the filter;
                                another teacher or corpus in OUT is refused
    OUT/teacher/train.TGT       the teacher's translations of the training sources (beam),
      (.scores, .json)          in chunks while it runs (tfm.decoding.corpus_translation),
                                kept: every student of OUT trains on them
    OUT/corpus/train.SRC/.TGT   the pairs the filter keeps (filter_pairs), filter.json its
                                counts
    OUT/data/                   those pairs prepared with the teacher's tokenizer
    OUT/NAME/                   a student (NAME: the preset, -ssru for an SSRU decoder), a
                                `tfm train` run directory; its vocabulary shortlist
    OUT/NAME/averaged/          its last checkpoints averaged (--average N), deployed in
                                place of its best model where it scores higher on val
    OUT/NAME-ctranslate2/       with export: the student as a CTranslate2 model
    OUT/teacher/ctranslate2/    with export: the teacher as one, for every student's report
    OUT/stages.json             each student's finished steps
    OUT/report-NAME.json        teacher and student on val (and test): BLEU, chrF,
                                sentences/s, peak memory, greedy and beam

Each step is skipped where its output is there and whole; a killed run goes on, run again
with the same arguments, where it stopped: the translation from its last chunk, the
student's training from its last checkpoint (tfm.training.loop.resume).

The student starts from the teacher's weights where a weight has the same name and shape
(``init_from_teacher``, the default: ``_teacher_start``), else from fresh ones; which
learns faster is measured in docs/BENCHMARKS.md, "Fast students".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

from tfm.atomic import atomic_write_bytes
from tfm.config import DistillConfig, ModelConfig, TrainConfig, model_config_from_preset
from tfm.data.corpus import CorpusSpec, corpus_fingerprint, iter_pairs
from tfm.errors import DataError, UsageError
from tfm.integrity import Manifest
from tfm.layout import ModelDir
from tfm.model_info import read_model_info

__all__ = ["DistillConfig", "DistillResult", "distill", "filter_pairs", "student_name"]

RUN_FILE = "distill.json"
RUN_VERSION = 1
# The run directory's own entries, which no student may be named.
RESERVED = ("teacher", "corpus", "data", RUN_FILE, "stages.json")  # (and NAME.init)


@dataclass
class DistillResult:
    output: Path
    student: Path
    stopped: str  # why the student's training ended ("interrupted ..." for a stop)
    reused_translations: int  # sentences the teacher had translated before this run
    report: dict[str, Any] = field(default_factory=dict)  # empty while not finished
    deployed: Path | None = None  # the student's model as deployed (None while not finished)

    @property
    def interrupted(self) -> bool:
        return self.stopped.startswith("interrupted")


@dataclass(frozen=True)
class Corpora:
    """The corpora of a distill run: the training pairs, validation, and an optional test."""

    train: CorpusSpec
    valid: CorpusSpec
    test: CorpusSpec | None = None


def student_name(config: DistillConfig, model: dict[str, Any]) -> str:
    """The student's directory name: --name, else the preset (``-ssru`` with an SSRU
    decoder)."""
    if config.name:
        return config.name
    ssru = model.get("decoder_self_attention") == "ssru"
    return config.preset + ("-ssru" if ssru else "")


def distill(teacher: Path, corpora: Corpora, output: Path, config: DistillConfig,
            model: dict[str, Any], train_options: dict[str, Any], *,
            prepared: Path | None = None, reporter: Any = None,
            say: Callable[[str], None] = lambda _: None,
            progress: Callable[[str, int, int], None] | None = None) -> DistillResult:
    """The whole run (see the module's text) into ``output``, which the caller holds the lock
    of. ``model``: the student's ModelConfig fields given over ``config.preset``;
    ``train_options``: its TrainConfig fields given; ``prepared``: the teacher's prepared
    dataset, if given, checked to have the teacher's tokenizer; ``reporter``: the training's
    TrainReporter; ``say``: one line per step; ``progress(what, done, total)``: the
    translation's. Everything is checked before anything is written (UsageError)."""
    plan = _plan(teacher, corpora, config, model, train_options, prepared)
    _claim(output, plan.identity)
    say(f"1. the teacher translates {plan.sources} training sources (beam {plan.search.beam})")
    translations = _teacher_translations(plan, output, config, progress)
    say(f"   {translations.reused} translated before, {translations.translated} now: "
        f"{translations.path}")
    kept = _filtered_corpus(plan, output, config, translations.path)
    say(f"2. filtered: {kept['kept']} of {kept['pairs']} pairs kept ({_dropped(kept)})")
    data = _prepared_data(plan, output)
    student = output / plan.name
    say(f"3. the student {plan.name} trains: {student}")
    stopped = _train_student(plan, data, student, reporter)
    if stopped.startswith("interrupted"):
        return DistillResult(output, student, stopped, translations.reused)
    deployed = _averaged(plan, output, config, student, say)
    _deploy(plan, output, config, data, student.name, deployed, say)
    say("5. the report: teacher and student on val" + (" and test" if corpora.test else ""))
    report = _report(plan, output, config, student.name, deployed)
    return DistillResult(output, student, stopped, translations.reused, report, deployed)


@dataclass
class _Plan:
    """What the run will do, checked before anything is written."""

    teacher: Path
    corpora: Corpora
    src: str
    tgt: str
    search: Any  # the teacher's SearchOptions
    student: ModelConfig
    train: TrainConfig
    given: dict[str, Any]  # the TrainConfig fields given (for a resumed run)
    model: dict[str, Any]
    preset: str
    name: str
    identity: dict[str, Any]
    sources: int
    init_from_teacher: bool = True


def _plan(teacher: Path, corpora: Corpora, config: DistillConfig, model: dict[str, Any],
          train_options: dict[str, Any], prepared: Path | None) -> _Plan:
    """Every check of the arguments, before anything is written: the teacher's direction
    against the corpus's, its tokenizer against the prepared dataset's, the student's shape
    against the export, the training's stopping rule."""
    info = read_model_info(teacher)
    if info.directions and len(info.directions) > 1:
        raise UsageError(f"--teacher {teacher}: a model of several directions "
                         f"({', '.join(info.directions)}); distil one of one direction")
    src, tgt = _direction(teacher, info, corpora.train)
    if prepared is not None:
        _check_prepared(teacher, prepared, src, tgt)
    student = model_config_from_preset(config.preset, **model)
    _check_export(config, student)
    name = student_name(config, model)
    if name in RESERVED or "/" in name or name.startswith("."):
        raise UsageError(f"--name {name}: a name of the run's own files; choose another")
    train = TrainConfig(**train_options)
    if not (train.max_steps or train.max_epochs or train.max_time or train.patience):
        raise UsageError("give the student's stopping rule: --max-steps, --max-epochs, "
                         "--max-time or --patience")
    search = _teacher_search(info, config)
    sources = sum(1 for _ in iter_pairs(corpora.train))
    if not sources:
        raise DataError(f"--train {corpora.train.paths[0]}: no pairs")
    identity = {"kind": "tfm distill", "version": RUN_VERSION,
                "teacher": _weights_digest(teacher), "direction": f"{src}-{tgt}",
                "train": corpus_fingerprint(corpora.train),
                "valid": corpus_fingerprint(corpora.valid),
                "teacher_search": _search_record(search),
                "filter": {"max_ratio": config.max_ratio, "drop_worst": config.drop_worst,
                           "with_originals": config.with_originals}}
    return _Plan(Path(teacher), corpora, src, tgt, search, student, train, train_options,
                 model, config.preset, name, identity, sources, config.init_from_teacher)


def _check_export(config: DistillConfig, student: ModelConfig) -> None:
    """A student shape the export asked for cannot hold, refused before any work."""
    if config.export != "ctranslate2":
        return
    from tfm.errors import ModelError
    from tfm.extras import require
    from tfm.interop.ctranslate2 import check_supported

    try:
        check_supported(student, Path("student"))
    except ModelError as e:
        why = str(e).split(": ", 1)[1]
        raise UsageError(f"--export ctranslate2: the student's shape cannot be exported ({why})"
                         ": drop --export, or choose a shape CTranslate2 runs") from None
    require("ctranslate2", "export")


def _direction(teacher: Path, info: Any, train: CorpusSpec) -> tuple[str, str]:
    """The corpus's languages, refused where the teacher translates another direction."""
    src, tgt = train.src_lang, train.tgt_lang
    if not src or not tgt:
        raise UsageError("give the corpus's languages: --src-lang and --tgt-lang")
    theirs = (info.src_lang, info.tgt_lang)
    if None not in theirs and theirs != (src, tgt):
        other = " (the other direction)" if theirs == (tgt, src) else ""
        raise UsageError(f"--teacher {teacher} translates {theirs[0]}→{theirs[1]} but the "
                         f"corpus is {src}→{tgt}{other}: give a teacher of {src}→{tgt}")
    return src, tgt


def _check_prepared(teacher: Path, prepared: Path, src: str, tgt: str) -> None:
    """The teacher's prepared dataset: its tokenizer must be the teacher's, its direction the
    corpus's."""
    from tfm.data.dataset import read_prepare_info
    from tfm.data.shortlist import vocabularies_digest
    from tfm.data.tokenizer import load_vocabularies
    from tfm.layout import TOKENIZER_FILE

    info = read_prepare_info(prepared)
    theirs = load_vocabularies(Path(prepared) / TOKENIZER_FILE)
    mine = load_vocabularies(ModelDir(teacher).tokenizer)
    if vocabularies_digest(theirs) != vocabularies_digest(mine):
        raise UsageError(f"--data {prepared} was prepared with another tokenizer than the "
                         f"teacher's ({teacher}): give the dataset the teacher was trained on")
    if info.src_lang and info.tgt_lang and (info.src_lang, info.tgt_lang) != (src, tgt):
        raise UsageError(f"--data {prepared} is {info.src_lang}→{info.tgt_lang} but the corpus "
                         f"is {src}→{tgt}")


def _teacher_search(info: Any, config: DistillConfig) -> Any:
    """The teacher's search: its saved generation defaults, the beam of --teacher-beam."""
    from tfm.config import SearchOptions

    g = info.generation
    beam = config.teacher_beam or g.beam
    return SearchOptions(beam=beam, length_penalty=g.length_penalty, max_len_a=g.max_len_a,
                         max_len_b=g.max_len_b)


def _search_record(search: Any) -> dict[str, Any]:
    record = asdict(search)
    record.pop("batch_tokens")  # the output is the same for any
    return record


def _weights_digest(model_dir: Path) -> str:
    """The sha256 of a model's weights: its manifest's record, else the file's."""
    files = ModelDir(model_dir)
    recorded = Manifest.read(files.root, strict=False).files.get(files.weights.name)
    if recorded:
        return str(recorded["sha256"])
    digest = hashlib.sha256()
    with open(files.weights, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _claim(output: Path, identity: dict[str, Any]) -> None:
    """``output`` as this run's directory: new, empty, or a distill run of the same teacher,
    corpus, direction, search and filter (its students may differ); anything else refused
    with one line, nothing written."""
    record = output / RUN_FILE
    if record.exists():
        try:
            theirs = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UsageError(f"{record}: unreadable ({e}); give another --output") from None
        differs = [k for k in identity if theirs.get(k) != identity[k]]
        if differs:
            raise UsageError(f"--output {output} holds a distill run of another "
                             f"{_worded(differs[0])}: give another --output")
        return
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        what = _kind_of(output)
        raise UsageError(f"--output {output} holds {what}, not a tfm distill run: give a new "
                         "or empty directory")
    atomic_write_bytes(record, json.dumps(identity, indent=1).encode("utf-8"))


def _worded(key: str) -> str:
    return {"teacher": "teacher (other weights)", "train": "training corpus",
            "valid": "validation corpus", "teacher_search": "teacher search (--teacher-beam)",
            "filter": "filter (--max-ratio, --drop-worst, --originals)",
            "version": "tfm version"}.get(key, key)


def _kind_of(output: Path) -> str:
    """What a directory that is not a distill run holds, as the refusal says it."""
    files = ModelDir(output)
    if not output.is_dir():
        return "a file"
    if files.train_state.exists():
        return "a training run (tfm train)"
    if files.config.exists():
        return "a model"
    if (output / "prepare.json").exists():
        return "a prepared dataset (tfm prepare)"
    return "other files"


def _teacher_translations(plan: _Plan, output: Path, config: DistillConfig,
                          progress: Callable[[str, int, int], None] | None) -> Any:
    """Step 1: the training sources translated by the teacher into OUT/teacher/train.TGT,
    reused where done before."""
    from tfm.decoding.corpus_translation import translate_corpus
    from tfm.decoding.engines import load_translator

    sources = [s for s, _ in iter_pairs(plan.corpora.train)]
    translator = load_translator(plan.teacher, plan.train.device)
    done = [0]

    def advance(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress("teacher", done[0], len(sources))

    try:
        return translate_corpus(translator, sources, output / "teacher" / f"train.{plan.tgt}",
                                plan.search, identity=plan.identity["teacher"],
                                chunk=config.chunk, progress=advance)
    finally:  # the student trains in this thread next: on all the CPU threads
        translator.close()


def filter_pairs(sources: Sequence[str], translations: Sequence[str], scores: Sequence[float],
                 max_ratio: float, drop_worst: float) -> tuple[list[int], dict[str, int]]:
    """The distillation filter: which pairs (indices) to keep, and how many each rule dropped.
    A pair is dropped, in this order, when its source or translation is empty; when the
    translation is a copy of the source (equal but for case and spaces: a teacher that copies
    teaches copying); when the longer side has more than ``max_ratio`` times the characters of
    the shorter (0: never); and, of the rest, the ``drop_worst`` fraction with the lowest
    teacher scores (log-probability per token: the least certain translations, Bergamot's
    cross-entropy filter)."""
    dropped = {"empty": 0, "copy": 0, "ratio": 0, "score": 0}
    kept = []
    for i, (s, t) in enumerate(zip(sources, translations)):
        s_clean, t_clean = " ".join(s.split()), " ".join(t.split())
        if not s_clean or not t_clean:
            dropped["empty"] += 1
        elif s_clean.casefold() == t_clean.casefold():
            dropped["copy"] += 1
        elif max_ratio and max(len(s_clean), len(t_clean)) > max_ratio * min(
                len(s_clean), len(t_clean)):
            dropped["ratio"] += 1
        else:
            kept.append(i)
    worst = int(len(kept) * drop_worst)
    if worst:
        by_score = sorted(kept, key=lambda i: (scores[i], i))
        gone = set(by_score[:worst])
        kept = [i for i in kept if i not in gone]
        dropped["score"] = worst
    return kept, dropped


def _filtered_corpus(plan: _Plan, output: Path, config: DistillConfig,
                     translated: Path) -> dict[str, Any]:
    """Step 2: OUT/corpus/train.SRC and .TGT, the pairs the filter keeps (with the originals
    first if asked), and filter.json, written last: the step is done where it is there."""
    from tfm.decoding.corpus_translation import read_translations

    folder = output / "corpus"
    record = folder / "filter.json"
    if record.exists():
        return json.loads(record.read_text(encoding="utf-8"))
    pairs = list(iter_pairs(plan.corpora.train))
    texts, scores = read_translations(translated)
    if len(texts) != len(pairs):
        raise DataError(f"{translated}: {len(texts)} translations of {len(pairs)} sources; "
                        "delete it to translate again")
    sources = [s for s, _ in pairs]
    kept, dropped = filter_pairs(sources, texts, scores, config.max_ratio, config.drop_worst)
    src_lines = [sources[i] for i in kept]
    tgt_lines = [texts[i] for i in kept]
    if config.with_originals:
        src_lines, tgt_lines = sources + src_lines, [t for _, t in pairs] + tgt_lines
    if not tgt_lines:
        raise DataError(f"the filter kept none of the {len(pairs)} pairs: loosen --max-ratio")
    for lang, lines in ((plan.src, src_lines), (plan.tgt, tgt_lines)):
        atomic_write_bytes(folder / f"train.{lang}",
                           "".join(" ".join(x.split()) + "\n" for x in lines).encode("utf-8"))
    counts = {"pairs": len(pairs), "kept": len(kept), "dropped": dropped,
              "with_originals": config.with_originals, "training_pairs": len(tgt_lines)}
    atomic_write_bytes(record, json.dumps(counts, indent=1).encode("utf-8"))
    return counts


def _dropped(counts: dict[str, Any]) -> str:
    parts = [f"{n} {why}" for why, n in counts["dropped"].items() if n]
    return "dropped: " + ", ".join(parts) if parts else "none dropped"


def _prepared_data(plan: _Plan, output: Path) -> Path:
    """Step 3a: the filtered pairs prepared with the teacher's tokenizer into OUT/data
    (tfm prepare's library function: instant where done before)."""
    from tfm.data.prepare import prepare

    data = output / "data"
    prepare(CorpusSpec((str(output / "corpus" / "train"),), plan.src, plan.tgt),
            ModelDir(plan.teacher).tokenizer, data, valid=plan.corpora.valid)
    return data


def _train_student(plan: _Plan, data: Path, student: Path, reporter: Any) -> str:
    """Step 3b: the student trained (tfm train's library functions), or its run resumed
    from its newest checkpoint; done before: nothing. Why it stopped."""
    from tfm.lock import directory_lock
    from tfm.training.loop import resume, train
    from tfm.training.state import Overrides

    stages = _stages(student.parent)
    if "trained" in stages.get(student.name, {}):
        return str(stages[student.name]["trained"]["stopped"])
    with directory_lock(student, "tfm distill"):
        if ModelDir(student).train_state.exists():
            try:
                result = resume(data, student, Overrides(plan.given, plan.model, plan.preset),
                                model_config=plan.student, reporter=reporter)
            except UsageError as e:
                # Killed after its training ended and before the stage was recorded.
                if not str(e).startswith("nothing left to do"):
                    raise
                _record_stage(student.parent, student.name, "trained", {"stopped": str(e)})
                return str(e)
        else:
            start = _teacher_start(plan, student) if plan.init_from_teacher else None
            result = train(data, student, plan.student, plan.train, reporter=reporter,
                           overwrite=True, init_from=start)
    if not result.stopped.startswith("interrupted"):
        _record_stage(student.parent, student.name, "trained",
                      {"stopped": result.stopped, "step": result.step,
                       "best_bleu": result.best_bleu, "minutes": round(result.elapsed / 60, 2)})
    return result.stopped


def _teacher_start(plan: _Plan, student: Path) -> Path:
    """The student's initial weights as a model directory beside it (``NAME.init``): drawn as
    `tfm train` draws them (its seed), then started from the teacher's
    (``teacher_start_weights``). The counts go to stages.json."""
    import torch

    from tfm.checkpoint import load_model_dir, save_model_dir
    from tfm.model import Transformer
    from tfm.model_info import ModelInfo

    teacher, vocabs, info = load_model_dir(plan.teacher)
    t = info.model
    config = replace(plan.student, src_vocab_size=t.src_vocab_size,
                     tgt_vocab_size=t.tgt_vocab_size, share_embeddings=t.share_embeddings)
    torch.manual_seed(plan.train.seed)
    model = Transformer(config)
    theirs = teacher.state_dict()
    mine = model.state_dict()
    state, copied = teacher_start_weights(mine, theirs, (t.encoder_layers, t.decoder_layers))
    model.load_state_dict(state)
    start = student.with_name(student.name + ".init")
    save_model_dir(start, model, vocabs, ModelInfo(config, src_lang=plan.src,
                                                   tgt_lang=plan.tgt))
    _record_stage(student.parent, student.name, "init_from_teacher",
                  {"copied": copied, "of": len(mine)})
    return start


# The weights that end a layer's residual branches: zeroed, the branch adds nothing.
BRANCH_OUTPUTS = (".self_attn.out_proj.", ".encoder_attn.out_proj.", ".ffn.fc2.")


def teacher_start_weights(mine: Mapping[str, Any], theirs: Mapping[str, Any],
                          teacher_layers: tuple[int, int]) -> tuple[dict[str, Any], int]:
    """The student's drawn weights ``mine`` started from the teacher's ``theirs``, and how
    many were copied: every weight of the same name and shape (the embeddings and output
    layer, encoder and decoder layer i from the teacher's layer i). A layer beyond the
    teacher's depth (a `student-6-1`'s encoder layers 3 to 5, from a 3 + 3 teacher) keeps its
    drawn weights but starts as an identity: its residual branches' last projections are
    zeroed (as Fixup, Zhang et al. 2019, starts every branch), so it passes its input on
    through its LayerNorm and the teacher's layers below feed the decoder almost as in the
    teacher. On Multi30k this trained faster than fresh layers or the teacher's stack
    repeated (docs/BENCHMARKS.md, "Fast students"). An SSRU's own weights stay drawn."""
    import torch

    state = dict(mine)
    copied = 0
    for name, value in mine.items():
        if name in theirs and theirs[name].shape == value.shape:
            state[name] = theirs[name]
            copied += 1
    depth = {"encoder_layers": teacher_layers[0], "decoder_layers": teacher_layers[1]}
    for name, value in mine.items():
        stack, _, rest = name.partition(".")
        if (stack in depth and int(rest.partition(".")[0]) >= depth[stack]
                and any(part in name for part in BRANCH_OUTPUTS)):
            state[name] = torch.zeros_like(value)
    return state, copied


def _stages(output: Path) -> dict[str, Any]:
    try:
        return json.loads((output / "stages.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _record_stage(output: Path, name: str, stage: str, value: Any,
                  forget: Sequence[str] = ()) -> None:
    """``stage`` of student ``name`` recorded as done, and the stages ``forget`` as not."""
    stages = _stages(output)
    mine = stages.setdefault(name, {})
    for earlier in forget:
        mine.pop(earlier, None)
    mine[stage] = value
    atomic_write_bytes(output / "stages.json", json.dumps(stages, indent=1).encode("utf-8"))


def _averaged(plan: _Plan, output: Path, config: DistillConfig, student: Path,
              say: Callable[[str], None]) -> Path:
    """Step 4a: the student's model to deploy. Its last ``config.average`` numbered
    checkpoints (as many as it kept, two at least) averaged into NAME/averaged (`tfm
    average`'s), deployed where their greedy BLEU on val (the report's sentences) is higher
    than that of the student's best model by validation; else that model. Recorded in
    stages.json; a shortlist, export and report made before of the other model are made
    again."""
    from tfm.training.average import average_checkpoints, numbered_checkpoints
    from tfm.training.distill_report import greedy_bleu

    done = _stages(output).get(student.name, {})
    if "average" in done:
        return Path(done["average"]["deployed"])
    last = min(config.average, len(numbered_checkpoints(student)))
    if last < 2:
        return student
    averaged = average_checkpoints(student, last)
    say(f"4. the last {last} checkpoints of {student.name} averaged (steps "
        f"{', '.join(map(str, averaged.steps))}): {averaged.output}")
    pairs = list(islice(iter_pairs(plan.corpora.valid), config.report_sentences or None))
    bleu = {"model": greedy_bleu(student, pairs, plan.train.device),
            "averaged": greedy_bleu(averaged.output, pairs, plan.train.device)}
    deployed = averaged.output if bleu["averaged"] > bleu["model"] else student
    say(f"   val BLEU, greedy: the average {bleu['averaged']:.2f}, the best model "
        f"{bleu['model']:.2f}: {deployed} deployed")
    # What was deployed before the average, if anything, was not it: made again.
    _record_stage(output, student.name, "average",
                  {"steps": averaged.steps, "val_bleu_greedy": bleu, "sentences": len(pairs),
                   "deployed": str(deployed)},
                  forget=("shortlist", "export", "report") if deployed != student else ())
    return deployed


def _deploy(plan: _Plan, output: Path, config: DistillConfig, data: Path, name: str,
            deployed: Path, say: Callable[[str], None]) -> None:
    """Step 4: the deployed student's vocabulary shortlist, built on the distilled data (int8
    needs no calibration: its scales are the weights'; the report compares both with fp32 on
    val), and the export asked for."""
    done = _stages(output).get(name, {})
    if config.shortlist and "shortlist" not in done:
        from tfm.decoding.shortlist import make_shortlist

        say(f"4. the shortlist of {deployed}")
        make_shortlist(data, deployed)
        _record_stage(output, name, "shortlist", True)
    if config.export == "ctranslate2" and "export" not in done:
        from tfm.interop.ctranslate2 import export_ctranslate2

        target = output / f"{name}-ctranslate2"
        say(f"4. {deployed} exported to CTranslate2: {target}")
        export_ctranslate2(deployed, target, None, True)
        _record_stage(output, name, "export", str(target))
    if config.export == "ctranslate2" and "export" not in _stages(output).get("teacher", {}):
        _export_teacher(plan.teacher, output / "teacher" / "ctranslate2", say)
        _record_stage(output, "teacher", "export", str(output / "teacher" / "ctranslate2"))


def _export_teacher(teacher: Path, target: Path, say: Callable[[str], None]) -> None:
    """The teacher exported to CTranslate2 once for every student's report, which sets the
    students against the teacher as the fastest runtime decodes it."""
    from tfm.interop.ctranslate2 import export_ctranslate2

    say(f"4. the teacher exported to CTranslate2: {target}")
    export_ctranslate2(teacher, target, None, True)


def _report(plan: _Plan, output: Path, config: DistillConfig, name: str,
            student: Path) -> dict[str, Any]:
    """Step 5: OUT/report-NAME.json (see tfm.training.distill_report) of the deployed
    ``student``, kept where it was made before of the same sets and sentences."""
    from tfm.training.distill_report import measure

    stages = _stages(output).get(name, {})
    path = output / f"report-{name}.json"
    sets = [("val", plan.corpora.valid)] + ([("test", plan.corpora.test)]
                                            if plan.corpora.test else [])
    if stages.get("report") == {"sets": [n for n, _ in sets],
                                "sentences": config.report_sentences} and path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    report = _apart(measure, plan.teacher, student, sets, plan.search.beam,
                    config.report_sentences, plan.train.device, shortlist="shortlist" in stages,
                    export=stages.get("export"),
                    teacher_export=_stages(output).get("teacher", {}).get("export"))
    report["student"] = {"name": name, "preset": plan.preset, "deployed": str(student),
                         "model": asdict(plan.student), **stages.get("trained", {}),
                         **({"average": stages["average"]} if "average" in stages else {})}
    report["filter"] = json.loads((output / "corpus" / "filter.json").read_text("utf-8"))
    atomic_write_bytes(path, json.dumps(report, indent=1).encode("utf-8"))
    _record_stage(output, name, "report", {"sets": [n for n, _ in sets],
                                           "sentences": config.report_sentences})
    return report


def _apart(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` in a fresh Python process: the report's peak memory is
    then each model's as a deployment loads it, not what the student's training left in this
    process (several GB after a long run, which no trimming gives back)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args, **kwargs).result()
