"""The ``tfm`` command line: options -> one library call -> rich output; no ML logic here.

tfm.cli.app holds the Typer app and the entry point; each module beside it registers the
commands of one stage of the pipeline.
"""

# Each module registers its commands; --help lists them in this order, the pipeline's.
from tfm.cli import data, training, distill, shortlist, decoding, backtranslation  # noqa: F401, I001
from tfm.cli import export, importing, serve  # noqa: F401, I001
from tfm.cli.app import app, run

__all__ = ["app", "run"]
