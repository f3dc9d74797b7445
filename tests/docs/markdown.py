"""Reading the documentation's Markdown as the tests of the site need it."""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
DOCS = REPOSITORY / "docs"


def headings(markdown: str) -> list[str]:
    """The ATX headings' text, outside fenced code."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            found.append(match.group(1).strip())
    return found


def sections(markdown: str) -> list[str]:
    """What a citation may name on a page: its headings, and the bold words that open a
    paragraph or a list item (``**Model parallel** (...)``), without their closing stop."""
    found, fenced = headings(markdown), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(?:- )?\*\*(.+?)\*\*", line)):
            found.append(match.group(1).strip().rstrip(".:"))
    return found


def pages(folder: Path = DOCS) -> list[Path]:
    """The site's Markdown pages under ``folder``."""
    return sorted(p for p in folder.rglob("*.md") if "_build" not in p.parts)
