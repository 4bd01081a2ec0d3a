"""A run never writes where it may not, and bad input is one line and exit 64 before any work.

Each refusal is probed as a user would meet it (the `companion` CLI, plain papermill), and every
folder or file the user owns is compared byte for byte before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import BIN, companion
from lib.outputs import MARKER, UnsafeOutput, check_output
from lib.pipeline.seeds import all_held, parse_seeds, summarise
from lib.pipeline.chapters import UsageError

SLUG = "99-fixture"


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` (or ``path`` itself) with the hash of its bytes; not the
    interpreter's bytecode caches of the project's own modules (``__pycache__``, which Python writes
    when the CLI imports them unless PYTHONDONTWRITEBYTECODE is set) nor pytest's cache."""
    if path.is_file():
        return {"": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*")) if not {".pytest_cache", "__pycache__"} & set(p.parts)}


def refused(out: subprocess.CompletedProcess, needle: str) -> None:
    assert out.returncode == 64, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr, out.stderr


# -- the output rule, unit-tested ------------------------------------------------------------

def test_output_rule_accepts_new_empty_and_run_folders(tmp_path):
    assert check_output(tmp_path / "new" / "deeper", SLUG) == (tmp_path / "new" / "deeper").resolve()
    (tmp_path / "empty").mkdir()
    check_output(tmp_path / "empty", SLUG)
    run = tmp_path / "run"
    (run / "figures").mkdir(parents=True)
    for name in (MARKER, "results.json", f"{SLUG}.ipynb", "figures/a.png", "figures/a.svg"):
        (run / name).write_text("x")
    check_output(run, SLUG)


@pytest.mark.parametrize("extra, why", [
    ("notes.txt", "did not write"), ("figures/notes.txt", "did not write"),
    ("01-other-chapter.ipynb", "did not write")])
def test_output_rule_refuses_folders_holding_anything_else(tmp_path, extra, why):
    run = tmp_path / "run"
    (run / "figures").mkdir(parents=True)
    (run / MARKER).write_text("x")
    (run / extra).write_text("mine")
    with pytest.raises(UnsafeOutput, match=why):
        check_output(run, SLUG)


def test_output_rule_needs_the_marker_outside_the_books_build(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text("{}")  # a user's own results.json
    with pytest.raises(UnsafeOutput, match="not written by a companion run"):
        check_output(run, SLUG, root=tmp_path / "book")
    legacy = tmp_path / "book" / "_build" / "runs" / "default" / SLUG
    legacy.mkdir(parents=True)
    (legacy / "results.json").write_text("{}")  # a run from before the marker existed
    check_output(legacy, SLUG, root=tmp_path / "book")


def test_output_rule_refuses_places_above_what_the_user_has(tmp_path, monkeypatch):
    home, repo = tmp_path / "home", tmp_path / "home" / "repo"
    repo.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(repo / ".")
    for path, why in [("", "empty path"), (".", "is the repository"), (str(repo), "is the repository"),
                      (str(home), "is the home folder"), (str(tmp_path), "is a folder above"), ("/", "above")]:
        with pytest.raises(UnsafeOutput, match=why):
            check_output(path, SLUG, root=repo)


# -- seeds and their exit code ----------------------------------------------------------------

def test_seed_lists_are_bounded_before_they_are_expanded():
    assert parse_seeds("0-4,17") == [0, 1, 2, 3, 4, 17] and parse_seeds("4294967295") == [4294967295]
    assert len(parse_seeds("0-999")) == 1000
    for bad in ("0-1000000000000", "0-1000", "0-600,1000-1600", "4294967296", "-1", "3-1", "a", ""):
        with pytest.raises(UsageError, match="--seeds"):
            parse_seeds(bad)


def test_a_claim_the_profile_skips_is_not_a_failure_of_seeds():
    claims = [{"id": "t", "kind": "theorem", "holds": None}, {"id": "c", "kind": "check", "holds": True}]
    summary = summarise("x", "quick", [0, 1], {0: {"claims": claims}, 1: {"claims": claims}})
    t = next(c for c in summary["claims"] if c["id"] == "t")
    assert (t["held"], t["failed"], t["skipped"], t["not_run"]) == (0, 0, 2, 0)
    assert all_held(summary)
    missing = summarise("x", "quick", [0, 1], {0: {"claims": claims}, 1: {}})  # seed 1 failed to run
    assert not all_held(missing)
    failed = summarise("x", "quick", [0], {0: {"claims": [{"id": "c", "kind": "check", "holds": False}]}})
    assert not all_held(failed)


# -- the CLI, as a user meets it -----------------------------------------------------------------

@pytest.mark.parametrize("target", ["", ".", "ROOT", "PARENT", "FILE", "USERDIR", "HOME"])
@pytest.mark.integration
def test_run_refuses_a_place_the_user_owns_and_leaves_it_byte_for_byte(project, tmp_path, target):
    home = tmp_path / "home"
    (home / "results").mkdir(parents=True)
    (home / "results" / "paper.csv").write_text("a,b\n1,2\n")
    (home / "notes.txt").write_text("mine\n")
    paths = {"": project, ".": project, "ROOT": project, "PARENT": project.parent,
             "FILE": home / "notes.txt", "USERDIR": home / "results", "HOME": home}
    given = {"": "", ".": ".", "ROOT": str(project), "PARENT": str(project.parent)}.get(target, str(paths[target]))
    before = snapshot(paths[target])
    out = companion("run", SLUG, "--profile", "quick", "--out", given, root=project, env={"HOME": str(home)},
                    timeout=120)
    refused(out, "--out")
    assert snapshot(paths[target]) == before


@pytest.mark.integration
def test_a_run_replaces_only_its_own_folder(project, tmp_path):
    out_dir = tmp_path / "ch99"
    assert companion("run", SLUG, "--profile", "quick", "--out", str(out_dir), root=project).returncode == 0
    assert (out_dir / MARKER).is_file() and (out_dir / "results.json").is_file()
    again = companion("run", SLUG, "--profile", "quick", "--out", str(out_dir), "--force", root=project)
    assert again.returncode == 0, again.stderr
    (out_dir / "notes.txt").write_text("the user's\n")
    rerun = companion("run", SLUG, "--profile", "quick", "--out", str(out_dir), "--force", root=project)
    assert rerun.returncode == 0, rerun.stderr
    named = [ln for ln in rerun.stderr.splitlines() if "left in place" in ln]
    assert len(named) == 1 and "notes.txt" in named[0], rerun.stderr
    assert (out_dir / "notes.txt").read_text() == "the user's\n"


@pytest.mark.integration
def test_ctrl_c_is_one_line_and_leaves_nothing_behind(project, tmp_path):
    out_dir = tmp_path / "interrupted"
    env = {**os.environ, "COMPANION_ROOT": str(project), "PYTHONPATH": str(project)}
    proc = subprocess.Popen([str(BIN / "companion"), "run", SLUG, "--profile", "quick", "--out", str(out_dir),
                             "-p", "sleep_s", "60"], env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(12)  # the kernel is up and inside the sleeping cell
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the foreground process group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip().endswith("interrupted"), err
    assert "Traceback" not in err and "ZMQError" not in err, err
    assert not out_dir.exists() and not list(tmp_path.glob(".*interrupted*"))


@pytest.mark.integration
def test_two_runs_into_one_folder_take_turns(project, tmp_path):
    out_dir = tmp_path / "shared"
    args = ("run", SLUG, "--profile", "quick", "--out", str(out_dir), "-p", "sleep_s", "4")
    results = []
    threads = [threading.Thread(target=lambda: results.append(companion(*args, root=project))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    said = "".join(r.stdout + r.stderr for r in results)
    assert "waiting for another run" in said and "cached" in said  # the second reused the first's result
    assert "running over TCP" not in said  # the kernel's own log is not the user's terminal
    # the whole run, and nothing else (the fixture draws no figure)
    assert {p.name for p in out_dir.iterdir()} == {MARKER, "results.json", f"{SLUG}.ipynb"}
    assert not list(tmp_path.glob(".shared.lock")) and not list(tmp_path.glob(".tmp-shared-*"))


@pytest.mark.parametrize("args, needle", [
    (["run", SLUG, "--jobs", "0", "--dry-run"], "--jobs"),
    (["run", SLUG, "--jobs", "-3", "--dry-run"], "--jobs"),
    (["seeds", SLUG, "--seeds", "0-1000000000000"], "--seeds"),
    (["run", SLUG, "--scheduler", "bogus", "--dry-run"], "--scheduler bogus"),
    (["run", SLUG, "--scheduler", "tcp://127.0.0.1:9", "--dry-run"], "no scheduler answers"),
    (["seeds", SLUG, "--seeds", "0", "--scheduler", "tcp://127.0.0.1:9"], "no scheduler answers"),
    (["run", SLUG, "-p", "scale", "-inf", "--dry-run"], "'scale' must be ∈ (−∞, ∞)"),
    (["run", SLUG, "-p", "scale", "nan", "--dry-run"], "'scale' must be"),
    (["run", SLUG, "-p", "seed", "4294967296", "--dry-run"], "'seed' must be ∈ [0, 4294967295]"),
    (["run", SLUG, "-p", "n"], "takes two values"),
    (["strip", "missing.ipynb"], "no such file"),
    (["strip", "pyproject.toml"], "not a notebook"),
])
@pytest.mark.integration
def test_bad_input_is_one_line_and_exit_64(project, args, needle):
    refused(companion(*args, root=project, timeout=120), needle)


@pytest.mark.integration
def test_a_dash_value_is_a_value_and_boundaries_pass(project):
    out = companion("run", SLUG, "-p", "scale", "-2.5", "-p", "seed", "4294967295", "--dry-run", root=project)
    assert out.returncode == 0 and "scale=-2.5" in out.stdout and "seed=4294967295" in out.stdout, out.stderr


@pytest.mark.integration
def test_a_reader_that_stops_early_gets_no_traceback(project):
    out = subprocess.run(f"'{BIN / 'companion'}' list | head -1", shell=True, text=True, capture_output=True,
                         env={**os.environ, "COMPANION_ROOT": str(project), "PYTHONPATH": str(project)})
    assert out.stdout.startswith(SLUG) and out.stderr == "", out.stderr


@pytest.mark.integration
def test_status_names_its_profile(project):
    out = companion("status", "--profile", "quick", root=project)
    assert out.returncode == 0 and out.stdout.startswith("profile quick"), out.stdout


# -- plain papermill -----------------------------------------------------------------------------

def papermill(project: Path, out_nb: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "papermill"), str(project / "book" / "chapters" / f"{SLUG}.ipynb"),
                           str(out_nb), *args, "--no-progress-bar"], text=True, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(project)}, timeout=300)


@pytest.mark.integration
def test_plain_papermill_records_the_profile_it_honours_and_its_provenance(project, tmp_path):
    params = companion("params", SLUG, "--profile", "quick", root=project)
    (tmp_path / "p.yaml").write_text(params.stdout)
    out_dir = tmp_path / "pm"
    ok = papermill(project, tmp_path / "a.ipynb", "-f", str(tmp_path / "p.yaml"), "-p", "profile", "quick",
                   "-p", "out_dir", str(out_dir))
    assert ok.returncode == 0, ok.stderr[-2000:]
    doc = json.loads((out_dir / "results.json").read_text())
    assert doc["profile"] == "quick" and doc["parameters"]["n"] == 4
    prov = doc["provenance"]
    assert prov["unknown"] == ["cache_key"] and prov["cache_key"] is None
    assert prov["git"] and prov["python"] and "lib/fixture_paper.py" in prov["deps"]
    # a profile whose values the run does not carry is refused, not recorded
    lie = papermill(project, tmp_path / "b.ipynb", "-p", "profile", "quick", "-p", "out_dir", str(tmp_path / "pm2"))
    assert lie.returncode != 0 and "plain papermill does not apply a profile" in lie.stderr
    assert not (tmp_path / "pm2" / "results.json").exists()


@pytest.mark.integration
def test_plain_papermill_refuses_an_out_dir_the_user_owns(project, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.csv").write_text("1\n")
    before = snapshot(mine)
    out = papermill(project, tmp_path / "c.ipynb", "-p", "out_dir", str(mine))
    assert out.returncode != 0 and "holds files a run of 99-fixture did not write" in out.stderr
    assert snapshot(mine) == before


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
