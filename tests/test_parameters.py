"""Every parameter of every chapter declares what it accepts, and the declaration is enforced.

Unit tier: reads the notebooks' parameters cells and the profiles through
:class:`lib.pipeline.chapters.Book`; no kernel, no subprocess.

* every parameter but ``out_dir`` carries a constraint (and a help text after it);
* property test: for every interval constraint the boundary values (closed ends; just inside an
  open end) pass :meth:`Parameter.check`, and the values just outside (for floats also NaN and
  ±∞; for lists one element just outside, and lengths just outside the length bounds) are refused
  with :class:`UsageError`; for every choice constraint each choice passes and a value not in it
  is refused;
* every profile's values resolve, and the probes of issue 34 are refused.
"""

from __future__ import annotations

import copy
import json
import math
import sys

import pytest

from lib.pipeline.chapters import PROFILES, Book, Constraint, Parameter, UsageError

BOOK = Book()
CHAPTERS = BOOK.chapters()
UNCONSTRAINED = {"out_dir"}  # the runner checks output folders itself


def test_the_book_has_its_ten_chapters():
    assert [ch.number for ch in CHAPTERS] == [f"{n:02d}" for n in range(1, 11)]


# -- (a) every parameter declares a constraint ------------------------------------------------

@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda ch: ch.number)
def test_every_parameter_declares_a_type_a_constraint_and_a_help_text(chapter):
    params = [p for p in chapter.parameters.values() if p.name not in UNCONSTRAINED]
    assert params, f"{chapter.slug} has no parameters"
    for param in params:
        assert param.constraint is not None, (
            f"{chapter.slug}: parameter '{param.name}' declares no constraint (its comment: {param.help!r})")
        assert param.annotation, f"{chapter.slug}: parameter '{param.name}' has no type annotation"
        rest = param.help.strip()[len(param.constraint.text):].lstrip()
        assert rest.startswith(":") and rest[1:].strip(), (
            f"{chapter.slug}: parameter '{param.name}' has no help text after its constraint")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda ch: ch.number)
def test_papermill_reads_every_parameter(chapter):
    """papermill (``--help-notebook``, injection) reads every parameter line with its type and
    help; it cannot parse a line whose comment holds '='."""
    from papermill.translators import PythonTranslator

    nb = json.loads(chapter.path.read_text())
    (cell,) = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    source = "".join(cell["source"])
    seen = {p.name: p for p in PythonTranslator.inspect({"source": source})}
    assert list(seen) == list(chapter.parameters), (
        f"{chapter.slug}: papermill misses {sorted(set(chapter.parameters) - set(seen))}")
    for name, param in chapter.parameters.items():
        assert seen[name].help == param.help, f"{chapter.slug}: papermill's help of '{name}'"
        assert seen[name].inferred_type_name not in ("None", ""), f"{chapter.slug}: type of '{name}'"


# -- (b) the declared set is what check() admits ----------------------------------------------

def _leaf_annotation(annotation: str) -> tuple[str, int]:
    """``list[list[int]]`` → ``("int", 2)``."""
    depth = 0
    while annotation.startswith("list[") and annotation.endswith("]"):
        annotation, depth = annotation[5:-1], depth + 1
    return annotation, depth


def _int_inside(c: Constraint) -> list[int]:
    out = []
    if math.isfinite(c.low):
        out.append(math.floor(c.low) + 1 if c.low_open else math.ceil(c.low))
    if math.isfinite(c.high):
        out.append(math.ceil(c.high) - 1 if c.high_open else math.floor(c.high))
    return out


def _int_outside(c: Constraint) -> list[int]:
    out = []
    if math.isfinite(c.low):
        out.append(math.floor(c.low) if c.low_open else math.ceil(c.low) - 1)
    if math.isfinite(c.high):
        out.append(math.ceil(c.high) if c.high_open else math.floor(c.high) + 1)
    return out


def _next(x: float, toward: float) -> float:
    """The next float after ``x`` toward ``toward``, skipping subnormals (a library that sets
    flush-to-zero mode, as one of the suite's does, would read -5e-324 as -0.0)."""
    y = math.nextafter(x, toward)
    return math.copysign(sys.float_info.min, toward - x) if abs(y) < sys.float_info.min else y


def _float_inside(c: Constraint) -> list[float]:
    out = []
    if math.isfinite(c.low):
        out.append(_next(c.low, math.inf) if c.low_open else c.low)
    if math.isfinite(c.high):
        out.append(_next(c.high, -math.inf) if c.high_open else c.high)
    return out


def _float_outside(c: Constraint) -> list[float]:
    out = [math.nan, math.inf, -math.inf]
    if math.isfinite(c.low):
        out.append(c.low if c.low_open else _next(c.low, -math.inf))
    if math.isfinite(c.high):
        out.append(c.high if c.high_open else _next(c.high, math.inf))
    return out


def _leaf_values(param: Parameter) -> tuple[list, list]:
    """Leaf values that must pass and leaf values that must be refused."""
    c = param.constraint
    leaf, _ = _leaf_annotation(param.annotation)
    if c.choices is not None:
        outside = ["__not_a_choice__"]
        numbers = [v for v in c.choices if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers:
            outside += [max(numbers) + 1, min(numbers) - 1]
            if leaf == "float":
                outside += [math.nan, math.inf]
        return list(c.choices), outside
    if leaf == "int":
        return _int_inside(c), _int_outside(c)
    if leaf == "float":
        return _float_inside(c), _float_outside(c)
    pytest.fail(f"parameter '{param.name}': an interval on a {param.annotation}")


def _some_inside(param: Parameter):
    """One leaf value inside the constraint."""
    inside, _ = _leaf_values(param)
    if inside:
        return inside[0]
    return 0.0 if _leaf_annotation(param.annotation)[0] == "float" else 0  # (−∞, ∞)


def _wrap(leaf, depth: int, length: int):
    """A list of ``length`` elements nested ``depth`` deep with every leaf ``leaf`` (inner lists
    of two elements)."""
    value = leaf
    for level in range(depth):
        value = [copy.deepcopy(value) for _ in range(length if level == depth - 1 else 2)]
    return value


def _example(param: Parameter):
    """A value the constraint admits: the default, or a built list where the default is empty."""
    _, depth = _leaf_annotation(param.annotation)
    if depth == 0 or param.default:
        return copy.deepcopy(param.default)
    length = max(1, param.constraint.length[0]) if param.constraint.length else 1
    return _wrap(_some_inside(param), depth, length)


def _with_first_leaf(value, leaf):
    value = copy.deepcopy(value)
    holder = value
    while isinstance(holder[0], list):
        holder = holder[0]
    holder[0] = leaf
    return value


def _cases(param: Parameter) -> tuple[list, list]:
    """Whole values that must pass and whole values that must be refused."""
    inside, outside = _leaf_values(param)
    _, depth = _leaf_annotation(param.annotation)
    if depth == 0:
        return inside, outside
    example = _example(param)
    good = [_with_first_leaf(example, v) for v in inside]
    bad = [_with_first_leaf(example, v) for v in outside]
    if param.constraint.length is not None:
        lo, hi = param.constraint.length
        element = example[0]
        good += [[copy.deepcopy(element) for _ in range(n)] for n in (lo, hi)]
        bad += [[copy.deepcopy(element) for _ in range(n)] for n in (lo - 1, hi + 1) if n >= 0]
    return good, bad


def _check_boundaries(chapter, param) -> int:
    """The property for one parameter; returns how many values it tried (each one asserted)."""
    assert param.constraint is not None, f"{chapter.slug}: parameter '{param.name}' declares no constraint"
    assert param.constraint.admits(param.default)
    param.check(copy.deepcopy(param.default))
    good, bad = _cases(param)
    assert good or math.isinf(param.constraint.low) and math.isinf(param.constraint.high), \
        f"{chapter.slug}: nothing to test for '{param.name}'"
    for value in good:
        try:
            param.check(copy.deepcopy(value))
        except UsageError as err:
            pytest.fail(f"{chapter.slug}: '{param.name}' refused {value!r}, which its constraint "
                        f"{param.constraint.text} admits: {err}")
    assert bad, f"{chapter.slug}: no value outside '{param.name}''s constraint to try"
    texts = []
    leaf, depth = _leaf_annotation(param.annotation)
    if not depth and leaf in ("int", "float"):
        # a float's shortest round-trip text (a numpy scalar's str follows numpy's print options,
        # which a chapter sets to numpy 1.25's: it can round a value just outside onto the bound)
        texts = [repr(float(v)) if isinstance(v, float) else repr(v) for v in _leaf_values(param)[1]]
    else:
        texts = [json.dumps(v) for v in bad if isinstance(v, (list, str, bool))]
    for value in [*bad, *texts]:  # values, then the same values as `-p name text` would give them
        try:
            param.check(copy.deepcopy(value))
        except UsageError:
            continue
        pytest.fail(f"{chapter.slug}: '{param.name}' accepted {value!r} outside {param.constraint.text}")
    return len(good) + len(bad) + len(texts)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda ch: ch.number)
def test_boundaries_pass_and_values_just_outside_are_refused(chapter):
    """Property test over every parameter of the chapter: the boundary values pass, and every
    value just outside is refused, both as a value and as the command line's text of it."""
    tried = {p.name: _check_boundaries(chapter, p) for p in chapter.parameters.values()
             if p.name not in UNCONSTRAINED}
    assert all(n >= 2 for n in tried.values()), tried


def test_the_property_test_can_fail():
    """A parameter whose checker admitted a value just outside would be caught."""
    p = Parameter("n", 5, Constraint.parse("∈ [3, 50]: x"), "∈ [3, 50]: x", "int")
    good, bad = _cases(p)
    assert good == [3, 50] and bad == [2, 51]
    loose = Parameter("n", 5, Constraint.parse("∈ [2, 50]: x"), "∈ [2, 50]: x", "int")
    assert loose.check(bad[0]) == 2  # a looser constraint admits it: the test above would fail
    lst = Parameter("Ns", [100, 300], Constraint.parse("∈ [10, 10⁶], length ∈ [2, 12]: x"),
                    "", "list[int]")
    good, bad = _cases(lst)
    assert [9, 300] in bad and [1000001, 300] in bad and [100] in bad and [100] * 13 in bad
    assert [10, 300] in good and [100] * 12 in good
    fl = Parameter("lr", 0.1, Constraint.parse("∈ (0, 1]: x"), "", "float")
    good, bad = _cases(fl)
    assert 1.0 in good and 0.0 in bad and any(math.isnan(v) for v in bad)


# -- (c) every profile resolves, and the issue's probes are refused -----------------------------

@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda ch: ch.number)
def test_every_profile_resolves(chapter, profile):
    values = BOOK.profile(profile, chapter)
    resolved = chapter.resolve(values, {})
    for name, value in values.items():
        assert resolved[name] == chapter.parameters[name].coerce(value)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda ch: ch.number)
def test_a_chapter_reads_each_profile_as_the_runner_resolves_it(chapter, profile):
    """lib.profiles, which a chapter's prose reads for the other profiles' sizes, agrees with the
    runner's resolution of the profile (every declared parameter, defaults included)."""
    from lib.profiles import profile_values

    assert profile_values(chapter.slug, profile) == chapter.resolve(BOOK.profile(profile, chapter), {})


def test_a_profile_that_does_not_exist_is_refused():
    from lib.profiles import profile_values

    with pytest.raises(ValueError, match="no profile 'huge'"):
        profile_values(CHAPTERS[0].slug, "huge")


PROBES = [
    ("08", "n_seeds", "0"), ("08", "Ns", "[]"), ("08", "Ns", "[1000000000000]"),
    ("08", "beta", "nan"), ("08", "beta", "-inf"), ("08", "beta", "inf"),
    ("07", "tau", "1.5"), ("07", "n", "-5"), ("06", "width", "0"),
    ("01", "n_vocab", "8"), ("01", "threshold_l_hi", "2"), ("01", "realistic_d_model", "50"),
    ("02", "rhos", "[1.0]"), ("02", "d_model", "40"), ("02", "bench_passes", "[fwd, back]"),
    ("03", "conv_lams", "[1.0]"), ("03", "sweep_lams", "[0.1, 1.0]"), ("03", "ope_gamma", "1"),
    ("09", "tau", "0.05"), ("09", "steps", "10"), ("09", "mixers", "[bogus]"),
    ("10", "steps", "10"), ("10", "n_heads", "3"), ("10", "device", "tpu"),
]


@pytest.mark.parametrize("number, name, text", PROBES, ids=[f"{n}-{p}-{t}" for n, p, t in PROBES])
def test_issue_probes_are_refused(number, name, text):
    chapter = BOOK.chapter(number)
    with pytest.raises(UsageError, match=name):
        chapter.resolve({}, {name: text})


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda ch: ch.number)
def test_seed_range_is_the_generators(chapter):
    seed = chapter.parameters["seed"]
    assert seed.check("4294967295") == 2**32 - 1
    with pytest.raises(UsageError):
        seed.check(str(2**32))
