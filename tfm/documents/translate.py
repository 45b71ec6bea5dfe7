"""A document translated: its segments cut into sentences, translated, put back, and their
inline tags carried across by word alignment.

::

    Document.segments ── each text cut into sentences (tfm.data.sentences), whitespace kept
         │                            │ all the document's sentences, token-batched together
         │                 prepare_request ── Translator.translate_prepared (attention on for
         │                            │         the sentences of segments with tags)
         └─ Passage.join: each segment's translation, its gaps as they were
                   │
              project: each tag from its source span to the target (source characters ->
              source words -> alignment -> target words -> target characters), then repaired
              so that tags stay nested as in the source, none lost or duplicated
                   │
    Document.write(translated segments) -> bytes

A tag over whole sentences covers their whole translations; one inside a sentence covers the
target words aligned to its source words; an empty one (inline code, a placeholder) goes to a
word boundary beside its neighbour word's translation, spaced as in the source. A sentence
without a letter (a number, a price) is kept as it is, never sent to the model. Whitespace
between sentences is copied, so a tag's edge that lies there maps exactly. Whatever the
alignment says (crossing, garbage, none: an engine without attention), the result is a valid
segment: the tags' edges, in the source's nesting and order (but for a span whose words the
translation clearly moved before a sibling's: it moves with them), are made non-decreasing in
the target, which keeps the source's nesting.

A model trained on tag-augmented data (its ModelInfo lists ``inline_tags``) is sent each
sentence's inner tags as tag tokens (tfm.documents.tag_tokens); where its translation holds
each of them once, their places there win over the alignment's, and the same repair follows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from tfm.config import SearchOptions
from tfm.data.language_marks import ResolvedLanguage
from tfm.data.lexical_alignment import Lexicon
from tfm.data.sentences import Passage, split_sentences
from tfm.decoding.alignment import word_ids
from tfm.decoding.glossary import Glossary
from tfm.decoding.requests import prepare_request
from tfm.decoding.translator import Translation, Translator
from tfm.documents.formats import Document, language_tag
from tfm.documents.segments import Segment, Tag, holders
from tfm.documents.tag_tokens import Marked, clean_words, literal, mark, read

_WORD = re.compile(r"\S+")
_CLOSING = set(".,;:!?)]}»\"'…")  # after these no space is added behind an empty tag
Alignment = list[tuple[int, int]]  # (source word, target word), words split at whitespace


def translate_document(document: Document, translator: Translator, options: SearchOptions, *,
                       language: ResolvedLanguage | None = None, split: bool = True,
                       glossary: Glossary | None = None,
                       progress: Callable[[int], None] | None = None,
                       work: DocumentWork | None = None) -> bytes:
    """The document's file with every segment translated and its tags put back (see the
    module). ``language`` (the request's, resolved by the caller: its source language's
    rules cut the sentences), ``glossary``: as ``prepare_request`` takes them; ``split``:
    cut segments into sentences (False: each segment is one); ``progress``: called with the
    number of sentences done, as they are; ``work``: the
    document as ``DocumentWork.of`` cut it, if already done (to count its sentences first).
    The file names the request's target language (else the model's one) where its format
    names one."""
    target = (language.target if language else None) or model_target(translator)
    work = work or DocumentWork.of(document, split, language.source if language else None,
                                   target, inline_tags=model_inline_tags(translator),
                                   lexicon=model_lexicon(translator))
    sentences = work.sentences  # built anew at each access: once here, not once a sentence
    results: list[Translation | None] = [None] * len(sentences)
    for chosen, with_tags in work.groups():
        wanted = work.options(options, with_tags, needs_attention(translator))
        sources = prepare_request(translator, [sentences[i] for i in chosen], wanted,
                                  None, glossary, language)
        for i, result in zip(chosen, translator.translate_prepared(sources, wanted, progress)):
            results[i] = result
    if progress is not None and work.unsent:
        progress(len(work.unsent))
    return work.write(results)


@dataclass
class DocumentWork:
    """A document as translation takes it: each segment cut into sentences (``passages``),
    and all its sentences in order; ``write`` puts their translations back. The server
    decodes them through its batcher, the command line through the translator."""

    document: Document
    passages: list[Passage]
    target: str | None = None  # the target language, as tfm names it (None: unknown)
    # A model trained to copy inline-tag tokens: its tokens (ModelInfo.inline_tags), and each
    # sentence with the tokens of its tags (None: none sent; tfm.documents.tag_tokens).
    inline_tags: tuple[str, ...] = ()
    marked: list[Marked | None] = field(default_factory=list)
    # The model's alignment lexicon (tfm.data.lexical_alignment), which aligns the words
    # that place the tags instead of the engine's attention (None: the attention does).
    lexicon: Lexicon | None = None
    # Of those sentences, how many the last ``write`` placed by alignment instead (a tag lost,
    # doubled or added by the model): for the bench (bench/tags_run.py).
    fell_back: int = 0

    @classmethod
    def of(cls, document: Document, split: bool = True, language: str | None = None,
           target: str | None = None, inline_tags: Sequence[str] = (),
           lexicon: Lexicon | None = None) -> DocumentWork:
        """``document``'s segments cut into sentences (``split``: by ``language``'s rules;
        else each segment whole); ``target``: the language the file will name, if known;
        ``inline_tags``: the model's inline-tag tokens (``model_inline_tags``), with which
        the tags inside a sentence are sent as tokens; ``lexicon``: the model's
        (``model_lexicon``), which aligns the words that place the tags."""
        work = cls(document, [split_sentences(s.text, language) if split else
                              Passage.whole(s.text) for s in document.segments], target,
                   tuple(inline_tags), lexicon=lexicon)
        work.marked = [None] * len(work.plain)
        if work.inline_tags:
            work.marked = [mark(segment, start, sentence, work.inline_tags)
                           if segment.tags and _has_words(sentence) else None
                           for segment, passage in zip(document.segments, work.passages)
                           for start, sentence in zip(passage.starts(), passage.sentences)]
        return work

    @property
    def plain(self) -> list[str]:
        """The document's sentences as cut, without tag tokens."""
        return [sentence for p in self.passages for sentence in p.sentences]

    @property
    def sentences(self) -> list[str]:
        """The sentences as they are sent to the model (with their tag tokens, if any)."""
        return [m.text if m is not None else s
                for s, m in zip(self.plain, self.marked or [None] * len(self.plain))]

    def groups(self) -> list[tuple[list[int], bool]]:
        """The sentences (their positions) to decode without and with attention: those of
        segments with tags need the alignment that places them (slower). A sentence without
        a letter (a number, a price, a dash, a music note) is in neither: it is kept as it
        is (``unsent``), as a model would only damage it."""
        tagged = [bool(segment.tags) for segment, p in zip(self.document.segments,
                                                           self.passages) for _ in p.sentences]
        words = [_has_words(sentence) for sentence in self.sentences]
        groups = [([i for i, t in enumerate(tagged) if t == want and words[i]], want)
                  for want in (False, True)]
        return [(chosen, want) for chosen, want in groups if chosen]

    @property
    def unsent(self) -> list[int]:
        """The sentences kept as they are, never sent to the model (see ``groups``)."""
        return [i for i, sentence in enumerate(self.sentences) if not _has_words(sentence)]

    @staticmethod
    def options(options: SearchOptions, with_tags: bool, aligned: bool) -> SearchOptions:
        """The search options of a group: attention on for tags, where the engine has it."""
        return replace(options, attention=options.attention or (with_tags and aligned))

    def write(self, results: Sequence[Translation | None]) -> bytes:
        """The file with the translations (of ``sentences``, in order; None for one of the
        ``unsent``, kept as it is) in place."""
        if len(results) != len(self.sentences):
            raise ValueError(f"{len(results)} translations for {len(self.sentences)} "
                             "sentences")
        segments, position = [], 0
        sent = self.sentences
        self.fell_back = 0
        for segment, passage in zip(self.document.segments, self.passages):
            span = slice(position, position + len(passage.sentences))
            position += len(passage.sentences)
            read_back = [self._read(r, s, plain, m) for r, s, plain, m in zip(
                results[span], sent[span], passage.sentences, self.marked[span])]
            segments.append(project(segment, passage, *map(list, zip(*read_back)))
                            if read_back else project(segment, passage, [], []))
        tag = language_tag(self.target)
        if tag is None or not _names_language(self.document):
            return self.document.write(segments)
        return self.document.write(segments, language=tag)

    def _read(self, result: Translation | None, sent: str, plain: str, marked: Marked | None
              ) -> tuple[str, Alignment | None, dict[tuple[str, int], int] | None]:
        """One sentence's translation as ``project`` takes it: its text, its alignment, and
        where its tag tokens landed (None: projected by the alignment instead). A model of
        inline tags has its tag tokens taken out of every translation, but those that the
        sentence holds as text (``literal``): they are its words."""
        if result is None:
            return plain, _itself(plain), None
        own = literal(plain, self.inline_tags)
        inventory = tuple(t for t in self.inline_tags if t not in own)
        if not inventory:
            return result.text, self._alignment(result, sent, plain, result.text), None
        text, placed = read(result.text, inventory, marked)
        self.fell_back += marked is not None and placed is None
        if self.lexicon is not None:
            return text, self._alignment(result, sent, plain, text), placed
        alignment = text_alignment(result, sent)
        if alignment is not None:
            words = clean_words(result.text, inventory)
            alignment = [(i, words[j]) for i, j in alignment
                         if j < len(words) and words[j] is not None]
        return text, alignment, placed

    def _alignment(self, result: Translation, sent: str, plain: str, text: str
                   ) -> Alignment | None:
        """The words of the sentence ``plain`` (sent as ``sent``) aligned to those of its
        translation ``text``: by the lexicon where there is one, else by the engine."""
        if self.lexicon is not None:
            return self.lexicon.align(_WORD.findall(plain), _WORD.findall(text))
        return text_alignment(result, sent)


def model_lexicon(translator: Translator) -> Lexicon | None:
    """The translator's alignment lexicon (tfm.data.lexical_alignment), None where its
    model has none."""
    return getattr(translator, "lexicon", None)


def needs_attention(translator: Translator) -> bool:
    """Whether the sentences with tags are decoded with attention, to align their words: where
    the engine has it and the model no lexicon, which aligns them instead."""
    return translator.supports_attention and model_lexicon(translator) is None


def model_inline_tags(translator: Translator) -> tuple[str, ...]:
    """The inline-tag tokens the model was trained to copy (none for most models)."""
    info = getattr(translator, "info", None)
    return tuple(getattr(info, "inline_tags", None) or ())


def _names_language(document: Document) -> bool:
    """Whether ``document.write`` takes a ``language`` (a Document written before formats
    named their language takes the translations alone)."""
    import inspect

    return "language" in inspect.signature(document.write).parameters


def model_target(translator: Translator) -> str | None:
    """The model's one target language, if it names one (a multilingual model's, where
    all its directions go to one)."""
    info = getattr(translator, "info", None)
    directions = getattr(info, "directions", None) or []
    targets = {d.rsplit("-", 1)[-1] for d in directions}
    if directions:
        return targets.pop() if len(targets) == 1 else None
    return getattr(info, "tgt_lang", None) or None


def _has_words(sentence: str) -> bool:
    return any(ch.isalpha() for ch in sentence)


def _itself(sentence: str) -> Alignment:
    """A sentence kept as it is, aligned word for word to itself."""
    return [(i, i) for i in range(len(_WORD.findall(sentence)))]


def text_alignment(result: Translation, sentence: str) -> Alignment | None:
    """The engine's word alignment of ``sentence``'s translation, as whitespace words of the
    sentence and of the translation (a language tag the model read before the sentence, or a
    token forced before the translation, counts as no word); None without one."""
    if result.alignment is None or not result.source_symbols or not result.target_symbols:
        return None
    source_words = word_ids(result.source_symbols[:-1])[-1] + 1 if \
        len(result.source_symbols) > 1 else 0
    target_words = word_ids(result.target_symbols)[-1] + 1
    shift_s = max(0, source_words - len(_WORD.findall(sentence)))
    shift_t = max(0, target_words - len(_WORD.findall(result.text)))
    return [(i - shift_s, j - shift_t) for i, j in result.alignment
            if i >= shift_s and j >= shift_t]


@dataclass
class _Side:
    """One side of a segment: its text, where each sentence starts and ends, and the
    character span of each whitespace word of each sentence."""

    text: str
    bounds: list[tuple[int, int]]
    words: list[list[tuple[int, int]]]

    @classmethod
    def of(cls, passage: Passage, sentences: Sequence[str]) -> _Side:
        text = passage.join(list(sentences))
        starts = Passage(list(sentences), passage.gaps).starts()
        bounds = [(s, s + len(t)) for s, t in zip(starts, sentences)]
        words = [[(s + m.start(), s + m.end()) for m in _WORD.finditer(t)]
                 for s, t in zip(starts, sentences)]
        return cls(text, bounds, words)

    def inside(self, position: int) -> int | None:
        """The sentence that holds ``position`` strictly (None: it lies in a gap or on a
        sentence's edge)."""
        for k, (start, end) in enumerate(self.bounds):
            if start < position < end:
                return k
        return None


def project(segment: Segment, passage: Passage, translations: Sequence[str],
            alignments: Sequence[Alignment | None],
            copied: Sequence[dict[tuple[str, int], int] | None] | None = None) -> Segment:
    """The translated segment: ``passage`` (the segment's text cut into sentences) with each
    sentence replaced by its translation, and ``segment``'s tags carried across by each
    sentence's alignment (None: by position), then repaired to be well nested. ``copied``:
    for each sentence, where a model of inline tags put the tags it was sent (character
    offsets in its translation; None: none), which win over the alignment's places."""
    source = _Side.of(passage, passage.sentences)
    target = _Side.of(passage, translations)
    if not segment.tags:
        return Segment(target.text)
    links = [_links(a, len(s), len(t)) for a, s, t in
             zip(alignments, source.words, target.words)]
    wanted: dict[tuple[str, int], int] = {}
    for tag in segment.tags:
        if tag.empty:
            wanted["empty", tag.ref] = _point(tag.start, source, target, links)
        else:
            wanted["open", tag.ref], wanted["close", tag.ref] = _span(tag, source, target,
                                                                      links)
    _copied(segment, source, target, copied or [], wanted)
    events = _following_words([(kind, t.ref) for kind, t in segment.pieces()
                               if kind != "text"], wanted)
    wide = {t.ref for t in segment.tags if _kept_wide(t, source, target)}
    placed = _repair(events, wanted, len(target.text), wide)
    text, placed = _spaced(segment, source.text, target.text, events, placed)
    return Segment(text, _tags(segment, placed, events))


def _kept_wide(tag: Tag, source: _Side, target: _Side) -> bool:
    """Whether span ``tag`` is kept at least a character wide by ``_repair``: it covered
    text, and not only sentences translated to nothing (it covers nothing then, exactly)."""
    covered = [t_end > t_start for (start, end), (t_start, t_end) in
               zip(source.bounds, target.bounds) if max(start, tag.start) < min(end, tag.end)]
    return not tag.point and (not covered or any(covered))


def _copied(segment: Segment, source: _Side, target: _Side,
            placed: Sequence[dict[tuple[str, int], int] | None],
            wanted: dict[tuple[str, int], int]) -> None:
    """The places a model of inline tags gave the tags it copied, over the alignment's (a
    span without the punctuation at its edges that the source tag left out, as ``_span``)."""
    for k, by_tokens in enumerate(placed):
        for event, offset in (by_tokens or {}).items():
            wanted[event] = target.bounds[k][0] + offset
    spans = {t.ref: t for t in segment.tags if not t.empty}
    copied = {ref for by_tokens in placed for kind, ref in (by_tokens or {}) if kind == "open"}
    for ref in copied:
        wanted["open", ref], wanted["close", ref] = _trimmed(
            spans[ref], source, target.text, wanted["open", ref], wanted["close", ref])


def _links(alignment: Alignment | None, sources: int, targets: int) -> list[list[int]]:
    """For each source word, the target words aligned to it; without an alignment, the target
    word at the same relative position (indices out of range are dropped)."""
    links: list[list[int]] = [[] for _ in range(sources)]
    if alignment is None:
        for i in range(sources if targets else 0):
            links[i].append(min(targets - 1, i * targets // max(sources, 1)))
        return links
    for i, j in alignment:
        if 0 <= i < sources and 0 <= j < targets:
            links[i].append(j)
    return links


def _gap_position(position: int, source: _Side, target: _Side) -> int:
    """A position outside every sentence's inside: whitespace is copied, so it maps exactly
    (a sentence's edge maps to its translation's)."""
    for (start, end), (t_start, t_end) in zip(source.bounds, target.bounds):
        if position == start:
            return t_start
        if position == end:
            return t_end
    before = [k for k, (_, end) in enumerate(source.bounds) if end <= position]
    if not before:
        return position
    k = before[-1]
    return target.bounds[k][1] + position - source.bounds[k][1]


def _target_words(k: int, words: list[int], target: _Side, links: list[list[int]]
                  ) -> tuple[int, int] | None:
    """The character span of the target words aligned to source words ``words`` of sentence
    ``k``; where none is aligned, the nearest aligned word's (None: no word is)."""
    found = sorted({j for w in words for j in links[k][w]})
    if not found:
        order = sorted(range(len(links[k])), key=lambda w: min(abs(w - v) for v in words))
        found = next((sorted(links[k][w]) for w in order if links[k][w]), [])
    if not found:
        return None
    spans = target.words[k]
    return spans[found[0]][0], spans[found[-1]][1]


def _span(tag: Tag, source: _Side, target: _Side, links: list[list[list[int]]]
          ) -> tuple[int, int]:
    """Where a span tag wants to open and close in the target."""
    starts, ends = [], []
    for k, (start, end) in enumerate(source.bounds):
        low, high = max(start, tag.start), min(end, tag.end)
        if low >= high:
            continue
        if (low, high) == (start, end):  # the whole sentence: its whole translation
            starts.append(target.bounds[k][0])
            ends.append(target.bounds[k][1])
            continue
        words = [w for w, (a, b) in enumerate(source.words[k]) if a < high and low < b]
        span = _target_words(k, words, target, links) if words else None
        if span is not None:
            starts.append(span[0])
            ends.append(span[1])
    if starts and ends:  # punctuation the tag left out of its edge words, left out again
        starts[0], ends[-1] = _trimmed(tag, source, target.text, min(starts), max(ends))
    if source.inside(tag.start) is None and not (starts and _within(tag, source, "start")):
        starts = [_gap_position(tag.start, source, target)]
    if source.inside(tag.end) is None and not (ends and _within(tag, source, "end")):
        ends = [_gap_position(tag.end, source, target)]
    if not starts or not ends:  # only whitespace or unaligned words: a point, widened later
        point = _point(tag.start, source, target, links)
        return min(starts, default=point), max(ends, default=point)
    return min(starts), max(ends)


def _within(tag: Tag, source: _Side, edge: str) -> bool:
    """Whether span ``tag``'s start (``edge`` "start") or end lies on the same edge of a
    sentence that holds its other end strictly: the tag covers that sentence's first (or
    last) words only, which the alignment places, wherever the translation puts them
    ("<b>Yesterday</b> I saw it." -> "Ich sah es <b>gestern</b>."), not the translation's
    first (or last) words."""
    for start, end in source.bounds:
        if edge == "start" and tag.start == start and start < tag.end < end:
            return True
        if edge == "end" and tag.end == end and start < tag.start < end:
            return True
    return False


def _trimmed(tag: Tag, source: _Side, text: str, start: int, end: int) -> tuple[int, int]:
    """A target span without the punctuation at its edges where the source tag's text has
    none there ("<b>garden</b>." -> "<b>Garten</b>.", not "<b>Garten.</b>")."""
    covered = source.text[tag.start:tag.end].strip()
    if covered and not _punctuation(covered[-1]):
        while end - 1 > start and _punctuation(text[end - 1]):
            end -= 1
    if covered and not _punctuation(covered[0]):
        while start + 1 < end and _punctuation(text[start]):
            start += 1
    return start, end


def _punctuation(text: str) -> bool:
    return bool(text) and all(not c.isalnum() and not c.isspace() for c in text)


def _point(position: int, source: _Side, target: _Side, links: list[list[list[int]]]) -> int:
    """Where an empty tag at ``position`` goes: after the target of the word it follows, or
    before that of the word it precedes (after the previous one where that is punctuation);
    inside a word (glued to it in the source), at the same edge of that word's target, before
    or after its punctuation as in the source, never inside its letters; on a sentence's edge
    or between sentences, exactly. Its spaces are made as the source's later (``_spaced``)."""
    k = source.inside(position)
    if k is None:
        return _gap_position(position, source, target)
    words = source.words[k]
    holder = [w for w, (start, end) in enumerate(words) if start < position < end]
    if holder:
        return _inside_word(position, words[holder[0]], source,
                            _target_words(k, holder, target, links), target)
    before = [w for w, (_, end) in enumerate(words) if end <= position]
    after = [w for w, (start, _) in enumerate(words) if start >= position]
    punctuation = after and _punctuation(source.text[slice(*words[after[0]])])
    if before and (words[before[-1]][1] == position or not after or punctuation):
        span = _target_words(k, [before[-1]], target, links)
        if span and punctuation:  # "press <kbd/>." -> "drücken <kbd/>."
            return _before_punctuation(span, target.text)
        return span[1] if span else target.bounds[k][1]
    span = _target_words(k, [after[0]], target, links)
    return span[0] if span else target.bounds[k][0]


def _inside_word(position: int, word: tuple[int, int], source: _Side,
                 span: tuple[int, int] | None, target: _Side) -> int:
    """An empty tag inside a source word, put on the matching edge of its target ``span``:
    before the target's closing punctuation where the source tag stood before the word's
    punctuation ("Hello<x/>," -> "Hallo<x/>,"), after its opening punctuation where it stood
    after the word's ("(<x/>see" -> "(<x/>siehe"), else after the whole target word."""
    if span is None:
        return target.bounds[-1][1] if target.bounds else 0
    start, end = span
    if _punctuation(source.text[position:word[1]]):
        return _before_punctuation(span, target.text)
    if _punctuation(source.text[word[0]:position]):
        while start < end and _punctuation(target.text[start]):
            start += 1
        return start if start < end else span[0]
    return end


def _before_punctuation(span: tuple[int, int], text: str) -> int:
    """The end of ``span`` before its closing punctuation (its end, if it is all punctuation)."""
    start, end = span
    while end > start and _punctuation(text[end - 1]):
        end -= 1
    return end if end > start else span[1]


def _spaced(segment: Segment, source: str, text: str, events: list[tuple[str, int]],
            placed: dict[tuple[str, int], int]) -> tuple[str, dict[tuple[str, int], int]]:
    """The target text and edges with a space each side of every empty tag where the source
    had one (inline code or a placeholder used as a word: "Type <code/> to" never "Type
    <code/>to"): a space copied twice beside it is shared out, else one is added."""
    wanted = {t.ref: (t.start > 0 and source[t.start - 1].isspace(),
                      t.start < len(source) and source[t.start].isspace())
              for t in segment.tags if t.empty}
    pieces: list[str] = []  # the text between consecutive edges: one more than the edges
    position = 0
    for event in events:
        pieces.append(text[position:placed[event]])
        position = placed[event]
    pieces.append(text[position:])
    for n, (kind, ref) in enumerate(events):
        if kind == "empty":
            _space_out(pieces, n, *wanted[ref])
    spaced, position = dict(placed), 0
    for n, event in enumerate(events):
        position += len(pieces[n])
        spaced[event] = position
    return "".join(pieces), spaced


def _space_out(pieces: list[str], n: int, before: bool, after: bool) -> None:
    """Spaces around the empty tag between ``pieces[n]`` and ``pieces[n + 1]``: one before it
    if ``before`` (moved from after it where the source had none there: "in <x/> ." -> "in
    <x/>."), one after it if ``after`` (likewise), none added before closing punctuation."""
    left, right = _edge(pieces[:n + 1], -1), _edge(pieces[n + 1:], 0)
    if before and left is not None and not left.isspace():
        if pieces[n + 1][:1].isspace() and (not after or _spaces(pieces[n + 1], 0)):
            pieces[n], pieces[n + 1] = pieces[n] + pieces[n + 1][0], pieces[n + 1][1:]
        else:
            pieces[n] += " "
    left, right = _edge(pieces[:n + 1], -1), _edge(pieces[n + 1:], 0)
    if after and right is not None and not right.isspace() and right not in _CLOSING:
        if pieces[n][-1:].isspace() and (not before or _spaces(pieces[n], -1)):
            pieces[n], pieces[n + 1] = pieces[n][:-1], pieces[n][-1] + pieces[n + 1]
        else:
            pieces[n + 1] = " " + pieces[n + 1]


def _edge(pieces: list[str], side: int) -> str | None:
    """The last (``side`` -1) or first (0) character of the pieces' text, if any."""
    found = [p for p in pieces if p]
    return found[side][side] if found else None


def _spaces(piece: str, side: int) -> bool:
    """Whether ``piece`` has two whitespace characters at its end (-1) or start (0)."""
    edge = piece[-2:] if side == -1 else piece[:2]
    return len(edge) == 2 and edge.isspace()


def _following_words(events: list[tuple[str, int]], wanted: dict[tuple[str, int], int]
                     ) -> list[tuple[str, int]]:
    """The tags' events, each span keeping what it holds, with a span moved before an earlier
    sibling span (under the same holder) where all of it wants to lie before that sibling
    opens: where the translation swaps two tags' words ("<b>Two men</b> dance, with <i>a
    crowd</i> looking on" -> "<i>Eine Menge</i> sieht <b>zwei Männern</b> zu"), the tags swap
    with them instead of one being squeezed behind the other. Spans that overlap where they
    want to be, and empty tags (which stay between the same siblings), keep the source's
    order: on tfm's models, moving those follows alignment noise more often than the words
    (docs/BENCHMARKS.md, "Inline tags"). No recursion (nesting may be deep)."""
    Event = tuple[str, int]

    def ordered(blocks: list[list[Event]]) -> list[list[Event]]:
        out: list[list[Event]] = []
        for block in blocks:
            k = len(out)
            while k and block[0][0] == "open" == out[k - 1][0][0] and \
                    wanted[block[-1]] < wanted[out[k - 1][0]]:
                k -= 1
            out.insert(k, block)
        return out

    openings: list[Event] = []
    levels: list[list[list[Event]]] = [[]]  # the top's blocks, then each open span's
    for event in events:
        if event[0] == "open":
            openings.append(event)
            levels.append([])
        elif event[0] == "empty":
            levels[-1].append([event])
        else:
            inside = ordered(levels.pop())
            levels[-1].append([openings.pop(), *(e for block in inside for e in block), event])
    return [e for block in ordered(levels[0]) for e in block]


def _repair(events: list[tuple[str, int]], wanted: dict[tuple[str, int], int], length: int,
            wide: set[int]) -> dict[tuple[str, int], int]:
    """The tags' edges, in the order of ``events`` (the source's nesting, siblings where they
    want to be), made non-decreasing (so that they nest as in the source) within the text;
    a span whose ref is in ``wide`` (see ``_kept_wide``) at least one character wide where the
    text has room."""
    placed = dict(wanted)
    previous = 0
    for kind, ref in events:  # forward: no edge before the one that came before it
        position = max(placed[kind, ref], previous)
        if kind == "close" and ref in wide:
            position = max(position, placed["open", ref] + 1)
        placed[kind, ref] = previous = min(position, length)
    following = length
    for kind, ref in reversed(events):  # backward: none past the text, nor past the next
        position = min(placed[kind, ref], following)
        if kind == "open" and ref in wide:
            position = max(0, min(position, placed["close", ref] - 1))
        placed[kind, ref] = following = position
    return placed


def _tags(segment: Segment, placed: dict[tuple[str, int], int], events: list[tuple[str, int]]
          ) -> tuple[Tag, ...]:
    """The segment's tags at their placed edges, in the order ``events`` opens them: a span
    stays a span (paired) where the translation left it no text, and a tag of no width on
    the edge of the span that held it in the source names that span as its parent, so that
    the source's nesting holds however many edges fall on one offset."""
    holder = holders(segment)
    by_ref = {tag.ref: tag for tag in segment.tags}
    tags = []
    for tag in (by_ref[ref] for kind, ref in events if kind != "close"):
        start = placed["empty" if tag.empty else "open", tag.ref]
        end = start if tag.empty else placed["close", tag.ref]
        parent = holder[tag.ref]
        edge = start == end and parent is not None and start in (
            placed["open", parent], placed["close", parent])
        tags.append(Tag(start, end, tag.ref, parent if edge else None,
                        paired=start == end and not tag.empty))
    return tuple(tags)
