"""Decoding: greedy and beam search over the model (search), the Translator interface and its
engines (translator), word alignments (alignment) and corpus scores (scoring)."""
