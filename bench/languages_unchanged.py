"""Translations of every language marking through both edges, as they were and as they are:
the command line (`tfm translate`, torch and CTranslate2, greedy and beam, n-best as jsonl)
and the server (`POST /v1/translate`), for a bilingual model, multilingual models of source
tags and of a decoder token (the toy corpus of tests/toy_languages.py) and an NLLB-200
stand-in (tests/test_import_m2m100.py's, imported). A change to how a request's languages
are resolved and applied must leave every output identical.

    python bench/languages_unchanged.py build WORK     # the models, once (with either code)
    python bench/languages_unchanged.py run WORK OUT.json   # with the code under test
    python bench/languages_unchanged.py errors WORK ERRORS.json  # the refusals' wording
    cmp BEFORE.json AFTER.json

Run ``run`` with PYTHONPATH at each checkout. With --cuda-graphs on a GPU: the graph path too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

TOY = ["aa-bb", "bb-aa", "aa-cc", "cc-aa"]


def tfm(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "tfm", *args], input=stdin, text=True,
                          capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"tfm {' '.join(args)}: {done.stderr}")
    return done.stdout


def build(work: Path) -> None:
    """The four models under ``work``, trained briefly (so that outputs depend on the source
    and the language asked)."""
    from toy_languages import write_corpus

    corpus = write_corpus(work / "corpus", "train", 600, seed=1)
    write_corpus(work / "corpus", "test", 12, seed=3)
    small = ["--encoder-layers", "1", "--decoder-layers", "1", "--d-model", "32", "--n-heads",
             "2", "--d-ff", "64", "--max-tokens", "1024", "--lr", "5e-3", "--warmup", "10",
             "--max-steps", "60", "--valid-every", "1000", "--save-every", "1000",
             "--precision", "fp32", "--device", "cpu", "--dropout", "0"]
    tfm("train-tokenizer", "--train", str(corpus), "-s", "aa", "-t", "bb", "--vocab-size",
        "300", "-o", str(work / "bi-tok.json"))
    tfm("prepare", "--train", str(corpus), "-s", "aa", "-t", "bb", "--tokenizer",
        str(work / "bi-tok.json"), "-o", str(work / "bi-data"))
    tfm("train", "--data", str(work / "bi-data"), "-o", str(work / "bilingual"), *small)
    config = work / "run.yaml"
    config.write_text(f"corpora:\n  - train: {corpus}\n    directions: [{', '.join(TOY)}]\n")
    tfm("train-tokenizer", "--config", str(config), "--vocab-size", "400", "-o",
        str(work / "tok.json"))
    for where, name in (("source", "source_tag"), ("decoder", "decoder_token")):
        tfm("prepare", "--config", str(config), "--tokenizer", str(work / "tok.json"),
            "-o", str(work / f"data-{where}"), "--language-token", where)
        tfm("train", "--data", str(work / f"data-{where}"), "-o", str(work / name), *small)
    from test_import_m2m100 import build as build_hf
    from test_import_m2m100 import sentencepiece_model

    build_hf(work / "nllb-hf", sentencepiece_model(), "nllb")
    tfm("import", str(work / "nllb-hf"), "-o", str(work / "nllb"))


# model -> the requests: (source file or lines, --target-lang, --source-lang)
def requests(work: Path) -> dict[str, list[tuple[str, str | None, str | None]]]:
    test = work / "corpus" / "test"
    aa = (test.parent / "test.aa").read_text()
    tagged = "".join(f">>{'bc'[i % 2] * 2}<< {line}\n" for i, line in enumerate(aa.splitlines()))
    from test_import_m2m100 import generated, text

    en = "".join(text("en", c) + "\n" for c in generated(10, 9))
    return {"bilingual": [(aa, None, None)],
            "source_tag": [(aa, "bb", None), (aa, "cc", None), (tagged, None, None)],
            "decoder_token": [(aa, "bb", None), (aa, "cc", None)],
            "nllb": [(en, "deu_Latn", "eng_Latn"), (en, "fra_Latn", "eng_Latn")]}


def run(work: Path, out: Path, cuda_graphs: bool) -> None:
    results: dict[str, str] = {}
    for name, asks in requests(work).items():
        model = work / name
        export = work / f"{name}-ct2-{os.getpid()}"
        tfm("export", str(model), "--to", "ctranslate2", "-o", str(export))
        engines = [("torch", model, []), ("ct2", export, [])]
        if cuda_graphs:
            engines.append(("graphs", model, ["--device", "cuda", "--cuda-graphs"]))
        for engine, path, more in engines:
            for lines, target, source in asks:
                langs = (["--target-lang", target] if target else []) + \
                    (["--source-lang", source] if source else [])
                for beam in ("1", "4"):
                    key = f"{name} {engine} {target} {source} beam {beam}"
                    results[key] = tfm("translate", "--model", str(path), *langs, "--beam",
                                       beam, "--n-best", beam, "--format", "jsonl", *more,
                                       stdin=lines)
        results[f"{name} server"] = served(model, asks)
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(results)} outputs -> {out}")


def served(model: Path, asks: list[tuple[str, str | None, str | None]]) -> str:
    """The server's answers to the same requests (greedy and beam), as JSON text."""
    from fastapi.testclient import TestClient

    from tfm.decoding.engines import load_translator
    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    answers = []
    app = create_app(load_translator(model, "cpu"), ServeConfig(max_wait_ms=0))
    with TestClient(app) as client:
        for lines, target, source in asks:
            for beam in (1, 4):
                body = {"text": lines.splitlines(), "beam": beam, "n_best": beam,
                        "target_lang": target, "source_lang": source}
                answer = client.post("/v1/translate", json=body)
                answers.append([answer.status_code, answer.json()])
        answers.append(client.get("/v1/info").json().get("target_languages"))
    return json.dumps(answers, ensure_ascii=False)


# model -> requests that are refused: (--target-lang, --source-lang, the sentence)
REFUSED = {"bilingual": [("de", None, "puki")],
           "source_tag": [(None, None, "puki"), ("zz", None, "puki"), ("bb", None, ">>cc<< puki"),
                          (None, None, "puki >>cc<<"), (None, None, ">>zz<< puki")],
           "decoder_token": [(None, None, "puki"), ("zz", None, "puki")],
           "nllb": [("deu_Latn", None, "a man"), (None, "eng_Latn", "a man"),
                    ("deu_Latm", "eng_Latn", "a man"), ("deu_Latn", "english", "a man")]}


def errors(work: Path, out: Path) -> None:
    """Each refusal as the command line words it (exit code, stderr) and the server (status,
    body)."""
    from fastapi.testclient import TestClient

    from tfm.decoding.engines import load_translator
    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    results = {}
    for name, asks in REFUSED.items():
        app = create_app(load_translator(work / name, "cpu"), ServeConfig(max_wait_ms=0))
        with TestClient(app) as client:
            for target, source, line in asks:
                langs = (["--target-lang", target] if target else []) + \
                    (["--source-lang", source] if source else [])
                done = subprocess.run([sys.executable, "-m", "tfm", "translate", "--model",
                                       str(work / name), *langs, line], text=True,
                                      capture_output=True)
                answer = client.post("/v1/translate", json={
                    "text": line, "target_lang": target, "source_lang": source})
                results[f"{name} {target} {source} {line}"] = [
                    done.returncode, done.stderr, answer.status_code, answer.json()]
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(results)} refusals -> {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["build", "run", "errors"])
    parser.add_argument("work", type=Path)
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--cuda-graphs", action="store_true")
    args = parser.parse_args()
    if args.what == "build":
        build(args.work)
    elif args.what == "errors":
        errors(args.work, args.out)
    else:
        run(args.work, args.out, args.cuda_graphs)


if __name__ == "__main__":
    main()
