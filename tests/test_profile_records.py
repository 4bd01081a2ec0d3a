"""Profile records: the reproducing page's time table comes from committed measurements, and its
paper-profile table from book/params, so no measurement on that page is typed by hand."""

import json
import re

import pytest
from conftest import ROOT

from lib.pipeline import profile
from lib.pipeline.chapters import Book, UsageError


def _doc(slug: str) -> dict:
    return {"chapter": slug, "profile": "default", "overrides": {}, "run": "/tmp/x", "runtime_s": 40.0, "threads": 2,
            "peak": {"matmul_n": 2048, "flops_per_s": 4e11, "one_thread_flops_per_s": 2e11,
                     "one_thread_float64_flops_per_s": 1e11, "op_s": 3e-6,
                     "before": {"load": 0.5}, "after": {"load": 0.7}},
            "cells": [], "probe_overhead_s": 1.0,
            "sweeps": [{"function": "lib.x.train_point", "sweeps": 1, "points": 4, "seconds": 30.0,
                        "flops_per_point": 1e9, "probe_seconds": 1.0, "flops_per_s": 4e10, "of_peak": 0.1,
                        "of_peak_1_thread": 0.2, "ops": 12345, "overhead_share": 0.1, "bound": "non-matmul work"},
                       {"function": "lib.x.tiny", "sweeps": 1, "points": 1, "seconds": 0.5, "flops_per_point": None,
                        "probe_seconds": 0.1, "flops_per_s": None, "of_peak": None, "of_peak_1_thread": None,
                        "ops": 0, "overhead_share": None, "bound": "numpy / compiled"}]}


@pytest.fixture
def book(tmp_path, monkeypatch):
    book = Book(ROOT)
    monkeypatch.setattr(Book, "root", property(lambda self: tmp_path), raising=False)
    monkeypatch.setattr(profile, "profile_dir", lambda b, ch, p: tmp_path / "_build" / "profile" / p / ch.slug)
    return book


def test_a_profile_record_stores_the_measurement_with_its_commit_and_machine(book, tmp_path):
    ch = book.chapters()[0]
    with pytest.raises(UsageError, match="run `companion profile"):
        profile.write_record(book, ch, "default")
    folder = tmp_path / "_build" / "profile" / "default" / ch.slug
    folder.mkdir(parents=True)
    (folder / profile.PROFILE).write_text(json.dumps({**_doc(ch.slug), "overrides": {"seed": "3"}}))
    with pytest.raises(UsageError, match="overrides"):
        profile.write_record(book, ch, "default")
    (folder / profile.PROFILE).write_text(json.dumps(_doc(ch.slug)))
    path = profile.write_record(book, ch, "default")
    stored = json.loads(path.read_text())
    assert path == tmp_path / "book" / "records" / "profile" / "default" / f"{ch.slug}.json"
    assert "run" not in stored and stored["provenance"]["machine"]["cpu"] and "git" in stored["provenance"]
    table = profile.records_markdown(book)
    row = next(line for line in table.splitlines() if line.startswith(f"| {ch.number} |"))
    assert "| 40 | 76 % |" in row and "`train_point` 30 s: 40.00 GFLOP/s, 20.0 % of one thread's peak" in row
    assert "12,345 operators" in row and "tiny" not in row  # under 5 % of the run
    assert "load 0.5 → 0.7" in row
    others = [line for line in table.splitlines() if re.match(r"\| \d\d \|", line) and line is not row]
    assert all("not recorded" in line for line in others if not line.startswith(f"| {ch.number} |"))


def test_the_staged_reproducing_page_has_no_marker_left(tmp_path):
    book = Book(ROOT)
    page = tmp_path / "book" / "reproducing.md"
    page.parent.mkdir(parents=True)
    page.write_text((ROOT / "book" / "reproducing.md").read_text())
    assert profile.PAGE_MARKER in page.read_text() and profile.PARAMETERS_MARKER in page.read_text()
    profile.stage_page(book, tmp_path)
    text = page.read_text()
    assert profile.PAGE_MARKER not in text and profile.PARAMETERS_MARKER not in text
    assert "| 10 | `steps` " in text or "| 10 |" in text
