"""The `companion` CLI contract (docs/design.md): parameter validation, exit codes, cache, atomicity."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, ROOT, companion

from lib.pipeline.chapters import Book, Constraint, Parameter, UsageError, parameters_of
from lib.claims import tally

RUN_DIR = Path("_build/runs")


def results(root: Path, profile: str = "default") -> dict:
    return json.loads((root / RUN_DIR / profile / "99-fixture" / "results.json").read_text())


def test_tally_counts_claims_a_profile_does_not_evaluate_apart():
    claims = [{"holds": True}, {"holds": False}, {"holds": None}, {"holds": True}]
    assert tally(claims) == "2/3 claims hold (1 skipped at this profile)"
    assert tally(claims[:2]) == "1/2 claims hold"


# -- parameter parsing (no kernel) ----------------------------------------------------------
@pytest.mark.parametrize("default, text, expected", [
    (0, "3", 3), (0.5, "2", 2.0), (0.5, "1e-3", 1e-3), (True, "false", False), ("a", "b c", "b c"),
    ([1, 2], "[3, 4, 5]", [3, 4, 5]), ([0.5], "[1, 2.5]", [1.0, 2.5]),
])
def test_parameter_coercion(default, text, expected):
    value = Parameter("x", default).coerce(text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("default, text", [(0, "1.5"), (0, "true"), (True, "maybe"), (0.5, "abc"),
                                           ([1], "[1, 'a']"), ([1], "3")])
def test_parameter_rejects_wrong_type(default, text):
    with pytest.raises(UsageError, match=r"parameter 'x' expects"):
        Parameter("x", default).coerce(text)


@pytest.mark.parametrize("comment, inside, outside", [
    ("∈ [0, 4294967295]: seed", [0, 7, 2**32 - 1], [-1, 0.5 - 1, 2**32]),
    ("∈ [0, ∞): a size", [0, 10**9], [-1, float("inf"), float("nan")]),
    ("∈ (0, 1]: step size", [1e-9, 1.0], [0.0, 1.5, float("nan")]),
    ("∈ (−∞, ∞): any finite number", [-1e300, 0.0], [float("-inf"), float("nan")]),
    ("∈ [2, 8)", [2, 7, [2, 3], [[2, 3], [4]]], [8, [2, 9], [[2], [8]], "2", True]),
    ("∈ [1, 10⁶], length ∈ [1, 3]: sizes", [[1], [1, 10**6, 5]], [[], [1, 2, 3, 4], [10**6 + 1]]),
    ("∈ [10⁻³, 1]", [1e-3, 1], [9e-4]),
    ('∈ {"cpu", "cuda"}: device', ["cpu", "cuda"], ["tpu"]),
    ('∈ {"fwd", "bwd"}, length ∈ [1, 2]: passes', [["fwd"], ["bwd", "fwd"]], [[], ["up"], ["fwd"] * 3]),
])
def test_constraints_parse_from_comments_and_judge_values(comment, inside, outside):
    c = Constraint.parse(comment)
    assert c is not None and comment.startswith(c.text)
    assert all(c.admits(v) for v in inside) and not any(c.admits(v) for v in outside)
    assert Constraint.parse("plain help text, no constraint") is None


def test_constraints_are_read_from_the_parameters_cell(tmp_path):
    nb = json.loads((ROOT / "tests" / "fixtures" / "99-fixture.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    cell["source"] = ("seed: int = 0  # ∈ [0, 4294967295]\nn: int = 8  # ∈ [1, 64]: draws\nlr = 0.5  # ∈ (0, 1]\n"
                      "sizes: list[int] = []  # ∈ [1, 9], length ∈ [0, 2]\n")
    path = tmp_path / "99-x.ipynb"
    path.write_text(json.dumps(nb))
    params = parameters_of(path)
    assert params["seed"].constraint.text == "∈ [0, 4294967295]" and params["seed"].type_name == "int"
    assert params["n"].check("64") == 64 and params["n"].help == "∈ [1, 64]: draws"
    assert params["lr"].type_name == "float" and params["sizes"].type_name == "list of int"
    assert params["sizes"].check("[3, 4]") == [3, 4]  # the element type comes from the annotation
    for bad in ("[3.5]", '["a"]', "[1, 2, 3]", "[10]"):
        with pytest.raises(UsageError, match="'sizes'"):
            params["sizes"].check(bad)
    with pytest.raises(UsageError, match=r"parameter 'n' must be ∈ \[1, 64\], got 65"):
        params["n"].check("65")
    for source in ("seed = 0\nn = 0  # ∈ [1, 64]\n", "seed = 0\nn: float = 'a'\n", "seed = 0\nn: set = 1\n"):
        cell["source"] = source
        path.write_text(json.dumps(nb))
        with pytest.raises(UsageError, match="'n'"):
            parameters_of(path)


@pytest.mark.parametrize("profile", ["quick", "default", "paper"])
@pytest.mark.integration
def test_dry_run_validates_every_chapter_at_every_profile(profile):
    out = companion("run", "all", "--profile", profile, "--dry-run", timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 * len(Book(ROOT).chapters())  # each chapter's values, then its expected time
    assert all(line.startswith("  expected: ") for line in lines[1::2])
    assert not out.stderr


@pytest.mark.parametrize("extra", [["--dry-run"], []])
@pytest.mark.integration
def test_negative_seed_is_a_usage_error_before_anything_runs(extra):
    out = companion("run", "01", "-p", "seed", "-1", *extra, timeout=120)
    assert out.returncode == 64 and out.stderr.strip() == "error: parameter 'seed' must be ∈ [0, 4294967295], got -1"


@pytest.mark.integration
def test_params_prints_flat_yaml_for_papermill_and_version():
    import yaml

    out = companion("params", "02", "--profile", "quick", "-p", "seed", "4", timeout=120)
    assert out.returncode == 0, out.stderr
    params = yaml.safe_load(out.stdout)
    book = Book(ROOT)
    ch = book.chapter("02")
    expected = ch.resolve(book.profile("quick", ch), {"seed": "4"})
    expected.pop("out_dir", None)
    expected["profile"] = "quick"  # so that `papermill -f` alone labels the run
    assert params == expected and next(iter(params)) == "profile"
    version = companion("--version", timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("companion ")


@pytest.mark.integration
def test_a_device_this_machine_lacks_is_a_usage_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = companion("run", "10", "-p", "device", "cuda", "--dry-run", timeout=120)
    assert out.returncode == 64 and "'cuda' is not available" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.integration
def test_unwritable_out_is_one_line_exit_64(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = companion("run", "02", "--out", str(blocker / "x"), timeout=120)
    assert out.returncode == 64
    assert len(out.stderr.strip().splitlines()) == 1 and "cannot write there" in out.stderr
    assert "Traceback" not in out.stderr


# -- the CLI against a throw-away project ---------------------------------------------------
@pytest.mark.integration
def test_list_shows_parameters_and_types(project):
    out = companion("list", root=project)
    assert out.returncode == 0, out.stderr
    assert "99-fixture" in out.stdout and "Fixture chapter" in out.stdout
    assert "scale" in out.stdout and "float" in out.stdout and "1.5" in out.stdout


@pytest.mark.parametrize("args, needle", [
    (["run", "99", "-p", "nope", "1"], "no parameter 'nope'"),
    (["run", "99", "-p", "n", "many"], "parameter 'n' expects int"),
    (["run", "99", "-p", "scale", "big"], "parameter 'scale' expects float"),
    (["run", "99", "-p", "out_dir", "x"], "--out"),
    (["run", "42"], "no chapter '42'"),
    (["run", "99", "--profile", "huge"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    (["seeds", "99", "--seeds", "9-3"], "--seeds"),
    (["seeds", "99", "--seeds", "a,b"], "--seeds"),
    (["seeds", "99", "-p", "n", "3"], "unrecognized arguments"),
])
@pytest.mark.integration
def test_bad_usage_is_one_line_exit_64_and_starts_nothing(project, args, needle):
    t0 = time.perf_counter()
    out = companion(*args, root=project)
    assert out.returncode == 64
    assert needle in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert not (project / "_build").exists()  # no kernel started, nothing written
    assert time.perf_counter() - t0 < 20


@pytest.mark.integration
def test_run_writes_results_and_cache_follows_imported_sources(project):
    first = companion("run", "99", "--profile", "quick", root=project)
    assert first.returncode == 0, first.stderr
    doc = results(project, "quick")
    assert doc["chapter"] == "99-fixture" and doc["profile"] == "quick"
    assert doc["parameters"]["n"] == 4 and "out_dir" not in doc["parameters"]
    assert doc["claims"][0]["holds"] is True
    prov = doc["provenance"]
    assert {"git", "cache_key", "python", "torch", "started", "runtime_s", "threads"} <= set(prov)
    assert "lib/fixture_paper.py" in prov["deps"] and "lib/claims.py" in prov["deps"]
    assert "lib/unrelated_paper.py" not in prov["deps"]
    assert (project / RUN_DIR / "quick" / "99-fixture" / "99-fixture.ipynb").exists()

    again = companion("run", "99", "--profile", "quick", root=project)
    assert again.returncode == 0 and "cached" in again.stdout

    # A module the chapter does not import: still cached.
    (project / "lib" / "unrelated_paper.py").write_text("X = 2\n")
    assert "cached" in companion("run", "99", "--profile", "quick", root=project).stdout

    # The chapter's own paper module changes: re-run.
    with (project / "lib" / "fixture_paper.py").open("a") as f:
        f.write("\n# an edit\n")
    edited = companion("run", "99", "--profile", "quick", root=project)
    assert edited.returncode == 0 and "] ran (" in edited.stdout
    assert results(project, "quick")["provenance"]["cache_key"] != prov["cache_key"]

    # Another parameter value: re-run; same seed and parameters: the same numbers.
    other = companion("run", "99", "--profile", "quick", "-p", "n", "5", root=project)
    assert "] ran (" in other.stdout
    assert results(project, "quick")["parameters"]["n"] == 5
    back = companion("run", "99", "--profile", "quick", "--force", root=project)
    assert "] ran (" in back.stdout
    assert results(project, "quick")["metrics"] == doc["metrics"]


@pytest.mark.integration
def test_failing_claim_exits_2_and_names_it(project):
    out = companion("run", "99", "-p", "claim_ok", "false", root=project)
    assert out.returncode == 2
    assert "'mean' does not hold" in out.stderr
    assert results(project)["claims"][0]["holds"] is False


@pytest.mark.integration
def test_failing_notebook_exits_1_and_leaves_previous_result_intact(project):
    assert companion("run", "99", root=project).returncode == 0
    before = (project / RUN_DIR / "default" / "99-fixture" / "results.json").read_text()
    out = companion("run", "99", "-p", "fail", "true", root=project)
    assert out.returncode == 1
    assert "the fixture was asked to fail" in out.stderr
    assert (project / RUN_DIR / "default" / "99-fixture" / "results.json").read_text() == before
    assert not list((project / RUN_DIR / "default").glob(".tmp-*"))


@pytest.mark.integration
def test_failing_first_run_leaves_nothing(project):
    out = companion("run", "99", "-p", "fail", "true", root=project)
    assert out.returncode == 1
    assert not (project / RUN_DIR / "default" / "99-fixture").exists()


@pytest.mark.integration
def test_killed_run_leaves_no_result_and_next_run_redoes_it(project):
    env = {"COMPANION_ROOT": str(project), "PYTHONPATH": str(project)}
    import os

    proc = subprocess.Popen([str(BIN / "companion"), "run", "99", "-p", "sleep_s", "60"],
                            cwd=project, env={**os.environ, **env}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp_glob = lambda: list((project / RUN_DIR / "default").glob(".tmp-99-fixture-*"))  # noqa: E731
    deadline = time.time() + 60
    while time.time() < deadline and not tmp_glob():
        time.sleep(0.2)
    assert tmp_glob(), "the run never started"
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (project / RUN_DIR / "default" / "99-fixture").exists()
    out = companion("run", "99", root=project)
    assert out.returncode == 0 and "] ran (" in out.stdout
    assert not tmp_glob()


@pytest.mark.integration
def test_out_dir_and_status(project, tmp_path):
    out = companion("run", "99", "--profile", "quick", "--out", str(tmp_path / "elsewhere"), root=project)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "elsewhere" / "results.json").exists()
    status = companion("status", "--profile", "quick", root=project)
    assert status.returncode == 0 and "99-fixture" in status.stdout and "not run" in status.stdout
    companion("run", "99", "--profile", "quick", root=project)
    status = companion("status", "--profile", "quick", root=project)
    assert "cached" in status.stdout and "2/2 claims hold" in status.stdout


@pytest.mark.integration
def test_jobs_runs_chapters_in_parallel_processes(project):
    """Two chapters at once (papermill changes the working directory, so each gets a process)."""

    chapters = project / "book" / "chapters"
    nb = (chapters / "99-fixture.ipynb").read_text().replace('"99-fixture"', '"98-fixture"')
    (chapters / "98-fixture.ipynb").write_text(nb)
    out = companion("run", "all", "--profile", "quick", "--jobs", "2", root=project)
    assert out.returncode == 0, out.stderr
    for slug in ("98-fixture", "99-fixture"):
        doc = json.loads((project / RUN_DIR / "quick" / slug / "results.json").read_text())
        assert doc["chapter"] == slug and doc["provenance"]["threads"] == 1
    assert not list((project / RUN_DIR / "quick").glob(".tmp-*"))


@pytest.mark.integration
def test_seeds_tallies_every_claim_over_seeds(project):
    out = companion("seeds", "99", "--seeds", "0-2,7", "--profile", "quick", root=project)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((project / "_build" / "seeds" / "quick" / "99-fixture" / "summary.json").read_text())
    assert summary["chapter"] == "99-fixture" and summary["profile"] == "quick"
    assert summary["seeds"] == [0, 1, 2, 7]
    assert summary["claims"] == [
        {"id": "mean", "kind": "theorem", "held": 4, "failed": 0, "skipped": 0, "not_run": 0, "failed_seeds": [],
         "verdicts": {}, "statuses": {"holds": [0, 1, 2, 7]}},
        {"id": "n-positive", "kind": "check", "held": 4, "failed": 0, "skipped": 0, "not_run": 0,
         "failed_seeds": [], "verdicts": {}, "statuses": {"holds": [0, 1, 2, 7]}}]
    assert "holds 4/4" in out.stdout and "summary.json" in out.stdout.splitlines()[-1]
    # each seed is an ordinary cached run with its own seed
    seed7 = json.loads((project / "_build" / "seeds" / "quick" / "99-fixture" / "seed-7" / "results.json").read_text())
    assert seed7["parameters"]["seed"] == 7
    again = companion("seeds", "99", "--seeds", "0-2,7", "--profile", "quick", root=project)
    assert again.stdout.count(": cached") == 4


@pytest.mark.integration
def test_seeds_exits_2_and_names_the_seed_a_claim_failed_on(project):
    (project / "book" / "params" / "quick.yaml").write_text("99-fixture: {n: 4, fail_seed: 1}\n")
    out = companion("seeds", "99", "--seeds", "0,1,2", "--profile", "quick", root=project)
    assert out.returncode == 2
    summary = json.loads((project / "_build" / "seeds" / "quick" / "99-fixture" / "summary.json").read_text())
    mean = next(c for c in summary["claims"] if c["id"] == "mean")
    assert (mean["held"], mean["failed"], mean["failed_seeds"]) == (2, 1, [1])
    assert "holds 2/3 (seeds [0, 2]), FAILS 1/3 (seeds [1])" in out.stdout


def _log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.integration
def test_killed_sweep_resumes_from_its_finished_points(project, tmp_path):
    log = tmp_path / "points.log"
    args = ("run", "99", "-p", "points", "8", "-p", "point_sleep", "1.5")
    env = {**os.environ, "COMPANION_ROOT": str(project), "PYTHONPATH": str(project), "FIXTURE_LOG": str(log)}
    proc = subprocess.Popen([str(BIN / "companion"), *args], cwd=project, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(_log_lines(log)) < 3 and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(_log_lines(log))
    assert 3 <= before < 8, f"{before} points finished before the kill"
    assert not (project / RUN_DIR / "default" / "99-fixture" / "results.json").exists()

    again = companion(*args, root=project, env={"FIXTURE_LOG": str(log)})
    assert again.returncode == 0, again.stderr
    computed_again = [line.split()[0] for line in _log_lines(log)[before:]]
    # the points finished before the kill are reused (the one in flight may be redone)
    assert len(computed_again) <= 8 - before + 1, computed_again
    assert len(results(project)["metrics"]["swept"]) == 8

    # same parameters, forced: every point is computed afresh (nothing read from the point store);
    # other parameters: a fresh sweep
    n = len(_log_lines(log))
    assert companion(*args, "--force", root=project, env={"FIXTURE_LOG": str(log)}).returncode == 0
    assert len(_log_lines(log)) == n + 8
    assert companion("run", "99", "-p", "points", "8", root=project, env={"FIXTURE_LOG": str(log)}).returncode == 0
    assert len(_log_lines(log)) == n + 16
    cleaned = companion("clean", "--points", root=project)
    assert cleaned.returncode == 0 and not (project / "_build" / "points").exists()


@pytest.mark.integration
def test_local_scheduler_runs_the_sweep_on_a_cluster_with_identical_results(project, tmp_path):
    log = tmp_path / "points.log"
    local = companion("run", "99", "-p", "points", "4", "--out", str(tmp_path / "a"), root=project)
    assert local.returncode == 0, local.stderr
    shutil.rmtree(project / "_build" / "points")  # no reuse: every point must run on the cluster
    remote = companion("run", "99", "-p", "points", "4", "--out", str(tmp_path / "b"),
                       "--scheduler", "local:2", root=project, env={"FIXTURE_LOG": str(log)})
    assert remote.returncode == 0, remote.stderr
    assert "local Dask cluster with 2 workers" in remote.stdout
    where = {line.split()[2] for line in _log_lines(log)}
    assert where and "local" not in where, f"points ran at {where}"
    a = json.loads((tmp_path / "a" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "results.json").read_text())
    assert a["metrics"] == b["metrics"] and a["claims"] == b["claims"]


def test_seeds_tallies_an_empirical_claim_by_verdict_not_as_held():
    from lib.pipeline.seeds import summarise

    def doc(verdict, holds):
        return {"claims": [{"id": "finding", "kind": "empirical", "holds": holds, "verdict": verdict},
                           {"id": "bound", "kind": "theorem", "holds": True}]}

    results = {0: doc("reproduced", True), 1: doc("not tested", False), 2: doc("reproduced", True),
               3: doc("not reproduced", False)}
    claims = {c["id"]: c for c in summarise("99-fixture", "default", [0, 1, 2, 3], results)["claims"]}
    assert claims["finding"]["verdicts"] == {"reproduced": [0, 2], "not tested": [1], "not reproduced": [3]}
    assert claims["bound"]["verdicts"] == {} and claims["bound"]["held"] == 4


def test_seeds_names_skipped_and_declared_claims_in_words():
    from lib.pipeline.seeds import claim_line, summarise

    results = {s: {"claims": [{"id": "later", "kind": "theorem", "holds": None},
                              {"id": "contra", "kind": "theorem", "holds": False, "declared": "contradicted"}]}
               for s in (0, 1)}
    claims = {c["id"]: c for c in summarise("99-fixture", "quick", [0, 1], results)["claims"]}
    assert claim_line(claims["later"], [0, 1], "quick") == "skipped at quick on every seed"
    assert claim_line(claims["contra"], [0, 1], "quick") == "fails (declared) 2/2"
    assert claims["contra"]["failed"] == 0  # a declared failure does not fail the sweep


@pytest.mark.integration
@pytest.mark.parametrize("argv", [["run", "99", "--profile", "quick", "-p", "n", "5"],
                                  ["run", "99", "--profile", "quick", "--dry-run"],
                                  ["seeds", "99", "--seeds", "0-2", "--profile", "quick"]])
def test_a_run_request_is_resolved_once_and_flows_one_way(project, monkeypatch, argv):
    """From the parser to the kernel, one route: each run's parameters are resolved and its
    folder checked once (runner.plan), and the planned request is what reaches run_chapter."""
    from lib.pipeline import cli, runner

    monkeypatch.setenv("COMPANION_ROOT", str(project))
    calls = {"resolve": 0, "output_dir": 0}
    def counting(name, real):
        def counted(*a, **kw):
            calls[name] += 1
            return real(*a, **kw)
        return counted

    for name in calls:
        monkeypatch.setattr(runner, name, counting(name, getattr(runner, name)))
    reached = []
    monkeypatch.setattr(runner, "run_chapter", lambda book, request, progress=True, scheduler=None:
                        reached.append(request) or runner.RunResult(request.chapter, request.profile,
                                                                    request.out_dir, "ran", 0))
    assert cli.main(argv) == 0
    runs = 3 if argv[0] == "seeds" else 1
    assert calls == {"resolve": runs, "output_dir": runs}
    if "--dry-run" in argv:
        assert reached == []
    else:
        assert len(reached) == runs and all(isinstance(r, runner.RunRequest) for r in reached)
        if argv[0] == "run":
            assert reached[0].params["n"] == 5
            assert reached[0].out_dir == project / "_build" / "runs" / "quick" / "99-fixture"
