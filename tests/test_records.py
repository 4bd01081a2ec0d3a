"""Recorded runs (issues 44 and 52): `companion record` stores a run's claims, metrics, provenance and
canary under book/records/ and nothing else, from a run whose files are as committed; the staged
pages show the record, stale exactly when something that can change a number changed (naming
it); `companion verify` recomputes every point and compares, exactly on the same CPU and
libraries; `companion rekey` carries a record across a refactor when its canary agrees."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import companion, make_project

from lib.pipeline import record_pages, records
from lib.pipeline.chapters import Book

pytestmark = pytest.mark.integration

SLUG = "99-fixture"
RECORD = "book/records/paper/99-fixture.json"


def _files(root: Path) -> dict[str, int]:
    """Every file of the project outside _build/ and .git/ with its modification time."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")
            if p.is_file() and not {"__pycache__", "_build", ".git"} & set(p.relative_to(root).parts)}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.org", *args], cwd=root,
                          check=True, capture_output=True, text=True).stdout.strip()


def commit(root: Path, message: str = "fixture") -> str:
    """Commit everything in the test project (a repository of its own); its short commit."""
    if not (root / ".git").exists():
        git(root, "init", "-q")
        (root / ".gitignore").write_text("_build/\n__pycache__/\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "--allow-empty", "-m", message)
    return git(root, "rev-parse", "--short=12", "HEAD")


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def _as_repo(project: Path) -> Path:
    (project / "book" / "params" / "paper.yaml").write_text("99-fixture: {n: 64, points: 3}\n")
    (project / "book" / "params" / "quick.yaml").write_text("99-fixture: {n: 4, points: 2}\n")
    commit(project)
    return project


@pytest.fixture
def repo(project) -> Path:
    """The fixture project as a git repository, with three sweep points at `paper` (two at
    `quick`, the canary, so that it runs the same sweep function)."""
    return _as_repo(project)


@pytest.fixture
def recorded(_recorded_once, tmp_path) -> Path:
    """A copy of the recorded project (its history, run, points and record) for one test to change."""
    root = tmp_path / "project"
    shutil.copytree(_recorded_once, root, symlinks=True)
    return root


@pytest.fixture(scope="module")
def _recorded_once(tmp_path_factory) -> Path:
    """The fixture chapter run at `paper` (seconds for this chapter) and recorded, once for the
    module: the tests that read or change a recorded project each get a copy (`recorded`)."""
    repo = _as_repo(make_project(tmp_path_factory.mktemp("recorded") / "project"))
    assert companion("run", "99", "--profile", "paper", root=repo).returncode == 0
    before = _files(repo)
    out = companion("record", "99", "--profile", "paper", root=repo)
    assert out.returncode == 0, out.stderr
    assert RECORD in out.stdout
    after = _files(repo)
    written = {p for p in after if after[p] != before.get(p)}
    assert written == {RECORD}, written  # record writes nothing else (its canary runs under _build/)
    return repo


def _record(root: Path) -> dict:
    return json.loads((root / RECORD).read_text())


def _state(root: Path) -> list[str]:
    book = Book(root)
    return records.changes(book, book.chapter("99"), _record(root))


def test_record_holds_claims_metrics_provenance_and_canary_of_the_run(recorded):
    record = _record(recorded)
    run = json.loads((recorded / "_build/runs/paper/99-fixture/results.json").read_text())
    assert record["chapter"] == SLUG and record["profile"] == "paper" and record["record_version"] == 2
    assert record["claims"] == run["claims"] and record["metrics"] == run["metrics"]
    assert record["parameters"] == run["parameters"] and record["parameters"]["n"] == 64
    prov = record["provenance"]
    for key in ("cache_key", "deps", "runtime_s", "started", "threads", "sweeps"):
        assert prov[key] == run["provenance"][key], key
    assert prov["git"] == git(recorded, "rev-parse", "--short=12", "HEAD")  # the clean commit, no -dirty
    assert prov["sweeps"] == ["lib.fixture_paper.slow_point"]
    assert prov["machine"]["cores"] == os.cpu_count() and prov["machine"]["cpu"]
    assert prov["machine"]["isa"].startswith("x86-64-v")
    assert "lib/fixture_paper.py" in record["inputs"]["files"]
    assert record["inputs"]["environment"]["packages"]["numpy"]
    assert record["confirmed"]["method"] == "recomputed" and record["confirmed"]["commit"] == prov["git"]
    quick = json.loads((recorded / "_build/runs/quick/99-fixture/results.json").read_text())
    assert record["canary"] == {"profile": "quick", "digest": records.numbers_digest(quick),
                                "sweeps": ["lib.fixture_paper.slow_point"]}
    assert not list((recorded / "book" / "records").rglob("*.ipynb")) and not list(
        (recorded / "book" / "records").rglob("*.png"))


def test_only_a_change_that_can_change_a_number_makes_the_record_stale(recorded):
    book = Book(recorded)
    ch = book.chapter("99")
    record = records.load(book, "paper", ch)
    section = record_pages.chapter_section(book, ch)
    assert section.startswith("## At the `paper` profile")
    assert "The record is current" in section and "Stale" not in section and "Last confirmed: recomputed" in section
    assert 'class="claims-table"' in section and "<code>mean</code>" in section
    value = record["metrics"]["value"]
    assert f"| `value` | {records.format_value(value)} |" in section  # the recorded number, not a typed one
    assert "2/2 claims hold" in section
    row = next(r for r in record_pages.records_table(book).splitlines() if "chapters/99-fixture" in r)
    assert "| current (recomputed at commit" in row and "2/2 claims hold" in row
    total = record_pages.records_table(book).splitlines()[-1]
    assert total.startswith("| all 1 recorded | ") and record_pages._times(record["provenance"]) in total

    # a comment, a docstring, a markdown cell, a ruff setting, a presentation module: current
    fixture = recorded / "lib" / "fixture_paper.py"
    edit(fixture, "import numpy as np\n", "import numpy as np  # the draws\n\n\n")
    edit(fixture, '"""One sweep point', '"""One sweep point (reworded)')
    nb = recorded / "book" / "chapters" / "99-fixture.ipynb"
    doc = json.loads(nb.read_text())
    doc["cells"][0]["source"] = ["# Fixture chapter \n", "\n", "Another paragraph.\n"]
    nb.write_text(json.dumps(doc))
    with open(recorded / "pyproject.toml", "a") as f:
        f.write("\n[tool.ruff]\nline-length = 118\n")
    with open(recorded / "lib" / "plotting.py", "a") as f:
        f.write("\n\ndef unused_style():\n    return 3\n")
    assert records.changes(book, ch, record) == []
    assert "The record is current" in record_pages.chapter_section(book, ch)

    # a constant in the paper's module: stale, naming the file; the other modules untouched
    edit(fixture, "scale + rng.standard_normal(n)", "scale + 1.0 * rng.standard_normal(n)")
    assert records.changes(book, ch, record) == ["lib/fixture_paper.py"]
    section = record_pages.chapter_section(book, ch)
    assert "**Stale:**" in section and "lib/fixture_paper.py" in section
    assert f"{records.format_value(value)}" in section  # still shown, marked stale
    row = next(r for r in record_pages.records_table(book).splitlines() if "chapters/99-fixture" in r)
    assert "*stale* (lib/fixture_paper.py changed)" in row
    (recorded / "lib" / "unrelated_paper.py").write_text("X = 2\n")  # not imported by the chapter
    assert records.changes(book, ch, record) == ["lib/fixture_paper.py"]

    (recorded / "book" / "params" / "paper.yaml").write_text("99-fixture: {n: 32, points: 3}\n")
    assert records.changes(book, ch, record) == ["parameter n (64 → 32)", "lib/fixture_paper.py"]
    # the notebook's code
    doc["cells"][2]["source"] = [*doc["cells"][2]["source"], "\nvalue = value\n"]
    nb.write_text(json.dumps(doc))
    assert "the notebook's code" in records.changes(book, ch, record)


def test_a_module_only_the_workers_import_is_a_dependency(repo):
    """Issue 52's hole: a module imported only by the sweep's function, lazily and by a name the
    syntax tree cannot see, with COMPANION_JOBS=2 (joblib workers) and on a LocalCluster."""
    (repo / "lib" / "worker_only.py").write_text("SHIFT = 0.0\n")
    edit(repo / "lib" / "fixture_paper.py", "    time.sleep(sleep_s)\n",
         "    time.sleep(sleep_s)\n    import importlib\n\n"
         "    shift = importlib.import_module('lib.' + 'worker_only').SHIFT\n")
    edit(repo / "lib" / "fixture_paper.py", 'return {"value": float(',
         'return {"value": shift + float(')
    commit(repo, "a worker-only module")
    for how in (("--out", str(repo / "_build" / "jobs")), ("--out", str(repo / "_build" / "cluster"),
                                                           "--scheduler", "local:2")):
        out = companion("run", "99", "--profile", "paper", *how, root=repo, env={"COMPANION_JOBS": "2"})
        assert out.returncode == 0, out.stdout + out.stderr
        deps = json.loads((Path(how[1]) / "results.json").read_text())["provenance"]["deps"]
        assert "lib/worker_only.py" in deps, (how, deps)
    out = companion("record", "99", "--profile", "paper", "--from", str(repo / "_build" / "jobs"), root=repo)
    assert out.returncode == 0, out.stderr
    assert "lib/worker_only.py" in _record(repo)["provenance"]["deps"]
    (repo / "lib" / "worker_only.py").write_text("SHIFT = 0.0  # a comment\n")
    assert _state(repo) == []
    (repo / "lib" / "worker_only.py").write_text("SHIFT = 1e-300\n")
    assert _state(repo) == ["lib/worker_only.py"]


def _log_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_verify_and_run_force_recompute_every_point(recorded, tmp_path):
    log = tmp_path / "points.log"
    env = {"FIXTURE_LOG": str(log)}
    out = companion("verify", "99", "--profile", "paper", root=recorded, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "agrees with its record" in out.stdout and "compared exactly (same CPU model" in out.stdout
    assert _log_lines(log) == 3  # every point computed, none read from the kept points
    assert (recorded / "_build/verify/paper/99-fixture/results.json").exists()  # a rerun, not the cache
    assert companion("run", "99", "--profile", "paper", "--force", root=recorded, env=env).returncode == 0
    assert _log_lines(log) == 6
    out = companion("run", "99", "--profile", "paper", "--out", str(recorded / "_build" / "again"), root=recorded,
                    env=env)
    assert out.returncode == 0 and _log_lines(log) == 6  # a plain run resumes from the kept points


def test_verify_exits_2_on_a_one_ulp_change_in_a_recorded_metric(recorded):
    path = recorded / RECORD
    record = json.loads(path.read_text())
    record["metrics"]["swept"][1] = math.nextafter(record["metrics"]["swept"][1], math.inf)
    path.write_text(json.dumps(record, indent=1))
    out = companion("verify", "99", "--profile", "paper", root=recorded)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "metric swept[1]:" in out.stdout and "compared exactly" in out.stdout


def test_verify_exits_2_on_a_one_ulp_change_in_a_sweep_function(recorded):
    edit(recorded / "lib" / "fixture_paper.py",
         'return {"value": float(np.random.default_rng([seed, i]).standard_normal())}',
         'return {"value": float(np.nextafter(np.random.default_rng([seed, i]).standard_normal(), np.inf))}')
    out = companion("verify", "99", "--profile", "paper", root=recorded)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "record is stale (changed: lib/fixture_paper.py)" in out.stdout
    assert "metric swept[0]:" in out.stdout and "metric value:" not in out.stdout


def test_verify_names_a_changed_verdict(recorded):
    edit(recorded / "lib" / "fixture_paper.py", "return float(np.mean(scale + rng.standard_normal(n)))",
         "return float(np.mean(scale + rng.standard_normal(n))) + 100.0")
    out = companion("verify", "99", "--profile", "paper", root=recorded)
    assert out.returncode == 2 and "claim mean: holds in the record, FAILS now" in out.stdout


def test_verify_run_compares_a_run_folder_without_recomputing(recorded, tmp_path):
    log = tmp_path / "points.log"
    run = recorded / "_build/runs/paper/99-fixture"
    out = companion("verify", "99", "--profile", "paper", "--run", str(run), root=recorded,
                    env={"FIXTURE_LOG": str(log)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "without recomputing" in out.stdout and "of the current code" in out.stdout and _log_lines(log) == 0
    doc = json.loads((run / "results.json").read_text())
    doc["metrics"]["value"] = math.nextafter(doc["metrics"]["value"], -math.inf)
    bent = tmp_path / "bent"
    bent.mkdir()
    (bent / "results.json").write_text(json.dumps(doc))
    out = companion("verify", "99", "--profile", "paper", "--run", str(bent), root=recorded)
    assert out.returncode == 2 and "metric value:" in out.stdout, out.stdout + out.stderr


def test_compare_is_exact_on_the_same_machine_and_within_the_stated_tolerance_elsewhere(recorded):
    record = {"claims": [{"id": "a", "kind": "check", "holds": True}],
              "metrics": {"x": 1.0, "xs": [1.0, 2.0], "timings": {"s": 3.0}, "name": "k", "nan": float("nan")}}
    same = json.loads(json.dumps(record))
    same["metrics"].update(x=1.0 + 1e-12, timings={"s": 9.0})
    assert records.compare(record, same) == []
    assert records.compare(record, same, exact=True) == ["metric x: 1.0 in the record, 1.000000000001 now"]
    moved = json.loads(json.dumps(record))
    moved["metrics"]["xs"][1] = 2.001
    assert records.compare(record, moved) == ["metric xs[1]: 2 in the record, 2.001 now"]
    lost = json.loads(json.dumps(record))
    lost["claims"] = []
    assert records.compare(record, lost) == ["claim a: not in the rerun"]

    book = Book(recorded)
    real = _record(recorded)
    exact, how = records.exactness(book, real)
    assert exact and how.startswith("compared exactly")
    elsewhere = json.loads(json.dumps(real))
    elsewhere["provenance"]["machine"]["cpu"] = "AMD EPYC 9654 96-Core Processor"
    exact, how = records.exactness(book, elsewhere)
    assert not exact and "within a relative 1e-06" in how and "AMD EPYC" in how
    other = json.loads(json.dumps(real))
    other["inputs"]["environment"]["packages"]["numpy"] = "0.1"
    assert records.exactness(book, other)[0] is False


@pytest.mark.parametrize("args, needle", [
    (("record", "99", "--profile", "paper"), "has no paper run to record"),
    (("verify", "99", "--profile", "paper"), "has no paper record to verify"),
    (("record", "nope", "--profile", "paper"), "no chapter 'nope'"),
    (("rekey", "99"), "has no paper record to rekey"),
])
def test_bad_usage_is_one_line_exit_64_and_writes_nothing(repo, args, needle):
    out = companion(*args, root=repo)
    assert out.returncode == 64 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (repo / "book" / "records").exists()


def test_a_stale_run_is_not_recorded(repo):
    assert companion("run", "99", "--profile", "paper", root=repo).returncode == 0
    (repo / "book" / "params" / "paper.yaml").write_text("99-fixture: {n: 32}\n")
    out = companion("record", "99", "--profile", "paper", root=repo)
    assert out.returncode == 64 and "not of the current code and profile" in out.stderr
    assert not (repo / "book" / "records").exists()


@pytest.mark.parametrize("change", ["modified", "untracked-params", "modified-unrelated"])
def test_record_refuses_files_the_run_depends_on_that_differ_from_the_commit(repo, change):
    assert companion("run", "99", "--profile", "paper", root=repo).returncode == 0
    if change == "modified":  # a dep, edited after the run: the run is no longer current either way
        git(repo, "rm", "-q", "--cached", "lib/fixture_paper.py")
        git(repo, "commit", "-q", "-m", "untrack the paper module")
    elif change == "untracked-params":
        (repo / "book" / "params" / "extra.yaml").write_text("{}\n")
    else:  # outside the run's files: recording goes ahead
        (repo / "lib" / "unrelated_paper.py").write_text("X = 3\n")
    out = companion("record", "99", "--profile", "paper", root=repo)
    if change == "modified-unrelated":
        assert out.returncode == 0, out.stderr
        return
    assert out.returncode == 64 and "differ from commit" in out.stderr, out.stderr
    assert ("lib/fixture_paper.py" if change == "modified" else "book/params/extra.yaml") in out.stderr
    assert not (repo / "book" / "records").exists()


def test_record_outside_a_git_checkout_is_refused(project):
    assert companion("run", "99", "--profile", "paper", root=project).returncode == 0
    out = companion("record", "99", "--profile", "paper", root=project)
    assert out.returncode == 64 and "not a git checkout" in out.stderr


def test_a_broken_record_is_reported_in_one_line_not_shown_as_missing(recorded):
    path = recorded / RECORD
    path.write_text(path.read_text()[:200])
    out = companion("verify", "99", "--profile", "paper", root=recorded)
    assert out.returncode == 64 and "is not a record of 99-fixture" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_run_whose_inputs_changed_while_it_ran_is_not_recorded(repo):
    """The cache key is computed from the files at the end of a run; one edited during the run
    may not be what the kernel imported."""
    assert companion("run", "99", "--profile", "paper", root=repo).returncode == 0
    fixture = repo / "lib" / "fixture_paper.py"
    started = json.loads((repo / "_build/runs/paper/99-fixture/results.json").read_text())["provenance"]["started"]
    from datetime import datetime

    os.utime(fixture, (datetime.fromisoformat(started).timestamp() + 1,) * 2)  # same bytes, edited mid-run
    out = companion("record", "99", "--profile", "paper", root=repo)
    assert out.returncode == 64 and "lib/fixture_paper.py changed while the paper run" in out.stderr
    assert not (repo / "book" / "records").exists()


def test_rekey_carries_a_record_whose_canary_agrees_and_keeps_one_whose_canary_differs(recorded):
    # a refactor that computes the same numbers: stale, then carried by its canary
    edit(recorded / "lib" / "fixture_paper.py", "    return float(np.mean(scale + rng.standard_normal(n)))",
         "    draws = scale + rng.standard_normal(n)\n    return float(np.mean(draws))")
    assert _state(recorded) == ["lib/fixture_paper.py"]
    out = companion("rekey", "99", root=recorded)
    assert out.returncode == 64 and "differ from commit" in out.stderr  # uncommitted code is not carried to
    head = commit(recorded, "refactor")
    out = companion("rekey", "99", root=recorded)
    assert out.returncode == 0 and "carried by canary" in out.stdout, out.stdout + out.stderr
    record = _record(recorded)
    assert _state(recorded) == []
    assert record["confirmed"]["method"] == "carried by canary" and record["confirmed"]["commit"] == head
    assert record["confirmed"]["canary_now"] == record["confirmed"]["canary_at_record"] == record["canary"]["digest"]
    book = Book(recorded)
    assert f"carried by canary to commit `{head}`" in record_pages.chapter_section(book, book.chapter("99"))
    status = companion("status", "--profile", "paper", root=recorded)
    assert "record: current (carried by canary" in status.stdout

    # a change that moves a number: the canary differs, the record stays stale
    edit(recorded / "lib" / "fixture_paper.py", 'standard_normal())}', 'standard_normal()) * 1.5}')
    commit(recorded, "a real change")
    out = companion("rekey", "99", root=recorded)
    assert out.returncode == 2 and "stays stale" in out.stdout, out.stdout + out.stderr
    assert _state(recorded) == ["lib/fixture_paper.py"] and _record(recorded) == record
    status = companion("status", "--profile", "paper", root=recorded)
    assert "record: stale (lib/fixture_paper.py)" in status.stdout


def test_rekey_of_a_record_without_a_canary_runs_one_at_the_records_commit(recorded):
    """Records made before canaries were stored: the canary runs at the record's own commit (a
    git worktree) and at HEAD; a record from a modified tree ('-dirty') cannot be carried."""
    path = recorded / RECORD
    old = json.loads(path.read_text())
    old.pop("canary")
    old.pop("confirmed")
    old["record_version"] = 1
    path.write_text(json.dumps(old, indent=1))
    commit(recorded, "an old record")
    assert "predates the syntax-tree digests" in _state(recorded)[0]
    assert "record: stale (the record predates" in companion("status", "--profile", "paper", root=recorded).stdout

    dirty = {**old, "provenance": {**old["provenance"], "git": old["provenance"]["git"] + "-dirty"}}
    path.write_text(json.dumps(dirty, indent=1))
    commit(recorded, "a record from a modified tree")
    out = companion("rekey", "99", root=recorded)
    assert out.returncode == 2 and "modified working tree" in out.stdout, out.stdout

    path.write_text(json.dumps(old, indent=1))
    commit(recorded, "the old record again")
    out = companion("rekey", "99", root=recorded)
    assert out.returncode == 0 and "carried by canary" in out.stdout, out.stdout + out.stderr
    record = _record(recorded)
    assert record["confirmed"]["from_commit"] == old["provenance"]["git"] and _state(recorded) == []
    assert not git(recorded, "worktree", "list").count("\n")  # the temporary checkout is gone


def test_rekey_never_carries_a_changed_parameter_or_past_a_failing_canary(recorded):
    edit(recorded / "lib" / "fixture_paper.py", "    return float(np.mean(scale + rng.standard_normal(n)))",
         "    draws = scale + rng.standard_normal(n)\n    return float(np.mean(draws))")
    (recorded / "book" / "params" / "quick.yaml").write_text("99-fixture: {n: 4, points: 2, fail: true}\n")
    commit(recorded, "a refactor, and a canary that fails")
    out = companion("rekey", "99", root=recorded)
    assert out.returncode == 2 and "canary run failed" in out.stdout and "asked to fail" in out.stdout, out.stdout
    (recorded / "book" / "params" / "paper.yaml").write_text("99-fixture: {n: 65, points: 3}\n")
    commit(recorded, "another parameter")
    out = companion("rekey", "99", root=recorded)
    assert out.returncode == 2 and "parameters changed (parameter n (64 → 65)" in out.stdout, out.stdout
    assert _record(recorded)["confirmed"]["method"] == "recomputed"


def test_status_shows_each_records_state(recorded):
    out = companion("status", "--profile", "paper", root=recorded)
    assert out.returncode == 0
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(SLUG))
    assert "run: cached" in line and "record: current (recomputed at commit" in line
    out = companion("status", "--profile", "default", root=recorded)
    assert "record: none" in next(ln for ln in out.stdout.splitlines() if ln.startswith(SLUG))


def test_staged_book_renders_the_record_section_and_the_reproducing_table(recorded):
    from lib.pipeline.book import stage

    for name in ("_config.yml", "_toc.yml"):
        (recorded / name).write_text("{}\n")
    (recorded / "book" / "status.md").write_text("<!-- status-table -->\n")
    (recorded / "book" / "reproducing.md").write_text(f"# Reproducing\n\n{record_pages.TABLE_MARKER}\n")
    dest = stage(Book(recorded), "paper")
    nb = json.loads((dest / "book/chapters/99-fixture.ipynb").read_text())
    ids = [c.get("id") for c in nb["cells"]]
    assert ids[-2:] == ["companion-record", "companion-downloads"]
    page = (dest / "book/reproducing.md").read_text()
    assert record_pages.TABLE_MARKER not in page and "[99 fixture](chapters/99-fixture.ipynb)" in page
    assert (dest / "book/records/paper/99-fixture.json").exists()  # the page's download link resolves


def test_a_chapter_without_a_record_says_not_yet_recorded(project):
    book = Book(project)
    assert "Not yet recorded" in record_pages.chapter_section(book, book.chapter("99"))
    row = next(r for r in record_pages.records_table(book).splitlines() if "chapters/99-fixture" in r)
    assert "not yet recorded" in row
    assert "| all " not in record_pages.records_table(book)  # no total without a record
