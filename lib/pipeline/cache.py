"""Whether a chapter's run is cached: its cache key and the run folder's results.

The key hashes the notebook's cells, the resolved parameters, the pinned environment and
the contents of the ``lib/`` and ``kernels/`` source files the chapter actually imported. Those
files are recorded at run time by a last, hidden cell (a depfile, as a build system keeps), so
editing one paper's module re-runs only the chapters that import it, while the shared modules
(claims, plotting, chapter) invalidate every chapter.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from lib import results
from lib.outputs import verify
from lib.pipeline.chapters import Book, ChapterSource

ENV_FILES = ("constraints.txt", "pyproject.toml")
DEPFILE = "deps.json"


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def notebook_fingerprint(path: Path) -> bytes:
    """The notebook's cells (type, tags, source) without outputs or volatile metadata."""
    nb = json.loads(path.read_text())
    cells = [(c["cell_type"], sorted(c.get("metadata", {}).get("tags", [])), "".join(c["source"]))
             for c in nb["cells"]]
    return json.dumps(cells).encode()


def environment_fingerprint(root: Path) -> bytes:
    parts = [sys.version.encode()]
    for name in ENV_FILES:
        p = root / name
        parts.append(p.read_bytes() if p.exists() else b"")
    return b"\0".join(parts)


def cache_key(book: Book, chapter: ChapterSource, params: dict, deps: list[str]) -> str:
    dep_parts = []
    for rel in sorted(deps):
        p = book.root / rel
        dep_parts.append(rel.encode() + b"\0" + (p.read_bytes() if p.exists() else b"<missing>"))
    return _sha(notebook_fingerprint(chapter.path), json.dumps(params, sort_keys=True).encode(),
                environment_fingerprint(book.root), *dep_parts)


def _depfile_cell(root: Path) -> dict:
    src = (  # the run's deps (the kernel's imports, its sweeps' workers' and closures) and sweeps
        "import json as _json\n"
        "from lib.run import run_summary as _run_summary\n"
        f"_json.dump(_run_summary({str(root.resolve())!r}), open({DEPFILE!r}, 'w'))\n"
    )
    return {"cell_type": "code", "execution_count": None, "id": "companion-depfile",
            "metadata": {"tags": ["remove-cell"]}, "outputs": [], "source": src}


def stored(out_dir: Path) -> dict | None:
    """The results.json document of the run in ``out_dir`` (lib.results), or None."""
    return results.read(out_dir)


def is_fresh(book: Book, chapter: ChapterSource, params: dict, out_dir: Path) -> tuple[bool, dict | None]:
    """Whether ``out_dir`` holds a complete run with the same cache key."""
    doc = stored(out_dir)
    if not doc:
        return False, None
    if not verify(out_dir):  # results.json edited, figures or notebook gone: not the run's result
        return False, None
    prov = doc.get("provenance", {})
    deps = prov.get("deps")
    if deps is None or "cache_key" not in prov:
        return False, doc
    return prov["cache_key"] == cache_key(book, chapter, params, deps), doc
