"""Repository hygiene: notebooks carry no outputs, chapters have the contracted shape, ruff."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import INTEGRATION_CALLS, INTEGRATION_FIXTURES

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


@pytest.mark.integration
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


# --- test tiers ---------------------------------------------------------------------------------
def _marks(decorators: list[ast.expr]) -> set[str]:
    """The ``pytest.mark.X`` names among decorators or a ``pytestmark`` value's elements."""
    names = set()
    for node in decorators:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark":
                names.add(sub.attr)
    return names


def unmarked_integration_tests(source: str) -> list[str]:
    """The tests in one test module that start a process (a call or fixture named in conftest's
    INTEGRATION_CALLS / INTEGRATION_FIXTURES) without being marked ``integration``, on the test
    or in the module's ``pytestmark``."""
    tree = ast.parse(source)
    module = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            module |= _marks([node.value])
    calls = {c.rstrip("(") for c in INTEGRATION_CALLS if c.endswith("(")}
    modules = {c.rstrip(".") for c in INTEGRATION_CALLS if c.endswith(".")}
    found = []
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        called = {getattr(n.func, "id", None) or getattr(n.func, "attr", None)
                  for n in ast.walk(node) if isinstance(n, ast.Call)}
        used = {n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        starts = INTEGRATION_FIXTURES & {a.arg for a in node.args.args} or calls & called or modules & used
        if starts and "integration" not in module | _marks(node.decorator_list):
            found.append(node.name)
    return found


def test_every_test_that_starts_a_process_is_marked_integration():
    found = {path.name: unmarked_integration_tests(path.read_text())
             for path in sorted((ROOT / "tests").glob("test_*.py"))}
    assert not any(found.values()), {name: tests for name, tests in found.items() if tests}


def test_the_tier_check_sees_an_unmarked_test():
    unmarked = "import pytest\n\ndef test_a(project):\n    pass\n\ndef test_b():\n    companion('list')\n"
    assert unmarked_integration_tests(unmarked) == ["test_a", "test_b"]
    marked = "import pytest\n\n@pytest.mark.integration\ndef test_b():\n    companion('list')\n"
    assert unmarked_integration_tests(marked) == []
    module = "import pytest\npytestmark = [pytest.mark.slow, pytest.mark.integration]\n\n" \
             "def test_b():\n    subprocess.run(['ls'])\n\ndef test_c():\n    assert 1 + 1 == 2\n"
    assert unmarked_integration_tests(module) == []
