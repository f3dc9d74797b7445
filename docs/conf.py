"""Sphinx configuration of the workbench's documentation site, built from docs/ and the
tutorials in notebooks/ (docs/tutorials links to them).

Build it as CI does, warnings as errors and every reference checked:
``.venv/bin/sphinx-build -W --keep-going -n -b html docs /tmp/site``.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # the checkout's workbench, for the references

project = "dtrain workbench"
author = "dtrain workbench contributors"
copyright = "dtrain workbench contributors"

extensions = [
    "myst_nb",  # Markdown pages (MyST) and the tutorial notebooks, shown as committed
    "sphinx.ext.autodoc",
    "docstring_sections",  # docs/_ext: the docstrings' NumPy-style "Examples" sections
    "cli_reference",  # docs/_ext: `dtrain <command> --help` rendered at build time
    "repo_links",  # docs/_ext: links to the checkout's directories; IPython cells
]

# Pages are Markdown; the notebooks are shown as they are committed, never executed here (the
# test suite executes every one).
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
nb_execution_mode = "off"
exclude_patterns = ["_build", "_ext", "**/.ipynb_checkpoints"]

# Links between pages and to headings are resolved by the build: a link to a missing page or
# heading is a warning, and the build treats every warning as an error (-W).
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
nitpicky = True

# Signatures without annotations: the annotations name internal and third-party types that
# have no page here, and every unresolved name would be a warning.
autodoc_typehints = "none"
autodoc_member_order = "bysource"
# Internal names the documented docstrings mention, which have no page on this site.
nitpick_ignore = [
    ("py:class", "workbench.data.Dataset"),
    ("py:func", "workbench.data.fit_arrays_dataset"),
    ("py:meth", "_existing_root"),
    ("py:mod", "workbench.distribute.device_lists"),
]

html_theme = "alabaster"
# wide enough for `--help` text and the benchmark tables
html_theme_options = {"page_width": "1240px", "sidebar_width": "250px"}
html_title = "dtrain workbench"
html_static_path: list[str] = []
