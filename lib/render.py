"""How claims look to a reader: badges, one-line power and control texts, the claims table.

Presentation only: every function here formats stored claim records (results.json dicts, see
:mod:`lib.claims`) as text or HTML and computes no number a claim or metric depends on, so a
change here never makes a recorded run stale (docs/design.md, Records).
"""

from __future__ import annotations

from html import escape

from lib.verdicts import (CONTROL_PASSES, DECLARED_FAILS, FAILS, HOLDS, NOT_REPRODUCED, NOT_TESTED, REPRODUCED,
                        SKIPPED, UNEXPECTED_PASS, format_value, status_of)

BADGE_COLOURS = {HOLDS: "#1b7837", REPRODUCED: "#1b7837", FAILS: "#b2182b", UNEXPECTED_PASS: "#b2182b",
                 CONTROL_PASSES: "#b2182b", DECLARED_FAILS: "#8c510a", NOT_REPRODUCED: "#b35806",
                 NOT_TESTED: "#4d4d9f", SKIPPED: "#6b6b6b"}


def kind_label(claim: dict) -> str:
    kind = claim.get("kind", "")
    return "theorem (reconstructed)" if kind == "theorem" and claim.get("source") == "reconstruction" else kind


def power_text(power: dict | None) -> str:
    """An empirical claim's power record as one line of text."""
    if not power:
        return "—"
    parts = [power["statement"]]
    value = power.get("value")
    if value is not None:
        parts[0] += f" ({format_value(value)})"
    numbers = [f"{name} {format_value(power[name])}" for name in ("detectable", "effect", "ceiling")
               if power.get(name) is not None]
    if numbers:
        parts.append(", ".join(numbers))
    if power.get("control") is not None:
        parts.append("positive control " + ("passed" if power["control"] else "failed"))
    if power.get("matched") is False:
        parts.append("arms not matched in data or compute")
    return "; ".join(parts) + (": could detect the paper's effect" if power.get("detects")
                               else ": could not detect the paper's effect")


def discrimination_text(alternative: dict | None, holds: bool | None = None) -> str:
    if alternative is None:
        return "—"
    verdict = "rejected" if alternative.get("rejected") else "not rejected (does not discriminate)"
    return f"{alternative['statement']} (predicts {format_value(alternative.get('prediction'))}): {verdict}"


def control_text(claim: dict) -> str:
    """A theorem claim's negative control (or why it has none) as one line."""
    control = claim.get("control")
    if control:
        outcome = ("fails, as it must" if not control.get("holds")
                   else "passes too (the claim does not test the theorem)")
        return f"{control['statement']} ({format_value(control.get('value'))}): {outcome}"
    if claim.get("no_control"):
        return f"no control: {claim['no_control']}"
    return "—"


def badge(status: str) -> str:
    """A coloured verdict badge (inline HTML) for a claim status."""
    colour = BADGE_COLOURS.get(status, "#6b6b6b")
    return (f'<span class="claim-badge" style="background:{colour};color:#fff;border-radius:0.6em;'
            f'padding:0.05em 0.5em;white-space:nowrap">{escape(status)}</span>')


def rows(claims: list[dict]) -> list[dict]:
    """One plain-text row per stored claim."""
    out = []
    for c in claims:
        tolerance = c.get("tolerance", "")
        if c.get("false_alarm") is not None:
            tolerance += f" (false-alarm rate {c['false_alarm']:.2g})"
        if c.get("kind") == "empirical":
            against = "power: " + power_text(c.get("power"))
        else:
            against = discrimination_text(c.get("alternative"))
            if c.get("kind") == "theorem":
                against += "; control: " + control_text(c)
        if c.get("declared"):
            against += f"; declared to fail: {c['declared']}"
        out.append({"claim": c["id"], "kind": kind_label(c), "statement": c.get("statement", ""),
                    "theory": format_value(c.get("theory")), "simulation": format_value(c.get("simulation")),
                    "tolerance": tolerance, "alternative": against, "status": status_of(c)})
    return out


class ClaimsTable:
    """A chapter's stored claims rendered for reading, four columns wide so that it reads at
    laptop widths: the verdict; the claim (id, kind, statement); the numbers (theory,
    simulation, rule, each on its own labelled line); what it was tested against (the rival and
    the negative control for theorems, the power for empirical claims). HTML in a notebook,
    plain text elsewhere."""

    def __init__(self, claims: list[dict]):
        self.claims = list(claims)

    def rows(self) -> list[dict]:
        return rows(self.claims)

    def to_frame(self):
        import pandas as pd

        table = self.rows()
        return pd.DataFrame(table).set_index("claim") if table else pd.DataFrame()

    def _repr_html_(self) -> str:
        head = ("verdict", "claim", "numbers", "tested against")
        body = []
        for r in self.rows():
            numbers = (f"<div><b>theory</b> {escape(r['theory'])}</div>"
                       f"<div><b>simulation</b> {escape(r['simulation'])}</div>"
                       f"<div><b>rule</b> {escape(r['tolerance'])}</div>")
            claim = (f"<code>{escape(r['claim'])}</code> <em>({escape(r['kind'])})</em>"
                     f"<div>{escape(r['statement'])}</div>")
            cells = [badge(r["status"]), claim, numbers, escape(r["alternative"])]
            style = "text-align:left;vertical-align:top;overflow-wrap:anywhere"
            body.append("<tr>" + "".join(f'<td style="{style}">{c}</td>' for c in cells) + "</tr>")
        header = "".join(f'<th style="text-align:left">{h}</th>' for h in head)
        return ('<div class="claims-table-wrap" style="max-width:100%">'
                '<table class="claims-table" style="table-layout:fixed;width:100%;font-size:0.9em">'
                '<colgroup><col style="width:11%"><col style="width:33%"><col style="width:26%">'
                '<col style="width:30%"></colgroup>'
                f"<thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")

    def __repr__(self) -> str:
        lines = [f"{r['status']:>14}  {r['claim']}: {r['statement']}" for r in self.rows()]
        return "\n".join(lines) if lines else "(no claims)"
