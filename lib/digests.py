"""Digests of what can change a number: the one definition for records and sweep points.

A record of a run (``lib.pipeline.records``) goes stale exactly when one of these changes, and a
kept sweep point (``lib.sweep``) is reused only while they are unchanged:

- a Python source file: its syntax tree (``ast.dump``) with every docstring removed, so comments,
  blank lines, formatting and docstrings change nothing, while a changed constant, name or
  operator does. A file that does not parse (or is not Python) is digested by its bytes;
- a notebook: its code cells' sources and tags (``parameters`` among them) in order; markdown
  cells, outputs and metadata change nothing;
- the environment: the Python version and the installed versions of the distributions that
  ``constraints.txt`` pins (``importlib.metadata``), not the bytes of ``pyproject.toml`` or of
  ``constraints.txt`` (a ``[tool.ruff]`` line, a comment or a reordering changes nothing, a
  different installed numpy does).

**Presentation modules** (:data:`PRESENTATION`) format strings and HTML or draw figures, or
profile a run; none computes a value that reaches a claim or a metric, so their digest is a
constant and editing them leaves every record current. The rule that keeps this true is tested
(``tests/test_digests.py``): no module under ``lib/`` or ``kernels/`` imports a presentation
module but the notebook-facing façades in :data:`PRESENTATION_USERS` and a paper's figure module
(``lib/<paper>/figures.py``, which only the notebook imports), which hand figures and tables to
the page and take nothing back.

A sweep function's **import closure** (:func:`import_closure`) is the set of ``lib/`` and
``kernels/`` files its module imports, at module level or inside functions, followed
recursively: the files a sweep point's result can depend on before the function first runs, in
this process or in a worker.

Standard library only: the kernel, Dask workers and the pipeline all import this module.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
from pathlib import Path

#: The project's source folders (the same list as ``lib.run.SOURCE_DIRS``).
SOURCE_DIRS = ("lib", "kernels")
#: Modules that format, draw or profile and cannot change a number (see the module docstring).
PRESENTATION = frozenset({"lib/plotting.py", "lib/render.py", "lib/profiling.py"})
#: The modules outside PRESENTATION (and the pipeline) allowed to import a presentation module:
#: the notebook's façades (``ch.figure`` saves through plotting, the claims table renders through
#: render), lib.sweep (imports lib.profiling only under `companion profile`, after the sweep's
#: points are computed; the probe's extra runs are timed and discarded) and the SWR benchmark's
#: figure (its numbers are timings, never a sweep point's).
PRESENTATION_USERS = frozenset({"lib/chapter.py", "lib/claims.py", "lib/sweep.py", "lib/swr_bench/plotting.py"})
#: A paper's figure module: it draws through lib.plotting, and nothing in lib/ or kernels/ imports it.
FIGURES = "lib/*/figures.py"
#: The digest of a presentation module, whatever its contents.
PRESENTATION_DIGEST = "presentation"

_ROOT = Path(__file__).resolve().parents[1]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def python_digest(text: str) -> str:
    """The digest of Python source: its syntax tree without docstrings (comments and layout are
    not in the tree). Falls back to the bytes when the text does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return _sha(text.encode())
    return _sha(ast.dump(_strip_docstrings(tree)).encode())


def file_digest(path: Path, rel: str | None = None) -> str:
    """A source file's digest: the syntax tree of a ``.py`` file, the bytes of anything else,
    ``"missing"`` when it does not exist, :data:`PRESENTATION_DIGEST` for a presentation module
    (``rel``: its path relative to the project root)."""
    if rel is not None and rel in PRESENTATION:
        return PRESENTATION_DIGEST
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return "missing"
    if not path.is_file():
        return "missing"
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)  # remembered per file version
    if key not in _DIGESTS:
        _DIGESTS[key] = (python_digest(path.read_text(encoding="utf-8", errors="surrogateescape"))
                         if path.suffix == ".py" else _sha(path.read_bytes()))
    return _DIGESTS[key]


_DIGESTS: dict[tuple, str] = {}


def notebook_cells(path: Path) -> list:
    """What of a notebook can change a number: each code cell's tags and source, in order."""
    nb = json.loads(Path(path).read_text())
    return [(sorted(c.get("metadata", {}).get("tags", [])), "".join(c["source"]))
            for c in nb["cells"] if c["cell_type"] == "code"]


def notebook_digest(path: Path) -> str:
    return _sha(json.dumps(notebook_cells(path)).encode())


_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==")


def pinned_names(root: Path) -> list[str]:
    """The distributions ``constraints.txt`` pins (``name==version`` lines), normalised."""
    path = Path(root) / "constraints.txt"
    if not path.exists():
        return []
    names = {re.sub(r"[-_.]+", "-", m.group(1)).lower()
             for line in path.read_text().splitlines() if (m := _PIN.match(line.split("#", 1)[0]))}
    return sorted(names)


def environment(root: Path) -> dict:
    """The resolved environment: the Python version and, for every distribution constraints.txt
    pins, its installed version (``"absent"`` when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    packages = {}
    for name in pinned_names(root):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = "absent"
    v = sys.version_info
    return {"python": f"{sys.implementation.name} {v.major}.{v.minor}.{v.micro}", "packages": packages}


def environment_digest(root: Path) -> str:
    return _sha(json.dumps(environment(root), sort_keys=True).encode())


# -- import closure ---------------------------------------------------------------------------
def _module_file(root: Path, module: str) -> Path | None:
    """The file of a ``lib``/``kernels`` module under ``root`` (a package's ``__init__.py``)."""
    parts = module.split(".")
    if not parts or parts[0] not in SOURCE_DIRS:
        return None
    base = Path(root).joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(root: Path, path: Path) -> str:
    parts = list(Path(path).resolve().relative_to(Path(root).resolve()).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


_IMPORTS: dict[tuple, set[str]] = {}


def _imported(root: Path, path: Path) -> set[str]:
    """Every module a file imports, anywhere in it (inside functions too), as absolute names:
    ``from a import b`` counts as ``a`` and ``a.b`` (b may be a submodule). Remembered per file
    version (its modification time and size): a chapter may call sweep() many times."""
    try:
        st = Path(path).stat()
    except OSError:
        return set()
    key = (str(root), str(path), st.st_mtime_ns, st.st_size)
    if key not in _IMPORTS:
        _IMPORTS[key] = _parse_imports(root, path)
    return _IMPORTS[key]


def _parse_imports(root: Path, path: Path) -> set[str]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))
    except (SyntaxError, ValueError, OSError):
        return set()
    me = _module_name(root, path)
    package = me if Path(path).name == "__init__.py" else me.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names if a.name != "*"}
    return found


def import_closure(paths, root: Path | None = None) -> list[str]:
    """The ``lib``/``kernels`` files under ``root`` that the files ``paths`` import, directly or
    through each other, at module level or inside functions, with the packages' ``__init__.py``
    files that importing them runs; the files themselves included. Relative to ``root``."""
    root = Path(root or _ROOT).resolve()
    todo = [Path(p).resolve() for p in paths]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file() or not _inside(root, path):
            continue  # outside the project's sources (a library's module): not ours to follow
        seen.add(path)
        for module in _imported(root, path):
            parts = module.split(".")
            for i in range(1, len(parts) + 1):  # a.b.c runs a/__init__, a/b/__init__, a/b/c
                found = _module_file(root, ".".join(parts[:i]))
                if found is not None and found.resolve() not in seen:
                    todo.append(found.resolve())
    return sorted(os.path.relpath(p, root) for p in seen if _inside(root, p))


def _inside(root: Path, path: Path) -> bool:
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    return bool(rel.parts) and rel.parts[0] in SOURCE_DIRS


def function_files(fn) -> list[Path]:
    """The source file of a sweep function's module (a ``functools.partial``'s function), or
    none for a function defined in a notebook."""
    inner = fn
    while hasattr(inner, "func"):
        inner = inner.func
    module = sys.modules.get(getattr(inner, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    return [Path(file)] if file else []


def closure_digest(rels: list[str], root: Path | None = None) -> str:
    """One digest of the files ``rels`` (relative to ``root``), by :func:`file_digest`."""
    root = Path(root or _ROOT)
    return _sha(json.dumps([(rel, file_digest(root / rel, rel)) for rel in sorted(rels)]).encode())
