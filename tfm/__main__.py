"""``python -m tfm``: the same as the ``tfm`` command."""

from tfm.cli import run

if __name__ == "__main__":
    run()
