"""Sphinx extension: the bibliography as an ARIA list of list items.

docutils writes a citation list as ``<div role="list" class="citation-list">`` whose entries are
``<div class="citation" role="doc-biblioentry">``. ARIA's ``list`` role requires ``listitem``
children, and ``doc-biblioentry`` (deprecated in DPUB-ARIA 1.1) is not one, so axe-core reports
the bibliography page as a critical violation (aria-required-children) and every entry as a
deprecated role. This writes the same markup with ``role="listitem"`` on each entry; classes,
ids and links are unchanged.
"""

from __future__ import annotations

from docutils import nodes


def visit_citation(self, node: nodes.citation) -> None:
    if not isinstance(node.previous_sibling(), type(node)):
        self.body.append('<div role="list" class="citation-list">\n')
    self.body.append(self.starttag(node, "div", classes=[node.tagname], role="listitem"))


def depart_citation(self, node: nodes.citation) -> None:
    self.body.append("</div>\n")
    if not isinstance(node.next_node(descend=False, siblings=True), type(node)):
        self.body.append("</div>\n")


def setup(app):
    app.add_node(nodes.citation, override=True, html=(visit_citation, depart_citation))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
