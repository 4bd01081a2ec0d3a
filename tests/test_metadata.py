"""Chapter 10's training: data-matched arms, and the population trains what the plain loop trains."""

import warnings

import numpy as np
import pytest
import torch

from lib import metadata as M
from lib import pcfg


@pytest.fixture(scope="module")
def lang():
    return pcfg.Language(pcfg.random_grammar(depth=2, nonterminals=2, terminals=5, root=1, rhs_lengths=(1, 2, 3)))


def test_shown_depths_match_the_arms():
    assert M.shown_depths(0, 6).tolist() == [0] * 6
    assert M.shown_depths(2, 6).tolist() == [0, 0, 0, 2, 2, 2]
    assert M.shown_depths(1, 5).tolist() == [0, 0, 0, 1, 1]


def test_every_depth_of_a_replicate_sees_the_same_strings_and_as_many_tokens(lang):
    members = [(0, 0), (0, 1), (0, 2), (1, 0)]
    (tokens, targets), = list(M._batches(lang, members, steps=1, batch=6, root=2))
    g = lang.grammar
    D = g.depth
    terminals = tokens[:, :, 1 + D:]
    assert torch.equal(terminals[0], terminals[1]) and torch.equal(terminals[0], terminals[2])
    assert not torch.equal(terminals[0], terminals[3])  # another replicate draws other strings
    assert torch.equal(targets[0], targets[2])  # the same tokens count in the loss
    vocab = M.Vocab(g.n_terminals, D, g.n_sets)
    assert (tokens[0, :, 1:1 + D] == vocab.mask).all()  # the baseline: all masked
    shown = tokens[2, :, 1:1 + D] != vocab.mask
    assert shown[:3].sum() == 0 and shown[3:].all()  # half masked, half with both levels
    assert (tokens[1, 3:, 1] != vocab.mask).all() and (tokens[1, 3:, 2] == vocab.mask).all()


def test_the_population_trains_what_the_plain_loop_with_torch_adamw_trains(lang):
    torch.set_num_threads(1)
    kw = dict(dms=(0, 2), reps=(0, 3), steps=12, batch=8, root=4, d_model=16, n_layers=1, n_heads=2, lr=1e-2)
    a, ha = M.train(lang, batched=False, log_every=5, log_set=lang.sample(20, np.random.default_rng(0)), **kw)
    b, hb = M.train(lang, batched=True, log_every=5, log_set=lang.sample(20, np.random.default_rng(0)), **kw)
    for ma, mb in zip(a, b):
        for pa, pb in zip(ma.parameters(), mb.parameters()):
            assert torch.allclose(pa, pb, rtol=1e-4, atol=1e-5)
    assert ha[3].steps == hb[3].steps == [0, 5, 10, 12] and set(hb[3].losses) == {0, 2}
    np.testing.assert_allclose(ha[3].losses[2], hb[3].losses[2], rtol=1e-4, atol=1e-5)
    # the comparison can fail: members differ (another depth, another replicate)
    assert not torch.allclose(next(b[0].parameters()), next(b[1].parameters()))
    assert not torch.allclose(next(b[0].parameters()), next(b[2].parameters()))
    # a member alone is the member in the population
    alone, _ = M.train(lang, batched=True, **{**kw, "dms": (2,), "reps": (3,)})
    for pa, pb in zip(alone[0].parameters(), b[3].parameters()):
        assert torch.allclose(pa, pb, rtol=1e-4, atol=1e-5)


def test_training_learns_and_bench_reports_both_ways(lang):
    torch.set_num_threads(1)
    strings, js = lang.sample(100, np.random.default_rng(1))
    models, _ = M.train(lang, dms=(1,), steps=40, batch=16, root=0, d_model=16, n_layers=1, n_heads=2, lr=1e-2)
    g = lang.grammar
    loss = np.nanmean(M.evaluate(models[0], g, strings, js, dm=1)[0])
    assert loss < np.log(g.n_terminals + 1)  # better than uniform over terminals and EOS
    r = M.bench(lang, dms=(0, 1), reps=(0,), steps=3, batch=4, root=0, d_model=16, n_layers=1, n_heads=2)
    assert r["members"] == 2 and r["sequential_s"] > 0 and r["population_s"] > 0
    assert r["max_parameter_difference"] < 1e-4


def test_claim_rate_shares_the_budget():
    assert M.claim_rate(7) * 7 == pytest.approx(1e-3)
    with pytest.raises(ValueError):
        M.claim_rate(0)


def test_an_all_comparison_holds_only_when_every_test_is_significant_in_its_direction():
    rng = np.random.default_rng(0)
    strong = 1.0 + 0.01 * rng.standard_normal(20)
    noise = 0.01 * rng.standard_normal(20)
    c = M.compare({"a": strong, "b": -strong}, {"a": 1, "b": -1}, "all", 1e-4)
    assert c.holds and c.per_test_rate == 1e-4
    assert not M.compare({"a": strong, "b": noise}, 1, "all", 1e-4).holds
    assert not M.compare({"a": strong, "b": -strong}, 1, "all", 1e-4).holds  # b goes the wrong way
    # each test's detectable effect is at power 1 − 0.2/k, so larger than the single test's at 0.8
    single = M.compare({"a": strong}, 1, "all", 1e-4).tests["a"].mde
    assert c.tests["a"].mde > single


def test_a_none_comparison_fails_on_any_significant_test_and_splits_its_rate():
    rng = np.random.default_rng(1)
    noise = 0.01 * rng.standard_normal(20)
    c = M.compare({"a": noise, "b": noise[::-1]}, -1, "none", 1e-4)
    assert c.holds and c.per_test_rate == pytest.approx(5e-5)
    assert not M.compare({"a": noise, "b": -1 + noise}, -1, "none", 1e-4).holds
    assert "Bonferroni" in c.tolerance() and "19 degrees" in c.tolerance()


def test_the_power_numbers_come_from_the_binding_test():
    rng = np.random.default_rng(2)
    c = M.compare({"a": 1 + rng.standard_normal(10), "b": 1 + 0.1 * rng.standard_normal(10)}, 1, "all", 1e-3)
    p = c.power({"a": 1.0, "b": 1.0})
    assert p["key"] == "a" and p["detectable"] == c.tests["a"].mde and p["ceiling"] is None
    # a ceiling below the effect binds even where the test is sensitive enough
    p = c.power({"a": 10.0, "b": 1.0}, {"a": 100.0, "b": 0.5})
    assert p["key"] == "b" and p["ceiling"] == 0.5 and p["effect"] == 1.0
    assert set(p["per_test"]) == {"a", "b"}


def test_compare_refuses_a_malformed_rule():
    with pytest.raises(ValueError):
        M.compare({"a": [1.0, 2.0]}, 1, "some", 1e-3)
    with pytest.raises(ValueError):
        M.compare({"a": [1.0, 2.0]}, {"b": 1}, "all", 1e-3)


def test_the_majority_baseline_and_readable_probes():
    labels = np.asarray([0, 0, 0, 1, 1, 0, 1, 1])
    assert M.majority_baseline(labels, [0, 1, 2, 3], [4, 5, 6, 7]) == 0.25  # train says 0, test mostly 1
    acc = np.stack([np.full((2, 3, 4), 0.6), np.full((2, 3, 4), 0.4)])  # two arms: mean 0.5
    majority = np.asarray([[0.4, 0.5, 0.6], [0.4, 0.4, 0.4]])
    ceiling = np.asarray([[0.9, 0.9, 0.9], [0.3, 0.9, 0.9]])
    assert M.readable(acc, majority, ceiling).tolist() == [[True, False, False], [False, True, True]]


def test_claim_power_is_computed_from_the_binding_test():
    rng = np.random.default_rng(3)
    c = M.compare({"a": 0.1 + 0.01 * rng.standard_normal(20)}, 1, "all", 1e-4)
    p = M.claim_power(c, {"a": 0.1}, {"a": 0.5}, unit="nats", what="Matched arms", ceiling_is="the excess",
                      excess=0.08)
    assert p.detects and p.detectable == c.tests["a"].mde and "0.080 nats per token" in p.statement
    assert not M.claim_power(c, {"a": 0.1}, {"a": 0.05}, unit="nats", what="x", ceiling_is="y", excess=0.1).detects
    assert not M.claim_power(c, {"a": c.tests["a"].mde / 2}, None, unit="nats", what="x", ceiling_is="y",
                             excess=0.1).detects


def test_probe_scores_against_the_bayes_ceiling():
    posterior = np.asarray([[0.9, 0.1], [0.5, 0.5], [1.0, 0.0]])
    acc, z = M.probe_scores(np.asarray([0, 1, 0]), np.asarray([0, 0, 0]), posterior, ceiling=0.8)
    q = np.asarray([0.9, 0.5, 1.0])
    assert acc == pytest.approx(2 / 3)
    assert z == pytest.approx((2 / 3 - 0.8) / (np.sqrt(np.sum(q * (1 - q))) / 3))
    certain = np.asarray([[1.0, 0.0], [0.0, 1.0]])
    assert M.probe_scores(np.asarray([0, 1]), np.asarray([0, 1]), certain, ceiling=1.0) == (1.0, 0.0)
    assert M.probe_scores(np.asarray([0, 1]), np.asarray([0, 1]), certain, ceiling=0.5)[1] == np.inf
    # a posterior a rounding above 1 is certain too, and raises no warning (it would show in the book)
    rounded = np.asarray([[1.0 + 2e-16, 0.0], [0.0, 1.0 + 2e-16]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert M.probe_scores(np.asarray([0, 1]), np.asarray([0, 1]), rounded, ceiling=1.0) == (1.0, 0.0)


def test_equivalence_holds_only_when_every_row_is_confidently_within_the_tolerance():
    rng = np.random.default_rng(4)
    small = 0.001 * rng.standard_normal((5, 20))
    e = M.equivalence(small, 0.05, 1e-4)
    assert e.holds and e.bound < 0.05 and np.all(e.needed < 0.05)
    shifted = small.copy()
    shifted[2] += 0.06  # one row outside the tolerance
    assert not M.equivalence(shifted, 0.05, 1e-4).holds
    noisy = 0.1 * rng.standard_normal((5, 20))  # centred on 0, but too noisy to confirm
    e = M.equivalence(noisy, 0.05, 1e-4)
    assert not e.holds and np.max(e.needed) > 0.05
    with pytest.raises(ValueError):
        M.equivalence(np.zeros((3, 1)), 0.05, 1e-4)


def test_token_mean_and_position_curves_skip_the_positions_past_a_strings_end():
    values = np.array([[1.0, 2.0, np.nan], [3.0, np.nan, np.nan], [5.0, 4.0, 6.0]])
    assert M.token_mean(values) == pytest.approx((1 + 2 + 3 + 5 + 4 + 6) / 6)
    assert M.position_curve(values, np.array([0, 1, 2])) == pytest.approx([3.0, 3.0, 6.0])
    assert M.position_curve(values, np.array([2, 0])) == pytest.approx([6.0, 3.0])
    runs = [{"loss": values}, {"loss": values + 1.0}]
    curves = M.seeds_curve(runs, "loss", np.array([0, 1]))
    assert curves.shape == (2, 2)                     # (positions, seeds)
    assert curves[:, 0] == pytest.approx([3.0, 3.0]) and curves[:, 1] == pytest.approx([4.0, 4.0])


def test_bonferroni_z_gives_each_test_its_share_of_the_rate():
    import math
    assert M.bonferroni_z(0.025, 1) == pytest.approx(1.959964, abs=1e-6)
    assert M.bonferroni_z(0.25, 10) == pytest.approx(M.bonferroni_z(0.025, 1))
    for rate, n in ((1e-3, 1), (1e-4, 37), (0.05, 400)):
        z = M.bonferroni_z(rate, n)
        assert 0.5 * math.erfc(z / math.sqrt(2)) == pytest.approx(rate / n, rel=1e-9)
        assert 1 - (1 - rate / n) ** n <= rate * (1 + 1e-12)  # any of n independent tests exceeds it
    assert M.bonferroni_z(1e-3, 100) > M.bonferroni_z(1e-3, 10)
    with pytest.raises(ValueError):
        M.bonferroni_z(1e-3, 0)


def test_a_margin_at_or_above_its_ceiling_cannot_fail_and_leaves_the_claim_unmatched():
    assert M.beyond_ceiling({"a": 0.1, "b": 0.2, "c": 0.3}, {"a": 0.2, "b": 0.2, "c": None}) == ["b"]
    rng = np.random.default_rng(5)
    c = M.compare({"a": 0.05 + 0.001 * rng.standard_normal(10), "b": 0.05 + 0.001 * rng.standard_normal(10)},
                  1, "all", 1e-4)
    kw = dict(unit="nats", what="Matched arms", ceiling_is="the baseline's excess", excess=0.1)
    ok = M.margin_power(c, {"a": 0.02, "b": 0.03}, {"a": 0.1, "b": 0.1}, **kw)
    assert ok.matched and ok.detects and "every margin is below its ceiling" in ok.statement
    assert ok.ceiling == 0.1 and ok.effect == 0.03  # the binding test: the larger margin
    blind = M.margin_power(c, {"a": 0.02, "b": 0.1}, {"a": 0.1, "b": 0.1}, **kw)
    assert not blind.matched and not blind.detects
    assert "for b the margin is at or above the ceiling" in blind.statement
    assert "a: margin 0.0200 against a ceiling of 0.1000 nats" in blind.statement


def test_the_deviation_ceiling_is_the_larger_excess_of_the_worst_row():
    masked = np.asarray([[0.01, 0.03], [0.2, 0.1], [-0.01, -0.03]])  # (rows, seeds)
    given = np.asarray([[0.05, 0.07], [0.0, 0.02], [-0.02, 0.0]])
    assert M.deviation_ceiling(masked, given) == pytest.approx(0.15)
    assert M.deviation_ceiling(masked[[0, 2]], given[[0, 2]]) == pytest.approx(0.06)
    assert M.deviation_ceiling(masked[[2]], given[[2]]) == 0.0  # negative means count as 0
    # it bounds the mean deviation whenever both excesses are ≥ 0
    rng = np.random.default_rng(6)
    m, g = rng.random((7, 4)), rng.random((7, 4))
    assert np.max(np.abs((m - g).mean(-1))) <= M.deviation_ceiling(m, g)


def test_an_equivalence_whose_tolerance_reaches_the_ceiling_is_unmatched():
    rng = np.random.default_rng(7)
    e = M.equivalence(0.001 * rng.standard_normal((4, 10)), 0.05, 1e-4)
    near = M.equivalence_power(e, 0.03, worst_excess=0.01)
    assert not near.matched and not near.detects and "cannot be violated" in near.statement
    assert near.ceiling == 0.03 and near.effect == 0.05 and near.detectable == float(np.max(e.needed))
    far = M.equivalence_power(e, 0.2, worst_excess=0.1)
    assert far.matched and far.detects and "can fail" in far.statement
    assert not M.equivalence_power(e, 0.05, worst_excess=0.1).matched  # at the tolerance: cannot exceed it


def test_the_weakest_test_and_the_critical_value():
    from lib.stats import seed_test

    rng = np.random.default_rng(8)
    c = M.compare({"a": -1 + 0.1 * rng.standard_normal(6), "b": -0.2 + 0.1 * rng.standard_normal(6),
                   "c": 1 + 0.1 * rng.standard_normal(6)}, {"a": -1, "b": -1, "c": 1}, "all", 1e-3)
    key, test = M.weakest(c)
    assert key == "b" and test is c.tests["b"]
    assert M.critical_t(1e-3, 6) == pytest.approx(c.tests["a"].crit)
    assert M.critical_t(1.25e-4, 5) == pytest.approx(seed_test([1.0, 2.0, 3.0, 4.0, 6.0], 1.25e-4).crit)
    assert M.critical_t(1.25e-4, 8) < M.critical_t(1.25e-4, 5)
    with pytest.raises(ValueError):
        M.critical_t(1e-3, 1)


def test_the_direction_sentence_counts_signs_against_the_papers_direction():
    s = M.direction_sentence({"x": 0.2, "y": -0.1, "z": 0.3}, -1, what="differences", positive="worse",
                             negative="better")
    assert s == ("This run's differences are positive (worse) for x, z and negative (better) for y: in the "
                 "paper's direction for 1 of 3.")
    s = M.direction_sentence({"x": 0.2, "y": 0.1}, -1, what="d", positive="p", negative="n")
    assert s.endswith("against the paper's direction for all of them.")
    s = M.direction_sentence({"x": 0.02, "y": 0.01}, 1, what="d", positive="p", negative="n",
                             effects={"x": 0.1, "y": 0.05})
    assert "in the paper's direction for all of them, at 0.20 to 0.20 times" in s and "below it for every one" in s
    s = M.direction_sentence({"x": 0.2, "y": 0.01}, 1, what="d", positive="p", negative="n",
                             effects={"x": 0.1, "y": 0.05})
    assert "not below it for every one" in s
