"""NumPy-style section titles in docstrings (``Examples`` over a line of dashes) as rubrics.

A docstring is not a document: reStructuredText would read such a title as a section and
fail. The sections' bodies (doctests, prose) are valid reStructuredText as they are, so a
rubric is all they need; the rest of a docstring is rendered unchanged.
"""

from __future__ import annotations

from sphinx.application import Sphinx


def sections_as_rubrics(app, what, name, obj, options, lines: list[str]) -> None:
    # autodoc hands the docstring as a list it renders afterwards: edited in place by design
    for index in range(len(lines) - 1):
        title, underline = lines[index].strip(), lines[index + 1].strip()
        if title and underline and set(underline) == {"-"} and len(underline) == len(title):
            indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
            lines[index] = f"{indent}.. rubric:: {title}"
            lines[index + 1] = ""


def setup(app: Sphinx) -> dict:
    app.connect("autodoc-process-docstring", sections_as_rubrics)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
