"""Issue 79's battery: documents of every format, written here in code (no third-party file),
translated by a model through ``tfm translate --input`` as a user runs it, and checked with each
format's own library: the output parses, keeps the source's structure (the same element tree,
token structure, cues and timings, catalogue entries, paragraphs and table shape), and what must
not be translated (code, scripts, URLs, timings, placeholders, notes) is byte-identical.

    python bench/documents_battery.py --model runs/m30k-en-de/model [--keep DIR] [--cues 300]

Prints a table: format, documents, segments, structure kept %, untranslatable byte-identical %,
seconds (the command's wall time, model loading included). Exits 1 when a document's output
does not parse, loses structure or changes what must be kept. The checks are functions of the
source's and the output's bytes (``check``), so that tests/test_documents_battery.py runs
them on a stand-in translation.
"""

from __future__ import annotations

import argparse
import io
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Sentences in Multi30k's domain (what its models translate), for every document.
SENTENCES = [
    "A man in a blue shirt is standing on a ladder.",
    "Two young girls are playing in the sand near the water.",
    "A dog runs through the grass with a ball in its mouth.",
    "A woman is sitting on a bench in the park.",
    "Several people are walking down a busy street.",
    "A little boy is jumping into a swimming pool.",
    "A group of children are sitting at a table eating lunch.",
    "An older man is playing the guitar on the street.",
    "A woman in a red dress is dancing with a man.",
    "Two men are climbing a large rock.",
    "A black dog and a white dog are running on the beach.",
    "A chef is cooking food in a restaurant kitchen.",
    "A girl in a pink jacket is riding a bicycle.",
    "People are watching a concert at night.",
    "A young woman is reading a book under a tree.",
    "A man is selling fruit at a market.",
]


def sentence(i: int) -> str:
    return SENTENCES[i % len(SENTENCES)]


# --- the documents ------------------------------------------------------------------------------

def web_page() -> bytes:
    """A page: head with meta, style and script; nav; nested inline tags; entities; comments;
    an image with alt text; a form; a code sample; a translate="no" name."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Photos of the park &amp; the beach</title>
<style>body {{ font-family: sans-serif; }} p > b {{ color: #c00; }}</style>
<script>window.dataLayer = window.dataLayer || []; if (a < b && c > d) {{ track("page"); }}</script>
</head>
<body>
<!-- navigation: generated, do not edit -->
<nav><a href="/index.html">Home</a> | <a href="/photos/?page=2&amp;sort=new">Photos</a></nav>
<h1>Photos of the <em>park</em></h1>
<p>{sentence(0)[:-1]} <b>near the <i>old</i> house</b>. {sentence(1)}</p>
<p>{sentence(2)} See <a href="https://example.org/dogs?id=7&amp;x=1" title="More dogs">the
  <strong>dog</strong> gallery</a> &mdash; it is free&nbsp;&amp; open.</p>
<p><img src="/img/beach.jpg" alt="Two dogs running on the beach" width="300"> {sentence(10)}</p>
<ul>
  <li>{sentence(3)}</li>
  <li>{sentence(4)[:-1]} in <span class="city" translate="no">New York</span>.</li>
</ul>
<p>Type <code>ls -l photos/</code> to list the photos.</p>
<pre>for photo in photos:
    print(photo.name)</pre>
<form><input type="text" placeholder="Search the photos" name="q"><button>Search</button></form>
<!-- footer -->
<footer><p>&copy; 2024 The Park Photos. {sentence(5)}</p></footer>
<script src="/js/app.js"></script>
</body>
</html>
""".encode()


def article() -> bytes:
    """An article: headings, nested inline tags three deep, a table, a figure, a quote."""
    rows = "\n".join(f"<tr><td>{i}</td><td>{sentence(i)}</td></tr>" for i in range(6, 12))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>A day in the park</title></head>
<body><article>
<h2 id="morning">In the <em>morning</em></h2>
<p>{sentence(6)} <a href="#lunch"><b>A <i>small</i> dog</b> watches them</a>. {sentence(7)}</p>
<blockquote><p>{sentence(8)}</p></blockquote>
<figure><img src="dance.png" alt="A woman dancing"><figcaption>{sentence(8)}</figcaption></figure>
<h2 id="lunch">At lunch</h2>
<table><thead><tr><th>No.</th><th>What we saw</th></tr></thead><tbody>
{rows}
</tbody></table>
<p>{sentence(12)}<br>{sentence(13)} <sup><a href="#note1">1</a></sup></p>
<p id="note1"><small>{sentence(14)}</small></p>
</article></body></html>
""".encode()


def readme() -> bytes:
    """A README: title, badges, paragraphs with emphasis, links and inline code, a list, a
    table, fenced and indented code."""
    return f"""# Park photos

[![build status](https://ci.example.com/park/badge.svg)](https://ci.example.com/park)

{sentence(0)} **{sentence(1)[:-1]}**, and *{sentence(2)[:-1].lower()}*.
Read [the guide](https://example.org/guide "Guide") or run `park --help`.

## Install

{sentence(3)}

```bash
pip install park-photos
park init --dir ~/photos   # the photos' folder
```

## Use

- {sentence(4)}
- {sentence(5)[:-1]} with `park add`.
- [x] {sentence(6)}

| Command | What it does |
|---|---|
| `park add` | {sentence(7)} |
| `park show` | {sentence(8)} |

    indented code: park show --all

> {sentence(9)}

See <https://example.org/park> for more.
""".encode()


def _times(i: int, rng: random.Random) -> tuple[float, float]:
    start = i * 3.5 + rng.random()
    return start, start + 1.2 + rng.random() * 2


def _clock(seconds: float, comma: bool) -> str:
    ms = int(round(seconds * 1000))
    text = f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}"
    return text + ("," if comma else ".") + f"{ms % 1000:03d}"


def _cue_text(i: int) -> str:
    """One or two lines, some in italics, some two speakers."""
    if i % 7 == 3:
        return f"- {sentence(i)}\n- {sentence(i + 1)}"
    if i % 5 == 0:
        return f"<i>{sentence(i)}</i>"
    words = sentence(i).split()
    half = len(words) // 2
    return " ".join(words[:half]) + "\n" + " ".join(words[half:])


def subrip(cues: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    blocks = []
    for i in range(cues):
        start, end = _times(i, rng)
        blocks.append(f"{i + 1}\n{_clock(start, True)} --> {_clock(end, True)}\n{_cue_text(i)}\n")
    return "\n".join(blocks).encode()


def webvtt(cues: int, seed: int = 2) -> bytes:
    rng = random.Random(seed)
    blocks = ["WEBVTT - Park photos\nKind: captions\n",
              "NOTE made for the battery; not translated\n",
              "STYLE\n::cue { color: yellow; }\n"]
    for i in range(cues):
        start, end = _times(i, rng)
        settings = " align:start position:10%" if i % 4 == 0 else ""
        text = _cue_text(i) if i % 6 else f"<v Anna>{sentence(i)}</v>"
        blocks.append(f"cue-{i}\n{_clock(start, False)} --> {_clock(end, False)}{settings}\n"
                      f"{text}\n")
    return "\n".join(blocks).encode()


def catalogue() -> bytes:
    """A PO catalogue: header with plural forms, flags, comments, contexts, placeholders of
    both kinds, plural entries, a translated entry and an obsolete one."""
    entries = [f'#: app/photos.py:{10 + i}\nmsgid "{sentence(i)}"\nmsgstr ""\n'
               for i in range(8)]
    entries += [
        '#. The user\'s name\n#, python-brace-format\nmsgid "Hello {name}, you have new photos."'
        '\nmsgstr ""\n',
        '#, python-format\nmsgid "%(count)d photos of the beach"\nmsgstr ""\n',
        '#, c-format\nmsgid "A dog runs %s times through the grass."\nmsgstr ""\n',
        '#, c-format\nmsgid "One photo of a dog"\nmsgid_plural "%d photos of a dog"\n'
        'msgstr[0] ""\nmsgstr[1] ""\n',
        'msgctxt "button"\nmsgid "Search"\nmsgstr ""\n',
        '#, python-brace-format\nmsgid "{count} girl is playing"\nmsgid_plural '
        '"{count} girls are playing"\nmsgstr[0] ""\nmsgstr[1] ""\n',
        'msgid "Home"\nmsgstr "Startseite"\n',
        '#~ msgid "An old message"\n#~ msgstr "Eine alte Nachricht"\n',
    ]
    header = ('# Park photos.\n# Copyright (C) 2024\nmsgid ""\nmsgstr ""\n'
              '"Project-Id-Version: park 1.0\\n"\n"Language: \\n"\n'
              '"MIME-Version: 1.0\\n"\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
              '"Content-Transfer-Encoding: 8bit\\n"\n'
              '"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n')
    return "\n".join([header, *entries]).encode()


def xliff_1() -> bytes:
    units = "\n".join(
        f'      <trans-unit id="u{i}"><source>{sentence(i)}</source></trans-unit>'
        for i in range(6))
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" datatype="html" original="park.html">
    <header><note>Exported for the battery.</note></header>
    <body>
{units}
      <trans-unit id="g1"><source>{sentence(6)[:-1]} <g id="1">near the <x id="2"/> house</g>.
        </source></trans-unit>
      <trans-unit id="ph1"><source>Click <ph id="3">&lt;b&gt;</ph>Save<ph id="4">&lt;/b&gt;</ph>
        to keep the photo.</source></trans-unit>
      <trans-unit id="no" translate="no"><source>Park Photos Ltd.</source></trans-unit>
      <trans-unit id="done" approved="yes"><source>Home</source>
        <target>Startseite</target></trans-unit>
    </body>
  </file>
</xliff>
""".encode()


def xliff_2() -> bytes:
    units = "\n".join(
        f'    <unit id="u{i}"><segment><source>{sentence(i)}</source></segment></unit>'
        for i in range(8, 14))
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="2.0" xmlns="urn:oasis:names:tc:xliff:document:2.0" srcLang="en">
  <file id="f1" original="park.md">
    <notes><note>Exported for the battery.</note></notes>
{units}
    <unit id="pc"><originalData><data id="d1">&lt;br/&gt;</data></originalData>
      <segment><source>{sentence(3)[:-1]} <pc id="1">in the <ph id="2" dataRef="d1"/> park</pc>.
      </source></segment></unit>
  </file>
</xliff>
""".encode()


def dita_topic() -> bytes:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE task PUBLIC "-//OASIS//DTD DITA Task//EN" "task.dtd">
<task id="add-photo" xml:lang="en-US">
  <title>Adding a photo of the <keyword>park</keyword></title>
  <shortdesc>{sentence(0)}</shortdesc>
  <taskbody>
    <context><p>{sentence(1)} Open <filepath>~/photos/park</filepath> first.</p></context>
    <steps>
      <step><cmd>Click <uicontrol>Add</uicontrol> and choose a photo.</cmd>
        <info>{sentence(2)}</info></step>
      <step><cmd>Type <codeph>park add --all</codeph> to add every photo.</cmd></step>
      <step><cmd>{sentence(3)[:-1]} <xref href="gallery.dita">in the gallery</xref>.</cmd></step>
    </steps>
    <example><codeblock>park add ~/photos/beach.jpg
park show --last</codeblock></example>
    <result><p>{sentence(4)}<!-- checked by the battery --></p></result>
  </taskbody>
</task>
""".encode()


def word_file() -> bytes:
    """A Word file: a heading, paragraphs with bold, italic and hyperlink runs, a list, a
    table of three rows and two columns."""
    import docx
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    document.add_heading("A day in the park", 1)
    p = document.add_paragraph("A man in a ")
    p.add_run("blue shirt").bold = True
    p.add_run(" is standing on a ")
    p.add_run("ladder").italic = True
    p.add_run(". More photos are ")
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), p.part.relate_to(
        "https://example.org/park", "http://schemas.openxmlformats.org/officeDocument/2006/"
        "relationships/hyperlink", is_external=True))
    run, text = OxmlElement("w:r"), OxmlElement("w:t")
    text.text = "in the gallery"
    run.append(text)
    link.append(run)
    p._p.append(link)
    p.add_run(".")
    for i in range(4, 7):
        document.add_paragraph(sentence(i), style="List Bullet")
    table = document.add_table(rows=3, cols=2)
    for row in range(3):
        table.cell(row, 0).text = f"{row + 1}"
        table.cell(row, 1).paragraphs[0].add_run(sentence(row + 8)).bold = row == 0
    document.add_paragraph(sentence(12))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def battery(cues: int = 300) -> dict[str, bytes]:
    """The documents, by file name (its extension picks its format)."""
    return {"page.html": web_page(), "article.html": article(), "README.md": readme(),
            "film.srt": subrip(cues), "talk.vtt": webvtt(cues), "park.po": catalogue(),
            "park-1.2.xlf": xliff_1(), "park-2.0.xlf": xliff_2(), "add-photo.dita": dita_topic(),
            "report.docx": word_file()}


# --- the checks: each format's structure and untranslatable parts, read by its own library ------

# Attributes whose values are translated (HTML) or name the language: not structure.
HUMAN = {"alt", "title", "placeholder", "aria-label", "lang",
         "{http://www.w3.org/XML/1998/namespace}lang"}


def _elements(root, skip: Callable[[object], bool] = lambda el: False) -> list:
    """An element tree as (tag, attributes but the human ones), comments as their text, in
    ``_in_order``'s order."""
    return [_unit(el) for el in _in_order(root) if not skip(el)]


def _unit(el) -> tuple:
    if not isinstance(el.tag, str):
        return ("comment", el.text)
    return (el.tag, sorted((k, v) for k, v in el.attrib.items() if k not in HUMAN))


def _in_order(root) -> list:
    """``root`` and what it holds in document order, except the children of an element with
    text of its own (inline markup in a sentence), which come in the order of their markup
    and of what they keep verbatim: a translation puts them where their words went ("a
    <b>red</b> <i>car</i>" -> "ein <i>Auto</i>, <b>rot</b>"), and the tree is the same."""
    out, stack = [], [root]
    while stack:  # no recursion: a page may nest deep
        el = stack.pop()
        out.append(el)
        children = list(el) if isinstance(el.tag, str) else []
        if _mixed(el):
            children.sort(key=_signature)
        stack.extend(reversed(children))
    return out


def _mixed(el) -> bool:
    return isinstance(el.tag, str) and bool((el.text or "").strip() or any(
        (c.tail or "").strip() for c in el))


def _signature(el) -> str:
    """What a translation leaves of an element: its markup, and the text it keeps verbatim."""
    return repr([(_unit(e), "".join(e.itertext()) if _verbatim(e) else None)
                 for e in _in_order(el)])


def _verbatim(el) -> bool:
    return isinstance(el.tag, str) and (_local(el) in VERBATIM or el.get("translate") == "no")


def _html_tree(data: bytes):
    import html5lib

    return html5lib.parse(data, treebuilder="lxml", namespaceHTMLElements=False)


def html_structure(data: bytes) -> list:
    return _elements(_html_tree(data).getroot())


def html_kept(data: bytes) -> list:
    """Scripts, styles, code and preformatted text, comments, URLs and other attributes."""
    elements = _in_order(_html_tree(data).getroot())
    kept = ["".join(el.itertext()) for el in elements
            if el.tag in ("script", "style", "code", "pre")]
    kept += [el.text for el in elements if not isinstance(el.tag, str)]
    kept += [v for el in elements if isinstance(el.tag, str)
             for k, v in el.attrib.items() if k not in HUMAN]
    kept += ["".join(el.itertext()) for el in elements if el.get("translate") == "no"]
    return kept


def _markdown_tokens(data: bytes) -> list:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(data.decode())


def markdown_structure(data: bytes) -> list:
    """Block tokens and the inline markup inside them (not text, nor soft breaks: a
    paragraph's wrapping is not its structure), the inline markup in ``_inline_order``."""
    out = []
    for token in _markdown_tokens(data):
        out.append((token.type, token.tag, token.nesting, token.markup, token.info))
        out += [(c.type, c.tag, c.nesting, c.markup) for c in _inline_order(token.children)
                if c.type not in ("text", "softbreak")]
    return out


def markdown_kept(data: bytes) -> list:
    kept = []
    for token in _markdown_tokens(data):
        if token.type in ("fence", "code_block", "html_block"):
            kept.append(token.content)
        for c in _inline_order(token.children):
            if c.type in ("code_inline", "html_inline"):
                kept.append(c.content)
            kept += [v for k, v in (c.attrs or {}).items() if k in ("href", "src")]
    return kept


def _inline_order(children) -> list:
    """A paragraph's inline tokens with the markup at each level (an emphasis with what it
    holds, a code span, a link) in the order of what a translation leaves of it (markup, code,
    URLs), as ``_in_order`` orders inline elements; the text dropped."""
    levels: list[list[list]] = [[]]
    for token in children or []:
        if token.type in ("text", "softbreak"):
            continue
        if token.nesting == 1:
            levels.append([token])
        elif token.nesting == -1 and len(levels) > 1:
            opening, *inside = levels.pop()
            inside.sort(key=_token_signature)
            levels[-1].append([opening, *(t for block in inside for t in block), token])
        else:
            levels[-1].append([token])
    while len(levels) > 1:  # an opening never closed: kept where it stood
        block = levels.pop()
        levels[-1].append(block[:1] + [t for b in block[1:] for t in b])
    top = sorted(levels[0], key=_token_signature)
    return [t for block in top for t in block]


def _token_signature(block: list) -> str:
    return repr([(t.type, t.tag, t.markup, t.content if t.type in ("code_inline",
                  "html_inline") else None, sorted((k, v) for k, v in (t.attrs or {}).items()
                                                    if k in ("href", "src"))) for t in block])


def _timing_lines(data: bytes) -> list:
    return [line for line in data.decode().splitlines() if "-->" in line]


def srt_structure(data: bytes) -> list:
    import srt

    return [(c.index, c.start, c.end, c.proprietary) for c in srt.parse(data.decode())]


def vtt_structure(data: bytes) -> list:
    import webvtt

    captions = webvtt.from_buffer(io.StringIO(data.decode())).captions
    return [(c.identifier, c.start, c.end, c.settings if hasattr(c, "settings") else None)
            for c in captions]


def vtt_kept(data: bytes) -> list:
    blocks = re.split(r"\n\n+", data.decode())
    return _timing_lines(data) + [b for b in blocks if b.startswith(("WEBVTT", "NOTE", "STYLE"))]


_PLACEHOLDER = re.compile(r"%\(\w+\)[sd]|%[sd]|\{\w*\}")


def _catalogue(data: bytes):
    import polib

    return polib.pofile(data.decode())


def po_structure(data: bytes) -> list:
    """The entries, all but their translations (and the fuzzy flag a machine adds)."""
    return [(e.msgctxt, e.msgid, e.msgid_plural, sorted(set(e.flags) - {"fuzzy"}), e.comment,
             e.tcomment, e.occurrences, e.obsolete) for e in _catalogue(data)]


def po_kept(data: bytes) -> list:
    """Each entry's placeholders: of its msgid in the source, of its msgstr once filled; the
    translations a person made."""
    kept = []
    for e in _catalogue(data):
        if e.obsolete or (e.msgstr and "fuzzy" not in e.flags and not e.msgid_plural):
            kept.append((e.msgid, e.msgstr))  # a person's, and the obsolete: never changed
            continue
        texts = [e.msgstr] if not e.msgid_plural else [e.msgstr_plural.get(k, "")
                                                      for k in sorted(e.msgstr_plural)]
        filled = any(texts)
        for text, source in zip(texts, [e.msgid, e.msgid_plural or e.msgid]):
            kept.append(sorted(_PLACEHOLDER.findall(text if filled else source)))
    return kept


def _xml_root(data: bytes):
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    return etree.fromstring(data, parser)


def _local(el) -> str:
    return el.tag.rsplit("}", 1)[-1] if isinstance(el.tag, str) else ""


def xliff_structure(data: bytes) -> list:
    """The file without its targets (and the states and languages a translation sets)."""
    root = _xml_root(data)

    def in_target(el) -> bool:
        return any(_local(a) == "target" for a in [el, *el.iterancestors()])

    out = _elements(root, in_target)
    return [(tag, [(k, v) for k, v in attrs if k not in ("state", "state-qualifier",
                                                         "target-language", "trgLang")])
            for tag, attrs in out]


def xliff_kept(data: bytes) -> list:
    """Each unit's inline codes with their ids and content (in its target once filled, else
    its source), its notes, and the approved and untranslatable units whole."""
    from lxml import etree

    kept = []
    for el in _xml_root(data).iter():
        if _local(el) in ("note", "data"):
            kept.append(el.text)
        if _local(el) not in ("trans-unit", "segment"):
            continue
        texts = [c for c in el if _local(c) in ("source", "target")]
        if el.get("translate") == "no" or el.get("approved") == "yes":
            kept.append([etree.tostring(c) for c in texts])
            continue
        holder = texts[-1]
        kept.append(sorted((_local(c), c.get("id"), c.text or "") for c in holder.iter()
                           if c is not holder and _local(c) not in ("g", "pc", "mrk")))
    return kept


def dita_structure(data: bytes) -> list:
    return _elements(_xml_root(data))


CODE = {"codeblock", "codeph", "filepath", "cmdname", "varname", "userinput"}
VERBATIM = CODE | {"script", "style", "code", "pre"}  # elements whose text is kept as it is


def dita_kept(data: bytes) -> list:
    elements = _in_order(_xml_root(data))
    return (["".join(el.itertext()) for el in elements if _local(el) in CODE]
            + [v for el in elements if isinstance(el.tag, str)
               for k, v in el.attrib.items() if k not in HUMAN]
            + [el.text for el in elements if not isinstance(el.tag, str)])


def _word(data: bytes):
    import docx

    return docx.Document(io.BytesIO(data))


def docx_structure(data: bytes) -> list:
    """The body's paragraphs (their styles, and which have bold, italic or hyperlinks) and
    tables (their shape, and their cells' paragraphs)."""
    from docx.oxml.ns import qn

    document = _word(data)
    out: list = []
    for p in document.paragraphs:
        runs = list(p._p.iter(qn("w:r")))
        marks = sorted({m for r in runs for m in ("b", "i")
                        if r.find(f"{qn('w:rPr')}/{qn('w:' + m)}") is not None})
        out.append(("p", p.style.name, marks, len(list(p._p.iter(qn("w:hyperlink"))))))
    for t in document.tables:
        out.append(("table", len(t.rows), len(t.columns),
                    [len(c.paragraphs) for row in t.rows for c in row.cells]))
    return out


def docx_kept(data: bytes) -> list:
    """The hyperlinks' targets and the table's first column (numbers, not words)."""
    document = _word(data)
    links = sorted(r.target_ref for r in document.part.rels.values() if r.is_external)
    return links + [t.cell(i, 0).text for t in document.tables for i in range(len(t.rows))]


@dataclass(frozen=True)
class Checks:
    structure: Callable[[bytes], list]
    kept: Callable[[bytes], list]


CHECKS = {
    "html": Checks(html_structure, html_kept),
    "markdown": Checks(markdown_structure, markdown_kept),
    "srt": Checks(srt_structure, _timing_lines),
    "vtt": Checks(vtt_structure, vtt_kept),
    "po": Checks(po_structure, po_kept),
    "xliff": Checks(xliff_structure, xliff_kept),
    "xml": Checks(dita_structure, dita_kept),
    "docx": Checks(docx_structure, docx_kept),
}


@dataclass
class Checked:
    """One document's result: whether its output parsed, and of its structure's units and of
    its untranslatable pieces, how many came out the same."""

    parsed: bool
    structure: tuple[int, int]  # (the same, of)
    kept: tuple[int, int]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return self.parsed and _whole(self.structure) and _whole(self.kept)


def _whole(pair: tuple[int, int]) -> bool:
    return pair[0] == pair[1]


def _same(before: list, after: list) -> tuple[int, int]:
    """Units in the same place the same; a missing or extra one counts as different."""
    return sum(a == b for a, b in zip(before, after)), max(len(before), len(after))


def check(fmt: str, source: bytes, output: bytes) -> Checked:
    """``output`` (``source`` translated) checked by ``fmt``'s own library."""
    checks = CHECKS[fmt]
    before = checks.structure(source), checks.kept(source)
    try:
        after = checks.structure(output), checks.kept(output)
    except Exception as e:  # noqa: BLE001 (any library's refusal is the finding)
        return Checked(False, (0, len(before[0])), (0, len(before[1])),
                       [f"does not parse: {type(e).__name__}: {e}"])
    structure, kept = _same(before[0], after[0]), _same(before[1], after[1])
    problems = [f"{what} differs: {a!r} -> {b!r}" for what, pair in
                (("structure", (before[0], after[0])), ("kept", (before[1], after[1])))
                for a, b in _differences(*pair)]
    return Checked(True, structure, kept, problems[:5])


def _differences(before: list, after: list) -> list[tuple]:
    out = [(a, b) for a, b in zip(before, after) if a != b]
    if len(before) != len(after):
        out.append((f"{len(before)} units", f"{len(after)} units"))
    return out


# --- the run ------------------------------------------------------------------------------------

@dataclass
class Row:
    fmt: str
    documents: int = 0
    segments: int = 0
    structure: tuple[int, int] = (0, 0)
    kept: tuple[int, int] = (0, 0)
    seconds: float = 0.0

    def add(self, segments: int, checked: Checked, seconds: float) -> None:
        self.documents += 1
        self.segments += segments
        self.structure = _plus(self.structure, checked.structure)
        self.kept = _plus(self.kept, checked.kept)
        self.seconds += seconds

    def cells(self) -> list[str]:
        return [self.fmt, str(self.documents), str(self.segments), _percent(self.structure),
                _percent(self.kept), f"{self.seconds:.1f}"]


def _plus(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def _percent(pair: tuple[int, int]) -> str:
    return f"{100 * pair[0] / pair[1]:.1f}" if pair[1] else "-"


def format_of(name: str) -> str:
    from tfm.documents.formats import format_for

    return format_for(Path(name)).name


def segments_of(name: str, data: bytes) -> int:
    from tfm.documents.formats import format_for

    return len(format_for(Path(name)).read(data).segments)


def translate_file(source: Path, output: Path, model: str, options: list[str]) -> float:
    """``source`` translated by ``tfm translate --input`` into ``output``: its seconds."""
    command = [sys.executable, "-m", "tfm", "translate", "-m", model, "--input", str(source),
               "--output", str(output), *options]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def run(directory: Path, translate: Callable[[Path, Path], float], cues: int = 300
        ) -> tuple[list[Row], list[str]]:
    """Every document written into ``directory``, translated by ``translate(source,
    output)`` and checked: the table's rows by format, and the problems found."""
    rows: dict[str, Row] = {}
    problems: list[str] = []
    for name, data in battery(cues).items():
        source, output = directory / name, directory / f"translated.{name}"
        source.write_bytes(data)
        seconds = translate(source, output)
        fmt = format_of(name)
        checked = check(fmt, data, output.read_bytes())
        rows.setdefault(fmt, Row(fmt)).add(segments_of(name, data), checked, seconds)
        problems += [f"{name}: {p}" for p in checked.problems]
    return list(rows.values()), problems


def table(rows: list[Row]) -> str:
    head = ["format", "documents", "segments", "structure kept %",
            "untranslatable byte-identical %", "seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r.cells()) + " |" for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the model directory to translate with")
    parser.add_argument("--keep", type=Path, help="write the documents and outputs here")
    parser.add_argument("--cues", type=int, default=300, help="cues in each subtitle file")
    parser.add_argument("--beam", type=int, help="tfm translate's --beam (its default: none)")
    args = parser.parse_args()
    options = ["--beam", str(args.beam)] if args.beam else []
    with tempfile.TemporaryDirectory() as temporary:
        directory = args.keep or Path(temporary)
        directory.mkdir(parents=True, exist_ok=True)
        rows, problems = run(directory, lambda s, o: translate_file(s, o, args.model, options),
                             args.cues)
    print(table(rows))
    for problem in problems:
        print(problem, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
