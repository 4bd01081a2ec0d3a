"""The claims' vocabulary: kinds, statuses and verdicts, and the words every reader of a stored claim
(a results.json record) uses — the notebook's table, the CLI, the status page, the records and the
tests alike. :mod:`lib.claims` records claims and re-exports all of this; :mod:`lib.render` draws
them. Pure functions of stored records: nothing here computes a number of a run."""

from __future__ import annotations

from typing import Any

KINDS = ("theorem", "check", "empirical")
MUST_HOLD = ("theorem", "check")  # kinds whose failure fails a run
SOURCES = ("paper", "reconstruction")
#: An empirical claim's verdict: a test that could have failed held; it failed where the design
#: could see the paper's effect; anything else (its power record says why).
REPRODUCED, NOT_REPRODUCED, NOT_TESTED = VERDICTS = ("reproduced", "not reproduced", "not tested")
#: A theorem or check claim's status, and the status of any claim a profile skips.
HOLDS, FAILS, SKIPPED = "holds", "FAILS", "skipped"
#: A declared finding (``declared=``): it failed as the chapter says it does; or it held, which
#: fails the run (strict). A theorem claim whose negative control passes too: fails the run.
DECLARED_FAILS, UNEXPECTED_PASS = "fails (declared)", "holds (declared to fail)"
CONTROL_PASSES = "FAILS (control passes too)"
STATUSES = (HOLDS, FAILS, DECLARED_FAILS, UNEXPECTED_PASS, CONTROL_PASSES, *VERDICTS, SKIPPED)
#: The contract's ceiling on one statistical claim's false-alarm rate at ``default``, and the
#: budget a chapter's claims share per run (docs/design.md): their rates sum to at most this.
MAX_FALSE_ALARM = 1e-3
CHAPTER_FALSE_ALARM = 1e-3


def verdict_of(holds: bool | None, detects: bool | None, false_alarm: float | None = 0.0,
               matched: bool = True) -> str | None:
    """An empirical claim's verdict (None when skipped). *Reproduced*: its rule is a test that
    could have failed (it has a false-alarm rate) and it holds, on matched arms. *Not
    reproduced*: it fails where the design could have seen the effect. Otherwise *not tested*:
    a tolerance on a point estimate, a confounded comparison, or a failure the design could not
    have avoided decides nothing."""
    if holds is None:
        return None
    if holds:
        return REPRODUCED if false_alarm is not None and matched else NOT_TESTED
    return NOT_REPRODUCED if detects else NOT_TESTED


def status_of(claim: dict) -> str:
    """One stored claim's word (a results.json record): ``holds``/``FAILS`` for theorem and check
    claims (a declared finding: ``fails (declared)`` or ``holds (declared to fail)``; a theorem
    whose negative control passes too: ``FAILS (control passes too)``), the verdict for an
    empirical one, ``skipped`` when its profile did not evaluate it."""
    holds = claim.get("holds")
    if holds is None:
        return SKIPPED
    if claim.get("kind") == "empirical":
        if claim.get("verdict") in VERDICTS:
            return claim["verdict"]
        power = claim.get("power")  # a record written before verdicts were stored
        return verdict_of(holds, True if power is None else power.get("detects"))
    if claim.get("declared"):
        return UNEXPECTED_PASS if holds else DECLARED_FAILS
    if holds and claim.get("kind") == "theorem" and (claim.get("control") or {}).get("holds"):
        return CONTROL_PASSES
    return HOLDS if holds else FAILS


def failing(claims: list[dict]) -> list[dict]:
    """The stored claims that fail a run: a theorem or check claim that did not hold (unless the
    chapter declared it), a declared failure that held, a theorem whose negative control passed."""
    return [c for c in claims if c.get("kind") in MUST_HOLD
            and status_of(c) in (FAILS, UNEXPECTED_PASS, CONTROL_PASSES)]


def tally(claims: list[dict]) -> str:
    """One line for the CLI: '3/5 claims hold' over the theorem and check claims a profile
    evaluated (declared findings named apart), then the empirical verdicts, then what the profile
    skipped, e.g. '4/4 claims hold; 1 fails as declared; empirical: 1 reproduced, 2 not tested'."""
    must = [c for c in claims if c.get("kind") != "empirical" and c.get("holds") is not None]
    declared = [c for c in must if status_of(c) == DECLARED_FAILS]
    rest = [c for c in must if c not in declared]
    line = f"{sum(status_of(c) == HOLDS for c in rest)}/{len(rest)} claims hold"
    if declared:
        line += f"; {len(declared)} fail{'s' if len(declared) == 1 else ''} as declared"
    emp = [status_of(c) for c in claims if c.get("kind") == "empirical" and c.get("holds") is not None]
    if emp:
        line += "; empirical: " + ", ".join(f"{emp.count(v)} {v}" for v in VERDICTS if emp.count(v))
    skipped = sum(c.get("holds") is None for c in claims)
    return line + (f" ({skipped} skipped at this profile)" if skipped else "")


def counts(claims: list[dict]) -> str:
    """One status-page cell for a group of stored claims of one kind: 'held/recorded' for
    theorem and check claims (declared findings named apart), the verdicts ('1 reproduced · 2
    not tested') for empirical ones."""
    if not claims:
        return "—"
    words = [status_of(c) for c in claims]
    if all(c.get("kind") == "empirical" for c in claims):
        parts = [f"{words.count(v)} {v}" for v in (*VERDICTS, SKIPPED) if words.count(v)]
        return " · ".join(parts)
    declared = words.count(DECLARED_FAILS)
    cell = f"{words.count(HOLDS)}/{len(claims) - declared}"
    return cell + (f" · {declared} fails (declared)" if declared else "")


def false_alarm_total(claims: list[dict]) -> float:
    """The sum of a run's recorded false-alarm rates (a chapter's budget is ``CHAPTER_FALSE_ALARM``):
    by Bonferroni's inequality, at most the chance that any of its statistical claims fails by
    chance. Skipped claims decide nothing and are not counted."""
    return float(sum(c.get("false_alarm") or 0.0 for c in claims if c.get("holds") is not None))


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
