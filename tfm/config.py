"""Configuration dataclasses: one per concern, defaults in one place, saved as JSON.

``ModelConfig`` describes the architecture and is stored in every model directory's
``config.json`` with the model's ``GenerationDefaults``; ``TrainConfig`` describes a training
run and is stored beside it; ``CleanConfig`` says which pairs ``prepare`` keeps and
``SearchOptions`` how a translator decodes. Command-line defaults are read from these classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from tfm.errors import OptionError, UsageError
from tfm.special_tokens import PAD_ID

T = TypeVar("T")


def option(default: Any, help: str, **metadata: Any) -> Any:
    """A field and its command-line option, written once: the commands derive the option
    (tfm.cli.fields) from the field's name, type, default and this metadata:

    - ``help``: what --help says of it;
    - ``option``: its spelling where it is not ``--field-name``; None: no option;
    - ``short``: a one-letter alias ("-b");
    - ``flag``: a bool's two spellings where they are not ``--name``/``--no-name``;
    - ``min``: the smallest value allowed, checked by ``check_fields`` (a one-line error);
    - ``shown_default``: the default as --help says it, where it is decided later (the
      preset's, the model's);
    - ``envvar``: an environment variable that gives it too;
    - ``was``: an old spelling, refused with a one-line error naming the new one.
    """
    if isinstance(default, list):  # a repeatable option: a fresh list for each instance
        return field(default_factory=lambda: list(default),
                     metadata={"help": help, **metadata})
    return field(default=default, metadata={"help": help, **metadata})


def _cli(default: Any, option: str | None) -> Any:
    """A field whose command-line option is not spelled ``--field-name``: ``option`` is how
    ``tfm train`` spells it, None where it has none."""
    return field(default=default, metadata={"option": option})


def _arch(default: Any, help: str, **metadata: Any) -> Any:
    """A ModelConfig field a preset sets: its option's default is the preset's."""
    return option(default, help, shown_default="the preset's", **metadata)


def option_spelling(cls: type, name: str) -> str | None:
    """How the command line spells field ``name`` of dataclass ``cls`` (``--warmup`` for
    TrainConfig.warmup_steps), or None for a field that has no option."""
    for f in fields(cls):
        if f.name == name:
            if "flag" in f.metadata:
                return "/".join(f.metadata["flag"])
            return f.metadata.get("option", "--" + name.replace("_", "-"))
    raise KeyError(name)


def check_fields(config: Any) -> None:
    """The checks a dataclass's fields declare (``min``), each failing as one line that names
    the option."""
    for f in fields(config):
        low = f.metadata.get("min")
        value = getattr(config, f.name)
        if low is not None and value is not None and value < low:
            spelled = option_spelling(type(config), f.name) or f.name
            raise UsageError(f"{spelled} {value}: give {low} or more")


# The FFN's activations (tfm.model.layers.ACTIVATIONS has their functions): the paper's ReLU,
# and those of imported MarianMT models.
ACTIVATION_NAMES = ("relu", "swish", "gelu")


@dataclass
class ModelConfig:
    """The encoder-decoder Transformer of "Attention is all you need" (Vaswani et al., 2017)."""

    src_vocab_size: int = _cli(8000, None)  # from the tokenizer
    tgt_vocab_size: int = _cli(8000, None)
    d_model: int = _arch(512, "Model width: embeddings and every sub-layer's output.")
    n_heads: int = _arch(8, "Attention heads (d_model must be divisible by them).")
    encoder_layers: int = _arch(6, "Encoder layers.")
    decoder_layers: int = _arch(6, "Decoder layers.")
    d_ff: int = _arch(2048, "Feed-forward width, inside each layer's FFN.")
    dropout: float = _arch(0.1, "Dropout on the embeddings and on every sub-layer's output, "
                           "before the residual add.")
    attention_dropout: float = option(0.0, "Dropout on the attention weights.")
    activation_dropout: float = option(0.0, "Dropout inside the FFN, after the ReLU.")
    # longest sequence (tokens, BOS/EOS included) the model accepts
    max_positions: int = _cli(1024, None)
    norm_first: bool = _arch(False, "LayerNorm before each sub-layer (pre-norm) or after the "
                             "residual add (post-norm, as in the paper).",
                             flag=("--pre-norm", "--post-norm"))
    share_embeddings: bool = _cli(True, None)  # one embedding table for both sides (joint vocab)
    tie_output: bool = _cli(True, None)  # output projection shares the target embedding matrix
    # Set by `tfm import` for MarianMT models (format 2; a model of format 1 has the defaults):
    # the FFN's activation (tfm.model.layers.ACTIVATIONS), and a constant bias on the logits.
    activation: str = _cli("relu", None)
    output_bias: bool = _cli(False, None)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise UsageError(
                f"d_model ({self.d_model}) must be divisible by the number of heads "
                f"({self.n_heads})"
            )
        if self.activation not in ACTIVATION_NAMES:
            raise UsageError(f"unknown activation {self.activation!r}; tfm has "
                             f"{', '.join(ACTIVATION_NAMES)}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise UsageError(
                "shared embeddings need one joint vocabulary, but the source has "
                f"{self.src_vocab_size} entries and the target {self.tgt_vocab_size}"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


# Presets: architecture sizes only; vocabulary sizes come from the tokenizer.
PRESETS: dict[str, dict[str, Any]] = {
    # The paper's base model (Table 3): 6+6 layers, d_model 512, 8 heads, d_ff 2048.
    "base": dict(d_model=512, n_heads=8, encoder_layers=6, decoder_layers=6, d_ff=2048,
                 dropout=0.1),
    # The paper's big model.
    "big": dict(d_model=1024, n_heads=16, encoder_layers=6, decoder_layers=6, d_ff=4096,
                dropout=0.3),
    # Multi30k-sized data (~30k pairs): the size the peers are compared at.
    "small": dict(d_model=256, n_heads=4, encoder_layers=3, decoder_layers=3, d_ff=1024,
                  dropout=0.1),
    # Toy corpora and tests: trains in minutes on a laptop CPU.
    "tiny": dict(d_model=128, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=512,
                 dropout=0.1),
}


def model_config_from_preset(preset: str, **overrides: Any) -> ModelConfig:
    """A ModelConfig from a named preset, with any field overridden (None means keep)."""
    if preset not in PRESETS:
        raise UsageError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    values = dict(PRESETS[preset])
    values.update({k: v for k, v in overrides.items() if v is not None})
    return ModelConfig(**values)


@dataclass
class TrainConfig:
    """A training run: data, optimisation, stopping and checkpointing.

    ``tfm train`` has an option for each field that has a help (see ``option``); its --help
    shows these defaults."""

    max_tokens: int = option(4096, "Batch size in padded token positions (the longer of "
                             "source and target side, per sentence).", min=1)
    update_freq: int = option(1, "Batches per optimizer step (gradient accumulation).", min=1)
    lr: float = option(7e-4, "Peak learning rate, reached after warmup.")
    warmup_steps: int = option(4000, "Linear warmup steps, then the --lr-schedule decay.",
                               option="--warmup", min=0)
    lr_schedule: str = option(
        "inverse-sqrt", "After warmup: inverse-sqrt (the paper's), or linear / cosine decay to "
        "0 at the end of the budget (--max-steps, --max-epochs or --max-time, whichever runs "
        "out first).")
    adam_betas: tuple[float, float] = _cli((0.9, 0.98), None)
    adam_eps: float = _cli(1e-9, None)
    label_smoothing: float = option(0.1, "Label smoothing epsilon.", min=0)
    weight_decay: float = option(0.0, "L2 penalty on the weights, added to the gradient by "
                                 "Adam (not AdamW's decoupled decay).", min=0)
    clip_norm: float = option(1.0, "Clip the gradient norm to this; 0 disables.", min=0)
    max_steps: int = option(0, "Stop after this many optimizer steps (0: no limit).", min=0)
    max_epochs: int = option(0, "Stop after this many epochs (0: no limit).", min=0)
    max_time: float = option(0.0, "Stop after this many minutes of training (0: no limit).",
                             min=0)
    sampling_temperature: float = option(
        1.0, "A multilingual run: each epoch draws direction i with probability proportional "
        "to its pairs ** (1/T): 1 in proportion to the data, higher values closer to uniform "
        "(more of the small directions). Corpora given weights are drawn by those instead.")
    valid_every: int = option(1000, "Validate every N steps, and once more at the end of "
                              "training.", min=1)
    valid_bleu: bool = _cli(True, None)  # greedy BLEU on the validation set at each validation
    # (without BLEU, a lower validation loss is the better score)
    patience: int = option(0, "Stop after N validations in a row without a better BLEU "
                           "(0: never). Needs a validation split.", min=0)
    save_every: int = option(1000, "Save the training state every N steps.", min=1)
    keep_last: int = option(5, "Numbered checkpoints to keep (for `tfm average`).", min=0)
    log_every: int = option(50, "Log training metrics every N steps.", min=1)
    seed: int = option(1, "Random seed.")
    device: str = option("auto", "auto (CUDA if available, else CPU), cpu or cuda.")
    precision: str = option(
        "auto", "auto, fp32, bf16 or fp16. auto: bf16 autocast on CUDA (fp16 where bf16 is "
        "not supported); on CPUs with native bf16 (AMX, AVX-512 BF16) a bf16 model with fp32 "
        "master weights, fp32 on other CPUs (bf16 is emulated there and trains many times "
        "slower). Saved weights are fp32 in every precision. fp16 scales the loss to keep "
        "small gradients (a step whose gradients overflow is skipped and the scale lowered).")
    compile: bool = option(False, "Compile the model with torch.compile (slower start, often "
                           "faster steps on GPUs).")
    num_threads: int = option(0, "CPU threads for torch (0: torch's default).",
                              option="--threads", min=0)

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.sampling_temperature > 0:
            raise UsageError(f"--sampling-temperature {self.sampling_temperature:g}: give a "
                             "number above 0")


def option_name(name: str) -> str | None:
    """How ``tfm train`` spells TrainConfig field ``name`` (``--warmup`` for warmup_steps), or
    None for a field it has no option for."""
    return option_spelling(TrainConfig, name)


@dataclass
class CleanConfig:
    """Which pairs ``tfm prepare`` keeps."""

    max_length: int = option(250, "Drop pairs with a side longer than this many BPE tokens "
                             "(the end-of-sentence token not counted).",
                             min=1, was="--max-tokens")
    max_ratio: float = option(3.0, "Drop pairs whose length ratio (longer side / shorter "
                              "side, in tokens + 1) exceeds this; 0: keep all.", min=0)
    dedup: bool = option(False, "Drop repeated (source, target) pairs.")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class ShortlistConfig:
    """How ``tfm shortlist`` builds a vocabulary shortlist (tfm.data.shortlist)."""

    per_token: int = 50  # translations kept per source token
    frequent: int = 500  # most frequent target tokens, always candidates
    iterations: int = 5  # EM rounds of IBM Model 1


@dataclass
class GenerationDefaults:
    """Decoding settings saved with a model (config.json), used when the user gives none."""

    beam: int = 5  # 1 = greedy
    length_penalty: float = 1.0  # scores are divided by length ** this (beam search)
    max_len_a: float = 1.5  # maximum output length: a * source length + b
    max_len_b: int = 10


_G = GenerationDefaults  # the defaults a model directory starts with
MBR_UTILITIES = ("bleu", "chrf")  # sentence-level metrics --mbr can choose by (tfm.decoding.mbr)


# --reverse-model's weight (tfm.decoding.rerank): how it was chosen, docs/multi30k-log.md.
REVERSE_WEIGHT = 0.25


@dataclass
class SearchOptions:
    """How one call of a Translator decodes; the model's GenerationDefaults fill what the user
    leaves unset (``Translator.default_options``)."""

    beam: int = option(GenerationDefaults.beam, "Beam size; 1 is greedy decoding.",
                       short="-b", min=1, shown_default=f"the model's, {_G.beam}")
    length_penalty: float = option(
        GenerationDefaults.length_penalty, "Beam search: scores are divided by length ** this.",
        shown_default=f"the model's, {_G.length_penalty}")
    max_len_a: float = option(GenerationDefaults.max_len_a, "Maximum output length is a * "
                              "source length + b.", shown_default=f"the model's, {_G.max_len_a}")
    max_len_b: int = option(GenerationDefaults.max_len_b, "See --max-len-a.",
                            shown_default=f"the model's, {_G.max_len_b}")
    min_len: int = option(0, "Minimum output length in tokens.", min=0)
    n_best: int = option(1, "Hypotheses per sentence (jsonl shows them all).")
    stop_early: bool = option(
        True, "Beam search: end a sentence once its --n-best best hypotheses have ended (as "
        "OpenNMT-py and CTranslate2 do), or wait for --beam of them (as fairseq does: slower, "
        "sometimes slightly higher BLEU).")
    batch_tokens: int = option(4096, "Most source tokens x beam decoded in one batch (more: "
                               "more memory, fewer batches). The output is the same whatever "
                               "the number.", min=1)
    attention: bool = _cli(False, None)  # keep cross-attention and word alignments (slower)
    mbr: str | None = option(
        None, "Beam search: output the hypothesis the beam's other hypotheses agree with most "
        "(minimum Bayes risk, each weighted by its probability), by this sentence-level "
        "metric: bleu or chrf (tfm.decoding.mbr). Usually a little higher BLEU / chrF than the "
        "best-scoring hypothesis, at a larger beam (e.g. --beam 8).")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.mbr is not None:
            if self.mbr not in MBR_UTILITIES:
                raise UsageError(f"--mbr {self.mbr}: choose {' or '.join(MBR_UTILITIES)}")
            if self.beam < 2:
                raise UsageError("--mbr chooses among the beam's hypotheses: give --beam 2 "
                                 "or more (5-8 is usual)")
        if not 1 <= self.n_best <= self.beam:
            raise OptionError("n_best", f"must be between 1 and the beam ({self.beam}), "
                              f"not {self.n_best}")


@dataclass
class EngineOptions:
    """Which model decodes, where, and what ranks its hypotheses: what ``tfm translate`` and
    ``tfm eval`` load (tfm.decoding.engines.load_translator, tfm.decoding.rerank)."""

    model: Path = option(Path("model"), "A model directory written by `tfm train` (or `tfm "
                         "average`), or a CTranslate2 export from `tfm export --to "
                         "ctranslate2`, decoded with CTranslate2.", short="-m")
    ensemble: list[Path] = option([], "Another model directory (same tokenizer) to decode "
                                  "together with --model, their probabilities averaged at "
                                  "every step; repeat for more.")
    reverse_model: list[Path] = option(
        [], "Beam search: rank each sentence's hypotheses anew with a tfm model of the other "
        "direction (e.g. de->en for an en->de model): each scored by how well it lets that "
        "model read the source back (see --reverse-weight). Repeat for an ensemble. Most "
        "useful with --mbr.")
    reverse_weight: float = option(
        REVERSE_WEIGHT, "With --reverse-model: hypothesis score + this x the reverse model's "
        "log-probability of the source per source token.")
    device: str = option("auto", "auto (CUDA if available, else CPU), cpu or cuda.")
    precision: str = option(
        "fp32", "Weights for decoding: fp32, bf16, fp16 (CUDA), int8 (CPU: int8 weights, and "
        "each token's activations rounded to int8, in the Linear layers; the output can differ "
        "a little from fp32's) or auto (bf16 on CUDA and on CPUs with native bf16, else fp32; "
        "never int8).")
    workers: int | None = option(
        None, "Batches decoded at once (tfm's search), each by a thread with its share of the "
        "CPU threads, so that the cores stay busy between the small steps of one search. The "
        "output is the same whatever the number.", min=1,
        shown_default="2 on a CPU with 2 threads or more, else 1")
    shortlist: bool = option(
        False, "tfm's search: score only the target tokens that the sources' tokens are "
        "likely to be translated into (the model directory's vocabulary shortlist, from `tfm "
        "shortlist`), a smaller output layer and softmax. Compare BLEU with and without "
        "(tfm eval) before relying on it.")
    cuda_graphs: bool = option(
        True, "On CUDA, tfm's search of short batches (up to 64 sentences x beam, without "
        "constraints or an ensemble) replays each batch shape's decoding step as a CUDA graph, "
        "one launch a step instead of one per kernel: lower latency for one sentence or a few. "
        "The same hypotheses; --no-cuda-graphs decodes step by step.")
    exact_search: bool = option(
        False, "A CTranslate2 export: find exactly what tfm's own search finds (its stopping "
        "rule and per-sentence length limits), in up to three CTranslate2 passes, instead of "
        "CTranslate2's own search in one pass (faster; with a length penalty its hypotheses "
        "can differ).")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class ScoreOptions:
    """Which scores ``tfm eval`` reports (tfm.decoding.scoring)."""

    bleu: bool = option(True, "Report BLEU.")
    chrf: bool = option(False, "Also report chrF.")
    ter: bool = option(False, "Also report TER.")
    lc_tok: bool = option(False, "Also report BLEU as the Multi30k papers do: lowercased, "
                          "punctuation-normalised, Moses-tokenized text (needs tfm\\[moses]).")
    off_target: bool = option(False, "Also report the share of translations that py3langid "
                              "identifies as another language than the target (--tgt-lang; "
                              "needs tfm\\[langid]).")
    tgt_lang: str | None = option(None, "The translations' language: for --lc-tok's tokenizer "
                                  "and --off-target's check.",
                                  shown_default="--target-lang, else the model's")


def _from_dict(cls: type[T], data: dict[str, Any]) -> T:
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - known
    if unknown:
        raise UsageError(f"unknown {cls.__name__} fields: {', '.join(sorted(unknown))}")
    values = dict(data)
    for f in fields(cls):  # type: ignore[arg-type]
        # JSON has no tuples; restore the ones the dataclass declares.
        if f.name in values and isinstance(values[f.name], list) and "tuple" in str(f.type):
            values[f.name] = tuple(values[f.name])
    return cls(**values)


def model_config_from_dict(data: dict[str, Any]) -> ModelConfig:
    data = dict(data)
    # Format 1 stored the padding id in the config; it is tfm.special_tokens.PAD_ID, always.
    pad_id = data.pop("pad_id", PAD_ID)
    if pad_id != PAD_ID:
        raise UsageError(f"pad_id {pad_id} is not supported (tfm pads with id {PAD_ID})")
    return _from_dict(ModelConfig, data)


def train_config_from_dict(data: dict[str, Any]) -> TrainConfig:
    return _from_dict(TrainConfig, data)


__all__ = [
    "ModelConfig",
    "TrainConfig",
    "CleanConfig",
    "GenerationDefaults",
    "SearchOptions",
    "EngineOptions",
    "ScoreOptions",
    "PRESETS",
    "model_config_from_preset",
    "model_config_from_dict",
    "train_config_from_dict",
    "option_name",
]
