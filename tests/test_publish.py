"""What a reader gets: published notebooks without machinery cells or machine paths, a Downloads
section, and chapters that write under the repository's `_build/` wherever papermill starts."""

from __future__ import annotations

import pytest

import json
import os
import subprocess


from conftest import BIN

from lib.chapter import CHAPTER_DIR, resolve_out_dir
from lib.pipeline.book import LONG_CELL_LINES, publishable


def _cell(kind, source, tags=(), id=None):
    cell = {"cell_type": kind, "metadata": {"tags": list(tags)}, "source": source}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return {**cell, "id": id or f"c{abs(hash(source)) % 10**8}"}


def test_published_notebook_drops_machinery_and_links_downloads():
    long_code = "\n".join(f"x{i} = {i}" for i in range(LONG_CELL_LINES + 5))
    nb = {"cells": [_cell("code", "seed = 0\nout_dir = '.'", ["parameters"]),
                    _cell("code", "seed = 3\nout_dir = '/tmp/machine/path'", ["injected-parameters"]),
                    _cell("code", long_code), _cell("code", "y = 1"),
                    _cell("code", "import json", id="companion-depfile")],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    out = publishable(nb, "01-x", {"profile": "default", "parameters": {"seed": 3, "n": 8}})
    text = json.dumps(out)
    assert "/tmp/machine/path" not in text and "companion-depfile" not in text
    tags = [c["metadata"].get("tags", []) for c in out["cells"]]
    assert tags[1] == ["hide-input"] and tags[2] == [] and tags[0] == ["parameters"]
    last = out["cells"][-1]["source"]
    assert "{download}`results.json <files/01-x/results.json>`" in last and "figures.zip" in last
    assert "| `seed` | `3` |" in last and "`default` profile" in last


def test_the_default_out_dir_is_the_repositorys_build_and_another_relative_one_is_from_the_working_folder(
        tmp_path, monkeypatch):
    default = "../../_build/runs/jupyter/01-x"
    monkeypatch.chdir(tmp_path)
    assert resolve_out_dir(default, "01-x", default) == CHAPTER_DIR.parents[1] / "_build" / "runs" / "jupyter" / "01-x"
    assert resolve_out_dir("runs/01", "01-x", default) == tmp_path / "runs" / "01"
    assert resolve_out_dir(str(tmp_path), "01-x", default) == tmp_path
    assert resolve_out_dir(None, "01-x") == CHAPTER_DIR.parents[1] / "_build" / "runs" / "jupyter" / "01-x"


@pytest.mark.integration
def test_plain_papermill_from_the_repository_root_writes_under_its_build(project, tmp_path):
    nb = project / "book" / "chapters" / "99-fixture.ipynb"
    env = {**os.environ, "PYTHONPATH": str(project)}
    for cwd in (project, tmp_path):  # the repository root, and somewhere else entirely
        out = subprocess.run([str(BIN / "papermill"), str(nb), str(tmp_path / "out.ipynb"), "-p", "n", "3"],
                             cwd=cwd, env=env, text=True, capture_output=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        results = project / "_build" / "runs" / "jupyter" / "99-fixture" / "results.json"
        assert json.loads(results.read_text())["parameters"]["n"] == 3
        results.unlink()
    assert not (project.parent / "_build").exists() and not (tmp_path / "_build").exists()
