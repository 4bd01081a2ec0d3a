"""lib.digests (issue 52): a record goes stale exactly when a number could change. Python is digested
by its syntax tree without docstrings, a notebook by its code cells, the environment by the
installed versions; presentation modules change nothing; a sweep function's import closure
includes imports made inside functions."""

from __future__ import annotations

import ast
import fnmatch
import json
import shutil
from pathlib import Path

import pytest

from lib import digests
from lib.pipeline import records

ROOT = Path(__file__).resolve().parent.parent

SOURCE = '''"""A module."""

import numpy as np

RATE = 0.5  # the training constant


def step(x):
    """One step."""
    return x * RATE
'''


def test_comments_docstrings_and_layout_change_nothing_a_constant_does():
    base = digests.python_digest(SOURCE)
    assert digests.python_digest(SOURCE.replace("# the training constant", "# reworded")) == base
    assert digests.python_digest(SOURCE.replace('"""One step."""', '"""One step, documented."""')) == base
    assert digests.python_digest(SOURCE.replace('    """One step."""\n', "")) == base
    assert digests.python_digest(SOURCE.replace("x * RATE", "x*RATE") + "\n\n# trailing\n") == base
    assert digests.python_digest(SOURCE.replace("RATE = 0.5", "RATE = 0.50000001")) != base
    assert digests.python_digest(SOURCE.replace("x * RATE", "RATE * x")) != base
    # a string that is not a docstring is code
    assert digests.python_digest(SOURCE + 'NAME = "a"\n') != digests.python_digest(SOURCE + 'NAME = "b"\n')


def test_a_file_that_does_not_parse_is_digested_by_its_bytes(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    first = digests.file_digest(bad)
    bad.write_text("def (:\n# comment\n")
    assert digests.file_digest(bad) != first
    assert digests.file_digest(tmp_path / "gone.py") == "missing"


def test_presentation_modules_digest_to_a_constant(tmp_path):
    f = tmp_path / "plotting.py"
    f.write_text("X = 1\n")
    assert digests.file_digest(f, "lib/plotting.py") == digests.PRESENTATION_DIGEST
    assert digests.file_digest(f, "lib/stats.py") != digests.PRESENTATION_DIGEST


def _notebook(cells) -> dict:
    return {"cells": [{"cell_type": t, "metadata": m, "source": s, **({"outputs": [], "execution_count": None}
                                                                       if t == "code" else {})}
                      for t, m, s in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_a_notebook_is_digested_by_its_code_cells_and_tags(tmp_path):
    nb = _notebook([("markdown", {}, "# Title\n"), ("code", {"tags": ["parameters"]}, "n = 3\n"),
                    ("code", {}, "print(n)\n")])
    path = tmp_path / "a.ipynb"

    def digest(doc):
        path.write_text(json.dumps(doc))
        return digests.notebook_digest(path)

    base = digest(nb)
    edited = json.loads(json.dumps(nb))
    edited["cells"][0]["source"] = "# Title \n\nMore prose.\n"     # markdown, a trailing space
    edited["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "3\n"}]
    edited["metadata"]["kernelspec"] = {"name": "python3"}
    assert digest(edited) == base
    code = json.loads(json.dumps(nb))
    code["cells"][1]["source"] = "n = 4\n"
    assert digest(code) != base
    tags = json.loads(json.dumps(nb))
    tags["cells"][1]["metadata"] = {}
    assert digest(tags) != base


def test_the_environment_is_the_installed_versions_not_the_files_bytes(tmp_path):
    shutil.copyfile(ROOT / "constraints.txt", tmp_path / "constraints.txt")
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    env = digests.environment(tmp_path)
    from importlib.metadata import version

    assert env["packages"]["numpy"] == version("numpy") and env["packages"]["torch"] == version("torch")
    base = digests.environment_digest(tmp_path)
    with open(tmp_path / "pyproject.toml", "a") as f:
        f.write("\n[tool.ruff]\nline-length = 121\n")
    with open(tmp_path / "constraints.txt", "a") as f:
        f.write("# a comment\n")
    assert digests.environment_digest(tmp_path) == base
    with open(tmp_path / "constraints.txt", "a") as f:
        f.write("no-such-distribution-anywhere==1.0\n")
    assert digests.environment(tmp_path)["packages"]["no-such-distribution-anywhere"] == "absent"
    assert digests.environment_digest(tmp_path) != base


def test_import_closure_follows_imports_inside_functions_and_relative_ones(tmp_path):
    pkg = tmp_path / "lib" / "paper"
    pkg.mkdir(parents=True)
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "shared.py").write_text("K = 1\n")
    (tmp_path / "lib" / "lazy.py").write_text("from lib import deeper\n")
    (tmp_path / "lib" / "deeper.py").write_text("import numpy\n")
    (tmp_path / "lib" / "unrelated.py").write_text("X = 2\n")
    (pkg / "__init__.py").write_text("from .core import run\n")
    (pkg / "core.py").write_text("from lib.shared import K\n\ndef run():\n    from lib import lazy\n    return K\n")
    (tmp_path / "kernels").mkdir()
    got = digests.import_closure([pkg / "core.py"], tmp_path)
    assert got == ["lib/__init__.py", "lib/deeper.py", "lib/lazy.py", "lib/paper/core.py", "lib/shared.py"]
    assert "lib/paper/__init__.py" in digests.import_closure([pkg / "__init__.py"], tmp_path)


def test_the_chapter_09_population_is_in_its_sweep_functions_closure():
    """The hole of issue 52: lib/ess/population.py and the compiled recurrence, imported lazily."""
    from lib.ess import experiments

    closure = digests.import_closure(digests.function_files(experiments.run_mqar_replicates), ROOT)
    assert "lib/ess/population.py" in closure
    assert {"kernels/swr/compiled/__init__.py", "kernels/swr/chunk.py"} & set(
        digests.import_closure([ROOT / "lib/ess/operators.py"], ROOT))


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def test_only_the_notebook_facades_import_presentation_modules():
    """The rule that makes a presentation module unable to change a number: nothing that computes
    one (any lib/ or kernels/ module but the notebook's façades and the pipeline, which renders
    pages) imports it, so its return values never reach a claim or a metric."""
    presentation = {rel[:-3].replace("/", ".") for rel in digests.PRESENTATION}
    offenders = []
    for path in sorted([*(ROOT / "lib").rglob("*.py"), *(ROOT / "kernels").rglob("*.py")]):
        rel = str(path.relative_to(ROOT))
        if rel in digests.PRESENTATION or rel in digests.PRESENTATION_USERS or rel.startswith("lib/pipeline/"):
            continue
        if fnmatch.fnmatch(rel, digests.FIGURES):
            continue
        if hit := _imports(path) & presentation:
            offenders.append(f"{rel} imports {sorted(hit)}")
    assert not offenders, offenders


def test_nothing_that_computes_imports_a_figure_module():
    """A paper's figure module may draw through lib.plotting because only the notebook imports it:
    no value it returns reaches a sweep point, a claim or a metric."""
    figures = {str(p.relative_to(ROOT))[:-3].replace("/", ".") for p in ROOT.glob(digests.FIGURES)}
    assert figures, "no figure module to check"
    offenders = [f"{path.relative_to(ROOT)} imports {sorted(hit)}"
                 for path in sorted([*(ROOT / "lib").rglob("*.py"), *(ROOT / "kernels").rglob("*.py")])
                 if not fnmatch.fnmatch(str(path.relative_to(ROOT)), digests.FIGURES)
                 and not str(path.relative_to(ROOT)).startswith("lib/pipeline/")
                 and (hit := _imports(path) & figures)]
    assert not offenders, offenders


def test_the_presentation_check_sees_an_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from lib import plotting\n    from lib.render import badge\n")
    assert {"lib.plotting", "lib.render"} <= _imports(bad)


def test_sweep_holds_no_profiler_and_imports_it_only_when_profiling():
    text = (ROOT / "lib" / "sweep.py").read_text()
    assert not {"torch.utils.flop_counter", "torch.utils._python_dispatch"} & _imports(ROOT / "lib" / "sweep.py")
    tree = ast.parse(text)
    top = {a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert "profiling" not in top  # only inside sweep(), under `if context.profiling`


@pytest.mark.parametrize("flags, level", [
    ({"sse2"}, "x86-64-v1"),
    ({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}, "x86-64-v2"),
    ({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma",
      "abm", "movbe", "xsave"}, "x86-64-v3"),
    ({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma",
      "abm", "movbe", "xsave", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}, "x86-64-v4"),
    ({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}, "x86-64-v1"),   # levels are cumulative
])
def test_isa_level_from_cpu_flags(flags, level):
    assert records.isa_level(flags, "x86_64") == level


def test_machine_names_the_cpu_and_its_level():
    m = records.machine()
    assert m["cpu"] and m["cores"] >= 1
    assert m["isa"].startswith("x86-64-v") or m["isa"] == __import__("platform").machine()


def test_a_closure_from_outside_the_project_is_empty_not_an_error():
    """A sweep function whose module lives outside the project (a library's, say numpy's: the
    venv may sit anywhere) contributes no project file, and does not stop the run."""
    import numpy

    assert digests.import_closure([numpy.__file__], ROOT) == []
