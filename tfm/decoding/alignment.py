"""Word alignments from cross-attention.

Byte-level BPE marks a token that begins after a space with a leading 'Ġ', so tokens group
into the whitespace-separated words of the detokenised text. Each target word is aligned to
the source word that received the most attention (summed over the tokens of both words), as
fairseq's ``--print-alignment`` does for subword tokens.
"""

from __future__ import annotations

SPACE = "Ġ"  # byte-level BPE's symbol for a space


def word_ids(symbols: list[str]) -> list[int]:
    """Word index of each token symbol: a symbol starting with a space starts a new word."""
    ids, word = [], -1
    for i, symbol in enumerate(symbols):
        if i == 0 or symbol.startswith(SPACE):
            word += 1
        ids.append(word)
    return ids


def align_words(attention: list[list[float]], src_symbols: list[str],
                tgt_symbols: list[str]) -> list[tuple[int, int]]:
    """(source word, target word) pairs, one per target word.

    attention: one row per target token, one column per source token (``src_symbols``, the
    end-of-sentence token excluded; extra columns are ignored).
    """
    if not tgt_symbols or not src_symbols:
        return []
    src_words, tgt_words = word_ids(src_symbols), word_ids(tgt_symbols)
    totals = [[0.0] * (src_words[-1] + 1) for _ in range(tgt_words[-1] + 1)]
    for t, row in enumerate(attention[: len(tgt_symbols)]):
        for s, weight in enumerate(row[: len(src_symbols)]):
            totals[tgt_words[t]][src_words[s]] += weight
    return [(max(range(len(row)), key=row.__getitem__), j) for j, row in enumerate(totals)]


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """Alignments in the usual 'i-j' text form (source-target, 0-based)."""
    return " ".join(f"{i}-{j}" for i, j in pairs)
