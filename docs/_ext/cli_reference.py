"""The ``dtrain-help`` directive: the ``--help`` text of a ``dtrain`` command, produced at build
time by the command line itself (``workbench.cli.main.main``), so the reference is the parser's
own text and cannot drift from it.

In a MyST page::

    ```{dtrain-help} run
    ```

renders ``dtrain run --help`` as a literal block; with no argument, ``dtrain --help``.
"""

from __future__ import annotations

import contextlib
import io
import os

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx

# argparse wraps to the terminal's width, read from COLUMNS: a fixed width keeps pages stable.
HELP_COLUMNS = "88"


def command_help(words: list[str]) -> str:
    """What ``dtrain WORDS --help`` prints on stdout."""
    from workbench.cli.main import main

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    output = io.StringIO()
    try:
        # argparse's help action exits after printing
        with contextlib.redirect_stdout(output), contextlib.suppress(SystemExit):
            main([*words, "--help"])
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return output.getvalue()


class DtrainHelp(Directive):
    optional_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        words = self.arguments[0].split() if self.arguments else []
        text = command_help(words).rstrip()
        if not text:
            raise self.error(f"dtrain {' '.join(words)} --help printed nothing")
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def setup(app: Sphinx) -> dict:
    app.add_directive("dtrain-help", DtrainHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
