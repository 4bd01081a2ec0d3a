"""The claims API: every helper decides `holds` from the numbers, and results.json is valid JSON."""

import json
import math

import numpy as np
import pytest

from lib.claims import Claims


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


def test_empirical_failure_is_not_a_theorem_failure():
    c = Claims("00-test", profile="default")
    c.at_least("e", "s", value=0.0, bound=1.0, kind="empirical")
    assert c.failed == [] and c.claims[0].status == "not reproduced"


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
    assert list(c.table().index) == ["a"]
