"""Tests of lib.tmc (chapter 05): the tree against the notes' check values, exact pass@K and
selection distributions against brute force, gradients against finite differences, and the
stochastic trainers against their expected updates."""

import itertools

import numpy as np
import pytest

from lib import tmc as M


@pytest.fixture(scope="module")
def tree():
    t = M.paper_tmc()
    task = t.task("TASK1")
    paths = M.paths_from(t, task.start)
    return t, task, paths, M.path_probs(t.probs, paths), M.rex(t, task, paths)


def log_setting(t, task):
    """A setting whose reference policy is the true TMC itself (logits = log-probabilities)."""
    return M.Setting.of(t, task, [np.log(p) for p in t.probs])


def test_paper_tree_matches_the_notes(tree):
    t, task, paths, pi, _ = tree
    named = {"".join(map(str, p)): q for p, q in zip(paths, pi)}
    assert named["0000"] == pytest.approx(0.4132, abs=1e-4)
    assert named["0010"] == pytest.approx(0.0751, abs=1e-4)
    assert named["0100"] == pytest.approx(0.0041, abs=1e-4)
    assert named["0110"] == pytest.approx(0.0751, abs=1e-4)
    assert np.allclose(t.probs[2][0], [0.5, 0.5])  # the forced shared node
    classes = dict(zip(named, M.classify(t, task, paths)))
    assert classes["0000"] == M.EASY
    assert [classes[k] for k in ("0010", "0100", "0110")] == [M.HARD] * 3
    assert sum(c == M.INVALID for c in classes.values()) == 4
    p2 = M.paths_from(t, 1)
    easy2 = p2[M.classify(t, t.task("TASK2"), p2) == M.EASY]
    assert easy2.tolist() == [[1, 0, 0, 1]]


def test_exact_pass_at_k_check_values(tree):
    _, _, paths, pi, r = tree
    assert np.round(M.pass_at_k(pi, r, [1, 3, 10, 30]), 3).tolist() == [0.321, 0.609, 0.763, 0.789]
    collapsed = (paths == [0, 0, 0, 0]).all(1).astype(float)
    assert np.allclose(M.pass_at_k(collapsed, r, [1, 7, 64]), 0.728, atol=5e-4)
    # pass@1 is the expected population reward Σ π·Rex
    assert M.pass_at_k(pi, r, [1])[0] == pytest.approx(pi @ r)


def test_pass_at_k_against_brute_force():
    """Enumerate every correct set and every K-tuple of chains (a 4-path toy)."""
    pi = np.array([0.5, 0.3, 0.15, 0.05])
    r = np.array([0.6, 0.0, 0.3, 0.1])
    k = 3
    total = 0.0
    for bits in itertools.product([0, 1], repeat=4):
        p_set = np.prod([ri if b else 1 - ri for ri, b in zip(r, bits)])
        for draw in itertools.product(range(4), repeat=k):
            total += p_set * np.prod(pi[list(draw)]) * any(bits[d] for d in draw)
    assert M.pass_at_k(pi, r, [k])[0] == pytest.approx(total, rel=1e-12)


def test_sampled_pass_at_k_agrees_with_exact(tree):
    t, task, _, pi, r = tree
    est = M.sampled_pass_at_k(t.probs, t, task, [1, 10], 3000, 16, np.random.default_rng(0))
    mean, se = est.mean(0), est.std(0, ddof=1) / np.sqrt(len(est))
    assert np.all(np.abs(mean - M.pass_at_k(pi, r, [1, 10])) < 4 * se)


def test_pass_at_k_estimator_is_the_combinatorial_formula():
    n, k = 5, 2
    for c in range(n + 1):  # 1 − P(k draws without replacement all miss)
        brute = 1 - np.mean([all(i >= c for i in comb) for comb in itertools.combinations(range(n), k)])
        assert M.pass_at_k_estimate(np.array([c]), n, k)[0] == pytest.approx(brute)
    with pytest.raises(ValueError):
        M.pass_at_k_estimate(np.array([0]), 4, 5)


def test_sampled_chains_follow_the_path_distribution(tree):
    t, _, paths, pi, _ = tree
    idx = M.path_index(t, M.sample_chains(t.probs, 0, 40000, np.random.default_rng(1)))
    freq = np.bincount(idx, minlength=len(pi)) / 40000
    assert np.all(np.abs(freq - pi) < 4 * np.sqrt(pi * (1 - pi) / 40000) + 1e-12)
    assert (paths[M.path_index(t, paths)] == paths).all()


def test_score_sum_is_the_gradient_of_log_probability(tree):
    t, _, paths, _, _ = tree
    rng = np.random.default_rng(2)
    logits = [rng.standard_normal(p.shape) for p in t.probs]
    o = paths[[2, 6]]
    w = np.array([0.7, -1.3])
    f = lambda z: w @ np.log(M.path_probs(M.softmax(z), o))
    grad = M.score_sum(M.softmax(logits), o, w)
    eps = 1e-6
    for l, (i, j) in [(0, (0, 1)), (1, (1, 0)), (2, (1, 1)), (1, (0, 1))]:
        up = [z.copy() for z in logits]
        up[l][i, j] += eps
        down = [z.copy() for z in logits]
        down[l][i, j] -= eps
        assert grad[l][i, j] == pytest.approx((f(up) - f(down)) / (2 * eps), abs=1e-7)


@pytest.mark.parametrize("method,objective", [
    ("REINFORCE", lambda s, pi: M.pass_at_k(pi, s.rex, [1])[0]),
    ("RL-rej", lambda s, pi: M.pass_at_k(pi, s.rex, [5])[0] / 5),  # probes = 4
    ("KL-GRPO", lambda s, pi: pi @ s.rex - 0.3 * np.sum(
        pi * np.log(pi / M.path_probs(M.softmax(s.ref_logits), s.paths)))),
])
def test_expected_update_is_the_gradient_of_the_objective(tree, method, objective):
    t, task, _, _, _ = tree
    s = log_setting(t, task)
    rng = np.random.default_rng(3)
    logits = [z + 0.3 * rng.standard_normal(z.shape) for z in s.ref_logits]
    g = M.expected_update(s, method, logits, probes=4, beta=0.3)
    J = lambda z: objective(s, M.path_probs(M.softmax(z), s.paths))
    eps = 1e-6
    for l in range(len(logits)):
        for i, j in np.ndindex(logits[l].shape):
            up = [z.copy() for z in logits]
            up[l][i, j] += eps
            down = [z.copy() for z in logits]
            down[l][i, j] -= eps
            assert g[l][i, j] == pytest.approx((J(up) - J(down)) / (2 * eps), abs=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("method,draws", [("REINFORCE", 20000), ("RL-rej", 20000), ("KL-GRPO", 8000)])
def test_stochastic_updates_average_to_the_expected_update(tree, method, draws):
    t, task, _, _, _ = tree
    s = log_setting(t, task)
    trans = M.softmax(s.ref_logits)
    rng = np.random.default_rng(4)
    total = [np.zeros_like(z) for z in s.ref_logits]
    sq = [np.zeros_like(z) for z in s.ref_logits]
    for _ in range(draws):
        d = M.TRAINERS[method](s, s.ref_logits, trans, rng, probes=4, beta=0.3, group=4)
        if d is not None:
            total = [a + b for a, b in zip(total, d)]
            sq = [a + b * b for a, b in zip(sq, d)]
    exact = M.expected_update(s, method, s.ref_logits, probes=4, beta=0.3)
    for a, q, e in zip(total, sq, exact):
        mean = a / draws
        se = np.sqrt(np.maximum(q / draws - mean ** 2, 0) / draws)
        assert np.all(np.abs(mean - e) <= 4.5 * se + 1e-12)


def test_reinforce_squeezes_and_rl_rej_does_not(tree):
    t, task, _, _, _ = tree
    s = log_setting(t, task)
    start = M.trajectory(s, [s.ref_logits])
    rl = M.trajectory(s, M.mean_field(s, "REINFORCE", 400, 1.0, 400))
    rej = M.trajectory(s, M.mean_field(s, "RL-rej", 400, 1.0, 400, probes=4))
    assert rl["entropy"][-1] < 0.2 * start["entropy"][0]
    assert rl["coverage"][-1, M.HARD] < 0.2 * start["coverage"][0, M.HARD]
    assert rej["coverage"][-1, M.HARD] > start["coverage"][0, M.HARD]


def test_kl_trained_limit_is_close_to_the_tilt(tree):
    t, task, paths, pi, r = tree
    s = log_setting(t, task)
    limit = M.path_probs(M.softmax(M.mean_field(s, "KL-GRPO", 3000, 0.5, 3000, beta=0.3)[-1]), paths)
    tilt = M.kl_tilt(pi, r, 0.3)
    assert 0.5 * np.abs(limit - tilt).sum() < 0.01
    objective = lambda q: q @ r - 0.3 * np.sum(q * np.log(q / pi))
    rng = np.random.default_rng(5)
    for _ in range(20):  # the tilt beats any nearby distribution
        q = tilt * np.exp(0.1 * rng.standard_normal(len(pi)))
        assert objective(tilt) >= objective(q / q.sum())


def test_orm_and_soft_best_of_n_against_brute_force(tree):
    _, _, _, pi, r = tree
    n, kappa = 3, 4.0
    level = np.round(r, 12)
    hard, soft = np.zeros_like(pi), np.zeros_like(pi)
    for draw in itertools.product(range(len(pi)), repeat=n):
        p = np.prod(pi[list(draw)])
        best = [d for d in draw if level[d] == max(level[list(draw)])]
        for d in best:
            hard[d] += p / len(best)
        w = np.exp(kappa * r[list(draw)])
        for d, wd in zip(draw, w):
            soft[d] += p * wd / w.sum()
    assert np.allclose(M.orm_best_of_n(pi, r, n), hard, atol=1e-12)
    assert np.allclose(M.soft_best_of_n(pi, r, n, kappa), soft, atol=1e-12)
    counts = np.bincount(M.sample_orm_best_of_n(pi, r, n, 20000, np.random.default_rng(6)),
                         minlength=len(pi))
    assert M.binomial_pvalues(counts, hard).min() >= 1e-3 / len(pi)


def test_prm_and_distributional_prm(tree):
    _, _, paths, pi, r = tree
    assert M.prm_greedy(pi, paths, r).tolist() == (paths == [0, 0, 0, 0]).all(1).tolist()
    lam = 5.0
    tilt = M.dprm_h_transform(pi, r, lam)
    assert np.allclose(tilt, M.kl_tilt(pi, r, 1 / lam))
    counts = np.bincount(M.sample_dprm(pi, paths, r, lam, 20000, np.random.default_rng(7)),
                         minlength=len(pi))
    assert M.binomial_pvalues(counts, tilt).min() >= 1e-3 / len(pi)
    assert M.binomial_pvalues(counts, pi).min() < 1e-3 / len(pi)  # and it is not the base model


def test_binomial_pvalues_are_exact_and_valid():
    from scipy import stats

    n, p = 30, 0.05
    ks = np.arange(n + 1)
    pv = np.array([M.binomial_pvalues(np.array([k, n - k]), np.array([p, 1 - p]))[0] for k in ks])
    assert pv[0] == pytest.approx(min(1.0, 2 * stats.binom.pmf(0, n, p)))
    assert pv[6] == pytest.approx(2 * stats.binom.sf(5, n, p))
    pmf = stats.binom.pmf(ks, n, p)
    for a in (0.2, 0.05, 0.01, 1e-3, 1e-5):  # P(p-value ≤ a) ≤ a under the null, exactly
        assert pmf[pv <= a].sum() <= a
    # an impossible chain that is never seen is fine; seen once, it is rejected outright
    assert M.binomial_pvalues(np.array([0, 10]), np.array([0.0, 1.0])).tolist() == [1.0, 1.0]
    assert M.binomial_pvalues(np.array([1, 9]), np.array([0.0, 1.0]))[0] == 0.0


def test_pretraining_recovers_the_tree(tree):
    t = tree[0]
    logits = M.pretrain(t, 1000, 128, 1.0, np.random.default_rng(8))
    assert max(np.abs(a - b).max() for a, b in zip(M.softmax(logits), t.probs)) < 0.03
    again = M.pretrain(t, 1000, 128, 1.0, np.random.default_rng(8))
    assert all(np.array_equal(a, b) for a, b in zip(logits, again))


def test_random_tree_has_easy_routes_through_the_shared_node():
    for seed in range(5):
        t = M.random_tmc(5, 3, 4, 2, np.random.default_rng(seed))
        assert t.shared == (3, 0)
        for task in t.tasks:
            paths = M.paths_from(t, task.start)
            easy = paths[M.classify(t, task, paths) == M.EASY]
            assert len(easy) and (easy[:, 3] == 0).any()
            assert M.rex(t, task, paths).sum() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        M.random_tmc(2, 2, 2, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="no hard chains"):
        M.tree_squeeze((4, 2, 2), 0, 10, 0.1)
    ratios = M.tree_squeeze((4, 2, 1), 0, 300, 0.5, probes=4, beta=0.3, group=4)
    assert ratios["REINFORCE: entropy"] < ratios["RL-rej: entropy"]


def test_post_train_is_deterministic_and_refuses_unknown_methods(tree):
    t, task, _, _, _ = tree
    s = log_setting(t, task)
    a = M.train_run("PPO", 3, s, 50, 0.5, 10)
    b = M.train_run("PPO", 3, s, 50, 0.5, 10)
    assert np.array_equal(a["entropy"], b["entropy"]) and len(a["entropy"]) == 6
    other = M.train_run("PPO", 3, s, 50, 0.5, 10, stream_id=3)  # another experiment's stream
    assert not np.array_equal(a["entropy"], other["entropy"])
    with pytest.raises(ValueError, match="unknown method"):
        M.post_train(s, "DPO", 10, 0.1, np.random.default_rng(0))


def test_sign_test_by_hand():
    assert M.sign_test_p([1, 2, 3, 4]) == 1 / 16
    assert M.sign_test_p([1, 2, 3, -4]) == 5 / 16  # P(Bin(4, ½) ≥ 3)
    assert M.sign_test_p([1, 2, 3, 0]) == 5 / 16  # a tie counts as not positive


def test_one_sample_t_helpers_against_scipy():
    from scipy import stats

    x = np.random.default_rng(3).normal(0.3, 1.0, 12)
    assert np.isclose(M.mean_above_p(x, 0.1), stats.ttest_1samp(x, 0.1, alternative="greater").pvalue)
    # a mean exactly the detectable shift above the value sits at the test's level
    shift = M.detectable_shift(x, 0.01)
    assert np.isclose(M.mean_above_p(x, x.mean() - shift), 0.01)


def test_hard_summary_and_kl_beta_run(tree):
    t = tree[0]
    s = log_setting(t, t.task("TASK1"))
    pi = M.path_probs(M.softmax(s.ref_logits), s.paths)
    mass, pass30 = M.hard_summary(pi, s)
    assert np.isclose(mass, M.coverage(pi, s.classes)[M.HARD])
    assert np.isclose(pass30, M.pass_at_k(pi, s.rex, [30], s.classes, only_hard=True)[0])
    # a strong KL penalty keeps about the tilt's hard mass; a weak one squeezes it
    strong = M.kl_beta_run(1.0, 0, s, steps=300, lr=0.25, group=4)
    weak = M.kl_beta_run(0.02, 0, s, steps=300, lr=0.25, group=4)
    tilt_mass = M.hard_summary(M.kl_tilt(pi, s.rex, 1.0), s)[0]
    assert abs(strong["hard"] - tilt_mass) < 0.03 and weak["hard"] < strong["hard"] / 2
    assert strong == M.kl_beta_run(1.0, 0, s, steps=300, lr=0.25, group=4)


@pytest.mark.parametrize("method", ["REINFORCE", "RL-rej", "RAFT", "PPO", "KL-GRPO"])
@pytest.mark.parametrize("shape", [None, (4, 3, 2), (5, 3, 1)])
def test_compiled_post_train_is_the_numpy_loop(tree, method, shape):
    """The compiled loop against the numpy reference: the same draws from the same generator (it
    ends in the same state) and the same logits at every checkpoint, to round-off (exp and log
    may differ in the last bit)."""
    if shape is None:
        t = tree[0]
        s = log_setting(t, t.task("TASK1"))
    else:
        t = M.random_tmc(shape[0], shape[1], shape[1], shape[2], np.random.default_rng(7))
        s = M.Setting.of(t, t.task("TASK1"), [np.log(p) + 0.1 for p in t.probs])
    hyper = dict(probes=3, group=5, beta=0.3, epochs=2, clip=0.2)
    runs = {}
    for compiled in (False, True):
        rng = np.random.default_rng(11)
        history = M.post_train(s, method, 120, 0.5, rng, 40, compiled=compiled, **hyper)
        runs[compiled] = (history, rng.random())
    (ref, ref_next), (got, got_next) = runs[False], runs[True]
    assert got_next == ref_next and len(got) == len(ref) == 4
    for a, b in zip(ref, got):
        for x, y in zip(a, b):
            assert x.shape == y.shape and np.allclose(x, y, rtol=0, atol=1e-12)
    assert any(not np.array_equal(x, y) for x, y in zip(ref[0], ref[-1]))  # the run moved


def test_reward_weighted_policy_keeps_every_valid_chain():
    t = M.paper_tmc()
    s = log_setting(t, t.task("TASK1"))
    pi = M.path_probs(t.probs, s.paths)
    rw = M.reward_weighted(pi, s.rex)
    assert rw.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(rw, pi * s.rex / (pi * s.rex).sum())
    assert np.all(rw[s.classes != M.INVALID] > 0) and np.all(rw[s.classes == M.INVALID] == 0)
    assert 0 < M.path_entropy(rw) < M.path_entropy(pi)
    with pytest.raises(ValueError):
        M.reward_weighted(pi, np.zeros_like(pi))


def test_hard_mass_crossover_by_hand():
    t = M.paper_tmc()
    s = log_setting(t, t.task("TASK1"))
    pi = M.path_probs(t.probs, s.paths)
    grid = np.geomspace(1e-2, 1e3, 401)
    mass = lambda lam: M.coverage(M.dprm_h_transform(pi, s.rex, lam), s.classes)[M.HARD]
    ref = mass(3.0)
    cross = M.hard_mass_crossover(pi, s, ref, grid)
    assert cross == pytest.approx(3.0, rel=2e-2)  # interpolated between grid points around λ = 3
    assert mass(cross * 0.9) > ref > mass(cross * 1.1)
    assert M.hard_mass_crossover(pi, s, mass(grid[0]) + 1.0, grid) == 0.0  # never above the reference
    assert np.isnan(M.hard_mass_crossover(pi, s, -1.0, grid))  # always above


def test_dprm_vs_orm_tree_is_the_squeezed_tree_and_exact():
    out = M.dprm_vs_orm_tree((5, 3, 1), 2, 5.0, 8, root=0)
    rng = M.stream(0, 2, 2)  # tree_squeeze's stream for (root, seed): the same random tree
    tree = M.random_tmc(5, 3, 3, 1, rng)
    s = M.Setting.of(tree, tree.tasks[0], [np.log(p) for p in tree.probs])
    pi = M.path_probs(tree.probs, s.paths)
    hard = lambda d: M.coverage(d, s.classes)[M.HARD]
    assert out["base"] == pytest.approx(hard(pi))
    assert out["orm"] == pytest.approx(hard(M.orm_best_of_n(pi, s.rex, 8)))
    assert out["dprm"] == pytest.approx(hard(M.dprm_h_transform(pi, s.rex, 5.0)))
    assert out["dprm_small"] == pytest.approx(out["base"], rel=1e-2)
    if out["dprm_small"] > out["orm"]:
        assert out["crossover"] > 0 and (out["dprm"] > out["orm"]) == (out["crossover"] > 5.0)


# -- the chapter's decision rule and small statistics (lib.tmc.decisions) --------------------------
def test_claim_rule_effect_needs_every_p_below_and_fit_every_p_above():
    assert M.claim_rule([0.001, 0.002], 0.01, effect=True)
    assert not M.claim_rule([0.001, 0.02], 0.01, effect=True)
    assert M.claim_rule([0.5, 0.01], 0.01, effect=False)  # at the bound passes a fit
    assert not M.claim_rule([0.5, 0.009], 0.01, effect=False)
    assert M.claim_rule(0.2, 0.01, effect=False) and not M.claim_rule(0.2, 0.01, effect=True)


def _claims():
    from lib.claims import Claims

    return Claims("05-exploration-tree-markov-chains", profile="default")


def test_tested_records_bonferroni_within_the_claim_and_judges_alternative_and_control():
    claims = _claims()
    kw = dict(alpha=0.01, chapter_rate=0.1, n_claims=10)
    c = M.tested(claims, "effect", "an effect", [0.001, 0.004], "t-tests", effect=True,
                 control=("mechanism removed", [0.3, 0.001]), **kw)
    assert c.holds is True and c.theory == 0.005 and c.simulation == 0.004  # level 0.01/2, largest p
    assert c.control["holds"] is False and c.control["value"] == 0.3
    assert c.false_alarm == 0.01 and "of 2 t-tests" in c.tolerance and "10 statistical claims" in c.tolerance
    assert not M.tested(claims, "effect-fails", "an effect", [0.001, 0.006], "t-tests", effect=True,
                        kind="check", **kw).holds
    fit = M.tested(claims, "fit", "a fit", [0.2, 0.03, 0.5], "z-tests", alternative=("a rival", [0.5, 1e-4]),
                   control=("a control", [1e-5]), **kw)
    assert fit.holds is True and fit.simulation == 0.03 and fit.source == "reconstruction"
    assert fit.alternative["rejected"] is True and fit.control["holds"] is False
    assert M.tested(claims, "fit-fails", "a fit", [0.2, 0.003, 0.5], "z-tests", kind="check", **kw).holds is False


def test_mean_z_test_by_hand():
    import math

    samples = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]])
    mean, se, z, p = M.mean_z_test(samples, np.array([1.0, 5.0]))
    assert mean.tolist() == [3.0, 5.0] and np.allclose(se, [2 / math.sqrt(3), math.sqrt(13) / math.sqrt(3)])
    assert np.allclose(z, [math.sqrt(3), 0.0])
    assert np.allclose(p, [math.erfc(math.sqrt(3) / math.sqrt(2)), 1.0])


def test_seed_stack_geometric_midpoint_count_and_median():
    import pandas as pd

    records = [{"x": np.array([1, 2, 3])}, {"x": np.array([4, 5, 6])}]
    assert M.seed_stack(records, "x").tolist() == [[1, 4], [2, 5], [3, 6]]
    assert M.geometric_midpoint(2.0, 8.0) == 4.0
    assert M.count_wins(pd.Series([0.5, 1.0, 1.5, 3.0])) == 2
    assert M.median_or_nan(pd.Series([3.0, 1.0, 2.0])) == 2.0 and np.isnan(M.median_or_nan(pd.Series([], dtype=float)))


def test_crossing_p_sees_the_paradox_and_not_its_reverse():
    rng = np.random.default_rng(0)
    base = np.array([0.3, 0.6, 0.9])  # pass@1, pass@2, pass@K_max of the base
    noise = rng.normal(0, 0.01, (3, 12))
    paradox = np.array([[0.5], [0.6], [0.7]]) + noise  # pass@1 up, pass@K_max down
    p = M.crossing_p(paradox, base)
    assert max(p) < 1e-6
    assert p == [M.mean_above_p(paradox[0], 0.3), M.mean_above_p(-paradox[-1], -0.9)]
    assert min(M.crossing_p(np.array([[0.2], [0.6], [0.95]]) + noise, base)) > 0.99  # both reversed


def test_inference_coverages_are_the_selection_laws_by_class(tree):
    t = tree[0]
    s = log_setting(t, t.task("TASK1"))
    cov = M.inference_coverages(s.ref_logits, s, best_of=4, kappa=2.0, lam=3.0, beta=0.5)
    pi = M.path_probs(M.softmax(s.ref_logits), s.paths)
    assert list(cov) == ["ORM best-of-N", "soft best-of-N", "PRM (greedy)", "dPRM (h-transform)",
                         "KL tilt (closed form)"]
    assert np.allclose(cov["ORM best-of-N"], M.coverage(M.orm_best_of_n(pi, s.rex, 4), s.classes))
    assert np.allclose(cov["KL tilt (closed form)"], M.coverage(M.kl_tilt(pi, s.rex, 0.5), s.classes))
    for v in cov.values():
        assert np.isclose(v.sum(), 1.0)
    # ORM favours the common chain: it keeps less hard mass than the base policy
    assert cov["ORM best-of-N"][M.HARD] < M.coverage(pi, s.classes)[M.HARD]
