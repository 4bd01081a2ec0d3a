"""The book's chapters: discovery, their parameters, profiles, and override validation.

A chapter is ``book/chapters/NN-slug.ipynb``. Its parameters are the assignments of literals in
the cell tagged ``parameters``; their values are the ``default`` profile, and
``book/params/{quick,default,paper}.yaml`` map each chapter slug to the values that differ.

Each parameter is annotated with its type (papermill shows it) and declares the values it
accepts at the start of its comment, in mathematical notation (papermill shows the comment as
the parameter's help):

    n_seeds: int = 5            # ∈ [3, 50]: independent seeds behind every interval
    lr: float = 0.1             # ∈ (0, 1]: step size
    mixer: str = "gla"          # ∈ {"softmax", "linear", "gla"}: sequence mixer
    Ns: list[int] = [100, 300]  # ∈ [10, 10⁶], length ∈ [2, 12]: sample sizes

An interval applies to a number or to every element of a (nested) list, and ``length ∈ [a, b]``
bounds a list's length; an interval with an infinite end still requires a finite value. A value
outside is refused before anything runs (exit 64).
"""

from __future__ import annotations

import ast
import io
import json
import math
import os
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROFILES = ("quick", "default", "paper")
_CHAPTER_FILE = re.compile(r"^(\d\d)-([a-z0-9-]+)\.ipynb$")


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit code 64."""


def find_root() -> Path:
    """The project root: ``$COMPANION_ROOT``, else the checkout this package lives in."""
    env = os.environ.get("COMPANION_ROOT")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[2]


_INTERVAL = re.compile(r"^∈\s*([\[(])\s*([^,]+?)\s*,\s*([^\])]+?)\s*([\])])")
_CHOICE = re.compile(r"^∈\s*\{(.*?)\}")
_LENGTH = re.compile(r"^,\s*length\s*∈\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


def _bound(text: str) -> float:
    """A bound as written: a number, ±∞, or a power of ten (10⁶, 10⁻³)."""
    text = text.strip().replace("∞", "inf").replace("−", "-")
    if text.lstrip("+-") == "inf":
        return float(text)
    if m := re.fullmatch(r"([+-]?)10([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)", text):
        return float(f"{m.group(1)}1e{m.group(2).translate(_SUPERSCRIPT)}")
    return float(ast.literal_eval(text))


@dataclass(frozen=True)
class Constraint:
    """The values a parameter accepts: an interval (open or closed ends) or a set of choices."""

    text: str
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    choices: tuple | None = None
    length: tuple[int, int] | None = None  # a list's shortest and longest length

    @classmethod
    def parse(cls, comment: str) -> Constraint | None:
        """The constraint at the start of a parameter's comment (without ``#``), if any."""
        comment = comment.strip()
        if m := _INTERVAL.match(comment):
            found = cls(m.group(0), _bound(m.group(2)), _bound(m.group(3)), m.group(1) == "(", m.group(4) == ")")
        elif m := _CHOICE.match(comment):
            found = cls(m.group(0), choices=tuple(ast.literal_eval(f"[{m.group(1)}]")))
        else:
            return None
        if n := _LENGTH.match(comment[m.end():]):
            lo, hi = int(n.group(1)), int(n.group(2))
            return cls(m.group(0) + n.group(0), found.low, found.high, found.low_open, found.high_open,
                       found.choices, (lo, hi))
        return found

    def admits(self, value: Any) -> bool:
        if isinstance(value, list):
            if self.length is not None and not self.length[0] <= len(value) <= self.length[1]:
                return False
            return all(self._admits_element(v) for v in value)
        return self._admits_element(value)

    def _admits_element(self, value: Any) -> bool:
        if isinstance(value, list):
            return all(self._admits_element(v) for v in value)
        if self.choices is not None:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below


@dataclass(frozen=True)
class Parameter:
    name: str
    default: Any
    constraint: Constraint | None = None
    help: str = ""
    annotation: str | None = None  # the type as annotated in the cell (``list[int]``)

    @property
    def type_name(self) -> str:
        if self.annotation:
            return _annotation_name(self.annotation)
        return _type_name(self.default)

    def check(self, value: Any) -> Any:
        """``value`` coerced to this parameter's type and inside its constraint, else UsageError."""
        value = self.coerce(value)
        if self.constraint is not None and not self.constraint.admits(value):
            raise UsageError(f"parameter '{self.name}' must be {self.constraint.text}, got {value!r}")
        return value

    def coerce(self, value: Any) -> Any:
        """``value`` (a string from the command line, or a YAML value) as this parameter's type;
        raises UsageError naming the parameter and the expected type."""
        want = type(_example(self.annotation)) if self.annotation else type(self.default)
        try:
            if isinstance(value, str) and want is not str:
                value = _parse_text(value, want)
            if want is bool:
                ok = isinstance(value, bool)
            elif want is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif want is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
                value = float(value) if ok else value
            elif want is type(None):
                ok = True
            else:
                ok = isinstance(value, want)
                element = _element_annotation(self.annotation)
                if want is list and ok and (element or self.default):
                    elem = Parameter(self.name, _EXAMPLES.get(element, self.default[0] if self.default else None),
                                     annotation=element)
                    value = [elem.coerce(v) for v in value]
        except (ValueError, UsageError, yaml.YAMLError):
            ok = False
        if not ok:
            raise UsageError(f"parameter '{self.name}' expects {self.type_name} "
                             f"(default {self.default!r}), got {value!r}")
        return value


def _parse_text(text: str, want: type) -> Any:
    if want is int:
        return int(text)
    if want is float:
        return float(text)
    if want is bool:
        low = text.strip().lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise ValueError(text)
    return yaml.safe_load(text)


_EXAMPLES = {"int": 0, "float": 0.0, "str": "", "bool": False, "list": []}


def _element_annotation(annotation: str | None) -> str | None:
    """``list[list[int]]`` → ``list[int]``; None for anything that is not a list annotation."""
    if annotation and annotation.startswith("list[") and annotation.endswith("]"):
        return annotation[5:-1]
    return None


def _example(annotation: str) -> Any:
    """A value of the annotated type (its shape only), to check a default against."""
    element = _element_annotation(annotation)
    if element is not None:
        return [_example(element)]
    if annotation not in _EXAMPLES:
        raise ValueError(annotation)
    return _EXAMPLES[annotation]


def _annotation_name(annotation: str) -> str:
    element = _element_annotation(annotation)
    return f"list of {_annotation_name(element)}" if element else annotation


def _matches(value: Any, annotation: str) -> bool:
    element = _element_annotation(annotation)
    if element is not None:
        return isinstance(value, list) and all(_matches(v, element) for v in value)
    want = type(_EXAMPLES.get(annotation, object()))
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return type(value) is want


def _type_name(value: Any) -> str:
    if isinstance(value, list) and value:
        return f"list of {_type_name(value[0])}"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict",
            type(None): "any"}.get(type(value), type(value).__name__)


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
                    raise UsageError(f"chapter {self.slug} has no parameter '{name}' "
                                     f"(from {source}); its parameters: {known}")
                resolved[name] = self.parameters[name].check(value)
        return resolved


def parameters_of(path: Path) -> dict[str, Parameter]:
    """The literal assignments of the notebook's ``parameters`` cell, in order."""
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"]
             if c["cell_type"] == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise UsageError(f"{path.name}: expected exactly one cell tagged 'parameters', found {len(cells)}")
    source = "".join(cells[0]["source"])
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    params = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, annotation = node.target, ast.unparse(node.annotation)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, annotation = node.targets[0], None
        else:
            raise UsageError(f"{path.name}: the parameters cell may only assign literals to names")
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            raise UsageError(f"{path.name}: parameter '{target.id}' is not a literal") from None
        name, comment = target.id, comments.get(node.lineno, "")
        if annotation is not None:
            try:
                _example(annotation)
            except ValueError:
                raise UsageError(f"{path.name}: parameter '{name}' has an unsupported type {annotation}") from None
            if not _matches(value, annotation):
                raise UsageError(f"{path.name}: the default of '{name}' ({value!r}) is not a {annotation}")
        constraint = Constraint.parse(comment)
        if constraint is not None and not constraint.admits(value):
            raise UsageError(f"{path.name}: the default of '{name}' ({value!r}) is not {constraint.text}")
        params[name] = Parameter(name, value, constraint, comment, annotation)
    return params


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
