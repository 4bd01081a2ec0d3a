"""Tests of lib/ddro/: targets against sampling, the exact DDRO minimiser against a generic
solver, DPO's known Bradley–Terry limit, the delta-method constant against Monte Carlo, the
sequence policy."""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import optimize
from scipy.special import expit

from lib import ddro as D
from lib.seeding import torch_generator


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(1)
    K = 5
    pi = rng.dirichlet(2 * np.ones(K))
    return pi, D.structures(K, rng)


def test_structures_are_valid_and_cyclic_is_intransitive(setup):
    pi, prefs = setup
    for pref in prefs:
        np.testing.assert_allclose(pref.P + pref.P.T, 1.0)
    cyc = D.cyclic(np.zeros(3), strength=2.0).P
    assert cyc[0, 1] > 0.5 and cyc[1, 2] > 0.5 and cyc[2, 0] > 0.5
    with pytest.raises(ValueError):
        D.Preference("bad", np.array([[0.5, 0.9], [0.9, 0.5]]))


def test_targets_match_sampling(setup):
    pi, prefs = setup
    rng = np.random.default_rng(0)
    for pref in prefs:
        target = D.paired_target(pi, pref)
        assert target.sum() == pytest.approx(1.0)
        C = D.sample_pairs(pi, pref, 200_000, rng)
        np.testing.assert_allclose(C / C.sum(), D.expected_pairs(pi, pref), atol=4e-3)
        np.testing.assert_allclose(C.sum(1) / C.sum(), target, atol=4e-3)
        # the loser's law completes π_ref = ½ p₊ + ½ p₋
        np.testing.assert_allclose(D.expected_pairs(pi, pref).sum(0), 2 * pi - target, atol=1e-12)
    q = np.linspace(0.1, 0.9, len(pi))
    target, alpha = D.unpaired_target(pi, q)
    npos, nneg = D.sample_unpaired(pi, q, 200_000, rng)
    assert npos.sum() / 200_000 == pytest.approx(alpha, abs=4e-3)
    np.testing.assert_allclose(npos / npos.sum(), target, atol=4e-3)


def test_ddro_population_minimiser_is_p_plus(setup):
    pi, prefs = setup
    for pref in prefs:
        C = D.expected_pairs(pi, pref)
        np.testing.assert_allclose(D.fit_ddro_categorical(pi, C.sum(1), C.sum(0), 0.5, clip=0.0),
                                   D.paired_target(pi, pref), atol=1e-12)
    q = np.linspace(0.1, 0.9, len(pi))
    target, alpha = D.unpaired_target(pi, q)
    np.testing.assert_allclose(D.fit_ddro_categorical(pi, pi * q, pi * (1 - q), alpha, clip=0.0),
                               target, atol=1e-12)


def test_ddro_empirical_minimiser_matches_generic_solver(setup):
    pi, prefs = setup
    C = D.sample_pairs(pi, prefs[2], 60, np.random.default_rng(3))
    npos, nneg = C.sum(1), C.sum(0)
    ours = D.fit_ddro_categorical(pi, npos, nneg, 0.5, clip=0.0)
    g_ours = ours / pi
    cons = {"type": "eq", "fun": lambda g: pi @ g - 1.0}
    res = optimize.minimize(lambda g: D.ddro_loss(g, npos, nneg, 0.5),
                            np.ones_like(pi), constraints=[cons], method="SLSQP",
                            bounds=[(1e-9, 2 - 1e-9)] * len(pi), options={"ftol": 1e-14})
    assert D.ddro_loss(g_ours, npos, nneg, 0.5) <= res.fun + 1e-9
    np.testing.assert_allclose(g_ours, res.x, atol=1e-4)


def test_ddro_minimiser_with_a_negative_multiplier():
    """Few preferred counts put Σπg below 1 at λ = 0, so the multiplier is negative and outputs
    never preferred (N₊ = 0) still get g > 0: the case where the closed form reads 0/0."""
    pi = np.array([0.05, 0.45, 0.5])
    npos, nneg = np.array([1.0, 0.0, 0.0]), np.array([10.0, 1.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g_ours = D.fit_ddro_categorical(pi, npos, nneg, 0.5, clip=0.0) / pi
    cons = {"type": "eq", "fun": lambda g: pi @ g - 1.0}
    res = optimize.minimize(lambda g: D.ddro_loss(g, npos, nneg, 0.5), np.ones_like(pi),
                            constraints=[cons], method="SLSQP", bounds=[(1e-9, 2 - 1e-9)] * 3,
                            options={"ftol": 1e-14})
    assert pi @ g_ours == pytest.approx(1.0)
    np.testing.assert_allclose(g_ours, res.x, atol=1e-6)


def test_ddro_clip_bounds_the_ratio():
    pi = np.array([0.05, 0.45, 0.5])
    npos, nneg = np.array([30.0, 1.0, 1.0]), np.array([0.0, 20.0, 20.0])
    pol = D.fit_ddro_categorical(pi, npos, nneg, 0.5, clip=0.1)
    assert pol.sum() == pytest.approx(1.0)
    assert (pol / pi).max() <= 0.9 / 0.5 + 1e-9


def test_dpo_limit_under_bradley_terry_is_the_kl_regularised_policy(setup):
    pi, _ = setup
    s = np.array([0.3, -1.0, 0.5, 1.2, 0.0])
    for beta in (0.5, 1.0, 2.0):
        pol = D.fit_dpo_categorical(pi, D.expected_pairs(pi, D.bradley_terry(s)), beta)
        want = pi * np.exp(s / beta)
        np.testing.assert_allclose(pol, want / want.sum(), atol=1e-7)


def test_bt_misfit_zero_only_under_bradley_terry_and_win_rates_always_match(setup):
    pi, prefs = setup
    for pref in prefs:
        for beta in (0.5, 1.0):
            pol = D.fit_dpo_categorical(pi, D.expected_pairs(pi, pref), beta)
            m = D.bt_misfit(pi, pref, pol, beta)
            assert m["max_win_rate"] < 1e-7                     # stationarity of the logistic fit
            if pref.name == "Bradley–Terry":
                assert m["max_pair"] < 1e-7
    cyc = next(p for p in prefs if p.name.startswith("intransitive"))
    pol = D.fit_dpo_categorical(pi, D.expected_pairs(pi, cyc), 1.0)
    assert D.bt_misfit(pi, cyc, pol)["max_pair"] > 0.2          # no BT model fits a cycle
    # a policy that is not DPO's limit misses the win rates
    assert D.bt_misfit(pi, cyc, pi)["max_win_rate"] > 1e-3


def test_empirical_winners_constant_matches_monte_carlo(setup):
    pi, prefs = setup
    target = D.paired_target(pi, prefs[2])
    N = 4000
    rng = np.random.default_rng(5)
    tvs = [D.tv(rng.multinomial(N, target) / N, target) for _ in range(2000)]
    assert np.mean(tvs) * np.sqrt(N) == pytest.approx(D.empirical_winners_tv_constant(target),
                                                      rel=0.05)


def test_kto_fit_is_stationary(setup):
    pi, prefs = setup
    q = prefs[1].P @ pi
    pol = D.fit_kto_categorical(pi, pi * q, pi * (1 - q), beta=1.0)
    h = np.log(pol / pi)
    # KKT: ∂L/∂h_y = λ π_θ(y) for one λ (the constraint Σ π_ref e^h = 1)
    d1 = -pi * q * expit(-h) + pi * (1 - q) * expit(h)
    ratio = d1 / pol
    np.testing.assert_allclose(ratio, ratio.mean(), atol=1e-8)


def test_delta_method_constant_matches_monte_carlo(setup):
    pi, prefs = setup
    pref = prefs[3]
    N, target = 5000, D.paired_target(pi, pref)
    tvs = [D.tv(D.fit_ddro_categorical(pi, *(lambda C: (C.sum(1), C.sum(0)))(
        D.sample_pairs(pi, pref, N, np.random.default_rng([s, 9]))), 0.5), target)
        for s in range(300)]
    assert np.mean(tvs) * np.sqrt(N) == pytest.approx(D.ddro_tv_constant(pi, pref), rel=0.08)


def test_study_and_slope(setup):
    pi, prefs = setup
    df = D.categorical_study(pi, prefs[:1], [50, 100], range(2), root=0)
    assert len(df) == 4 and set(df.columns) >= {"ddro", "dpo", "ddro_unpaired", "kto"}
    again = D.categorical_study(pi, prefs[:1], [50, 100], range(2), root=0)
    assert df.equals(again)
    other = D.categorical_study(pi, prefs[:1], [50, 100], range(2), root=1)
    assert not df.equals(other)                     # another chapter seed, other draws
    assert D.loglog_slope([10, 100, 1000], [1.0, 0.1, 0.01]) == pytest.approx(-1.0)
    assert D.tv([1, 0], [0, 1]) == 1.0


def neural_loss(kind, logp, logp_ref, C, alpha=0.5, beta=1.0, clip=1e-3):
    """The chapter's losses for one policy, written out on their own (the oracle for
    :func:`lib.ddro.batched_loss`)."""
    import math

    import torch
    h = logp - logp_ref
    N = C.sum()
    if kind == "ddro":
        logg = torch.clamp(h, max=math.log((1 - clip) / alpha))
        pos, neg = C.sum(1), C.sum(0)
        won = torch.where(pos > 0, pos * logg, torch.zeros_like(logg))       # 0·log 0 = 0
        return -won.sum() / N - (neg * torch.log1p(-alpha * torch.exp(logg))).sum() / N
    if kind == "dpo":
        d = beta * (h[:, None] - h[None, :])
        return -(C * torch.nn.functional.logsigmoid(d)).sum() / N
    raise ValueError(f"kind must be 'ddro' or 'dpo', got {kind!r}")


def test_sequence_policy_and_losses():
    torch = pytest.importorskip("torch")
    seqs = D.all_sequences(3, 3)
    assert seqs.shape == (27, 3)
    ref = D.GRUPolicy(3, seqs, hidden=8, generator=torch_generator(0, "test-gru"))
    lp = ref.log_probs().detach()
    assert float(torch.logsumexp(lp, 0)) == pytest.approx(0.0, abs=1e-5)
    pref = D.sequence_preference(seqs, 3, root=0)
    pi = torch.exp(lp).detach().double().numpy()
    pi /= pi.sum()
    C = D.expected_pairs(pi, pref, 1000.0)
    lp_ref = lp.detach()
    Ct = torch.as_tensor(C, dtype=lp.dtype)
    start = float(neural_loss("ddro", lp_ref, lp_ref, Ct))
    # the population DDRO loss is lowest at p₊ among these policies
    target = torch.as_tensor(np.log(D.paired_target(pi, pref)), dtype=lp.dtype)
    assert float(neural_loss("ddro", target, lp_ref, Ct)) < start
    with pytest.raises(ValueError):
        D.batched_loss("ipo", lp_ref[None], lp_ref, Ct[None])


def test_study_cells_do_not_depend_on_order(setup):
    pi, prefs = setup
    df = D.categorical_study(pi, prefs[:2], [50, 100], [0, 1, 2], root=0, progress=False)
    back = D.categorical_study(pi, prefs[:2], [100, 50], [2, 1, 0], root=0, progress=False)
    key = ["structure", "N", "seed"]
    pd.testing.assert_frame_equal(df.sort_values(key).reset_index(drop=True),
                                   back.sort_values(key).reset_index(drop=True))
    one = D.categorical_point(1, 100, 2, root=0, pi=pi, prefs=prefs[:2])
    row = df[(df.structure == prefs[1].name) & (df.N == 100) & (df.seed == 2)].iloc[0]
    assert one == {k: row[k] for k in one}


def _double_policy(vocab, length, hidden, key):
    seqs = D.all_sequences(vocab, length)
    ref = D.GRUPolicy(vocab, seqs, hidden=hidden, generator=torch_generator(0, key))
    for module in (ref.embed, ref.gru, ref.head):
        module.double()
    return ref


def test_tree_log_probs_is_the_gru_policy():
    torch = pytest.importorskip("torch")
    a, b = _double_policy(3, 4, 6, "tree-a"), _double_policy(3, 4, 6, "tree-b")
    w = {k: torch.cat([D.gru_weights(a)[k], D.gru_weights(b)[k]]) for k in D.gru_weights(a)}
    got = D.tree_log_probs(w, 3, 4)
    with torch.no_grad():
        want = torch.stack([a.log_probs(), b.log_probs()])
    assert got.shape == (2, 81)
    assert float((got - want).abs().max()) < 1e-12
    assert float(torch.logsumexp(got, 1).abs().max()) < 1e-12


def test_batched_loss_is_the_loss_of_each_member():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    S = 9
    lp_ref = torch.log_softmax(torch.as_tensor(rng.normal(size=S)), 0)
    logp = torch.log_softmax(torch.as_tensor(rng.normal(size=(3, S))), 1)
    C = torch.as_tensor(rng.integers(0, 5, size=(3, S, S)).astype(float))
    for kind in ("ddro", "dpo"):
        got = D.batched_loss(kind, logp, lp_ref, C)
        want = torch.stack([neural_loss(kind, logp[m], lp_ref, C[m]) for m in range(3)])
        assert float((got - want).abs().max()) < 1e-13
    with pytest.raises(ValueError):
        D.batched_loss("ipo", logp, lp_ref, C)


def _small_study(N_list, kind, rho=1e-3, max_steps=4000):
    setup = D.sequence_setup(2, 3, 4, 0)
    counts = [D.sample_pairs(setup.pi, setup.pref, N, np.random.default_rng(N)) for N in N_list]
    return setup, counts, D.train_population(kind, setup.ref, setup.pi, counts, 2, 3, rho=rho,
                                             max_steps=max_steps)


def test_dpo_step_is_newtons_step():
    """Against torch's Hessian and gradient of :func:`batched_loss` in h, on a random policy."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    S = 6
    lp_ref = torch.log_softmax(torch.as_tensor(rng.normal(size=S)), 0)
    logp = torch.log_softmax(torch.as_tensor(rng.normal(size=S)), 0)
    C = torch.as_tensor(rng.integers(0, 9, size=(S, S)).astype(float))
    h = (logp - lp_ref)[None]
    p = torch.exp(logp)[None]
    got = D.dpo_step(h, p, C[None], torch.tensor([100.0], dtype=torch.float64), beta=0.7)[0]
    f = lambda x: D.batched_loss("dpo", (x + lp_ref)[None], lp_ref, C[None], beta=0.7)[0]  # noqa: E731
    H = torch.autograd.functional.hessian(f, h[0])
    g = torch.autograd.functional.jacobian(f, h[0])
    # Newton's step is determined up to a constant (the loss is blind to it): compare H Δ with −∇
    np.testing.assert_allclose((H @ got).numpy(), -g.numpy(), atol=1e-10)
    assert abs(float(p[0] @ got)) < 1e-12
    small = D.dpo_step(h, p, C[None], torch.tensor([1e-3], dtype=torch.float64), beta=0.7)[0]
    assert float(small.abs().max()) == pytest.approx(1e-3)
    np.testing.assert_allclose(small.numpy(), got.numpy() * 1e-3 / float(got.abs().max()), atol=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ddro", "dpo"])
def test_member_alone_and_in_a_batch_agree_and_converge(kind):
    pytest.importorskip("torch")
    setup, counts, batch = _small_study([300, 3000, 30000], kind)
    assert batch.converged.all() and (batch.excess <= batch.tolerance).all()
    for m, N in enumerate([300, 3000, 30000]):
        _, _, alone = _small_study([N], kind)
        assert alone.steps[0] == batch.steps[m]
        np.testing.assert_allclose(alone.policies[0], batch.policies[m], rtol=0, atol=1e-10)
    # converged to the categorical optimum of the same loss (the GRU can represent it here)
    for m in range(3):
        assert D.tv(batch.policies[m], batch.optimum[m]) < 0.2 * D.tv(batch.optimum[m], setup.target) + 1e-3


@pytest.mark.slow
def test_an_output_that_only_lost_does_not_stop_convergence():
    torch = pytest.importorskip("torch")
    setup = D.sequence_setup(2, 3, 4, 0)
    C = D.sample_pairs(setup.pi, setup.pref, 2000, np.random.default_rng(5))
    C[3, :] = 0.0                                   # output 3 never wins, but it loses
    assert C[:, 3].sum() > 0
    optimum = D.categorical_optimum("ddro", setup.pi, C)
    assert optimum[3] == 0.0
    lp_ref = torch.log(torch.as_tensor(setup.pi))
    assert torch.isfinite(D.batched_loss("ddro", torch.log(torch.as_tensor(optimum))[None], lp_ref,
                                         torch.as_tensor(C)[None])).all()
    for kind in ("ddro", "dpo"):
        fits = D.train_population(kind, setup.ref, setup.pi, [C], 2, 3, max_steps=4000)
        assert fits.converged.all() and np.isfinite(fits.excess).all()


def test_neural_batch_is_deterministic_and_shares_pairs_between_losses():
    pytest.importorskip("torch")
    kw = dict(replicates=2, vocab=2, length=3, hidden=4, root=0, max_steps=3000)
    a = D.neural_batch(2000, "ddro", 0, **kw)
    assert a == D.neural_batch(2000, "ddro", 0, **kw)
    assert a["tv"][0] != a["tv"][1]                 # replicates draw their own pairs
    dpo = D.neural_batch(2000, "dpo", 0, **kw)
    setup = D.sequence_setup(2, 3, 4, 0)
    assert setup.pi.sum() == pytest.approx(1.0) and setup.target.shape == (8,)
    assert all(a["converged"]) and all(dpo["converged"])
    # the same pairs: both optima are the categorical fits of one pair table
    from lib.seeding import stream
    C = D.sample_pairs(setup.pi, setup.pref, 2000, stream(0, "gru-pairs", 2000, 0, 1))
    assert a["optimum_tv"][1] == pytest.approx(D.tv(D.fit_ddro_categorical(setup.pi, C.sum(1), C.sum(0), 0.5),
                                                    setup.target), abs=1e-12)
    assert dpo["optimum_tv"][1] == pytest.approx(D.tv(D.fit_dpo_categorical(setup.pi, C), setup.target), abs=1e-12)
    assert max(a["tv"]) < D.tv(setup.pi, setup.target)  # fine-tuning moved toward p₊


# -- the Bradley–Terry plug-in estimator of p₊ -------------------------------------------------


def test_bt_plugin_target_is_a_distribution_and_exact_under_bradley_terry(setup):
    pi, _ = setup
    rng = np.random.default_rng(3)
    for _ in range(5):
        assert D.bt_plugin_target(pi, rng.normal(0, 3, len(pi))).sum() == pytest.approx(1.0, abs=1e-12)
    s = np.array([0.3, -1.0, 0.5, 1.2, 0.0])
    bt = D.bradley_terry(s)
    # the BT fit of BT preferences recovers the utilities (up to the additive gauge) and the truth
    s_hat = D.bt_projection(pi, bt)
    np.testing.assert_allclose(s_hat - s_hat.mean(), s - s.mean(), atol=1e-7)
    np.testing.assert_allclose(D.bt_plugin_target(pi, s), D.paired_target(pi, bt), atol=1e-14)
    np.testing.assert_allclose(D.bt_plugin_limit(pi, bt), D.paired_target(pi, bt), atol=1e-10)


def test_bt_projection_matches_a_generic_solver_on_a_cycle():
    """Brute force: the weighted KL projection of an intransitive P on 3 outputs onto the BT
    family, by a generic optimiser of the expected log-likelihood (gauge s_0 = 0)."""
    pi = np.array([0.5, 0.3, 0.2])
    pref = D.cyclic(np.array([0.4, -0.2, 0.1]), strength=2.0)
    W = D.expected_pairs(pi, pref)

    def negll(free):
        s = np.concatenate([[0.0], free])
        return -(W * np.log(expit(s[:, None] - s[None, :]))).sum()

    res = optimize.minimize(negll, np.zeros(2), method="Nelder-Mead",
                            options={"xatol": 1e-12, "fatol": 1e-15, "maxiter": 20000})
    s_hat = D.bt_projection(pi, pref)
    np.testing.assert_allclose(s_hat[1:] - s_hat[0], res.x, atol=1e-6)
    # the projection misses the pairwise preferences (no BT model fits a cycle) ...
    assert np.abs(expit(s_hat[:, None] - s_hat[None, :]) - pref.P).max() > 0.2
    # ... yet matches every win rate, so the plug-in's limit is p₊ itself
    np.testing.assert_allclose(expit(s_hat[:, None] - s_hat[None, :]) @ pi, pref.P @ pi, atol=1e-10)
    np.testing.assert_allclose(D.bt_plugin_limit(pi, pref), D.paired_target(pi, pref), atol=1e-10)
    # a BT model with other scores (e.g. the projection under uniform pair weights) does not
    s_unif = D.bt_scores(pref.P)
    assert D.tv(D.bt_plugin_target(pi, s_unif), D.paired_target(pi, pref)) > 1e-3


def test_bt_plugin_limit_is_p_plus_under_every_structure(setup):
    pi, prefs = setup
    for pref in prefs:
        np.testing.assert_allclose(D.bt_plugin_limit(pi, pref), D.paired_target(pi, pref), atol=1e-10)


def test_bt_plugin_constant_matches_monte_carlo(setup):
    pi, prefs = setup
    pref = prefs[2]                                   # intransitive
    N, target = 5000, D.paired_target(pi, pref)
    tvs = [D.tv(D.fit_bt_plugin(pi, D.sample_pairs(pi, pref, N, np.random.default_rng([s, 11]))), target)
           for s in range(300)]
    assert np.mean(tvs) * np.sqrt(N) == pytest.approx(D.bt_plugin_tv_constant(pi, pref), rel=0.08)


def test_study_bt_column_is_the_plugin_on_the_same_pairs(setup):
    pi, prefs = setup
    from lib.seeding import stream

    row = D.categorical_point(2, 300, 1, root=0, pi=pi, prefs=prefs)
    C = D.sample_pairs(pi, prefs[2], 300, stream(0, "categorical-pairs", prefs[2].name, 300, 1))
    assert row["bt"] == pytest.approx(D.tv(D.fit_bt_plugin(pi, C), D.paired_target(pi, prefs[2])), abs=1e-8)
    assert row["dpo"] == pytest.approx(D.tv(D.fit_dpo_categorical(pi, C), D.paired_target(pi, prefs[2])),
                                       abs=1e-12)


# ----------------------------------------------------------------------------------------------
# The DDRO optimiser: the output-space step and the clip as a constraint, checked by brute force
# ----------------------------------------------------------------------------------------------


def _smooth_loss(h, pos, neg, alpha=0.5):
    """Σ_y ℓ_y(h_y) of one policy with the smooth pieces (valid at h ≤ c), numpy; ``h`` of shape
    (..., outputs) gives one loss per leading index."""
    N = pos.sum() + neg.sum()
    g = np.exp(h)
    loss = -(np.where(pos > 0, pos * h, 0.0) + neg * np.log1p(-alpha * g)).sum(-1) / N
    return float(loss) if np.ndim(loss) == 0 else loss


@pytest.mark.parametrize("never_loses", [True, False])
def test_ddro_step_is_the_constrained_minimiser_by_brute_force(never_loses):
    """Two outputs: Σ p Δ = 0 leaves one free coordinate, so the step's subproblem is minimised
    on a fine grid of the box and compared with :func:`ddro_step`."""
    torch = pytest.importorskip("torch")
    clip, alpha = 1e-3, 0.5
    c = np.log((1 - clip) / alpha)
    pi_ref = np.array([0.4, 0.6])
    p = np.array([0.5, 0.5])                          # the current policy
    h = np.log(p / pi_ref)
    C = np.array([[0.0, 40.0], [0.0 if never_loses else 3.0, 0.0]])   # C[a, b] = #a beat b
    pos, neg = C.sum(1), C.sum(0)
    for r in (0.05, 0.5):
        got = D.ddro_step(torch.as_tensor(h)[None], torch.as_tensor(p)[None], torch.as_tensor(C)[None],
                          torch.tensor([r], dtype=torch.float64))[0].numpy()
        lo = np.minimum(-r, c - h)
        hi = np.minimum(r, c - h)
        d0 = np.linspace(lo[0], hi[0], 200001)
        d1 = -p[0] * d0 / p[1]
        ok = (d1 >= lo[1] - 1e-15) & (d1 <= hi[1] + 1e-15)
        vals = _smooth_loss(h + np.stack([d0[ok], d1[ok]], -1), pos, neg)
        best = np.array([d0[ok][vals.argmin()], d1[ok][vals.argmin()]])
        assert abs(p @ got) < 1e-12
        assert (got >= lo - 1e-12).all() and (got <= hi + 1e-12).all()
        np.testing.assert_allclose(got, best, atol=2 * (hi[0] - lo[0]) / 200000 + 1e-12)
        assert _smooth_loss(h + got, pos, neg) <= vals.min() + 1e-12


def _categorical_fit(pi, counts, steps=200):
    torch = pytest.importorskip("torch")
    Ct = torch.as_tensor(np.stack(counts))
    lp_ref = torch.log(torch.as_tensor(pi))
    optimum = np.stack([D.categorical_optimum("ddro", pi, C) for C in counts])
    best = D.batched_loss("ddro", torch.log(torch.as_tensor(optimum)), lp_ref, Ct)
    tol = torch.full((len(counts),), 1e-13, dtype=torch.float64)
    params = {"theta": lp_ref.expand(len(counts), -1).clone()}
    logp, n, excess = D.fit_population("ddro", lambda w: torch.log_softmax(w["theta"], -1), params, lp_ref, Ct,
                                       best, tol, max_steps=steps)
    return np.exp(logp.numpy()), n, excess, optimum


def test_ddro_optimiser_reaches_an_optimum_at_the_clip():
    """A categorical policy (log π = log-softmax θ): output 0 never loses, so the minimiser of
    the loss over the policies with g ≤ (1 − clip)/α (the chapter's estimator) puts it at the clip,
    g₀ = (1 − clip)/α, a kink of the loss. With two outputs the policy has one free parameter and
    the minimiser is found by brute force on a grid; with six it is the exact categorical
    minimiser."""
    pytest.importorskip("torch")
    clip, alpha = 1e-3, 0.5
    pi2 = np.array([0.3, 0.7])
    C2 = np.array([[0.0, 30.0], [0.0, 0.0]])       # 0 beats 1 thirty times, never loses
    C2[1, 0] = 0.0
    grid = np.linspace(1e-6, 1 - 1e-6, 2_000_001)
    g0, g1 = grid / pi2[0], (1 - grid) / pi2[1]
    feasible = (g0 <= (1 - clip) / alpha) & (g1 <= (1 - clip) / alpha)
    grid, g0, g1 = grid[feasible], g0[feasible], g1[feasible]
    vals = -(30 * np.log(g0) + 30 * np.log1p(-alpha * g1)) / 30
    brute = grid[vals.argmin()]
    assert brute == pytest.approx(pi2[0] * (1 - clip) / alpha, abs=1e-6)   # the optimum is at the clip
    pol, n, excess, optimum = _categorical_fit(pi2, [C2])
    assert n[0] < 200 and excess[0] <= 1e-13
    assert pol[0, 0] == pytest.approx(pi2[0] * (1 - clip) / alpha, abs=1e-9)
    assert pol[0, 0] == pytest.approx(brute, abs=1e-6)

    rng = np.random.default_rng(0)
    K = 6
    pi = rng.dirichlet(3 * np.ones(K))
    C = rng.integers(0, 20, size=(K, K)).astype(float)
    np.fill_diagonal(C, 0)
    C[:, 0] = 0.0                                   # output 0 never loses: its optimum is at the clip
    C[0, 1:] *= 5
    C[1, :], C[:, 1] = 0.0, 0.0
    C[1, 2], C[3, 1] = 200.0, 1.0                   # output 1 loses once: its optimum is just below
    pol, n, excess, optimum = _categorical_fit(pi, [C])
    g = optimum[0] / pi
    assert g[0] == pytest.approx((1 - clip) / alpha, rel=1e-12)
    assert 0 < (1 - clip) / alpha - g[1] < 0.02
    assert n[0] < 200 and excess[0] <= 1e-13
    np.testing.assert_allclose(pol[0], optimum[0], atol=1e-7)


# ----------------------------------------------------------------------------------------------
# The rate claims' statistics (lib.ddro.analysis)
# ----------------------------------------------------------------------------------------------


def test_slope_fit_uses_the_pair_counts_from_fit_from_and_sizes_its_band():
    from scipy import stats

    Ns = [100, 1000, 10000, 100000]
    rng = np.random.default_rng(0)
    exact = np.array([[1 / np.sqrt(N)] * 5 for N in Ns])
    bent = exact.copy()
    bent[0] *= 3.0                                      # a finite-N excess at the smallest N only
    fit = D.slope_fit(Ns, bent, rng, 1e-3, fit_from=1000)
    assert fit["Ns"] == [1000, 10000, 100000] and fit["slope"] == pytest.approx(-0.5)
    assert D.slope_fit(Ns, bent, rng, 1e-3)["slope"] < -0.6      # the excess steepens a fit from N = 100
    noisy = exact * np.exp(rng.normal(scale=0.2, size=exact.shape))
    fit = D.slope_fit(Ns, noisy, rng, 1e-3)
    assert fit["se"] > 0 and fit["z"] == pytest.approx(stats.norm.isf(5e-4))
    assert fit["low"] == pytest.approx(-0.5 - fit["z"] * fit["se"])
    assert fit["high"] - fit["low"] == pytest.approx(2 * fit["half"])
    with pytest.raises(ValueError, match="two pair counts"):
        D.slope_fit(Ns, bent, rng, 1e-3, fit_from=50000)


def test_floor_slope_and_bounds():
    Ns = [1000, 10000, 100000]
    assert D.floor_slope(1.0, Ns, 1e5, share=1e-9) == pytest.approx(-0.5, abs=1e-6)
    shallow = D.floor_slope(1.0, Ns, 1e5, share=0.5)
    assert -0.5 < shallow < -0.3                        # a floor flattens the fitted slope
    assert D.floor_slope(2.0, Ns, 1e5, share=0.5) == pytest.approx(shallow)   # C cancels
    v = np.array([1.0, 2.0, 3.0, 4.0])
    r = D.rate_tolerance(v, 1e-3)
    assert r["mean"] == 2.5 and r["tol"] == pytest.approx(r["q"] * v.std(ddof=1) / 2)
    assert D.upper_bound(v, 1e-3) > 2.5 + r["se"] * 5
    with pytest.raises(ValueError):
        D.rate_tolerance([1.0], 1e-3)


def test_misspecified_ddro_column_is_ddro_with_the_wrong_share(setup):
    pi, prefs = setup
    from lib.seeding import stream

    row = D.categorical_point(1, 3000, 0, root=0, pi=pi, prefs=prefs)
    C = D.sample_pairs(pi, prefs[1], 3000, stream(0, "categorical-pairs", prefs[1].name, 3000, 0))
    target = D.paired_target(pi, prefs[1])
    want = D.tv(D.fit_ddro_categorical(pi, C.sum(1), C.sum(0), D.MISSPECIFIED_ALPHA, 1e-3), target)
    assert row["ddro_misspecified"] == pytest.approx(want, abs=1e-12)
    # its limit is not p₊: on expected counts the misspecified fit stays away from the target
    E = D.expected_pairs(pi, prefs[1], 1e6)
    assert D.tv(D.fit_ddro_categorical(pi, E.sum(1), E.sum(0), D.MISSPECIFIED_ALPHA, 1e-3), target) > 0.01


def test_margin_test_against_a_stated_margin():
    rng = np.random.default_rng(3)
    far = np.log(3.0) + rng.normal(scale=0.05, size=40)          # three times the error: far above log 1.25
    near = 0.01 + rng.normal(scale=0.05, size=40)                # a hair worse: not above the margin
    r = D.margin_test(far, np.log(1.25), 5e-5)
    assert r["holds"] and r["lower"] > np.log(1.25) and r["detectable"] > np.log(1.25)
    assert not D.margin_test(near, np.log(1.25), 5e-5)["holds"]
    # the detectable mean shrinks like 1/√n
    small = D.margin_test(near[:10], 0.0, 5e-5)["detectable"]
    assert D.margin_test(near, 0.0, 5e-5)["detectable"] < small


def test_adam_arm_uses_the_same_pairs_and_records_the_stopping_rule():
    out = D.neural_adam_batch(300, 0, replicates=2, vocab=2, length=3, hidden=4, root=0, steps=30, lr=1e-2)
    assert len(out["tv"]) == 2 and all(0 <= v <= 1 for v in out["tv"])
    assert all(m == -1 or 0 <= m <= 30 for m in out["met"])
    assert all(lo <= ex + 1e-12 for lo, ex in zip(out["min_excess"], out["excess"]))
    again = D.neural_adam_batch(300, 0, replicates=2, vocab=2, length=3, hidden=4, root=0, steps=30, lr=1e-2)
    assert again == out                                           # nothing random beyond the pairs
    tr = D.neural_batch(300, "ddro", 0, replicates=2, vocab=2, length=3, hidden=4, root=0)
    assert tr["tolerance"] == pytest.approx(out["tolerance"])   # the same pairs: the same N and rule


def test_t_quantile_against_closed_forms():
    # df = 1 is the Cauchy law: P(T > 1) = 1/4; df = 2: t = (2u − 1)/√(2u(1 − u)) at cdf u
    assert D.t_quantile(0.25, 1) == pytest.approx(1.0, abs=1e-12)
    assert D.t_quantile(0.05, 2) == pytest.approx(0.9 / np.sqrt(2 * 0.95 * 0.05), rel=1e-12)
    assert D.t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-12)
    assert D.t_quantile(1e-3, 9) > D.t_quantile(1e-2, 9) > 0
    for fa, df in ((0.0, 3), (1.0, 3), (0.1, 0)):
        with pytest.raises(ValueError):
            D.t_quantile(fa, df)
    np.testing.assert_allclose(D.predicted_tv(2.0, [4, 100]), [1.0, 0.2])


def _toy_study(Ns=(10, 100, 1000), scale=(0.9, 1.0, 1.1)):
    rows = []
    for name, c in (("A", 1.0), ("B", 3.0)):
        for N in Ns:
            for r, s in enumerate(scale):
                rows.append({"structure": name, "N": N, "replicate": r, "ddro": c * s / np.sqrt(N),
                             "bt": 2 * c * s / np.sqrt(N), "dpo": 0.1 + 0 * s, "kto": 0.2 + 0.01 * r})
    return pd.DataFrame(rows)


def test_rate_study_samples_slopes_spread_and_fits_by_hand():
    prefs = [D.Preference("A", np.full((2, 2), 0.5)), D.Preference("B", np.full((2, 2), 0.5))]
    study = _toy_study()
    out = D.rate_study(study, prefs, [10, 100, 1000], ["ddro", "dpo", "bt"], np.random.default_rng(0), 1e-3,
                       fit_from=100)
    s = out["samples"][("B", "ddro")]
    np.testing.assert_allclose(s, 3.0 * np.array([0.9, 1.0, 1.1])[None, :] / np.sqrt([[10], [100], [1000]]))
    assert out["slopes"][("A", "ddro")] == pytest.approx(-0.5) and out["slopes"][("B", "bt")] == pytest.approx(-0.5)
    assert out["slopes"][("A", "dpo")] == pytest.approx(0.0, abs=1e-12)
    # percentiles of (0.9, 1, 1.1)·x by linear interpolation: 0.92x and 1.08x
    lo, hi = out["bands"][("A", "ddro")]
    np.testing.assert_allclose(lo * np.sqrt([10, 100, 1000]), 0.92)
    assert out["spread"][("A", "ddro")] == pytest.approx(1.08 / 0.92)
    assert D.band_ratio(out["spread"]) == pytest.approx(1.08 / 0.92)
    assert set(out["fits"]) == {("A", "ddro"), ("A", "bt"), ("B", "ddro"), ("B", "bt")}
    assert out["fits"][("A", "ddro")]["Ns"] == [100, 1000]
    again = D.rate_study(study, prefs, [10, 100, 1000], ["ddro", "dpo", "bt"], np.random.default_rng(0), 1e-3,
                         fit_from=100)
    assert again["fits"][("B", "bt")]["se"] == out["fits"][("B", "bt")]["se"]


def test_largest_n_summary_by_hand():
    prefs = [D.Preference("A", np.full((2, 2), 0.5)), D.Preference("B", np.full((2, 2), 0.5))]
    study = _toy_study()
    slopes = {("A", "ddro"): -0.4, ("B", "ddro"): -0.6, ("A", "bt"): -0.5, ("B", "bt"): -0.55}
    consts, bt_consts = {"A": 2.0, "B": 3.0}, {"A": 2.0, "B": 12.0}
    limits = {"A": {"tv": {"dpo": 0.1, "kto": 0.25}}, "B": {"tv": {"dpo": 0.08, "kto": 0.21}}}
    s = D.largest_n_summary(study, prefs, 1000, slopes, consts, bt_consts, limits, {"A": 1e-12, "B": 3e-12})
    # √N·mean TV at N = 1000: A's DDRO 1.0, B's 3.0; the plug-in twice that
    assert s["c_ratio_lo"] == pytest.approx(0.5) and s["c_ratio_hi"] == pytest.approx(1.0)
    assert s["bt_c_ratio_lo"] == pytest.approx(0.5) and s["bt_c_ratio_hi"] == pytest.approx(1.0)
    assert (s["ddro_slope_lo"], s["ddro_slope_hi"], s["bt_slope_lo"], s["bt_slope_hi"]) == (-0.6, -0.4, -0.55, -0.5)
    assert (s["const_ratio_lo"], s["const_ratio_hi"], s["bt_limit_max"]) == (1.0, 4.0, 3e-12)
    # DPO's mean 0.1 against limits 0.1 and 0.08; the KTO-style mean 0.21 against 0.25 and 0.21
    assert s["dpo_dev"] == pytest.approx(0.25) and s["kto_dev"] == pytest.approx(0.16)
    # at N = 1000 DDRO beats DPO and the KTO-style fit in every run but B's last (3.3/√1000 ≈ 0.104 > 0.1)
    assert s["n_order_runs"] == 6 and s["n_order"] == 5


def test_gru_rate_on_exact_power_laws():
    Ns = [1000, 10000, 100000]
    exps = np.array([-0.45, -0.5, -0.55, -0.5])
    ddro = np.array([[2.0 * N ** e for e in exps] for N in Ns])
    dpo = np.array([[0.3 * N ** (e / 50) for e in exps] for N in Ns])
    g = D.gru_rate({"ddro": ddro, "dpo": dpo}, Ns, 1e-3, C=2.0)
    np.testing.assert_allclose(g["seed_slopes"]["ddro"], exps)
    assert g["slope"] == pytest.approx(-0.5)
    q = D.t_quantile(5e-4, 3)
    assert g["q"] == q
    half = q * np.std(exps, ddof=1) / 2
    assert g["half"] == pytest.approx(half) and g["low"] == pytest.approx(-0.5 - half)
    assert g["rival_rejected"] == (half < 0.5) and g["control_rejects"]
    last = ddro[-1]
    assert g["tv_mean"] == pytest.approx(last.mean())
    assert g["tv_upper"] == pytest.approx(last.mean() + D.t_quantile(1e-3, 3) * np.std(last, ddof=1) / 2)
    assert g["line_first"] == pytest.approx(ddro[0].mean() * np.sqrt(1000) / 2.0)


def test_fit_effort_met_median_and_rate_constant_by_hand():
    neural = pd.DataFrame({"kind": ["ddro", "ddro", "ddro", "ddro", "dpo", "dpo"], "N": [10, 10, 20, 20, 10, 20],
                           "tv": [0.2, 0.4, 0.1, 0.1, 1.0, 1.0], "tv_optimum": [0.1, 0.4, 0.1, 0.05, 0.9, 0.9],
                           "steps": [3, 5, 7, 11, 100, 200]})
    e = D.fit_effort(neural)
    assert e == {"opt_med": pytest.approx(0.75), "opt_max": 1.0, "steps_ddro_first": 4, "steps_ddro_last": 9}
    assert D.met_median([-1, 3, 10, 5]) == 5 and D.met_median([-1, -1]) is None
    r = D.rate_constant(np.array([1.0, 2.0, 3.0]), pd.Series([0.5, 1.5]), 4, 0.05)
    assert r["mean"] == 4.0 and r["control"] == 2.0 and r["n"] == 3
    assert r["tol"] == pytest.approx(D.t_quantile(0.025, 2) * 2.0 / np.sqrt(3))
