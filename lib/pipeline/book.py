"""Assemble and build the HTML book from executed chapters.

The sources in ``book/`` are never modified and never hold outputs. ``build_html`` copies them
into ``_build/stage/`` (mirroring the repository layout, so ``_config.yml`` and ``_toc.yml``
read the same there), puts each chapter's executed notebook in place of its source, writes the
status page from the chapters' results.json, and runs Jupyter Book with execution off and
warnings as errors, into ``_build/html``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from html import escape
from pathlib import Path

from lib.claims import counts, format_value, status_of
from lib.pipeline import citing, record_pages, records
from lib.pipeline import profile as profiles
from lib.pipeline.chapters import Book, UsageError
from lib.pipeline.jb_guard import STAGE_MARKER
from lib.pipeline.cache import stored
from lib.provenance import git_commit
from lib.render import badge, control_text, discrimination_text, power_text

STATUS_MARKER = "<!-- status-table -->"


def _cell(value) -> str:
    """A value as the text of one Markdown table cell."""
    return format_value(value).replace("|", "\\|").replace("\n", " ")


def _paper_record(book: Book, ch) -> tuple[dict | None, str]:
    """A chapter's `paper` record and one cell saying what it decided, with its commit and state."""
    record = records.load(book, "paper", ch)
    if record is None:
        return None, "not recorded"
    state = "stale" if records.changes(book, ch, record) else "current"
    claims = record.get("claims", [])
    must = [c for c in claims if c.get("kind") != "empirical"]
    emp = [c for c in claims if c.get("kind") == "empirical"]
    cell = " · ".join(filter(None, [f"{counts(must)} hold" if must else "",
                                     counts(emp) if emp else ""]))
    return record, f"{cell} (`{record.get('provenance', {}).get('git', '?')}`, {state})"


def _claim_row(c: dict, seeds: dict | None, paper: dict | None = None) -> str:
    """One claim as an HTML table row: verdict first, the statement with its numbers one click away."""
    kind = c["kind"] + (" (reconstructed)" if c.get("source") == "reconstruction" else "")
    tally = "—"
    if seeds is not None:
        mine = next((x for x in seeds["claims"] if x["id"] == c["id"]), None)
        if mine is not None:
            n = len(seeds["seeds"])
            tally = f"held on {mine['held']}/{n} seeds"
            if mine.get("verdicts"):
                tally = "; ".join(f"{v} on {len(got)}/{n}" for v, got in sorted(mine["verdicts"].items()))
            elif mine["failed_seeds"]:
                tally += f" (failed: {', '.join(map(str, mine['failed_seeds']))})"
    details = (f"theory {escape(format_value(c.get('theory')))}; simulation "
               f"{escape(format_value(c.get('simulation')))}; tolerance {escape(c.get('tolerance', ''))}")
    if c.get("false_alarm") is not None:
        details += f"; false-alarm rate {c['false_alarm']:.2g}"
    if c.get("alternative"):
        details += "; alternative: " + escape(discrimination_text(c["alternative"], c.get("holds")))
    if c.get("kind") == "theorem":
        details += "; negative control: " + escape(control_text(c))
    if c.get("declared"):
        details += "; declared to fail: " + escape(c["declared"])
    if c.get("power"):
        details += "; power: " + escape(power_text(c["power"]))
    discriminates = "—"
    if c.get("alternative"):
        discriminates = "yes" if c["alternative"].get("rejected") else "<b>no</b>"
    elif c.get("power"):
        discriminates = "could see the effect" if c["power"].get("detects") else "<b>could not</b> see the effect"
    top = 'style="vertical-align:top"'
    recorded = "—"
    if paper is not None:
        mine = next((x for x in paper.get("claims", []) if x.get("id") == c["id"]), None)
        recorded = badge(status_of(mine)) if mine is not None else "not in the record"
    return (f"<tr><td {top}>{badge(status_of(c))}</td><td {top}>{recorded}</td>"
            f"<td {top}><code>{escape(c['id'])}</code></td><td {top}>{kind}</td>"
            f'<td style="vertical-align:top;width:40%;overflow-wrap:anywhere"><details><summary>'
            f'{escape(c["statement"])}</summary>{details}</details></td><td {top}>{discriminates}</td>'
            f"<td {top}>{tally}</td></tr>")


def status_markdown(book: Book, profile: str) -> str:
    """Tables of every chapter's runtime, claims (by kind) and environment."""
    from lib.pipeline.seeds import stored_summary

    lines = ["| chapter | runtime (s) | theorems (paper) | theorems (reconstructed) | checks | empirical "
             "| `paper` record |", "|---|---:|---:|---:|---:|---:|---|"]
    sections = []
    envs = set()
    commits: set[str] = set()
    for ch in book.chapters():
        doc = stored(book.run_dir(profile, ch)) or {}
        prov = doc.get("provenance", {})
        claims = doc.get("claims", [])
        link = f"[{ch.slug}](chapters/{ch.slug}.ipynb)"
        paper, paper_cell = _paper_record(book, ch)
        if not doc:
            lines.append(f"| {link} | not run | | | | | {paper_cell} |")
            continue
        thm = [c for c in claims if c.get("kind") == "theorem"]
        from_paper = [c for c in thm if c.get("source") != "reconstruction"]
        recon = [c for c in thm if c.get("source") == "reconstruction"]
        checks = [c for c in claims if c.get("kind") == "check"]
        emp = [c for c in claims if c.get("kind") == "empirical"]
        lines.append(f"| {link} | {prov.get('runtime_s', 0):.0f} | {counts(from_paper)} | {counts(recon)} | "
                     f"{counts(checks)} | {counts(emp)} | {paper_cell} |")
        commits.add(prov.get("git", "?"))
        seeds = stored_summary(book, profile, ch)
        rows = "".join(_claim_row(c, seeds, paper) for c in claims)
        head = "".join(f"<th>{h}</th>" for h in (f"at `{profile}`", "at `paper` (record)", "claim", "kind",
                                                   "statement (click for the numbers)",
                                                   "rejects its alternative (theorem) / power (empirical)",
                                                   "over seeds"))
        sections += [f"### {ch.number} · {ch.slug.split('-', 1)[1].replace('-', ' ')}", "",
                     f"The `paper` record: {paper_cell}.", "",
                     f'<table class="status-claims" style="width:100%;font-size:0.9em"><thead><tr>{head}</tr>'
                     f"</thead><tbody>{rows}</tbody></table>",
                     ""]
        envs.add((prov.get("python"), prov.get("torch"), prov.get("numpy"), prov.get("threads")))
    env_rows = ["| Python | torch | numpy | threads |", "|---|---|---|---|"]
    env_rows += [f"| {_cell(p)} | {_cell(t)} | {_cell(n)} | {_cell(th)} |" for p, t, n, th in sorted(
        envs, key=str)]
    legend = ("Theorem and check columns count the claims that held out of those recorded; a finding a "
              "chapter declares (a reading its simulation contradicts) is counted apart as *fails (declared)*. "
              "Every theorem claim is also run on a negative control (its mechanism removed), where it must "
              "fail. The empirical column gives each verdict: *reproduced* (a test that could have failed "
              "held), *not reproduced* (it failed where the design could have seen the paper's effect), "
              "*not tested* (anything else; its power record says why). The last column gives the same "
              "counts from the chapter's committed `paper` record — for most empirical claims the deciding "
              "evidence, at the paper's scale where a CPU reaches it — with the record's commit and whether "
              "it is current for this code (a stale record's numbers are those of the recorded run).")
    return "\n".join([f"Profile: `{profile}`.", "", "## Chapters", "", legend, "", *lines, "", "## Claims", "",
                      *sections, "## Environment", "",
                      "Commit(s): " + ", ".join(f"`{c}`" for c in sorted(commits)), "", *env_rows, ""])


def stage(book: Book, profile: str) -> Path:
    """Copy the book's sources into ``_build/stage`` with executed chapters and the status page."""
    dest = book.build_dir / "stage"
    if dest.exists() and not (dest / STAGE_MARKER).is_file() and any(dest.iterdir()):
        raise UsageError(f"{dest} was not staged by companion build (no {STAGE_MARKER}): move it away first")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copyfile(book.root / name, dest / name)
    if (book.root / "_static").is_dir():  # the book's own CSS (code that wraps, tables that scroll)
        shutil.copytree(book.root / "_static", dest / "_static")
    publish_settings(dest / "_config.yml", os.environ.get(REPOSITORY_ENV, ""))
    shutil.copytree(book.root / "book", dest / "book",
                    ignore=shutil.ignore_patterns("params", "*.ipynb", ".ipynb_checkpoints"))
    (dest / "book" / "chapters").mkdir(exist_ok=True)
    for ch in book.chapters():
        run = book.run_dir(profile, ch)
        executed = run / f"{ch.slug}.ipynb"
        if not executed.exists():
            raise FileNotFoundError(f"{ch.slug} has no executed notebook for profile {profile}")
        files = dest / "book" / "chapters" / "files" / ch.slug
        files.mkdir(parents=True)
        shutil.copyfile(run / "results.json", files / "results.json")
        _zip_figures(run / "figures", files / "figures.zip")
        nb = publishable(json.loads(executed.read_text()), ch.slug, stored(run) or {})
        nb["cells"].insert(-1, record_pages.section_cell(book, ch))  # before Downloads
        (dest / "book" / "chapters" / f"{ch.slug}.ipynb").write_text(json.dumps(nb, indent=1))
    (dest / STAGE_MARKER).write_text("staged by companion build\n")
    status = dest / "book" / "status.md"
    status.write_text(status.read_text().replace(STATUS_MARKER, status_markdown(book, profile)))
    record_pages.stage_pages(book, dest)
    citing.stage_page(book, dest, git_commit(book.root))
    profiles.stage_page(book, dest)
    return dest


#: The one setting behind the repository button and the Binder launch button (off when unset).
REPOSITORY_ENV = "COMPANION_REPOSITORY_URL"


def publish_settings(config: Path, repository_url: str) -> None:
    """Add the repository button and Binder's launch button to a staged ``_config.yml`` when a
    repository URL is set; without one the book links to no repository at all. Binder builds the
    CPU environment in ``.binder/``; there is no Colab button (Colab has no copy of ``lib``)."""
    if not repository_url:
        return
    import yaml

    doc = yaml.safe_load(config.read_text())
    doc["repository"] = {"url": repository_url, "path_to_book": ".", "branch": "main"}
    doc.setdefault("html", {})["use_repository_button"] = True
    doc["launch_buttons"] = {"notebook_interface": "classic", "binderhub_url": "https://mybinder.org"}
    config.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


#: Code cells longer than this are collapsed behind a toggle on the page (one click away).
LONG_CELL_LINES = 15


def _zip_figures(src: Path, zip_path: Path) -> None:
    """Every figure of a run (PNG and SVG) in one zip, with fixed timestamps so that the same
    figures give the same bytes (the book is not rebuilt for nothing)."""
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(src.glob("*")) if src.is_dir() else []:
            info = zipfile.ZipInfo(f"figures/{path.name}", date_time=(2025, 1, 1, 0, 0, 0))
            zf.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)


def _parameters_markdown(params: dict) -> str:
    rows = "\n".join(f"| `{k}` | `{json.dumps(v)}` |" for k, v in params.items())
    return "| parameter | value |\n|---|---|\n" + rows


#: An empty header cell, as pandas writes above and beside a table's index: it heads nothing, so
#: it is published as an empty data cell (screen readers announce empty headers; axe-core's
#: empty-table-header).
_EMPTY_TH = re.compile(r"<th(\s[^>]*)?>(?:\s|&nbsp;)*</th>")


def _without_empty_headers(cell: dict) -> dict:
    outputs = []
    for out in cell.get("outputs", []):
        html = out.get("data", {}).get("text/html")
        if html is not None:
            html = _EMPTY_TH.sub(lambda m: f"<td{m.group(1) or ''}></td>", "".join(html))
            out = {**out, "data": {**out["data"], "text/html": html}}
        outputs.append(out)
    return {**cell, "outputs": outputs} if "outputs" in cell else cell


def publishable(nb: dict, slug: str, results: dict) -> dict:
    """An executed notebook as the book publishes it: without the runner's depfile cell and
    papermill's injected-parameters cell (the values it set are listed once, under Downloads,
    with no paths of the machine that ran it), long code cells collapsed, and a Downloads
    section linking the run's results.json and figures."""
    cells = []
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.get("id") == "companion-depfile" or "injected-parameters" in tags:
            continue
        source = "".join(cell.get("source", ""))
        if cell["cell_type"] == "code" and source.count("\n") + 1 > LONG_CELL_LINES and "parameters" not in tags:
            cell = {**cell, "metadata": {**cell.get("metadata", {}), "tags": [*tags, "hide-input"]}}
        cells.append(_without_empty_headers(cell))
    params = {k: v for k, v in results.get("parameters", {}).items() if k != "out_dir"}
    profile = results.get("profile", "?")
    downloads = ("## Downloads\n\n"
                 f"- {{download}}`results.json <files/{slug}/results.json>`: every claim and number this run measured\n"
                 f"- {{download}}`figures.zip <files/{slug}/figures.zip>`: the figures as PNG and SVG\n\n"
                 f"This page was executed with the `{profile}` profile and these parameters:\n\n"
                 + _parameters_markdown(params))
    cells.append({"cell_type": "markdown", "id": "companion-downloads", "metadata": {}, "source": downloads})
    return {**nb, "cells": cells}


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def jupyter_book_command(src: Path, path_output: Path) -> list[str]:
    """Jupyter Book on staged sources, warnings as errors: a glue key that a chapter no longer
    writes, a broken reference or a missing figure fails the build instead of leaving a hole."""
    return [str(Path(sys.executable).parent / "jupyter-book"), "build", str(src), "--path-output",
            str(path_output), "--warningiserror", "--keep-going", "--quiet"]


def build_html(book: Book, profile: str = "default") -> bool:
    """Stage and build; True when Jupyter Book finished without warnings. When the staged
    sources are identical to those of the last successful build, the HTML is left as it is."""
    src = stage(book, profile)
    digest = _tree_digest(src)
    stamp = book.build_dir / "html" / ".companion-sources"
    if stamp.exists() and stamp.read_text() == digest:
        print(f"book up to date (sources unchanged since the last build): {book.build_dir / 'html' / 'index.html'}")
        return True
    cmd = jupyter_book_command(src, book.root)
    print("building the book:", " ".join(cmd[1:3]), "→", book.build_dir / "html", flush=True)
    proc = subprocess.run(cmd, cwd=book.root)
    if proc.returncode != 0:
        print("the book build failed (warnings are errors); see the messages above", file=sys.stderr)
        return False
    stamp.write_text(digest)
    print(f"book built: {book.build_dir / 'html' / 'index.html'}")
    return True

