"""tfm: train and use Transformer translation models from the command line."""

__version__ = "0.1.0"
