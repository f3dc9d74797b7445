"""Links from the documentation into the checkout, and the tutorials' code cells.

A page may link a file of the checkout outside docs/ (``[flags](../workbench/launch/flags.py)``):
MyST copies it into the site as a download, and a path that does not exist is a warning. A link
to a directory (``../workbench/parallel/collectives/``) has nothing to copy: when the directory
exists it is shown as its text, without a link; when it does not, MyST's missing-reference
warning stays, so a moved or deleted directory still fails the build.

The tutorials are pages of the site through a link, docs/tutorials -> ../notebooks. MyST
resolves a page's path through that link, to a name outside docs/ that no page has; such a
link is pointed back at the page it names.

The tutorials' cells are IPython (``%dtrain ... $flags``), which the Python lexer cannot read:
``python`` blocks are highlighted with IPython's lexer, a superset of Python's.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

REPOSITORY = Path(__file__).resolve().parents[2]


class RepositoryDirectoryLinks(SphinxPostTransform):
    # before MyST's resolver (priority 9), which would warn about the directory
    default_priority = 8

    def run(self, **kwargs) -> None:
        pages = None
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            if node.get("refdomain") == "doc":
                if node["reftarget"] not in self.env.all_docs:
                    pages = pages if pages is not None else self._pages_by_real_path()
                    real = (Path(self.env.srcdir) / node["reftarget"]).resolve()
                    node["reftarget"] = pages.get(real, node["reftarget"])
                continue
            target = str(node.get("reftarget", ""))
            if "://" in target or not target.rstrip("/"):
                continue
            source = Path(self.env.doc2path(node.get("refdoc", self.env.docname))).parent
            path = (source / target).resolve()
            if path.is_dir() and path.is_relative_to(REPOSITORY):
                node.replace_self(node.children or [nodes.Text(target)])

    def _pages_by_real_path(self) -> dict[Path, str]:
        """Each page's name by its source's real path, without the suffix."""
        return {
            Path(self.env.doc2path(name)).resolve().with_suffix(""): name
            for name in self.env.all_docs
        }


def setup(app: Sphinx) -> dict:
    from IPython.lib.lexers import IPython3Lexer

    app.add_post_transform(RepositoryDirectoryLinks)
    app.add_lexer("python", IPython3Lexer)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
