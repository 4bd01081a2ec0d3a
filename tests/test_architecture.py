"""The import directions of the layout (docs/design.md, "Layout"): the pipeline and the papers
never import each other, nothing imports the benchmark script, and a paper's module reaches
another paper's code only through the shared pieces; and a chapter's notebook only narrates."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Notebook-facing helpers and small shared building blocks any paper module may import.
SHARED = {"lib.chapter", "lib.claims", "lib.outputs", "lib.results", "lib.run", "lib.plotting", "lib.sweep",
          "lib.parameters", "lib.stats", "lib.seeding", "lib.provenance", "lib.llama", "lib.pcfg", "lib.population",
          "lib.digests", "lib.profiling", "lib.profiles", "lib.render", "lib.verdicts"}
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


BENCHMARK = "lib.swr_bench"  # `companion bench swr`: outside the kernels, run by the pipeline


def _is_benchmark(module: str) -> bool:
    return module == BENCHMARK or module.startswith(BENCHMARK + ".")


def test_the_pipeline_never_imports_paper_code():
    offenders = [f"{module_name(p)} imports {m}" for p in sources("lib/pipeline")
                 for m in imports(p) if not _is_benchmark(m) and (paper_of(m) or m.startswith("kernels.swr."))]
    assert not offenders, offenders


def test_nothing_in_lib_or_kernels_imports_the_benchmark():
    offenders = [module_name(p) for p in sources("lib", "kernels")
                 if not _is_benchmark(module_name(p)) and any(_is_benchmark(m) for m in imports(p))
                 and not module_name(p).startswith(PIPELINE)]  # `companion bench` runs it
    assert not offenders, offenders
    assert not (ROOT / "kernels" / "swr" / "bench.py").exists()  # benchmarks live outside the kernels


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


def _module_graph() -> dict[str, set[str]]:
    """Module → the lib/kernels modules it imports (function-level imports included), each import
    of a name resolved to the module that defines it where that is a module of ours."""
    files = sources("lib", "kernels")
    names = {module_name(p) for p in files}
    graph = {}
    for p in files:
        me = module_name(p)
        targets = set()
        for m in imports(p):
            while m and m not in names:
                m = m.rpartition(".")[0]  # `from lib.x import f` → lib.x
            if m and m != me and not (me.startswith(m + ".") and p.name == "__init__.py"):
                targets.add(m)
        graph[me] = targets
    return graph


def test_no_import_cycles():
    """No module reaches itself through imports (a package's __init__ re-exporting its own
    submodules is not a cycle of modules). Found by depth-first search, reporting each cycle."""
    graph = _module_graph()
    cycles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + ".") or node.startswith(nxt + ".") and graph.get(nxt) is not None \
                    and (ROOT / nxt.replace(".", "/") / "__init__.py").exists():
                continue  # a package and its own submodules
            if state.get(nxt) == "open":
                cycles.append(" → ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# --- notebooks narrate -------------------------------------------------------------------------
# A chapter's notebook holds parameters, calls into lib, figures and glue. Decision rules,
# experiment drivers and statistics live in lib, where they have unit tests: a notebook defines
# no function or class, imports no statistics library, and computes no spread, quantile or
# standard error of its own. (A mean for a figure's curve is allowed.)
STATISTICS_IN_A_CELL = re.compile(
    r"^\s*(def|class)\s|\blambda\b|\bscipy\b|\bstats\.|\bnp\.(std|var|median|percentile|quantile|sqrt|corrcoef)\b"
    r"|\.(std|var|median|quantile)\(")
MAX_CELL_LINES = 40


def _code_lines(cell: dict) -> list[str]:
    return [line for line in "".join(cell["source"]).splitlines()
            if line.strip() and not line.strip().startswith("#")]


def notebook_findings(notebook: dict) -> list[str]:
    """What a notebook computes that belongs in lib: statistics and definitions, and code cells
    longer than MAX_CELL_LINES lines (comments and blank lines not counted; the one cell tagged
    ``parameters`` declares the chapter's parameters, one per line, and has no length limit)."""
    found = []
    for number, cell in enumerate(c for c in notebook["cells"] if c["cell_type"] == "code"):
        lines = _code_lines(cell)
        declarations = "parameters" in cell.get("metadata", {}).get("tags", [])
        if len(lines) > MAX_CELL_LINES and not declarations:
            found.append(f"code cell {number} has {len(lines)} lines (at most {MAX_CELL_LINES})")
        source = "".join(cell["source"]).splitlines()
        found += [f"code cell {number}: {source[row - 1].strip()}" for row in _flagged_rows(cell)]
    return found


def _flagged_rows(cell: dict) -> list[int]:
    """The rows of a cell whose code (its strings and comments blanked, so a claim id or a label
    that says "lambda" is not code) matches STATISTICS_IN_A_CELL."""
    import io
    import tokenize

    source = "".join(cell["source"])
    rows = source.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source + "\n").readline))
    except (tokenize.TokenError, SyntaxError):  # not Python (a magic): judged as written
        return [i + 1 for i, line in enumerate(rows) if STATISTICS_IN_A_CELL.search(line)]
    code = [list(line) for line in rows]
    for tok in tokens:
        if tok.type in (tokenize.STRING, tokenize.COMMENT) or tok.type == getattr(tokenize, "FSTRING_MIDDLE", None):
            (r0, c0), (r1, c1) = tok.start, tok.end
            for r in range(r0, r1 + 1):
                if r - 1 < len(code):
                    start, end = (c0 if r == r0 else 0), (c1 if r == r1 else len(code[r - 1]))
                    code[r - 1][start:end] = " " * (end - start)
    return [i + 1 for i, chars in enumerate(code) if STATISTICS_IN_A_CELL.search("".join(chars))]


def test_notebooks_hold_no_statistics_and_no_long_cells():
    found = {path.name: notebook_findings(json.loads(path.read_text()))
             for path in sorted((ROOT / "book" / "chapters").glob("*.ipynb"))}
    assert not any(found.values()), "\n".join(f"{name}: {item}" for name, items in found.items() for item in items)


def test_the_notebook_rule_sees_a_statistic_a_definition_and_a_long_cell():
    def cell(*lines):
        return {"cell_type": "code", "source": "\n".join(lines)}
    clean = {"cells": [cell("# a comment", "x = run(seed)", "glue('x', x.mean())",
                            "ch.claims.close('lambda-u-shape', 'the best lambda; np.std')  # def x")]}
    assert notebook_findings(clean) == []
    for line in ("def rule(x):", "se = np.std(x) / np.sqrt(len(x))", "from scipy import stats",
                 "q = xs.quantile(0.9)", "t = stats.t.ppf(0.99, 9)", "f = lambda x: x"):
        assert notebook_findings({"cells": [cell(line)]}), line
    long = {"cells": [cell(*[f"x{i} = {i}" for i in range(MAX_CELL_LINES + 1)])]}
    assert notebook_findings(long) == [f"code cell 0 has {MAX_CELL_LINES + 1} lines (at most {MAX_CELL_LINES})"]
    declared = {"cells": [{**long["cells"][0], "metadata": {"tags": ["parameters"]}}]}
    assert notebook_findings(declared) == []
