"""Print the code block of README.md that follows the marker `<!-- ci: NAME -->`: a ```bash
block (the quick start, the tests) or a ```python block (the Python section).

CI runs the README's code exactly as written, so a missing install step, or a Python example
that no longer matches the library, fails CI.
"""

import re
import sys
from pathlib import Path

name = sys.argv[1]
text = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text(encoding="utf-8")
match = re.search(rf"<!-- ci: {re.escape(name)} -->\s*```(?:bash|python)\n(.*?)```", text, re.S)
if not match:
    sys.exit(f"README.md has no ```bash or ```python block marked <!-- ci: {name} -->")
print(match.group(1))
