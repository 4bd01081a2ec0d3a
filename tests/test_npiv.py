"""Unit tests of lib.npiv: particle gradients against autograd, the Langevin step's exact
stationary law, the Lagrangian's pieces, the fits, the baselines on problems with known
answers, and CartPole against gymnasium."""

import numpy as np
import pytest
import torch

from lib.npiv import analysis, baselines, cartpole, demand, experiments
from lib.npiv import meanfield as mf


def _net(B=2, N=7, d=3, seed=0, scale=0.7):
    return mf.MeanFieldNet.init(B, N, d, torch.Generator().manual_seed(seed), scale=scale)


@pytest.mark.parametrize("with_next", [False, True])
def test_particle_gradient_matches_autograd(with_next):
    """∇_x δ𝓛/δμ(x_i) equals N · ∂𝓛/∂x_i for the empirical measure (𝓛 linear in h)."""
    torch.manual_seed(1)
    net = _net()
    z = torch.randn(2, 11, 3)
    inp = mf.Inputs(z, torch.randn(2, 11, 3), torch.randn(2, 11)) if with_next else mf.Inputs(z)
    target = torch.randn(2, 11)
    x = net.x.clone().requires_grad_(True)
    h = mf.MeanFieldNet(x, net.R)(inp)
    loss = 0.5 * ((h - target) ** 2).mean(-1).sum()
    (auto,) = torch.autograd.grad(loss, x)
    hid = net.hidden(inp)
    manual = net.first_variation_grad(hid, (net.value(hid) - target) / 11)
    torch.testing.assert_close(manual, net.n_particles * auto, rtol=1e-4, atol=1e-5)


def test_network_value_is_mean_of_neurons():
    net = _net(B=1, N=3, d=2)
    z = torch.randn(1, 4, 2)
    w, b, c = net.x[0, :, :2], net.x[0, :, 2], net.x[0, :, 3]
    by_hand = sum(net.R * torch.tanh(c[i]) * torch.tanh(z[0] @ w[i] + b[i]) for i in range(3)) / 3
    torch.testing.assert_close(net(z)[0], by_hand)


def test_langevin_stationary_variance_is_exact():
    """With zero loss, x ← (1 − ηζ)x + √(2ησ)ξ has stationary variance σ / (ζ(1 − ηζ/2))."""
    eta, zeta, sigma = 0.1, 2.0, 0.05
    net = mf.MeanFieldNet(torch.zeros(1, 4000, 3))
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        mf.langevin_step(net, torch.zeros_like(net.x), eta, zeta, sigma, gen)
    expected = sigma / (zeta * (1 - eta * zeta / 2))
    assert abs(net.x.var().item() / expected - 1) < 0.03


def test_gaussian_neg_entropy():
    """For particles drawn from N(0, s²I_d): ∫μ log μ = −(d/2) log(2πe s²)."""
    s, d = 0.3, 4
    x = s * torch.randn(1, 200_000, d, generator=torch.Generator().manual_seed(0))
    net = mf.MeanFieldNet(x)
    expected = -0.5 * d * np.log(2 * np.pi * np.e * s**2)
    assert abs(net.gaussian_neg_entropy().item() - expected) < 0.02


def test_lagrangian_penalty_vanishes_when_trackers_agree():
    """If μ_w̃ = μ_w the penalty G(μ_a, μ_w̃) − G(μ_a, μ_w) is 0 and L_λ = F + regularisers,
    for every λ."""
    s = demand.sample(50, np.random.default_rng(0))
    data = mf.IVData(mf.Inputs(torch.tensor(s.A[None], dtype=torch.float32)),
                     torch.tensor(s.W[None], dtype=torch.float32),
                     torch.tensor(s.Y[None], dtype=torch.float32))
    a, w = _net(B=1, seed=1), _net(B=1, seed=2)
    for lam in (0.1, 10.0):
        L = mf.lagrangian(a, w, w, data, lam, zeta=0.1, sigma=0.01)
        assert L.G_tilde.item() == pytest.approx(L.G_inner.item())
        ra = mf.regulariser(a, 0.1, 0.01)
        assert L.value.item() == pytest.approx((L.F + ra).item(), rel=1e-5)
        F_direct = 0.5 * np.mean((s.Y - w(data.W)[0].numpy()) ** 2)
        assert L.F.item() == pytest.approx(F_direct, rel=1e-5)


def test_f2bmld_is_deterministic_and_fits_demand():
    s = demand.sample(128, np.random.default_rng(0))
    T = lambda x: torch.tensor(x[None], dtype=torch.float32)  # noqa: E731
    data = mf.IVData(mf.Inputs(T(s.A)), T(s.W), T(s.Y))
    cfg = mf.F2BMLDConfig(n_particles=16, steps=100, eta=0.3, record_every=50)
    r1, r2 = mf.f2bmld(data, 1.0, cfg, root=3), mf.f2bmld(data, 1.0, cfg, root=3)
    np.testing.assert_array_equal(r1.L, r2.L)
    for other in (mf.f2bmld(data, 1.0, cfg, root=4), mf.f2bmld(data, 1.0, cfg, root=3, key=("x",))):
        assert not np.array_equal(other.L, r1.L)  # another chapter seed or key: another run
    assert r1.L[-1, 0] < 0.5 * r1.L[0, 0]  # the Lagrangian has come down


def test_bias_variance_fit_recovers_coefficients():
    lam = np.logspace(-2, 2, 9)
    fit = analysis.fit_bias_variance(lam, 0.2 / lam + 0.03 * lam + 0.5)
    assert (fit.a, fit.b, fit.c) == pytest.approx((0.2, 0.03, 0.5), rel=1e-8)
    assert fit.argmin == pytest.approx(np.sqrt(0.2 / 0.03))


def test_2sls_recovers_linear_effect_where_ols_is_biased():
    rng = np.random.default_rng(0)
    n = 20_000
    w = rng.standard_normal(n)
    u = rng.standard_normal(n)
    a = w + u  # endogenous treatment
    y = 2.0 * a + u
    X = np.stack([np.ones(n), a], 1)
    Z = np.stack([np.ones(n), w], 1)
    theta = baselines.two_stage_least_squares(X, Z, y, 0.0, 0.0)
    ols = np.linalg.lstsq(X, y, rcond=None)[0]
    assert theta[1] == pytest.approx(2.0, abs=0.05)
    assert abs(ols[1] - 2.0) > 0.3


def test_kernel_iv_beats_naive_regression_on_demand():
    rng = np.random.default_rng(0)
    tr, te = demand.sample(300, rng), demand.sample(300, rng)
    kiv = baselines.KernelIV().fit(tr.A, tr.W, tr.Y, rng)
    mse = demand.test_mse(kiv.predict(te.A), te)
    assert mse < demand.test_mse(np.zeros(len(te.Y)), te)  # better than predicting the mean
    assert mse < 0.3


def test_demand_structural_function_by_hand():
    assert demand.psi(np.array([5.0]))[0] == pytest.approx(2 * (0 + 1 + 0.5 - 2))
    assert demand.structural(np.array([20.0]), np.array([5.0]), np.array([2.0]))[0] == \
        pytest.approx(100 + 30 * 2 * (-1.0) - 40)


def test_demand_scales_are_a_constant_of_the_model():
    """The standardising constants come from a fixed reference sample, not the chapter seed:
    a large sample of the design is standardised to mean ≈ 0 and sd ≈ 1."""
    demand._scales.cache_clear()
    first = demand._scales(0.5)
    demand._scales.cache_clear()
    assert demand._scales(0.5) == first
    s = demand.sample(50_000, np.random.default_rng(7))
    assert abs(s.Y.mean()) < 0.02 and abs(s.Y.std() - 1) < 0.02


def test_dfiv_initialisation_follows_its_stream_and_leaves_torch_global_alone():
    rng = np.random.default_rng(0)
    z, W = rng.standard_normal((40, 2)), rng.standard_normal((40, 2))
    Y = z[:, 0] + 0.1 * rng.standard_normal(40)
    before = torch.random.get_rng_state()
    fit = lambda root, key: baselines.DFIV(iterations=2).fit(z, W, Y, root, key).predict(z)  # noqa: E731
    a = fit(0, ("x", 1))
    assert torch.equal(torch.random.get_rng_state(), before)
    np.testing.assert_array_equal(a, fit(0, ("x", 1)))
    assert not np.array_equal(a, fit(0, ("x", 2))) and not np.array_equal(a, fit(1, ("x", 1)))


def test_cartpole_step_matches_gymnasium():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(60):
        s = np.array(env.unwrapped.state, dtype=np.float64)
        a = int(rng.integers(0, 2))
        _, _, terminated, _, _ = env.step(a)
        nxt, done = cartpole.step(s[None], np.array([a]))
        np.testing.assert_array_equal(nxt[0], np.array(env.unwrapped.state))
        assert bool(done[0]) == terminated
        if terminated:
            env.reset(seed=int(rng.integers(1000)))


def test_true_value_of_always_failing_start_is_one():
    """A pole already past the threshold terminates after one step: return = 1."""
    rng = np.random.default_rng(0)
    orig = cartpole.reset_states
    try:
        cartpole.reset_states = lambda m, r: np.tile([0, 0, 0.5, 0], (m, 1)).astype(float)
        assert cartpole.true_value(0.0, rng, n_starts=5) == pytest.approx(1.0)
    finally:
        cartpole.reset_states = orig


def test_ope_problem_shapes_and_kappa():
    rng = np.random.default_rng(0)
    tr = cartpole.collect(5, 0.4, rng, max_steps=50)
    p = cartpole.ope_problem(tr, 100, rng)
    assert p.z.shape == p.z_next.shape == (min(100, len(tr.a)), 5)
    assert set(np.round(p.kappa, 6)) <= {0.0, -round(cartpole.GAMMA, 6)}
    np.testing.assert_allclose(p.Y, 1 - cartpole.GAMMA)


def test_polishing_measures_without_moving_the_run():
    """Measuring L_λ with a polished inner minimum leaves the particles' trajectory unchanged,
    and the polished G(μ_a, ·) is no larger than the tracker's (it is a better minimum)."""
    s = demand.sample(64, np.random.default_rng(1))
    T = lambda x: torch.tensor(x[None], dtype=torch.float32)  # noqa: E731
    data = mf.IVData(mf.Inputs(T(s.A)), T(s.W), T(s.Y))
    base = mf.F2BMLDConfig(n_particles=8, steps=40, eta=0.3, sigma=0.0, record_every=10)
    plain = mf.f2bmld(data, 1.0, base, root=0)
    polished = mf.f2bmld(data, 1.0, mf.F2BMLDConfig(**{**base.__dict__, "polish_steps": 30}),
                         root=0)
    torch.testing.assert_close(plain.a.x, polished.a.x)
    np.testing.assert_allclose(polished.L_tracker, plain.L, rtol=1e-6)
    assert np.all(polished.L >= polished.L_tracker - 1e-6)  # smaller subtracted min G


def test_compare_decay_prefers_the_true_model():
    """On a fixed window an exponential gap is fitted better by the exponential, a power law
    better by the power law; the ratio discriminates in both directions."""
    t = np.linspace(0.1, 30, 300)
    ex = analysis.compare_decay(t, np.exp(-0.4 * t) * (1 + 0.01 * np.cos(7 * t)), 5, 20)
    pw = analysis.compare_decay(t, t**-2.0 * (1 + 0.01 * np.cos(7 * t)), 5, 20)
    assert ex.fitted and ex.rate == pytest.approx(0.4, rel=0.02) and ex.ratio > 10
    assert ex.decades == pytest.approx(0.4 * 15 / np.log(10), rel=0.02)
    assert pw.fitted and pw.exponent == pytest.approx(2.0, rel=0.02) and pw.ratio < 0.1
    assert ex.delta_aic > 0 > pw.delta_aic


def test_compare_decay_refuses_a_window_it_cannot_fit():
    """A gap that crosses zero (or too few points) is not fitted: NaN, never silently dropped."""
    t = np.linspace(0.1, 30, 300)
    bad = analysis.compare_decay(t, np.exp(-0.4 * t) - 1e-3, 5, 20)
    assert not bad.fitted and np.isnan(bad.ratio) and np.isnan(bad.rate)
    assert not analysis.compare_decay(t, np.exp(-t), 5, 5.05).fitted


def test_rate_fade_separates_exponential_from_any_power_law():
    """The half-window rate ratio of a pure exponential is 1 (fade 0) and that of every power
    law c·t^(−p) equals the parameter-free prediction (fade 1), on noisy curves too; a sum of
    two exponentials fades part of the way; a rate that rises after a slow stretch has fade < 0."""
    t = np.arange(0.0, 60.0, 0.2)
    tt = np.maximum(t, 1e-12)
    wiggle = 1 + 0.02 * np.cos(5 * t)
    ex = analysis.rate_fade(t, 3 * np.exp(-0.6 * t) * wiggle, 4, 38)
    assert ex.fitted and ex.rate_first == pytest.approx(0.6, rel=0.02)
    assert ex.ratio == pytest.approx(1.0, abs=0.02) and abs(ex.fade) < 0.05
    assert ex.decades == pytest.approx(0.6 * (38 - 4) / np.log(10), rel=0.02)
    for p in (0.5, 2.0, 8.0):
        pw = analysis.rate_fade(t, 5 * tt**-p * wiggle, 4, 38)
        assert pw.fitted and pw.fade == pytest.approx(1.0, abs=0.05)
        assert pw.power_ratio == pytest.approx(ex.power_ratio)  # same times, same prediction
    assert 0.3 < ex.power_ratio < 0.45  # window [4, 38]: halves [4, 21] and [21, 38]
    mix = analysis.rate_fade(t, np.exp(-0.1 * t) + 1e3 * np.exp(-1.0 * t), 4, 38)
    assert 0.0 < mix.fade < 1.0
    slow_then_fast = np.exp(-np.where(t < 20, 0.1 * t, 2.0 + 0.7 * (t - 20)))
    assert analysis.rate_fade(t, slow_then_fast, 4, 38).fade < 0


def test_rate_fade_refuses_what_it_cannot_fit():
    """A gap that crosses zero, a window with too few points or a gap that does not decay is
    not fitted (NaN); a second half that stops decaying has infinite fade."""
    t = np.arange(0.0, 60.0, 0.2)
    bad = analysis.rate_fade(t, np.exp(-0.4 * t) - 1e-5, 4, 38)
    assert not bad.fitted and np.isnan(bad.fade) and np.isnan(bad.ratio)
    assert not analysis.rate_fade(t, np.exp(-t), 4, 4.5).fitted
    assert not analysis.rate_fade(t, 1 + 0 * t, 4, 38).fitted
    stalls = analysis.rate_fade(t, np.exp(-np.minimum(t, 21.0)), 4, 38)
    assert stalls.fitted and stalls.fade > 5  # (infinite when the second half is flat)


def test_censored_window_ends_at_the_resolution_level():
    """The window ends at the last sample before the gap first reaches the level (a noisy
    floor below it never enters the fit); NaN when the window starts at or below it."""
    t = np.arange(0.0, 100.0, 0.5)
    noise = 1e-16 * np.random.default_rng(0).standard_normal(len(t))
    gap = np.exp(-0.6 * t) + noise
    end = analysis.censored_end(t, gap, 4, 90, 1e-12)
    assert end == pytest.approx(np.log(1e12) / 0.6, abs=0.5) and gap[t == end] > 1e-12
    assert analysis.censored_end(t, gap, 4, 20, 1e-12) == 20  # not reached: the fixed end
    assert np.isnan(analysis.censored_end(t, gap, 60, 90, 1e-12))
    fade = analysis.rate_fade(t, gap, 4, 90, level=1e-12)
    assert fade.t_end == end and abs(fade.fade) < 0.05
    assert fade.decades == pytest.approx(0.6 * (end - 4) / np.log(10), rel=0.02)


@pytest.mark.parametrize("p", [0.5, 2.0, 8.0])
def test_censored_rate_fade_fails_every_power_law(p):
    """Censored at a resolution level above a noise floor, a power law c·t^(−p) still has fade
    ≈ 1 (its prediction is computed on the sample times the window kept), so it fails a bound
    of 0.5 whether or not it reaches the level inside the window."""
    t = np.arange(0.0, 150.0, 0.8)
    tt = np.maximum(t, 1e-12)
    noise = 1e-15 * np.random.default_rng(1).standard_normal(len(t))
    pw = analysis.rate_fade(t, 1e-2 * (tt / 4) ** -p * (1 + 0.02 * np.cos(5 * t)) + noise,
                            4, 135, level=1e-13)
    assert pw.fitted and pw.fade == pytest.approx(1.0, abs=0.1) and pw.fade > 0.5
    assert pw.power_ratio < 0.5  # the window is long enough to tell the two apart


def test_censored_rate_fade_passes_a_slow_stretch_followed_by_exponential_decay():
    """A rate that dips to a tenth of its value for a long stretch and then recovers (allowed
    by a bound d/dt gap ≤ −α gap with small α) passes once the window runs on to the
    resolution level, while the same curve stopped inside the slow stretch fails."""
    t = np.arange(0.0, 150.0, 0.8)
    rate = np.where(t < 25, 0.2, np.where(t < 65, 0.01, 0.5))
    log_gap = np.log(1e-3) - np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(t))])
    gap = np.exp(log_gap) + 1e-16 * np.random.default_rng(2).standard_normal(len(t))
    whole = analysis.rate_fade(t, gap, 4, 135, level=1e-13)
    assert whole.fitted and whole.t_end < 135 and whole.fade < 0
    assert analysis.rate_fade(t, gap, 4, 45, level=1e-13).fade > 0.5


def test_local_rates_are_constant_for_an_exponential_and_p_over_t_for_a_power_law():
    """Block slopes of −log gap: flat for an exponential, ≈ p/t for a power law; they stop at
    the first block that reaches the floor."""
    t = np.arange(0.0, 60.0, 0.2)
    c, r = analysis.local_rates(t, np.exp(-0.5 * t), 2.0)
    assert len(c) == 30 and np.allclose(r, 0.5)
    c, r = analysis.local_rates(t[1:], t[1:] ** -3.0, 2.0)
    assert np.allclose(r[2:], 3.0 / c[2:], rtol=0.02)
    c, r = analysis.local_rates(t, np.exp(-0.5 * t), 2.0, floor=np.exp(-0.5 * 21))
    assert c.max() < 21 and len(c) == 10


def test_convergence_clearance_is_the_gap_at_each_window_end_over_its_fluctuation():
    h = 0.2 / 3
    cfg = mf.F2BMLDConfig(n_particles=16, steps=int(round(12 / h)), eta=0.2, zeta=2.0,
                          record_every=3, polish_steps=5, tracker_steps=3, flow_step=h,
                          float64=True)
    conv = experiments.convergence([1.0, 2.0], [1e-14], [0], 64, cfg, 0,
                                   windows=[[2.0, 6.0], [1.0, 4.0]], ref_from=9.0, level=1e-13)
    t = conv["t"]
    for run in np.ndindex(conv["t_end"].shape):
        end = conv["t_end"][run]
        assert np.isfinite(end)
        k = int(np.flatnonzero(t >= end)[0])  # the first recorded time at the window's end
        assert conv["clearance"][run] == conv["gap"][run][k] / conv["tail_sd"][run]


def test_f2bmld_flushes_denormals_only_while_it_runs():
    s = demand.sample(16, np.random.default_rng(0))
    T = lambda x: torch.tensor(x[None], dtype=torch.float32)  # noqa: E731
    data = mf.IVData(mf.Inputs(T(s.A)), T(s.W), T(s.Y))
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormal floats")
    mf.f2bmld(data, 1.0, mf.F2BMLDConfig(n_particles=4, steps=2, record_every=1), root=0)
    assert not mf._flushing_denormal()
    with mf.flush_denormal():
        assert mf._flushing_denormal()
        with mf.flush_denormal():
            pass
        assert mf._flushing_denormal()  # the inner block restores the outer's setting
    assert not mf._flushing_denormal()


def test_flow_step_gives_every_lambda_the_same_clock():
    """With ``flow_step`` every run steps h, whatever its λ; by default h = η/(1 + λ)."""
    s = demand.sample(32, np.random.default_rng(2))
    T = lambda x: torch.tensor(np.stack([x, x]), dtype=torch.float32)  # noqa: E731
    data = mf.IVData(mf.Inputs(T(s.A)), T(s.W), T(s.Y))
    cfg = mf.F2BMLDConfig(n_particles=4, steps=3, eta=0.3, record_every=1)
    np.testing.assert_allclose(mf.f2bmld(data, np.array([1.0, 5.0]), cfg, 0).dt,
                               [0.15, 0.05], rtol=1e-6)
    fixed = mf.F2BMLDConfig(**{**cfg.__dict__, "flow_step": 0.02})
    np.testing.assert_allclose(mf.f2bmld(data, np.array([1.0, 5.0]), fixed, 0).dt, [0.02, 0.02],
                               rtol=1e-6)


@pytest.mark.parametrize("method", ["sieve", "kiv"])
def test_functional_treatment_recovers_a_known_bellman_solution(method):
    """OPE form: with Y = Q(z) + κ Q(z') for a smooth Q and W = z (no confounding), the
    baselines recover Q from the functional treatment; ignoring κ does markedly worse."""
    rng = np.random.default_rng(0)
    n = 400
    z = rng.uniform(-1, 1, (n, 2))
    zn = np.clip(z + 0.2 * rng.standard_normal((n, 2)), -1, 1)  # a transition
    kappa = -0.5 * (rng.random(n) < 0.8)
    q = lambda x: np.sin(2 * x[:, 0]) + x[:, 1] ** 2  # noqa: E731
    y = q(z) + kappa * q(zn) + 0.01 * rng.standard_normal(n)
    test = rng.uniform(-0.9, 0.9, (200, 2))
    make = (lambda: baselines.Sieve2SLS(n_basis=60)) if method == "sieve" else baselines.KernelIV
    fit = make().fit(z, z, y, np.random.default_rng(1), z_next=zn, kappa=kappa)
    naive = make().fit(z, z, y, np.random.default_rng(1))
    err = np.mean((fit.predict(test) - q(test)) ** 2)
    assert err < 0.05
    assert err < 0.3 * np.mean((naive.predict(test) - q(test)) ** 2)
