"""Jupyter Book never publishes a book without results: a plain `jupyter-book build` outside
`companion build`'s stage refuses in one line, and a glue key that a chapter does not write fails
the staged build."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT

from lib.pipeline.book import jupyter_book_command
from lib.pipeline.jb_guard import STAGE_MARKER

pytestmark = pytest.mark.integration

JB = str(Path(sys.executable).parent / "jupyter-book")


def _one_line_refusal(out: subprocess.CompletedProcess) -> None:
    assert out.returncode != 0
    assert "make book" in out.stderr and "companion build" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


@pytest.mark.parametrize("target", [".", "book/chapters/01-induction-head.ipynb"])
def test_plain_jupyter_book_build_refuses_and_names_make_book(tmp_path, target):
    out = subprocess.run([JB, "build", target, "--path-output", str(tmp_path)], cwd=ROOT, text=True,
                         capture_output=True, timeout=300)
    _one_line_refusal(out)
    assert not list(tmp_path.rglob("*.html")), "a refused build must not leave pages behind"


def _mini_stage(root: Path, glued: dict[str, str], cited: list[str]) -> Path:
    """A staged book of one executed page that glues ``glued`` and cites ``cited`` in its text."""
    root.mkdir(parents=True)
    shutil.copyfile(ROOT / "_config.yml", root / "_config.yml")
    (root / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    (root / STAGE_MARKER).write_text("test\n")
    (root / "book").mkdir()
    shutil.copyfile(ROOT / "book" / "references.bib", root / "book" / "references.bib")
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("glue(...)")
    code.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": value},
                                           metadata={"scrapbook": {"name": key, "mime_prefix": ""}})
                    for key, value in glued.items()]
    text = "# A page\n\n" + " ".join(f"{{glue:text}}`{k}`" for k in cited)
    nb.cells = [nbformat.v4.new_markdown_cell(text), code]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (root / "page.ipynb").write_text(json.dumps(nb))
    return root


def test_a_missing_glue_key_fails_the_staged_build(tmp_path):
    good = _mini_stage(tmp_path / "good", {"rate": "0.93"}, ["rate"])
    ok = subprocess.run(jupyter_book_command(good, good), cwd=good, text=True, capture_output=True, timeout=300)
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert "0.93" in (good / "_build" / "html" / "page.html").read_text()

    bad = _mini_stage(tmp_path / "bad", {"rate": "0.93"}, ["rate", "slope"])
    out = subprocess.run(jupyter_book_command(bad, bad), cwd=bad, text=True, capture_output=True, timeout=300)
    assert out.returncode != 0
    assert "slope" in out.stdout + out.stderr
