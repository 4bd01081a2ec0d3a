"""Recorded runs: a small, committed record of one chapter run, and what the book shows from it.

``companion record CH --profile paper`` copies from the run in ``_build/runs/<profile>/<slug>/``
its parameters, claims and metrics and its provenance (commit, cache key, the library files it
imported, machine, wall and CPU time) into ``book/records/<profile>/<slug>.json``, with a
fingerprint of every input the cache key covers (``inputs``), so that a record whose key no
longer matches the current code can say what changed. Records are data: no notebook, no figure.

The book build shows each chapter's ``paper`` record on the chapter's page ("At the `paper`
profile") and in the reproducing page's table, marked *stale* (and why) when the code, the
notebook, the environment or the profile's parameters changed since, and "not yet recorded"
where there is none. ``companion verify`` reruns a recorded chapter with the record's parameters
and compares the verdicts of its claims and its metrics with the record.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
from datetime import datetime
from html import escape
from pathlib import Path

from lib.claims import format_value, status_of, tally
from lib.pipeline.chapters import Book, ChapterSource, UsageError
from lib.pipeline.runner import ENV_FILES, cache_key, is_fresh, notebook_fingerprint, resolve
from lib.render import ClaimsTable

RECORD_VERSION = 1
#: The profile the book's pages show records of.
SHOWN = "paper"
#: Placeholder in book/reproducing.md replaced by the table of records.
TABLE_MARKER = "<!-- paper-records -->"
#: Metrics that are wall-clock measurements: they differ between any two runs.
TIMINGS = "timings"
#: How far a rerun's metric may move and still agree with the record.
RTOL, ATOL = 1e-6, 1e-12
#: Metrics shown on a chapter page (the record keeps them all).
SHOWN_METRICS = 24


def record_path(book: Book, profile: str, chapter: ChapterSource) -> Path:
    return book.root / "book" / "records" / profile / f"{chapter.slug}.json"


def load(book: Book, profile: str, chapter: ChapterSource) -> dict | None:
    """The chapter's record at ``profile``; None when there is none, UsageError when it is not
    a record (a hand-edited or truncated file is reported, never shown as "not yet recorded")."""
    path = record_path(book, profile, chapter)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        ok = (record.get("record_version") == RECORD_VERSION and record.get("chapter") == chapter.slug
              and {"parameters", "claims", "metrics", "inputs"} <= set(record)
              and {"cache_key", "deps"} <= set(record.get("provenance", {})))
    except (OSError, ValueError, AttributeError):
        ok = False
    if not ok:
        raise UsageError(f"{path.relative_to(book.root)} is not a record of {chapter.slug} "
                         f"(remake it with `companion record {chapter.number} --profile {profile}`)")
    return record


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def inputs(book: Book, chapter: ChapterSource, deps: list[str]) -> dict:
    """A fingerprint of each input of the cache key (parameters aside: the record keeps them)."""
    files = {}
    for rel in [*ENV_FILES, *sorted(deps)]:
        p = book.root / rel
        files[rel] = _digest(p.read_bytes()) if p.exists() else "missing"
    return {"notebook": _digest(notebook_fingerprint(chapter.path)), "python": sys.version, "files": files}


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count()}


def make_record(book: Book, chapter: ChapterSource, profile: str) -> dict:
    """The record of the chapter's current run at ``profile``; UsageError when there is none,
    or when it is not the profile's run of the current code."""
    run_dir = book.run_dir(profile, chapter)
    fresh, doc = is_fresh(book, chapter, resolve(book, chapter, profile, {}), run_dir)
    if doc is None:
        raise UsageError(f"{chapter.slug} has no {profile} run to record "
                         f"(run `companion run {chapter.number} --profile {profile}` first)")
    if not fresh:
        raise UsageError(f"the {profile} run of {chapter.slug} in {run_dir} is not of the current code and "
                         f"profile (rerun `companion run {chapter.number} --profile {profile}` first)")
    prov = doc["provenance"]
    # The runner keys a run by its inputs' contents at the end: one edited while it ran may not be
    # what the kernel imported, so such a run is not recorded.
    started = datetime.fromisoformat(prov["started"]).timestamp()
    edited = [rel for rel in [os.path.relpath(chapter.path, book.root), *prov["deps"]]
              if (book.root / rel).exists() and (book.root / rel).stat().st_mtime >= started]
    if edited:
        raise UsageError(f"{', '.join(edited)} changed while the {profile} run of {chapter.slug} was executing "
                         f"(rerun `companion run {chapter.number} --profile {profile}` first)")
    return {"record_version": RECORD_VERSION, "chapter": chapter.slug, "profile": profile,
            "parameters": doc["parameters"], "claims": doc["claims"], "metrics": doc.get("metrics", {}),
            "provenance": {**{k: prov.get(k) for k in ("git", "cache_key", "started", "runtime_s", "cpu_s",
                                                      "threads", "python", "torch", "numpy")},
                           "machine": machine(), "deps": prov["deps"]},
            "inputs": inputs(book, chapter, prov["deps"])}


def write(book: Book, record: dict) -> Path:
    path = record_path(book, record["profile"], book.chapter(record["chapter"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


def changes(book: Book, chapter: ChapterSource, record: dict) -> list[str]:
    """What changed since the record was made; empty when its cache key still matches the
    current code and the profile's parameters are still the recorded ones."""
    found = []
    try:
        now = resolve(book, chapter, record["profile"], {})
    except UsageError as exc:
        now = {}
        found.append(f"the profile's parameters ({exc})")
    recorded = record["parameters"]
    for name in sorted(set(now) | set(recorded)):
        was, new = recorded.get(name, "absent"), now.get(name, "absent")
        if now and was != new:
            found.append(f"parameter {name} ({_short(was)} → {_short(new)})")
    deps = record["provenance"]["deps"]
    if cache_key(book, chapter, recorded, deps) != record["provenance"]["cache_key"]:
        then, current = record["inputs"], inputs(book, chapter, deps)
        before = len(found)
        if current["notebook"] != then["notebook"]:
            found.append("the notebook")
        if current["python"] != then["python"]:
            found.append(f"Python ({then['python'].split()[0]} → {current['python'].split()[0]})")
        found += [rel for rel, h in current["files"].items() if then["files"].get(rel) != h]
        if len(found) == before:
            found.append("an input of the cache key the record does not itemise")
    return found


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "…"


# -- verify ---------------------------------------------------------------------------------
def flatten(value, prefix: str = "", lists: bool = True) -> dict:
    """Nested metrics as {"a.b[2]": leaf} (lists kept whole with ``lists=False``)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k), lists))
        return out
    if isinstance(value, list) and lists:
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]", lists))
        return out
    return {prefix: value}


def _agree(a, b) -> bool:
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) if numbers else a == b


def compare(record: dict, doc: dict) -> list[str]:
    """Where a rerun's results.json differs from the record: a claim's word (holds, FAILS, an
    empirical verdict) or whether its alternative is rejected, and each metric beyond RTOL/ATOL
    (timings exempt)."""
    diffs = []
    old = {c["id"]: c for c in record["claims"]}
    new = {c["id"]: c for c in doc.get("claims", [])}
    for cid in sorted(set(old) | set(new)):
        if cid not in new or cid not in old:
            diffs.append(f"claim {cid}: {'not in the rerun' if cid in old else 'not in the record'}")
            continue
        if status_of(old[cid]) != status_of(new[cid]):
            diffs.append(f"claim {cid}: {status_of(old[cid])} in the record, {status_of(new[cid])} now")
        rejected = [(c.get("alternative") or {}).get("rejected") for c in (old[cid], new[cid])]
        if rejected[0] != rejected[1]:
            diffs.append(f"claim {cid}: alternative rejected {rejected[0]} in the record, {rejected[1]} now")
    strip = lambda m: {k: v for k, v in (m or {}).items() if k != TIMINGS}  # noqa: E731
    old_m, new_m = flatten(strip(record.get("metrics"))), flatten(strip(doc.get("metrics")))
    for key in sorted(set(old_m) | set(new_m)):
        if key not in old_m or key not in new_m:
            diffs.append(f"metric {key}: {'not in the rerun' if key in old_m else 'not in the record'}")
        elif not _agree(old_m[key], new_m[key]):
            diffs.append(f"metric {key}: {format_value(old_m[key])} in the record, {format_value(new_m[key])} now")
    return diffs


# -- pages ----------------------------------------------------------------------------------
def _minutes(seconds) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f} min"


def _misses(claims: list[dict]) -> str:
    """The claims that did not hold, each with its word ('`x` (FAILS), `y` (not tested)')."""
    missed = [f"`{c['id']}` ({status_of(c)})" for c in claims if c.get("holds") is False]
    return ("not holding: " + ", ".join(missed)) if missed else ""


def _times(prov: dict) -> str:
    cpu = _minutes(prov.get("cpu_s")) if prov.get("cpu_s") is not None else "not measured"
    return f"{_minutes(prov.get('runtime_s'))} wall, CPU time {cpu}"


def _where(prov: dict) -> str:
    m = prov.get("machine") or {}
    return (f"commit `{prov.get('git')}`, {str(prov.get('started'))[:10]}, {prov.get('threads')} threads on "
            f"{m.get('cpu', '?')} ({m.get('cores', '?')} cores)")


def _metrics_table(metrics: dict) -> str:
    """The record's named numbers (arrays and timings stay in the record)."""
    flat = {k: v for k, v in flatten({k: v for k, v in metrics.items() if k != TIMINGS}, lists=False).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not flat:
        return ""
    names = {k: k.replace("|", "\\|") for k in flat}  # a pipe would end the table cell
    rows = [f"| `{names[k]}` | {format_value(v)} |" for k, v in list(flat.items())[:SHOWN_METRICS]]
    more = len(flat) - SHOWN_METRICS
    tail = ["", f"{more} more numbers in the record."] if more > 0 else []
    return "\n".join(["| metric | value |", "|---|---:|", *rows, *tail])


def chapter_section(book: Book, chapter: ChapterSource, profile: str = SHOWN) -> str:
    """The Markdown of a chapter page's "At the `paper` profile" section, from its record."""
    head = f"## At the `{profile}` profile\n\n"
    record = load(book, profile, chapter)
    if record is None:
        return head + (f"Not yet recorded: no `{profile}` run of this chapter has been recorded "
                       f"(`companion run {chapter.number} --profile {profile}`, then "
                       f"`companion record {chapter.number} --profile {profile}`).")
    changed = changes(book, chapter, record)
    state = (f"**Stale:** this record no longer matches the current code and profile (changed: "
             f"{escape(', '.join(changed))}); its numbers are those of the recorded run."
             if changed else "The record's cache key matches the current code and profile.")
    table = ClaimsTable(record["claims"])
    # wide: it scrolls inside a labelled region that the keyboard can reach (axe-core)
    claims = (f'<div role="region" aria-label="claims of the recorded {profile} run" tabindex="0" '
              f'style="overflow-x:auto">{table._repr_html_()}</div>')
    return "\n\n".join(filter(None, [
        head + f"From the recorded `{profile}` run: {tally(record['claims'])}.", state, claims,
        _metrics_table(record.get("metrics", {})),
        f"The run: {_times(record['provenance'])}; {_where(record['provenance'])}. "
        f"{{download}}`The record <../records/{profile}/{chapter.slug}.json>` holds every number; "
        f"`companion verify {chapter.number} --profile {profile}` reruns the chapter and compares."]))


def records_table(book: Book, profile: str = SHOWN) -> str:
    """The reproducing page's table: one row per chapter, from its record."""
    rows = ["| chapter | time | claims | record |", "|---|---|---|---|"]
    recorded: list[dict] = []
    for ch in book.chapters():
        link = f"[{ch.number} {ch.slug[3:].replace('-', ' ')}](chapters/{ch.slug}.ipynb)"
        record = load(book, profile, ch)
        if record is None:
            rows.append(f"| {link} | — | — | not yet recorded |")
            continue
        recorded.append(record["provenance"])
        stale = changes(book, ch, record)
        state = f"*stale* ({escape(', '.join(stale))} changed)".replace("|", "\\|") if stale else "current"
        claims = "; ".join(filter(None, [tally(record["claims"]), _misses(record["claims"])]))
        rows.append(f"| {link} | {_times(record['provenance'])} | {claims} | {state}: "
                    f"{_where(record['provenance'])} |")
    if recorded:
        rows.append(f"| all {len(recorded)} recorded | {_times(_total(recorded))} | | the rows summed |")
    return "\n".join(rows)


def _total(provs: list[dict]) -> dict:
    """The recorded runs' wall and CPU time summed (CPU time only if every run measured it)."""
    cpu = [p.get("cpu_s") for p in provs]
    return {"runtime_s": sum(p.get("runtime_s") or 0.0 for p in provs),
            "cpu_s": None if None in cpu else sum(cpu)}


def stage_pages(book: Book, dest: Path) -> None:
    """Fill the staged reproducing page's table of records (when it has the marker)."""
    page = dest / "book" / "reproducing.md"
    if page.exists() and TABLE_MARKER in page.read_text():
        page.write_text(page.read_text().replace(TABLE_MARKER, records_table(book)))


def section_cell(book: Book, chapter: ChapterSource) -> dict:
    return {"cell_type": "markdown", "id": "companion-record", "metadata": {},
            "source": chapter_section(book, chapter)}


# -- commands -------------------------------------------------------------------------------
def cmd_record(book: Book, args) -> int:
    """`companion record CH... --profile P`: writes book/records/P/<slug>.json and nothing else."""
    from lib.pipeline.cli import _select

    made = [make_record(book, ch, args.profile) for ch in _select(book, args.chapters)]  # all checked first
    for record in made:
        path = write(book, record)
        print(f"{record['chapter']} [{args.profile}] recorded: {tally(record['claims'])} "
              f"→ {path.relative_to(book.root)}")
    return 0


def cmd_verify(book: Book, args) -> int:
    """`companion verify CH... --profile P`: rerun each recorded chapter with the record's
    parameters (into _build/verify/) and compare with its record. 0 agree, 2 differ, 1 a rerun
    failed, 64 bad usage."""
    from lib.pipeline.cli import _exit, _report, _select
    from lib.pipeline.runner import CLAIM_FAILED, EXEC_FAILED, OK, run_tasks

    chapters = _select(book, args.chapters)
    records = {}
    for ch in chapters:
        records[ch.slug] = load(book, args.profile, ch)
        if records[ch.slug] is None:
            raise UsageError(f"{ch.slug} has no {args.profile} record to verify "
                             f"({record_path(book, args.profile, ch).relative_to(book.root)}; "
                             f"`companion record {ch.number} --profile {args.profile}` makes one)")
    for ch in chapters:
        if changed := changes(book, ch, records[ch.slug]):
            print(f"{ch.slug}: the record is stale (changed: {', '.join(changed)}); "
                  f"rerunning the current code with the record's parameters")
    tasks = [(ch, records[ch.slug]["parameters"], book.build_dir / "verify" / args.profile / ch.slug)
             for ch in chapters]
    results = run_tasks(book, tasks, args.profile, True, 1, args.scheduler, _report)
    if _exit(results) == EXEC_FAILED:
        return EXEC_FAILED
    code = OK
    for r in results:
        diffs = compare(records[r.chapter.slug], r.results)
        if not diffs:
            print(f"{r.chapter.slug} [{args.profile}] agrees with its record "
                  f"({len(r.results.get('claims', []))} claims and the metrics compared)")
            continue
        code = CLAIM_FAILED
        print(f"{r.chapter.slug} [{args.profile}] differs from its record in {len(diffs)} place(s):")
        for line in diffs[:20]:
            print(f"  {line}")
        if len(diffs) > 20:
            print(f"  … and {len(diffs) - 20} more")
    return code
