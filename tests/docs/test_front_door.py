"""The README is a front door: short, its two commands as the project's rules have them, its
links alive; everything it used to hold is a heading of the documentation site."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.markdown import headings

REPOSITORY = Path(__file__).resolve().parents[2]
README = REPOSITORY / "README.md"

# The README's top-level sections before the documentation site took them over.
FORMER_SECTIONS = (
    "What works today",
    "Command line",
    "Distributed training",
    "Planning: predict, then run",
    "Faults and stragglers",
    "GPUs",
    "On a shared machine",
    "Notebooks",
    "JupyterLab",
    "Results on this machine",
    "Performance",
)

# CI (.ci/run, .ci/setup_without_root) runs these as the README gives them.
MAIN_COMMAND = "./setup.sh && .venv/bin/dtrain run --json"
TEST_COMMAND = "./setup.sh && .venv/bin/python -m pytest -q"

LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", ""))
    return text.replace(" ", "-")


def test_the_readme_is_short_and_keeps_its_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    assert blocks[:2] == [MAIN_COMMAND, TEST_COMMAND]


def test_every_former_readme_section_is_a_heading_of_the_site() -> None:
    pages = [p for p in (REPOSITORY / "docs").rglob("*.md") if "_build" not in p.parts]
    titles = {title for page in pages for title in headings(page.read_text())}
    assert [section for section in FORMER_SECTIONS if section not in titles] == []


def test_the_readme_links_each_former_section_and_every_link_leads_somewhere() -> None:
    targets = LINK.findall(README.read_text())
    linked = {(REPOSITORY / target.partition("#")[0]).resolve() for target in targets}
    pages = [p for p in (REPOSITORY / "docs").rglob("*.md") if "_build" not in p.parts]
    unlinked = [
        section
        for section in FORMER_SECTIONS
        if not any(section in headings(page.read_text()) for page in pages if page in linked)
    ]
    assert unlinked == []
    assert [target for target in targets if not leads_somewhere(target)] == []


def leads_somewhere(target: str) -> bool:
    """A web address (not checked: no network here), or a file of the checkout and, with an
    anchor, one of its headings as GitHub names it."""
    if "://" in target:
        return True
    path, _, anchor = target.partition("#")
    file = REPOSITORY / path
    if not file.exists():
        return False
    return not anchor or anchor in {github_slug(h) for h in headings(file.read_text())}
