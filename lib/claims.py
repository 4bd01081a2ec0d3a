"""Theorem-versus-simulation claims, recorded by a chapter and saved to results.json.

A chapter creates one :class:`Claims` (``ch.claims``), records each quantitative comparison through
one of the helpers below (each decides ``holds`` from the numbers it is given, so a claim can
always fail), shows :meth:`Claims.table`, and finally saves results.json.

    claims.within("transition-ratio", "The OOD transition moves as 1/N_trg.",
                  value=ratio, low=1.4, high=2.8, source="paper",
                  alternative=("the transition does not depend on N_trg", 1.0))
    claims.close("lp-closed-form", "The LP optimum equals the closed form.",
                 theory=c_closed, simulation=c_lp, rtol=1e-6, kind="check")
    claims.at_most("spearman", "R and OOD accuracy are anti-correlated.",
                   value=rho, bound=-0.8, kind="empirical")

Three kinds (docs/design.md):

- ``theorem``: a paper's result (``source="paper"``) or the chapter's stated reconstruction of one
  (``source="reconstruction"``), tested on a simulation whose outcome is not fixed by construction.
  Must hold. Each names its ``alternative``: the natural wrong hypothesis and the value it
  predicts for the same quantity. The helper evaluates the alternative with the same rule as the
  claim (below) and records whether the simulation rejects it; a theorem whose alternative is not
  rejected does not discriminate (shown, but not a failure).
- ``check``: verifies the implementation or the setup (identities, brute force against a dynamic
  program, a configured value). Must hold; counted apart from theorems.
- ``empirical``: a paper's experimental finding. It carries a :class:`Power`: what the experiment
  could detect (a positive control's result, or the smallest effect it detects at the stated
  false-alarm rate against the paper's effect size) and whether that suffices to see the paper's
  effect. Its verdict (``VERDICTS``) is *reproduced* when it holds, *not reproduced* when it fails
  and the experiment could have seen the effect (``power.detects``), *not tested* when it fails
  and could not.

    claims.at_least("ood-accuracy", "The trained model generalises OOD.", value=acc, bound=0.9,
                    kind="empirical",
                    power=Power("the same pipeline on a planted induction task reaches 0.98",
                                detects=True, value=0.98),
                    false_alarm=1e-3)

Every helper also takes ``false_alarm``: the per-claim false-alarm rate of the claim's statistical
test under its null (an interval, a z, a bootstrap, an exact test), recorded in results.json
(``null`` where the claim is not statistical). The contract's ceiling is ``MAX_FALSE_ALARM``.

How each helper judges an alternative that predicts ``p`` (a number, or an array for
``all_close``): ``close``/``all_close`` reject it when the simulation is *not* within the claim's
tolerance of ``p``; ``within`` rejects it when the value lies outside ``[p − w, p + w]`` with
``w`` the claim's half-width (or outside ``p`` itself when ``p`` is a pair ``(low, high)``);
``at_most`` (theory: value ≤ bound) rejects an alternative "value ≥ p" when value < p, and
``at_least`` rejects "value ≤ p" when value > p. Where the comparison is bespoke (a model
comparison, a likelihood ratio), pass ``Alternative(statement, prediction, rejected=...)``.

Every helper words its tolerance itself ("simulation ≤ 0.1"); a statistical claim passes
``tolerance=`` to say instead how its level was sized ("largest |z| ≤ 4.1, level 2e-6 per test,
Bonferroni over the chapter's 420 tests").

A claim marked ``quick=False`` is recorded as skipped under the ``quick`` profile.

This module owns the claim vocabulary: :func:`status_of` (one claim's word: holds / FAILS /
skipped, or an empirical verdict), :func:`tally` (one line for the CLI) and :func:`counts` (one
table cell per kind for the status page) read results.json records, so the notebook, the CLI and
the status page say the same thing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lib.results import SCHEMA_VERSION  # noqa: F401  (re-exported for the tests and the pipeline)

KINDS = ("theorem", "check", "empirical")
MUST_HOLD = ("theorem", "check")  # kinds whose failure fails a run
SOURCES = ("paper", "reconstruction")
#: An empirical claim's verdict: it held; it failed where the experiment could see the paper's
#: effect; it failed where the experiment could not (its power statement says why).
REPRODUCED, NOT_REPRODUCED, NOT_TESTED = VERDICTS = ("reproduced", "not reproduced", "not tested")
#: A theorem or check claim's status, and the status of any claim a profile skips.
HOLDS, FAILS, SKIPPED = "holds", "FAILS", "skipped"
STATUSES = (HOLDS, FAILS, *VERDICTS, SKIPPED)
#: The contract's ceiling on a statistical claim's false-alarm rate at ``default`` (docs/design.md).
MAX_FALSE_ALARM = 1e-3


def current_profile() -> str:
    """The profile the runner executes this notebook under (``default`` outside the runner)."""
    from lib import run

    context = run.current()
    return context.profile if context else "default"


@dataclass
class Alternative:
    """The competing hypothesis a theorem claim rules out, and what it predicts."""

    statement: str
    prediction: Any
    rejected: bool | None = None  # None: let the claim's helper decide from the numbers


@dataclass
class Power:
    """What an empirical claim's experiment could detect.

    ``statement``: one sentence — the positive control's result (the same pipeline on a case where
    the effect is present by construction), or the smallest effect detectable at the stated
    false-alarm rate against the paper's effect size; where the experiment cannot see the effect,
    why not. ``detects``: whether the experiment could have seen the paper's effect. ``value``:
    optional, the control's result or the detectable effect (a number, list or dict).
    """

    statement: str
    detects: bool
    value: Any = None

    def __post_init__(self):
        if not isinstance(self.statement, str) or not self.statement.strip():
            raise ValueError("Power needs a statement: what the experiment could detect")
        if not isinstance(self.detects, (bool, np.bool_)):
            raise ValueError(f"Power.detects must be True or False, got {self.detects!r}")
        self.detects = bool(self.detects)


def verdict_of(holds: bool | None, detects: bool | None) -> str | None:
    """An empirical claim's verdict from its outcome and its power (None when skipped). An
    experiment that could not see the paper's effect (a confounded or underpowered design)
    tests nothing, whichever way its rule came out: *not tested*, never *reproduced*."""
    if holds is None:
        return None
    if not detects:
        return NOT_TESTED
    return REPRODUCED if holds else NOT_REPRODUCED


def status_of(claim: dict) -> str:
    """One stored claim's word (results.json record): ``holds``/``FAILS`` for theorem and check
    claims, the verdict for an empirical one, ``skipped`` when its profile did not evaluate it.
    (An empirical record without a power record, written before verdicts, reads as before.)"""
    holds = claim.get("holds")
    if holds is None:
        return SKIPPED
    if claim.get("kind") == "empirical":
        power = claim.get("power")
        return verdict_of(holds, True if power is None else power.get("detects"))
    return HOLDS if holds else FAILS


def tally(claims: list[dict]) -> str:
    """One line for the CLI: '3/5 claims hold' over the theorem and check claims a profile
    evaluated (those it skipped named apart), then the empirical verdicts, e.g.
    '4/4 claims hold; empirical: 1 reproduced, 2 not tested'."""
    must = [c for c in claims if c.get("kind") != "empirical"]
    held = sum(c.get("holds") is True for c in must)
    skipped = sum(c.get("holds") is None for c in claims)
    line = f"{held}/{len(must) - sum(c.get('holds') is None for c in must)} claims hold"
    emp = [status_of(c) for c in claims if c.get("kind") == "empirical" and c.get("holds") is not None]
    if emp:
        line += "; empirical: " + ", ".join(f"{emp.count(v)} {v}" for v in VERDICTS if emp.count(v))
    return line + (f" ({skipped} not evaluated at this profile)" if skipped else "")


def counts(claims: list[dict]) -> str:
    """One status-page cell for a group of stored claims of one kind: 'held/recorded' for
    theorem and check claims, the verdicts ('1 reproduced · 2 not tested') for empirical ones."""
    if not claims:
        return "—"
    words = [status_of(c) for c in claims]
    if all(c.get("kind") == "empirical" for c in claims):
        parts = [f"{words.count(v)} {v}" for v in (*VERDICTS, SKIPPED) if words.count(v)]
        return " · ".join(parts)
    return f"{words.count(HOLDS)}/{len(claims)}"


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
    source: str | None = None  # theorem claims: "paper" or "reconstruction"
    alternative: dict | None = None  # theorem claims: {"statement", "prediction", "rejected"}
    power: dict | None = None  # empirical claims: {"statement", "detects", "value"}
    false_alarm: float | None = None  # statistical claims: the per-claim false-alarm rate

    @property
    def verdict(self) -> str | None:
        """An empirical claim's verdict (None for other kinds, and when skipped)."""
        if self.kind != "empirical":
            return None
        return verdict_of(self.holds, (self.power or {}).get("detects"))

    @property
    def status(self) -> str:
        return status_of({"kind": self.kind, "holds": self.holds, "power": self.power})

    @property
    def discriminates(self) -> bool | None:
        """Whether the simulation rejects the named alternative (theorem claims only)."""
        if self.alternative is None or self.holds is None:
            return None
        return bool(self.alternative.get("rejected"))

    @property
    def kind_label(self) -> str:
        return "theorem (reconstructed)" if self.kind == "theorem" and self.source == "reconstruction" else self.kind


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


def _closeness(atol: float, rtol: float, what: str = "|sim − theory|") -> str:
    terms = [f"{atol:.3g}"] if atol else []
    if rtol:
        terms.append(f"{rtol:.3g}·|theory|")
    return f"{what} ≤ " + (" + ".join(terms) if terms else "0")


def _array_summary(values: np.ndarray) -> Any:
    """An array as recorded in results.json: the values if short, else shape and range."""
    if values.size <= 16:
        return values.tolist()
    return {"shape": list(values.shape), "min": float(np.nanmin(values)), "max": float(np.nanmax(values))}


class Claims:
    """The claims of one chapter run."""

    def __init__(self, chapter: str, profile: str | None = None):
        self.chapter = chapter
        self.profile = profile or current_profile()
        self.claims: list[Claim] = []

    # -- recording -----------------------------------------------------------------------
    def record(self, id: str, statement: str, *, theory: Any, simulation: Any, holds: bool,
               tolerance: str, kind: str = "theorem", quick: bool = True, source: str | None = None,
               alternative: Alternative | None = None, power: Power | None = None,
               false_alarm: float | None = None) -> Claim:
        """Record a comparison whose verdict the caller computed (prefer the helpers below).

        A theorem claim's ``alternative`` is then an :class:`Alternative` with ``rejected`` given:
        only the helpers below know how to judge a bare ``(statement, prediction)`` pair.
        """
        return self._record(id, statement, theory=theory, simulation=simulation, holds=holds,
                            tolerance=tolerance, kind=kind, quick=quick, source=source,
                            alternative=alternative, power=power, false_alarm=false_alarm, rejects=None)

    def _record(self, id: str, statement: str, *, theory: Any, simulation: Any, holds: bool,
                tolerance: str, kind: str = "theorem", quick: bool = True, source: str | None = None,
                alternative: Alternative | tuple | None = None, power: Power | None = None,
                false_alarm: float | None = None,
                rejects: Callable[[Any], bool] | None = None) -> Claim:
        """``record`` with the helper's own rule ``rejects(prediction)`` for judging a pair."""
        if kind not in KINDS:
            raise ValueError(f"claim {id!r}: kind must be one of {KINDS}, got {kind!r}")
        if any(c.id == id for c in self.claims):
            raise ValueError(f"claim {id!r} recorded twice")
        if source is not None and source not in SOURCES:
            raise ValueError(f"claim {id!r}: source must be one of {SOURCES}, got {source!r}")
        if kind != "theorem" and (source is not None or alternative is not None):
            raise ValueError(f"claim {id!r}: only theorem claims take a source and an alternative")
        if kind == "empirical" and power is None:
            raise ValueError(f"claim {id!r}: an empirical claim needs power=Power(statement, detects=...): "
                             "what the experiment could detect")
        if kind != "empirical" and power is not None:
            raise ValueError(f"claim {id!r}: only empirical claims take a power")
        if power is not None and not isinstance(power, Power):
            raise ValueError(f"claim {id!r}: power must be a Power(statement, detects, value)")
        if false_alarm is not None:
            if (isinstance(false_alarm, (bool, np.bool_)) or not isinstance(false_alarm, (int, float, np.number))
                    or not _finite(false_alarm) or not 0 <= float(false_alarm) <= 1):
                raise ValueError(f"claim {id!r}: false_alarm must be a probability, got {false_alarm!r}")
            false_alarm = float(false_alarm)
        alt = None
        if alternative is not None:
            if not isinstance(alternative, Alternative):
                alternative = Alternative(*alternative)
            rejected = alternative.rejected
            if rejected is None:
                if rejects is None:
                    raise ValueError(f"claim {id!r}: record() needs Alternative(..., rejected=...)")
                rejected = rejects(alternative.prediction)
            alt = {"statement": alternative.statement, "prediction": to_jsonable(alternative.prediction),
                   "rejected": bool(rejected)}
        skipped = self.profile == "quick" and not quick
        claim = Claim(id=id, kind=kind, statement=statement, theory=to_jsonable(theory),
                      simulation=to_jsonable(simulation), tolerance=tolerance,
                      holds=None if skipped else bool(holds), quick=quick, source=source, alternative=alt,
                      power=None if power is None else {"statement": power.statement, "detects": power.detects,
                                                        "value": to_jsonable(power.value)},
                      false_alarm=false_alarm)
        self.claims.append(claim)
        return claim

    def close(self, id: str, statement: str, *, theory: float, simulation: float,
              rtol: float = 0.0, atol: float = 0.0, tolerance: str | None = None, **kw) -> Claim:
        """|simulation − theory| ≤ atol + rtol·|theory| (both finite)."""
        def near(p):
            return _finite(p, simulation) and abs(simulation - p) <= atol + rtol * abs(p)

        return self._record(id, statement, theory=theory, simulation=simulation, holds=near(theory),
                           tolerance=tolerance or _closeness(atol, rtol), rejects=lambda p: not near(p), **kw)

    def all_close(self, id: str, statement: str, *, theory, simulation, rtol: float = 0.0,
                  atol: float = 0.0, tolerance: str | None = None, **kw) -> Claim:
        """Elementwise closeness of two arrays; records the theory values (or their shape and
        range when long) and the worst absolute and relative error."""
        t = np.asarray(theory, dtype=float)
        s = np.asarray(simulation, dtype=float)
        if t.shape != s.shape:
            raise ValueError(f"claim {id!r}: shapes differ, {t.shape} vs {s.shape}")

        def near(p):
            p = np.broadcast_to(np.asarray(p, dtype=float), s.shape)
            return bool(np.all(np.isfinite(s)) and np.all(np.abs(s - p) <= atol + rtol * np.abs(p)))

        err = np.abs(s - t)
        nonzero = np.abs(t) > 0  # a relative error means nothing where the theory is 0
        worst_rel = float(np.max(err[nonzero] / np.abs(t[nonzero]))) if nonzero.any() else None
        return self._record(id, statement, theory=_array_summary(t),
                           simulation={"max_abs_err": float(err.max(initial=0.0)), "max_rel_err": worst_rel},
                           holds=near(t), tolerance=tolerance or "every " + _closeness(atol, rtol),
                           rejects=lambda p: not near(p), **kw)

    def at_most(self, id: str, statement: str, *, value: float, bound: float,
                tolerance: str | None = None, **kw) -> Claim:
        """value ≤ bound. ``theory`` is the bound, ``simulation`` the value."""
        ok = _finite(value, bound) and value <= bound
        return self._record(id, statement, theory=bound, simulation=value, holds=ok,
                           tolerance=tolerance or f"simulation ≤ {format_value(float(bound))}",
                           rejects=lambda p: _finite(value, p) and value < p, **kw)

    def at_least(self, id: str, statement: str, *, value: float, bound: float,
                 tolerance: str | None = None, **kw) -> Claim:
        """value ≥ bound."""
        ok = _finite(value, bound) and value >= bound
        return self._record(id, statement, theory=bound, simulation=value, holds=ok,
                           tolerance=tolerance or f"simulation ≥ {format_value(float(bound))}",
                           rejects=lambda p: _finite(value, p) and value > p, **kw)

    def within(self, id: str, statement: str, *, value: float, low: float, high: float,
               tolerance: str | None = None, **kw) -> Claim:
        """low ≤ value ≤ high."""
        ok = _finite(value, low, high) and low <= value <= high

        def rejects(p):
            lo, hi = (p if np.ndim(p) else (p - (high - low) / 2, p + (high - low) / 2))
            return _finite(value, lo, hi) and not lo <= value <= hi

        return self._record(id, statement, theory=[low, high], simulation=value, holds=ok,
                           tolerance=tolerance or f"within [{format_value(float(low))}, {format_value(float(high))}]",
                           rejects=rejects, **kw)

    # -- reporting -----------------------------------------------------------------------
    @property
    def failed(self) -> list[Claim]:
        """Theorem and check claims that do not hold (these fail a run)."""
        return [c for c in self.claims if c.kind in MUST_HOLD and c.holds is False]

    def table(self):
        """The claims table for display in the chapter (an HTML table that wraps long text)."""
        return ClaimsTable(self.claims)

    def records(self) -> list[dict]:
        """The claims as results.json stores them."""
        return [claim_record(c) for c in self.claims]

    def save(self, out_dir: str | os.PathLike, metrics: dict | None = None, parameters: dict | None = None,
             provenance: dict | None = None) -> Path:
        """Write results.json through :mod:`lib.results` (a chapter calls ``Chapter.save``, which
        adds its parameters; the runner adds its provenance afterwards)."""
        from lib import results

        return results.write(out_dir, results.document(
            chapter=self.chapter, profile=self.profile, parameters=to_jsonable(parameters or {}),
            claims=self.records(), metrics=to_jsonable(metrics or {}), provenance=provenance))


def failing(claims: list[dict]) -> list[dict]:
    """The stored claims (results.json records) of a must-hold kind that did not hold."""
    return [c for c in claims if c.get("kind") in MUST_HOLD and c.get("holds") is False]


def claim_record(c: Claim) -> dict:
    """A claim as stored in results.json: ``source``/``alternative`` only on theorem claims,
    ``verdict``/``power`` only on empirical ones, ``false_alarm`` (or null) on every claim."""
    doc = asdict(c)
    if c.kind != "theorem":
        doc.pop("source")
        doc.pop("alternative")
    if c.kind == "empirical":
        doc["verdict"] = c.verdict
    else:
        doc.pop("power")
    return doc


BADGE_COLOURS = {HOLDS: "#1b7837", REPRODUCED: "#1b7837", FAILS: "#b2182b",
                 NOT_REPRODUCED: "#b35806", NOT_TESTED: "#4d4d9f", SKIPPED: "#6b6b6b"}


def power_text(power: dict | None) -> str:
    """An empirical claim's power record as one line of text."""
    if not power:
        return "—"
    value = power.get("value")
    tail = f" ({format_value(value)})" if value is not None else ""
    return (f"{power['statement']}{tail}: "
            + ("could detect the paper's effect" if power.get("detects") else "could not detect the paper's effect"))


def badge(status: str) -> str:
    """A coloured verdict badge (inline HTML) for a claim status."""
    colour = BADGE_COLOURS.get(status, "#6b6b6b")
    return (f'<span class="claim-badge" style="background:{colour};color:#fff;border-radius:0.6em;'
            f'padding:0.05em 0.5em;white-space:nowrap">{status}</span>')


def discrimination_text(alternative: dict | None, holds: bool | None) -> str:
    if alternative is None:
        return "—"
    verdict = "rejected" if alternative.get("rejected") else "not rejected (does not discriminate)"
    return f"{alternative['statement']} (predicts {format_value(alternative.get('prediction'))}): {verdict}"


class ClaimsTable:
    """The chapter's claims rendered for reading: full statements, tolerances in words, the
    alternative each theorem rules out, coloured verdicts. Displays as HTML in the notebook and
    as plain text elsewhere."""

    def __init__(self, claims: list[Claim]):
        self.claims = list(claims)

    def rows(self) -> list[dict]:
        return [{"claim": c.id, "kind": c.kind_label, "statement": c.statement,
                 "theory": format_value(c.theory), "simulation": format_value(c.simulation),
                 "tolerance": c.tolerance + (f" (false-alarm rate {c.false_alarm:.2g})"
                                             if c.false_alarm is not None else ""),
                 "alternative": (discrimination_text(c.alternative, c.holds) if c.kind != "empirical"
                                 else "power: " + power_text(c.power)),
                 "status": c.status} for c in self.claims]

    def to_frame(self):
        import pandas as pd

        rows = self.rows()
        return pd.DataFrame(rows).set_index("claim") if rows else pd.DataFrame()

    def _repr_html_(self) -> str:
        from html import escape

        head = ("verdict", "claim", "kind", "statement", "theory", "simulation", "tolerance",
                "alternative ruled out (theorems) or power (empirical)")
        body = []
        for r in self.rows():
            cells = [badge(r["status"]), f"<code>{escape(r['claim'])}</code>", escape(r["kind"]),
                     escape(r["statement"]), escape(r["theory"]), escape(r["simulation"]),
                     escape(r["tolerance"]), escape(r["alternative"])]
            body.append("<tr>" + "".join(f'<td style="text-align:left;vertical-align:top">{c}</td>'
                                         for c in cells) + "</tr>")
        header = "".join(f'<th style="text-align:left">{h}</th>' for h in head)
        return (f'<table class="claims-table" style="table-layout:auto;width:100%;font-size:0.9em">'
                f"<thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    def __repr__(self) -> str:
        lines = [f"{r['status']:>14}  {r['claim']}: {r['statement']}" for r in self.rows()]
        return "\n".join(lines) if lines else "(no claims)"
