"""The book's chapters: discovery, their parameters, profiles, and override validation.

A chapter is ``book/chapters/NN-slug.ipynb``. Its parameters are the assignments of literals in
the cell tagged ``parameters``; their values are the ``default`` profile, and
``book/params/{quick,default,paper}.yaml`` map each chapter slug to the values that differ.

Each parameter is annotated with its type and declares the values it accepts at the start of
its comment (:mod:`lib.parameters`: intervals, choices, a list's length and ``where`` rules over
the other parameters). A value outside, or a set of values breaking a rule, is refused before
anything runs (exit 64); the notebook's first cell applies the same checks under plain
papermill or Jupyter (:mod:`lib.chapter`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lib.parameters import (  # noqa: F401 (the pipeline's names for them)
    Constraint, Parameter, Rule, UsageError, check_rules, parameters_of, quote,
)

PROFILES = ("quick", "default", "paper")
_CHAPTER_FILE = re.compile(r"^(\d\d)-([a-z0-9-]+)\.ipynb$")


def find_root() -> Path:
    """The project root: ``$COMPANION_ROOT``, else the checkout this package lives in."""
    env = os.environ.get("COMPANION_ROOT")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[2]


@dataclass
class ChapterSource:
    number: str
    slug: str
    path: Path
    parameters: dict[str, Parameter] = field(default_factory=dict)

    @property
    def title(self) -> str:
        nb = json.loads(self.path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                for line in "".join(cell["source"]).splitlines():
                    if line.startswith("# "):
                        return line[2:].strip()
        return self.slug

    def resolve(self, profile_values: dict, overrides: dict[str, str]) -> dict[str, Any]:
        """Defaults ← profile ← command-line overrides, every value validated."""
        resolved = {name: p.default for name, p in self.parameters.items()}
        for source, values in (("profile", profile_values), ("-p", overrides)):
            for name, value in values.items():
                if name not in self.parameters:
                    known = ", ".join(self.parameters)
                    raise UsageError(f"chapter {self.slug} has no parameter {quote(name)} "
                                     f"(from {source}); its parameters: {known}")
                resolved[name] = self.parameters[name].check(value)
        check_rules(self.parameters, resolved)
        return resolved


class Book:
    """The chapters and profiles of the project rooted at ``root``."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else find_root()
        self.chapter_dir = self.root / "book" / "chapters"
        self.params_dir = self.root / "book" / "params"
        self.build_dir = self.root / "_build"

    def chapters(self) -> list[ChapterSource]:
        found = []
        for path in sorted(self.chapter_dir.glob("*.ipynb")):
            m = _CHAPTER_FILE.match(path.name)
            if m:
                found.append(ChapterSource(m.group(1), f"{m.group(1)}-{m.group(2)}", path,
                                     parameters_of(path)))
        return found

    def chapter(self, key: str) -> ChapterSource:
        """A chapter by number (``3``, ``03``) or slug."""
        chapters = self.chapters()
        for ch in chapters:
            if key == ch.slug or (key.isdigit() and int(key) == int(ch.number)) or key == ch.slug[3:]:
                return ch
        names = ", ".join(c.slug for c in chapters)
        raise UsageError(f"no chapter '{key}' (chapters: {names})")

    def profile(self, name: str, chapter: ChapterSource) -> dict:
        if name not in PROFILES:
            raise UsageError(f"unknown profile '{name}' (profiles: {', '.join(PROFILES)})")
        path = self.params_dir / f"{name}.yaml"
        table = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
        values = table.get(chapter.slug) or {}
        if not isinstance(values, dict):
            raise UsageError(f"{path}: the entry for {chapter.slug} must be a mapping")
        return values

    def run_dir(self, profile: str, chapter: ChapterSource) -> Path:
        return self.build_dir / "runs" / profile / chapter.slug
