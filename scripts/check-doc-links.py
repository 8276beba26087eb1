"""Check the relative links in README.md and docs/*.md: each file exists, and each #anchor names a heading there.

Anchors follow GitHub's slugs: the heading's text in lower case, punctuation dropped, spaces made hyphens, a
repeated heading's slug followed by -1, -2, ...; an explicit <a id="..."></a> counts too. Links in code are
skipped. Prints one line a broken link and exits 1 if there is any.

    python scripts/check-doc-links.py [FILE.md ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with inline code blanked out."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield number, re.sub(r"`[^`]*`", lambda m: "`" + " " * (len(m.group()) - 2) + "`", line)


def slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    text = path.read_text(encoding="utf-8")
    fence = None
    for line in text.splitlines():
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            fence = None if stripped.startswith(fence) else fence
            continue
        found.update(EXPLICIT.findall(line))
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def check(path: Path) -> list[str]:
    broken = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / unquote(file_part)).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
                broken.append(f"{where}: no such anchor in {dest.relative_to(ROOT)}")
    return broken


def main() -> int:
    files = [Path(a).resolve() for a in sys.argv[1:]] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [line for path in files for line in check(path)]
    print("\n".join(broken) if broken else f"{len(files)} files, every relative link resolves")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
