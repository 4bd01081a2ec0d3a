"""The citing page's BibTeX: one entry for the book and one per chapter, each pinned to a version.

Every field comes from ``CITATION.cff`` (title, authors, year, month, version, URL where given), so
the page, the file and ``cffconvert -f bibtex`` say the same thing; the build adds the commit the
book was built from and, per chapter, the commit of its `paper` record and whether that record is
current, so a citation names the code and the recorded numbers a reader saw.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lib.pipeline.chapters import Book, ChapterSource

MARKER = "<!-- citations -->"
BOOK_KEY = "companion2026learningdynamics"


def citation(root: Path) -> dict:
    """CITATION.cff, parsed."""
    return yaml.safe_load((root / "CITATION.cff").read_text())


def _authors(cff: dict) -> str:
    names = []
    for a in cff.get("authors", []):
        if "name" in a:  # an entity: braced so BibTeX does not split it into first and last names
            names.append("{" + a["name"] + "}")
        else:
            names.append(f"{a.get('family-names', '')}, {a.get('given-names', '')}".strip(", "))
    return " and ".join(names)


def _entry(kind: str, key: str, fields: dict) -> str:
    body = ",\n".join(f"  {name:<9} = {{{value}}}" for name, value in fields.items() if value)
    return f"@{kind}{{{key},\n{body}\n}}"


def book_fields(cff: dict, commit: str | None = None) -> dict:
    """The book's entry as cffconvert writes it (author, month, title, year, url, doi), plus the
    version and the commit it was built from."""
    released = str(cff.get("date-released", ""))
    return {"author": _authors(cff), "title": cff["title"], "year": released[:4],
            "month": str(int(released[5:7])) if len(released) >= 7 else None,
            "url": cff.get("repository-code") or cff.get("url"), "doi": cff.get("doi"),
            "version": cff.get("version"), "note": f"commit {commit}" if commit else None}


def chapter_key(chapter: ChapterSource) -> str:
    return f"companion2026ch{chapter.number}"


def chapter_fields(cff: dict, chapter: ChapterSource, commit: str | None, record: dict | None,
                   record_current: bool | None) -> dict:
    """One chapter as an ``@incollection`` of the book, with the version, the build commit and its
    `paper` record's commit and state."""
    fields = book_fields(cff, commit)
    pinned = [f"version {cff.get('version')}"] + ([f"commit {commit}"] if commit else [])
    if record is not None:
        state = "current" if record_current else "stale"
        pinned.append(f"paper record of commit {record.get('provenance', {}).get('git', 'unknown')} ({state})")
    else:
        pinned.append("no paper record")
    return {"author": fields["author"], "title": f"Chapter {chapter.number}: {chapter.title}",
            "booktitle": cff["title"], "year": fields["year"], "url": fields["url"],
            "note": "; ".join(pinned)}


def markdown(book: Book, commit: str | None) -> str:
    """The citing page's entries: the book's, then one per chapter."""
    from lib.pipeline import records

    cff = citation(book.root)
    parts = ["```bibtex", _entry("misc", BOOK_KEY, book_fields(cff, commit)), "```", "",
             "One chapter, with the version, the commit and the `paper` record it showed:", "", "```bibtex"]
    for ch in book.chapters():
        record = records.load(book, "paper", ch)
        current = None if record is None else not records.changes(book, ch, record)
        parts += [_entry("incollection", chapter_key(ch), chapter_fields(cff, ch, commit, record, current)), ""]
    parts[-1] = "```"
    return "\n".join(parts)


def stage_page(book: Book, dest: Path, commit: str | None) -> None:
    page = dest / "book" / "citing.md"
    if page.exists() and MARKER in page.read_text():
        page.write_text(page.read_text().replace(MARKER, markdown(book, commit)))
