"""The special tokens every tfm vocabulary starts with, and their ids: the one source of both.

The tokenizer reserves them (tfm.data.tokenizer), the model masks padding by PAD_ID, and search
starts from BOS_ID and ends at EOS_ID.
"""

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = [PAD, UNK, BOS, EOS]
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(4)
