"""The search's outputs as tfm found them at a commit and as it finds them now: every hypothesis
(tokens, score, log-probability, to the last bit) of greedy and beam search, step by step
(tfm.decoding.search) and in fixed buffers (tfm.decoding.graphs, its steps run as they are on
a CPU), with constraint phrases and prefixes, and of the CTranslate2 engine, exact and in one
pass, on four models: a bilingual one, multilingual ones of a source tag and of a decoder
token, and an NLLB-200 stand-in (Hugging Face's M2M100 in NLLB's layout, imported: language
codes, the decoder started from ``</s>``).

    python bench/search_unchanged.py [--before HEAD] [--sentences 12] [--keep DIR]

The models are built once, small and briefly trained on the tests' sentence pairs (a random
model writes every sentence alike); each side decodes them in a process of its own, the
commit's from a `git worktree` of it. Prints how many hypotheses were compared; exits 1 at
the first that differs. Needs ctranslate2, transformers and sentencepiece (the export and
m2m100 extras).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("bilingual", "source_tag", "decoder_token", "nllb")
# (name, SearchOptions fields): greedy and beam, the length limit reached, min_len, a length
# penalty, stop_early both ways.
SEARCHES = [
    ("greedy", dict(beam=1)),
    ("greedy-min-len", dict(beam=1, min_len=3)),
    ("greedy-short", dict(beam=1, max_len_a=0.5, max_len_b=1)),
    ("beam4-nbest3", dict(beam=4, n_best=3, length_penalty=0.0)),
    ("beam3-lp0.6-fairseq", dict(beam=3, length_penalty=0.6, stop_early=False, n_best=2)),
    ("beam5-lp1-min-len", dict(beam=5, length_penalty=1.0, min_len=2)),
    ("beam2-short", dict(beam=2, n_best=2, max_len_a=0.5, max_len_b=2)),
]


def build_models(root: Path) -> dict[str, Path]:
    """The four model directories (and their CTranslate2 exports beside them)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import PAIRS
    from test_import_m2m100 import build, sentencepiece_model

    from tfm.data.language_marks import LanguageMarking, tag
    from tfm.data.tokenizer import train_tokenizer
    from tfm.interop.ctranslate2 import export_ctranslate2
    from tfm.interop.m2m100_import import import_m2m100

    pairs = [*PAIRS, *((t, s) for s, t in PAIRS)]  # en-de and de-en
    tags = [tag("de"), tag("en")]
    dirs = {}
    dirs["bilingual"] = _fitted(root / "bilingual", train_tokenizer(
        (t for p in PAIRS for t in p), vocab_size=300), PAIRS, None)
    for where in ("source_tag", "decoder_token"):
        tok = train_tokenizer((t for p in PAIRS for t in p), vocab_size=300, tags=tags)
        dirs[where] = _fitted(root / where, tok, pairs, LanguageMarking(where))
    build(root / "nllb-hf", sentencepiece_model(), "nllb")
    dirs["nllb"] = import_m2m100(root / "nllb-hf", root / "nllb")
    for path in dirs.values():
        export_ctranslate2(path, path.parent / f"{path.name}.ct2")
    return dirs


def _fitted(path: Path, tok, pairs: list[tuple[str, str]], marking) -> Path:
    """A 2+2-layer model fitted to ``pairs`` (the first half into German, the rest into
    English, marked as ``marking`` says) for 150 full-batch steps from seed 0."""
    import torch

    from tfm.checkpoint import save_model_dir
    from tfm.config import ModelConfig
    from tfm.data.language_marks import tag, tagged
    from tfm.data.tokenizer import encode_batch
    from tfm.model import Transformer
    from tfm.model_info import ModelInfo
    from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID

    torch.manual_seed(0)
    vocab = tok.get_vocab_size()
    config = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4,
                         encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0,
                         max_positions=64)
    model = Transformer(config)
    into = [tag("de" if i < len(pairs) // 2 or marking is None else "en")
            for i in range(len(pairs))]
    in_source = marking is not None and marking.in_source
    src = [x + [EOS_ID] for x in encode_batch(
        tok, [tagged(s, t) if in_source else s for (s, _), t in zip(pairs, into)])]
    tgt = encode_batch(tok, [t for _, t in pairs])
    fed = [[BOS_ID, tok.token_to_id(t)] if marking is not None and marking.in_decoder
           else [BOS_ID] for t in into]
    t_in = [f + y for f, y in zip(fed, tgt)]
    t_out = [[PAD_ID] * (len(f) - 1) + y + [EOS_ID] for f, y in zip(fed, tgt)]
    from conftest import padded  # the tests' own (tests/ is on the path: build_models)

    src, t_in, t_out = (padded(rows) for rows in (src, t_in, t_out))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(150):
        loss = torch.nn.functional.cross_entropy(model(src, t_in).view(-1, vocab),
                                                 t_out.view(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    directions = None if marking is None else ["en-de", "de-en"]
    info = ModelInfo(config, src_lang="en", tgt_lang="de" if marking is None else None,
                     directions=directions, language_marking=marking)
    save_model_dir(path, model.eval(), tok, info)
    return path


def record(dirs: dict[str, Path], sentences: int) -> dict[str, list]:
    """Every path's hypotheses, by (model, direction, path, search)."""
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import PAIRS

    torch.set_num_threads(1)
    english = [s for s, _ in PAIRS][:sentences]
    german = [t for _, t in PAIRS][:sentences]
    out: dict[str, list] = {}
    for name in MODELS:
        directions = [("en", "de", english)]
        if name != "bilingual":
            directions.append(("de", "en", german))
        for src_lang, tgt_lang, lines in directions:
            for key, found in _paths(dirs[name], name, src_lang, tgt_lang, lines):
                out[f"{name} {src_lang}-{tgt_lang} {key}"] = found
    return out


def _paths(path: Path, name: str, src_lang: str, tgt_lang: str, lines: list[str]):
    """(path and search, hypotheses) of one model and direction."""
    import torch
    from conftest import padded  # the tests' own (tests/ is on the path: record)

    from tfm.config import SearchOptions
    from tfm.decoding.ctranslate2_engine import CTranslate2Translator
    from tfm.decoding.engines import load_translator
    from tfm.decoding.graphs import CudaGraphs

    torch_engine = load_translator(path, "cpu")
    engines = {"eager": torch_engine}
    for exact in (True, False):
        engines[f"ct2-{'exact' if exact else 'one-pass'}"] = CTranslate2Translator(
            path.parent / f"{path.name}.ct2", "cpu", "fp32", exact=exact)
    langs = _languages(torch_engine, name, src_lang, tgt_lang)
    sources = [s for s in torch_engine.prepare(lines, **langs) if s.ids]
    batch, start = [s.ids for s in sources], [s.start for s in sources]
    graphs = CudaGraphs(torch_engine.model)
    for label, fields in SEARCHES:
        o = SearchOptions(**fields)
        for engine, translator in engines.items():
            yield f"{engine} {label}", _plain(translator.search(batch, o, None, start))
        src = padded(batch)
        forced = torch.tensor(start, dtype=torch.long)
        yield f"graph {label}", _plain(graphs.search(src, o, forced))
        if o.beam > 1 or fields.get("min_len"):
            yield from _constrained(torch_engine, engines, lines, langs, o, label)


def _languages(translator, name: str, src_lang: str, tgt_lang: str) -> dict:
    """The keywords by which ``prepare`` and ``translate`` take the direction: the resolved
    language where the tfm has the one resolver (#78), its two strings before."""
    if name == "bilingual":
        return {}
    codes = {"en": "eng_Latn", "de": "deu_Latn"} if name == "nllb" else {}
    target, source = codes.get(tgt_lang, tgt_lang), codes.get(src_lang) if codes else None
    if hasattr(translator, "languages"):
        return {"language": translator.languages.resolve(target, source)}
    return {"target_lang": target, **({"source_lang": source} if source else {})}


def _constrained(torch_engine, engines, lines: list[str], langs: dict, o, label: str):
    """Phrases (tfm's engine) and a prefix (every engine) taken from each line's greedy
    translation's words, as a user would ask for them."""
    from tfm.config import SearchOptions
    from tfm.decoding.constraints import ConstraintSpec

    greedy = [t.text for t in torch_engine.translate(lines, SearchOptions(beam=1), **langs)]
    words = [t.split() or ["x"] for t in greedy]
    specs = {"prefix": [ConstraintSpec(prefix=w[0]) for w in words]}
    if o.beam > 1:
        specs["phrases"] = [ConstraintSpec(phrases=[w[-1], "Hund"]) for w in words]
    for kind, spec in specs.items():
        sources = torch_engine.prepare(lines, spec, o, **langs)
        batch = [s.ids for s in sources]
        constraints = [s.constraints for s in sources]
        start = [s.start for s in sources]
        for engine, translator in engines.items():
            if kind == "phrases" and engine != "eager":
                continue
            found = translator.search(batch, o, constraints, start)
            yield f"{engine} {label} {kind}", _plain(found)


def _plain(found) -> list:
    """Hypotheses as JSON: tokens, and the scores' exact bits (float.hex)."""
    return [[[h.tokens, float(h.score).hex(), float(h.log_prob).hex(),
              None if h.constraints_met is None else list(h.constraints_met)] for h in hyps]
            for hyps in found]


def side(code: Path, models: Path, out: Path, sentences: int) -> None:
    """This script's --record with the tfm in ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, __file__, "--record", str(out), "--models", str(models),
                    "--sentences", str(sentences)], env=env, check=True)


def compare(before: dict, now: dict) -> int:
    """How many hypotheses the two records hold; exits 1 at the first that differs."""
    if sorted(before) != sorted(now):
        sys.exit(f"different runs: {sorted(set(before) ^ set(now))}")
    count = 0
    for key in before:
        for i, (a, b) in enumerate(zip(before[key], now[key], strict=True)):
            if a != b:
                sys.exit(f"{key}: sentence {i} differs:\n  before {a}\n  now    {b}")
            count += len(a)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="HEAD")
    parser.add_argument("--sentences", type=int, default=12)
    parser.add_argument("--keep", type=Path, help="build the models here and keep them "
                        "(given again: use them)")
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--models", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.record:
        dirs = {name: args.models / name for name in MODELS}
        args.record.write_text(json.dumps(record(dirs, args.sentences)), encoding="utf-8")
        return
    work = Path(tempfile.mkdtemp())
    models = args.keep or work / "models"
    if not (models / "nllb").is_dir():
        sys.path.insert(0, str(ROOT))
        build_models(models)
    tree = work / "before"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=ROOT,
                   check=True, capture_output=True)
    try:
        side(tree, models, work / "before.json", args.sentences)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                       check=True)
    side(ROOT, models, work / "now.json", args.sentences)
    count = compare(*(json.loads((work / f"{n}.json").read_text()) for n in ("before", "now")))
    print(f"{count} hypotheses of {len(MODELS)} models (greedy and beam, eager and graph, "
          f"constrained, CTranslate2 exact and one pass): the same tokens, scores and "
          f"log-probabilities at {args.before} and now")


if __name__ == "__main__":
    main()
