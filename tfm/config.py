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

    - ``help``: what --help says of it, in a line or two (the details: docs/CLI.md);
    - ``panel``: the --help panel it is listed in (typer's ``rich_help_panel``);
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
# The positional encodings (tfm.model.layers.position_table): the paper's sines and cosines,
# interleaved, from position 0; and fairseq's (NLLB-200, M2M100): every sine before every cosine,
# the frequencies spaced by half_dim - 1, positions counted from 2 (its padding id + 1).
POSITION_TABLES = ("paper", "fairseq")
# What a decoder layer's first sub-layer is (tfm.model.layers.DecoderLayer): the paper's masked
# self-attention, or an SSRU (Kim et al., WNGT 2019; tfm.model.ssru): a recurrence whose
# state is one vector per layer, so that a decoding step costs the same at every length.
DECODER_SELF_ATTENTIONS = ("attention", "ssru")


@dataclass
class ModelConfig:
    """The encoder-decoder Transformer of "Attention is all you need" (Vaswani et al., 2017)."""

    src_vocab_size: int = _cli(8000, None)  # from the tokenizer
    tgt_vocab_size: int = _cli(8000, None)
    d_model: int = _arch(512, "Model width: embeddings and every sub-layer's output.",
                         panel="Model")
    n_heads: int = _arch(8, "Attention heads (d_model must be divisible by them).",
                         panel="Model")
    encoder_layers: int = _arch(6, "Encoder layers.", panel="Model")
    decoder_layers: int = _arch(6, "Decoder layers.", panel="Model")
    d_ff: int = _arch(2048, "Feed-forward width, inside each layer's FFN.", panel="Model")
    dropout: float = _arch(0.1, "Dropout on the embeddings and every sub-layer's output.",
                           panel="Dropout")
    attention_dropout: float = option(0.0, "Dropout on the attention weights.",
                                      panel="Dropout")
    activation_dropout: float = option(0.0, "Dropout inside the FFN, after the ReLU.",
                                       panel="Dropout")
    # longest sequence (tokens, BOS/EOS included) the model accepts
    max_positions: int = _cli(1024, None)
    # Liu et al. (ACL 2021): no residual connection around one middle encoder layer's
    # self-attention, so that the encoder's output carries less of the source's positions and
    # language (a zero-shot lever for multilingual models; docs/multi30k.md).
    drop_residual_layer: int = option(
        0, "No residual connection around encoder layer n's self-attention (1: the first; "
        "0: none).", panel="Multilingual", min=0)
    norm_first: bool = _arch(False, "LayerNorm before each sub-layer, or after the residual "
                             "add (the paper's).", flag=("--pre-norm", "--post-norm"),
                             panel="Model")
    share_embeddings: bool = _cli(True, None)  # one embedding table for both sides (joint vocab)
    tie_output: bool = _cli(True, None)  # output projection shares the target embedding matrix
    # Set by `tfm import` for MarianMT models (format 2; a model of format 1 has the defaults):
    # the FFN's activation (tfm.model.layers.ACTIVATIONS), and a constant bias on the logits.
    activation: str = _cli("relu", None)
    output_bias: bool = _cli(False, None)
    # Set by `tfm import` for NLLB-200 and M2M100 models (format 3): the positional table
    # (POSITION_TABLES).
    positions: str = _cli("paper", None)
    # Format 5: the decoder's first sub-layer (DECODER_SELF_ATTENTIONS).
    decoder_self_attention: str = _arch(
        "attention", "The decoder layers' first sub-layer: attention (masked self-attention) "
        "or ssru (a recurrent unit: faster steps, for students; not exportable).",
        panel="Model", option="--decoder-self-attn")
    # Format 6: the decoder layer (0-based) whose cross-attention's first head was trained
    # towards word alignments (guided alignment, Garg et al. 2019: `tfm train
    # --guided-alignment`); alignments are read from that head. None: not trained, read
    # from the last layer's heads averaged. Set by training, no parameter depends on it.
    alignment_layer: int | None = _cli(None, None)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise UsageError(
                f"d_model ({self.d_model}) must be divisible by the number of heads "
                f"({self.n_heads})"
            )
        if self.activation not in ACTIVATION_NAMES:
            raise UsageError(f"unknown activation {self.activation!r}; tfm has "
                             f"{', '.join(ACTIVATION_NAMES)}")
        if self.drop_residual_layer > self.encoder_layers:
            raise UsageError(f"--drop-residual-layer {self.drop_residual_layer}: the encoder "
                             f"has {self.encoder_layers} layers")
        if self.positions not in POSITION_TABLES:
            raise UsageError(f"unknown positions {self.positions!r}; tfm has "
                             f"{', '.join(POSITION_TABLES)}")
        if self.alignment_layer is not None and not 0 <= self.alignment_layer < max(
                self.decoder_layers, 1):
            raise UsageError(f"alignment layer {self.alignment_layer}: the decoder has "
                             f"{self.decoder_layers} layers")
        if self.decoder_self_attention not in DECODER_SELF_ATTENTIONS:
            raise UsageError(f"--decoder-self-attn {self.decoder_self_attention}: choose "
                             f"one of {', '.join(DECODER_SELF_ATTENTIONS)}")
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
    # Students, to distil a teacher into: a deep encoder and a shallow decoder, since search
    # runs the decoder once per output token and the encoder once per sentence. Kasai et al.
    # (ICLR 2021, "Deep encoder, shallow decoder"): 6 and 12 encoder layers, 1 decoder layer,
    # at the width of `small`.
    "student-6-1": dict(d_model=256, n_heads=4, encoder_layers=6, decoder_layers=1, d_ff=1024,
                        dropout=0.1),
    "student-12-1": dict(d_model=256, n_heads=4, encoder_layers=12, decoder_layers=1,
                         d_ff=1024, dropout=0.1),
    # `small`'s encoder as it is and one decoder layer: where sentences are short, the
    # encoder's share of greedy decoding is large and a deeper one costs more than it gives.
    "student-3-1": dict(d_model=256, n_heads=4, encoder_layers=3, decoder_layers=1, d_ff=1024,
                        dropout=0.1),
    # `small`'s encoder and two decoder layers: with --decoder-self-attn ssru the closest to
    # the teacher of the fast students in both Multi30k directions (docs/CLI.md, "Students").
    "student-3-2": dict(d_model=256, n_heads=4, encoder_layers=3, decoder_layers=2, d_ff=1024,
                        dropout=0.1),
    # Firefox Translations' (Bergamot's) tiny11 student: 6 + 2 layers, 8 heads, FFN 1536. Its
    # decoder's self-attention is an SSRU there: add --decoder-self-attn ssru.
    "student-tiny": dict(d_model=256, n_heads=8, encoder_layers=6, decoder_layers=2,
                         d_ff=1536, dropout=0.1),
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

    max_tokens: int = option(4096, "Batch size in padded tokens (of a pair's longer side).",
                             min=1, panel="Optimisation")
    update_freq: int = option(1, "Batches per optimizer step (gradient accumulation).", min=1,
                              panel="Optimisation")
    lr: float = option(7e-4, "Peak learning rate, reached after warmup.", panel="Optimisation")
    warmup_steps: int = option(4000, "Linear warmup steps, then the --lr-schedule decay.",
                               option="--warmup", min=0, panel="Optimisation")
    lr_schedule: str = option(
        "inverse-sqrt", "After warmup: inverse-sqrt, or linear / cosine decay to 0 at the end "
        "of the budget.", panel="Optimisation")
    adam_betas: tuple[float, float] = _cli((0.9, 0.98), None)
    adam_eps: float = _cli(1e-9, None)
    label_smoothing: float = option(0.1, "Label smoothing epsilon.", min=0,
                                    panel="Optimisation")
    weight_decay: float = option(0.0, "L2 penalty on the weights, through Adam (not AdamW).",
                                 min=0, panel="Optimisation")
    clip_norm: float = option(1.0, "Clip the gradient norm to this; 0 disables.", min=0,
                              panel="Optimisation")
    max_steps: int = option(0, "Stop after this many optimizer steps (0: no limit).", min=0,
                            panel="Stopping")
    max_epochs: int = option(0, "Stop after this many epochs (0: no limit).", min=0,
                             panel="Stopping")
    max_time: float = option(0.0, "Stop after this many minutes of training (0: no limit).",
                             min=0, panel="Stopping")
    sampling_temperature: float = option(
        1.0, "Each epoch draws direction i in proportion to its pairs ** (1/T); higher: "
        "closer to uniform.", panel="Multilingual")
    language_loss: float = option(
        0.0, "Add w x a loss that predicts the target language at each target position "
        "(0: none).", min=0, panel="Multilingual")
    guided_alignment_weight: float = option(
        0.0, "Train the penultimate decoder layer's first cross-attention head towards the "
        "word alignments of `tfm align`, adding w x its cross-entropy (0: off; Garg et al. "
        "2019 used 0.05).", min=0, panel="Alignment", option="--guided-alignment")
    online_bt_from: int = option(
        0, "After step k, also train on sources the model translates on the fly into a "
        "third language (0: never).", min=0, panel="Multilingual")
    online_bt_share: float = option(
        0.0, "Make the last F of the budget (steps, epochs or minutes) that phase instead "
        "(0: none).", min=0, panel="Multilingual")
    valid_every: int = option(1000, "Validate every N steps, and once more at the end.", min=1,
                              panel="Checkpoints and logs")
    valid_bleu: bool = _cli(True, None)  # greedy BLEU on the validation set at each validation
    # (without BLEU, a lower validation loss is the better score)
    patience: int = option(0, "Stop after N validations in a row without a better BLEU "
                           "(0: never).", min=0, panel="Stopping")
    save_every: int = option(1000, "Save the training state every N steps.", min=1,
                             panel="Checkpoints and logs")
    keep_last: int = option(5, "Numbered checkpoints to keep (for `tfm average`).", min=0,
                            panel="Checkpoints and logs")
    log_every: int = option(50, "Log training metrics every N steps.", min=1,
                            panel="Checkpoints and logs")
    seed: int = option(1, "Random seed.", panel="Optimisation")
    device: str = option("auto", "auto (CUDA if available, else CPU), cpu or cuda.",
                         panel="Device")
    precision: str = option(
        "auto", "auto, fp32, bf16 or fp16 (auto: by the device); saved weights are fp32.",
        panel="Device")
    compile: bool = option(False, "Compile the model with torch.compile (slower start, often "
                           "faster steps on GPUs).", panel="Device")
    num_threads: int = option(0, "CPU threads for torch (0: torch's default).",
                              option="--threads", min=0, panel="Device")

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

    max_length: int = option(250, "Drop pairs with a side longer than this many BPE tokens.",
                             min=1, was="--max-tokens", panel="Cleaning")
    max_ratio: float = option(3.0, "Drop pairs whose length ratio (tokens + 1) exceeds this; "
                              "0: keep all.", min=0, panel="Cleaning")
    dedup: bool = option(False, "Drop repeated (source, target) pairs.", panel="Cleaning")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class ShortlistConfig:
    """How ``tfm shortlist`` builds a vocabulary shortlist (tfm.data.shortlist)."""

    per_token: int = option(50, "Target tokens kept for each source token (the most "
                            "probable).", min=1, panel="Shortlist")
    frequent: int = option(500, "The most frequent target tokens, always allowed.", min=0,
                           panel="Shortlist")
    iterations: int = option(5, "EM rounds of IBM Model 1.", min=1, panel="Shortlist")

    def __post_init__(self) -> None:
        check_fields(self)


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
                       short="-b", min=1, shown_default=f"the model's, {_G.beam}",
                       panel="Search")
    length_penalty: float = option(
        GenerationDefaults.length_penalty, "Beam search: scores are divided by length ** this.",
        shown_default=f"the model's, {_G.length_penalty}", panel="Search")
    max_len_a: float = option(GenerationDefaults.max_len_a, "Maximum output length is a * "
                              "source length + b.", shown_default=f"the model's, {_G.max_len_a}",
                              panel="Search")
    max_len_b: int = option(GenerationDefaults.max_len_b, "See --max-len-a.",
                            shown_default=f"the model's, {_G.max_len_b}", panel="Search")
    min_len: int = option(0, "Minimum output length in tokens.", min=0, panel="Search")
    n_best: int = option(1, "Hypotheses per sentence (jsonl shows them all).", panel="Search")
    stop_early: bool = option(
        True, "Beam search: end a sentence once its --n-best best hypotheses have ended, or "
        "wait for --beam of them.", panel="Search")
    batch_tokens: int = option(4096, "Most source tokens x beam in one batch; the output is "
                               "the same for any.", min=1, panel="Speed")
    attention: bool = _cli(False, None)  # keep cross-attention and word alignments (slower)
    # Sampling (Edunov et al., 2018: sampled back-translation): each token drawn, not chosen.
    # (Not sampling_temperature: TrainConfig's option of that name is another thing, and a
    # run config's top-level keys reach every command that has them.)
    sampling_topk: int = option(
        1, "Draw each token from the k most probable (0: from all); 1: no sampling.", min=0,
        panel="Sampling")
    sampling_temp: float = option(
        1.0, "With sampling: the temperature the probabilities are drawn at.",
        panel="Sampling")
    sampling_seed: int = option(
        0, "With sampling: the seed; a sentence's draw depends on it and the sentence alone.",
        panel="Sampling")
    mbr: str | None = option(
        None, "Beam search: output the hypothesis the others agree with most by bleu or chrf "
        "(minimum Bayes risk).", panel="Reranking")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.mbr is not None:
            if self.mbr not in MBR_UTILITIES:
                raise UsageError(f"--mbr {self.mbr}: choose {' or '.join(MBR_UTILITIES)}")
            if self.beam < 2:
                raise UsageError("--mbr chooses among the beam's hypotheses: give --beam 2 "
                                 "or more (5-8 is usual)")
        if self.sampling_topk != 1 and self.beam != 1:
            raise UsageError(f"--sampling-topk {self.sampling_topk} draws one token at a "
                             "time: give --beam 1 (or --sampling-topk 1 for beam search)")
        if not self.sampling_temp > 0:
            raise UsageError(f"--sampling-temp {self.sampling_temp:g}: give a number above 0")
        if self.sampling_temp != 1.0 and self.sampling_topk == 1:
            raise UsageError(f"--sampling-temp {self.sampling_temp:g} changes only sampling: "
                             "give --sampling-topk 0 (or K) with --beam 1 too")
        if not 1 <= self.n_best <= self.beam:
            raise OptionError("n_best", f"must be between 1 and the beam ({self.beam}), "
                              f"not {self.n_best}")


# The SearchOptions and EngineOptions fields that back-translation does not take (one
# hypothesis a line; the reverse model is the model): `tfm backtranslate` derives its options
# from the others, and a run config's monolingual corpus entry takes the same ones as keys of
# its ``backtranslate:`` (tfm.data.monolingual).
BACKTRANSLATE_SEARCH_EXCLUDED = ("n_best", "mbr")
BACKTRANSLATE_ENGINE_EXCLUDED = ("model", "ensemble", "reverse_model", "reverse_weight")


@dataclass(frozen=True)
class BacktranslateConfig:
    """How ``tfm backtranslate`` turns target-language text into synthetic pairs
    (tfm.decoding.backtranslation): the noise on the synthetic sources, the filters, the
    chunks that make it resumable."""

    noise: bool = option(
        False, "Noise the synthetic sources as Edunov et al. 2018 (drop, blank, swap words).",
        panel="Back-translation")
    noise_delete: float = option(0.1, "With --noise: each word deleted with this probability.",
                                 min=0, panel="Back-translation")
    noise_replace: float = option(
        0.1, "With --noise: each word replaced by --noise-filler with this probability.",
        min=0, panel="Back-translation")
    noise_swap: int = option(3, "With --noise: words move at most this many positions.",
                             min=0, panel="Back-translation")
    noise_filler: str = option("<unk>", "With --noise: the word that replaces a word.",
                               panel="Back-translation")
    noise_seed: int = option(1, "With --noise: the seed; a line's noise depends on it and "
                             "the line's number.", panel="Back-translation")
    max_ratio: float = option(
        0.0, "Drop pairs whose length ratio in words exceeds this (0: keep all).", min=0,
        panel="Filters")
    min_score: float | None = option(
        None, "Drop pairs whose reverse-model score (log P per token) is below this.",
        panel="Filters")
    chunk: int = option(1000, "Sentences written at a time; a run again keeps those done.",
                        min=1, panel="Speed")

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("noise_delete", "noise_replace"):
            if getattr(self, name) > 1:
                raise OptionError(name, f"is a probability: give 0 to 1, not "
                                  f"{getattr(self, name):g}")
        if not self.noise_filler.strip() or any(c.isspace() for c in self.noise_filler):
            raise OptionError("noise_filler", "give one word, without spaces")


@dataclass
class EngineOptions:
    """Which model decodes, where, and what ranks its hypotheses: what ``tfm translate`` and
    ``tfm eval`` load (tfm.decoding.engines.load_translator, tfm.decoding.rerank)."""

    model: Path = option(Path("model"), "A model directory, or a CTranslate2 export (`tfm "
                         "export`).", short="-m", panel="Model")
    ensemble: list[Path] = option([], "Another model (same tokenizer) decoded with --model, "
                                  "probabilities averaged; repeat for more.", panel="Model")
    reverse_model: list[Path] = option(
        [], "Beam search: rank the hypotheses by how well a model of the other direction reads "
        "the source back; repeat for more.", panel="Reranking")
    reverse_weight: float = option(
        REVERSE_WEIGHT, "With --reverse-model: score + this x its log-probability of the "
        "source per token.", panel="Reranking")
    device: str = option("auto", "auto (CUDA if available, else CPU), cpu or cuda.",
                         panel="Model")
    precision: str = option(
        "fp32", "Weights for decoding: fp32, bf16, fp16 (CUDA), int8 (CPU) or auto.",
        panel="Model")
    workers: int | None = option(
        None, "Batches decoded at once, each by a thread; the output is the same for any.",
        min=1, shown_default="2 on a CPU with 2 threads or more, else 1", panel="Speed")
    shortlist: bool = option(
        False, "Score only the likely target tokens (`tfm shortlist`); compare BLEU first.",
        panel="Speed")
    cuda_graphs: bool = option(
        True, "On CUDA: decode short batches by replaying CUDA graphs (the same hypotheses).",
        panel="Speed")
    exact_search: bool = option(
        False, "A CTranslate2 export: find what tfm's own search finds (slower).",
        panel="Speed")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class ScoreOptions:
    """Which scores ``tfm eval`` reports (tfm.decoding.scoring)."""

    bleu: bool = option(True, "Report BLEU.", panel="Scores")
    chrf: bool = option(False, "Also report chrF.", panel="Scores")
    ter: bool = option(False, "Also report TER.", panel="Scores")
    lc_tok: bool = option(False, "Also report BLEU as the Multi30k papers do: lowercased, "
                          "Moses-tokenized (needs tfm\\[moses]).", panel="Scores")
    off_target: bool = option(False, "Also report the share of translations in another "
                              "language (needs tfm\\[langid]).", panel="Scores")
    # The translations' language, for --lc-tok and --off-target: eval's --target-lang (for
    # --hyp, the only way to know it), else the model's.
    tgt_lang: str | None = option(None, "", option=None)


DISTILL_EXPORTS = ("ctranslate2",)  # what `tfm distill --export` writes


@dataclass
class DistillConfig:
    """What ``tfm distill`` does besides the student's training options (TrainConfig) and
    shape (ModelConfig): the teacher's search, the filter, the deployment and the report."""

    preset: str = option("student-tiny", "The student's shape: student-3-1, student-3-2, "
                         "student-6-1, student-12-1, student-tiny (or any `tfm train` preset).",
                         panel="Student")
    name: str | None = option(None, "The student's directory in --output.", option="--name",
                              shown_default="the preset, -ssru with an SSRU decoder",
                              panel="Student")
    teacher_beam: int | None = option(None, "The teacher's beam for the training sources.",
                                      min=1, shown_default="the teacher's saved beam",
                                      panel="Teacher")
    chunk: int = option(1000, "Sentences the teacher translates between two saves (a kill "
                        "loses at most these).", min=1, panel="Teacher")
    max_ratio: float = option(2.0, "Filter: drop pairs whose character-length ratio (longer / "
                              "shorter) exceeds this; 0: keep all.", min=0, panel="Filter")
    drop_worst: float = option(0.0, "Filter: also drop this fraction of the pairs with the "
                               "lowest teacher scores (Bergamot: 0.05).", min=0, panel="Filter")
    with_originals: bool = option(False, "Train on the original pairs too, not only the "
                                  "teacher's translations.", flag=("--originals",
                                                                   "--no-originals"),
                                  panel="Filter")
    init_from_teacher: bool = option(
        True, "Start the student from the teacher's weights where a weight has the same name "
        "and shape (embeddings, its first layers), its deeper layers as identities "
        "(--no-teacher-init: all fresh).",
        flag=("--teacher-init", "--no-teacher-init"), panel="Student")
    average: int = option(5, "Average the student's last N checkpoints after its training and "
                          "deploy the average where it scores a higher greedy BLEU on val than "
                          "the student's best model (0: never).", min=0, panel="Deploy")
    shortlist: bool = option(True, "Build the student's vocabulary shortlist on the distilled "
                             "data and report it on val.", panel="Deploy")
    export: str | None = option(None, "Also export the student: ctranslate2.", panel="Deploy")
    report_sentences: int = option(0, "Sentences of val (and test) the report decodes, from "
                                   "the first (0: all of them).", min=0, panel="Report")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.export is not None and self.export not in DISTILL_EXPORTS:
            raise UsageError(f"--export {self.export}: choose {' or '.join(DISTILL_EXPORTS)}")
        if self.drop_worst >= 1:
            raise UsageError(f"--drop-worst {self.drop_worst:g}: give a fraction below 1")


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
    "DistillConfig",
    "PRESETS",
    "model_config_from_preset",
    "model_config_from_dict",
    "train_config_from_dict",
    "option_name",
]
