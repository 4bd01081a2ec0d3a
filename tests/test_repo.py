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
        seen = pm.inspect_notebook(str(ch.path))
        assert set(seen) == set(ch.parameters), f"{ch.slug}: papermill sees {sorted(seen)}"
        # every declared range is papermill's help too (`papermill --help-notebook`), seed's included
        for name, p in ch.parameters.items():
            if p.constraint is not None:
                assert seen[name]["help"].startswith(p.constraint.text), (ch.slug, name)
        assert ch.parameters["seed"].help.startswith("∈ [0, 4294967295]"), ch.slug


#: Paths outside a clone that files must not point at (built from parts, so this file does not).
OUTSIDE = ("/".join(["..", "shared"]), "DESIGN" + ".md")


def test_the_contract_lives_in_the_repository():
    """No file points at documents outside the repository (a clone must be self-contained)."""
    offenders = [str(path.relative_to(ROOT))
                 for path in [*ROOT.glob("*.md"), *ROOT.glob("book/**/*.md"), *ROOT.glob("book/**/*.ipynb"),
                              *ROOT.glob("lib/**/*.py"), *ROOT.glob("kernels/**/*.py"), *ROOT.glob("tests/*.py")]
                 if any(needle in path.read_text() for needle in OUTSIDE)]
    assert not offenders, offenders
    assert (ROOT / "docs" / "design.md").exists() and (ROOT / "LICENSE").exists()


def _markdown(ch) -> list[str]:
    nb = json.loads(ch.path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("ch", Book(ROOT).chapters(), ids=lambda c: c.number)
def test_prose_names_no_parameter_where_a_value_belongs(ch):
    """`` `steps` `` in the text tells a reader nothing; the value (glued from the run) does."""
    import re

    names = set(ch.parameters) - {"seed", "out_dir", "device"}
    found = sorted({m for text in _markdown(ch) for m in re.findall(r"(?<![`}])`([A-Za-z_][A-Za-z0-9_]*)`(?!`)", text)
                    if m in names})
    assert not found, f"{ch.slug}: parameter names in prose: {found}"


DEVELOPMENT_WORDS = ["issue", "first version", "project notes", "the lead", "helper", "TODO", "FIXME",
                     "we tried first", "previous version", "earlier version"]


@pytest.mark.parametrize("ch", Book(ROOT).chapters(), ids=lambda c: c.number)
def test_prose_tells_no_development_history(ch):
    import re

    text = "\n".join(_markdown(ch))
    found = [w for w in DEVELOPMENT_WORDS if re.search(rf"\b{re.escape(w)}\b", text, flags=re.IGNORECASE)]
    assert not found, f"{ch.slug}: development history in the text: {found}"
