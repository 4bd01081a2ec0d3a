"""The real book: every chapter at `quick`, the `default` book built with warnings as errors,
and every theorem and check claim recorded at `default` holds.

These run the actual chapters through the CLI (cached between runs, so a second `make test`
with nothing changed is fast)."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, companion

from lib import seeding
from lib.claims import KINDS, MAX_FALSE_ALARM, MUST_HOLD, SCHEMA_VERSION, SOURCES, VERDICTS, status_of, verdict_of
from lib.pipeline.chapters import Book

CHAPTERS = [c.slug for c in Book(ROOT).chapters()]
pytestmark = pytest.mark.slow


def _results(profile: str, slug: str) -> dict:
    return json.loads((ROOT / "_build" / "runs" / profile / slug / "results.json").read_text())


@pytest.mark.parametrize("slug", CHAPTERS)
def test_chapter_runs_at_quick_and_its_checked_claims_hold(slug, tmp_path):
    log = tmp_path / "streams.tsv"
    out = companion("run", slug, "--profile", "quick", timeout=600, env={seeding.LOG_ENV: str(log)})
    assert out.returncode == 0, f"{slug} at quick:\n{out.stdout}\n{out.stderr}"
    doc = _results("quick", slug)
    assert doc["profile"] == "quick" and doc["chapter"] == slug
    # One seed discipline: every stream the run drew from (its sweep points' too, wherever they
    # ran) has the chapter seed as its root, so no stream of one chapter seed is another's, or is
    # one of a model's constants (the same for every seed).
    if f"{slug} [quick] cached" not in out.stdout:  # a cached run draws nothing
        roots = {line.split("\t")[0] for line in log.read_text().splitlines()}
        seed = str(doc["parameters"]["seed"])
        assert seed in roots and roots <= {seed, seeding.MODEL_ROOT}, roots


def test_default_book_builds_without_warnings(default_book):
    assert default_book.returncode in (0, 2), default_book.stdout[-4000:] + default_book.stderr[-4000:]
    html = ROOT / "_build" / "html"
    assert (html / "index.html").exists()
    for page in ["book/status", "book/bibliography", "book/reproducing", "book/citing",
                 *[f"book/chapters/{s}" for s in CHAPTERS]]:
        assert (html / f"{page}.html").exists(), page


#: Theorem and check claims known to fail at `default`, each with the evidence. The book shows them
#: as failing (chapter table and status page); this list only keeps them from hiding every other
#: failure. Adding to it needs the same scrutiny as changing a claim.
KNOWN_FAILURES = {
    ("07-label-noise-feature-learning", "stage2-error-bound"):
        "Our reading of Theorem 4.2 (reconstructed: clean test error ≥ ½·min(τ₊, τ₋) = 0.1 at d = n² = 2500, "
        "trained to loss ≤ 10⁻² on 5 seeds) is contradicted by Kou et al. (ICML 2023)'s benign-overfitting "
        "theorem: pooled clean test error 0 to 0.0058 (0 to 58 errors in 10 000) on seeds 0–9; the chapter "
        "says so, and that the rival's strict reading (fewer than one error in 10 000) is itself rejected "
        "on seeds 4, 5 and 7",
}


@pytest.mark.parametrize("slug", CHAPTERS)
def test_every_theorem_and_check_claim_holds_at_default(default_book, slug):
    doc = _results("default", slug)
    failed = [f"{c['kind']} {c['id']}: {c['statement']} (theory {c['theory']}, simulation {c['simulation']}, "
              f"{c['tolerance']})" for c in doc["claims"] if c["kind"] in MUST_HOLD and c["holds"] is not True
              and (slug, c["id"]) not in KNOWN_FAILURES]
    assert not failed, f"{slug}: claims that do not hold:\n" + "\n".join(failed)


@pytest.mark.parametrize("slug", CHAPTERS)
def test_every_claim_is_of_a_known_kind_and_theorems_name_source_and_alternative(default_book, slug):
    doc = _results("default", slug)
    assert doc.get("schema_version") == SCHEMA_VERSION
    for c in doc["claims"]:
        assert c["kind"] in KINDS, f"{slug}: {c['id']} has kind {c['kind']!r}"
        if c["kind"] == "theorem":
            assert c.get("source") in SOURCES, f"{slug}: theorem {c['id']} has no source (paper/reconstruction)"
            alt = c.get("alternative") or {}
            assert alt.get("statement") and "rejected" in alt, f"{slug}: theorem {c['id']} names no alternative"


@pytest.mark.parametrize("slug", CHAPTERS)
def test_every_theorem_claim_rejects_its_alternative_at_default(default_book, slug):
    """A theorem claim whose alternative (the nearest hypothesis a reader holds) survives the
    default run does not discriminate: it has to be given a real rival or be something else."""
    doc = _results("default", slug)
    weak = [f"theorem {c['id']}: {c['statement']} — alternative '{c['alternative']['statement']}' "
            f"(predicts {c['alternative']['prediction']}) is not rejected (simulation {c['simulation']})"
            for c in doc["claims"] if c["kind"] == "theorem" and not (c.get("alternative") or {}).get("rejected")
            and (slug, c["id"]) not in KNOWN_FAILURES]  # a known failure's rival is what the run supports
    assert not weak, f"{slug}: theorem claims that do not discriminate:\n" + "\n".join(weak)


@pytest.mark.parametrize("slug", CHAPTERS)
def test_every_recorded_false_alarm_rate_meets_the_contract(default_book, slug):
    doc = _results("default", slug)
    for c in doc["claims"]:
        assert "false_alarm" in c, f"{slug}: {c['id']} records no false_alarm field"
    # a claim decides something unless it is empirical and its experiment cannot see the effect
    # (then it is 'not tested' whichever way its rule comes out, and its rate is only reported)
    deciding = [c for c in doc["claims"] if c["kind"] != "empirical" or (c.get("power") or {}).get("detects")]
    high = [f"{c['id']}: false-alarm rate {c['false_alarm']:.3g}" for c in deciding
            if c["false_alarm"] is not None and not c["false_alarm"] <= MAX_FALSE_ALARM]
    assert not high, f"{slug}: claims above the contract's {MAX_FALSE_ALARM:g} per claim:\n" + "\n".join(high)


@pytest.mark.parametrize("slug", CHAPTERS)
def test_every_empirical_claim_has_a_verdict_and_a_power_record(default_book, slug):
    doc = _results("default", slug)
    for c in (c for c in doc["claims"] if c["kind"] == "empirical"):
        power = c.get("power") or {}
        assert isinstance(power.get("statement"), str) and power["statement"].strip(), \
            f"{slug}: empirical {c['id']} records no power statement"
        assert isinstance(power.get("detects"), bool) and "value" in power, f"{slug}: {c['id']} power {power}"
        assert c.get("verdict") in VERDICTS, f"{slug}: empirical {c['id']} has verdict {c.get('verdict')!r}"
        assert c["verdict"] == verdict_of(c["holds"], power["detects"]) == status_of(c), \
            f"{slug}: {c['id']}'s verdict {c['verdict']!r} does not follow from holds and power"


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


def test_rebuild_with_nothing_changed_is_all_cache_hits(default_book):
    again = companion("build", "--profile", "default", timeout=900)
    assert again.returncode in (0, 2)
    assert again.stdout.count("cached (") == len(CHAPTERS), again.stdout
    assert "book up to date" in again.stdout


REPRS = ("PosixPath(", "Claim(", "array(", "np.float64(", "dtype=", "<Figure size", "<matplotlib.",
         "Axes(", "claims recorded")


@pytest.mark.parametrize("slug", CHAPTERS)
def test_executed_chapter_prints_no_reprs(default_book, slug):
    """A reader sees figures, formatted tables and sentences, not Python reprs."""
    nb = json.loads((ROOT / "_build" / "runs" / "default" / slug / f"{slug}.ipynb").read_text())
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
def test_executed_chapter_writes_nothing_to_stderr(default_book, slug):
    """Warnings (a missing font, a deprecation, a library's progress bar) would show in the book
    as red boxes between the paragraphs: a chapter's stderr stays empty."""
    nb = json.loads((ROOT / "_build" / "runs" / "default" / slug / f"{slug}.ipynb").read_text())
    found = [f"cell {i}: {''.join(out.get('text', ''))[:120]!r}" for i, cell in enumerate(nb["cells"])
             for out in cell.get("outputs", []) if out.get("output_type") == "stream" and out.get("name") == "stderr"]
    assert not found, f"{slug}:\n" + "\n".join(found)
