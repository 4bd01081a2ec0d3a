"""The import directions of the layout (docs/design.md, "Layout"): the pipeline and the papers
never import each other, nothing imports the benchmark script, and a paper's module reaches
another paper's code only through the shared pieces."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Notebook-facing helpers and small shared building blocks any paper module may import.
SHARED = {"lib.chapter", "lib.claims", "lib.outputs", "lib.results", "lib.run", "lib.plotting", "lib.sweep",
          "lib.parameters", "lib.stats", "lib.seeding", "lib.provenance", "lib.llama", "lib.pcfg", "lib.population",
          "lib.digests", "lib.profiling", "lib.render"}
PIPELINE = "lib.pipeline"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every absolute module a file imports (``from lib import x`` counts as ``lib.x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def sources(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def paper_of(module: str) -> str | None:
    """The paper a ``lib`` module belongs to (``lib.npiv.meanfield`` → ``lib.npiv``), or None for
    the pipeline and the shared pieces."""
    parts = module.split(".")
    if parts[0] != "lib" or len(parts) < 2:
        return None
    top = ".".join(parts[:2])
    return None if top in SHARED or top == PIPELINE else top


def test_only_the_pipeline_imports_the_pipeline():
    offenders = [f"{module_name(p)} imports {m}" for p in sources("lib", "kernels")
                 if not module_name(p).startswith(PIPELINE)
                 for m in imports(p) if m == PIPELINE or m.startswith(PIPELINE + ".")]
    assert not offenders, offenders


def test_the_pipeline_never_imports_paper_code():
    offenders = [f"{module_name(p)} imports {m}" for p in sources("lib/pipeline")
                 for m in imports(p) if paper_of(m) or m.startswith("kernels.swr.")
                 and m != "kernels.swr.bench"]
    assert not offenders, offenders


def test_nothing_in_lib_or_kernels_imports_the_benchmark():
    offenders = [module_name(p) for p in sources("lib", "kernels")
                 if module_name(p) != "kernels.swr.bench" and "kernels.swr.bench" in imports(p)
                 and not module_name(p).startswith(PIPELINE)]  # `companion bench` runs it
    assert not offenders, offenders


def test_papers_import_other_papers_only_through_shared_pieces():
    offenders = []
    for p in sources("lib"):
        mine = paper_of(module_name(p))
        if mine is None:
            continue
        for m in imports(p):
            other = paper_of(m)
            if other and other != mine:
                offenders.append(f"{module_name(p)} imports {m}")
    assert not offenders, offenders


def test_the_checker_sees_a_violation(tmp_path):
    """The rules above can fail: an import of another paper's module is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("from lib.tmc import softmax\nimport lib.pipeline.runner\n")
    assert {"lib.tmc", "lib.tmc.softmax", "lib.pipeline.runner"} <= imports(bad)
    assert paper_of("lib.tmc.softmax") == "lib.tmc" and paper_of("lib.stats") is None
