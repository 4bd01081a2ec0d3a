"""Theorem-versus-simulation claims, recorded by a chapter and saved to results.json.

A chapter creates one :class:`Claims` (``ch.claims``), records each quantitative comparison through
one of the helpers below (each decides ``holds`` from the numbers it is given, so a claim can
always fail), shows :meth:`Claims.table`, and finally saves results.json.

    claims.within("transition-ratio", "The OOD transition moves as 1/N_trg.",
                  value=ratio, low=1.4, high=2.8, source="paper",
                  alternative=("the transition does not depend on N_trg", 1.0),
                  control=Control("the same sweep on shortcut-free data", value=ratio_control))
    claims.close("lp-closed-form", "The LP optimum equals the closed form.",
                 theory=c_closed, simulation=c_lp, rtol=1e-6, kind="check")
    claims.at_most("spearman", "R and OOD accuracy are anti-correlated.",
                   value=rho, bound=-0.8, kind="empirical", false_alarm=2e-4,
                   power=Power("smallest |ρ| detectable at 2e-4 with 12 points, against the "
                               "paper's ρ = −0.9", detectable=0.78, effect=0.9, ceiling=1.0))

Three kinds (docs/design.md):

- ``theorem``: a paper's result (``source="paper"``) or the chapter's stated reconstruction of one
  (``source="reconstruction"``), tested on a simulation whose outcome is not fixed by construction.
  Must hold. Each names its ``alternative`` (the nearest wrong hypothesis and the value it
  predicts; the helper judges it with the claim's own rule and records whether the simulation
  rejects it) and its ``control``: the same pipeline with the theorem's mechanism removed or its
  hypothesis violated, judged by the same rule, which must *fail* there (:class:`Control`). A
  theorem claim whose control passes too does not test the theorem: it fails the run. Where no
  control exists the claim passes ``no_control="why"`` instead.
- ``check``: verifies the implementation or the setup (identities, brute force against a dynamic
  program, a configured value, a closed form evaluated by Monte Carlo). Must hold; counted apart.
- ``empirical``: a paper's experimental finding. It carries a :class:`Power` from which
  ``detects`` is *computed*: a positive control on the same pipeline, or the smallest effect the
  rule detects at its false-alarm rate, the paper's (or a stated) effect and the design's ceiling.
  Its verdict (:func:`verdict_of`): *reproduced* when the rule is a test that could have failed
  (it records a ``false_alarm`` rate; a tolerance on a point estimate records none) and it holds;
  *not reproduced* when it fails and the design could see the effect (detectable ≤ effect ≤
  ceiling, or the positive control passed); *not tested* otherwise.

A theorem or check claim the chapter expects to fail (a reading it reports as contradicted)
passes ``declared="why"``: it is shown as *fails (declared)* and does not fail the run; if it
holds after all, it fails the run (strict, like an expected failure in a test runner).

Every helper also takes ``false_alarm``: the false-alarm rate of the claim's decision rule under
its null (an interval, a z, a bootstrap, an exact test; ``0.0`` for an exact computation),
recorded in results.json (``null`` where the rule is a tolerance on a point estimate). A
chapter's rates share one budget, ``CHAPTER_FALSE_ALARM`` per run (:meth:`Claims.false_alarm_total`).

How each helper judges an alternative or a control (a number, or an array for ``all_close``):
``close``/``all_close`` by the claim's tolerance around the theory; ``within`` by the band
(an alternative ``p`` is rejected when the value lies outside ``[p − w, p + w]`` with ``w`` the
band's half-width, or outside ``p`` itself when ``p`` is a pair ``(low, high)``); ``at_most``
(theory: value ≤ bound) rejects an alternative "value ≥ p" when value < p and ``p`` itself
breaks the bound, and ``at_least`` rejects "value ≤ p" when value > p and ``p`` is below the
bound: a rival whose prediction passes the claim's own rule is not told apart by it. A
control's value is judged by the claim's own rule (the same band, bound or tolerance). Where
the comparison is bespoke, pass
``Alternative(statement, prediction, rejected=...)`` and ``Control(statement, value, holds=...)``.

A claim marked ``quick=False`` is recorded as skipped under the ``quick`` profile.

This module owns the claim vocabulary: :func:`status_of` (one claim's word), :func:`tally` (one
line for the CLI) and :func:`counts` (a status-page cell) read results.json records, so the
notebook, the CLI and the status page say the same thing. Rendering (HTML tables, badges) lives
in :mod:`lib.render`, which formats and never computes a number.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lib.results import SCHEMA_VERSION  # noqa: F401  (re-exported for the tests and the pipeline)
from lib.verdicts import (  # noqa: F401  (re-exported: the notebooks, pipeline and tests read them here)
    VERDICTS, CHAPTER_FALSE_ALARM, CONTROL_PASSES, DECLARED_FAILS, FAILS, HOLDS, KINDS, MAX_FALSE_ALARM, MUST_HOLD,
    NOT_REPRODUCED, NOT_TESTED, REPRODUCED, SKIPPED, SOURCES, STATUSES, UNEXPECTED_PASS, counts, failing,
    false_alarm_total, format_value, status_of, tally, verdict_of)



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
class Control:
    """A theorem claim's negative control: the same pipeline with the theorem's mechanism removed
    or its hypothesis violated (``statement`` says which), ``value`` the statistic the claim's rule
    is applied to there. ``holds``: the rule's outcome on the control (None: the helper judges
    ``value`` by the claim's own rule). The claim tests its theorem only if the control fails."""

    statement: str
    value: Any
    holds: bool | None = None

    def __post_init__(self):
        if not isinstance(self.statement, str) or not self.statement.strip():
            raise ValueError("Control needs a statement: which mechanism was removed or hypothesis violated")


class Power:
    """What an empirical claim's experiment could detect; ``detects`` is computed, never given.

    Either a positive control — ``control=True/False``: the same pipeline's rule on a case where
    the effect is present by construction, and whether it detected it — or the design's numbers:
    ``detectable`` (the smallest effect the rule detects at its false-alarm rate), ``effect`` (the
    paper's effect, or a stated one) and ``ceiling`` (the largest effect the design can show at
    all; ``None`` when unbounded), all as magnitudes in the claim's units. ``detects`` is
    ``detectable ≤ effect ≤ ceiling`` (and the control, when given). ``matched=False`` marks a
    comparison that cannot stand for the paper's — arms that differ in data or compute, a design
    outside the paper's regime, or a rule a rival passes as well — and the statement says which:
    such a design tests nothing (*not tested* whatever its outcome). ``statement``: one sentence
    a reader understands; ``value``: optional, a number, list or dict shown beside it.
    """

    def __init__(self, statement: str, *, detectable: float | None = None, effect: float | None = None,
                 ceiling: float | None = None, control: bool | None = None, matched: bool = True,
                 value: Any = None, **legacy):
        if legacy:
            raise ValueError(f"Power takes no {', '.join(sorted(legacy))}: detects is computed from a positive "
                             "control or from detectable, effect and ceiling")
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError("Power needs a statement: what the experiment could detect")
        numbers = {"detectable": detectable, "effect": effect, "ceiling": ceiling}
        for name, v in numbers.items():
            if v is not None and (isinstance(v, (bool, np.bool_)) or not _finite(v) or float(v) < 0):
                raise ValueError(f"Power.{name} must be a finite magnitude ≥ 0, got {v!r}")
        if control is not None and not isinstance(control, (bool, np.bool_)):
            raise ValueError(f"Power.control must be True or False (did the positive control pass?), got {control!r}")
        if control is None and (detectable is None or effect is None):
            raise ValueError("Power needs a positive control (control=True/False) or detectable and effect")
        self.statement = statement
        self.detectable = None if detectable is None else float(detectable)
        self.effect = None if effect is None else float(effect)
        self.ceiling = None if ceiling is None else float(ceiling)
        self.control = None if control is None else bool(control)
        self.matched = bool(matched)
        self.value = value

    @property
    def detects(self) -> bool:
        """Whether the design could have seen the effect: arms matched, the positive control (if
        any) passed, and detectable ≤ effect ≤ ceiling (where those are given)."""
        ok = self.matched and self.control is not False
        if self.detectable is not None and self.effect is not None:
            ok = ok and self.detectable <= self.effect and (self.ceiling is None or self.effect <= self.ceiling)
        return bool(ok)

    def record(self) -> dict:
        return {"statement": self.statement, "detects": self.detects, "value": to_jsonable(self.value),
                "detectable": self.detectable, "effect": self.effect, "ceiling": self.ceiling,
                "control": self.control, "matched": self.matched}


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
    power: dict | None = None  # empirical claims: Power.record()
    false_alarm: float | None = None  # statistical claims: the decision rule's false-alarm rate
    control: dict | None = None  # theorem claims: {"statement", "value", "holds"}
    no_control: str | None = None  # theorem claims without a control: why none exists
    declared: str | None = None  # theorem/check claims the chapter expects to fail: why

    @property
    def verdict(self) -> str | None:
        """An empirical claim's verdict (None for other kinds, and when skipped)."""
        if self.kind != "empirical":
            return None
        power = self.power or {}
        return verdict_of(self.holds, power.get("detects"), self.false_alarm, power.get("matched", True))

    @property
    def status(self) -> str:
        return status_of(claim_record(self))

    @property
    def discriminates(self) -> bool | None:
        """Whether the simulation rejects the named alternative (theorem claims only)."""
        if self.alternative is None or self.holds is None:
            return None
        return bool(self.alternative.get("rejected"))

    @property
    def kind_label(self) -> str:
        return "theorem (reconstructed)" if self.kind == "theorem" and self.source == "reconstruction" else self.kind

    def _ipython_display_(self) -> None:
        """A claim recorded as a cell's last line shows nothing: the claims table shows it."""


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


def _finite(*values: float) -> bool:
    try:
        return all(v is not None and math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False


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


def _text(name: str, value: Any, id: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"claim {id!r}: {name} must be a sentence saying why")
    return value


def _refuse_a_malformed_claim(id: str, kind: str, source, alternative, control, no_control, power,
                              declared) -> None:
    """The claim model's rules: which kinds take which fields (a ValueError names the rule)."""
    if kind not in KINDS:
        raise ValueError(f"claim {id!r}: kind must be one of {KINDS}, got {kind!r}")
    if source is not None and source not in SOURCES:
        raise ValueError(f"claim {id!r}: source must be one of {SOURCES}, got {source!r}")
    if kind != "theorem" and (source is not None or alternative is not None or control is not None
                              or no_control is not None):
        raise ValueError(f"claim {id!r}: only theorem claims take a source, an alternative and a control")
    if control is not None and no_control is not None:
        raise ValueError(f"claim {id!r}: a control, or no_control saying why none exists, not both")
    if kind == "empirical" and power is None:
        raise ValueError(f"claim {id!r}: an empirical claim needs power=Power(...): "
                         "what the experiment could detect")
    if kind != "empirical" and power is not None:
        raise ValueError(f"claim {id!r}: only empirical claims take a power")
    if kind == "empirical" and declared is not None:
        raise ValueError(f"claim {id!r}: an empirical claim is reported either way; only theorem and check "
                         "claims are declared to fail")
    if power is not None and not isinstance(power, Power):
        raise ValueError(f"claim {id!r}: power must be a Power(statement, ...)")


def _probability(id: str, false_alarm: Any) -> float | None:
    """A recorded false-alarm rate, checked to be a probability."""
    if false_alarm is None:
        return None
    if (isinstance(false_alarm, (bool, np.bool_)) or not isinstance(false_alarm, (int, float, np.number))
            or not _finite(false_alarm) or not 0 <= float(false_alarm) <= 1):
        raise ValueError(f"claim {id!r}: false_alarm must be a probability, got {false_alarm!r}")
    return float(false_alarm)


def _judged_alternative(id: str, alternative: Alternative | tuple | None,
                        rejects: Callable[[Any], bool] | None) -> dict | None:
    """The rival as recorded, rejected as given or by the helper's own rule."""
    if alternative is None:
        return None
    if not isinstance(alternative, Alternative):
        alternative = Alternative(*alternative)
    rejected = alternative.rejected
    if rejected is None:
        if rejects is None:
            raise ValueError(f"claim {id!r}: record() needs Alternative(..., rejected=...)")
        rejected = rejects(alternative.prediction)
    return {"statement": alternative.statement, "prediction": to_jsonable(alternative.prediction),
            "rejected": bool(rejected)}


def _judged_control(id: str, control: Control | None, rule: Callable[[Any], bool] | None) -> dict | None:
    """The negative control as recorded, judged as given or by the claim's own rule."""
    if control is None:
        return None
    if not isinstance(control, Control):
        raise ValueError(f"claim {id!r}: control must be a Control(statement, value, holds=None)")
    passed = control.holds
    if passed is None:
        if rule is None:
            raise ValueError(f"claim {id!r}: record() needs Control(..., holds=...)")
        passed = rule(control.value)
    return {"statement": control.statement, "value": to_jsonable(control.value), "holds": bool(passed)}


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
               false_alarm: float | None = None, control: Control | None = None,
               no_control: str | None = None, declared: str | None = None) -> Claim:
        """Record a comparison whose verdict the caller computed (prefer the helpers below).

        A theorem claim's ``alternative`` is then an :class:`Alternative` with ``rejected`` given
        and its ``control`` a :class:`Control` with ``holds`` given: only the helpers below know
        how to judge a bare prediction or control value.
        """
        return self._record(id, statement, theory=theory, simulation=simulation, holds=holds,
                            tolerance=tolerance, kind=kind, quick=quick, source=source,
                            alternative=alternative, power=power, false_alarm=false_alarm,
                            control=control, no_control=no_control, declared=declared, rule=None, rejects=None)

    def _record(self, id: str, statement: str, *, theory: Any, simulation: Any, holds: bool,
                tolerance: str, kind: str = "theorem", quick: bool = True, source: str | None = None,
                alternative: Alternative | tuple | None = None, power: Power | None = None,
                false_alarm: float | None = None, control: Control | None = None,
                no_control: str | None = None, declared: str | None = None,
                rule: Callable[[Any], bool] | None = None,
                rejects: Callable[[Any], bool] | None = None) -> Claim:
        """``record`` with the helper's own rule: ``rule(value)`` (does a value pass?) for judging
        a control, ``rejects(prediction)`` for judging an alternative."""
        _refuse_a_malformed_claim(id, kind, source, alternative, control, no_control, power, declared)
        if any(c.id == id for c in self.claims):
            raise ValueError(f"claim {id!r} recorded twice")
        skipped = self.profile == "quick" and not quick
        claim = Claim(id=id, kind=kind, statement=statement, theory=to_jsonable(theory),
                      simulation=to_jsonable(simulation), tolerance=tolerance,
                      holds=None if skipped else bool(holds), quick=quick, source=source,
                      alternative=_judged_alternative(id, alternative, rejects),
                      power=None if power is None else power.record(),
                      false_alarm=_probability(id, false_alarm),
                      control=None if skipped else _judged_control(id, control, rule),
                      no_control=_text("no_control", no_control, id), declared=_text("declared", declared, id))
        self.claims.append(claim)
        return claim

    def close(self, id: str, statement: str, *, theory: float, simulation: float,
              rtol: float = 0.0, atol: float = 0.0, tolerance: str | None = None, **kw) -> Claim:
        """|simulation − theory| ≤ atol + rtol·|theory| (both finite)."""
        def near(p, s=simulation):
            return _finite(p, s) and abs(s - p) <= atol + rtol * abs(p)

        return self._record(id, statement, theory=theory, simulation=simulation, holds=near(theory),
                            tolerance=tolerance or _closeness(atol, rtol), rule=lambda v: near(theory, v),
                            rejects=lambda p: not near(p), **kw)

    def all_close(self, id: str, statement: str, *, theory, simulation, rtol: float = 0.0,
                  atol: float = 0.0, tolerance: str | None = None, **kw) -> Claim:
        """Elementwise closeness of two arrays; records the theory values (or their shape and
        range when long) and the worst absolute and relative error."""
        t = np.asarray(theory, dtype=float)
        s = np.asarray(simulation, dtype=float)
        if t.shape != s.shape:
            raise ValueError(f"claim {id!r}: shapes differ, {t.shape} vs {s.shape}")

        def near(p, sim=s):
            sim = np.asarray(sim, dtype=float)
            p = np.broadcast_to(np.asarray(p, dtype=float), sim.shape)
            return bool(np.all(np.isfinite(sim)) and np.all(np.abs(sim - p) <= atol + rtol * np.abs(p)))

        def control_passes(values):
            values = np.asarray(values, dtype=float)
            return values.shape == s.shape and near(t, values)

        err = np.abs(s - t)
        nonzero = np.abs(t) > 0  # a relative error means nothing where the theory is 0
        worst_rel = float(np.max(err[nonzero] / np.abs(t[nonzero]))) if nonzero.any() else None
        return self._record(id, statement, theory=_array_summary(t),
                            simulation={"max_abs_err": float(err.max(initial=0.0)), "max_rel_err": worst_rel},
                            holds=near(t), tolerance=tolerance or "every " + _closeness(atol, rtol),
                            rule=control_passes, rejects=lambda p: not near(p), **kw)

    def at_most(self, id: str, statement: str, *, value: float, bound: float,
                tolerance: str | None = None, **kw) -> Claim:
        """value ≤ bound. ``theory`` is the bound, ``simulation`` the value."""
        return self._one_sided(id, statement, value, bound, "≤", tolerance, **kw)

    def at_least(self, id: str, statement: str, *, value: float, bound: float,
                 tolerance: str | None = None, **kw) -> Claim:
        """value ≥ bound."""
        return self._one_sided(id, statement, value, bound, "≥", tolerance, **kw)

    def _one_sided(self, id: str, statement: str, value: float, bound: float, side: str,
                   tolerance: str | None, **kw) -> Claim:
        passes = operator.le if side == "≤" else operator.ge

        def ok(v):
            return _finite(v, bound) and passes(v, bound)

        # a rival whose own prediction passes the rule cannot be told apart by it; one that
        # predicts a value beyond ours on the rule's side is rejected
        def rejects(p):
            return _finite(value, p) and value != p and passes(value, p) and not ok(p)

        return self._record(id, statement, theory=bound, simulation=value, holds=ok(value),
                            tolerance=tolerance or f"simulation {side} {format_value(float(bound))}", rule=ok,
                            rejects=rejects, **kw)

    def within(self, id: str, statement: str, *, value: float, low: float, high: float,
               tolerance: str | None = None, **kw) -> Claim:
        """low ≤ value ≤ high."""
        def ok(v):
            return _finite(v, low, high) and low <= v <= high

        def rejects(p):
            lo, hi = (p if np.ndim(p) else (p - (high - low) / 2, p + (high - low) / 2))
            return _finite(value, lo, hi) and not lo <= value <= hi

        return self._record(id, statement, theory=[low, high], simulation=value, holds=ok(value),
                            tolerance=tolerance or f"within [{format_value(float(low))}, {format_value(float(high))}]",
                            rule=ok, rejects=rejects, **kw)

    # -- reporting -----------------------------------------------------------------------
    @property
    def failed(self) -> list[Claim]:
        """The claims that fail a run (see :func:`failing`)."""
        ids = {c["id"] for c in failing(self.records())}
        return [c for c in self.claims if c.id in ids]

    def false_alarm_total(self) -> float:
        """The run's recorded false-alarm rates summed (the chapter's budget: ``CHAPTER_FALSE_ALARM``)."""
        return false_alarm_total(self.records())

    def table(self):
        """The claims table for display in the chapter (an HTML table that wraps long text)."""
        from lib.render import ClaimsTable

        return ClaimsTable(self.records())

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


def claim_record(c: Claim) -> dict:
    """A claim as stored in results.json: ``source``/``alternative``/``control``/``no_control``
    only on theorem claims, ``verdict``/``power`` only on empirical ones, ``declared`` only where
    given, ``false_alarm`` (or null) on every claim."""
    doc = asdict(c)
    if c.kind != "theorem":
        for key in ("source", "alternative", "control", "no_control"):
            doc.pop(key)
    else:
        for key in ("control", "no_control"):
            if doc[key] is None:
                doc.pop(key)
    if c.declared is None:
        doc.pop("declared")
    if c.kind == "empirical":
        doc["verdict"] = c.verdict
    else:
        doc.pop("power")
    return doc
