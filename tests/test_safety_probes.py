"""Issue 54's probes as a user meets them: the `companion` CLI and plain papermill, each in a
scratch folder with a file the user owns planted first and checked, byte for byte, afterwards.
(Integration tier: every test starts a process; the in-process probes are in
tests/test_safety_outputs.py.)
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import BIN, MINE, ROOT, companion, plant, still_there
from lib.outputs import MARKER, read_manifest

pytestmark = pytest.mark.integration

SLUG = "99-fixture"


def one_line(out: subprocess.CompletedProcess, needle: str, code: int = 64) -> None:
    assert out.returncode == code, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert len(lines[0]) < 400, lines[0]


def run(project: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return companion("run", SLUG, "--profile", "quick", "--out", str(out), *args, root=project, timeout=300)


def papermill(project: Path, out_nb: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "papermill"), str(project / "book" / "chapters" / f"{SLUG}.ipynb"),
                           str(out_nb), *args, "--no-progress-bar"], text=True, capture_output=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(project)}, timeout=300)


# -- 1. the CLI fills, replaces only its own files, leaves and names the rest -----------------------

def test_a_rerun_leaves_a_png_in_figures_and_a_file_written_while_it_runs(project, tmp_path):
    out = tmp_path / "ch99"
    assert run(project, out).returncode == 0
    png = plant(out / "figures" / "mine.png")  # saved under the earlier run's folder
    result = {}
    rerun = threading.Thread(target=lambda: result.update(r=run(project, out, "--force", "-p", "sleep_s", "6")))
    rerun.start()
    time.sleep(3)  # checked and started; the kernel is not done
    during = plant(out / "notes.txt")
    rerun.join()
    r = result["r"]
    assert r.returncode == 0, r.stderr[-2000:]
    named = [ln for ln in r.stderr.splitlines() if "left in place" in ln]
    assert len(named) == 1 and "figures/mine.png" in named[0] and "notes.txt" in named[0], r.stderr
    assert still_there(png) and still_there(during)
    assert json.loads((out / "results.json").read_text())["parameters"]["sleep_s"] == 6.0
    assert set(read_manifest(out)["files"]) == {"results.json", f"{SLUG}.ipynb"}


def test_a_result_that_cannot_go_in_place_is_kept_and_named(project, tmp_path):
    out = tmp_path / "ch99"
    assert run(project, out).returncode == 0
    result = {}
    rerun = threading.Thread(target=lambda: result.update(r=run(project, out, "--force", "-p", "sleep_s", "6")))
    rerun.start()
    time.sleep(3)
    edited = plant(out / "results.json")  # the user edits the run's result while the rerun runs
    rerun.join()
    r = result["r"]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert still_there(edited) and "results.json" in r.stderr
    kept = Path(r.stderr.split("is kept in ", 1)[1].split()[0])
    assert json.loads((kept / "results.json").read_text())["parameters"]["sleep_s"] == 6.0


def test_an_empty_folder_is_filled_not_replaced(project, tmp_path):
    out = tmp_path / "scratch"
    out.mkdir()
    os.chmod(out, 0o2750)
    litter = plant(out / ".DS_Store")
    inode = out.stat().st_ino
    r = run(project, out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert stat.S_IMODE(out.stat().st_mode) == 0o2750 and out.stat().st_ino == inode
    assert (out / "results.json").is_file() and still_there(litter)


def test_editor_litter_in_a_run_folder_is_ignored(project, tmp_path):
    out = tmp_path / "ch99"
    assert run(project, out).returncode == 0
    litter = [plant(out / ".ipynb_checkpoints" / f"{SLUG}-checkpoint.ipynb"), plant(out / ".DS_Store")]
    r = run(project, out, "--force")
    assert r.returncode == 0 and "left in place" not in r.stderr, r.stderr[-2000:]
    assert all(still_there(p) for p in litter)


@pytest.mark.parametrize("where, needle", [
    ("project/.git/runs", "inside the repository"), ("project/lib/out", "inside the repository"),
    ("LONG", "longer than 255 bytes"), ("LOOP", "cannot be resolved"),
])
def test_an_out_that_cannot_be_used_is_one_line_before_any_work(project, tmp_path, where, needle):
    (project / ".git").mkdir()
    mine = plant(project / "lib" / "mine.txt")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    out = {"LONG": str(tmp_path / ("x" * 300)), "LOOP": str(tmp_path / "loop" / "run")}.get(where) \
        or str(tmp_path / where)
    one_line(companion("run", SLUG, "--profile", "quick", "--out", out, root=project, timeout=120), needle)
    assert still_there(mine) and not (project / ".git" / "runs").exists() and not (project / "lib" / "out").exists()


# -- 4. the cache is checked against the manifest ----------------------------------------------------

def test_a_hand_edited_result_is_not_cached_and_not_replaced(project, tmp_path):
    out = tmp_path / "ch99"
    assert run(project, out).returncode == 0
    (out / "results.json").write_bytes(MINE)
    one_line(run(project, out), "results.json changed since its run wrote it")
    assert still_there(out / "results.json")


def test_a_run_folder_missing_its_notebook_is_rerun(project, tmp_path):
    out = tmp_path / "ch99"
    assert run(project, out).returncode == 0
    mine = plant(out / "notes.txt")
    (out / f"{SLUG}.ipynb").unlink()
    again = run(project, out)
    assert again.returncode == 0 and "cached" not in again.stdout and " ran " in again.stdout, again.stdout
    assert (out / f"{SLUG}.ipynb").is_file() and still_there(mine)
    assert "cached" in run(project, out).stdout  # now it matches its manifest


# -- 2. every constraint before any work, against the book's own chapters ----------------------------

BOMB = "[" + ", ".join(["&a 1"] + ["*a"] * 20) + "]"


@pytest.mark.parametrize("args, needle", [
    (["05", "-p", "tree_shapes", "[[4,2]]"], "parameter 'tree_shapes' must satisfy"),
    (["05", "-p", "record_every", "7"], "parameter 'record_every' must satisfy steps % record_every"),
    (["05", "-p", "ode_steps", "4005"], "ode_steps % 10"),
    (["05", "-p", "seed", "1", "-p", "seed", "2"], "given twice"),
    (["08", "-p", "Ns", "[" + ", ".join(["5"] * 30_000) + "]"], "30000 elements"),
    (["08", "-p", "Ns", BOMB], "aliases"),
    (["05", "-p", "profile", "quick"], "--profile"),
])
def test_every_stated_constraint_is_one_line_before_any_work(args, needle):
    t0 = time.perf_counter()
    one_line(companion("run", *args, "--dry-run", timeout=120), needle)
    assert time.perf_counter() - t0 < 30


def test_companion_params_carries_its_profile():
    out = companion("params", "05", "--profile", "quick", timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("profile: quick\n"), out.stdout[:200]


# -- 3. plain papermill: the same checks in the notebook's first cell --------------------------------

def test_plain_papermill_refuses_a_bad_value_before_any_work(project, tmp_path):
    mine = plant(tmp_path / "keep.txt")
    out = papermill(project, tmp_path / "a.ipynb", "-p", "n", "0", "-p", "out_dir", str(tmp_path / "pm"))
    assert out.returncode != 0 and "parameter 'n' must be ∈ [1, 10⁶], got 0" in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "pm").exists() and still_there(mine)


def test_plain_papermill_labels_a_run_from_params_without_a_warning(project, tmp_path):
    params = companion("params", SLUG, "--profile", "quick", root=project)
    (tmp_path / "p.yaml").write_text(params.stdout)
    out = papermill(project, tmp_path / "a.ipynb", "-f", str(tmp_path / "p.yaml"),
                    "-p", "out_dir", str(tmp_path / "pm"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "unknown parameter" not in out.stderr.lower(), out.stderr
    assert json.loads((tmp_path / "pm" / "results.json").read_text())["profile"] == "quick"


def test_plain_papermill_resolves_a_relative_out_dir_from_where_it_runs(project, tmp_path):
    work = tmp_path / "work"
    mine = plant(work / "keep.txt")
    out = papermill(project, tmp_path / "a.ipynb", "-p", "out_dir", "results/ch99", cwd=work)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (work / "results" / "ch99" / "results.json").is_file() and still_there(mine)
    assert not (project / "book" / "chapters" / "results").exists()
    empty = papermill(project, tmp_path / "b.ipynb", "-p", "out_dir", "", cwd=work)
    assert empty.returncode != 0 and "names no folder" in empty.stderr
    assert not (project / "_build").exists() and sorted(p.name for p in work.iterdir()) == ["keep.txt", "results"]


def test_plain_papermill_that_fails_leaves_the_earlier_result_as_it_was(project, tmp_path):
    out_dir = tmp_path / "pm"
    assert papermill(project, tmp_path / "a.ipynb", "-p", "out_dir", str(out_dir)).returncode == 0
    mine = plant(out_dir / "notes.txt")
    before = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    failed = papermill(project, tmp_path / "b.ipynb", "-p", "out_dir", str(out_dir), "-p", "fail", "True",
                       "-p", "seed", "3")
    assert failed.returncode != 0 and "asked to fail" in failed.stderr
    assert {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()} == before and still_there(mine)
    assert not list(tmp_path.glob(".tmp-*"))  # the half-done run is gone too
    again = papermill(project, tmp_path / "c.ipynb", "-p", "out_dir", str(out_dir), "-p", "seed", "3")
    assert again.returncode == 0 and still_there(mine)
    assert json.loads((out_dir / "results.json").read_text())["parameters"]["seed"] == 3
    assert (out_dir / MARKER).is_file()


def test_the_repositorys_own_chapters_declare_profile_for_papermill():
    out = subprocess.run([str(BIN / "papermill"), "--help-notebook",
                          str(ROOT / "book" / "chapters" / "05-exploration-tree-markov-chains.ipynb")],
                         text=True, capture_output=True, timeout=120)
    assert out.returncode == 0 and "profile: str" in out.stdout and "steps % record_every" in out.stdout, out.stdout
