"""XLIFF 1.2 and 2.0: each unit's source is a segment, its target filled.

XLIFF is the exchange format of translation tools (CAT tools export it, a translator or a
machine fills the targets, the tool imports it back). A ``<trans-unit>`` (1.2) or each
``<segment>`` of a ``<unit>`` (2.0) has a ``<source>``; its inline codes are tags: ``<g>``,
``<pc>`` and ``<mrk>`` over the words they cover, ``<x/>``, ``<bx/>``, ``<ex/>``, ``<ph>``,
``<bpt>``, ``<ept>``, ``<it>``, ``<sc/>``, ``<ec/>`` and ``<cp/>`` kept whole as empty tags (their
content is the original's native code). The translation goes into the ``<target>``: created
after the source when absent, its content replaced when present, with the same inline codes
(their ids as in the source). A unit marked ``translate="no"`` is left alone, and so is a
source with no text, and a translation a person has approved (1.2 ``approved="yes"`` or a
target ``state="final"``/``"signed-off"``; 2.0 a segment ``state="final"``).

The target is marked as a machine's work that a person should check: in 1.2
``state="needs-review-translation"`` with ``state-qualifier="mt-suggestion"`` (the values the
1.2 specification defines for this); in 2.0 the segment's ``state="translated"`` (2.0 has no
state for "to review" below it). A file told its target language names it (1.2
``target-language`` on each ``<file>``, 2.0 ``trgLang`` on ``<xliff>``); else its languages are
left as the file gives them. The file is parsed and written as the XML format is (no entity
expanded, nothing read from outside, the prolog's bytes kept).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from tfm.documents.formats import Limits
from tfm.documents.segments import Segment
from tfm.documents.tree import Rules, Run, names, rebuild, whole
from tfm.documents.xml import check_size, parse, serialize
from tfm.errors import DataError

WHAT = "the XLIFF file"


def _no_translate(el: Any) -> bool:
    return el.get("translate", "").strip().lower() == "no" or el.get("mtype") == "protected"


RULES = Rules(inline=names("g pc mrk"),
              verbatim=names("x bx ex ph bpt ept it sub sc ec cp sm em"),
              mixed=True, no_translate=_no_translate)


class XliffDocument:
    """An XLIFF file; ``write`` parses it again and fills its targets."""

    def __init__(self, data: bytes, limits: Limits) -> None:
        self.data, self.limits = data, limits
        self.segments = [segment for segment, _ in _units(parse(data, WHAT), limits)]

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        tree = parse(self.data, WHAT)
        units = list(_units(tree, self.limits))
        if len(translations) != len(units):
            raise ValueError(f"{len(translations)} translations for {len(units)} segments")
        version = _version(tree.getroot())
        for (_, (source, run)), translation in zip(units, translations):
            translation.check()
            _fill(source, run, translation, version)
        if language:
            _name_target(tree.getroot(), version, language)
        return serialize(tree, self.data)


def _name_target(root: Any, version: str, language: str) -> None:
    """The file's target language: 2.0's ``trgLang``, 1.2's ``target-language`` on each
    ``<file>``."""
    if version == "2":
        root.set("trgLang", language)
        return
    namespace = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    for file in root.iter(namespace + "file"):
        file.set("target-language", language)


def read(data: bytes, limits: Limits) -> XliffDocument:
    """The file's sources (see the module's docstring); refused if it is not XLIFF."""
    check_size(data, limits, WHAT)
    return XliffDocument(data, limits)


def _version(root: Any) -> str:
    """"1" or "2": the major version, from the namespace (or the version attribute)."""
    tag = root.tag if isinstance(root.tag, str) else ""
    if tag.rsplit("}", 1)[-1] != "xliff":
        raise DataError(f"{WHAT} is not XLIFF: its root element is <{tag.rsplit('}', 1)[-1]}>")
    if "xliff:document:2" in tag or root.get("version", "").startswith("2"):
        return "2"
    if "xliff:document:1" in tag or root.get("version", "").startswith("1"):
        return "1"
    raise DataError(f"{WHAT} names no XLIFF version this reads (1.2 or 2.0)")


def _units(tree: Any, limits: Limits) -> Iterator[tuple[Segment, tuple[Any, Run]]]:
    """Each source to translate: its segment, the source element and its run."""
    root = tree.getroot()
    version = _version(root)
    namespace = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    holder = "trans-unit" if version == "1" else "segment"
    count = 0
    for el in root.iter(namespace + holder):
        if _untranslated(el) or _signed_off(el, namespace):
            continue
        source = el.find(namespace + "source")
        if source is None:
            continue
        segment, run = whole(source, RULES, True, WHAT)
        if segment.text.strip():
            count += 1
            if count > limits.max_segments:
                raise DataError(f"{WHAT} holds more than the limit of {limits.max_segments} "
                                "texts to translate")
            yield segment, (source, run)


def _signed_off(el: Any, namespace: str) -> bool:
    """Whether a person has approved this unit's translation (1.2 ``approved="yes"`` or a
    target in state ``final`` or ``signed-off``; 2.0 a segment in state ``final``): a
    machine's translation never replaces it."""
    if el.get("approved") == "yes" or el.get("state") == "final":
        return True
    target = el.find(namespace + "target")
    return target is not None and target.get("state") in ("final", "signed-off")


def _untranslated(el: Any) -> bool:
    """Whether ``el`` or a unit, group or file above it says translate="no"."""
    return any(up.get("translate", "").strip().lower() == "no"
               for up in [el, *el.iterancestors()])


def _fill(source: Any, run: Run, translation: Segment, version: str) -> None:
    """Write ``translation`` into the target beside ``source`` (made if absent)."""
    namespace = source.tag[:source.tag.index("}") + 1] if source.tag.startswith("{") else ""
    holder = source.getparent()
    target = holder.find(namespace + "target")
    if target is None:
        target = source.makeelement(namespace + "target", {})
        after = holder.find(namespace + "seg-source")
        after = source if after is None else after
        tail = after.tail
        after.addnext(target)
        if holder.text and not holder.text.strip():  # indented as the source is
            after.tail = holder.text
        target.tail = tail
    old = list(target)
    target.text = None
    rebuild(Run(target, None, old, run.lead, run.trail, run.markup, run.whole), translation)
    if version == "1":
        target.set("state", "needs-review-translation")
        target.set("state-qualifier", "mt-suggestion")
    else:
        holder.set("state", "translated")
