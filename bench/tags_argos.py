"""Argos Translate's HTML handling (argos-translate-files 1.4.4 on argos-translate-lt 1.12.1,
LibreTranslate's) applied to a tfm model's translations: its own code, with a tfm model behind
its ``ITranslation`` interface, on the tagged test set (bench/tagged_testset.py) and on HTML
files; scored as bench/tags_run.py scores tfm (bench/tags_score.py).

    python3.11 -m venv runs/argos-venv
    runs/argos-venv/bin/pip install --no-deps beautifulsoup4==4.9.3 soupsieve \
        argos-translate-files==1.4.4 argos-translate-lt==1.12.1 minisbd onnxruntime pysrt \
        chardet pymupdf     # what its modules import; not into tfm's own environment
    echo $PWD/.venv/lib/python3.11/site-packages > \
        runs/argos-venv/lib/python3.11/site-packages/zz_tfm.pth   # tfm and torch, after Argos's
    PYTHONPATH=$PWD runs/argos-venv/bin/python bench/tags_argos.py --model MODEL \
        [--set runs/tagged] [--out runs/tagged/MODEL_NAME] [--html FILE.html ...]

A line of the test set is translated as Argos translates an HTML file
(``argostranslatefiles.translatehtml.translate_html``: BeautifulSoup's tree, each text node
through ``argostranslate.tags.translate_tags``); a tfm model stands behind Argos's
``ITranslation`` (the interface its own CachedTranslation and RemoteTranslation implement):
each text Argos asks for is translated by tfm's translator, with the same search as tfm's
run, all of them in one batch (the same output as one call each, faster). A text of only
whitespace comes back as it went (kinder than Argos's own package translation, which sends it
to the model). BeautifulSoup writes an empty unknown element ``<x/>`` as ``<x></x>``: that is
written back as ``<x/>`` before scoring (a spelling, not a loss).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tags_score import read, score
from tfm.decoding.engines import load_translator


def argos_html(lines: list[str], translate: dict[str, str] | None) -> tuple[list[str], set[str]]:
    """``lines`` (HTML fragments) as Argos translates them, each text by ``translate``;
    with None, nothing is translated: returns the texts Argos would ask for."""
    from argostranslate.translate import Hypothesis, ITranslation
    from argostranslatefiles import translatehtml

    asked: set[str] = set()

    class Lookup(ITranslation):
        def hypotheses(self, input_text: str, num_hypotheses: int = 4) -> list[Hypothesis]:
            asked.add(input_text)
            value = input_text if translate is None else translate.get(input_text, input_text)
            return [Hypothesis(value, 0.0)]

    out = [str(translatehtml.translate_html(Lookup(), line)).replace("<x></x>", "<x/>")
           for line in lines]
    return out, asked


def sent_and_kept(path: Path) -> dict[str, object]:
    """Without a model: the texts Argos and tfm send to the model for the HTML file ``path``,
    and each one's output when every text comes back unchanged (what the round trip itself
    keeps and changes)."""
    from tfm.documents.formats import format_for
    from tfm.documents.translate import DocumentWork

    source = path.read_text(encoding="utf-8")
    head = "<!DOCTYPE html>"  # argostranslatefiles' Html.translate takes this prefix apart
    body = source[len(head):] if source.startswith(head) else source
    _, argos_sent = argos_html([body], None)
    argos_out, _ = argos_html([body], {t: t for t in argos_sent})
    argos_out[0] = (head if body != source else "") + argos_out[0]
    document = format_for(path).read(path.read_bytes())
    work = DocumentWork.of(document, True, "en")
    tfm_out = document.write(document.segments).decode()
    return {"argos_sent": sorted(t for t in argos_sent if t.strip()),
            "argos_whitespace_sent": sum(not t.strip() for t in argos_sent),
            "argos_roundtrip_same": argos_out[0] == source, "argos_roundtrip": argos_out[0],
            "tfm_sent": work.sentences, "tfm_roundtrip_same": tfm_out == source,
            "tfm_roundtrip": tfm_out}


def tfm_texts(translator, texts: set[str], beam: int | None) -> dict[str, str]:
    """Each text translated by tfm (whitespace alone kept as it is)."""
    wanted = sorted(t for t in texts if t.strip())
    options = translator.default_options(beam=beam)
    results = translator.translate(wanted, options)
    return {t: r.text for t, r in zip(wanted, results)}


def run(model: Path, testset: Path, out: Path, beam: int | None, html: list[Path]
        ) -> dict[str, float]:
    """Argos's method on the test set with ``model`` (scores as tags_score's, and the
    fragments Argos cut the tagged lines into); ``html`` files written under ``out``."""
    translator = load_translator(model)
    tagged, ref = read(testset / "test.tagged.en"), read(testset / "test.tagged.de")
    plain_hyp = out / "hyp.plain.de"
    plain = read(plain_hyp) if plain_hyp.exists() else None
    start = time.perf_counter()
    _, asked = argos_html(tagged, None)
    hyps, _ = argos_html(tagged, tfm_texts(translator, asked, beam))
    seconds = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    (out / "hyp.argos.de").write_text("".join(f"{h}\n" for h in hyps), encoding="utf-8")
    scores = score(hyps, ref, plain)
    scores.update(seconds=seconds, per_s=len(tagged) / seconds, texts_asked=len(asked),
                  fragments_per_tagged_line=sum(
                      len(argos_html([line], None)[1]) for line in tagged if "<" in line
                  ) / max(1, sum("<" in line for line in tagged)))
    for path in html:
        document = path.read_text(encoding="utf-8")
        head = "<!DOCTYPE html>" if document.startswith("<!DOCTYPE html>") else ""
        _, asked = argos_html([document[len(head):]], None)
        done, _ = argos_html([document[len(head):]], tfm_texts(translator, asked, beam))
        (out / f"{path.stem}.argos{path.suffix}").write_text(head + done[0], encoding="utf-8")
    (out / "scores.argos.json").write_text(json.dumps(scores, indent=1), encoding="utf-8")
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="without: only --html's texts and round "
                        "trips, no model")
    parser.add_argument("--set", type=Path, default=Path("runs/tagged"), dest="testset")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--beam", type=int)
    parser.add_argument("--html", type=Path, nargs="*", default=[])
    args = parser.parse_args()
    if args.model is None:
        for path in args.html:
            print(json.dumps(sent_and_kept(path), indent=1, ensure_ascii=False))
        return
    out = args.out or args.testset / args.model.name
    for key, value in run(args.model, args.testset, out, args.beam, args.html).items():
        print(f"{key}\t{value:.2f}" if isinstance(value, float) else f"{key}\t{value}")


if __name__ == "__main__":
    main()
