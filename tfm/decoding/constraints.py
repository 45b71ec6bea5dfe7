"""Terminology constraints: target phrases a translation must contain, and a prefix it must
start with (docs/CONSTRAINTS.md).

A phrase is met where its tokens appear in the output as the target tokenizer writes the
phrase inside a sentence. Byte-level BPE may write a word differently after a space and at the
start of a text; both forms count, the second only at the start of the translation (it is
matched after a virtual BOS token, which search never writes anywhere else). tfm's tokenizers
put a space before every text (``add_prefix_space``), so for them the two forms are one.
Phrases are matched as token sequences, as in Sockeye and fairseq: a phrase is met inside a
longer word where the tokenizer splits that word at the phrase's end.

Each sentence's phrases are compiled into an Aho-Corasick automaton over their token forms.
A hypothesis's constraint state is a pair of ints, (automaton node, bitmask of phrases met):
the node is the longest end of the output that begins some form, so the state says which
phrases are met and how far the output is into the next one. Search (tfm.decoding.search)
advances the states token by token and asks them for the tokens that make progress and for
their bank, the number of constraint tokens met (Post & Vilar's dynamic beam allocation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from tokenizers import Tokenizer

from tfm.data.text import normalize_text
from tfm.errors import UsageError
from tfm.special_tokens import BOS_ID, SPECIAL_TOKENS

# Most phrases one sentence may ask for (its own and a glossary's together). Dynamic beam
# allocation splits the beam among constraint tokens met; far more phrases than the beam is
# wide leave each bank almost no room.
MAX_CONSTRAINTS = 16

State = tuple[int, int]  # (automaton node, bitmask of the phrases met)


class ConstraintError(UsageError):
    """A constraint or prefix that cannot be used. ``field`` names it as a request spells it
    (``constraints[1]``, ``prefix``), so that the CLI and the server can say where it is."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.problem = message
        self.sentence: int | None = None  # its sentence's position in a call, once known


@dataclass
class ConstraintSpec:
    """What a user asks of one sentence's translation, as text: ``phrases`` it must contain,
    the ``prefix`` it must start with, and the glossary hits found in its source as (source
    term, target term) pairs (tfm.decoding.glossary), whose target terms are phrases too."""

    phrases: list[str] = field(default_factory=list)
    prefix: str | None = None
    glossary_hits: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.phrases or (self.prefix and self.prefix.strip()) or self.glossary_hits)


@dataclass(frozen=True)
class Phrase:
    """A phrase as search matches it."""

    text: str  # as given
    forms: tuple[tuple[int, ...], ...]  # token sequences that count; BOS first: at the start
    source_term: str | None = None  # the glossary's source term it translates, if any

    @property
    def length(self) -> int:
        """Tokens of its form inside a sentence: its weight in the banks."""
        return len(self.forms[0])


@dataclass
class TargetConstraints:
    """One sentence's constraints as search uses them: phrases and a prefix of token ids."""

    phrases: list[Phrase] = field(default_factory=list)
    prefix: list[int] = field(default_factory=list)

    @cached_property
    def automaton(self) -> Automaton:
        return Automaton(self.phrases)

    def met(self, tokens: Sequence[int]) -> list[bool]:
        """Whether ``tokens`` (an output, without BOS/EOS) contains each phrase."""
        automaton = self.automaton
        state = automaton.start
        for token in tokens:
            state = automaton.advance(state, token)
        return automaton.met(state)


def compile_constraints(tok: Tokenizer, spec: ConstraintSpec, max_length: int
                        ) -> TargetConstraints:
    """``spec`` in tokens of the target tokenizer ``tok``, checked: each phrase non-empty, made
    of tokens the model can write, at most ``max_length`` long (the sentence's length limit,
    EOS not counted), at most MAX_CONSTRAINTS in all; the prefix at most ``max_length`` long.
    A phrase given twice (or given and found by the glossary) counts once. Raises
    ConstraintError naming the field."""
    wanted: list[tuple[str, str, str | None]] = []  # (field, phrase, source term)
    seen: set[str] = set()
    for i, text in enumerate(spec.phrases):
        if not isinstance(text, str):
            raise ConstraintError(f"constraints[{i}]", "a phrase must be a string")
        if normalize_text(text) not in seen:
            seen.add(normalize_text(text))
            wanted.append((f"constraints[{i}]", text, None))
    for source, target in spec.glossary_hits:
        if normalize_text(target) not in seen:
            seen.add(normalize_text(target))
            wanted.append((f"glossary term {source!r}", target, source))
    if len(wanted) > MAX_CONSTRAINTS:
        raise ConstraintError("constraints", f"{len(wanted)} phrases (glossary terms "
                              f"included) are more than the {MAX_CONSTRAINTS} a sentence "
                              "may have: give fewer")
    phrases = [Phrase(text, _forms(tok, name, text, max_length), source)
               for name, text, source in wanted]
    prefix: list[int] = []
    if spec.prefix is not None:
        if not isinstance(spec.prefix, str):
            raise ConstraintError("prefix", "the prefix must be a string")
        if normalize_text(spec.prefix):
            prefix = _tokens(tok, "prefix", normalize_text(spec.prefix))
            if len(prefix) > max_length:
                raise ConstraintError("prefix", f"{len(prefix)} tokens, more than the "
                                      f"{max_length} this sentence's translation may have "
                                      "(raise --max-len-b, or max_length)")
    return TargetConstraints(phrases, prefix)


def _forms(tok: Tokenizer, name: str, text: str, max_length: int) -> tuple[tuple[int, ...], ...]:
    """The token forms of a phrase that count (see the module's docstring): inside a sentence
    (after a space), then, if it differs, at the start, marked by a leading BOS."""
    normal = normalize_text(text)
    if not normal:
        raise ConstraintError(name, "the phrase is empty")
    start = _tokens(tok, name, normal)
    # How the tokenizer writes the phrase after a word and a space: what follows the word's
    # own tokens (if they are unchanged; else the phrase is written the same everywhere).
    anchor = tok.encode("x", add_special_tokens=False).ids
    after = tok.encode("x " + normal, add_special_tokens=False).ids
    inside = after[len(anchor):] if after[: len(anchor)] == anchor and len(after) > len(
        anchor) else start
    if min(len(inside), len(start)) > max_length:
        raise ConstraintError(name, f"the phrase is {len(inside)} tokens, more than the "
                              f"{max_length} this sentence's translation may have (raise "
                              "--max-len-b, or max_length)")
    if inside == start:
        return (tuple(inside),)
    return (tuple(inside), (BOS_ID, *start))


def _tokens(tok: Tokenizer, name: str, normal: str) -> list[int]:
    ids = tok.encode(normal, add_special_tokens=False).ids
    if not ids or any(i < len(SPECIAL_TOKENS) for i in ids):
        raise ConstraintError(name, f"{normal!r} does not tokenize into tokens the model can "
                              "write")
    return ids


class Automaton:
    """Aho-Corasick over the token forms of one sentence's phrases: advances a hypothesis's
    constraint state token by token (transitions computed once, then looked up)."""

    def __init__(self, phrases: Sequence[Phrase]) -> None:
        self.lengths = [p.length for p in phrases]
        self.total = sum(self.lengths)  # the top bank: every phrase met
        self.full = (1 << len(phrases)) - 1
        # The trie: children, tokens from the root (BOS not counted), and for each node the
        # phrases with a form through it and those whose form ends there.
        self.children: list[dict[int, int]] = [{}]
        self.weight = [0]
        self.through = [0]
        ends = [0]
        for c, phrase in enumerate(phrases):
            for form in phrase.forms:
                node = 0
                for token in form:
                    child = self.children[node].get(token)
                    if child is None:
                        child = len(self.children)
                        self.children[node][token] = child
                        self.children.append({})
                        self.weight.append(self.weight[node] + (token != BOS_ID))
                        self.through.append(0)
                        ends.append(0)
                    node = child
                    self.through[node] |= 1 << c
                ends[node] |= 1 << c
        # Failure links, breadth first; ``out``: the phrases met on reaching a node (those
        # ending there or at any node its failure chain passes).
        self.fail = [0] * len(self.children)
        self.out = list(ends)
        queue = list(self.children[0].values())
        for node in queue:
            for token, child in self.children[node].items():
                f = self.fail[node]
                while f and token not in self.children[f]:
                    f = self.fail[f]
                link = self.children[f].get(token, 0)
                self.fail[child] = link if link != child else 0
                self.out[child] |= self.out[self.fail[child]]
                queue.append(child)
        self.alphabet = {t for kids in self.children for t in kids}
        self._goto: dict[tuple[int, int], int] = {}
        self._bank: dict[State, int] = {}
        self._next: dict[State, tuple[int, ...]] = {}
        self.start: State = self.advance((0, 0), BOS_ID)  # the output begins after BOS

    def advance(self, state: State, token: int) -> State:
        """The state after ``token``."""
        if token not in self.alphabet:
            return (0, state[1])
        node = self._goto.get((state[0], token))
        if node is None:
            n = state[0]
            while n and token not in self.children[n]:
                n = self.fail[n]
            node = self.children[n].get(token, 0)
            self._goto[(state[0], token)] = node
        return (node, state[1] | self.out[node])

    def met(self, state: State) -> list[bool]:
        return [bool(state[1] >> c & 1) for c in range(len(self.lengths))]

    def all_met(self, state: State) -> bool:
        return state[1] == self.full

    def bank(self, state: State) -> int:
        """Constraint tokens met: those of the phrases met and of the output's progress into
        one not met yet (below the top bank, which only hypotheses that met all reach)."""
        bank = self._bank.get(state)
        if bank is None:
            node, met = state
            if met == self.full:
                bank = self.total
            else:
                bank = sum(n for c, n in enumerate(self.lengths) if met >> c & 1)
                while node and not self.through[node] & ~met:
                    node = self.fail[node]
                bank = min(bank + self.weight[node], self.total - 1)
            self._bank[state] = bank
        return bank

    def next_tokens(self, state: State) -> tuple[int, ...]:
        """The tokens that take the output further into a phrase not met yet."""
        tokens = self._next.get(state)
        if tokens is None:
            node, met = state
            found: set[int] = set()
            while True:
                for token, child in self.children[node].items():
                    if self.through[child] & ~met and token != BOS_ID:
                        found.add(token)
                if not node:
                    break
                node = self.fail[node]
            tokens = self._next[state] = tuple(sorted(found))
        return tokens
