"""gettext catalogues (.po, .pot), read and written by polib: each untranslated msgid fills its
msgstr.

A segment is an entry's msgid; its translation fills the msgstr. A plural entry gives two: the
msgid for ``msgstr[0]`` and the msgid_plural for the other forms the catalogue's Plural-Forms
asks for (``nplurals=3`` fills ``msgstr[1]`` and ``msgstr[2]`` with it; ``nplurals=1``, as in
Japanese, fills ``msgstr[0]`` with the plural). A machine translation is a draft, so the entries
filled are marked ``fuzzy``: gettext does not use them until a translator has read them and
taken the flag off (``fuzzy=False`` when reading leaves them unmarked, and takes the flag off
an untranslated entry that had it). Entries that already
have a msgstr are a translator's work and are left alone (``retranslate=True`` to redo them),
as are obsolete entries (``#~``) and the header.

What a program fills in at run time is never the model's to change: printf placeholders
(``%s``, ``%(name)s``, ``%1$d``, ``%%``; all printf forms under a ``c-format``, ``python-format``
or other ``*-format`` flag) and ``{name}`` placeholders are empty tags, and markup is tags too
(``<b>...</b>`` a span over its words, ``<br/>`` empty), put back by the translation pipeline
so that none is lost and ``msgfmt -c`` still finds every one. A msgid's leading and trailing
whitespace (``"\\n"``, as msgfmt checks) is kept aside and put back around its translation.
Contexts, flags, comments, references, previous msgids and the entries' order are polib's to
keep; the file is written as polib (and msgcat) writes it, lines wrapped at 78 columns (not
wrapped when the catalogue was not).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tfm.documents import inline
from tfm.documents.formats import Limits
from tfm.documents.segments import Segment
from tfm.errors import DataError

# printf conversions as gettext's c-format checker reads them
_PRINTF = r"%(?:\d+\$)?(?:\([^()]*\))?[-#0 +']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|ll|[hlLqjzt])?" \
          r"[diouxXeEfFgGaAcCsSpr%]"
_STRICT_PRINTF = r"%(?:\d+\$)?(?:\([A-Za-z_]\w*\))?[sdifr]|%%"  # without a format flag
_BRACES = r"\{\{|\}\}|\{[\w.\[\]]*(?:![rsa])?(?::[^{}]*)?\}"
_STRICT_BRACES = r"\{\w*\}"
_MARKUP = r"</?[A-Za-z][^<>]*>"
_MO_MAGIC = (b"\xde\x12\x04\x95", b"\x95\x04\x12\xde")


@dataclass
class _Slot:
    """Where a segment's translation goes: an entry's msgstr, or some of its plural forms."""

    entry: Any  # a polib.POEntry
    forms: tuple[int, ...] | None  # msgstr_plural's indices; None: the msgstr
    before: str  # the msgid's leading whitespace, put back around the translation
    after: str


@dataclass
class CatalogueDocument:
    """A catalogue read by polib; ``write`` fills the msgstrs of the entries read."""

    segments: list[Segment]
    catalogue: Any = field(repr=False)  # the polib.POFile
    slots: list[_Slot] = field(repr=False)
    markup: list[inline.Markup] = field(repr=False)  # what a tag's ref writes
    fuzzy: bool = True  # mark the entries filled for review

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        """The catalogue with the msgstrs filled; ``language``, if given, in its
        ``Language:`` header (PO names it as a locale: ``de``, ``pt_BR``)."""
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for {len(self.segments)} "
                             "entries")
        if language:
            self.catalogue.metadata["Language"] = language.replace("-", "_")
        for slot, segment in zip(self.slots, translations):
            text = slot.before + inline.render(segment, self.markup) + slot.after
            if slot.forms is None:
                slot.entry.msgstr = text
            else:
                for form in slot.forms:
                    slot.entry.msgstr_plural[form] = text
            flags = slot.entry.flags
            if self.fuzzy and "fuzzy" not in flags:
                flags.insert(0, "fuzzy")
            elif not self.fuzzy and "fuzzy" in flags:  # its msgstr is ours now: so is the flag
                flags.remove("fuzzy")
        text = self.catalogue.__unicode__()
        try:
            return text.encode(self.catalogue.encoding)
        except UnicodeEncodeError:
            raise DataError(f"the catalogue's charset {self.catalogue.encoding} cannot hold "
                            "its translation: convert it to UTF-8 first (msgconv -t UTF-8)"
                            ) from None


def read(data: bytes, limits: Limits, *, fuzzy: bool = True,
         retranslate: bool = False) -> CatalogueDocument:
    """A .po or .pot catalogue: a segment per msgid (and msgid_plural) to translate."""
    _check(data, limits)
    catalogue = _parse(data)
    nplurals = _plural_forms(catalogue)
    doc = CatalogueDocument([], catalogue, [], [], fuzzy)
    for entry in catalogue:
        done = entry.msgstr or any(entry.msgstr_plural.values())
        if entry.obsolete or not entry.msgid or (done and not retranslate):
            continue
        if not entry.msgid_plural:
            _add(doc, entry, entry.msgid, None)
        elif nplurals == 1:
            _add(doc, entry, entry.msgid_plural, (0,))
        else:
            _add(doc, entry, entry.msgid, (0,))
            _add(doc, entry, entry.msgid_plural, tuple(range(1, nplurals)))
    return doc


def _check(data: bytes, limits: Limits) -> None:
    """Refuse what is not a catalogue, or too big a one, before polib reads it."""
    if len(data) > limits.max_bytes:
        raise DataError(f"PO catalogue of {len(data)} bytes is over the limit of "
                        f"{limits.max_bytes}")
    if data[:4] in _MO_MAGIC:
        raise DataError("a compiled .mo catalogue, not a .po: translate the .po it was made "
                        "from")
    if b"\x00" in data:
        raise DataError("binary data, not a PO catalogue")
    entries = data.count(b"\nmsgid ") + data.startswith(b"msgid ")  # obsolete ones: #~
    if entries > limits.max_segments:
        raise DataError(f"PO catalogue holds {entries} entries, over the limit of "
                        f"{limits.max_segments}")


def _parse(data: bytes) -> Any:
    """The catalogue as polib reads it, from a file of ours: given a string, polib reads the
    file of that name when there is one, and a catalogue's text must never name a file."""
    import polib
    handle, path = tempfile.mkstemp(suffix=".po")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        catalogue = polib.pofile(path)
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise DataError(f"PO catalogue line {line} is not in its charset {error.encoding}"
                        ) from None
    except (OSError, ValueError, LookupError) as error:
        found = re.search(r"\(line (\d+)\)(?::\s*(.*))?", str(error))
        where = f"PO catalogue line {found.group(1)}" if found else "not a PO catalogue"
        problem = (found.group(2) if found else None) or "syntax error"
        raise DataError(f"{where}: {problem}") from None
    finally:
        os.unlink(path)
    catalogue.wrapwidth = _wrap_width(data)
    return catalogue


def _wrap_width(data: bytes) -> int:
    """Lines wrapped at 78 columns as msgcat (and polib) wrap them, unless the catalogue has
    longer lines (written with ``--no-wrap``): then none is wrapped."""
    longest = max((len(line.decode("utf-8", "replace")) for line in data.splitlines()),
                  default=0)
    return 0 if longest > 80 else 78


def _placeholder_or_markup(match: str) -> tuple[str, str]:
    return inline.html_like(match) if match.startswith("<") else ("empty", "")


def _plural_forms(catalogue: Any) -> int:
    """How many plural forms the catalogue's Plural-Forms header asks for (2 when none)."""
    match = re.search(r"nplurals\s*=\s*(\d+)", catalogue.metadata.get("Plural-Forms", ""))
    return max(1, min(int(match.group(1)), 6)) if match else 2


def _add(doc: CatalogueDocument, entry: Any, msgid: str, forms: tuple[int, ...] | None
         ) -> None:
    """A segment of ``msgid``, its placeholders and markup held apart as empty tags."""
    stripped = msgid.strip()
    before = msgid[:len(msgid) - len(msgid.lstrip())]
    after = msgid[len(before) + len(stripped):]
    formats = [f for f in entry.flags if f.endswith("-format") and not f.startswith("no-")]
    printf = _PRINTF if any(f != "python-brace-format" for f in formats) else _STRICT_PRINTF
    braces = _BRACES if "python-brace-format" in formats else _STRICT_BRACES
    held = f"(?:{printf}|{braces})"
    # A placeholder stands for a word: it takes a space beside it along (the one after it, or
    # before it at a sentence's end), so the model sees "Deleted files", not "Deleted  files",
    # and the placeholder comes back apart from the word it lands beside.
    pattern = re.compile(f"{held} (?=\\S)| {held}(?=[^\\w\\s]|$)|{held}|{_MARKUP}")
    doc.segments.append(inline.segment(stripped, pattern, doc.markup, _placeholder_or_markup,
                                       f"PO entry at line {entry.linenum}"))
    doc.slots.append(_Slot(entry, forms, before, after))
