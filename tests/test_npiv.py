"""Unit tests of lib.npiv: particle gradients against autograd, the Langevin step's exact
stationary law, the Lagrangian's pieces, the fits, the baselines on problems with known
answers, and CartPole against gymnasium."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from lib.npiv import analysis, baselines, cartpole, demand, experiments
from lib.npiv import meanfield as mf
from lib.seeding import stream


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


def test_logdet_bias_is_exact_for_gaussian_clouds():
    """Over many clouds of 16 Gaussian particles in 5 dimensions the mean log det of the sample
    covariance is log det Σ + logdet_bias; the unbiased stand-in's mean is the true entropy."""
    n, d, reps = 16, 5, 4000
    x = torch.randn(reps, n, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    net = mf.MeanFieldNet(x)
    expected = -0.5 * d * np.log(2 * np.pi * np.e)       # Σ = I
    bias = mf.logdet_bias(n, d)
    assert bias == pytest.approx(-d * (d + 1) / (2 * n), rel=0.25)
    raw = net.gaussian_neg_entropy(unbiased=False).mean().item()
    fixed = net.gaussian_neg_entropy().mean().item()
    se = net.gaussian_neg_entropy().std().item() / np.sqrt(reps)
    assert abs(fixed - expected) < 4 * se < abs(raw - expected)
    assert raw - fixed == pytest.approx(-0.5 * bias)


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


def test_first_passage_is_the_first_sample_at_or_below_the_level():
    t = np.arange(10.0)
    gap = np.array([5, 4, 3, 0.5, 2, 0.1, 0, 0, 0, 0], float)
    assert analysis.first_passage(t, gap, 1.0) == 3.0
    assert analysis.first_passage(t, gap, 0.0) == 6.0
    assert np.isnan(analysis.first_passage(t, gap, -1.0))


def _coverage(law, rng, draws=2000, N=(64, 128, 256, 512), D=6, M=10, cell_sd=0.0):
    """Coverage of log_variance_slope's two-sided 95 % interval around the true slope −1, over
    ``draws`` synthetic designs: ``M`` draws from ``law`` per (N, data set) cell, scaled to variance
    c_d/N (c_d differs by data set) times a cell factor exp(cell_sd·ξ) (ξ standard normal)."""
    N = np.asarray(N, float)
    inside = inside_gauss = 0
    for _ in range(draws):
        c = np.geomspace(1, 100, D)[None, :, None] / N[:, None, None]
        c = c * np.exp(cell_sd * rng.standard_normal((len(N), D, 1)))
        fit = analysis.log_variance_slope(N, law(rng, (len(N), D, M)) * np.sqrt(c))
        lo, hi = fit.interval(-1.0, 0.05)
        inside += lo <= fit.slope <= hi
        inside_gauss += abs(fit.slope + 1) <= 1.96 * fit.se_gaussian
    return inside / draws, inside_gauss / draws


LAWS = {
    "Gaussian": lambda rng, shape: rng.standard_normal(shape),
    "Student t, 3 d.o.f.": lambda rng, shape: rng.standard_t(3, shape),
    "2 % contaminated, 10× scale": lambda rng, shape: rng.standard_normal(shape)
    * np.where(rng.random(shape) < 0.02, 10.0, 1.0),
    "exponential": lambda rng, shape: rng.exponential(1.0, shape),
}


@pytest.mark.parametrize("law", list(LAWS))
@pytest.mark.parametrize("cell_sd", [0.0, 0.5])
def test_log_variance_slope_interval_covers_for_heavy_tails_and_overdispersion(law, cell_sd):
    """The interval's coverage at 95 % is at least 93 % (4 binomial standard errors below 95 %
    over 2000 designs) for Gaussian and heavy-tailed samples, with and without a variance that
    varies between cells; where the samples are not Gaussian or the cells vary, the Gaussian-exact
    error ψ'((M − 1)/2) under-covers, which is why the error is estimated."""
    rng = np.random.default_rng([11, list(LAWS).index(law), int(cell_sd * 10)])
    cover, cover_gauss = _coverage(LAWS[law], rng, cell_sd=cell_sd)
    assert cover >= 0.93
    assert cover <= 0.97  # not so conservative that it loses its power
    if law == "Gaussian" and cell_sd == 0:
        assert cover_gauss >= 0.93
    elif law != "exponential" or cell_sd > 0:
        assert cover_gauss < 0.90


def test_log_variance_slope_by_hand():
    """Three particle numbers, one data set, M = 2 samples per cell with s² = e^y for y = 0, 1, 3
    at log N = 0, 1, 2: slope 3/2, residuals (1/6, −1/3, 1/6), residual variance (1/6)/1, standard
    error √(1/12); Student t on 1 degree of freedom."""
    y = np.array([0.0, 1.0, 3.0])
    samples = np.stack([np.zeros(3), np.sqrt(2 * np.exp(y))], -1)[:, None, :]   # (3, 1, 2)
    fit = analysis.log_variance_slope(np.exp([0.0, 1.0, 2.0]), samples)
    assert fit.slope == pytest.approx(1.5)
    assert fit.df == 1
    assert fit.residual_var == pytest.approx(1 / 6)
    assert fit.se == pytest.approx(np.sqrt(1 / 12))
    assert fit.critical(0.05) == pytest.approx(12.7062, rel=1e-4)
    lo, hi = fit.interval(1.0, 0.05)
    assert (lo + hi) / 2 == pytest.approx(1.0) and hi - lo == pytest.approx(2 * 12.7062 * np.sqrt(1 / 12), rel=1e-4)


def test_log_variance_slope_unbiased_and_rejects_a_flat_spread():
    """Data sets of very different scales do not bias the slope (one intercept each); a spread
    that does not shrink with N gives slope ≈ 0 and is rejected against −1; an exact 1/N spread
    gives slope −1 with zero error."""
    rng = np.random.default_rng(0)
    N = np.array([64, 128, 256, 512])
    slopes = [analysis.log_variance_slope(N, rng.standard_normal((4, 6, 10))
                                          * np.sqrt(np.array([1.0, 30.0] * 3)[None, :, None]
                                                    / N[:, None, None])).slope
              for _ in range(400)]
    assert abs(np.mean(slopes) + 1) < 0.03
    flat = analysis.log_variance_slope(N, rng.standard_normal((4, 6, 10)))
    lo, hi = flat.interval(-1.0, 1e-3)
    assert abs(flat.slope) < flat.critical(1e-3) * flat.se and not lo <= flat.slope <= hi
    exact = analysis.log_variance_slope(
        N, np.stack([np.arange(10.0) / np.sqrt(n) for n in N])[:, None])
    assert exact.slope == pytest.approx(-1.0) and exact.se == pytest.approx(0, abs=1e-6)


def test_init_scale_may_differ_between_runs():
    scale = torch.tensor([0.05, 1.0])
    net = mf.MeanFieldNet.init(2, 20_000, 3, torch.Generator().manual_seed(0), scale=scale)
    np.testing.assert_allclose(net.x.std(dim=(1, 2)).numpy(), [0.05, 1.0], rtol=0.02)


def test_stationarity_spread_is_the_variance_of_late_means():
    h = 0.1
    cfg = mf.F2BMLDConfig(steps=20, eta=0.2, zeta=0.5, record_every=2, tracker_steps=1,
                          flow_step=h)
    st = experiments.stationarity([4, 8], [0, 1], 3, 16, 1.0, 1e-3, cfg, 0, late_from=1.0)
    assert st["L"].shape == (2, 2, 3, 11)
    late = st["L"][..., st["t"] >= 1.0].mean(-1)
    np.testing.assert_allclose(st["late"], late)
    np.testing.assert_allclose(st["spread"], late.var(-1, ddof=1))
    np.testing.assert_allclose(st["init_scales"], [0.05, np.sqrt(0.05), 1.0])
    assert not np.allclose(st["L"][0, 0, 0], st["L"][0, 0, 1])  # distinct initialisations
    np.testing.assert_allclose(st["late_A"], st["A"][..., st["t"] >= 1.0].mean(-1))
    np.testing.assert_allclose(st["spread_A"], st["late_A"].var(-1, ddof=1))
    assert st["test_mse"].shape == (2, 2, 3) and np.all(st["test_mse"] > 0)
    test = demand.sample(1000, stream(0, "stationarity-test"))
    assert st["zero_mse"] == pytest.approx(float((test.h_true ** 2).mean()))


def test_stationary_test_error_is_the_final_treatment_models():
    cfg = mf.F2BMLDConfig(steps=3, eta=0.2, zeta=0.5, record_every=3, tracker_steps=1,
                          flow_step=0.1)
    st = experiments.stationarity([4], [0], 2, 16, 1.0, 1e-3, cfg, 0, late_from=0.1, n_test=50)
    data = experiments.demand_batch([demand.sample(16, stream(0, "stationarity-data", 0))] * 2)
    scales, plus = experiments.init_design(2, (0.05, 1.0))
    run = mf.f2bmld(data, 1.0, replace(cfg, n_particles=4, sigma=1e-3,
                                       init_scale=torch.as_tensor(scales, dtype=mf.DTYPE),
                                       init_plus=torch.as_tensor(plus, dtype=mf.DTYPE)),
                    0, ("stationarity", 4))
    test = demand.sample(50, stream(0, "stationarity-test"))
    pred = run.a(torch.as_tensor(np.stack([test.A] * 2), dtype=mf.DTYPE)).numpy()
    np.testing.assert_allclose(st["test_mse"][0, 0], ((pred - test.h_true) ** 2).mean(-1),
                               rtol=1e-5)


def test_stationarity_arms_share_initialisations_and_offset_sets_the_asymmetry():
    cfg = mf.F2BMLDConfig(steps=4, eta=0.2, zeta=0.5, record_every=2, tracker_steps=1,
                          flow_step=0.1)
    args = ([64], [0], 3, 16, 1.0)
    kw = dict(cfg=cfg, root=0, late_from=0.1, offset=2.0, init_scales=(0.01, 0.02))
    on, off = (experiments.stationarity(*args, sigma=sg, **kw) for sg in (0.5, 0.0))
    np.testing.assert_allclose(on["init_plus"], [1.0, 0.5, 0.0])
    np.testing.assert_allclose(on["A"][..., 0], off["A"][..., 0])  # the same initial particles
    np.testing.assert_allclose(on["A"][0, 0, :, 0], [np.tanh(2.0), 0.0, -np.tanh(2.0)], atol=0.05)
    assert not np.allclose(on["A"][..., -1], off["A"][..., -1])   # the noise moved one arm


def test_init_offset_splits_particles_between_mirror_images():
    gen = torch.Generator().manual_seed(0)
    net = mf.MeanFieldNet.init(3, 10, 2, gen, scale=0.0, offset=1.5,
                               plus=torch.tensor([1.0, 0.3, 0.0]))
    c = net.x[..., -1]
    assert (c == 1.5).sum(1).tolist() == [10, 3, 0] and (c == -1.5).sum(1).tolist() == [0, 7, 10]
    np.testing.assert_allclose(net.asymmetry().numpy(), np.tanh(1.5) * np.array([1.0, -0.4, -1.0]),
                               rtol=1e-6)


def test_mirror_image_particles_give_the_same_network_and_opposite_asymmetry():
    net = _net(B=2, N=9, d=3, scale=0.8)
    mirror = mf.MeanFieldNet(-net.x, net.R)
    z = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(mirror(z), net(z))
    torch.testing.assert_close(mirror.asymmetry(), -net.asymmetry())


def test_spread_test_judges_the_control_by_the_same_band():
    rng = np.random.default_rng(0)
    N = np.array([64, 128, 256, 512])
    falling = rng.standard_normal((4, 5, 8)) / np.sqrt(N)[:, None, None]
    flat = rng.standard_normal((4, 5, 8))
    st = analysis.spread_test(N, falling, flat, false_alarm=5e-4)
    assert st.holds and st.control_holds is False
    lo, hi = st.band
    assert lo < -1 < hi and st.fit.interval(-1.0, 5e-4) == (lo, hi)
    assert not st.passes(st.control.slope) and not st.passes(float("nan"))
    assert analysis.spread_test(N, falling).control_holds is None


def test_rate_comparison_is_a_paired_one_sided_test():
    rng = np.random.default_rng(1)
    base = np.exp(rng.normal(0, 0.3, (2, 10)))
    rates = np.stack([base, base * 1.2 * np.exp(rng.normal(0, 0.01, (2, 10)))])
    rc = analysis.rate_comparison(rates)
    assert rc.faster(1e-3) and rc.ratio == pytest.approx(1.2, rel=0.01)
    same = analysis.rate_comparison(np.stack([base, base * np.exp(rng.normal(0, 0.01, (2, 10)))]))
    assert not same.faster(1e-3)
    rates[1, 0, 0] = np.nan  # a run that never relaxed: nothing can be said
    assert np.isnan(analysis.rate_comparison(rates).p_value) and not analysis.rate_comparison(rates).faster(1.0)


def test_sweep_readability():
    mse = np.array([[1.0, 1.0], [0.5, 0.5], [0.8, 0.8]])
    half = np.array([[1.05, 1.05], [0.5, 0.5], [0.8, 0.8]])
    r = analysis.sweep_readability(mse, half, mse_zero=1.05)
    np.testing.assert_allclose(r.drift, [0.05, 0.0, 0.0])
    assert r.collapsed.tolist() == [True, False, False] and r.ceiling == 0.0
    assert r.detectable == pytest.approx(0.05) and r.effect == 0.1
    assert analysis.sweep_readability(mse, half, mse_zero=2.0).ceiling is None


def test_ope_readable():
    assert analysis.ope_readable(np.array([0.6, 0.9]), {"a": 0.1, "b": 0.2})
    assert not analysis.ope_readable(np.array([0.4, 0.9]), {"a": 0.1})
    assert not analysis.ope_readable(np.array([0.6]), {"a": 0.1, "b": 0.3})


def test_relaxation_first_passage_and_rate():
    cfg = mf.F2BMLDConfig(n_particles=8, steps=30, eta=0.2, zeta=0.5, record_every=3,
                          tracker_steps=1, flow_step=0.1)
    rx = experiments.relaxation([1e-3, 1e-2], [0], 2, 16, 1.0, cfg, 0, late_from=2.0,
                                level=0.05)
    t = rx["t"]
    assert rx["gap"].shape == (2, 1, 2, len(t))
    np.testing.assert_allclose(rx["gap"][..., t >= 2.0].mean(-1).mean(-1), 0.0, atol=1e-12)
    for i in np.ndindex(rx["tau"].shape):
        g = rx["gap"][i]
        assert rx["tau"][i] == analysis.first_passage(t, g, 0.05)
        assert rx["rate"][i] == pytest.approx(np.log(g[0] / 0.05) / rx["tau"][i])
        c = analysis.level_crossing(t, g, 0.05)
        np.testing.assert_equal(rx["crossing"][i], c)
        if np.isfinite(c):
            assert rx["rate_interp"][i] == pytest.approx(np.log(g[0] / 0.05) / c)
    # the energy: the same runs' Lagrangian without σ·Ent, against its own late mean
    E = rx["energy"]
    assert E["E"].shape == rx["L"].shape and np.all(E["E"] != rx["L"])
    np.testing.assert_allclose(E["gap"], E["E"] - E["ref"][..., None, None], atol=1e-12)


def test_energy_is_the_lagrangian_without_its_entropy_terms():
    s = demand.sample(24, np.random.default_rng(1))
    T = lambda x: torch.tensor(np.stack([x, x]), dtype=torch.float32)  # noqa: E731
    data = mf.IVData(mf.Inputs(T(s.A)), T(s.W), T(s.Y))
    lam = 2.0
    for sigma in (0.0, 0.05):
        cfg = mf.F2BMLDConfig(n_particles=8, steps=4, zeta=0.3, sigma=sigma, record_every=2)
        run = mf.f2bmld(data, lam, cfg, root=0)
        # the final state's σ·Ent terms, as L_λ weights them: μ_a by σ, μ_w̃ by λσ, μ_w by −λσ
        ent = [mf._double(m).gaussian_neg_entropy().numpy() for m in (run.a, run.wt, run.w)]
        terms = sigma * (ent[0] + lam * (ent[1] - ent[2]))
        np.testing.assert_allclose(run.L_tracker[-1] - run.energy[-1], terms, rtol=1e-6,
                                   atol=1e-9)
        if sigma == 0.0:
            np.testing.assert_array_equal(run.L_tracker, run.energy)


def test_decay_shift_and_per_sigma_shape():
    t = np.arange(0, 60, 0.25)
    rng = np.random.default_rng(3)
    rates = np.exp(rng.normal(0, 0.1, (3, 4)))[..., None]
    expo = 1.5 * np.exp(-rates * t)                   # log ratio 0
    slow = 1.5 * (1 + rates * t) ** -2.0              # a power law: the lower half takes longer
    sh = analysis.decay_shift(t, expo, slow, 0.3, 0.03)
    per_run = analysis.decay_log_ratios(t, slow, 0.3, 0.03)[0].ravel()
    assert sh.hot == pytest.approx(0.0, abs=1e-9) and sh.cold == pytest.approx(per_run.mean())
    assert sh.diff > 0.3 and sh.p_value < 1e-6 and sh.larger(1e-4)
    from scipy.stats import ttest_ind
    ref = ttest_ind(expo_ratios := analysis.decay_log_ratios(t, expo, 0.3, 0.03)[0].ravel(),
                    per_run, equal_var=False, alternative="greater")
    assert sh.p_value == pytest.approx(ref.pvalue, rel=1e-6) and sh.df == pytest.approx(ref.df)
    assert len(expo_ratios) == 12
    back = analysis.decay_shift(t, slow, expo, 0.3, 0.03)
    assert back.p_value > 0.5 and not back.larger(1e-4)
    assert np.isnan(analysis.decay_shift(t, expo[:1, :1], slow, 0.3, 0.03).p_value)
    mean, se = analysis.decay_by_sigma(t, np.stack([expo, slow]), 0.3, 0.03)
    assert mean.shape == (2,) and abs(mean[0]) < 1e-9 and mean[1] < -0.3 and np.all(se >= 0)


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


def test_released_variant_is_reproducible_and_gets_an_easy_value_right():
    """The Adam-trained variant follows its streams (same key: same fit; another key: another
    fit) and, on a short horizon (γ = 0.5, reward 1 per step: value ≈ 2), gets the value."""
    model = baselines.AdamF2BMLD(iterations=150)
    r1 = experiments.ope_released([0.5], [0.2], [0], 20, 128, model, root=0, n_starts=50)
    r2 = experiments.ope_released([0.5], [0.2], [0], 20, 128, model, root=0, n_starts=50)
    np.testing.assert_array_equal(r1["est"], r2["est"])
    assert r1["est"].shape == (1, 1, 1) and r1["truth"].shape == (1, 1)
    r3 = experiments.ope_released([0.5], [0.2], [0], 20, 128, model, root=1, n_starts=50)
    assert r3["est"][0, 0, 0] != r1["est"][0, 0, 0]
    assert r1["rel_err"][0, 0, 0] < 0.1


# -- the compiled particle steps and the written-out released variant -------------------------
@pytest.mark.parametrize("with_next", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_hidden_and_gradient_match_torch(with_next, dtype):
    """The compiled pre-activations and particle gradient (one pass over the activations) against
    the torch operations, to rounding."""
    gen = torch.Generator().manual_seed(0)
    net = mf.MeanFieldNet(torch.randn(3, 37, 5, generator=gen, dtype=dtype) * 0.8)
    z = torch.randn(3, 19, 3, generator=gen, dtype=dtype)
    inp = (mf.Inputs(z, torch.randn(3, 19, 3, generator=gen, dtype=dtype),
                     torch.randn(3, 19, generator=gen, dtype=dtype)) if with_next else mf.Inputs(z))
    weights = torch.randn(3, 19, generator=gen, dtype=dtype) / 19
    ref, fast = net.hidden(inp, compiled=False), net.hidden(inp)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(fast.s, ref.s, **tol)
    if with_next:
        torch.testing.assert_close(fast.s_next, ref.s_next, **tol)
    torch.testing.assert_close(net.first_variation_grad(ref, weights),
                               net.first_variation_grad(ref, weights, compiled=False), **tol)


@pytest.mark.parametrize("ope_like", [False, True])
def test_compiled_f2bmld_matches_the_torch_steps(ope_like):
    """A whole F²BMLD run, compiled and as torch operations: the same draws, the same Lagrangian
    and particles to rounding (every step, tracker steps and records included)."""
    gen = torch.Generator().manual_seed(1)
    B, n = 3, 40
    A = mf.Inputs(torch.randn(B, n, 3, generator=gen),
                  *((torch.randn(B, n, 3, generator=gen), 0.9 * torch.rand(B, n, generator=gen))
                    if ope_like else ()))
    data = mf.IVData(A, torch.randn(B, n, 3, generator=gen), torch.randn(B, n, generator=gen))
    cfg = mf.F2BMLDConfig(n_particles=24, steps=60, eta=0.3, zeta=0.1, record_every=10,
                          tracker_steps=2, init_scale=0.5)
    runs = [mf.f2bmld(data, [0.3, 1.0, 3.0], cfg, root=2, compiled=c) for c in (True, False)]
    np.testing.assert_allclose(runs[0].L, runs[1].L, rtol=1e-5)
    np.testing.assert_allclose(runs[0].L_tracker, runs[1].L_tracker, rtol=1e-5)
    for m in ("a", "w", "wt"):
        torch.testing.assert_close(getattr(runs[0], m).x, getattr(runs[1], m).x, rtol=1e-4,
                                   atol=1e-5)


@pytest.mark.parametrize("with_next", [False, True])
def test_written_out_released_variant_is_autograd_and_adam(with_next):
    """The released variant's written-out steps (:class:`baselines._FlatMLP`) give autograd's and
    ``torch.optim.Adam``'s numbers exactly."""
    rng = np.random.default_rng(0)
    z, W = rng.standard_normal((80, 4)), rng.standard_normal((80, 3))
    Y = z[:, 0] + 0.1 * rng.standard_normal(80)
    fn = dict(z_next=rng.standard_normal((80, 4)), kappa=rng.uniform(0, 1, 80)) if with_next else {}
    model = baselines.AdamF2BMLD(iterations=15, inner_steps=3, batch=12)
    fast = model.fit(z, W, Y, 0, ("t",), **fn).predict(z)
    ref = model.fit(z, W, Y, 0, ("t",), autograd=True, **fn).predict(z)
    np.testing.assert_array_equal(fast, ref)


def test_ope_summary_by_hand():
    ope = {"err_f2bmld": np.array([[[90.0, 92.0, 94.0], [80.0, 82.0, 84.0]]]),
           "err": {"DFIV": np.array([[1.0, 2.0, 3.0], [4.0, 6.0, 8.0]]),
                   "kernel IV": np.array([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])}}
    ctrl = {"truth": np.array([2.0]), "err_f2bmld": np.array([[[0.2, 0.4, 0.6]]]),
            "err": {"DFIV": np.array([[0.1, 0.2, 0.3]])}}
    released = {"truth": np.array([[80.0]]), "est": np.array([[[78.0, 77.0]]])}
    released_ctrl = {"rel_err": np.array([[[0.1, 0.3]]])}
    out = analysis.ope_summary(ope, ctrl, released, released_ctrl, [0.0, 0.4], [0.3])
    assert out["ctrl_rel"] == pytest.approx({"F²BMLD": 0.2, "DFIV": 0.1})
    assert out["rel_noises"] == [0.4]
    # the variant's median error 2.5 against DFIV's 5 on its two data sets
    np.testing.assert_allclose(out["rel_ratio"], [0.5])
    np.testing.assert_allclose(out["rel_moved"], [77.5 / 80])
    assert out["rel_ctrl_err"] == pytest.approx(0.2)
    assert list(out["med"]) == ["F²BMLD (λ = 0.3)", "DFIV", "kernel IV"]
    np.testing.assert_allclose(out["med"]["DFIV"], [2.0, 6.0])


def test_value_by_n_by_hand():
    late = np.zeros((3, 2, 4))
    late[0] = [[1.0] * 4, [2.0] * 4]
    late[2] = [[0.5] * 4, [1.0] * 4]
    v = analysis.value_by_n(late, [16, 32, 64], sigma=0.2, dim=5)
    np.testing.assert_allclose(v.mean, [1.5, 0.0, 0.75])
    assert v.drop == pytest.approx(0.75) and v.drop_se == pytest.approx(0.25)
    b = mf.logdet_bias
    assert v.bias_drop == pytest.approx(0.1 * (b(64, 5) - b(16, 5))) and v.bias_drop > 0


def _bias_cells(N, a, b, p, eps):
    """Cells whose mean is a_d + b·N^(−p) exactly, with two runs ±eps·N^(−1) around it."""
    N = np.asarray(N, float)
    mean = np.asarray(a)[None, :] + b * N[:, None] ** (-p)
    e = eps / N[:, None]
    return np.stack([mean + e, mean - e], -1)


def test_particle_bias_recovers_an_exact_power_law():
    N = [8, 16, 32, 64, 128]
    fit = analysis.particle_bias(_bias_cells(N, [1.0, -2.0], 0.3, 1.0, 0.5), N)
    assert fit.b == pytest.approx(0.3, rel=1e-6) and fit.p == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(fit.intercepts, [1.0, -2.0], atol=1e-8)
    assert fit.se == pytest.approx(0.0, abs=1e-6) and fit.df == 10 - 2 - 2
    half = analysis.particle_bias(_bias_cells(N, [0.0, 0.5], 0.2, 0.5, 0.5), N)
    assert half.p == pytest.approx(0.5, rel=1e-6) and half.b == pytest.approx(0.2, rel=1e-6)
    few = analysis.particle_bias(_bias_cells(N[:3], [0.0], 0.2, 1.0, 0.5), N[:3])
    assert few.df == 0 and np.isnan(few.se) and few.p == pytest.approx(1.0, rel=1e-4)


def test_particle_bias_error_covers_the_exponent():
    rng = np.random.default_rng(3)
    N = np.array([8, 16, 32, 64, 128, 256])
    z = []
    for _ in range(200):
        late = 0.3 / N[:, None, None] + 0.7 / N[:, None, None] * rng.standard_normal((6, 3, 16))
        fit = analysis.particle_bias(late, N)
        z.append((fit.p - 1.0) / fit.se)
    assert abs(np.median(z)) < 0.3 and 0.8 < np.std(np.clip(z, -6, 6)) < 1.3


def test_particle_bias_needed_error_by_hand():
    fit = analysis.ParticleBias(b=0.3, p=0.9, se=0.2, df=10, intercepts=np.zeros(2))
    z = 3.890591886413  # two-sided normal critical value at 1e-4
    assert fit.needed_se() == pytest.approx(0.5 / z, rel=1e-9)
    assert fit.runs_factor() == pytest.approx((0.2 * z / 0.5) ** 2, rel=1e-9)
    assert fit.needed_se(rival=2.0, false_alarm=1e-4) == pytest.approx(1.0 / z, rel=1e-9)


def test_relative_test_error_reads_the_largest_particle_number():
    mse = np.array([[[9.0, 9.0]], [[0.2, 0.4]]])
    assert analysis.relative_test_error(mse, 2.0) == pytest.approx(0.15)


def test_best_penalty_is_the_grid_minimiser_first_on_ties():
    assert analysis.best_penalty([0.1, 1.0, 10.0], [3.0, 1.0, 2.0]) == 1.0
    assert analysis.best_penalty([0.1, 1.0, 10.0], [1.0, 2.0, 1.0]) == 0.1


def test_u_shape_needs_an_interior_minimiser_and_both_terms():
    lam = np.array([0.1, 1.0, 10.0])
    u = analysis.fit_bias_variance(lam, 1 / lam + lam)       # a = b = 1, c = 0 exactly
    assert u.a == pytest.approx(1.0) and u.b == pytest.approx(1.0)
    assert analysis.u_shape_holds(lam, 1.0, u)
    assert not analysis.u_shape_holds(lam, 0.1, u)           # minimiser at the grid's edge
    assert not analysis.u_shape_holds(lam, 10.0, u)
    assert not analysis.u_shape_holds(lam, 1.0, analysis.BiasVarianceFit(1.0, -0.1, 0.0, 1.0))  # b < 0
    assert not analysis.u_shape_holds(lam, 1.0, analysis.BiasVarianceFit(0.0, 1.0, 0.0, 1.0))   # a = 0


def test_u_shape_claim_records_the_rule_and_what_the_design_reads():
    from lib.claims import Claims
    lam = np.array([0.1, 1.0, 10.0])
    mse = np.array([[3.0, 3.2], [1.0, 1.2], [9.5, 9.7]])     # (λ, seed): the largest λ near zero's 10
    half = mse * np.array([[1.0], [1.1], [1.0]])             # only λ = 1 still moving, by 10 %
    rd = analysis.sweep_readability(mse, half, mse_zero=10.0)
    fit = analysis.fit_bias_variance(lam, mse.mean(1))
    best = analysis.best_penalty(lam, mse.mean(1))
    kw = analysis.u_shape_claim(lam, best, fit, rd, 10.0)
    assert kw["id"] == "lambda-u-shape" and kw["simulation"]["argmin"] == 1.0
    assert kw["holds"] == analysis.u_shape_holds(lam, best, fit)
    assert kw["power"].detectable == pytest.approx(0.1) and kw["power"].ceiling == 0.0
    assert kw["power"].value["lambdas at the zero function's error"] == [10.0]
    assert "at λ = 1" in kw["power"].statement
    claim = Claims("03-npiv-mean-field").record(**kw)
    assert claim.holds == kw["holds"]


def test_sweep_metrics_keep_the_records_section():
    fit = analysis.BiasVarianceFit(1.0, 2.0, 3.0, 0.5)
    sweep = {"flow_time": 5.0, "steps": np.array([10, 20]), "mse": np.ones((2, 1)),
             "mse_half": np.zeros((2, 1)), "baselines": {"sieve 2SLS": np.array([4.0])}}
    out = analysis.sweep_metrics([0.1, 1.0], sweep, fit)
    assert list(out) == ["lambda"]
    assert out["lambda"]["sweep_fit"] == {"a": 1.0, "b": 2.0, "c": 3.0, "r2": 0.5}
    assert out["lambda"]["sweep_lams"] == [0.1, 1.0] and out["lambda"]["sweep_flow_time"] == 5.0


def test_largest_late_sd_by_hand():
    t = np.array([0.0, 1.0, 2.0, 3.0])
    gap = np.array([[[9.0, 1.0, 3.0, 1.0]], [[0.0, 5.0, 2.0, 2.0]]])   # (run, 1, time)
    # late stretch t ≥ 2: (3, 1) has population sd 1, (2, 2) has 0; the early 9 and 5 do not count
    assert analysis.largest_late_sd(t, gap, 2.0) == pytest.approx(1.0)


def test_correlation_by_hand():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert analysis.correlation(x, 3 * x - 1) == pytest.approx(1.0)
    assert analysis.correlation(x, -x) == pytest.approx(-1.0)
    y = np.array([1.0, 3.0, 2.0, 4.0])
    xc, yc = x - x.mean(), y - y.mean()
    assert analysis.correlation(x, y) == pytest.approx((xc @ yc) / np.sqrt((xc @ xc) * (yc @ yc)))


def test_particle_bias_band_is_the_student_t_interval():
    fit = analysis.ParticleBias(b=0.3, p=0.9, se=0.1, df=40, intercepts=np.zeros(2))
    from scipy.stats import t as student_t
    crit = student_t.isf(0.5e-4, 40)
    assert fit.critical(1e-4) == pytest.approx(crit, rel=1e-12)
    assert fit.band(1e-4) == pytest.approx((1 - 0.1 * crit, 1 + 0.1 * crit), rel=1e-12)
    assert fit.band(1e-4, predicted=0.5)[0] == pytest.approx(0.5 - 0.1 * crit, rel=1e-12)
    none = analysis.ParticleBias(b=0.3, p=0.9, se=float("nan"), df=0, intercepts=np.zeros(1))
    assert none.critical(1e-4) == np.inf and none.band(1e-4) == (-np.inf, np.inf)


def _bias_fit(p, se):
    return analysis.ParticleBias(b=0.2, p=p, se=se, df=300, intercepts=np.zeros(4))


def _recorded(kw):
    from lib.claims import Claims
    claims = Claims("03-npiv-mean-field", "default")
    return claims.record(**kw)


def test_bias_order_claim_as_measured_needs_the_rival_outside_its_band():
    kw = dict(sigma=0.4, particles=[8, 16, 32], runs=32)
    wide = _recorded(analysis.bias_order_claim(_bias_fit(1.0, 0.4), _bias_fit(0.5, 0.1), 1e-4, **kw))
    assert wide.kind == "empirical" and wide.holds is False
    assert wide.power["detects"] is False and wide.power["effect"] == 0.5
    assert wide.power["detectable"] == pytest.approx(2 * 0.4 * _bias_fit(1.0, 0.4).critical(1e-4))
    assert wide.verdict == "not tested"
    narrow = _recorded(analysis.bias_order_claim(_bias_fit(1.0, 0.05), _bias_fit(0.5, 0.1), 1e-4,
                                                 **kw))
    assert narrow.holds and narrow.verdict == "reproduced"
    half = _recorded(analysis.bias_order_claim(_bias_fit(0.5, 0.05), _bias_fit(0.5, 0.1), 1e-4,
                                               **kw))
    assert not half.holds and half.verdict == "not reproduced"


def test_particle_bias_tells_one_over_n_from_one_over_root_n():
    rng = np.random.default_rng(5)
    N = np.array([8, 16, 32, 64, 128])
    noise = rng.standard_normal((5, 16, 8)) / N[:, None, None]
    one = analysis.particle_bias(0.3 / N[:, None, None] + 0.05 * noise, N)
    root = analysis.particle_bias(0.3 / np.sqrt(N)[:, None, None] + 0.05 * noise, N)
    assert abs(one.p - 1) < 3 * one.se and abs(root.p - 0.5) < 3 * root.se
    lo, hi = one.band(1e-4)
    assert not lo <= root.p <= hi


def test_stationarity_name_draws_apart_and_keeps_the_late_absolute_asymmetry():
    cfg = mf.F2BMLDConfig(steps=6, eta=0.2, zeta=0.5, record_every=2, tracker_steps=1,
                          flow_step=0.1)
    args = dict(particles=[8], reps=[0], n_inits=2, n=16, lam=1.0, sigma=0.4, cfg=cfg, root=0,
                late_from=0.2, n_test=20)
    a, again = experiments.stationarity(**args), experiments.stationarity(**args)
    other = experiments.stationarity(**args, name="particle-bias")
    np.testing.assert_array_equal(a["L"], again["L"])
    assert not np.allclose(a["L"], other["L"])
    np.testing.assert_allclose(a["late_abs_A"], np.abs(a["A"][..., a["t"] >= 0.2]).mean(-1))


def test_escape_taus_by_hand():
    small = np.array([[[4.0, 2.0], [np.nan, 3.0]], [[2.0, 2.0], [2.0, 2.0]]])
    e = analysis.escape_taus(small, np.array([[[1.0, 3.0], [2.0, 2.0]]]))
    assert (e.cold_small, e.hot_small, e.cold_spread) == (3.0, 2.0, 2.0) and e.explained
    assert not analysis.escape_taus(small, np.full((1, 2, 2), 2.5)).explained


def test_ope_power_by_hand():
    summary = {"rel_noises": [0.2, 0.4], "rel_truth": np.array([100.0, 80.0]),
               "rel_moved": np.array([0.9, 0.5]), "rel_ratio": np.array([0.5, 0.8]),
               "rel_err": np.array([[5.0, 5.0 * np.e], [10.0, 10.0]]),
               "dfiv_paired": np.array([[10.0, 10.0], [50.0, 50.0 * np.e ** 2]])}
    pw = analysis.ope_power(summary, {"variant": 0.1, "DFIV": 0.2}, "by hand")
    assert pw.effect == pytest.approx(1 - 6.5 / 12.2)  # the paper's largest ratio at 0.2 and 0.4
    var_f = np.mean([0.5, 0.0])  # log-error variances over the two data sets, per level
    var_d = np.mean([0.0, 2.0])
    se = 1.2533 * np.sqrt(var_f / 2 + var_d / 2)
    assert pw.detectable == pytest.approx(1 - np.exp(-2 * se))
    # the error floors (1 − m)·v over DFIV's medians: 10/10 and 40/median(50, 50e²): the
    # variant cannot come out ahead at 0.2
    assert pw.ceiling == pytest.approx(0.0, abs=1e-12)
    ahead = dict(summary, rel_moved=np.array([0.75, 0.5]), dfiv_paired=summary["dfiv_paired"] * 100)
    floor = max(25 / 1000.0, 40 / np.median([5000.0, 5000.0 * np.e ** 2]))
    assert analysis.ope_power(ahead, {"v": 0.1}, "x").ceiling == pytest.approx(1 - floor)
    assert pw.control is True and pw.matched is True
    assert analysis.ope_power(summary, {"variant": 0.3}, "x").control is False
    moved = dict(summary, rel_moved=np.array([0.9, 0.4]))
    assert analysis.ope_power(moved, {"variant": 0.1}, "x").matched is False
    one = dict(summary, rel_err=summary["rel_err"][:, :1])  # one data set: DFIV's scatter
    se1 = 1.2533 * np.sqrt(var_d / 1 + var_d / 2)
    assert analysis.ope_power(one, {"v": 0.1}, "x").detectable == pytest.approx(1 - np.exp(-2 * se1))


def test_level_crossing_is_exact_for_an_exponential():
    t = np.arange(0, 10, 0.5)
    gap = 2.0 * np.exp(-0.7 * t)
    assert analysis.level_crossing(t, gap, 0.1) == pytest.approx(np.log(20) / 0.7, rel=1e-12)
    assert np.isnan(analysis.level_crossing(t, gap, 1e-9))   # never
    assert np.isnan(analysis.level_crossing(t, gap, 3.0))    # already there at the start


def test_decay_shape_tells_an_exponential_from_a_power_law():
    t = np.arange(0, 40, 0.5)
    rng = np.random.default_rng(2)
    rates = np.exp(rng.normal(0, 0.2, (2, 3, 4)))[..., None]
    expo = analysis.decay_shape(t, 1.5 * np.exp(-rates * t), 0.3, 0.03)
    assert abs(expo.mean) < 1e-12 and expo.df == 5 and expo.log_ratio.shape == (6,)
    long = np.arange(0, 400, 0.5)
    power = 1.5 * (1 + rates * long) ** -1.0  # a power law (in 1 + t: finite at the start)
    pw = analysis.decay_shape(long, power, 0.3, 0.03)
    assert np.isfinite(pw.log_ratio).all() and pw.mean < -0.5 and pw.se < 0.1
    assert expo.band(1e-4)[1] == pytest.approx(expo.critical(1e-4) * expo.se)
    # the rival's prediction for a power law from t = 0 is what such a law gives
    pure = analysis.decay_shape(long[1:], 1.5 * (rates * long[1:]) ** -1.0, 0.3, 0.03)
    np.testing.assert_allclose(pure.log_ratio, pure.rival, atol=0.05)
    assert analysis.decay_shape(t, np.full((1, 2, 2, len(t)), 0.1), 0.3, 0.03).df == 1


def test_particle_bias_at_the_edge_of_its_range_has_no_error():
    N = np.array([8, 16, 32, 64, 128])
    # a value that falls like log N, not a power: the fit runs to the smallest exponent
    late = -0.01 * np.log(N)[:, None, None] + np.zeros((5, 4, 2))
    late[..., 0] += 1e-4 / N[:, None]
    late[..., 1] -= 1e-4 / N[:, None]
    fit = analysis.particle_bias(late, N)
    assert fit.p == pytest.approx(analysis.P_RANGE[0], abs=1e-4) and np.isnan(fit.se)
    claim = _recorded(analysis.bias_order_claim(fit, _bias_fit(0.5, 0.05), 1e-4,
                                                sigma=0.4, particles=N, runs=8))
    assert claim.holds is False and claim.verdict == "not tested"


def test_spread_scale_adds_the_noise_variance():
    from lib.npiv.analysis import spread_scale

    assert spread_scale(0.3, 0.08) == pytest.approx(0.5)          # 0.09 + 0.16 = 0.25
    assert spread_scale(0.3, 0.08, t=0.0) == pytest.approx(0.3)


def test_restart_check_extrapolates_from_the_smaller_particle_numbers():
    rng = np.random.default_rng(7)
    N = np.array([8, 16, 32, 64, 128, 1024])
    limits = np.array([-1.0, -1.2, -0.9])
    noise = rng.standard_normal((6, 3, 8)) * 0.02 / N[:, None, None]
    late = limits[None, :, None] + 0.3 / N[:, None, None] + noise
    rc = analysis.restart_check(late, N)
    np.testing.assert_allclose(rc.predicted, limits + 0.3 / 1024, atol=2e-4)
    np.testing.assert_allclose(rc.dev, late[-1] - rc.predicted[:, None])
    np.testing.assert_allclose(rc.z, rc.dev / late[-1].std(-1, ddof=1)[:, None])
    assert abs(rc.p - 1) < 0.1 and rc.best == rc.dev.min() and rc.z_min == rc.z.min()
    assert rc.mean == pytest.approx(rc.dev.mean())
    assert rc.se == pytest.approx(rc.dev.std(ddof=1) / np.sqrt(rc.dev.size))
    # one restart stuck above the limit (an initialisation it did not forget) stands out
    stuck = late.copy()
    stuck[-1, 0, 0] += 0.01
    assert analysis.restart_check(stuck, N).dev[0, 0] > 0.009


def test_released_variant_trace_records_the_estimate_and_changes_nothing():
    rng = np.random.default_rng(4)
    z, W = rng.standard_normal((64, 5)), rng.standard_normal((64, 5))
    Y, zs = rng.standard_normal(64), rng.standard_normal((20, 5))
    plain = baselines.AdamF2BMLD(iterations=12, inner_steps=2, batch=8).fit(z, W, Y, 0, ("t",))
    traced = baselines.AdamF2BMLD(iterations=12, inner_steps=2, batch=8).fit(
        z, W, Y, 0, ("t",), trace_z=zs, trace_every=4)
    np.testing.assert_array_equal(plain.predict(zs), traced.predict(zs))
    k, v = traced.trace
    np.testing.assert_array_equal(k, [4, 8, 12])
    assert v[-1] == pytest.approx(float(traced.predict(zs).mean()), rel=1e-6)
    assert len(plain.trace[0]) == 0


def test_ope_released_curve_fits_every_logged_transition():
    model = baselines.AdamF2BMLD(iterations=6, inner_steps=1, batch=8)
    r = experiments.ope_released_curve(0.4, 0, 10, model, 0, 0.9, trace_every=3, n_starts=5)
    rng = stream(0, "ope-data", 0.4, 0)
    assert r["transitions"] == len(cartpole.collect(10, 0.4, rng).a)
    np.testing.assert_array_equal(r["iterations"], [3, 6])
    assert r["estimate"].shape == (2,) and np.isfinite(r["truth"])


def test_shape_reading_says_where_the_mean_lies():
    assert "within two standard errors" in analysis.shape_reading(0.01, 0.01)
    assert "consistent with an exponential at this resolution" in analysis.shape_reading(0.036, 0.019)
    assert "faster" in analysis.shape_reading(0.05, 0.01)
    assert "slowing" in analysis.shape_reading(-0.05, 0.01)
    assert analysis.shape_reading(-0.05, 0.01).startswith("-0.050 ± 0.010")
    assert "no standard error" in analysis.shape_reading(0.1, float("nan"))


def test_energy_share_of_the_rate_change():
    assert analysis.energy_share(np.e ** 0.2, np.e ** 0.05) == pytest.approx(0.25)
    assert "entropy part" in analysis.entropy_share_reading(np.e ** 0.2, np.e ** 0.05)
    assert "energy's own" in analysis.entropy_share_reading(np.e ** 0.2, np.e ** 0.15)
    assert np.isnan(analysis.energy_share(1.0, 1.1))
    assert "neither" in analysis.entropy_share_reading(1.0, 1.1)


def test_bias_order_claim_needs_bands_around_1_and_half_that_do_not_overlap():
    # p inside 1's band and |p − ½| > h, but h ≥ ¼: an estimate could lie in both bands, so the
    # rule neither accepts 1 nor excludes ½
    kw = dict(sigma=0.4, particles=[8, 16, 32], runs=32)
    fit = _bias_fit(0.85, 0.3 / _bias_fit(0.85, 1.0).critical(1e-4))
    lo, hi = fit.band(1e-4)
    h = (hi - lo) / 2
    assert h == pytest.approx(0.3) and lo <= fit.p <= hi and abs(fit.p - 0.5) > h
    claim = _recorded(analysis.bias_order_claim(fit, _bias_fit(0.5, 0.1), 1e-4, **kw))
    assert claim.holds is False and claim.power["detects"] is False
    assert claim.verdict == "not tested"
    assert claim.simulation["h"] == pytest.approx(0.3)


def test_data_set_contrast_pairs_by_data_set_and_gives_its_50_percent_power_point():
    hot = np.array([[1.0, 3.0], [2.0, 2.0], [4.0, np.nan]])
    cold = np.zeros((3, 2))
    c = analysis.data_set_contrast(hot, cold)
    assert c.diff == pytest.approx([2.0, 2.0, 4.0]) and c.df == 2
    assert c.mean == pytest.approx(8 / 3)
    assert c.se == pytest.approx(np.std([2, 2, 4], ddof=1) / np.sqrt(3))
    from scipy.stats import t as student_t
    assert c.p_value == pytest.approx(student_t.sf(c.mean / c.se, 2))
    assert c.detectable(1e-3) == pytest.approx(student_t.isf(1e-3, 2) * c.se)
    assert np.isnan(analysis.data_set_contrast(hot[:1], cold[:1]).p_value)


def test_bookkeeping_gap_is_the_cold_energy_plus_the_hot_entropy_part():
    gap = np.arange(2 * 3 * 4, dtype=float).reshape(2, 1, 3, 4)
    egap = gap / 2
    assert analysis.bookkeeping_gap(gap, egap) == pytest.approx(egap[0] + gap[-1] - egap[-1])


def test_rate_and_shape_contrasts_read_exponentials():
    t = np.linspace(0, 20, 401)
    fast = np.exp(-np.array([[1.0, 1.1], [0.9, 1.0]])[..., None] * t)   # (data set, run, time)
    slow = np.exp(-np.array([[0.5, 0.55], [0.45, 0.5]])[..., None] * t)
    r = analysis.rate_contrast(t, fast, slow, 0.01)
    assert r.mean == pytest.approx(np.log(2), rel=1e-2)
    s = analysis.shape_contrast(t, fast, slow, 0.3, 0.03)
    assert abs(s.mean) < 1e-2  # both exponential: log(d₁/d₂) ≈ 0 on each side
    assert analysis.interpolated_rates(t, fast, 0.01)[0, 0] == pytest.approx(1.0, rel=1e-2)


def test_long_run_reading_names_the_overshoot_the_swing_and_the_unsettled_tail():
    it = np.arange(1000, 9000, 1000)
    est = np.array([10.6, 48.8, 85.5, 97.1, 125.3, 144.9, 139.5, 162.9])
    text = analysis.long_run_reading(it, est, 87.6, 0.99, 0.4, 485961, horizon=1000)
    assert "passes above 100" in text and "162.9 after 8000" in text
    assert "after 3000 iterations (85.5), a point it passes on a swing" in text
    assert "has not settled" in text and "final error is 75.3" in text
    assert "median 6.5 (quartiles [3.2, 8.7])" in text
    # the two errors are about different true values, and the words say which
    assert "87.6 here" in text and "1000-step horizon" in text
    assert "the paper's 83.69" in text and "500-step cap" in text
    flat = analysis.long_run_reading(it, np.full(8, 87.0), 87.6, 0.99, 0.1, 10, horizon=1000)
    assert "passes above" not in flat and "swing" not in flat and "not settled" not in flat
    assert "paper's median" not in flat and "different values" not in flat


def test_contrast_glue_reads_the_energy_against_its_50_percent_power_point():
    def c(m, se):
        return analysis.DataSetContrast(np.array([m]), m, se, 3, 0.01)
    cs = {"free energy": c(0.2, 0.01), "bookkeeping rival": c(0.1, 0.01), "energy": c(0.05, 0.01)}
    g = analysis.contrast_glue("rate", cs, 1e-4)
    from scipy.stats import t as student_t
    assert g["rate_energy_value"] == pytest.approx(np.exp(0.05))
    assert g["rate_energy_detect"] == pytest.approx(np.exp(student_t.isf(1e-4, 3) * 0.01))
    assert g["rate_book_share"] == pytest.approx(0.5)
    assert "not resolvable" in g["rate_energy_reading"]
    cs["energy"] = c(0.5, 0.01)
    g = analysis.contrast_glue("shape", cs, 1e-4)
    assert g["shape_energy_value"] == pytest.approx(0.5) and "resolvable" in g["shape_energy_reading"]
    assert "not" not in g["shape_energy_reading"]


def test_restart_reading_says_whether_the_mean_shift_is_resolved():
    dev = np.array([[0.001, -0.001, 0.0005, -0.0005]])
    ok = analysis.RestartCheck(np.zeros(1), dev, dev / 0.001, np.zeros(1), 1.0)
    assert "within 2 standard errors" in analysis.restart_reading(ok)
    assert "no run lies further than 1.0 of its data set's standard deviations over runs" in \
        analysis.restart_reading(ok)
    shifted = analysis.RestartCheck(np.zeros(1), dev - 0.003, (dev - 0.003) / 0.001, np.zeros(1), 1.0)
    text = analysis.restart_reading(shifted)
    assert "standard errors over runs from 0" in text and "within 2" not in text


def test_annealing_at_factor_one_is_the_plain_run_and_is_measured_at_sigma():
    s = demand.sample(32, np.random.default_rng(0))
    T = lambda x: torch.tensor(x[None], dtype=torch.float32)  # noqa: E731
    data = mf.IVData(mf.Inputs(T(s.A)), T(s.W), T(s.Y))
    cfg = mf.F2BMLDConfig(n_particles=16, steps=40, eta=0.2, zeta=0.5, sigma=0.05,
                          record_every=5, init_scale=0.5)
    plain = mf.f2bmld(data, 1.0, cfg, root=1)
    same = mf.f2bmld(data, 1.0, replace(cfg, anneal_factor=1.0, anneal_steps=20), root=1)
    np.testing.assert_array_equal(same.L, plain.L)
    np.testing.assert_array_equal(same.a.x, plain.a.x)
    hot = mf.f2bmld(data, 1.0, replace(cfg, anneal_factor=20.0, anneal_steps=40), root=1)
    assert hot.L[0, 0] == plain.L[0, 0]         # the same start, measured at σ, not 20σ
    assert not np.array_equal(hot.L[1:], plain.L[1:])
    # the hotter noise leaves the clouds wider than the plain run's
    assert hot.a.x.std() > 1.2 * plain.a.x.std()
    # cooled early and held at σ: the temperature after the schedule is σ itself (the same
    # coefficients as the plain run: a cooled run's later steps are plain steps)
    early = mf.f2bmld(data, 1.0, replace(cfg, anneal_factor=20.0, anneal_steps=1), root=1)
    np.testing.assert_array_equal(early.L[0], plain.L[0])


def test_restarts_run_on_the_stationarity_data_sets_from_their_own_draws():
    cfg = mf.F2BMLDConfig(steps=20, eta=0.2, zeta=0.5, record_every=2, tracker_steps=1,
                          flow_step=0.1)
    r = experiments.restarts(8, [0, 1], 3, 16, 1.0, 0.1, cfg, 0, late_from=1.0,
                             scales=(1.5, 3.0), anneal_factor=4.0, anneal_time=0.5)
    assert r["L"].shape == (2, 3, 11) and r["late"].shape == (2, 3)
    np.testing.assert_allclose(r["late"], r["L"][..., r["t"] >= 1.0].mean(-1))
    cooling = (r["t"] >= 0.25) & (r["t"] < 0.5)
    assert cooling.sum() >= 1
    np.testing.assert_allclose(r["early"], r["L"][..., cooling].mean(-1))
    held = (r["t"] >= 0.5) & (r["t"] < 0.75)
    assert held.sum() >= 1
    np.testing.assert_allclose(r["settling"], r["L"][..., held].mean(-1))
    np.testing.assert_allclose(r["init_scales"], np.tile(np.geomspace(1.5, 3.0, 3), 2))
    samples = [demand.sample(16, stream(0, "stationarity-data", s)) for s in (0, 1)]
    data = experiments.demand_batch([x for x in samples for _ in range(3)])
    run = mf.f2bmld(data, 1.0, replace(cfg, n_particles=8, sigma=0.1,
                                       init_scale=torch.as_tensor(r["init_scales"], dtype=mf.DTYPE),
                                       anneal_factor=4.0, anneal_steps=5), 0, ("restarts", 8))
    np.testing.assert_allclose(r["L"], run.L_tracker.T.reshape(2, 3, -1))
    st = experiments.stationarity([8], [0, 1], 3, 16, 1.0, 0.1, cfg, 0, late_from=1.0)
    assert not np.allclose(st["L"][0, :, :, 0], r["L"][..., 0])  # not the design's own starts


def test_independent_restarts_read_the_interval_against_the_fitted_limit():
    from lib.stats import t_interval

    rng = np.random.default_rng(3)
    N = np.array([16, 32, 64, 128, 512])
    limits = np.array([-1.0, -1.2, -0.9, -1.1])
    sd = 0.002
    main = limits[None, :, None] + 0.3 / N[:, None, None] + sd * rng.standard_normal((5, 4, 8))
    at_limit = limits[:, None] + 0.3 / 512 + sd * rng.standard_normal((4, 6))
    ok = analysis.independent_restarts(at_limit, main, N)
    np.testing.assert_allclose(ok.predicted, limits + 0.3 / 512, atol=2e-3)
    np.testing.assert_allclose(ok.dev, at_limit - ok.predicted[:, None])
    np.testing.assert_allclose(ok.sd, main[-1].std(-1, ddof=1))
    np.testing.assert_allclose(ok.paired, at_limit.mean(-1) - main[-1].mean(-1))
    m, lo, hi = ok.mean
    assert m == pytest.approx(ok.dev.mean()) and lo < m < hi
    assert (m, lo, hi) == pytest.approx(t_interval(ok.dev.mean(-1)))
    assert ok.best == ok.dev.min()
    np.testing.assert_allclose(ok.restart_sd, at_limit.std(-1, ddof=1))
    d, m = np.unravel_index(np.argmin(ok.dev), ok.dev.shape)
    assert ok.best_z == pytest.approx(ok.dev[d, m] / ok.restart_sd[d])  # the restarts' own spread
    text = analysis.independent_reading(ok)
    assert "both 95% intervals" in text and "hold 0" in text
    assert "reach the same stationary value in their means" in text
    assert "within 4 restart standard deviations" in text and "optimum" not in text
    lower = analysis.independent_restarts(at_limit - 10 * sd, main, N)
    assert lower.mean[2] < 0 and lower.paired_mean[2] < 0 and lower.best_z < -4
    low = analysis.independent_reading(lower)
    assert "wholly below 0" in low and "main runs had not reached the stationary law" in low
    assert "more than 4 restart standard deviations below" in low and "optimum" not in low
    higher = analysis.independent_reading(analysis.independent_restarts(at_limit + 10 * sd, main, N))
    assert "wholly above 0" in higher and "the restarts had not reached" in higher
    assert "even the best restart lies more than 4" in higher and "within 4" not in higher
    # the fit misses while the restarts agree with the main runs: the fitted interval off 0, the
    # paired one on it
    offset = analysis.IndependentRestarts(ok.predicted, ok.dev + 10 * sd, ok.sd, ok.paired,
                                          restart_sd=ok.restart_sd, main_runs=8)
    missed = analysis.independent_reading(offset)
    assert "wholly above 0" in missed and "fit misses at this N" in missed
    assert "had not reached" not in missed
    assert "90%" in analysis.independent_reading(analysis.independent_restarts(at_limit, main, N, 0.9))
    one = analysis.independent_restarts(at_limit[:1], main[:, :1], N)
    assert np.isnan(one.mean[1]) and "one data set" in analysis.independent_reading(one)


def test_spread_reading_tells_main_runs_that_spread_more_from_equal_spreads():
    rng = np.random.default_rng(5)
    N = np.array([16, 32, 64, 128, 512])
    main = -1.0 + 0.3 / N[:, None, None] + 0.002 * rng.standard_normal((5, 4, 8))
    equal = analysis.independent_restarts(-1.0 + 0.3 / 512 + 0.002 * rng.standard_normal((4, 6)),
                                          main, N)
    ratio, df1, df2, p = equal.variance_ratio
    assert (df1, df2) == (28, 20)
    assert ratio == pytest.approx(np.mean(equal.sd ** 2) / np.mean(equal.restart_sd ** 2))
    tight = analysis.independent_restarts(-1.0 + 0.3 / 512 + 0.0004 * rng.standard_normal((4, 6)),
                                          main, N)
    assert tight.variance_ratio[0] > 5 and tight.variance_ratio[3] < 1e-3
    assert "the main runs spread more" in analysis.spread_reading(tight)
    assert "offset" in analysis.spread_reading(tight)
    assert p >= 0.05 and "do not differ" in analysis.spread_reading(equal)
    wide = analysis.independent_restarts(-1.0 + 0.3 / 512 + 0.01 * rng.standard_normal((4, 6)),
                                         main, N)
    assert "the restarts spread more" in analysis.spread_reading(wide)


def test_margin_rereading_states_the_bias_direction_and_both_readings():
    c = analysis.DataSetContrast
    at = {q: c(np.zeros(4), v, 0.01, 3, 0.01) for q, v in
          (("free energy", 0.2), ("bookkeeping rival", 0.1), ("energy", 0.05))}
    floors = {"free energy": 0.002, "energy": 0.004}
    assert analysis.margin_level(floors, 10.0) == pytest.approx(0.04)
    text = analysis.margin_rereading(0.03, 0.04, at, at, 10.0)
    assert "hotter is faster" in text and "0.04" in text and "at ε = 0.03" in text
    assert f"{np.exp(0.2):.3f}" in text and "50%" in text
    assert "no such bias" in analysis.margin_rereading(0.05, 0.04, at, at, 10.0)


def test_ratio_direction_reading_says_which_way_the_ratios_point():
    against = analysis.ratio_direction_reading([0.2, 0.3, 0.4], [0.09, 1.55, 1.25])
    assert "ahead of DFIV at noise 0.2" in against and "behind DFIV at noise 0.3, 0.4" in against
    assert "against the paper" in against
    assert "the paper's way" in analysis.ratio_direction_reading([0.2, 0.4], [0.8, 0.5])
    assert "against" in analysis.ratio_direction_reading([0.2, 0.4], [0.5, 0.8])


def test_late_sd_by_gap_is_each_gaps_largest_late_fluctuation():
    t = np.arange(10.0)
    quiet = np.zeros((2, 3, 10))
    loud = quiet.copy()
    loud[1, 2, 5:] = [1.0, -1.0, 1.0, -1.0, 1.0]
    sds = analysis.late_sd_by_gap(t, {"a": quiet, "b": loud}, late_from=5.0)
    assert sds["a"] == 0.0
    assert sds["b"] == pytest.approx(np.std([1.0, -1.0, 1.0, -1.0, 1.0]))
    # before the late stretch nothing counts
    early = quiet.copy()
    early[0, 0, :5] = 9.0
    assert analysis.late_sd_by_gap(t, {"c": early}, 5.0)["c"] == 0.0


def test_ope_regime_text_never_calls_subsampled_fits_the_papers_regime():
    paper = analysis.ope_regime_text(0.99, 0.3, 2000, 512, 3, 1000, 3000)
    assert "at the paper's γ = 0.99 and λ = 0.3" in paper and "as in the paper" in paper
    assert "smaller than the paper's regime" in paper and "512 transitions" in paper
    assert "3000 iterations (theirs 80000)" in paper and "3 data sets" in paper
    assert "in the paper's regime" not in paper
    small = analysis.ope_regime_text(0.9, 0.3, 50, 256, 1, 500, 200)
    assert "(the paper's: 0.99, 0.3)" in small and "(the paper's 2000)" in small
    assert "1 data set per" in small


def test_power_of_ten_and_the_authors_scale():
    assert analysis.power_of_ten(1e-4) == "10⁻⁴" and analysis.power_of_ten(1e4) == "10⁴"
    assert analysis.power_of_ten((1 - 0.99) ** 2) == "10⁻⁴"
    assert analysis.power_of_ten(3e-3) == "3.0e-03"
    # 11 seeds × 5 noise levels × 80 000 iterations at 3.6 ms each
    assert analysis.paper_ope_cpu_hours() == pytest.approx(11 * 5 * 80000 * 3.6e-3 / 3600)
    assert analysis.paper_ope_cpu_hours() == pytest.approx(4.4)


def test_level_reading_names_the_gaps_short_of_the_margin():
    ok = analysis.level_reading(0.03, {"free energy": 0.002, "energy": 0.001}, 10.0)
    assert "ε is 15.0 times it" in ok and "every gap read at ε clears the margin of 10" in ok
    short = analysis.level_reading(0.03, {"free energy": 0.002, "energy": 0.0043,
                                          "rival": 0.004}, 10.0)
    assert "energy, rival fall short of the margin of 10" in short
    assert "free energy" not in short.split(":")[-1]
    one = analysis.level_reading(0.03, {"free energy": 0.002, "energy": 0.0043}, 10.0)
    assert "energy falls short" in one and "its readings" in one
