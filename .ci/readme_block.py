"""Print the shell block of README.md that follows the marker `<!-- ci: NAME -->`.

CI runs the README's commands exactly as written, so a missing install step fails CI.
"""

import re
import sys
from pathlib import Path

name = sys.argv[1]
text = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text(encoding="utf-8")
match = re.search(rf"<!-- ci: {re.escape(name)} -->\s*```bash\n(.*?)```", text, re.S)
if not match:
    sys.exit(f"README.md has no block marked <!-- ci: {name} -->")
print(match.group(1))
