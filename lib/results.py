"""results.json: the one document a chapter run leaves, defined, written and read here only.

A `companion run` writes it twice, both times through :func:`write`: the notebook
(:meth:`lib.chapter.Chapter.save`: chapter, profile, parameters, claims, metrics, and under plain
papermill the provenance it can know) and then the runner (its full provenance). The runner, the
CLI, the status page, the records and the tests read it back with :func:`read`. Its schema is in
docs/design.md ("results.json"); the claims' own fields and words are :mod:`lib.claims`'.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SCHEMA_VERSION = 2
NAME = "results.json"
KEYS = ("schema_version", "chapter", "profile", "parameters", "claims", "metrics", "provenance")


def document(*, chapter: str, profile: str, parameters: dict, claims: list[dict], metrics: dict,
             provenance: dict | None = None) -> dict:
    """A results.json document (every value already JSON-able: see lib.claims.to_jsonable)."""
    return {"schema_version": SCHEMA_VERSION, "chapter": chapter, "profile": profile,
            "parameters": parameters, "claims": claims, "metrics": metrics, "provenance": provenance or {}}


def write(folder: str | os.PathLike, doc: dict) -> Path:
    """Write ``doc`` as ``folder/results.json`` (atomically: a reader sees the old or the new
    document, never half of one). NaN and infinities are refused, not written as invalid JSON."""
    if tuple(doc) != KEYS or doc["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"a results.json document has the keys {KEYS} (schema {SCHEMA_VERSION}), "
                         f"got {tuple(doc)}")
    path = Path(folder) / NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{NAME}.{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False))
    os.replace(tmp, path)
    return path


def read(folder: str | os.PathLike) -> dict | None:
    """The results.json document in ``folder``, or None where there is none (or it is unreadable)."""
    try:
        doc = json.loads((Path(folder) / NAME).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
