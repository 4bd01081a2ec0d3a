"""The claims API: every helper decides `holds` from the numbers, and results.json is valid JSON."""

import json
import math

import numpy as np
import pytest

from lib.claims import (CHAPTER_FALSE_ALARM, CONTROL_PASSES, DECLARED_FAILS, MAX_FALSE_ALARM, NOT_REPRODUCED,
                        NOT_TESTED, REPRODUCED, UNEXPECTED_PASS, VERDICTS, Alternative, Claims, Control, Power,
                        counts, failing, false_alarm_total, status_of, tally)

SEES = Power("a planted effect of the paper's size is found by the same pipeline", control=True, value=0.97)
BLIND = Power("the arms are not matched in data, so the comparison cannot isolate the effect", control=True,
              matched=False)


def test_helpers_decide_from_numbers():
    c = Claims("00-test", profile="default")
    assert c.close("a", "s", theory=1.0, simulation=1.05, rtol=0.1).holds
    assert not c.close("b", "s", theory=1.0, simulation=1.2, rtol=0.1).holds
    assert not c.close("nan", "s", theory=1.0, simulation=math.nan, atol=1.0).holds
    assert c.at_most("c", "s", value=-0.9, bound=-0.8).holds
    assert not c.at_most("d", "s", value=-0.7, bound=-0.8).holds
    assert c.at_least("e", "s", value=3.0, bound=3.0).holds
    assert not c.within("f", "s", value=2.9, low=1.4, high=2.8).holds
    assert c.all_close("g", "s", theory=[1, 2], simulation=np.array([1, 2 + 1e-12]), atol=1e-10).holds
    assert not c.all_close("h", "s", theory=[1, 2], simulation=[1, 2.1], atol=1e-3).holds
    assert [x.id for x in c.failed] == ["b", "nan", "d", "f", "h"]


def test_check_claims_must_hold_and_take_no_alternative():
    c = Claims("00-test", profile="default")
    assert not c.close("id", "an identity", theory=1.0, simulation=1.1, atol=1e-9, kind="check").holds
    assert [x.id for x in c.failed] == ["id"]
    with pytest.raises(ValueError, match="only theorem"):
        c.close("x", "s", theory=1.0, simulation=1.0, kind="check", alternative=("other", 2.0))
    with pytest.raises(ValueError, match="source"):
        c.close("y", "s", theory=1.0, simulation=1.0, source="folklore")


def test_alternative_is_judged_by_the_claims_own_rule():
    c = Claims("00-test", profile="default")
    # close: rejected when the simulation is not within the claim's tolerance of the prediction
    a = c.close("a", "s", theory=1.0, simulation=1.02, rtol=0.05, source="paper", alternative=("no effect", 0.0))
    b = c.close("b", "s", theory=1.0, simulation=1.02, rtol=0.05, source="paper", alternative=("5% more", 1.05))
    assert a.holds and a.alternative == {"statement": "no effect", "prediction": 0.0, "rejected": True}
    assert b.holds and b.alternative["rejected"] is False and b.discriminates is False
    # within: a point prediction gets the claim's half-width; a pair is an interval of its own
    w = c.within("w", "s", value=2.0, low=1.4, high=2.8, source="paper", alternative=("no dependence", 1.0))
    assert w.alternative["rejected"] is True  # |2.0 − 1.0| = 1.0 exceeds the half-width 0.7
    w2 = c.within("w2", "s", value=2.0, low=1.4, high=2.8, source="paper", alternative=("steeper", (1.9, 3.5)))
    assert w2.alternative["rejected"] is False
    # one-sided: value ≤ bound rules out "value ≥ p" when value < p
    m = c.at_most("m", "s", value=0.5, bound=1.0, source="reconstruction", alternative=("vacuous", 3.0))
    assert m.alternative["rejected"] and m.kind_label == "theorem (reconstructed)"
    m2 = c.at_least("m2", "s", value=0.5, bound=0.1, source="paper", alternative=("at most chance", 0.6))
    assert not m2.alternative["rejected"]
    # arrays: the alternative predicts the whole array
    g = c.all_close("g", "s", theory=[1, 2], simulation=[1, 2], atol=1e-6, source="paper",
                    alternative=("all equal", [1.5, 1.5]))
    assert g.alternative["rejected"] and g.theory == [1.0, 2.0]
    # bespoke: the caller decides
    r = c.record("r", "s", theory=1, simulation=1, holds=True, tolerance="t", source="paper",
                 alternative=Alternative("a power law", -1.0, rejected=True))
    assert r.discriminates
    with pytest.raises(ValueError, match="rejected"):
        c.record("r2", "s", theory=1, simulation=1, holds=True, tolerance="t", alternative=("x", 1.0))


def test_all_close_records_the_theory_values_or_their_range():
    c = Claims("00-test", profile="default")
    small = c.all_close("s", "s", theory=[0.5, 0.25], simulation=[0.5, 0.25], atol=1e-9, kind="check")
    assert small.theory == [0.5, 0.25]
    big = c.all_close("b", "s", theory=np.linspace(1, 2, 40).reshape(4, 10), simulation=np.linspace(1, 2, 40)
                      .reshape(4, 10), atol=1e-9, kind="check")
    assert big.theory == {"shape": [4, 10], "min": 1.0, "max": 2.0}


def test_tolerances_read_as_mathematics():
    c = Claims("00-test", profile="default")
    assert c.close("a", "s", theory=1.0, simulation=1.0, rtol=1e-3, kind="check").tolerance == \
        "|sim − theory| ≤ 0.001·|theory|"
    assert c.within("b", "s", value=2.0, low=1.4, high=2.8, kind="empirical", power=SEES).tolerance == \
        "within [1.4, 2.8]"
    assert c.at_most("c", "s", value=1, bound=2, kind="empirical", power=SEES).tolerance == "simulation ≤ 2"


def test_empirical_failure_is_not_a_theorem_failure():
    c = Claims("00-test", profile="default")
    c.at_least("e", "s", value=0.0, bound=1.0, kind="empirical", power=SEES)
    assert c.failed == [] and c.claims[0].status == "not reproduced"


def test_empirical_verdict_follows_outcome_and_power():
    c = Claims("00-test", profile="default")
    held = c.at_least("held", "s", value=2.0, bound=1.0, kind="empirical", power=SEES, false_alarm=1e-4)
    seen = c.at_least("seen", "s", value=0.0, bound=1.0, kind="empirical", power=SEES)
    blind = c.within("blind", "s", value=5.0, low=0.0, high=1.0, kind="empirical", power=BLIND)
    lucky = c.at_least("lucky", "s", value=2.0, bound=1.0, kind="empirical", power=BLIND)  # holds, blind
    assert (held.verdict, seen.verdict, blind.verdict, lucky.verdict) == \
        (REPRODUCED, NOT_REPRODUCED, NOT_TESTED, NOT_TESTED)
    assert [x.status for x in c.claims] == [REPRODUCED, NOT_REPRODUCED, NOT_TESTED, NOT_TESTED]
    assert c.failed == []  # no verdict of an empirical claim fails a run
    quick = Claims("00-test", profile="quick")
    skipped = quick.at_least("q", "s", value=0.0, bound=1.0, kind="empirical", power=SEES, quick=False)
    assert skipped.verdict is None and skipped.status == "skipped"
    # every helper takes the power, the bespoke record() too
    r = c.record("r", "s", theory=1, simulation=0, holds=False, tolerance="t", kind="empirical", power=BLIND)
    cl = c.close("cl", "s", theory=1.0, simulation=3.0, rtol=0.1, kind="empirical", power=SEES)
    ac = c.all_close("ac", "s", theory=[1, 2], simulation=[1, 2], atol=0.1, kind="empirical", power=SEES,
                     false_alarm=0.0)
    am = c.at_most("am", "s", value=3.0, bound=1.0, kind="empirical", power=BLIND)
    assert (r.status, cl.status, ac.status, am.status) == (NOT_TESTED, NOT_REPRODUCED, REPRODUCED, NOT_TESTED)
    assert c.table().to_frame().loc["blind", "status"] == NOT_TESTED


def test_empirical_claims_need_a_power_and_only_they_take_one():
    c = Claims("00-test", profile="default")
    for helper, kw in [(c.at_least, dict(value=1.0, bound=0.0)), (c.at_most, dict(value=0.0, bound=1.0)),
                       (c.within, dict(value=0.5, low=0.0, high=1.0)),
                       (c.close, dict(theory=1.0, simulation=1.0, rtol=0.1)),
                       (c.all_close, dict(theory=[1.0], simulation=[1.0], atol=0.1)),
                       (c.record, dict(theory=1, simulation=1, holds=True, tolerance="t"))]:
        with pytest.raises(ValueError, match="power"):
            helper(f"no-power-{helper.__name__}", "s", kind="empirical", **kw)
    with pytest.raises(ValueError, match="only empirical"):
        c.at_least("thm", "s", value=1.0, bound=0.0, source="paper", alternative=("none", -1.0), power=SEES)
    with pytest.raises(ValueError, match="only empirical"):
        c.at_least("chk", "s", value=1.0, bound=0.0, kind="check", power=SEES)
    with pytest.raises(ValueError, match="Power"):
        c.at_least("tuple", "s", value=1.0, bound=0.0, kind="empirical", power=("could see it", True))
    with pytest.raises(ValueError, match="statement"):
        Power("", control=True)
    with pytest.raises(ValueError, match="detects is computed"):
        Power("could see it", detects=True)
    with pytest.raises(ValueError, match="control"):
        Power("could see it", control="yes")
    with pytest.raises(ValueError, match="detectable and effect"):
        Power("could see it", effect=0.3)
    assert c.claims == []  # nothing refused was recorded


def test_false_alarm_is_recorded_on_any_kind_and_must_be_a_probability(tmp_path):
    c = Claims("00-test", profile="default")
    c.at_most("z", "largest |z|", value=2.0, bound=3.3, kind="check", false_alarm=1e-3)
    c.within("s", "slope", value=-0.5, low=-0.6, high=-0.4, source="paper", alternative=("no decay", 0.0),
             false_alarm=np.float64(2e-4))
    c.at_least("e", "gain", value=0.3, bound=0.1, kind="empirical", power=SEES, false_alarm=5e-4)
    c.close("plain", "identity", theory=1.0, simulation=1.0, atol=1e-12, kind="check")
    assert [x.false_alarm for x in c.claims] == [1e-3, 2e-4, 5e-4, None]
    for bad in (-0.1, 1.5, math.nan, True, "0.001"):
        with pytest.raises(ValueError, match="false_alarm"):
            c.at_most(f"bad-{bad}", "s", value=0.0, bound=1.0, kind="check", false_alarm=bad)
    doc = json.loads(c.save(tmp_path).read_text())
    rec = {x["id"]: x for x in doc["claims"]}
    assert [x["false_alarm"] for x in doc["claims"]] == [1e-3, 2e-4, 5e-4, None]
    assert rec["e"]["verdict"] == REPRODUCED and rec["e"]["power"] == {
        "statement": SEES.statement, "detects": True, "value": 0.97, "detectable": None, "effect": None,
        "ceiling": None, "control": True, "matched": True}
    assert "verdict" not in rec["z"] and "power" not in rec["z"] and "power" not in rec["s"]
    assert MAX_FALSE_ALARM == 1e-3
    assert "false-alarm rate 0.001" in c.table().to_frame().loc["z", "tolerance"]


def test_results_json_records_verdict_and_power_on_every_empirical_claim(tmp_path):
    quick = Claims("00-test", profile="quick")
    quick.at_least("seen", "s", value=0.0, bound=1.0, kind="empirical", power=SEES)
    quick.at_least("blind", "s", value=0.0, bound=1.0, kind="empirical", power=BLIND)
    quick.at_least("later", "s", value=0.0, bound=1.0, kind="empirical", quick=False,
                   power=Power("d", control=True, value={"effect": np.float32(0.5), "n": np.arange(2)}))
    doc = json.loads(quick.save(tmp_path).read_text())
    assert doc["schema_version"] == 2
    assert [x["verdict"] for x in doc["claims"]] == [NOT_REPRODUCED, NOT_TESTED, None]
    assert doc["claims"][2]["power"]["value"] == {"effect": 0.5, "n": [0, 1]}
    assert [status_of(x) for x in doc["claims"]] == [NOT_REPRODUCED, NOT_TESTED, "skipped"]


def test_one_vocabulary_for_status_tally_and_counts():
    stored = [{"kind": "theorem", "holds": True}, {"kind": "check", "holds": False},
              {"kind": "theorem", "holds": None},
              {"kind": "empirical", "holds": True, "power": {"detects": True}, "verdict": REPRODUCED},
              {"kind": "empirical", "holds": True, "power": {"detects": False}, "verdict": NOT_TESTED},
              {"kind": "empirical", "holds": False, "power": {"detects": False}, "verdict": NOT_TESTED},
              {"kind": "empirical", "holds": False, "power": {"detects": True}, "verdict": NOT_REPRODUCED},
              {"kind": "empirical", "holds": None, "power": {"detects": True}, "verdict": None}]
    assert [status_of(x) for x in stored] == ["holds", "FAILS", "skipped", REPRODUCED, NOT_TESTED, NOT_TESTED,
                                              NOT_REPRODUCED, "skipped"]
    assert set(VERDICTS) == {REPRODUCED, NOT_REPRODUCED, NOT_TESTED}
    assert tally(stored) == ("1/2 claims hold; empirical: 1 reproduced, 1 not reproduced, 2 not tested "
                             "(2 skipped at this profile)")
    # the CLI's line is unchanged where a chapter records no empirical claim
    plain = [{"holds": True}, {"holds": False}, {"holds": None}, {"holds": True}]
    assert tally(plain) == "2/3 claims hold (1 skipped at this profile)"
    assert tally(plain[:2]) == "1/2 claims hold"
    assert counts(stored[:3]) == "1/3"
    assert counts(stored[3:]) == "1 reproduced · 1 not reproduced · 2 not tested · 1 skipped"
    assert counts([]) == "—"
    # records written before verdicts (no power) read as they did
    assert status_of({"kind": "empirical", "holds": False}) == NOT_REPRODUCED


def test_quick_false_is_skipped_only_under_quick():
    quick = Claims("00-test", profile="quick")
    assert quick.at_least("x", "s", value=0.0, bound=1.0, quick=False).holds is None
    assert quick.failed == []
    default = Claims("00-test", profile="default")
    assert default.at_least("x", "s", value=0.0, bound=1.0, quick=False).holds is False


def test_bad_kind_and_duplicate_ids_are_refused():
    c = Claims("00-test")
    with pytest.raises(ValueError, match="kind"):
        c.at_least("x", "s", value=1, bound=0, kind="conjecture")
    c.at_least("x", "s", value=1, bound=0)
    with pytest.raises(ValueError, match="twice"):
        c.at_least("x", "s", value=1, bound=0)


def test_save_writes_json_safe_results(tmp_path):
    c = Claims("00-test", profile="default")
    c.close("a", "s", theory=np.float32(1.0), simulation=np.float64(1.0), atol=0.1)
    path = c.save(tmp_path, metrics={"curve": np.arange(3), "bad": math.inf})
    doc = json.loads(path.read_text())
    assert doc["claims"][0]["holds"] is True and doc["metrics"] == {"curve": [0, 1, 2], "bad": None}
    assert doc["schema_version"] == 2 and "alternative" in doc["claims"][0]
    assert list(c.table().to_frame().index) == ["a"]
    html = c.table()._repr_html_()
    assert "claim-badge" in html and "holds" in html and "from lib" not in html


def test_a_helper_takes_the_tolerance_in_words_and_still_judges_by_its_numbers():
    c = Claims("fixture", profile="default")
    ok = c.at_most("z", "largest |z| is small", value=2.0, bound=3.0,
                   tolerance="largest |z| ≤ 3 (level 1e-3 per run)", kind="check")
    bad = c.within("w", "in the band", value=5.0, low=0.0, high=1.0, tolerance="inside [0, 1]",
                   kind="check")
    assert ok.tolerance == "largest |z| ≤ 3 (level 1e-3 per run)" and ok.holds
    assert bad.tolerance == "inside [0, 1]" and bad.holds is False
    assert c.close("c", "close", theory=1.0, simulation=1.0, rtol=0.1, kind="check").tolerance.startswith("|")


def test_all_close_relative_error_skips_points_where_the_theory_is_zero():
    c = Claims("fixture", profile="default")
    claim = c.all_close("a", "curve", theory=[0.0, 0.5, 1.0], simulation=[0.01, 0.55, 1.0], atol=0.06,
                        kind="check")
    assert claim.holds and claim.simulation["max_rel_err"] == pytest.approx(0.1)
    zero = c.all_close("z", "zeros", theory=[0.0, 0.0], simulation=[0.0, 0.01], atol=0.1, kind="check")
    assert zero.simulation["max_rel_err"] is None and zero.simulation["max_abs_err"] == pytest.approx(0.01)


def test_power_is_computed_from_the_design_never_given():
    # detectable ≤ effect ≤ ceiling: the design could see the effect
    assert Power("d", detectable=0.1, effect=0.3, ceiling=1.0).detects
    assert not Power("d", detectable=0.4, effect=0.3, ceiling=1.0).detects  # underpowered
    assert not Power("d", detectable=0.1, effect=0.3, ceiling=0.2).detects  # the design cannot show 0.3
    assert Power("d", detectable=0.3, effect=0.3).detects  # no ceiling: unbounded; the edge counts
    assert not Power("d", control=False).detects and Power("d", control=True).detects
    assert not Power("d", control=True, detectable=0.1, effect=0.3, matched=False).detects
    assert not Power("d", control=False, detectable=0.1, effect=0.3).detects
    for bad in (-0.1, math.nan, math.inf, True):
        with pytest.raises(ValueError, match="magnitude"):
            Power("d", detectable=bad, effect=0.3)


def test_a_verdict_needs_a_rule_that_could_fail():
    c = Claims("00-test", profile="default")
    power = Power("d", detectable=0.1, effect=0.3, ceiling=1.0)
    # a significant result at the stated rate has tested the claim, whatever the power
    weak = Power("d", detectable=0.5, effect=0.3)
    sig = c.at_least("sig", "s", value=2.0, bound=1.0, kind="empirical", power=weak, false_alarm=1e-4)
    assert sig.status == REPRODUCED
    # a tolerance on a point estimate records no rate and decides nothing
    assert c.at_least("tol", "s", value=2.0, bound=1.0, kind="empirical", power=power).status == NOT_TESTED
    # a failure is 'not reproduced' only where detectable ≤ effect ≤ ceiling
    assert c.at_least("miss", "s", value=0.0, bound=1.0, kind="empirical", power=power, false_alarm=1e-4).status \
        == NOT_REPRODUCED
    assert c.at_least("blind", "s", value=0.0, bound=1.0, kind="empirical", power=weak, false_alarm=1e-4).status \
        == NOT_TESTED
    assert c.failed == []


def test_a_theorem_claim_is_judged_on_its_negative_control_by_its_own_rule():
    c = Claims("00-test", profile="default")
    kw = dict(source="paper", alternative=("no decay", 0.0))
    good = c.within("good", "slope −½", value=-0.5, low=-0.6, high=-0.4, control=Control("noise off", -1.2), **kw)
    bad = c.within("bad", "slope −½", value=-0.5, low=-0.6, high=-0.4, control=Control("noise off", -0.45), **kw)
    assert good.control == {"statement": "noise off", "value": -1.2, "holds": False} and good.status == "holds"
    assert bad.control["holds"] is True and bad.status == CONTROL_PASSES
    # every helper judges the control by its own rule
    assert c.at_most("am", "s", value=0.0, bound=1.0, control=Control("x", 2.0), **kw).control["holds"] is False
    assert c.at_least("al", "s", value=2.0, bound=1.0, control=Control("x", 1.5), **kw).control["holds"] is True
    assert c.close("cl", "s", theory=1.0, simulation=1.01, rtol=0.1, control=Control("x", 1.5), **kw).control["holds"] \
        is False
    assert c.all_close("ac", "s", theory=[1, 2], simulation=[1, 2], atol=0.1, control=Control("x", [1, 2.05]),
                       **kw).control["holds"] is True
    with pytest.raises(ValueError, match="holds"):
        c.record("rec", "s", theory=1, simulation=1, holds=True, tolerance="t", control=Control("x", 1),
                 alternative=Alternative("no", 0, rejected=True), source="paper")
    rec = c.record("rec2", "s", theory=1, simulation=1, holds=True, tolerance="t", control=Control("x", 1, holds=False),
                   alternative=Alternative("no", 0, rejected=True), source="paper")
    assert rec.status == "holds"
    assert [x.id for x in c.failed] == ["bad", "al", "ac"]
    with pytest.raises(ValueError, match="only theorem"):
        c.at_least("chk", "s", value=1.0, bound=0.0, kind="check", control=Control("x", 0.0))
    with pytest.raises(ValueError, match="not both"):
        c.at_least("both", "s", value=1.0, bound=0.0, control=Control("x", 0.0), no_control="none exists", **kw)
    why = c.at_least("why", "s", value=1.0, bound=0.0, no_control="the hypothesis cannot be violated here", **kw)
    assert why.no_control and "no control" in c.table().to_frame().loc["why", "alternative"]
    # a control is evaluated only where its claim is
    quick = Claims("00-test", profile="quick")
    assert quick.at_least("q", "s", value=1.0, bound=0.0, quick=False, control=Control("x", 2.0), **kw).control is None


def test_a_declared_finding_fails_as_declared_and_an_unexpected_pass_fails_the_run():
    c = Claims("00-test", profile="default")
    kw = dict(source="reconstruction", alternative=("the rival", 0.0))
    expected = c.at_least("contra", "s", value=0.0, bound=0.1, declared="contradicted by the simulation", **kw)
    surprise = c.at_least("surprise", "s", value=0.2, bound=0.1, declared="expected to fail", **kw)
    assert expected.status == DECLARED_FAILS and surprise.status == UNEXPECTED_PASS
    assert [x.id for x in c.failed] == ["surprise"]
    stored = c.records()
    assert [x["id"] for x in failing(stored)] == ["surprise"] and stored[0]["declared"]
    assert tally(stored) == "0/1 claims hold; 1 fails as declared"
    assert counts(stored) == "0/1 · 1 fails (declared)"
    with pytest.raises(ValueError, match="empirical"):
        c.at_least("e", "s", value=0.0, bound=1.0, kind="empirical", power=SEES, declared="no")
    with pytest.raises(ValueError, match="declared"):
        c.at_least("blank", "s", value=0.0, bound=1.0, kind="check", declared=" ")


def test_a_chapter_shares_one_false_alarm_budget():
    c = Claims("00-test", profile="default")
    c.at_most("a", "s", value=0.0, bound=1.0, kind="check", false_alarm=4e-4)
    c.at_most("b", "s", value=0.0, bound=1.0, kind="check", false_alarm=5e-4)
    c.at_most("c", "s", value=0.0, bound=1.0, kind="check")
    assert c.false_alarm_total() == pytest.approx(9e-4) and c.false_alarm_total() <= CHAPTER_FALSE_ALARM
    c.at_most("d", "s", value=0.0, bound=1.0, kind="check", false_alarm=2e-4)
    assert c.false_alarm_total() > CHAPTER_FALSE_ALARM
    # a skipped claim decides nothing and spends nothing
    assert false_alarm_total([{"holds": None, "false_alarm": 1e-3}, {"holds": True, "false_alarm": 1e-4}]) == 1e-4


def test_a_rival_whose_prediction_passes_the_rule_is_not_rejected():
    """'value ≤ 0.5' cannot tell the claim from a rival predicting 0.23: both pass the rule."""
    c = Claims("00-test", profile="default")
    kw = dict(source="paper", control=Control("x", 1.0))
    near = c.at_most("near", "s", value=0.05, bound=0.5, alternative=("reward weighting", 0.23), **kw)
    far = c.at_most("far", "s", value=0.05, bound=0.15, alternative=("reward weighting", 0.23), **kw)
    assert near.alternative["rejected"] is False and far.alternative["rejected"] is True
    up = c.at_least("up", "s", value=0.9998, bound=0.95, alternative=("1 − τ", 0.987), **kw)
    assert up.alternative["rejected"] is False
