"""The citing page's BibTeX: the book's entry says what CITATION.cff says (what cffconvert makes of
it), and every chapter has an entry pinned to the version, the commit and its paper record."""

import re

from conftest import ROOT

from lib.pipeline import citing
from lib.pipeline.chapters import Book


def _entries(text: str) -> dict[str, dict[str, str]]:
    entries = {}
    for kind, key, body in re.findall(r"@(\w+)\{([^,]+),\n(.*?)\n\}", text, flags=re.S):
        entries[key] = {"@": kind, **dict(re.findall(r"^\s*(\w+)\s*= \{(.*)\},?$", body, flags=re.M))}
    return entries


def test_the_book_entry_holds_the_citation_files_fields():
    cff = citing.citation(ROOT)
    page = citing.markdown(Book(ROOT), commit="0123456789ab")
    book = _entries(page)[citing.BOOK_KEY]
    # cffconvert -f bibtex writes author, month, title and year (and url, doi where the file has them)
    assert book["title"] == cff["title"]
    assert book["author"] == " and ".join("{" + a["name"] + "}" for a in cff["authors"])
    assert book["year"] == str(cff["date-released"])[:4] and book["month"] == str(int(str(cff["date-released"])[5:7]))
    assert book["version"] == str(cff["version"]) and book["note"] == "commit 0123456789ab"
    assert cff["preferred-citation"]["title"] == cff["title"]


def test_every_chapter_has_an_entry_with_the_version_commit_and_record():
    book = Book(ROOT)
    entries = _entries(citing.markdown(book, commit="0123456789ab"))
    for ch in book.chapters():
        entry = entries[citing.chapter_key(ch)]
        assert entry["@"] == "incollection" and entry["title"] == f"Chapter {ch.number}: {ch.title}"
        assert "version " in entry["note"] and "commit 0123456789ab" in entry["note"]
        assert "paper record of commit" in entry["note"] or "no paper record" in entry["note"]
