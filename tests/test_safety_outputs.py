"""The output rule and the parameter checks of issue 54, in process (the unit tier): each probe
runs in a scratch folder, plants a marker file the user owns, and checks it is still there,
byte for byte, afterwards.

The same probes through the `companion` CLI and plain papermill are in
tests/test_safety_probes.py (integration tier).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from conftest import MINE, plant, still_there

from lib import chapter as chapter_mod
from lib.outputs import (
    CommitError, UnsafeOutput, check_output, commit, mark, read_manifest, staging_folder, verify,
)
from lib.parameters import MAX_ELEMENTS, QUOTE_CHARS, Constraint, Parameter, Rule, UsageError, quote
from lib.pipeline.chapters import Book
from lib.pipeline.cli import split_params

SLUG = "99-fixture"


def finished_run(where: Path, figures=("a",), results: str = '{"run": 1}') -> Path:
    """A finished run's folder as the runner assembles it (a marked temporary folder)."""
    mark(where)
    (where / "results.json").write_text(results)
    (where / f"{SLUG}.ipynb").write_text("{}")
    for name in figures:
        (where / "figures").mkdir(exist_ok=True)
        (where / "figures" / f"{name}.png").write_bytes(name.encode())
    return where


def run_into(out: Path, **kw) -> list[str]:
    """What a run does: check the folder before any work, assemble beside it, commit."""
    out = check_output(out, SLUG)
    staging = finished_run(staging_folder(out), **kw)
    return commit(staging, out, SLUG)


# -- 1. fill instead of replace; replace only what the manifest lists and still matches -----------

def test_a_new_folder_gets_the_run_and_its_manifest(tmp_path):
    out = tmp_path / "new"
    assert run_into(out) == []
    manifest = read_manifest(out)
    assert manifest["complete"] and set(manifest["files"]) == {"results.json", f"{SLUG}.ipynb", "figures/a.png"}
    assert verify(out) and not list(tmp_path.glob(".tmp-*"))


def test_an_empty_folder_is_filled_keeping_its_mode_owner_and_inode(tmp_path):
    out = tmp_path / "scratch"
    out.mkdir()
    os.chmod(out, 0o2750)
    (out / ".DS_Store").write_bytes(MINE)  # litter: the folder still counts as empty
    before = os.stat(out)
    assert run_into(out) == []
    after = os.stat(out)
    assert stat.S_IMODE(after.st_mode) == 0o2750 and after.st_ino == before.st_ino
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert still_there(out / ".DS_Store") and verify(out)


def test_a_users_png_in_an_earlier_runs_figures_is_left_and_named(tmp_path):
    out = tmp_path / "run"
    run_into(out, figures=("a", "b"))
    mine = plant(out / "figures" / "mine.png")
    left = run_into(out, figures=("a",))  # the rerun no longer draws b
    assert still_there(mine) and left == ["figures/mine.png"]
    assert not (out / "figures" / "b.png").exists()  # the run's own stale figure goes
    assert (out / "figures" / "a.png").read_bytes() == b"a" and verify(out)


def test_a_file_written_during_the_run_is_left_and_named(tmp_path):
    out = tmp_path / "run"
    run_into(out)
    checked = check_output(out, SLUG)  # the rerun starts: checked before any work
    staging = finished_run(staging_folder(checked), results='{"run": 2}')
    during = plant(out / "notes.txt")  # the user saves a file while it runs
    during_fig = plant(out / "figures" / "sketch.svg")
    left = commit(staging, checked, SLUG)
    assert still_there(during) and still_there(during_fig)
    assert left == ["figures/sketch.svg", "notes.txt"]
    assert (out / "results.json").read_text() == '{"run": 2}'


def test_a_file_the_run_would_replace_that_changed_during_the_run_stops_the_commit(tmp_path):
    out = tmp_path / "run"
    run_into(out)
    checked = check_output(out, SLUG)
    staging = finished_run(staging_folder(checked), results='{"run": 2}')
    edited = plant(out / "figures" / "a.png")  # the user redraws the run's figure meanwhile
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(CommitError, match="is kept in") as caught:
        commit(staging, checked, SLUG)
    assert still_there(edited) and {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    kept = Path(str(caught.value).rsplit("is kept in ", 1)[1])
    assert (kept / "results.json").read_text() == '{"run": 2}'  # the result, kept and said where


def test_a_stale_file_that_changed_is_not_removed(tmp_path):
    out = tmp_path / "run"
    run_into(out, figures=("a", "b"))
    checked = check_output(out, SLUG)
    staging = finished_run(staging_folder(checked), figures=("a",))
    changed = plant(out / "figures" / "b.png")  # the user redraws the old run's figure meanwhile
    left = commit(staging, checked, SLUG)  # the rerun, which no longer draws it, leaves it
    assert still_there(changed) and left == ["figures/b.png"]
    assert run_into(out, figures=("a",)) == ["figures/b.png"]  # the user's now: every later run leaves it
    assert still_there(changed)


def test_editor_litter_is_ignored_not_refused(tmp_path):
    out = tmp_path / "run"
    run_into(out)
    litter = [plant(out / ".ipynb_checkpoints" / f"{SLUG}-checkpoint.ipynb"), plant(out / ".DS_Store"),
              plant(out / "figures" / ".DS_Store")]
    assert run_into(out) == [] and all(still_there(p) for p in litter)
    assert verify(out)


def test_a_figures_link_of_the_users_is_neither_followed_nor_replaced(tmp_path):
    out = tmp_path / "run"
    run_into(out, figures=())
    elsewhere = tmp_path / "my-figures"
    mine = plant(elsewhere / "a.png")
    (out / "figures").symlink_to(elsewhere)
    with pytest.raises(UnsafeOutput, match="figures"):
        check_output(out, SLUG)
    staging = finished_run(staging_folder(out), figures=("a",))
    with pytest.raises(CommitError, match="is kept in"):  # appearing during a run: not followed either
        commit(staging, out, SLUG)
    assert still_there(mine) and (out / "figures").is_symlink() and sorted(os.listdir(elsewhere)) == ["a.png"]


# -- the final move is checked before any work --------------------------------------------------

def test_a_mount_point_is_refused_before_any_work(tmp_path, monkeypatch):
    out = tmp_path / "disk"
    out.mkdir()
    mine = plant(tmp_path / "mine.txt")
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out or real(p))
    with pytest.raises(UnsafeOutput, match="is a mount point"):
        check_output(out, SLUG)
    assert still_there(mine) and not any(out.iterdir())


def test_an_unwritable_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    out = tmp_path / "ro"
    out.mkdir()
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != out)  # root may write anywhere
    with pytest.raises(UnsafeOutput, match="cannot write there"):
        check_output(out, SLUG)


@pytest.mark.parametrize("inside", [".git/runs", "lib/out", "book/chapters/out"])
def test_a_folder_inside_the_repository_but_outside_build_is_refused(tmp_path, inside):
    repo = tmp_path / "repo"
    mine = plant(repo / "lib" / "mine.py")
    (repo / ".git").mkdir()
    with pytest.raises(UnsafeOutput, match="inside the repository"):
        check_output(repo / inside, SLUG, root=repo)
    assert still_there(mine) and not (repo / inside).exists()
    check_output(repo / "_build" / "runs" / "x", SLUG, root=repo)  # the book's own runs


def test_an_over_long_name_and_a_symlink_loop_are_one_line(tmp_path):
    with pytest.raises(UnsafeOutput, match="longer than 255 bytes") as long:
        check_output(tmp_path / ("x" * 300), SLUG)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UnsafeOutput, match="cannot be resolved|is a file") as loop:
        check_output(tmp_path / "loop" / "out", SLUG)
    assert "\n" not in str(long.value) and "\n" not in str(loop.value) and len(str(long.value)) < 300


# -- 4. the cache trusts the manifest, not what is on disk --------------------------------------

def test_a_run_folder_no_longer_as_written_is_not_a_finished_run(tmp_path):
    out = tmp_path / "run"
    run_into(out)
    (out / "figures" / "a.png").unlink()
    (out / f"{SLUG}.ipynb").unlink()
    assert not verify(out)
    assert run_into(out) == [] and verify(out)  # the rerun fills what is missing


def test_a_results_json_edited_by_hand_is_not_the_runs_and_is_not_replaced(tmp_path):
    out = tmp_path / "run"
    run_into(out)
    (out / "results.json").write_bytes(MINE)  # edited by hand
    assert not verify(out)
    with pytest.raises(UnsafeOutput, match="results.json changed since its run wrote it"):
        check_output(out, SLUG)
    assert still_there(out / "results.json")


def test_a_commit_killed_halfway_leaves_a_folder_the_next_run_still_owns(tmp_path, monkeypatch):
    out = tmp_path / "run"
    run_into(out, figures=("a", "b"))
    staging = finished_run(staging_folder(out), figures=("a", "c"), results='{"run": 2}')
    real, calls = os.replace, []

    def killed_after_two(src, dst):  # the manifest in progress, one file, then Ctrl-C
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(dst)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        commit(staging, out, SLUG)
    monkeypatch.setattr(os, "replace", real)
    assert not verify(out)  # incomplete: never a cached result
    mine = plant(out / "notes.txt")
    left = run_into(out, figures=("a",))
    assert left == ["notes.txt"] and still_there(mine) and verify(out)
    assert not (out / "figures" / "b.png").exists()


# -- 2. parameters: every stated constraint before any work --------------------------------------

BOOK = Book()


def chapter(number: str):
    return BOOK.chapter(number)


@pytest.mark.parametrize("number, name, value, needle", [
    ("05", "tree_shapes", "[[4, 2]]", "tree_shapes"),
    ("05", "tree_shapes", "[[4, 2, 3]]", "s[2] < s[1]"),
    ("05", "record_every", "7", "steps % record_every"),
    ("05", "ode_steps", "4005", "ode_steps % 10"),
    ("01", "l_lo", "15", "l_lo < l_hi"),
    ("01", "realistic_grid", "[[4, 4]]", "c[0] < c[1]"),
    ("08", "Ns", "[300, 100]", "ascending(Ns)"),
    ("09", "length", "12", "3·max(pairs)"),
    ("09", "mixers", "[conv, swa]", '"softmax" in mixers'),
    ("02", "bench_passes", "[bwd]", '"fwd" in bench_passes'),
    ("06", "gd_steps", "[0.1, 0.2]", "decreasing(gd_steps)"),
])
def test_a_rule_the_help_text_states_is_checked_before_any_work(number, name, value, needle):
    ch = chapter(number)
    assert needle.split("(")[0].split(" ")[0] in ch.parameters[name].constraint.text
    with pytest.raises(UsageError, match="must (be|satisfy)") as caught:
        ch.resolve({}, {name: value})
    assert needle in str(caught.value) or name in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_rule_passes_what_it_should():
    ch = chapter("05")
    assert ch.resolve({}, {"record_every": "20", "tree_shapes": "[[3, 2, 1]]", "ode_steps": "4010"})


def test_rules_are_checked_code_not_arbitrary_python():
    for bad in ("__import__('os')", "steps.__class__", "open('x')", "[x for x in range(10)]"):
        with pytest.raises((ValueError, SyntaxError)):
            Rule(bad).code()
    assert Constraint.parse("∈ [1, 9], where n ≤ m: help").rule.names() == {"n", "m"}


def test_a_repeated_parameter_is_refused():
    with pytest.raises(UsageError, match="given twice"):
        split_params(["run", "05", "-p", "seed", "1", "-p", "seed", "2"])
    assert split_params(["run", "05", "-p", "seed", "1", "-p", "lr", "0.1"])[1] == [["seed", "1"], ["lr", "0.1"]]


def test_messages_quote_at_most_about_80_characters_of_a_value():
    ch = chapter("08")
    huge = "[" + ", ".join(["100"] * 30_000) + "]"
    with pytest.raises(UsageError) as caught:
        ch.resolve({}, {"Ns": huge})
    assert len(str(caught.value)) < 3 * QUOTE_CHARS and "30000 elements" in str(caught.value)
    assert len(quote(list(range(10 ** 5)))) < QUOTE_CHARS + 30 and quote([1, 2]) == "[1, 2]"
    assert len(quote("x" * 10_000)) < QUOTE_CHARS + 30


def test_yaml_aliases_are_refused_quickly():
    bomb = "a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
    ch = chapter("08")
    t0 = time.perf_counter()
    with pytest.raises(UsageError, match="aliases"):
        ch.resolve({}, {"Ns": "[&x 100, *x]"})
    with pytest.raises(UsageError, match="aliases"):
        Parameter("Ns", [1], annotation="list[int]").coerce(bomb)
    assert time.perf_counter() - t0 < 1.0


def test_a_value_with_too_many_elements_is_refused_without_walking_it():
    nested = [[1] * 1000] * 1000  # shared rows: a million elements from a few KB
    with pytest.raises(UsageError, match=f"more than {MAX_ELEMENTS} elements"):
        Parameter("grid", [[1]], annotation="list[list[int]]").coerce(nested)


# -- 3. the notebook's first cell: the same checks under plain papermill or Jupyter ---------------

def test_a_relative_out_dir_is_from_the_working_folder_and_empty_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default = "../../_build/runs/jupyter/05-exploration-tree-markov-chains"
    assert chapter_mod.resolve_out_dir("mine/run", "05-x", default) == tmp_path / "mine" / "run"
    assert chapter_mod.resolve_out_dir(default, "05-x", default) == \
        chapter_mod.CHAPTER_DIR.parents[1] / "_build" / "runs" / "jupyter" / "05-exploration-tree-markov-chains"
    for empty in ("", "  "):
        with pytest.raises(chapter_mod.RunRefused, match="names no folder"):
            chapter_mod.resolve_out_dir(empty, "05-x", default)


def test_the_first_cell_checks_values_and_rules_as_the_cli_does():
    declared = chapter_mod.declared_parameters("05-exploration-tree-markov-chains")
    assert "profile" in declared and declared["profile"].constraint.choices == ("quick", "default", "paper")
    good = {n: p.default for n, p in declared.items()}
    chapter_mod.check_parameters(declared, good)
    for bad in ({"lr": -1}, {"n_seeds": 1}, {"tree_shapes": [[4, 2]]}, {"record_every": 7}, {"profile": "fast"}):
        with pytest.raises(chapter_mod.RunRefused) as caught:
            chapter_mod.check_parameters(declared, {**good, **bad})
        assert "\n" not in str(caught.value) and next(iter(bad)) in str(caught.value)
    shown = chapter_mod.RunRefused("x")._render_traceback_()
    assert shown == ["RunRefused: x"]  # one line where the notebook is read, not a traceback
