"""The README and docs/*.md link only to files that exist and to headings that exist: a section
moved or renamed breaks no link unnoticed."""

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+(\S+)", re.M)  # [name]: target
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str) -> str:
    """The text outside fenced code blocks, where a bracket is code, not a link."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, markup and punctuation dropped, spaces as
    hyphens (letters, digits, '_' and '-' kept)."""
    text = re.sub(r"[`*]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_the_slug_of_a_heading_is_githubs() -> None:
    assert slug("Choosing among the beam's hypotheses (`--mbr`)") == \
        "choosing-among-the-beams-hypotheses---mbr"
    assert slug("English→French") == "englishfrench"


def test_every_relative_link_and_anchor_in_the_readme_and_docs_resolves() -> None:
    cache: dict[Path, set[str]] = {}
    broken = []
    for page in PAGES:
        text = prose(page.read_text(encoding="utf-8"))
        for target in LINK.findall(text) + REFERENCE.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md":
                if file not in cache:
                    cache[file] = anchors(file)
                if anchor not in cache[file]:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_stays_a_front_door_of_300_lines_at_most() -> None:
    """The details belong in docs/: a README that grows past a screenful of sections is one
    a newcomer no longer reads through."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move details to docs/"
