"""Repository hygiene: notebooks carry no outputs, chapters have the contracted shape, ruff."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lib.pipeline.chapters import Book

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(ROOT.glob("book/**/*.ipynb")) + sorted(ROOT.glob("tests/fixtures/*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_have_no_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{path.name}: cells {dirty} hold outputs (run `companion strip`)"


def test_ten_chapters_in_toc_order_with_seed_parameter():
    chapters = Book(ROOT).chapters()
    assert [c.number for c in chapters] == [f"{i:02d}" for i in range(1, 11)]
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = [e["file"] for part in toc["parts"] for e in part["chapters"] if "chapters/" in e["file"]]
    assert listed == [f"book/chapters/{c.slug}" for c in chapters]
    for ch in chapters:
        assert isinstance(ch.parameters["seed"].default, int), ch.slug
        assert "arxiv.org/abs/" in ch.path.read_text(), f"{ch.slug} links no arXiv page"


def test_bibliography_has_every_paper():
    bib = (ROOT / "book" / "references.bib").read_text()
    for arxiv in ["2512.18634", "2512.13921", "2511.14710", "2511.07372", "2511.07368", "2506.11357",
                  "2505.18909", "2505.07558", "2504.19561", "2504.17562"]:
        assert arxiv in bib


def test_ruff_clean():
    ruff = Path(sys.executable).parent / "ruff"
    out = subprocess.run([str(ruff), "check", "lib", "kernels", "tests"], cwd=ROOT, text=True,
                         capture_output=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_papermill_reads_every_parameter():
    """papermill's own parser sees the same parameters as ours (it warns on lines it cannot read,
    e.g. a comment containing '=')."""
    import papermill as pm

    for ch in Book(ROOT).chapters():
        seen = set(pm.inspect_notebook(str(ch.path)))
        assert seen == set(ch.parameters), f"{ch.slug}: papermill sees {sorted(seen)}"
