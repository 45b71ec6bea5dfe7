"""Full collections skip what was imported, and still collect what the work leaves (tfm.collector).

Each check runs in a child process: the collector's setting is process-wide and must not leak
into the test run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# A child that imports a module of many objects between full collections, then makes
# cyclic garbage with no module imported: the frozen count after each step, and whether the
# cycle was collected.
CHILD = """
import gc, json, sys, types, weakref
from tfm.collector import keep_imports_out_of_collections
applied = keep_imports_out_of_collections()
keep_imports_out_of_collections()  # a second call adds no second callback
gc.collect()
before = gc.get_freeze_count()
module = types.ModuleType("imported_here")
module.table = [[i] for i in range(50000)]
sys.modules["imported_here"] = module
gc.collect()
after_import = gc.get_freeze_count()

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a
alive = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"applied": applied, "before": before, "after_import": after_import,
                  "after_work": gc.get_freeze_count(), "cycle_collected": alive() is None,
                  "callbacks": sum(getattr(c, "freezes_after_imports", False)
                                   for c in gc.callbacks)}))
"""


def child(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         env={"PATH": "", **env}, check=True)
    return json.loads(out.stdout)


def test_a_full_collection_after_imports_freezes_them_and_later_work_is_still_collected():
    seen = child({})
    assert seen["applied"] and seen["callbacks"] == 1
    # The module's 50,000 lists (and what was imported before) left the collections' walk.
    assert seen["after_import"] >= seen["before"] + 50000
    # No module came since: the collection of the work's garbage froze nothing more, and
    # the cycle it left was collected.
    assert seen["after_work"] == seen["after_import"]
    assert seen["cycle_collected"]


def test_tfm_default_gc_opts_out():
    seen = child({"TFM_DEFAULT_GC": "1"})
    assert not seen["applied"] and seen["callbacks"] == 0
    assert seen["after_import"] == seen["after_work"] == 0


@pytest.mark.parametrize("opt_out, installed", [("", 1), ("1", 0)])
def test_the_tfm_command_sets_it_before_its_work(opt_out: str, installed: int) -> None:
    code = ("import gc, sys\nfrom tfm.cli import run\nsys.argv = ['tfm', '--version']\n"
            "try:\n    run()\nexcept SystemExit:\n    pass\n"
            "print(sum(getattr(c, 'freezes_after_imports', False) for c in gc.callbacks))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PATH": "", "TFM_DEFAULT_GC": opt_out}, check=True)
    assert out.stdout.strip().splitlines()[-1] == str(installed)
