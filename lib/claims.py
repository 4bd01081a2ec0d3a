"""Theorem-versus-simulation claims, recorded by a chapter and saved to results.json.

A chapter creates one :class:`Claims`, records each quantitative check through one of the
comparison helpers (each decides ``holds`` from the numbers it is given, so a claim can
always fail), shows :meth:`Claims.table`, and finally calls :meth:`Claims.save`.

    claims = Claims("01-induction-head")
    claims.close("lp-closed-form", "The LP optimum equals the closed form.",
                 theory=c_closed, simulation=c_lp, rtol=1e-6)
    claims.at_most("spearman", "R and OOD accuracy are anti-correlated.",
                   value=rho, bound=-0.8)
    claims.save(out_dir, metrics={"ood_accuracy": records})

Two kinds (DESIGN.md): ``theorem`` claims must hold at the ``default`` profile;
``empirical`` claims restate a paper's experimental finding and are reported either way.
A claim marked ``quick=False`` is recorded as skipped under the ``quick`` profile.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("theorem", "empirical")
PROFILE_ENV = "COMPANION_PROFILE"


def current_profile() -> str:
    """The profile the runner executes this notebook under (``default`` in a plain Jupyter run)."""
    return os.environ.get(PROFILE_ENV, "default")


@dataclass
class Claim:
    id: str
    kind: str
    statement: str
    theory: Any
    simulation: Any
    tolerance: str
    holds: bool | None  # None: skipped under this profile
    quick: bool = True

    @property
    def status(self) -> str:
        if self.holds is None:
            return "skipped"
        if self.kind == "empirical":
            return "reproduced" if self.holds else "not reproduced"
        return "holds" if self.holds else "FAILS"


def to_jsonable(value: Any) -> Any:
    """Numpy/torch scalars and arrays, tuples and NaN made JSON-safe (NaN and inf become None)."""
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def format_value(value: Any) -> str:
    """A claim's theory or simulation value as short text (4 significant digits)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k} = {format_value(v)}" for k, v in value.items())
    if value is None:
        return "—"
    return str(value)


def _finite(*values: float) -> bool:
    return all(v is not None and math.isfinite(float(v)) for v in values)


class Claims:
    """The claims of one chapter run."""

    def __init__(self, chapter: str, profile: str | None = None):
        self.chapter = chapter
        self.profile = profile or current_profile()
        self.claims: list[Claim] = []

    # -- recording -----------------------------------------------------------------------
    def record(self, id: str, statement: str, *, theory: Any, simulation: Any, holds: bool,
               tolerance: str, kind: str = "theorem", quick: bool = True) -> Claim:
        """Record a check whose verdict the caller computed (prefer the helpers below)."""
        if kind not in KINDS:
            raise ValueError(f"claim {id!r}: kind must be one of {KINDS}, got {kind!r}")
        if any(c.id == id for c in self.claims):
            raise ValueError(f"claim {id!r} recorded twice")
        skipped = self.profile == "quick" and not quick
        claim = Claim(id=id, kind=kind, statement=statement, theory=to_jsonable(theory),
                      simulation=to_jsonable(simulation), tolerance=tolerance,
                      holds=None if skipped else bool(holds), quick=quick)
        self.claims.append(claim)
        return claim

    def close(self, id: str, statement: str, *, theory: float, simulation: float,
              rtol: float = 0.0, atol: float = 0.0, **kw) -> Claim:
        """|simulation − theory| ≤ atol + rtol·|theory| (both finite)."""
        ok = _finite(theory, simulation) and abs(simulation - theory) <= atol + rtol * abs(theory)
        return self.record(id, statement, theory=theory, simulation=simulation, holds=ok,
                           tolerance=f"|sim − theory| ≤ {atol:g} + {rtol:g}·|theory|", **kw)

    def all_close(self, id: str, statement: str, *, theory, simulation, rtol: float = 0.0,
                  atol: float = 0.0, **kw) -> Claim:
        """Elementwise closeness of two arrays; records the worst absolute and relative error."""
        t = np.asarray(theory, dtype=float)
        s = np.asarray(simulation, dtype=float)
        if t.shape != s.shape:
            raise ValueError(f"claim {id!r}: shapes differ, {t.shape} vs {s.shape}")
        err = np.abs(s - t)
        ok = bool(np.all(np.isfinite(s)) and np.all(err <= atol + rtol * np.abs(t)))
        worst_rel = float(np.max(err / np.maximum(np.abs(t), np.finfo(float).tiny))) if t.size else 0.0
        return self.record(id, statement, theory=0.0,
                           simulation={"max_abs_err": float(err.max(initial=0.0)),
                                       "max_rel_err": worst_rel},
                           holds=ok, tolerance=f"every |sim − theory| ≤ {atol:g} + {rtol:g}·|theory|",
                           **kw)

    def at_most(self, id: str, statement: str, *, value: float, bound: float, **kw) -> Claim:
        """value ≤ bound. ``theory`` is the bound, ``simulation`` the value."""
        ok = _finite(value, bound) and value <= bound
        return self.record(id, statement, theory=bound, simulation=value, holds=ok,
                           tolerance="simulation ≤ theory", **kw)

    def at_least(self, id: str, statement: str, *, value: float, bound: float, **kw) -> Claim:
        """value ≥ bound."""
        ok = _finite(value, bound) and value >= bound
        return self.record(id, statement, theory=bound, simulation=value, holds=ok,
                           tolerance="simulation ≥ theory", **kw)

    def within(self, id: str, statement: str, *, value: float, low: float, high: float,
               **kw) -> Claim:
        """low ≤ value ≤ high."""
        ok = _finite(value, low, high) and low <= value <= high
        return self.record(id, statement, theory=[low, high], simulation=value, holds=ok,
                           tolerance="theory[0] ≤ simulation ≤ theory[1]", **kw)

    # -- reporting -----------------------------------------------------------------------
    @property
    def failed(self) -> list[Claim]:
        return [c for c in self.claims if c.kind == "theorem" and c.holds is False]

    def table(self):
        """A pandas DataFrame of the claims, for display in the chapter."""
        import pandas as pd

        rows = [{"claim": c.id, "kind": c.kind, "statement": c.statement, "theory": format_value(c.theory),
                 "simulation": format_value(c.simulation), "tolerance": c.tolerance, "status": c.status}
                for c in self.claims]
        return pd.DataFrame(rows).set_index("claim") if rows else pd.DataFrame()

    def save(self, out_dir: str | os.PathLike, metrics: dict | None = None) -> Path:
        """Write results.json (the runner adds parameters and provenance afterwards)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "results.json"
        previous = json.loads(path.read_text()) if path.exists() else {}
        doc = {"chapter": self.chapter, "profile": self.profile,
               "parameters": previous.get("parameters", {}),
               "claims": [{k: v for k, v in asdict(c).items()} for c in self.claims],
               "metrics": to_jsonable(metrics or {}),
               "provenance": previous.get("provenance", {})}
        path.write_text(json.dumps(doc, indent=1, allow_nan=False))
        return path
