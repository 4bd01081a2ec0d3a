"""Tests of lib.curriculum: the tree against brute force, the REINFORCE gradient against
autograd, the sufficient-statistic sampler against the literal protocol, the theory formulas
against hand computations, the transformer against the tabular policy."""

import math
from itertools import product

import numpy as np
import pytest
import torch

from lib import curriculum as C


def all_paths(tree, L=None):
    return np.array(list(product(range(tree.d), repeat=tree.k if L is None else L)))


# -- the tree -------------------------------------------------------------------------------------
def test_chain_matches_hand_computation():
    tree = C.mod_chain(4, 3, target=(2, 0, 3), p=5, a=2)
    x = np.array([1, 4, 3, 2])
    # z1 = 3, z2 = 2·3 + 1 = 7 ≡ 2, z3 = 2·2 + 2 = 6 ≡ 1
    assert C.ReasoningTree.prefix_answers(tree, x, np.array([2, 0, 3])).tolist() == [3, 2, 1]
    bits = C.parity(5, 3, target=(1, 3, 4))
    xb = np.array([1, 1, 0, 1, 1])
    assert bits.prefix_answers(xb, np.array([1, 3, 4])).tolist() == [1, 0, 1]


@pytest.mark.parametrize("tree, expected", [
    (C.parity(4, 3), 6),                       # every reordering of the three target bits
    (C.parity(4, 2, blocked=True), 1),
    (C.mod_chain(4, 3, p=5, a=2), 1),          # distinct weights 4, 2, 1
    (C.mod_chain(4, 3, p=3, a=2), 2),          # weights 1, 2, 1: swapping ends is also right
])
def test_correct_path_count_brute_force(tree, expected):
    assert tree.is_correct(all_paths(tree)).sum() == expected
    if expected in (1, 6):
        assert tree.n_correct_paths() == expected


@pytest.mark.parametrize("tree", [C.parity(4, 2), C.parity(3, 2, blocked=True), C.mod_chain(4, 2)])
def test_wrong_paths_are_rewarded_at_rate_q(tree):
    """Enumerate all inputs: a correct path is always rewarded, any other with rate exactly q."""
    xs = np.array(list(product(range(tree.p), repeat=int(np.prod(tree.input_shape)))))
    xs = xs.reshape(-1, *tree.input_shape)
    paths = all_paths(tree)
    rate = np.array([tree.terminal_reward(xs, np.broadcast_to(p, (len(xs), tree.k))).mean()
                     for p in paths])
    right = tree.is_correct(paths)
    assert np.all(rate[right] == 1.0)
    assert np.allclose(rate[~right], tree.q)


def test_base_success_matches_simulation():
    tree = C.parity(4, 3)
    rng = np.random.default_rng(9)
    paths = rng.integers(0, 4, size=(200_000, 3))
    x = tree.sample_inputs(rng, (200_000,))
    base = C.base_success(tree)
    assert np.isclose(base["chain"], 6 / 64)
    assert abs(tree.is_correct(paths).mean() - base["chain"]) < 0.003
    assert abs(tree.terminal_reward(x, paths).mean() - base["answer"]) < 0.004


# -- REINFORCE --------------------------------------------------------------------------------------
def test_reinforce_gradient_matches_autograd():
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(3, 5))
    paths = rng.integers(0, 5, size=(40, 3))
    r = rng.integers(0, 2, size=40).astype(float)
    t = torch.tensor(theta, requires_grad=True)
    logp = torch.log_softmax(t, -1)[torch.arange(3), torch.as_tensor(paths)].sum(-1)
    ((torch.as_tensor(r) - r.mean()) * logp).mean().backward()
    g = C.reinforce_gradient(theta, paths, r, baseline=True)
    assert np.allclose(g, t.grad.numpy())


def test_sampling_follows_the_policy():
    rng = np.random.default_rng(1)
    theta = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]]))
    paths = C.sample_paths(theta, 200_000, rng)
    freq = np.stack([np.bincount(paths[:, j], minlength=3) for j in range(2)]) / 200_000
    assert np.allclose(freq, np.exp(theta), atol=0.005)


def test_greedy_refuses_ties():
    path, unique = C.greedy(np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0]]))
    assert unique.tolist() == [False, True] and path[1] == 1


# -- one-step protocol --------------------------------------------------------------------------
def test_fast_sampler_matches_literal_protocol():
    rng = np.random.default_rng(2)
    tree = C.parity(4, 2, blocked=True)
    for n in (150, 600):
        lit = C.onestep_literal(tree, "direct", n, 1500, rng).mean()
        fast = C.onestep_fast(4, 2, 0.5, n, 20_000, rng).mean()
        assert abs(lit - fast) < 4.5 * np.sqrt(fast * (1 - fast) / 1500) + 1e-3


def test_fast_sampler_matches_literal_protocol_on_mod_chain():
    rng = np.random.default_rng(10)
    tree = C.mod_chain(4, 2, p=5, a=2)
    assert tree.n_correct_paths() == 1
    for n in (60, 200):
        lit = C.onestep_literal(tree, "direct", n, 1500, rng).mean()
        fast = C.onestep_fast(4, 2, tree.q, n, 20_000, rng).mean()
        assert abs(lit - fast) < 4.5 * np.sqrt(fast * (1 - fast) / 1500) + 1e-3


@pytest.mark.parametrize("route", ["depth", "hint"])
def test_curriculum_stages_are_the_same_bandit(route):
    rng = np.random.default_rng(3)
    tree = C.parity(6, 3)
    fast = C.onestep_fast(6, 1, 0.5, 120, 20_000, rng).mean()
    for stage in (1, 3):
        lit = C.onestep_literal(tree, route, 120, 1500, rng, stage=stage).mean()
        assert abs(lit - fast) < 4.5 * np.sqrt(fast * (1 - fast) / 1500) + 1e-3


@pytest.mark.parametrize("route", ["depth", "hint"])
def test_whole_curriculum_sampler_matches_literal_protocol(route):
    """Stages run one after the other from the policy the previous stage produced: the
    sufficient-statistic sampler has the literal protocol's law, stage by stage."""
    rng = np.random.default_rng(11)
    tree = C.parity(4, 3, blocked=True)
    n = 60  # well below n*: stages fail often, so errors carry over
    lit = C.curriculum_literal(tree, route, n, 1500, rng)
    fast = C.curriculum_fast(4, 3, 0.5, n, 30_000, rng)
    for a, b in [(lit["right"], fast["right"]), *zip(lit["stage_right"].T, fast["stage_right"].T)]:
        assert abs(a.mean() - b.mean()) < 4.5 * np.sqrt(b.mean() * (1 - b.mean()) / 1500) + 1e-3
    # a wrong stage leaves later stages nothing to find: later stages are right less often
    rates = fast["stage_right"].mean(axis=0)
    assert rates[0] > rates[1] > rates[2]


def test_whole_curriculum_theory_and_sampler_agree():
    rng = np.random.default_rng(12)
    th = C.n_star_theory(8, 1, 0.5, stages=3)
    sim = C.n_star(lambda n: C.curriculum_fast(8, 3, 0.5, n, 4000, rng)["right"].mean(), 1e6)
    assert 0.75 < sim / th < 1.33
    assert th > C.n_star_theory(8, 1, 0.5)  # every stage must now succeed


def test_sampler_check_on_the_verifier_and_a_mod_chain():
    rng = np.random.default_rng(13)
    for tree, oracle in ((C.parity(4, 2, blocked=True), "chain"), (C.mod_chain(5, 2, p=5, a=2), "answer")):
        out = C.sampler_check(tree, "direct", 100, 800, rng, oracle=oracle)
        assert out["z"] < 4.5 and 0.05 < out["fast_first"] < 0.999


def test_literal_step_keeps_ties():
    """Equal reward counts must give exactly equal logits however the rollouts are chunked: a
    tie is not a choice.  With n = 3 and chunks of one rollout, arms rewarded in different
    chunks must still tie exactly (sums of rounded per-chunk gradients would break the tie)."""
    rng = np.random.default_rng(14)
    tree = C.parity(6, 1, blocked=True)
    for chunk in (1, 7, 1 << 21):
        ok = C.onestep_literal(tree, "direct", 3, 4000, rng, chunk=chunk)
        fast = C.onestep_fast(6, 1, 0.5, 3, 40_000, rng)
        assert abs(ok.mean() - fast.mean()) < 4.5 * np.sqrt(fast.mean() * (1 - fast.mean()) / 4000)


@pytest.mark.slow
def test_shared_parity_direct_step_is_symmetric():
    """The k! reorderings share the update: for k = 2 the greedy chain is right in the limit with
    probability 1/2 + arcsin(1/(d+1))/π (correlated Gaussian score differences), not 1."""
    rng = np.random.default_rng(4)
    ok = C.onestep_literal(C.parity(4, 2), "direct", 20_000, 400, rng).mean()
    assert abs(ok - (0.5 + np.arcsin(1 / 5) / np.pi)) < 0.1


def test_onestep_theory_limits():
    assert C.onestep_theory(8, 2, 0.5, 1.0) < 0.05
    assert C.onestep_theory(8, 2, 0.5, 1e7) > 0.999
    # q = 0: success iff the right path was drawn at least once (and then it is the unique max)
    n = 300.0
    assert np.isclose(C.onestep_theory(4, 2, 0.0, n), 1 - np.exp(-n / 16), atol=1e-6)


def test_n_star_search_on_a_known_step():
    assert C.n_star(lambda n: float(n >= 1000), 1e6) == C.n_grid(1e6)[C.n_grid(1e6) >= 1000][0]
    assert C.n_star(lambda n: 0.0, 1e4) == float("inf")


def test_n_star_theory_agrees_with_sampler():
    rng = np.random.default_rng(5)
    th = C.n_star_theory(8, 1, 0.5)
    sim = C.n_star(lambda n: C.onestep_fast(8, 1, 0.5, n, 4000, rng).mean(), 1e6)
    assert 0.75 < sim / th < 1.33


def test_loglog_slope():
    assert np.isclose(C.loglog_slope([2, 4, 8], [3, 12, 48]), 2.0)


# -- test time ----------------------------------------------------------------------------------
def test_rejection_cost_hand_cases():
    # perfect oracle in one call (q = 0, m = 1): geometric number of candidates
    cost = C.rejection_cost(0.1, 0.0, 1)
    assert np.isclose(cost["candidates"], 10) and np.isclose(cost["calls"], 10)
    assert np.isclose(cost["success"], 1.0)
    # q = 1/2, m = 2, c = 1/2: P(acc) = 1/2 + 1/8, calls per wrong 1.5
    cost = C.rejection_cost(0.5, 0.5, 2)
    assert np.isclose(cost["candidates"], 1 / 0.625)
    assert np.isclose(cost["calls"], (0.5 * 2 + 0.5 * 1.5) / 0.625)


def test_rejection_cost_variance_hand_cases():
    # q = 0, m = 1: calls = candidates ~ Geometric(c), variance (1 − c)/c²
    cost = C.rejection_cost(0.2, 0.0, 1)
    assert np.isclose(cost["calls_var"], 0.8 / 0.04) and np.isclose(cost["candidates_var"], 0.8 / 0.04)
    # every candidate right: one candidate, m calls, no variance
    cost = C.rejection_cost(1.0, 0.5, 3)
    assert cost["calls"] == 3 and cost["calls_var"] == 0


def test_best_of_n_and_ltar_match_theory():
    rng = np.random.default_rng(6)
    tree = C.parity(4, 2, blocked=True)
    th = C.test_time_theory(tree)
    R = 3000
    b = C.best_of_n(tree, th["best_of_n"]["m"], R, rng)
    lt = C.ltar(tree, th["ltar"]["m"], R, rng)
    assert abs(b["calls"].mean() - th["best_of_n"]["calls"]) < 4.5 * np.sqrt(th["best_of_n"]["calls_var"] / R)
    assert abs(b["calls"].var() / th["best_of_n"]["calls_var"] - 1) < 0.25
    clean = lt["clean"]
    assert abs(clean.mean() - th["ltar"]["clean"]) < 4.5 * np.sqrt(th["ltar"]["clean"] * (1 - th["ltar"]["clean"]) / R)
    c = lt["calls"][clean]
    assert abs(c.mean() - th["ltar"]["clean_calls"]) < 4.5 * np.sqrt(th["ltar"]["clean_calls_var"] / c.size)
    assert abs(lt["steps"].mean() / th["ltar"]["steps"] - 1) < 0.25
    assert b["right"].mean() > 0.97 and lt["right"].mean() > 0.97


# -- iterative training and the transformer -----------------------------------------------------
def test_training_is_deterministic_and_learns_with_curriculum():
    tree = C.parity(5, 2)
    runs = [C.train(tree, "depth", seeds=2, budget=4096, batch=64, lr=10.0,
                    rng=np.random.default_rng(7), n_test=256, evals=5) for _ in range(2)]
    assert np.array_equal(runs[0]["accuracy"], runs[1]["accuracy"])
    assert runs[0]["accuracy"][-1].min() == 1.0


def test_transformer_moves_like_the_tabular_policy():
    tree = C.parity(5, 2)
    out = C.compare_transformer(tree, steps=30, batch=32, lr=5.0, rng=np.random.default_rng(8))
    assert out["max_logit_gap"] < 1e-9
    assert out["ffn_matches_tree"]
    assert np.array_equal(out["greedy_model"], out["greedy_tabular"])


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        C.parity(4, 3, target=(0, 0, 1))
    with pytest.raises(ValueError):
        C.stage_setup(C.parity(4, 2), "depth", 3)
    with pytest.raises(ValueError):
        C.stage_setup(C.parity(4, 2), "sideways", 1)
    with pytest.raises(ValueError):
        C.curriculum_literal(C.parity(4, 2), "direct", 10, 2, np.random.default_rng(0))
    with pytest.raises(ValueError):
        C.sweep_n_star([4], [1], 0.5, "sideways", 10, [0], 1e3)


# -- third cumulant and the skew-aware test of a mean ---------------------------------------------
def calls_pmf(c, q, m, x_max=3000):
    """The law of a rejection sampler's oracle calls, by a renewal recursion over calls used
    (each candidate: right w.p. c and accepted after m calls; wrong: rejected at call j w.p.
    q^(j−1)(1−q), or accepted after passing all m calls w.p. q^m)."""
    start = np.zeros(x_max + m + 1)  # P(a new candidate starts after x calls)
    done = np.zeros(x_max + m + 1)  # P(accepted with x calls in all)
    start[0] = 1.0
    for x in range(x_max):
        if start[x] == 0:
            continue
        done[x + m] += start[x] * (c + (1 - c) * q**m)
        for j in range(1, m + 1):
            start[x + j] += start[x] * (1 - c) * q ** (j - 1) * (1 - q)
    return done


@pytest.mark.parametrize("c, q, m", [(0.3, 0.5, 3), (0.05, 0.5, 6), (0.2, 0.2, 2), (0.1, 0.0, 4)])
def test_rejection_cost_cumulants_brute_force(c, q, m):
    pmf = calls_pmf(c, q, m)
    assert abs(pmf.sum() - 1) < 1e-12
    x = np.arange(pmf.size)
    mean = pmf @ x
    var = pmf @ (x - mean) ** 2
    k3 = pmf @ (x - mean) ** 3
    cost = C.rejection_cost(c, q, m)
    assert np.isclose(cost["calls"], mean, rtol=1e-10)
    assert np.isclose(cost["calls_var"], var, rtol=1e-9)
    assert np.isclose(cost["calls_k3"], k3, rtol=1e-8)


def test_test_time_theory_records_third_cumulants():
    th = C.test_time_theory(C.parity(4, 3, blocked=True))
    b, lt = th["best_of_n"], th["ltar"]
    assert np.isclose(b["calls_k3"], C.rejection_cost(1 / 64, 0.5, b["m"])["calls_k3"])
    assert np.isclose(lt["clean_calls_k3"], 3 * C.rejection_cost(1 / 4, 0.5, lt["m"])["calls_k3"])


def test_mean_test_z_is_exact_for_a_gamma_mean_and_normal_without_skew():
    from scipy import stats

    # the mean of n exponentials is a gamma: its two-sided p-value, as a normal |z|
    n, mean = 400, 3.0
    for sample_mean in (2.5, 3.4, 3.9):
        law = stats.gamma(n, scale=mean / n)
        p = 2 * min(law.cdf(sample_mean), law.sf(sample_mean))
        z = C.mean_test_z(sample_mean, n, mean, mean**2, 2 * mean**3)
        assert np.isclose(z, stats.norm.isf(p / 2), rtol=1e-6)
    # no skew: the plain |z|; skew moves the upper tail out, so the same excess counts for less
    assert np.isclose(C.mean_test_z(10.5, 100, 10.0, 4.0, 0.0), 2.5)
    assert C.mean_test_z(10.5, 100, 10.0, 4.0, 16.0) < 2.5 < C.mean_test_z(9.5, 100, 10.0, 4.0, 16.0)


# -- sweep points: own streams, picklable, order-independent --------------------------------------
def test_sweep_n_star_points_are_independent_of_the_grid():
    import pickle
    from functools import partial

    full = C.sweep_n_star([4, 6], [1, 2], 0.5, "direct", 50, [0, 1], 1e5, seed=2)["n_star"]
    alone = C.n_star_point(2, 6, 1, 1, q=0.5, route="direct", repeats=50, n_max=1e5, root=2)
    assert full[1, 1, 0, 1] == alone["n_star"]
    small = C.sweep_n_star([6], [2], 0.5, "direct", 50, [1], 1e5, seed=2)["n_star"]
    assert small[0, 0, 0, 0] == alone["n_star"]
    stages = C.sweep_n_star([4], [1, 2], 0.5, "stages", 50, [0], 1e5, seed=2)["n_star"]
    assert stages.shape == (2, 1, 2, 1) and np.isnan(stages[0, 0, 1, 0]) and np.isfinite(stages[1]).all()
    fn = pickle.loads(pickle.dumps(partial(C.n_star_point, q=0.5, route="curriculum", repeats=50,
                                           n_max=1e5, root=2)))
    assert fn(k=2, d=4, stage=1, seed=0) == fn(k=2, d=4, stage=1, seed=0)


def test_point_functions_run_and_are_deterministic():
    tree = C.parity(4, 2, blocked=True)
    a = C.onestep_count(tree, 200, 30, 0, root=1)
    assert a == C.onestep_count(tree, 200, 30, 0, root=1) and 0 <= a["right"] <= 30
    assert C.onestep_count(tree, 200, 30, 0, root=1, sampler=True)["repeats"] == 30
    cell = C.sampler_cell("mod-5 chain, q = 1/5", "direct", 4, 2, 64, 0, repeats=20, root=1)
    assert set(cell) == {"literal_right", "literal_first", "fast_right", "fast_first", "z", "p"}
    for name in C.ORACLE_Q:
        tree_, kind = C.oracle_tree(name, 4, 2)
        assert (tree_.q if kind == "answer" else 0.0) == pytest.approx(C.ORACLE_Q[name])
    with pytest.raises(ValueError):
        C.oracle_tree("mod-7 chain", 4, 2)
    tt = C.best_of_n_vs_ltar(4, 0, k=2, delta=0.05, repeats=20, root=1)
    assert tt["b"]["calls"].shape == (20,) and tt["lt"]["clean"].dtype == bool


def test_training_points_stack_like_a_vectorised_run():
    tree = C.parity(5, 2)
    recs = [{"seed": s, "route": "depth", **C.train_point(10.0, "depth", s, tree=tree, budget=1024,
                                                          batch=64, n_test=128, ema=0.5, root=3)}
            for s in (1, 0)]
    run = C.stack_runs(recs)
    T = run["samples"].size
    assert run["accuracy"].shape == (T, 2) and run["hacked_theory"].shape == (T, 2)
    assert np.array_equal(run["accuracy"][:, 0], recs[1]["accuracy"])  # seeds in order


def test_two_proportion_p_is_fisher_and_symmetric():
    assert C.two_proportion_p(5, 100, 100, 2000) == pytest.approx(1.0)
    p = C.two_proportion_p(12, 400, 80, 8000)
    assert 0 < p < 0.01 and p == pytest.approx(C.two_proportion_p(80, 8000, 12, 400))
    assert C.two_proportion_p(400, 400, 8000, 8000) == 1.0


def test_training_records_the_exact_law_of_hacked_counts():
    # at a tiny step the policy stays near uniform: every window's cumulants are those of
    # Bin(rewarded, p0) with p0 the base's hacking share
    tree = C.parity(5, 2)
    run = C.train(tree, "direct", seeds=2, budget=640, batch=64, lr=1e-9, rng=np.random.default_rng(3),
                  n_test=64, evals=4)
    p0 = C.hacking_fraction(C.base_success(tree)["chain"], tree.q)
    assert np.allclose(run["hacked_mean"], run["rewarded"] * p0)
    assert np.allclose(run["hacked_var"], run["rewarded"] * p0 * (1 - p0))
    assert np.allclose(run["hacked_k3"], run["rewarded"] * p0 * (1 - p0) * (1 - 2 * p0))
    assert np.array_equal(run["hacked_count"] / np.maximum(run["rewarded"], 1), run["hacked"])
    assert run["rewarded"].sum() <= 640 * 2


def test_mean_test_z_continuity_on_a_lattice():
    # a count of 0 against a mean near 0 is the likeliest outcome, not an extreme one
    assert C.mean_test_z(0, 1, 1e-6, 1e-6, 1e-6, lattice=1) < 1
    # one event against a mean of 1e-8 is extreme, with or without the correction
    assert C.mean_test_z(1, 1, 1e-8, 1e-8, 1e-8, lattice=1) > 5
    # a degenerate law admits only its mean
    assert C.mean_test_z(3, 1, 3.0, 0.0, 0.0) == 0 and C.mean_test_z(2, 1, 3.0, 0.0, 0.0) == np.inf


def test_martingale_p_bounds_exact_binomial_tails():
    from scipy import stats

    for n in (5, 60, 400):
        for p in (0.01, 0.5, 0.98):
            for x in range(0, n + 1, max(1, n // 40)):
                exact = min(1.0, 2 * min(stats.binom.cdf(x, n, p), stats.binom.sf(x - 1, n, p)))
                assert exact <= C.martingale_p(x, n * p, n * p * (1 - p)) + 1e-12
    assert C.martingale_p(7, 7.0, 0.0) == 1.0
    assert C.martingale_p(0, 30.0, 20.0) < 1e-4  # a real gap is still caught


def test_slope_fit_recovers_slope_and_its_standard_error():
    rng = np.random.default_rng(5)
    x = np.array([4, 8, 16, 32])
    sigma = np.array([0.05, 0.1, 0.2, 0.1])
    fits = [C.slope_fit(x, np.exp(3 * np.log(x)[:, None] + 1 + sigma[:, None] * rng.standard_normal((4, 6))))
            for _ in range(3000)]
    slopes = np.array([f["slope"] for f in fits])
    u = np.log(x) - np.log(x).mean()
    exact_se = math.sqrt(((u / (u**2).sum()) ** 2 * sigma**2 / 6).sum())
    assert abs(slopes.mean() - 3) < 4 * exact_se / math.sqrt(3000)
    assert abs(slopes.std() / exact_se - 1) < 0.05  # brute force against the formula
    assert abs(np.mean([f["se"] ** 2 for f in fits]) / exact_se**2 - 1) < 0.05  # unbiased variance
    # censored points are left out; a noise-free column gives se 0
    y = np.exp(2 * np.log(x)[:, None] + np.zeros((4, 3)))
    y[-1, 0] = np.inf
    fit = C.slope_fit(x, y)
    assert fit["points"] == 3 and np.isclose(fit["slope"], 2) and fit["se"] == 0
    with pytest.raises(ValueError):
        C.slope_fit(x[:2], y[:2])


def test_slope_half_width_is_a_t_quantile():
    from scipy import stats

    fit = {"slope": 1.0, "se": 0.1, "df": 7.0}
    assert np.isclose(C.slope_half_width(fit, 0.01), stats.t.ppf(0.995, 7) * 0.1)


def test_fisher_one_sided_p_and_power_by_hand():
    assert np.isclose(C.fisher_greater_p(3, 3, 0, 3), 1 / 20)  # C(3,3)/C(6,3)
    assert np.isclose(C.fisher_greater_p(0, 3, 3, 3), 1.0)
    # all-or-nothing arms: the table (2/2, 0/2) has p = 1/6
    assert C.fisher_power(2, 1.0, 0.0, 0.2) == 1.0 and C.fisher_power(2, 1.0, 0.0, 0.1) == 0.0
    # brute force: power of the n = 3 test at level 0.06 (only 3/3 vs 0/3 rejects)
    p1, p2 = 0.7, 0.2
    assert np.isclose(C.fisher_power(3, p1, p2, 0.06), p1**3 * (1 - p2) ** 3)


def test_solve_time_freezes_at_huge_steps_and_is_deterministic():
    tree = C.parity(6, 2)
    runs = [C.solve_time(tree, "direct", budget=4096, batch=32, lr=1e8, rng=np.random.default_rng(s),
                         n_test=512) for s in range(6)]
    for r in runs:  # solved or frozen within a few batches, never both
        assert (r["frozen_at"] is not None) != np.isfinite(r["solved_at"]) or r["accuracy"] >= 0.99
        assert min(r["solved_at"], r["frozen_at"] or np.inf) <= 4 * 32
        if r["frozen_at"] is not None:
            assert r["accuracy"] < 0.99
    again = C.solve_time(tree, "direct", budget=4096, batch=32, lr=1e8, rng=np.random.default_rng(0),
                         n_test=512)
    assert again == runs[0]
    # a moderate step with a curriculum learns the small tree and is not frozen before it solves
    r = C.solve_time(tree, "hint", budget=8192, batch=64, lr=10.0, rng=np.random.default_rng(1), n_test=512)
    assert np.isfinite(r["solved_at"]) and r["frozen_at"] is None and r["accuracy"] >= 0.99
    assert C.solve_point(2, 6, "depth", 0, lr=1e5, budget=1024, batch=32, n_test=256) == \
        C.solve_point(2, 6, "depth", 0, lr=1e5, budget=1024, batch=32, n_test=256)


def test_test_accuracy_scores_a_tied_depth_as_no_choice():
    tree = C.parity(4, 2)
    x = tree.sample_inputs(np.random.default_rng(0), (256,))
    right = np.full((2, 4), -5.0)
    right[0, 0] = right[1, 1] = 5.0
    assert C.test_accuracy(tree, right, x) == 1.0
    untrained = right.copy()
    untrained[0] = 0.0  # depth 1 tied: its argmax would be index 0, the target's, by accident
    assert C.test_accuracy(tree, untrained, x) == 0.0


# -- the gradient's signal-to-noise criterion ------------------------------------------------------
@pytest.mark.parametrize("tree", [C.parity(3, 2, blocked=True), C.parity(4, 1, blocked=True),
                                  C.mod_chain(3, 2, p=5, a=2)])
def test_gradient_snr_theory_brute_force(tree):
    """Enumerate every path and input: the per-rollout REINFORCE gradient at uniform logits has
    tr Cov / ‖E g‖² equal to the closed form μ d^{2k}/(1−q)² − 1."""
    xs = np.array(list(product(range(tree.p), repeat=int(np.prod(tree.input_shape)))))
    xs = xs.reshape(-1, *tree.input_shape)
    paths = all_paths(tree)
    logits = np.zeros((tree.k, tree.d))
    mean, second = np.zeros((tree.k, tree.d)), 0.0
    for p in paths:
        r = tree.terminal_reward(xs, np.broadcast_to(p, (len(xs), tree.k))).astype(float)
        g = C.reinforce_gradient(logits, np.broadcast_to(p, (len(xs), 1, tree.k)), r[:, None])
        mean += g.mean(axis=0) / len(paths)
        second += (g**2).sum(axis=(1, 2)).mean() / len(paths)
    signal = (mean**2).sum()
    assert (second - signal) / signal == pytest.approx(C.gradient_snr_theory(tree.d, tree.k, tree.q), rel=1e-12)


def test_gradient_snr_theory_hand_case():
    # d = 2, one depth, q = 1/2: μ = 3/4, n_SNR = (3/4)·4/(1/4) − 1 = 11
    assert C.gradient_snr_theory(2, 1, 0.5) == pytest.approx(11.0)
    # no reward hacking: μ = d^-D, n_SNR = d^D − 1
    assert C.gradient_snr_theory(5, 2, 0.0) == pytest.approx(24.0)
    with pytest.raises(ValueError):
        C.gradient_snr_theory(4, 2, 1.0)


def test_gradient_snr_sample_matches_literal_gradients_and_theory():
    """The sampler's one-step gradients have the literal protocol's mean and noise (blocked parity,
    every rollout and input simulated), and its estimate is unbiased for the closed form."""
    rng = np.random.default_rng(5)
    tree, n, reps = C.parity(3, 2, blocked=True), 40, 4000
    paths = rng.integers(0, tree.d, size=(reps, n, tree.k))
    x = tree.sample_inputs(rng, (reps, n))
    r = tree.terminal_reward(x, paths).astype(float)
    G = C.reinforce_gradient(np.zeros((tree.k, tree.d)), paths, r).reshape(reps, -1)
    g_bar = G.mean(axis=0)
    T_lit = ((G - g_bar) ** 2).sum() / (reps - 1)
    fast = C.gradient_snr_sample(tree.d, tree.k, tree.q, n, reps, rng)
    th = C.gradient_snr_theory(tree.d, tree.k, tree.q)
    signal = 2 * (1 - tree.q) ** 2 * tree.d**-4 * (1 - 1 / tree.d)
    assert fast["noise"] == pytest.approx(T_lit, rel=0.05)
    assert fast["noise"] == pytest.approx(signal * th / n, rel=0.05)
    assert fast["signal"] == pytest.approx(signal, rel=0.15)
    est = [C.snr_point(3, 8, s, q=0.5, repeats=1000)["n_snr"] for s in range(8)]
    assert np.mean(est) == pytest.approx(C.gradient_snr_theory(8, 3, 0.5), rel=0.03)
    assert C.snr_point(3, 8, 0, q=0.5, repeats=1000) == C.snr_point(3, 8, 0, q=0.5, repeats=1000)
    with pytest.raises(ValueError):
        C.gradient_snr_sample(4, 1, 0.5, 10, 1, rng)


def test_fisher_detectable_is_the_power_threshold():
    level = 1e-3 / 6
    p1 = C.fisher_detectable(20, level)
    assert 0 < p1 < 1
    assert C.fisher_power(20, p1, 0.0, level) >= 0.8 > C.fisher_power(20, p1 - 2e-3, 0.0, level)
    assert C.fisher_detectable(40, level) < p1  # more runs, smaller detectable rate
    assert C.fisher_detectable(3, level) == math.inf  # 3/3 against 0/3 never reaches the level


def test_paper_cells_and_freezing_at_the_paper_step():
    assert set(C.PAPER_CELLS) == {(3, 8), (2, 16), (2, 32)}
    out = C.freeze_compare(2, 8, 0, lr=1e8, batch=64, root=0)
    assert out["frozen_tabular"] is not None and out["frozen_transformer"] == out["frozen_tabular"]
    assert out["rel_gap"] < 1e-9 and out["same_greedy"]
    slow = C.freeze_compare(2, 8, 0, lr=1.0, batch=64, max_batches=3, root=0)  # a moderate step does not freeze
    assert slow["frozen_tabular"] is None and slow["frozen_transformer"] is None


def test_solve_rate_ceiling_is_the_clopper_pearson_upper_bound():
    assert C.solve_rate_ceiling(20, 20) == 1.0
    # 0 of n: the bound solves (1 − p)^n = 1 − confidence
    assert C.solve_rate_ceiling(0, 20) == pytest.approx(1 - 0.05 ** (1 / 20), rel=1e-9)
    bounds = [C.solve_rate_ceiling(s, 20) for s in range(21)]
    assert all(a < b for a, b in zip(bounds, bounds[1:]))
    assert all(s / 20 < b for s, b in zip(range(20), bounds))
    assert C.solve_rate_ceiling(5, 20, 0.99) > C.solve_rate_ceiling(5, 20, 0.95)
    with pytest.raises(ValueError):
        C.solve_rate_ceiling(21, 20)


def test_batch_sweep_counts_runs_and_larger_batches_pass_a_wide_stage():
    rows = C.batch_sweep([(2, 32)], [16, 512], range(6), lr_direct=1e8, lr_curriculum=1e5,
                         budget_direct=4096, budget_curriculum=4096, n_test=1024, root=3)
    assert len(rows) == 2 * len(C.ROUTES)
    assert all(r["runs"] == 6 and 0 <= r["solved"] <= 6 for r in rows)
    solved = {(r["batch"], r["route"]): r["solved"] for r in rows}
    # one frozen batch of 16 rarely ranks the right child first among 32; a batch of 512 does
    assert solved[(512, "hint")] > solved[(16, "hint")]
    assert solved[(512, "depth")] > solved[(16, "depth")]


# -- the chapter's decision rules (lib.curriculum.decisions) ---------------------------------------
def _binom_pmf(j, n, p):
    return math.comb(n, j) * p**j * (1 - p) ** (n - j)


def test_chapter_levels_split_alpha_and_size_the_z_test():
    lv = C.chapter_levels(0.001, 40, 4)
    assert lv["gap_crit"] * 4 + lv["p_crit"] * 40 == pytest.approx(0.001, rel=1e-12)
    assert lv["gap_crit"] == pytest.approx(0.0005 / 4) and lv["p_crit"] == pytest.approx(0.0005 / 40)
    # two-sided: P(|Z| > z_crit) = p_crit
    assert math.erfc(lv["z_crit"] / math.sqrt(2)) == pytest.approx(lv["p_crit"], rel=1e-9)
    alone = C.chapter_levels(0.001, 40, 0)  # no paper cells: every test shares all of alpha
    assert alone["gap_crit"] == 0.0 and alone["p_crit"] == pytest.approx(0.001 / 40)


def test_proportion_z_by_hand():
    assert C.proportion_z(0.6, 0.5, 100) == pytest.approx(2.0)  # se = 0.05
    assert C.proportion_z(0.4, 0.5, 100) == pytest.approx(2.0)
    assert C.proportion_z(0.6, 0.5, 100, centre=1.0) == pytest.approx(8.0)  # 0.4 / 0.05


@pytest.mark.parametrize("k", [0, 2, 5, 9])
def test_binomial_p_values_are_the_tail_sums(k):
    n, p = 10, 0.3
    upper = sum(_binom_pmf(j, n, p) for j in range(k, n + 1))
    lower = sum(_binom_pmf(j, n, p) for j in range(0, k + 1))
    assert C.binomial_upper_p(k, n, p) == pytest.approx(upper, rel=1e-9)
    assert C.binomial_lower_p(k, n, p) == pytest.approx(lower, rel=1e-9)
    assert C.binomial_two_sided_p(k, n, p) == pytest.approx(min(1.0, 2 * min(upper, lower)), rel=1e-9)


def test_route_label_names_the_curricula():
    assert [C.route_label(r) for r in C.ROUTES] == ["direct", "depth curriculum", "hint curriculum"]


def _fit(slope, se, df=10.0):
    return {"slope": slope, "se": se, "df": df, "points": 5}


def test_slope_claim_holds_inside_the_band_and_judges_alternative_and_control():
    from scipy import stats

    from lib.claims import Claims
    claims = Claims("04-curriculum-post-training", profile="default")
    half = C.slope_claim(claims, "near", "a slope near 3", {3: _fit(3.01, 0.01)}, {3: 3.0},
                         {3: [2.0, 4.0]}, "the neighbours", control=("no hacking", {3: _fit(2.0, 0.01)}),
                         p_crit=0.05, level="5%")
    assert half[3] == pytest.approx(stats.t.ppf(0.975, 10) * 0.01)  # 0.0223
    c = claims.claims[-1]
    assert c.holds is True and c.simulation == 3.01 and c.theory == 3.0
    assert c.alternative["rejected"] is True and c.control["holds"] is False
    C.slope_claim(claims, "far", "a slope near 3", {3: _fit(3.1, 0.01)}, {3: 3.0}, kind="check",
                  p_crit=0.05, level="5%")
    assert claims.claims[-1].holds is False  # |0.1| > 0.0223
    # several depths: holds only if every depth lies in its band; lists of theory and slopes recorded
    C.slope_claim(claims, "two", "slopes", {2: _fit(3.0, 0.01), 3: _fit(5.5, 0.01)}, {2: 3.0, 3: 5.0},
                  kind="check", p_crit=0.05, level="5%")
    assert claims.claims[-1].holds is False and claims.claims[-1].theory == [3.0, 5.0]


def test_no_hacking_is_the_rejection_law_at_q_zero():
    law = C.no_hacking(2, 1, 3)  # c = 1/2: a right candidate pays 3 calls, a wrong one 1
    assert law["calls"] == pytest.approx((0.5 * 3 + 0.5 * 1) / 0.5)
    assert law["success"] == pytest.approx(1.0)
    assert C.no_hacking(3, 2, 5)["calls"] == pytest.approx((5 / 9 + 8 / 9) * 9)


def test_calls_z_is_small_at_the_exact_mean_and_large_away_from_it():
    law = C.rejection_cost(0.25, 0.5, 3)
    n = 400
    at_mean = np.full(n, law["calls"])
    assert C.calls_z(at_mean, law) < 0.5
    assert C.calls_z(at_mean * 2, law) > 5.0
    assert C.calls_z(at_mean, law) == C.mean_test_z(law["calls"], n, law["calls"], law["calls_var"],
                                                    law["calls_k3"], lattice=1)


def test_inference_checks_match_their_definitions_on_a_small_run():
    k, repeats = 2, 60
    per_width = [{"d": d, **C.best_of_n_vs_ltar(d, 0, k=k, delta=0.05, repeats=repeats, root=1)}
                 for d in (3, 4)]  # as the sweep returns them
    out = C.inference_checks(per_width, k, repeats)
    for i, w in enumerate(per_width):
        clean = w["lt"]["clean"]
        dirty, p = int((~clean).sum()), 1 - w["th"]["ltar"]["clean"]
        assert out["dirty_counts"][i] == dirty and out["dirty_expected"][i] == pytest.approx(repeats * p)
        upper = sum(_binom_pmf(j, repeats, p) for j in range(dirty, repeats + 1))
        lower = sum(_binom_pmf(j, repeats, p) for j in range(0, dirty + 1))
        assert out["ltar_ps"][i] == pytest.approx(min(1.0, 2 * min(upper, lower)), rel=1e-6)
        assert out["best_zs"][i] == C.calls_z(w["b"]["calls"], w["th"]["best_of_n"])
    wrongs = [(int((~w[key]["right"]).sum()), w["th"][th]["success"]) for w in per_width
              for key, th in (("b", "best_of_n"), ("lt", "ltar"))]
    assert out["conf_p"] == pytest.approx(min(sum(_binom_pmf(j, repeats, 1 - s) for j in range(n, repeats + 1))
                                              for n, s in wrongs), rel=1e-6)
    assert 0.0 < out["conf_p"] <= 1.0 and out["ltar_all_z"] >= 0.0


def test_medians_of_solve_times():
    import pandas as pd

    assert C.median_finite([1.0, np.inf, 3.0, np.nan]) == 2.0
    assert math.isnan(C.median_finite([np.inf]))
    run = {"samples": np.array([64, 128, 192]), "accuracy": np.array([[0.5, 0.5, 0.5], [1.0, 0.5, 1.0],
                                                                      [1.0, 0.5, 1.0]])}
    assert C.median_samples_to_solve(run) == 128  # two seeds at 128, one never
    runs = pd.DataFrame({"route": ["a", "a", "a", "b"], "solved": [True, True, False, False],
                         "solved_at": [100.0, 300.0, np.inf, np.inf]})
    assert C.solved_medians(runs, ["route"]).to_dict() == {"a": 200.0}
    assert C.median_solved_at(runs) == 200.0 and math.isnan(C.median_solved_at(runs[runs["route"] == "b"]))


def test_log_growth_rate_recovers_a_geometric_rate():
    ks = [1, 2, 3, 4]
    samples = np.array([[2.0 * 3.0**k, 2.0 * 3.0**k * 4.0] for k in ks])  # geometric mean 4·3^k per row
    assert C.log_growth_rate(ks, samples) == pytest.approx(math.log(3.0))
    # linear growth is slower than any fixed geometric rate over a longer range
    assert C.log_growth_rate(range(1, 9), np.arange(1.0, 9.0)[:, None]) < math.log(2.0)
