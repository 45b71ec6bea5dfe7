"""Data: corpora in any shape (corpus), text normalisation (text), BPE vocabularies (tokenizer),
``tfm prepare``'s dataset writer (prepare) and reader (dataset), and token-sized batches
(batching)."""
