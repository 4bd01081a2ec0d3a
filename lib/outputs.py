"""Where a chapter run may write, and how its result is put there: the one rule shared by the
CLI and by plain papermill or Jupyter.

A run writes a folder holding the executed notebook ``<slug>.ipynb`` (the CLI's runs),
``figures/`` (PNG and SVG), ``results.json`` and :data:`MARKER`, which holds the run's
*manifest*: every file the run put there with the SHA-256 of its bytes.

* A run writes into a new folder, or *fills* an empty one (the folder itself, its mode and its
  owner are kept), or into a folder an earlier run of the same chapter wrote. There it replaces
  or removes only files its manifest lists and whose bytes still match the manifest (checked
  again just before each is touched). Anything else in the folder, there before the run or
  appearing during it, is left in place and named in one line. Editor litter
  (``.ipynb_checkpoints``, ``.DS_Store``) is ignored.
* Refused before any work (one line naming the path and why): ``""``, a file, a folder holding
  anything else that no manifest accounts for, a manifest-listed ``results.json`` or notebook
  changed since its run, a folder inside the repository other than its ``_build/``, the current
  folder, the home folder, a folder above any of them, a mount point or a folder on another
  filesystem than its parent (the result is assembled beside it and moved in), a folder that
  cannot be written, a name longer than the filesystem allows, a symlink loop.
* The result is assembled in a temporary sibling folder and put in place by :func:`commit` only
  when complete. If it cannot be put in place (a file the run would write changed or appeared
  meanwhile), nothing in the folder is touched and the result is kept beside it under a name
  the error says.

Folders written before manifests existed (a marker without one, or inside the book's own
``_build/`` no marker at all) count as a run's when they hold nothing but the run's layout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

#: Written into every output folder a run fills: its manifest (JSON), and what lets a later run
#: replace the files it lists.
MARKER = ".companion-run"
#: What editors and file browsers leave in folders: ignored, never refused, never touched.
LITTER = frozenset({".ipynb_checkpoints", ".DS_Store", "Thumbs.db", "desktop.ini"})
_FIGURE_SUFFIXES = (".png", ".svg")


class UnsafeOutput(ValueError):
    """An output folder the tool may not write into (the message is one line)."""


class CommitError(OSError):
    """A finished run's result could not be put in place; the message says where it is kept."""


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def files_under(folder: Path) -> list[str]:
    """Every entry under ``folder`` that is not a directory (files, links, ...) as a relative
    POSIX path, editor litter left out; directories are descended, links are not followed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in LITTER and not os.path.islink(os.path.join(dirpath, d)))
        rel = Path(dirpath).relative_to(folder)
        found += [(rel / d).as_posix() for d in os.listdir(dirpath)
                  if os.path.islink(os.path.join(dirpath, d)) and os.path.isdir(os.path.join(dirpath, d))]
        found += [(rel / f).as_posix() for f in filenames if f not in LITTER]
    return sorted(found)


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def read_manifest(folder: Path) -> dict | None:
    """The manifest in ``folder``'s marker: ``{"chapter", "complete", "files": {path: [digests]}}``
    (each path with the digests it may have: one, or during a commit the old and the new), or
    None when the folder has no marker or one from before manifests."""
    try:
        doc = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        return None
    files = {rel: [d] if isinstance(d, str) else list(d) for rel, d in doc["files"].items()}
    return {"chapter": doc.get("chapter"), "complete": bool(doc.get("complete")), "files": files}


def _write_manifest(folder: Path, slug: str, files: dict[str, list[str]], complete: bool) -> None:
    doc = {"written_by": "a companion run; a later run of the same chapter replaces only the files listed here "
                         "whose digests still match",
           "chapter": slug, "complete": complete,
           "written": datetime.now(UTC).isoformat(timespec="seconds"),
           "files": {rel: d[0] if len(d) == 1 else d for rel, d in sorted(files.items())}}
    tmp = folder / f"{MARKER}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, folder / MARKER)


def verify(folder: Path) -> bool:
    """Whether ``folder`` holds a complete run exactly as its manifest lists it (every listed
    file present, each with its one digest)."""
    manifest = read_manifest(folder)
    if manifest is None or not manifest["complete"]:
        return False
    for rel, digests in manifest["files"].items():
        path = folder / rel
        if len(digests) != 1 or not _regular(path) or digest(path) != digests[0]:
            return False
    return True


def _legacy_foreign(folder: Path, slug: str) -> list[str]:
    """The entries of a folder from before manifests that are not the run layout."""
    ours = {MARKER, "results.json", f"{slug}.ipynb"}
    foreign = []
    for entry in sorted(folder.iterdir()):
        if entry.name in LITTER or (entry.name in ours and _regular(entry)):
            continue
        if entry.name == "figures" and entry.is_dir() and not entry.is_symlink() and all(
                f.name in LITTER or (_regular(f) and f.suffix in _FIGURE_SUFFIXES) for f in entry.iterdir()):
            continue
        foreign.append(entry.name)
    return foreign


@dataclass
class Survey:
    """An existing output folder as a run sees it."""

    ours: dict[str, str] = field(default_factory=dict)  # files a run may replace: path → digest now
    changed: list[str] = field(default_factory=list)  # listed by the manifest, no longer as written
    foreign: list[str] = field(default_factory=list)  # everything else (left in place)


def survey(folder: Path, slug: str, root: Path | None) -> Survey:
    """Sort ``folder``'s files into the run's own, changed and foreign; UnsafeOutput (one line)
    for a folder no run of ``slug`` may write into."""
    if not any(entry.name not in LITTER for entry in folder.iterdir()):
        return Survey()  # empty: filled
    manifest = read_manifest(folder)
    if manifest is not None:
        entries = files_under(folder)
        if manifest["chapter"] not in (None, slug):
            raise UnsafeOutput(f"output folder {folder} holds a run of {manifest['chapter']}, not of {slug}: "
                               "give another folder")
        result = Survey()
        for rel in entries:
            if rel == MARKER:
                continue
            if rel in manifest["files"]:
                path = folder / rel
                now = digest(path) if _regular(path) else None
                if now is not None and now in manifest["files"][rel]:
                    result.ours[rel] = now
                else:
                    result.changed.append(rel)
            else:
                result.foreign.append(rel)
        return result
    # before manifests: the marker (or inside the book's own _build/, the layout alone); a
    # user's folder is refused from its top level, without walking it
    foreign = _legacy_foreign(folder, slug)
    legacy = root is not None and folder.is_relative_to(Path(root).resolve() / "_build")
    if not foreign and not (folder / MARKER).is_file() and not legacy:
        raise UnsafeOutput(f"output folder {folder} was not written by a companion run (no {MARKER}): "
                           "give a new or empty folder")
    if foreign:
        raise UnsafeOutput(f"output folder {folder} holds files a run of {slug} did not write "
                           f"({_names(foreign)}): give a new or empty folder")
    return Survey(ours={rel: digest(folder / rel) for rel in files_under(folder) if rel != MARKER})


def _names(paths: list[str], most: int = 3) -> str:
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def left_in_place(folder: Path, foreign: list[str]) -> str:
    """The one line that names what a run left in its folder."""
    return f"left in place in {folder} (not the run's): {_names(foreign, 5)}"


def _protected(path: Path, root: Path | None) -> str | None:
    """Why ``path`` (resolved) may never be a run's output folder, or None."""
    places = [(Path.cwd().resolve(), "the current folder"), (Path.home().resolve(), "the home folder")]
    if root is not None:
        places.insert(0, (Path(root).resolve(), "the repository"))
    for place, name in places:
        if path == place:
            return f"is {name}"
    for place, name in places:
        if place.is_relative_to(path):
            return f"is a folder above {name}"
    if root is not None:
        root = Path(root).resolve()
        if path.is_relative_to(root) and not path.is_relative_to(root / "_build"):
            return "is inside the repository (only its _build/ holds runs)"
    return None


def _resolve(text: str) -> Path:
    path = Path(text).expanduser()
    for part in path.parts:
        if len(os.fsencode(part)) > 255:
            raise UnsafeOutput(f"output folder {text[:80]}…: a name in it is longer than 255 bytes")
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise UnsafeOutput(f"output folder {text[:120]}: cannot be resolved ({why})") from None


def _existing_parent(path: Path) -> Path:
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def check_output(path: str | os.PathLike, slug: str, root: Path | None = None) -> Path:
    """``path`` resolved, if a run of ``slug`` may write there and its result can be put in
    place when it ends; else :class:`UnsafeOutput` with one line naming the path and why."""
    text = os.fspath(path)
    if not text.strip():
        raise UnsafeOutput("output folder: an empty path names the current folder; give a new folder")
    out = _resolve(text)
    if why := _protected(out, root):
        raise UnsafeOutput(f"output folder {out} {why}: give a new folder")
    try:
        if out.exists() and not out.is_dir():
            raise UnsafeOutput(f"output folder {out} is a file, not a folder")
        if out.is_dir():
            if os.path.ismount(out):
                raise UnsafeOutput(f"output folder {out} is a mount point: give a folder inside it "
                                   f"(e.g. {out / slug})")
            if out.stat().st_dev != out.parent.stat().st_dev:
                raise UnsafeOutput(f"output folder {out} is on another filesystem than {out.parent}: "
                                   "give a folder inside it")
            found = survey(out, slug, root)
            certain = {"results.json", f"{slug}.ipynb", MARKER}
            blocked = sorted(set(found.changed) | {rel for rel in found.foreign if rel in certain})
            figures = out / "figures"
            if os.path.lexists(figures) and (figures.is_symlink() or not figures.is_dir()):
                blocked.append("figures")  # a run's figures would land wherever it points
            if blocked:
                raise UnsafeOutput(f"output folder {out}: {_names(blocked)} changed since its run wrote it or is "
                                   "not the run's, and a run replaces only its own unchanged files: "
                                   "move it away or give a new folder")
            for folder in [out, *(p for p in (out / "figures",) if p.is_dir())]:
                if not os.access(folder, os.W_OK | os.X_OK):
                    raise UnsafeOutput(f"output folder {folder}: cannot write there (permissions)")
        parent = _existing_parent(out)
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise UnsafeOutput(f"output folder {out}: cannot write there ({parent} is not a writable folder)")
    except OSError as exc:
        raise UnsafeOutput(f"output folder {out}: {exc.strerror or type(exc).__name__}") from None
    return out


def mark(folder: Path) -> None:
    """Create ``folder`` (if needed) and mark it as a run's (its temporary folder, before the
    manifest replaces the mark)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text("written by a companion run; a later run of the same chapter may replace "
                                 "this folder\n")


def staging_folder(out: Path) -> Path:
    """The temporary sibling a run into ``out`` assembles its result in (this process's)."""
    return out.parent / f".tmp-{out.name}-{os.getpid()}"


def _keep(staging: Path, out: Path) -> Path:
    """Move a finished result that cannot go into ``out`` to a visible sibling; its path."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    kept = out.parent / f"{out.name}.result-{stamp}-{os.getpid()}"
    with contextlib.suppress(OSError):
        os.rename(staging, kept)
        return kept
    return staging


def commit(staging: Path, out: Path, slug: str, root: Path | None = None) -> list[str]:
    """Put the finished result in ``staging`` into ``out`` under the output rule; the foreign
    paths left in place. :class:`CommitError` (naming where the result is kept) if it cannot."""
    new = {rel: digest(staging / rel) for rel in files_under(staging) if rel != MARKER}
    try:
        if not out.exists():
            _write_manifest(staging, slug, {rel: [d] for rel, d in new.items()}, complete=True)
            os.rename(staging, out)
            return []
        found = survey(out, slug, root)  # again: files may have changed during the run
    except (OSError, UnsafeOutput) as exc:
        kept = _keep(staging, out)
        raise CommitError(f"the run finished but its result could not be put in {out} "
                          f"({getattr(exc, 'strerror', None) or exc}); it is kept in {kept}") from None
    blocked = [rel for rel in new if (os.path.lexists(out / rel) and rel not in found.ours)
               or any(os.path.lexists(out / p) and ((out / p).is_symlink() or not (out / p).is_dir())
                      for p in Path(rel).parents if str(p) != ".")]
    if blocked:
        kept = _keep(staging, out)
        raise CommitError(f"the run finished but {_names(blocked)} in {out} changed or appeared during the run and "
                          f"is not the run's to replace; the result is kept in {kept}")
    try:
        # while files move, the manifest accepts each path's old and new bytes
        during = {rel: [d] for rel, d in found.ours.items()}
        for rel, d in new.items():
            during.setdefault(rel, []).append(d)
        _write_manifest(out, slug, during, complete=False)
        for rel in new:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, out / rel)
        left = list(found.foreign) + list(found.changed)
        for rel, was in found.ours.items():
            if rel in new:
                continue
            path = out / rel
            if _regular(path) and digest(path) == was:  # looked at again just before it goes
                path.unlink()
                if path.parent != out and not any(path.parent.iterdir()):
                    path.parent.rmdir()  # figures/ that held only the old run's figures
            elif os.path.lexists(path):
                left.append(rel)
        _write_manifest(out, slug, {rel: [d] for rel, d in new.items()}, complete=True)
    except OSError as exc:
        kept = _keep(staging, out)
        raise CommitError(f"the run finished but putting its result in {out} failed ({exc.strerror or exc}); "
                          f"what was not moved is kept in {kept}") from None
    shutil.rmtree(staging, ignore_errors=True)
    return sorted(left)
