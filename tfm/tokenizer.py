"""Byte-level BPE with Hugging Face tokenizers: train, save, load, encode, decode.

Byte-level pre-tokenization means every string, in any script, encodes without unknown tokens,
and decoding gives back the exact (normalised) text, which is what BLEU is computed on.
The tokenizer file (the library's own JSON format) is the only source of the vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tfm.errors import ModelError

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = [PAD, UNK, BOS, EOS]
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(4)


def new_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE tokenizer with NFC normalisation."""
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2,
    length: int | None = None,
) -> Tokenizer:
    """Learn BPE merges from a stream of sentences (never held in memory all at once)."""
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_batched(texts, 1000), trainer=trainer, length=length)
    return tok


def _batched(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def save_tokenizer(tok: Tokenizer, path: Path) -> None:
    from tfm.atomic import atomic_write_bytes

    atomic_write_bytes(path, tok.to_str(pretty=True).encode())


def load_tokenizer(path: Path) -> Tokenizer:
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such tokenizer file (train one with "
                         "`tfm train-tokenizer` and give it with --tokenizer)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # the library raises a bare Exception on malformed JSON
        raise ModelError(f"{path}: not a tokenizer file ({_first_line(e)})") from e
    for i, token in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(token) != i:
            raise ModelError(
                f"{path}: special token {token} must have id {i}; "
                "train the tokenizer with `tfm train-tokenizer`"
            )
    return tok


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def encode_batch(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids without special tokens (parallel in Rust)."""
    return [enc.ids for enc in tok.encode_batch(texts, add_special_tokens=False)]


def decode(tok: Tokenizer, ids: Iterable[int]) -> str:
    """Ids -> text; special tokens are dropped."""
    return tok.decode([i for i in ids if i >= len(SPECIAL_TOKENS)]).strip()


def decode_batch(tok: Tokenizer, batch: list[list[int]]) -> list[str]:
    n = len(SPECIAL_TOKENS)
    return [s.strip() for s in tok.decode_batch([[i for i in ids if i >= n] for ids in batch])]
