"""User-facing errors.

Anything the user can fix (a missing file, misaligned corpora, a bad option, a model directory
that is not one) is raised as a :class:`TfmError`. The CLI prints its message as one line on
stderr and exits with the error's code; the traceback is shown only with ``--debug``.
Library code raises these; it never calls ``sys.exit`` itself.
"""

from __future__ import annotations


class TfmError(Exception):
    """An error the user can fix. The message says what is wrong and what to do."""

    exit_code = 1


class UsageError(TfmError):
    """Options that contradict each other or are out of range."""

    exit_code = 2


class OptionError(UsageError):
    """A bad value of one option, named by its field: the command line words it as its flag
    (``--n-best ...``, the message), the server as its request's field (``n_best ...``,
    ``for_request``), so that each option is checked in one place for both."""

    def __init__(self, field: str, problem: str) -> None:
        self.field, self.problem = field, problem
        super().__init__(f"--{field.replace('_', '-')} {problem}")

    def for_request(self) -> str:
        return f"{self.field} {self.problem}"


class DataError(TfmError):
    """A corpus or input file that is missing, unreadable, misaligned or malformed."""

    exit_code = 3


class ModelError(TfmError):
    """A model directory that is missing, incomplete, foreign or of an unknown version."""

    exit_code = 4


class ResourceError(TfmError):
    """Out of memory or out of disk."""

    exit_code = 5


class WriteError(ResourceError):
    """A file that could not be written: a full disk or quota, a read-only file system, no
    permission. What was there before is intact; the message names the file."""


# Exit code for a run stopped by Ctrl-C / SIGTERM (the shell convention 128 + SIGINT).
EXIT_INTERRUPTED = 130
# Out of memory that surfaced as a bare MemoryError (ResourceError's code).
EXIT_OUT_OF_MEMORY = ResourceError.exit_code
# A bug in tfm (the BSD sysexits EX_SOFTWARE).
EXIT_INTERNAL = 70
