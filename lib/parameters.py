"""A chapter's declared parameters and the values they accept: one reading of the ``parameters``
cell for the CLI (:mod:`lib.pipeline.chapters`) and for the notebook itself (:mod:`lib.chapter`,
under plain papermill or Jupyter), so both refuse the same values.

Each parameter is annotated with its type (papermill shows it) and declares the values it
accepts at the start of its comment, in mathematical notation (papermill shows the comment as
the parameter's help):

    n_seeds: int = 5            # ∈ [3, 50]: independent seeds behind every interval
    lr: float = 0.1             # ∈ (0, 1]: step size
    mixer: str = "gla"          # ∈ {"softmax", "linear", "gla"}: sequence mixer
    Ns: list[int] = [100, 300]  # ∈ [10, 10⁶], length ∈ [2, 12]: sample sizes
    every: int = 10             # ∈ [1, 1000], where steps % every ⩵ 0: checkpoint spacing

An interval applies to a number or to every element of a (nested) list, and ``length ∈ [a, b]``
bounds a list's length; an interval with an infinite end still requires a finite value. A
``where`` clause is a rule over the chapter's parameters (cross-parameter rules live next to
the parameter whose help states them): a Python expression over parameter names, numbers,
strings, lists, arithmetic, comparisons (``<``, ``≤``, ``≥``, ``⩵``, ``≠``, ``in``), ``and`` /
``or`` / ``not``, indexing, generator expressions and the functions ``len``, ``min``, ``max``,
``all``, ``any``, ``sorted``, ``set``, ``abs``, ``distinct`` (no two elements equal) and
``ascending`` / ``decreasing`` (strictly). It holds no ``=`` (papermill cannot read a
parameter line whose comment has one) and no ``:`` (the help text starts after the first one).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit code 64."""


#: The most characters of a value a message quotes.
QUOTE_CHARS = 80
#: The most numbers, strings and lists one value may hold in all (nested lists counted through).
MAX_ELEMENTS = 100_000


def quote(value: Any) -> str:
    """``repr(value)``, cut to about :data:`QUOTE_CHARS` characters (a cut one says its size);
    never the whole repr of a huge value."""
    import reprlib

    cut = reprlib.Repr()
    cut.maxlevel, cut.maxlist, cut.maxtuple, cut.maxdict = 4, QUOTE_CHARS // 2, QUOTE_CHARS // 2, 8
    cut.maxstring = cut.maxother = cut.maxlong = QUOTE_CHARS
    short = cut.repr(value)
    if isinstance(value, (list, tuple)):
        size = f"{len(value)} elements"
    elif isinstance(value, str):
        size = f"{len(value)} characters"
    else:
        size = ""
    if len(short) <= QUOTE_CHARS and "..." not in short:
        return short
    return short[:QUOTE_CHARS - 1] + "…" + (f" ({size})" if size else "")


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases: a value built from anchors and aliases can stand for far more data
    than it spells out (a few KB can expand to billions of elements)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("YAML aliases (*name) are not accepted in a parameter value")
        return super().compose_node(parent, index)


def load_yaml(text: str) -> Any:
    """A YAML value that may not use aliases (UsageError if it does); JSON (YAML's flow
    subset, read in C) first."""
    with contextlib.suppress(ValueError, RecursionError):
        return json.loads(text)
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        if "aliases" in str(exc):
            raise UsageError(str(exc).splitlines()[0]) from None
        raise


def _count(value: Any, budget: int) -> int:
    """Elements of ``value`` counted through nested lists, stopping once past ``budget``."""
    if not isinstance(value, (list, tuple, dict)):
        return 1
    seen, stack = 0, [value]
    while stack and seen <= budget:
        item = stack.pop()
        seen += 1
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return seen


_INTERVAL = re.compile(r"^∈\s*([\[(])\s*([^,]+?)\s*,\s*([^\])]+?)\s*([\])])")
_CHOICE = re.compile(r"^∈\s*\{(.*?)\}")
_LENGTH = re.compile(r"^,\s*length\s*∈\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]")
_WHERE = re.compile(r"^,\s*where\s+([^:]+?)\s*(?=:|$)")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_RULE_SYMBOLS = {"≤": "<=", "≥": ">=", "≠": "!=", "⩵": "==", "·": "*", "−": "-"}


def _bound(text: str) -> float:
    """A bound as written: a number, ±∞, or a power of ten (10⁶, 10⁻³)."""
    text = text.strip().replace("∞", "inf").replace("−", "-")
    if text.lstrip("+-") == "inf":
        return float(text)
    if m := re.fullmatch(r"([+-]?)10([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)", text):
        return float(f"{m.group(1)}1e{m.group(2).translate(_SUPERSCRIPT)}")
    return float(ast.literal_eval(text))


def _distinct(xs) -> bool:
    return len(set(map(repr, xs))) == len(xs)


def _ascending(xs) -> bool:
    return all(a < b for a, b in zip(xs, xs[1:]))


def _decreasing(xs) -> bool:
    return all(a > b for a, b in zip(xs, xs[1:]))


RULE_FUNCTIONS = {"len": len, "min": min, "max": max, "all": all, "any": any, "sorted": sorted, "set": set,
                  "abs": abs, "distinct": _distinct, "ascending": _ascending, "decreasing": _decreasing}
_RULE_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
               ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
               ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn,
               ast.Call, ast.Name, ast.Load, ast.Store, ast.Constant, ast.List, ast.Tuple, ast.Set,
               ast.Subscript, ast.GeneratorExp, ast.comprehension)


@dataclass(frozen=True)
class Rule:
    """A ``where`` clause: an expression over the chapter's parameters that must hold."""

    text: str  # as written in the comment

    def code(self) -> ast.Expression:
        source = self.text
        for symbol, op in _RULE_SYMBOLS.items():
            source = source.replace(symbol, op)
        tree = ast.parse(source, mode="eval")
        for node in ast.walk(tree):
            if not isinstance(node, _RULE_NODES):
                raise ValueError(f"rule {self.text!r}: {type(node).__name__} is not allowed")
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                                   and node.func.id in RULE_FUNCTIONS and not node.keywords):
                raise ValueError(f"rule {self.text!r}: only {', '.join(RULE_FUNCTIONS)} may be called")
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
                raise ValueError(f"rule {self.text!r}: slices are not allowed")
        return tree

    def names(self) -> set[str]:
        """The parameter names the rule reads."""
        tree = self.code()
        bound = {n.id for node in ast.walk(tree) if isinstance(node, ast.comprehension)
                 for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - bound - set(RULE_FUNCTIONS)

    def holds(self, values: dict) -> bool:
        """Whether the rule holds for ``values`` (every name the rule reads); a rule that cannot
        be evaluated on them (an index past a list's end, a division by zero) does not hold."""
        code = compile(self.code(), "<rule>", "eval")
        try:
            return bool(eval(code, {"__builtins__": {}, **RULE_FUNCTIONS, **values}))  # noqa: S307 (checked AST)
        except (IndexError, TypeError, ZeroDivisionError, ValueError, KeyError, OverflowError):
            return False


@dataclass(frozen=True)
class Constraint:
    """The values a parameter accepts: an interval (open or closed ends) or a set of choices,
    optionally a list's length and a rule over the chapter's parameters."""

    text: str
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    choices: tuple | None = None
    length: tuple[int, int] | None = None  # a list's shortest and longest length
    rule: Rule | None = None

    @classmethod
    def parse(cls, comment: str) -> Constraint | None:
        """The constraint at the start of a parameter's comment (without ``#``), if any."""
        comment = comment.strip()
        if m := _INTERVAL.match(comment):
            kw = dict(low=_bound(m.group(2)), high=_bound(m.group(3)), low_open=m.group(1) == "(",
                      high_open=m.group(4) == ")")
        elif m := _CHOICE.match(comment):
            kw = dict(choices=tuple(ast.literal_eval(f"[{m.group(1)}]")))
        else:
            return None
        end = m.end()
        if n := _LENGTH.match(comment[end:]):
            kw["length"] = (int(n.group(1)), int(n.group(2)))
            end += n.end()
        if w := _WHERE.match(comment[end:]):
            kw["rule"] = Rule(w.group(1))
            end += w.end()
        return cls(comment[:end], **kw)

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

    @property
    def bounds_text(self) -> str:
        """The constraint without its rule (what :meth:`admits` checks)."""
        if self.rule is None:
            return self.text
        return self.text[:self.text.rindex(", where")]


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
        """``value`` coerced to this parameter's type and inside its constraint (not its rule,
        which needs the other parameters: :func:`check_rules`), else UsageError."""
        value = self.coerce(value)
        if self.constraint is not None and not self.constraint.admits(value):
            raise UsageError(f"parameter '{self.name}' must be {self.constraint.bounds_text}, got {quote(value)}")
        return value

    def coerce(self, value: Any) -> Any:
        """``value`` (a string from the command line, or a YAML value) as this parameter's type;
        raises UsageError naming the parameter and the expected type."""
        if isinstance(value, (list, tuple, dict)) and _count(value, MAX_ELEMENTS) > MAX_ELEMENTS:
            raise UsageError(f"parameter '{self.name}': a value of more than {MAX_ELEMENTS} elements is not accepted")
        want = type(_example(self.annotation)) if self.annotation else type(self.default)
        try:
            if isinstance(value, str) and want is not str:
                if len(value) > 20 * MAX_ELEMENTS:
                    raise UsageError(f"parameter '{self.name}': a value of {len(value)} characters is not accepted")
                value = _parse_text(value, want)
                if isinstance(value, (list, dict)) and _count(value, MAX_ELEMENTS) > MAX_ELEMENTS:
                    raise UsageError(f"parameter '{self.name}': a value of more than {MAX_ELEMENTS} elements "
                                     "is not accepted")
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
        except UsageError as exc:
            if "accepted" in str(exc):
                raise
            ok = False
        except (ValueError, OverflowError, yaml.YAMLError):
            ok = False
        if not ok:
            raise UsageError(f"parameter '{self.name}' expects {self.type_name} "
                             f"(default {quote(self.default)}), got {quote(value)}")
        return value


def check_rules(parameters: dict[str, Parameter], values: dict[str, Any]) -> None:
    """UsageError (one line) for the first parameter whose ``where`` rule does not hold."""
    for p in parameters.values():
        rule = p.constraint.rule if p.constraint is not None else None
        if rule is not None and not rule.holds(values):
            shown = ", ".join(f"{n}={quote(values.get(n))}" for n in sorted(rule.names(), key=list(parameters).index))
            raise UsageError(_cut(f"parameter '{p.name}' must satisfy {rule.text}; got {shown}"))


def _cut(line: str, most: int = 4 * QUOTE_CHARS) -> str:
    return line if len(line) <= most else line[:most - 1] + "…"


def validate(parameters: dict[str, Parameter], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (every declared name) checked one by one and then against the rules."""
    checked = {name: parameters[name].check(value) if name in parameters else value for name, value in values.items()}
    check_rules(parameters, checked)
    return checked


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
    return load_yaml(text)


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


def parameters_cell(path: Path) -> str:
    """The source of the notebook's one cell tagged ``parameters``."""
    nb = json.loads(Path(path).read_text())
    cells = [c for c in nb["cells"]
             if c["cell_type"] == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise UsageError(f"{Path(path).name}: expected exactly one cell tagged 'parameters', found {len(cells)}")
    return "".join(cells[0]["source"])


def parameters_of(path: Path) -> dict[str, Parameter]:
    """The literal assignments of the notebook's ``parameters`` cell, in order; every rule reads
    only declared parameters, and every default satisfies its constraint and the rules."""
    path = Path(path)
    source = parameters_cell(path)
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
            raise UsageError(f"{path.name}: the default of '{name}' ({value!r}) is not {constraint.bounds_text}")
        params[name] = Parameter(name, value, constraint, comment, annotation)
    for p in params.values():
        if p.constraint is not None and p.constraint.rule is not None:
            try:
                unknown = p.constraint.rule.names() - set(params)
            except (SyntaxError, ValueError) as exc:
                raise UsageError(f"{path.name}: the rule of '{p.name}' cannot be read ({exc})") from None
            if unknown:
                raise UsageError(f"{path.name}: the rule of '{p.name}' reads {', '.join(sorted(unknown))}, "
                                 "which are not parameters")
    try:
        check_rules(params, {n: p.default for n, p in params.items()})
    except UsageError as exc:
        raise UsageError(f"{path.name}: the defaults break a rule: {exc}") from None
    return params
