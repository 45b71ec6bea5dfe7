"""Configuration dataclasses: one per concern, defaults in one place, saved as JSON.

``ModelConfig`` describes the architecture and is stored in every model directory's
``config.json`` with the model's ``GenerationDefaults``; ``TrainConfig`` describes a training
run and is stored beside it; ``CleanConfig`` says which pairs ``prepare`` keeps and
``SearchOptions`` how a translator decodes. Command-line defaults are read from these classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from tfm.errors import UsageError
from tfm.special_tokens import PAD_ID

T = TypeVar("T")


@dataclass
class ModelConfig:
    """The encoder-decoder Transformer of "Attention is all you need" (Vaswani et al., 2017)."""

    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    d_model: int = 512
    n_heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1  # on embeddings and on every sub-layer output, before the residual add
    attention_dropout: float = 0.0  # on attention weights
    activation_dropout: float = 0.0  # inside the FFN, after the ReLU
    max_positions: int = 1024  # longest sequence (tokens, BOS/EOS included) the model accepts
    norm_first: bool = False  # False: post-norm as in the paper; True: pre-norm
    share_embeddings: bool = True  # one embedding table for source and target (joint vocabulary)
    tie_output: bool = True  # output projection shares the target embedding matrix
    # Set by `tfm import` for MarianMT models (format 2; a model of format 1 has the defaults):
    # the FFN's activation (tfm.model.layers.ACTIVATIONS), and a constant bias on the logits.
    activation: str = "relu"
    output_bias: bool = False

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise UsageError(
                f"d_model ({self.d_model}) must be divisible by the number of heads "
                f"({self.n_heads})"
            )
        if self.activation not in ("relu", "swish", "gelu"):
            raise UsageError(f"unknown activation {self.activation!r}; tfm has relu, swish "
                             "and gelu")
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


def _cli(default: Any, option: str | None) -> Any:
    """A field whose command-line option is not spelled ``--field-name``: ``option`` is how
    ``tfm train`` spells it, None where it has none."""
    return field(default=default, metadata={"option": option})


@dataclass
class TrainConfig:
    """A training run: data, optimisation, stopping and checkpointing.

    ``tfm train`` has an option for each field, spelled ``--field-name`` unless the field says
    otherwise (see ``option_name``); its help shows these defaults."""

    max_tokens: int = 4096  # padded positions per batch (max of source and target side)
    update_freq: int = 1  # gradient accumulation: batches per optimizer step
    lr: float = 7e-4  # peak learning rate, reached at the end of warmup
    warmup_steps: int = _cli(4000, "--warmup")
    # inverse-sqrt (the paper's), or linear / cosine decay to 0 at the end of the budget
    # (--max-steps, --max-epochs or --max-time, whichever runs out first)
    lr_schedule: str = "inverse-sqrt"
    adam_betas: tuple[float, float] = _cli((0.9, 0.98), None)
    adam_eps: float = _cli(1e-9, None)
    weight_decay: float = 0.0  # L2 penalty (Adam's weight_decay, not AdamW's decoupled one)
    clip_norm: float = 1.0  # 0 disables gradient clipping
    label_smoothing: float = 0.1
    max_steps: int = 0  # 0: no limit
    max_epochs: int = 0  # 0: no limit
    max_time: float = 0.0  # minutes; 0: no limit
    valid_every: int = 1000  # steps between validations (and one at the end of the run)
    valid_bleu: bool = _cli(True, None)  # greedy BLEU on the validation set at each validation
    # Stop after this many validations in a row without a better score: a higher BLEU, or a
    # lower validation loss when valid_bleu is off; 0: never. Needs a validation split.
    patience: int = 0
    save_every: int = 1000  # steps between checkpoints of the training state
    keep_last: int = 5  # numbered checkpoints kept for averaging
    log_every: int = 50  # steps between metrics.jsonl lines
    seed: int = 1
    device: str = "auto"
    precision: str = "auto"  # fp16 steps go through a gradient scaler (loss scaling)
    compile: bool = False
    num_threads: int = _cli(0, "--threads")  # 0: torch's default


def option_name(name: str) -> str | None:
    """How ``tfm train`` spells TrainConfig field ``name`` (``--warmup`` for warmup_steps), or
    None for a field it has no option for."""
    for f in fields(TrainConfig):
        if f.name == name:
            return f.metadata.get("option", "--" + name.replace("_", "-"))
    raise KeyError(name)


@dataclass
class CleanConfig:
    """Which pairs ``tfm prepare`` keeps."""

    max_tokens: int = 250  # per side, BPE tokens (the end-of-sentence token not counted)
    max_ratio: float = 3.0  # longer side / shorter side in tokens, each +1; 0 disables
    dedup: bool = False  # drop repeated (source, target) pairs


@dataclass
class GenerationDefaults:
    """Decoding settings saved with a model (config.json), used when the user gives none."""

    beam: int = 5  # 1 = greedy
    length_penalty: float = 1.0  # scores are divided by length ** this (beam search)
    max_len_a: float = 1.5  # maximum output length: a * source length + b
    max_len_b: int = 10


MBR_UTILITIES = ("bleu", "chrf")  # sentence-level metrics --mbr can choose by (tfm.decoding.mbr)


# --reverse-model's weight (tfm.decoding.rerank), chosen on Multi30k's validation set.
REVERSE_WEIGHT = 0.25


@dataclass
class SearchOptions:
    """How one call of a Translator decodes; the model's GenerationDefaults fill what the user
    leaves unset."""

    beam: int = GenerationDefaults.beam
    length_penalty: float = GenerationDefaults.length_penalty
    max_len_a: float = GenerationDefaults.max_len_a
    max_len_b: int = GenerationDefaults.max_len_b
    min_len: int = 0
    n_best: int = 1
    stop_early: bool = True  # end a sentence once its n_best best hypotheses have ended
    max_tokens: int = 4096  # source tokens x beam per batch
    attention: bool = False  # keep cross-attention and word alignments (slower)
    # Return the beam hypothesis of least Bayes risk under this utility ("bleu", "chrf"),
    # not the highest-scoring one (tfm.decoding.mbr); None: the highest-scoring one.
    mbr: str | None = None

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise UsageError(f"--beam must be at least 1, not {self.beam}")
        if self.mbr is not None:
            if self.mbr not in MBR_UTILITIES:
                raise UsageError(f"--mbr {self.mbr}: choose {' or '.join(MBR_UTILITIES)}")
            if self.beam < 2:
                raise UsageError("--mbr chooses among the beam's hypotheses: give --beam 2 "
                                 "or more (5-8 is usual)")
        if not 1 <= self.n_best <= self.beam:
            raise UsageError(f"--n-best must be between 1 and --beam ({self.beam}), "
                             f"not {self.n_best}")


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
    "PRESETS",
    "model_config_from_preset",
    "model_config_from_dict",
    "train_config_from_dict",
    "option_name",
]
