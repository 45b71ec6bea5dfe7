"""The C heap keeps freed memory for the next large tensor (tfm.allocator)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
@pytest.mark.parametrize("opt_out, applied", [("", "True"), ("1", "False")])
def test_malloc_is_tuned_on_glibc_unless_opted_out(opt_out: str, applied: str) -> None:
    # In a child process: the setting is process-wide and must not leak into the test run.
    code = "from tfm.allocator import keep_freed_memory; print(keep_freed_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"TFM_DEFAULT_MALLOC": opt_out, "PATH": ""}, check=True)
    assert out.stdout.strip() == applied
