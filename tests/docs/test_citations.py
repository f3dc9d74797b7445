"""The architecture reference is one page per subsystem, and what cites the documentation
cannot rot: every section the single architecture page had is a heading of the architecture
pages, the layers it draws are the import contracts' layers, and every ``docs/<page>.md`` a
code comment, docstring or test names exists, with the section quoted after it
(``docs/architecture/events.md, "Events"``) a heading of that page or the bold words that open
one of its paragraphs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.markdown import DOCS, REPOSITORY, headings, pages, sections

# The sections of the architecture reference when it was one page.
FORMER_ARCHITECTURE_SECTIONS = (
    "Layers",
    "The life of a `dtrain run`",
    "The life of one step",
    "Custom training loops",
    "Same data, same result",
    "Events",
    "What Dask costs",
    "Time to the first chart point",
    "Devices: CPU and GPU",
    "Faults and stragglers",
    "Predicting a step: calibration, cost model, simulator",
    "Where each concept lives",
    "Adding a strategy",
    "Adding an op",
    "Adding a chart",
    "Adding a data set",
)

# Where the citations are: the package, the tests, the benchmarks, CI and the project's config
# (not the tests of the site, whose examples cite pages that do not exist).
CITING = ("workbench", "tests", "benchmarks", ".ci", "pyproject.toml")
NOT_CITING = REPOSITORY / "tests" / "docs"

# A page path, then optionally a comma and the section's name in double quotes. The name may
# wrap onto the next line of a comment or docstring, and a docstring may write the page in
# double backticks.
CITATION = re.compile(r'\b(docs/[\w./-]+\.md)(?:``)?(?:,\s*(?:#\s*)?"([^"]+)")?')


def citations(text: str) -> list[tuple[str, str | None]]:
    """Each ``(page, section or None)`` that ``text`` cites, the section's line breaks (and a
    comment's ``#``) read as spaces and reStructuredText's double backticks as Markdown's one.

    >>> citations('x (docs/architecture/events.md, "Events") y docs/security.md.')
    [('docs/architecture/events.md', 'Events'), ('docs/security.md', None)]
    >>> citations('# (docs/a.md, "What Dask\\n# costs"), ``docs/b.md``, "The ``dtrain run``"')
    [('docs/a.md', 'What Dask costs'), ('docs/b.md', 'The `dtrain run`')]
    """
    found = []
    for match in CITATION.finditer(text):
        section = match.group(2)
        if section is not None:
            section = re.sub(r"\s*\n\s*(?:#\s*)?", " ", section).replace("``", "`").strip()
        found.append((match.group(1), section))
    return found


def citing_files() -> list[Path]:
    files = []
    for name in CITING:
        path = REPOSITORY / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file() and p.suffix in ("", ".py")]
    return [f for f in files if "__pycache__" not in f.parts and not f.is_relative_to(NOT_CITING)]


def test_every_former_architecture_section_is_a_heading_of_the_architecture_pages() -> None:
    architecture = pages(DOCS / "architecture")
    titles = {title for page in architecture for title in headings(page.read_text())}
    assert [s for s in FORMER_ARCHITECTURE_SECTIONS if s not in titles] == []
    assert not (DOCS / "architecture.md").exists()  # one place for each section


def test_the_layers_drawn_are_the_import_contracts_layers() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    config = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if "layers" in c)
    enforced = [layer.replace("workbench.", "") for layer in contract["layers"]]
    drawing = re.search(
        r"## Layers\n.*?```text\n(.*?)```", (DOCS / "architecture" / "index.md").read_text(), re.S
    )
    assert drawing, "docs/architecture/index.md draws the layers in a text block under Layers"
    drawn = [re.split(r"\s{2,}", line.strip())[0] for line in drawing.group(1).splitlines()]
    assert drawn == enforced


def test_every_cited_page_exists_and_has_the_cited_section() -> None:
    broken = []
    for file in citing_files():
        try:
            text = file.read_text()
        except UnicodeDecodeError:
            continue
        for page, section in citations(text):
            target = REPOSITORY / page
            where = f"{file.relative_to(REPOSITORY)}: {page}"
            if not target.is_file():
                broken.append(f"{where} does not exist")
            elif section is not None and section not in sections(target.read_text()):
                broken.append(f'{where} has no section "{section}"')
    assert broken == []
