"""`companion seeds`: how often each claim holds over many seeds.

Each (chapter, seed) is an ordinary cached run under ``_build/seeds/<profile>/<slug>/seed-<s>/``;
the per-claim tally is written to ``_build/seeds/<profile>/<slug>/summary.json``::

    {"chapter": slug, "profile": profile, "seeds": [0, 1, ...],
     "claims": [{"id", "kind", "held", "failed", "skipped", "not_run", "failed_seeds", "verdicts"}]}

``verdicts`` maps each empirical verdict recorded ("reproduced", "not reproduced", "not tested") to
the seeds that got it (empty for theorem and check claims): an empirical claim is reported, not
held, so its tally is by verdict.
``skipped`` counts the seeds whose run recorded the claim as not evaluated at its profile
(``quick``); ``not_run`` the seeds whose run failed to execute or did not record the claim.
"""

from __future__ import annotations

import json
from pathlib import Path

from lib.claims import MUST_HOLD, SKIPPED, failing, status_of
from lib.pipeline.chapters import Book, ChapterSource, UsageError
from lib.pipeline.runner import RunResult, plan, run


MAX_SEED = 2**32 - 1  # every chapter's `seed` is ∈ [0, 4294967295]
MAX_SEEDS = 1000  # seeds in one sweep (each is a full chapter run)


def parse_seeds(text: str) -> list[int]:
    """``0-9``, ``3,17,42`` or both mixed (``0-4,17``) → sorted distinct seeds, each in
    [0, MAX_SEED], at most MAX_SEEDS of them (checked before any range is expanded)."""
    spans: list[tuple[int, int]] = []
    for part in text.split(","):
        part = part.strip()
        try:
            lo, _, hi = part.partition("-")
            lo, hi = int(lo), int(hi) if hi else int(lo)
            if not 0 <= lo <= hi:
                raise ValueError
        except ValueError:
            raise UsageError(f"--seeds: expected a range like 0-9 or a list like 3,17,42 of non-negative "
                             f"integers, got {text!r}") from None
        if hi > MAX_SEED:
            raise UsageError(f"--seeds: seeds are at most {MAX_SEED}, got {hi}")
        spans.append((lo, hi))
    too_many = UsageError(f"--seeds: at most {MAX_SEEDS} seeds in one sweep (each is a full run), got {text!r}")
    if any(hi - lo >= MAX_SEEDS for lo, hi in spans):
        raise too_many
    seeds = {s for lo, hi in spans for s in range(lo, hi + 1)}
    if len(seeds) > MAX_SEEDS:
        raise too_many
    return sorted(seeds)


def seeds_dir(book: Book, profile: str, chapter: ChapterSource) -> Path:
    return book.build_dir / "seeds" / profile / chapter.slug


def summarise(chapter: str, profile: str, seeds: list[int], results: dict[int, RunResult | dict]) -> dict:
    """The per-claim tally over seeds; ``results`` maps each seed to its results.json document
    (empty when the run failed)."""
    order: list[str] = []
    kinds: dict[str, str] = {}
    outcome: dict[str, dict[int, bool | None]] = {}  # absent: not recorded on that seed
    failing_on: dict[str, set[int]] = {}  # seeds on which the claim fails the run (lib.claims.failing)
    verdicts: dict[str, dict[str, list[int]]] = {}
    statuses: dict[str, dict[str, list[int]]] = {}
    for seed in seeds:
        stored = results.get(seed, {}).get("claims", [])
        for c in failing(stored):
            failing_on.setdefault(c["id"], set()).add(seed)
        for c in stored:
            if c["id"] not in kinds:
                order.append(c["id"])
                kinds[c["id"]] = c["kind"]
            outcome.setdefault(c["id"], {})[seed] = c.get("holds")
            statuses.setdefault(c["id"], {}).setdefault(status_of(c), []).append(seed)
            if c.get("verdict"):
                verdicts.setdefault(c["id"], {}).setdefault(c["verdict"], []).append(seed)
    claims = []
    for cid in order:
        got = outcome[cid]
        failed = sorted(failing_on.get(cid, ()))
        claims.append({"id": cid, "kind": kinds[cid], "held": sum(got.get(s) is True for s in seeds),
                       "failed": len(failed), "skipped": sum(s in got and got[s] is None for s in seeds),
                       "not_run": sum(s not in got for s in seeds), "failed_seeds": failed,
                       "verdicts": verdicts.get(cid, {}), "statuses": statuses.get(cid, {})})
    return {"chapter": chapter, "profile": profile, "seeds": seeds, "claims": claims}


def all_held(summary: dict, executed: bool = True) -> bool:
    """Every evaluated theorem and check claim came out as its chapter declares on every seed
    (held, or failed where declared), and every seed ran (a claim its profile skips is not a
    failure)."""
    return executed and all(c["failed"] == 0 and c["not_run"] == 0
                            for c in summary["claims"] if c["kind"] in MUST_HOLD)


def run_seeds(book: Book, chapters: list[ChapterSource], seeds: list[int], profile: str, jobs: int,
              scheduler: str | None, report, force: bool = False) -> list[tuple[dict, bool]]:
    """Run every (chapter, seed) and write each chapter's summary.json; returns, per chapter,
    the summary and whether every seed executed."""
    requests = [plan(book, ch, profile, {"seed": str(s)}, seeds_dir(book, profile, ch) / f"seed-{s}", force)
                for ch in chapters for s in seeds]
    runs = run(book, requests, jobs, scheduler, report)
    out = []
    for ch in chapters:
        mine = {int(r.out_dir.name.removeprefix("seed-")): r for r in runs if r.chapter.slug == ch.slug}
        summary = summarise(ch.slug, profile, seeds, {s: r.results for s, r in mine.items()})
        path = seeds_dir(book, profile, ch) / "summary.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=1))
        out.append((summary, all(r.status != "failed" for r in mine.values())))
    return out


def stored_summary(book: Book, profile: str, chapter: ChapterSource) -> dict | None:
    path = seeds_dir(book, profile, chapter) / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def claim_line(claim: dict, seeds: list[int], profile: str) -> str:
    """One claim's tally over seeds in words: 'holds 10/10', 'fails (declared) 10/10',
    'reproduced 7/10 (seeds …), not tested 3/10', 'skipped at quick on every seed'."""
    statuses = claim.get("statuses") or {}
    if not statuses:  # a summary written before statuses were stored
        statuses = {"holds": [None] * claim["held"], "FAILS": claim["failed_seeds"]}
    evaluated = {w: got for w, got in statuses.items() if w != SKIPPED}
    n = sum(len(got) for got in evaluated.values())
    if not evaluated:
        return f"skipped at {profile} on every seed"
    words = []
    for word, got in sorted(evaluated.items(), key=lambda kv: -len(kv[1])):
        words.append(f"{word} {len(got)}/{n}" + (f" (seeds {got})" if len(got) < n and None not in got else ""))
    line = ", ".join(words)
    if claim.get("skipped"):
        line += f"; skipped at {profile} on {claim['skipped']} of {len(seeds)} seeds"
    if claim.get("not_run"):
        line += f"; not run on {claim['not_run']} seeds"
    return line
