"""What the book shows of records: each chapter page's "At the `paper` profile" section and the
reproducing page's table, each record marked *stale* (and why) when the code, the notebook, the
environment or the profile's parameters changed since it was made, "not yet recorded" where there
is none, and how it was last confirmed (recomputed, or carried by a canary)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from lib.claims import format_value, status_of, tally
from lib.pipeline.chapters import Book, ChapterSource
from lib.pipeline.records import CANARY, CARRIED, SHOWN, TIMINGS, changes, flatten, load
from lib.render import ClaimsTable

#: Placeholder in book/reproducing.md replaced by the table of records.
TABLE_MARKER = "<!-- paper-records -->"
#: Metrics shown on a chapter page (the record keeps them all).
SHOWN_METRICS = 24


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
    isa = f", {m['isa']}" if m.get("isa") else ""
    return (f"commit `{prov.get('git')}`, {str(prov.get('started'))[:10]}, {prov.get('threads')} threads on "
            f"{m.get('cpu', '?')} ({m.get('cores', '?')} cores{isa})")


def confirmation(record: dict) -> str:
    """How the record was last confirmed: recomputed, or carried by a canary (and from where)."""
    c = record.get("confirmed")
    if not c:
        return f"recomputed at commit `{record['provenance'].get('git')}`"
    if c["method"] == CARRIED:
        return (f"carried by canary to commit `{c['commit']}` from `{c['from_commit']}` on {c['date'][:10]} "
                f"(its `{CANARY}` run gives the same claims and metrics at both)")
    return f"recomputed at commit `{c['commit']}` on {c['date'][:10]}"


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
             if changed else "The record is current: nothing that can change its numbers (the notebook's "
                             "code, the source files it ran, the installed packages, the profile's "
                             "parameters) has changed since.")
    state += f" Last confirmed: {confirmation(record)}."
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
        state += f" ({confirmation(record)})".replace("|", "\\|")
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


def record_states(book: Book, profile: str) -> dict[str, str]:
    """Each chapter's record at ``profile``: 'current', 'stale (what changed)' or 'none'."""
    states = {}
    for ch in book.chapters():
        record = load(book, profile, ch)
        if record is None:
            states[ch.slug] = "none"
        elif changed := changes(book, ch, record):
            states[ch.slug] = f"stale ({', '.join(changed)})"
        else:
            states[ch.slug] = f"current ({confirmation(record).replace('`', '')})"
    return states
