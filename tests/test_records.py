"""Recorded runs (issue 44): `companion record` stores a run's claims, metrics and provenance under
book/records/ and nothing else; the staged pages show the record, stale when the code changed
(naming what changed), "not yet recorded" without one; `companion verify` reruns and compares."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import companion

from lib.pipeline import records
from lib.pipeline.chapters import Book

SLUG = "99-fixture"


def _files(root: Path) -> dict[str, int]:
    """Every file of the project with its modification time."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture
def recorded(project) -> Path:
    """The fixture chapter run at `paper` (seconds for this chapter) and recorded."""
    assert companion("run", "99", "--profile", "paper", root=project).returncode == 0
    before = _files(project)
    out = companion("record", "99", "--profile", "paper", root=project)
    assert out.returncode == 0, out.stderr
    assert "book/records/paper/99-fixture.json" in out.stdout
    after = _files(project)
    written = {p for p in after if after[p] != before.get(p)}
    assert written == {"book/records/paper/99-fixture.json"}, written  # record writes nothing else
    return project


def test_record_holds_claims_metrics_and_provenance_of_the_run(recorded):
    record = json.loads((recorded / "book/records/paper/99-fixture.json").read_text())
    run = json.loads((recorded / "_build/runs/paper/99-fixture/results.json").read_text())
    assert record["chapter"] == SLUG and record["profile"] == "paper"
    assert record["claims"] == run["claims"] and record["metrics"] == run["metrics"]
    assert record["parameters"] == run["parameters"] and record["parameters"]["n"] == 64
    prov = record["provenance"]
    for key in ("git", "cache_key", "deps", "runtime_s", "started", "threads"):
        assert prov[key] == run["provenance"][key], key
    assert prov["machine"]["cores"] == os.cpu_count() and prov["machine"]["cpu"]
    assert "lib/fixture_paper.py" in record["inputs"]["files"]
    assert not list((recorded / "book" / "records").rglob("*.ipynb")) and not list(
        (recorded / "book" / "records").rglob("*.png"))


def test_chapter_page_and_table_show_the_record_and_say_when_it_is_stale(recorded):
    book = Book(recorded)
    ch = book.chapter("99")
    record = records.load(book, "paper", ch)
    section = records.chapter_section(book, ch)
    assert section.startswith("## At the `paper` profile")
    assert "matches the current code" in section and "Stale" not in section
    assert 'class="claims-table"' in section and "<code>mean</code>" in section
    value = record["metrics"]["value"]
    assert f"| `value` | {records.format_value(value)} |" in section  # the recorded number, not a typed one
    assert "2/2 claims hold" in section
    row = next(r for r in records.records_table(book).splitlines() if "chapters/99-fixture" in r)
    assert "| current: commit" in row and "2/2 claims hold" in row
    total = records.records_table(book).splitlines()[-1]
    assert total.startswith("| all 1 recorded | ") and records._times(record["provenance"]) in total

    fixture = recorded / "lib" / "fixture_paper.py"
    fixture.write_text(fixture.read_text() + "\n# an edit\n")
    assert records.changes(book, ch, record) == ["lib/fixture_paper.py"]
    section = records.chapter_section(book, ch)
    assert "**Stale:**" in section and "lib/fixture_paper.py" in section
    assert f"{records.format_value(value)}" in section  # still shown, marked stale
    row = next(r for r in records.records_table(book).splitlines() if "chapters/99-fixture" in r)
    assert "*stale* (lib/fixture_paper.py changed)" in row

    (recorded / "book" / "params" / "paper.yaml").write_text("99-fixture: {n: 32}\n")
    assert records.changes(book, ch, record) == ["parameter n (64 → 32)", "lib/fixture_paper.py"]


def test_a_chapter_without_a_record_says_not_yet_recorded(project):
    book = Book(project)
    assert "Not yet recorded" in records.chapter_section(book, book.chapter("99"))
    row = next(r for r in records.records_table(book).splitlines() if "chapters/99-fixture" in r)
    assert "not yet recorded" in row
    assert "| all " not in records.records_table(book)  # no total without a record


def test_staged_book_renders_the_record_section_and_the_reproducing_table(recorded):
    from lib.pipeline.book import stage

    for name in ("_config.yml", "_toc.yml"):
        (recorded / name).write_text("{}\n")
    (recorded / "book" / "status.md").write_text("<!-- status-table -->\n")
    (recorded / "book" / "reproducing.md").write_text(f"# Reproducing\n\n{records.TABLE_MARKER}\n")
    dest = stage(Book(recorded), "paper")
    nb = json.loads((dest / "book/chapters/99-fixture.ipynb").read_text())
    ids = [c.get("id") for c in nb["cells"]]
    assert ids[-2:] == ["companion-record", "companion-downloads"]
    page = (dest / "book/reproducing.md").read_text()
    assert records.TABLE_MARKER not in page and "[99 fixture](chapters/99-fixture.ipynb)" in page
    assert (dest / "book/records/paper/99-fixture.json").exists()  # the page's download link resolves


def test_verify_agrees_with_an_unchanged_rerun_and_exits_2_when_it_differs(recorded):
    out = companion("verify", "99", "--profile", "paper", root=recorded)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "agrees with its record" in out.stdout
    assert (recorded / "_build/verify/paper/99-fixture/results.json").exists()  # a rerun, not the cache

    fixture = recorded / "lib" / "fixture_paper.py"
    fixture.write_text(fixture.read_text().replace("return float(np.mean(scale + rng.standard_normal(n)))",
                                                   "return float(np.mean(scale + rng.standard_normal(n))) + 0.5"))
    out = companion("verify", "99", "--profile", "paper", root=recorded)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "record is stale (changed: lib/fixture_paper.py)" in out.stdout
    assert "metric value:" in out.stdout and "claim mean" not in out.stdout  # held either way

    fixture.write_text(fixture.read_text().replace(" + 0.5", " + 100.0"))
    out = companion("verify", "99", "--profile", "paper", root=recorded)
    assert out.returncode == 2 and "claim mean: holds in the record, FAILS now" in out.stdout


def test_compare_allows_float_noise_and_timings_but_not_real_differences():
    record = {"claims": [{"id": "a", "kind": "check", "holds": True}],
              "metrics": {"x": 1.0, "xs": [1.0, 2.0], "timings": {"s": 3.0}, "name": "k"}}
    same = json.loads(json.dumps(record))
    same["metrics"].update(x=1.0 + 1e-12, timings={"s": 9.0})
    assert records.compare(record, same) == []
    moved = json.loads(json.dumps(record))
    moved["metrics"]["xs"][1] = 2.001
    assert records.compare(record, moved) == ["metric xs[1]: 2 in the record, 2.001 now"]
    lost = json.loads(json.dumps(record))
    lost["claims"] = []
    assert records.compare(record, lost) == ["claim a: not in the rerun"]


@pytest.mark.parametrize("args, needle", [
    (("record", "99", "--profile", "paper"), "has no paper run to record"),
    (("verify", "99", "--profile", "paper"), "has no paper record to verify"),
    (("record", "nope", "--profile", "paper"), "no chapter 'nope'"),
])
def test_bad_usage_is_one_line_exit_64_and_writes_nothing(project, args, needle):
    out = companion(*args, root=project)
    assert out.returncode == 64 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (project / "book" / "records").exists()


def test_a_stale_run_is_not_recorded(project):
    assert companion("run", "99", "--profile", "paper", root=project).returncode == 0
    (project / "book" / "params" / "paper.yaml").write_text("99-fixture: {n: 32}\n")
    out = companion("record", "99", "--profile", "paper", root=project)
    assert out.returncode == 64 and "not of the current code and profile" in out.stderr
    assert not (project / "book" / "records").exists()


def test_a_broken_record_is_reported_in_one_line_not_shown_as_missing(recorded):
    path = recorded / "book/records/paper/99-fixture.json"
    path.write_text(path.read_text()[:200])
    out = companion("verify", "99", "--profile", "paper", root=recorded)
    assert out.returncode == 64 and "is not a record of 99-fixture" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_run_whose_inputs_changed_while_it_ran_is_not_recorded(project):
    """The cache key is computed from the files at the end of a run; one edited during the run
    may not be what the kernel imported."""
    assert companion("run", "99", "--profile", "paper", root=project).returncode == 0
    fixture = project / "lib" / "fixture_paper.py"
    started = json.loads((project / "_build/runs/paper/99-fixture/results.json").read_text())["provenance"]["started"]
    from datetime import datetime

    os.utime(fixture, (datetime.fromisoformat(started).timestamp() + 1,) * 2)  # same bytes, edited mid-run
    out = companion("record", "99", "--profile", "paper", root=project)
    assert out.returncode == 64 and "lib/fixture_paper.py changed while the paper run" in out.stderr
    assert not (project / "book" / "records").exists()
