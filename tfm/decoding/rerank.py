"""Ranking a beam's hypotheses anew with a model of the reverse direction.

A translation y that keeps all of the source x's meaning lets a model of the other direction
(target -> source) read x back from it; one that drops or invents content does not. So each of
a sentence's beam hypotheses is scored

    score(y) + weight * log P_reverse(x | y) / |x|

``score(y)`` being the forward model's length-normalised log-probability (what beam search
ranks by), ``P_reverse(x | y)`` the reverse model's probability of the source given the
hypothesis (forced decoding), and ``|x|`` the source's length in the reverse model's tokens,
EOS included (the same for all of a sentence's hypotheses: it only puts the weight on the
scale of a per-token score). This is the channel model of noisy-channel reranking (Yee et al.
2019; fairseq's ``examples/noisychannel``) without its target-language model, and the
"backward" rescoring of Marian's and fairseq's n-best rerankers. With ``--mbr`` the combined
scores weight the hypotheses in place of the forward scores.

The weight was chosen on Multi30k's validation set (docs/multi30k.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tfm.config import REVERSE_WEIGHT
from tfm.data.directions import Direction
from tfm.decoding.translator import Translator
from tfm.errors import UsageError

if TYPE_CHECKING:
    from tfm.decoding.torch_engine import TorchTranslator

@dataclass
class ReverseModelReranker:
    """tfm.decoding.translator.Reranker with a reverse-direction model (a TorchTranslator,
    whose ``score`` gives forced-decoding log-probabilities)."""

    reverse: TorchTranslator
    weight: float = REVERSE_WEIGHT

    def rescore(self, sources: list[str], hypotheses: list[list[str]],
                scores: list[list[float]]) -> list[list[float]]:
        pairs = [(hyp, src) for src, hyps in zip(sources, hypotheses) for hyp in hyps]
        # The reverse model reads the hypothesis and is scored on the source.
        channel = iter(self.reverse.score([h for h, _ in pairs], [s for _, s in pairs]))
        combined = []
        for sentence_scores in scores:
            row = []
            for score in sentence_scores:
                log_p, length = next(channel)
                row.append(score + self.weight * log_p / length)
            combined.append(row)
        return combined


def attach_reverse_model(translator: Translator, reverse_models: Sequence[Path],
                         weight: float = REVERSE_WEIGHT, device: str = "auto",
                         precision: str = "fp32", beam: int = 2) -> None:
    """Rank ``translator``'s beam hypotheses with the tfm model directory ``reverse_models[0]``
    (decoding the other direction; more directories: an ensemble of them, as ``--ensemble``)
    from now on. Refused where the reverse model's languages are known and are not the
    translator's, swapped."""
    from tfm.decoding import ctranslate2_engine
    from tfm.decoding.torch_engine import TorchTranslator  # imports torch: only when needed

    first, *rest = [Path(p) for p in reverse_models]
    if beam < 2:
        raise UsageError("--reverse-model ranks the beam's hypotheses: give --beam 2 or more "
                         "(5-8 is usual)")
    if weight < 0:
        raise UsageError(f"--reverse-weight {weight}: give 0 or more")
    for path in (first, *rest):
        if ctranslate2_engine.is_export(path):
            raise UsageError(f"--reverse-model {path}: a CTranslate2 export cannot score given "
                             "translations; give the tfm model directory it was exported from")
    reverse = TorchTranslator(first, device, precision=precision, ensemble=rest, workers=1)
    if reverse.languages.targets:
        raise UsageError(f"--reverse-model {first} translates into several languages: "
                         "reranking needs a model of one direction, the reverse of --model's")
    wanted = {Direction.from_name(d).reversed() for d in translator.info.direction_names}
    have = {Direction.from_name(d) for d in reverse.info.direction_names}
    if all(d.src and d.tgt for d in wanted | have) and wanted != have:
        raise UsageError(f"--reverse-model {first} translates {_names(have)}; reranking "
                         f"{', '.join(translator.info.direction_names)} needs a model of "
                         f"{_names(wanted)}")
    translator.reranker = ReverseModelReranker(reverse, weight)


def _names(directions: set[Direction]) -> str:
    return ", ".join(sorted(d.name for d in directions))
