"""The real book: every chapter at `quick`, and the book built at the session's profile (``--book``:
`quick` under `make test`, `default` under `make test-book`) with warnings as errors, every theorem
and check claim it records holding, and every claim meeting the results contract.

These run the actual chapters through the CLI (cached between runs, so a second `make test`
with nothing changed is fast)."""

from __future__ import annotations

import pytest
from conftest import ROOT, book_lock, companion, run_results

from lib import seeding
from lib.claims import (CHAPTER_FALSE_ALARM, DECLARED_FAILS, KINDS, MAX_FALSE_ALARM, SCHEMA_VERSION, SOURCES,
                        VERDICTS, failing, false_alarm_total, status_of, verdict_of)
from lib.pipeline.chapters import Book

CHAPTERS = [c.slug for c in Book(ROOT).chapters()]
pytestmark = pytest.mark.slow


def _deciding(built_book) -> None:
    """Whether a theorem claim's rival is rejected and its control fails are properties of a
    deciding run; a `quick` run is a smoke test too small for either (chapter 01's rival of Lemma 7
    survives its quick run), so these wait for the default book (`make test-book`)."""
    if built_book.profile == "quick":
        pytest.skip("a quick run is too small to reject a rival or fail a control: decided in the default book")


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_chapter_runs_at_quick_and_its_checked_claims_hold(slug, tmp_path):
    log = tmp_path / "streams.tsv"
    out = companion("run", slug, "--profile", "quick", timeout=600, env={seeding.LOG_ENV: str(log)})
    assert out.returncode == 0, f"{slug} at quick:\n{out.stdout}\n{out.stderr}"
    doc = run_results("quick", slug)
    assert doc["profile"] == "quick" and doc["chapter"] == slug
    # One seed discipline: every stream the run drew from (its sweep points' too, wherever they
    # ran) has the chapter seed as its root, so no stream of one chapter seed is another's, or is
    # one of a model's constants (the same for every seed).
    if f"{slug} [quick] cached" not in out.stdout:  # a cached run draws nothing
        roots = {line.split("\t")[0] for line in log.read_text().splitlines()}
        seed = str(doc["parameters"]["seed"])
        assert seed in roots and roots <= {seed, seeding.MODEL_ROOT}, roots


@pytest.mark.integration
def test_book_builds_without_warnings(built_book):
    # exit 0: the book is built and every claim came out as its chapter declares
    assert built_book.build.returncode == 0, built_book.build.stdout[-4000:] + built_book.build.stderr[-4000:]
    html = ROOT / "_build" / "html"
    assert (html / "index.html").exists()
    for page in ["book/status", "book/bibliography", "book/reproducing", "book/citing",
                 *[f"book/chapters/{s}" for s in CHAPTERS]]:
        assert (html / f"{page}.html").exists(), page


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_every_theorem_and_check_claim_holds(built_book, slug):
    doc = built_book.results(slug)
    failed = [f"{c['kind']} {c['id']} ({status_of(c)}): {c['statement']} (theory {c['theory']}, simulation "
              f"{c['simulation']}, {c['tolerance']})" for c in failing(doc["claims"])]
    assert not failed, f"{slug}: claims that do not hold:\n" + "\n".join(failed)


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_every_claim_is_of_a_known_kind_and_theorems_name_source_and_alternative(built_book, slug):
    doc = built_book.results(slug)
    assert doc.get("schema_version") == SCHEMA_VERSION
    for c in doc["claims"]:
        assert c["kind"] in KINDS, f"{slug}: {c['id']} has kind {c['kind']!r}"
        if c["kind"] == "theorem":
            assert c.get("source") in SOURCES, f"{slug}: theorem {c['id']} has no source (paper/reconstruction)"
            alt = c.get("alternative") or {}
            assert alt.get("statement") and "rejected" in alt, f"{slug}: theorem {c['id']} names no alternative"


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_every_theorem_claim_rejects_its_alternative(built_book, slug):
    """A theorem claim whose alternative (the nearest hypothesis a reader holds) survives the
    book's run does not discriminate: it has to be given a real rival or be something else."""
    _deciding(built_book)
    doc = built_book.results(slug)
    weak = [f"theorem {c['id']}: {c['statement']} — alternative '{c['alternative']['statement']}' "
            f"(predicts {c['alternative']['prediction']}) is not rejected (simulation {c['simulation']})"
            for c in doc["claims"] if c["kind"] == "theorem" and not (c.get("alternative") or {}).get("rejected")
            and status_of(c) != DECLARED_FAILS]  # a declared failure's rival is what the run supports
    assert not weak, f"{slug}: theorem claims that do not discriminate:\n" + "\n".join(weak)


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_every_recorded_false_alarm_rate_meets_the_contract(built_book, slug):
    doc = built_book.results(slug)
    for c in doc["claims"]:
        assert "false_alarm" in c, f"{slug}: {c['id']} records no false_alarm field"
    # a claim decides something unless it is empirical and its experiment cannot see the effect
    # (then it is 'not tested' whichever way its rule comes out, and its rate is only reported)
    deciding = [c for c in doc["claims"] if c["kind"] != "empirical" or (c.get("power") or {}).get("detects")]
    high = [f"{c['id']}: false-alarm rate {c['false_alarm']:.3g}" for c in deciding
            if c["false_alarm"] is not None and not c["false_alarm"] <= MAX_FALSE_ALARM]
    assert not high, f"{slug}: claims above the contract's {MAX_FALSE_ALARM:g} per claim:\n" + "\n".join(high)


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_every_empirical_claim_has_a_verdict_and_a_power_record(built_book, slug):
    """Every empirical claim the run evaluated (a claim skipped at `quick` records ``holds`` and
    ``verdict`` null, design.md's results.json; at `default` none is skipped)."""
    doc = built_book.results(slug)
    if built_book.profile != "quick":
        assert all(c["holds"] is not None for c in doc["claims"]), f"{slug}: a claim skipped at {built_book.profile}"
    for c in (c for c in doc["claims"] if c["kind"] == "empirical" and c["holds"] is not None):
        power = c.get("power") or {}
        assert isinstance(power.get("statement"), str) and power["statement"].strip(), \
            f"{slug}: empirical {c['id']} records no power statement"
        assert isinstance(power.get("detects"), bool) and "value" in power, f"{slug}: {c['id']} power {power}"
        assert c.get("verdict") in VERDICTS, f"{slug}: empirical {c['id']} has verdict {c.get('verdict')!r}"
        # detects is computed from the design (a positive control, or detectable ≤ effect ≤ ceiling)
        assert "control" in power and "detectable" in power and "effect" in power, \
            f"{slug}: {c['id']}'s power gives no design to compute detects from: {power}"
        assert c["verdict"] == verdict_of(c["holds"], power["detects"], c["false_alarm"],
                                          power.get("matched", True)) == status_of(c), \
            f"{slug}: {c['id']}'s verdict {c['verdict']!r} does not follow from holds, power and its rule"


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_every_theorem_claim_has_a_negative_control_that_fails(built_book, slug):
    """The same pipeline with the theorem's mechanism removed or its hypothesis violated, judged
    by the claim's own rule, must fail: otherwise the claim tests something other than the
    theorem. A claim with no possible control says why (``no_control``)."""
    _deciding(built_book)
    doc = built_book.results(slug)
    bad = []
    for c in doc["claims"]:
        if c["kind"] != "theorem" or c.get("holds") is None or status_of(c) == DECLARED_FAILS:
            continue
        control = c.get("control")
        if control is None and not c.get("no_control"):
            bad.append(f"theorem {c['id']}: no negative control, and no_control does not say why")
        elif control is not None and control.get("holds") is not False:
            bad.append(f"theorem {c['id']}: its control ({control['statement']}: {control.get('value')}) passes too")
    assert not bad, f"{slug}:\n" + "\n".join(bad)


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_a_chapter_keeps_within_one_false_alarm_budget(built_book, slug):
    """A chapter's statistical claims share CHAPTER_FALSE_ALARM per run (Bonferroni), so a default
    book on an unseen seed fails by chance well under 1 % of the time (ten chapters)."""
    doc = built_book.results(slug)
    total = false_alarm_total(doc["claims"])
    assert total <= CHAPTER_FALSE_ALARM * (1 + 1e-9), \
        f"{slug}: false-alarm rates sum to {total:.3g} > {CHAPTER_FALSE_ALARM:g}: " + ", ".join(
            f"{c['id']} {c['false_alarm']:.2g}" for c in doc["claims"] if c.get("false_alarm"))


def test_status_page_shows_the_verdicts_and_the_power():
    """The status page speaks the claims module's vocabulary (no build needed)."""
    from lib.pipeline.book import _claim_row

    blind = {"id": "masked-better", "kind": "empirical", "statement": "s", "theory": 0.0, "simulation": -0.1,
             "tolerance": "t", "holds": False, "false_alarm": 1e-3, "verdict": "not tested",
             "power": {"statement": "the arms differ in data", "detects": False, "value": None}}
    row = _claim_row(blind, None)
    assert "not tested" in row and "could not</b> see the effect" in row and "the arms differ in data" in row
    assert "false-alarm rate 0.001" in row
    seen = {**blind, "power": {**blind["power"], "detects": True}, "verdict": "not reproduced"}
    assert "not reproduced" in _claim_row(seen, None)


@pytest.mark.integration
def test_rebuild_with_nothing_changed_is_all_cache_hits(built_book):
    with book_lock():
        again = companion("build", "--profile", built_book.profile, timeout=900)
    assert again.returncode == 0
    assert again.stdout.count("cached (") == len(CHAPTERS), again.stdout
    assert "book up to date" in again.stdout


REPRS = ("PosixPath(", "Claim(", "array(", "np.float64(", "dtype=", "<Figure size", "<matplotlib.",
         "Axes(", "claims recorded")


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_executed_chapter_prints_no_reprs(built_book, slug):
    """A reader sees figures, formatted tables and sentences, not Python reprs."""
    nb = built_book.notebook(slug)
    found = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out.get("text", ""))
            elif "text/html" in out.get("data", {}) or "image/png" in out.get("data", {}):
                continue  # formatted tables and figures
            else:
                text = "".join(out.get("data", {}).get("text/plain", ""))
                if text.startswith(("{", "[", "(")) and out.get("output_type") == "execute_result":
                    found.append(f"cell {i}: a bare container {text[:60]!r}")
            found += [f"cell {i}: {r} in {text[:80]!r}" for r in REPRS if r in text]
    assert not found, f"{slug}:\n" + "\n".join(found)


@pytest.mark.parametrize("slug", CHAPTERS)
@pytest.mark.integration
def test_executed_chapter_writes_nothing_to_stderr(built_book, slug):
    """Warnings (a missing font, a deprecation, a library's progress bar) would show in the book
    as red boxes between the paragraphs: a chapter's stderr stays empty."""
    nb = built_book.notebook(slug)
    found = [f"cell {i}: {''.join(out.get('text', ''))[:120]!r}" for i, cell in enumerate(nb["cells"])
             for out in cell.get("outputs", []) if out.get("output_type") == "stream" and out.get("name") == "stderr"]
    assert not found, f"{slug}:\n" + "\n".join(found)
