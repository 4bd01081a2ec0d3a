"""Tests of lib.label_noise: the model against autograd and by hand, the coefficient
recursions against weight-space GD, the theory formulas, and the selection helpers."""

import math

import numpy as np
import pytest
import torch

from lib import label_noise as M
from lib.seeding import stream


def small_problem(n=6, d=30, m=3, tau=0.3, seed=0, sigma0=0.1, orthogonal=False):
    rng = np.random.default_rng(seed)
    data = M.make_data(n, d, mu_norm=2.0, rng=rng, tau_pos=tau, tau_neg=tau, orthogonal=orthogonal)
    return data, M.init_weights(m, d, sigma0, rng)


def test_output_by_hand():
    # m = 1, d = 2: w₊ = (1, 0), w₋ = (0, 1); sample y = +1, μ = (2, 0), ξ = (−1, 3).
    W = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    mu, xi, y = np.array([2.0, 0.0]), np.array([[-1.0, 3.0]]), np.array([1.0])
    pre_mu, pre_xi = M.preactivations(W, mu, xi)
    # F₊ = σ(2) + σ(−1) = 2, F₋ = σ(0) + σ(3) = 3, f = −1.
    assert M.output(pre_mu, pre_xi, y) == pytest.approx([-1.0])
    # With y = −1 the signal patch is −μ: F₊ = σ(−2) + σ(−1) = 0, F₋ = σ(0) + σ(3) = 3.
    assert M.output(pre_mu, pre_xi, -y) == pytest.approx([-3.0])


def test_gd_step_matches_autograd():
    data, W0 = small_problem()
    eta = 0.3
    W = torch.tensor(W0, requires_grad=True)
    X = torch.tensor(data.inputs())                                    # (n, 2, d)
    pre = torch.einsum("jrd,ipd->jrip", W, X)
    f = torch.relu(pre).sum(dim=3).mean(dim=1)                         # (2, n): F₊, F₋
    margin = torch.tensor(data.y_obs) * (f[0] - f[1])
    torch.nn.functional.softplus(-margin).mean().backward()
    expected = W0 - eta * W.grad.numpy()
    np.testing.assert_allclose(M.gd_step(W0, data, eta), expected, rtol=1e-12, atol=1e-14)


def test_loss_helpers_are_stable():
    z = np.array([-800.0, -1.0, 0.0, 2.0, 800.0])
    np.testing.assert_allclose(M.loss_derivative(z), -1 / (1 + np.exp(np.clip(z, -700, 700))),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(M.logistic_loss(z), [800.0, math.log1p(math.e), M.LOG2,
                                                   math.log1p(math.exp(-2)), 0.0], atol=1e-15)


def test_project_recovers_known_coefficients():
    data, W0 = small_problem(orthogonal=True)
    rng = np.random.default_rng(1)
    gamma, rho = rng.normal(size=(2, 3)), rng.normal(size=(2, 3, data.n))
    W = (W0 + (M.J[:, None] * gamma)[:, :, None] * data.mu / (data.mu @ data.mu)
         + rho @ (data.xi / np.sum(data.xi**2, axis=1, keepdims=True)))
    coef, residual = M.project(W, W0, data.mu, data.xi)
    np.testing.assert_allclose(coef.gamma, gamma, atol=1e-10)
    np.testing.assert_allclose(coef.rho, rho, atol=1e-10)
    assert residual < 1e-12
    # A direction outside span{μ, ξ_i} leaves a residual.
    _, residual = M.project(W + rng.normal(size=W.shape), W0, data.mu, data.xi)
    assert residual > 0.1


@pytest.mark.parametrize("orthogonal", [False, True])
def test_recursion_matches_weight_space_gd(orthogonal):
    data, W0 = small_problem(n=8, d=40, m=4, orthogonal=orthogonal)
    eta = 0.5
    gd, W = M.CoefficientGD(W0, data, eta), W0.copy()
    for _ in range(200):
        gd.step()
        W = M.gd_step(W, data, eta)
    coef, residual = M.project(W, W0, data.mu, data.xi)
    scale = np.abs(gd.coef.stacked()).max()
    assert scale > 0.1                                   # the run actually moved
    assert np.abs(coef.stacked() - gd.coef.stacked()).max() <= 1e-9 * scale
    assert residual < 1e-10
    # The recursion's margins are those of the weights.
    margins = data.y_obs * M.output(*M.preactivations(W, data.mu, data.xi), data.y)
    np.testing.assert_allclose(gd.margins(), margins, rtol=1e-9, atol=1e-12)


def test_test_set_output_matches_weights():
    data, W0 = small_problem()
    test = M.make_data(50, data.d, 2.0, np.random.default_rng(5), mu=data.mu)
    gd, W = M.CoefficientGD(W0, data, 0.4), W0.copy()
    for _ in range(20):
        gd.step()
        W = M.gd_step(W, data, 0.4)
    expected = M.output(*M.preactivations(W, test.mu, test.xi), test.y)
    np.testing.assert_allclose(M.TestSet(gd, W0, test).output(), expected, rtol=1e-10, atol=1e-12)


def test_train_records_and_reference_agree():
    data, W0 = small_problem(n=10, d=60, m=3, tau=0.2)
    test = M.make_data(40, 60, 2.0, np.random.default_rng(2), mu=data.mu)
    record = M.log_steps(50, 8, extra=(17,))
    h = M.train(data, test, W0, 0.4, record, reference_every=True)
    assert list(h.steps) == sorted(set(record)) and h.margins.shape == (len(record), 10)
    assert h.extras["coef_rel_err"].max() < 1e-9
    assert h.at(17) == list(h.steps).index(17)
    with pytest.raises(KeyError):
        h.at(18)


def test_first_step_noise_coefficient_exact():
    # From ρ = 0 a step adds η‖ξ_i‖²|ℓ′_i|/(nm) to ρ_{ỹ_i,r,i} of every filter with ⟨w⁽⁰⁾, ξ_i⟩ > 0.
    data, W0 = small_problem()
    eta, n, m = 0.2, data.n, W0.shape[1]
    gd = M.CoefficientGD(W0, data, eta)
    lp = M.loss_derivative(gd.margins())
    gd.step()
    for i in range(n):
        j = 0 if data.y_obs[i] > 0 else 1
        on = W0[j] @ data.xi[i] > 0
        expected = np.where(on, eta * (data.xi[i] @ data.xi[i]) * abs(lp[i]) / (n * m), 0.0)
        np.testing.assert_allclose(gd.coef.rho[j, :, i], expected, rtol=1e-12)


def early_growth(n, d, m=4, eta=0.5, tau=0.2, steps=3, seed=3):
    rng = np.random.default_rng(seed)
    mu_norm = M.mu_norm_for(5.0, n, d)
    data = M.make_data(n, d, mu_norm, rng, tau_pos=tau, tau_neg=tau)
    gd = M.CoefficientGD(M.init_weights(m, d, 1e-4, rng), data, eta)
    for _ in range(steps):
        gd.step()
    return gd, M.stage_one_rates(n, m, d, eta, mu_norm, 1.0, tau)


def test_stage_one_rates_match_early_growth():
    # γ: many samples, so that the flipped fraction is close to τ.
    gd, (dgamma, _) = early_growth(n=2000, d=200)
    assert gd.coef.gamma.mean() / 3 == pytest.approx(dgamma, rel=0.1)
    # ρ: one step, on the filters that ξ_i activates at initialisation.
    gd, (_, drho) = early_growth(n=200, d=4000, eta=0.01, steps=1)
    grown = gd.coef.rho[gd.coef.rho > 0]
    assert grown.mean() == pytest.approx(drho, rel=0.02)


def test_theory_formulas():
    assert M.t1_prediction(n=200, m=20, eta=0.2, sigma_xi=1.0, d=800) == pytest.approx(25.0)
    assert M.t1_prediction(n=200, m=20, eta=0.2, sigma_xi=2.0, d=800) == pytest.approx(6.25)
    np.testing.assert_allclose(M.heuristic_boundary([0.0, 0.25]), [2.0, 4.0])
    mu_norm = M.mu_norm_for(10.0, n=200, d=800)
    assert 200 * M.snr(mu_norm, 1.0, 800) ** 2 == pytest.approx(10.0)
    # The slope ratio is the heuristic's (1 − 2τ)·n·SNR²/2.
    g, r = M.stage_one_rates(200, 20, 800, 0.2, mu_norm, 1.0, 0.1)
    assert g / r == pytest.approx((1 - 0.2) * 10.0 / 2)


def test_make_data_flips_and_options():
    rng = np.random.default_rng(0)
    data = M.make_data(20000, 5, 1.0, rng, tau_pos=0.1, tau_neg=0.3)
    flipped = ~data.clean
    for label, tau in [(1.0, 0.1), (-1.0, 0.3)]:
        rate = flipped[data.y == label].mean()
        assert abs(rate - tau) < 4 * math.sqrt(tau * (1 - tau) / 10000)
    orth = M.make_data(50, 10, 3.0, rng, orthogonal=True)
    assert np.abs(orth.xi @ orth.mu).max() < 1e-12 and np.linalg.norm(orth.mu) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="flip rates"):
        M.make_data(5, 5, 1.0, rng, tau_pos=0.5)
    a = M.make_data(30, 7, 1.0, np.random.default_rng(9), tau_pos=0.2, tau_neg=0.2)
    b = M.make_data(30, 7, 1.0, np.random.default_rng(9), tau_pos=0.2, tau_neg=0.2)
    np.testing.assert_array_equal(a.xi, b.xi)
    np.testing.assert_array_equal(a.y_obs, b.y_obs)


def test_selection_and_stages():
    losses = M.logistic_loss(np.array([2.0, 0.5, -0.1, -3.0, 0.0]))
    selected = M.select_small_loss(losses)
    np.testing.assert_array_equal(selected, [True, True, False, False, True])
    clean = np.array([True, True, True, False, False])
    assert M.precision_recall(selected, clean) == pytest.approx((2 / 3, 2 / 3))

    # Two clean samples and one noisy; clean fitted at step 2, noisy at step 8.
    margins = np.array([[-1, -1, 1], [1, 1, -1], [1, 1, -1], [1, 1, 1]], float)
    h = M.History(steps=np.array([0, 2, 4, 8]), clean=np.array([True, True, False]),
                  margins=margins, test_accuracy=np.zeros(4), gamma_max=np.zeros(4),
                  rho_max=np.zeros((4, 3)))
    assert M.detect_stages(h) == (2, 8)                  # the noisy fit at step 0 does not count
    assert M.stage_one_appears(h)
    h.margins[1:3, 2] = 1.0
    assert not M.stage_one_appears(h)


def test_the_noisy_samples_overtake_when_their_mean_rho_passes_gamma():
    # samples 0, 1 clean, 2 and 3 noisy: their mean max ρ is 0, 0.5, 1.5 against max γ = 1
    rho = np.array([[9, 9, 0, 0], [9, 9, 0, 1], [9, 9, 1, 2]], float)
    h = M.History(steps=np.array([0, 5, 10]), clean=np.array([True, True, False, False]),
                  margins=np.zeros((3, 4)), test_accuracy=np.zeros(3), gamma_max=np.ones(3), rho_max=rho)
    assert h.mean_rho_max("noisy").tolist() == [0, 0.5, 1.5] and h.mean_rho_max("clean").tolist() == [9, 9, 9]
    assert M.overtake_step(h) == 10
    h.gamma_max[:] = 2.0
    assert M.overtake_step(h) is None
    assert M.stack_runs([h, h], lambda r: r.gamma_max).shape == (3, 2)


def test_log_steps():
    s = M.log_steps(1000, 10, extra=(25,))
    assert s[0] == 0 and s[-1] == 1000 and 25 in s and np.all(np.diff(s) > 0)


def test_digits_task_and_training_are_deterministic():
    a = M.digits_task((3, 8), 0.2, 0.4, np.random.default_rng(0))
    b = M.digits_task((3, 8), 0.2, 0.4, np.random.default_rng(0))
    np.testing.assert_array_equal(a.y_obs, b.y_obs)
    assert a.x_train.shape[1:] == (1, 8, 8) and set(np.unique(a.y_train)) == {-1.0, 1.0}
    assert 0.05 < (~a.clean).mean() < 0.4 and a.x_train.max() <= 1.0
    with pytest.raises(ValueError):
        M.digits_task((3, 8), 0.6, 0.4, np.random.default_rng(0))
    h1 = M.train_digits(a, epochs=2, lr=0.02, batch=32, seed=1, width=4, root=7)
    h2 = M.train_digits(a, epochs=2, lr=0.02, batch=32, seed=1, width=4, root=7)
    assert h1["test"].shape == (3,)
    for k in h1:
        np.testing.assert_array_equal(h1[k], h2[k])
    # another replicate or another chapter seed: another initialisation and batch order
    for other in (dict(seed=2, root=7), dict(seed=1, root=8)):
        h3 = M.train_digits(a, epochs=2, lr=0.02, batch=32, width=4, **other)
        assert any(not np.array_equal(h1[k], h3[k]) for k in ("clean", "noisy", "test"))


def test_stage_two_bound_and_noisy_label_error():
    assert M.stage_two_bound(0.1, 0.3) == pytest.approx(0.05)
    assert M.stage_two_bound(0.2, 0.2) == pytest.approx(0.1)
    # a classifier right on every fresh sample errs on the flipped test labels only
    assert M.noisy_label_error(0.0, 0.0, 0.1, 0.3) == pytest.approx(0.2)
    # one that is always wrong errs exactly on the unflipped ones
    assert M.noisy_label_error(1.0, 1.0, 0.1, 0.3) == pytest.approx(0.8)
    # by Monte Carlo: class +1 wrong with probability 0.25, class −1 right
    rng = np.random.default_rng(0)
    y = rng.choice([-1.0, 1.0], size=200_000)
    pred = np.where((y > 0) & (rng.random(y.size) < 0.25), -y, y)
    y_obs = np.where(rng.random(y.size) < np.where(y > 0, 0.1, 0.3), -y, y)
    assert np.mean(pred != y_obs) == pytest.approx(M.noisy_label_error(0.25, 0.0, 0.1, 0.3), abs=0.005)


def test_run_synthetic_asymmetric_flips_and_class_accuracy():
    kw = dict(root=3, experiment="test", n=400, d=60, m=3, n_snr2=5.0, sigma_xi=1.0, sigma0=0.01, eta=0.1,
              steps=5, n_test=300, record_points=3)
    a = M.run_synthetic(0.1, 0, tau_neg=0.4, **kw)["history"]
    sym = M.run_synthetic(0.1, 0, **kw)["history"]
    none = M.run_synthetic(0.0, 0, **kw)["history"]
    rng = stream(3, "test", 0)
    mu_norm = M.mu_norm_for(5.0, 400, 60)
    data = M.make_data(400, 60, mu_norm, rng, tau_pos=0.1, tau_neg=0.4)
    test = M.make_data(300, 60, mu_norm, rng, mu=data.mu)
    np.testing.assert_array_equal(a.clean, data.clean)
    # the same uniforms decide the flips: a larger rate flips a superset of the samples
    assert np.all(~sym.clean <= ~a.clean) and none.clean.all()
    pos = data.y > 0
    assert (~a.clean[~pos]).mean() > (~a.clean[pos]).mean()
    # overall test accuracy is the class-weighted mean of the per-class accuracies
    share = np.mean(test.y > 0)
    np.testing.assert_allclose(a.test_accuracy, share * a.extras["test_acc_pos"]
                               + (1 - share) * a.extras["test_acc_neg"], atol=1e-12)


def test_train_to_loss_stops_at_the_target_and_agrees_with_train():
    data, W0 = small_problem(n=8, d=60, m=3, tau=0.25, sigma0=0.01)
    test = M.make_data(50, 60, 2.0, np.random.default_rng(5), mu=data.mu)
    out = M.train_to_loss(data, test, W0, eta=0.05, target_loss=0.3, max_steps=20000, check_every=7)
    assert out["reached"] and out["final_loss"] <= 0.3 and out["loss"][-1] == out["final_loss"]
    assert out["steps"][-1] == out["steps_run"]
    # the same run by train(): same loss and test error at the last step
    h = M.train(data, test, W0, 0.05, np.array([0, out["steps_run"]]))
    assert M.logistic_loss(h.margins[-1]).mean() == pytest.approx(out["final_loss"], rel=1e-12)
    assert 1 - h.test_accuracy[-1] == pytest.approx(out["errors"] / test.n)
    # stopped by the cap when the target cannot be reached in time
    capped = M.train_to_loss(data, test, W0, eta=0.05, target_loss=1e-9, max_steps=30)
    assert not capped["reached"] and capped["steps_run"] == 30 and capped["steps"][-1] == 30


def test_keep_test_matches_test_accuracy():
    data, W0 = small_problem()
    test = M.make_data(40, 30, 2.0, np.random.default_rng(3), mu=data.mu)
    h = M.train(data, test, W0, 0.2, np.array([0, 3, 10]), keep_test=True)
    np.testing.assert_allclose(h.extras["test_right"].mean(axis=1), h.test_accuracy)


def test_count_tests_against_brute_force():
    def pmf(k, n, p):
        return math.comb(n, k) * p**k * (1 - p) ** (n - k)

    assert M.p_rate_at_least(3, 20, 0.1) == pytest.approx(sum(pmf(k, 20, 0.1) for k in range(4)))
    assert M.p_rate_at_most(3, 20, 0.1) == pytest.approx(sum(pmf(k, 20, 0.1) for k in range(3, 21)))
    assert M.p_rate_at_most(0, 20, 0.1) == 1.0
    assert M.log10_p_rate_at_least(3, 20, 0.1) == pytest.approx(math.log10(M.p_rate_at_least(3, 20, 0.1)))
    assert M.log10_p_rate_at_least(0, 10_000, 0.1) == pytest.approx(10_000 * math.log10(0.9))
    # McNemar: 9 worse, 1 better -> P(Bin(10, 1/2) >= 9) = 11/1024
    assert M.p_rise(9, 1) == pytest.approx(11 / 1024)
    assert M.p_rise(0, 5) == 1.0
    # the smallest detectable rise: with no improvements, 10 worse points give p = 2^-10 < 1e-3
    assert M.smallest_detectable_rise(0, 1000, 1e-3) == pytest.approx(10 / 1000)
    r = M.smallest_detectable_rise(4, 1000, 1e-3)
    worse = round(r * 1000) + 4
    assert M.p_rise(worse, 4) < 1e-3 <= M.p_rise(worse - 1, 4)


def test_benign_exponent():
    assert M.benign_exponent(10.0, 100, 10_000) == pytest.approx(100 * 100)


def test_pairwise_sum_is_numpys_sum():
    from lib.label_noise.compiled import pairwise_sum

    rng = np.random.default_rng(5)
    for n in [*range(1, 140), 255, 256, 1000, 4099]:
        x = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
        assert pairwise_sum(x, 0, n) == x.sum()


@pytest.mark.parametrize("n, d, m, tau", [(13, 40, 3, 0.2), (50, 300, 4, 0.3), (200, 800, 10, 0.2)])
def test_compiled_coefficient_step_is_the_numpy_step(n, d, m, tau):
    """The compiled step against the numpy recursion: the same γ and ρ, bit for bit."""
    rng = np.random.default_rng(3)
    data = M.make_data(n, d, M.mu_norm_for(10.0, n, d), rng, tau_pos=tau, tau_neg=tau)
    W0 = M.init_weights(m, d, 0.01, rng)
    ref, fast = M.CoefficientGD(W0, data, 0.1, compiled=False), M.CoefficientGD(W0, data, 0.1)
    for _ in range(150):
        ref.step()
        fast.step()
    assert np.array_equal(ref.coef.gamma, fast.coef.gamma) and np.array_equal(ref.coef.rho, fast.coef.rho)
    assert np.array_equal(ref.margins(), fast.margins()) and np.abs(fast.coef.rho).max() > 0


def test_reuse_test_set_reuses_training_noise_with_fresh_labels():
    data, _ = small_problem(n=8, d=40)
    test, k = M.make_reuse_test(data, 500, np.random.default_rng(1), sigma_zeta=0.0)
    assert test.n == 500 and k.min() >= 0 and k.max() < data.n
    np.testing.assert_array_equal(test.xi, data.xi[k])          # σ_ζ = 0: the training vectors themselves
    np.testing.assert_array_equal(test.y, test.y_obs)
    assert 0.4 < np.mean(test.y > 0) < 0.6                      # labels drawn afresh, not the samples'
    assert np.mean(test.y == data.y[k]) < 0.6
    noisy, _ = M.make_reuse_test(data, 200, np.random.default_rng(1), sigma_zeta=0.5)
    resid = noisy.xi - data.xi[k[:200]]
    assert resid.std() == pytest.approx(0.5, rel=0.05)


def test_p_rates_at_least_is_the_binomial_sum():
    def pmf(k, n, p):
        return math.comb(n, k) * p**k * (1 - p) ** (n - k)

    conv = sum(pmf(a, 5, 0.2) * pmf(b, 7, 0.4) for a in range(6) for b in range(8) if a + b <= 3)
    assert M.p_rates_at_least(3, [5, 7], [0.2, 0.4]) == pytest.approx(conv)
    assert M.p_rates_at_least(3, [12], [0.3]) == pytest.approx(M.p_rate_at_least(3, 12, 0.3))
    with pytest.raises(ValueError):
        M.p_rates_at_least(3, [5, 7], [0.2])


def test_rise_power_and_flip_rates_and_init_event():
    detectable, ceiling = M.rise_power(4, 900, 1000, 1e-3)
    assert detectable == M.smallest_detectable_rise(4, 1000, 1e-3) and ceiling == pytest.approx(0.896)
    from lib.label_noise.data import SignalNoiseData

    data = SignalNoiseData(mu=np.ones(3), xi=np.eye(4, 3), y=np.array([1.0, 1.0, -1.0, -1.0]),
                             y_obs=np.array([1.0, -1.0, -1.0, -1.0]))
    assert M.flip_rates(data) == (0.5, 0.0)
    W0 = np.zeros((2, 1, 3))
    W0[0, 0] = [1.0, -1.0, 0.0]       # j = +1 activated by ξ₀ only
    W0[1, 0] = [0.0, 1.0, 1.0]        # j = −1 activated by ξ₁ and ξ₂
    # sample 3 (ỹ = −1, ξ₃ = 0) has no active filter of its class
    assert not M.init_event(W0, data)
    data2 = SignalNoiseData(mu=data.mu, xi=data.xi[:3], y=data.y[:3], y_obs=np.array([1.0, -1.0, -1.0]))
    assert M.init_event(W0, data2)


def test_reuse_summary_and_run_to_loss_with_the_papers_test_set():
    kw = dict(n=20, d=200, m=4, n_snr2=10.0, sigma_xi=1.0, sigma0=0.01, eta=1 / 200, target_loss=0.2,
              max_steps=20000, n_test=300, n_reuse=300, sigma_zeta=0.5)
    noisy = M.run_to_loss(0.25, stream(0, "t", 1), **kw)
    clean = M.run_to_loss(0.0, stream(0, "t", 1), **kw)
    plain = M.run_to_loss(0.25, stream(0, "t", 1), **{**kw, "n_reuse": 0})
    assert noisy["reached"] and clean["reached"]
    # the extra test set is drawn last: the fresh errors and the training are those of a run without it
    assert noisy["errors"] == plain["errors"] and noisy["steps_run"] == plain["steps_run"]
    assert noisy["n_noisy"] > 0 and clean["n_noisy"] == 0
    assert noisy["reuse_noisy_n"] > 0 and noisy["reuse_errors"] > clean["reuse_errors"]
    s = M.reuse_summary([noisy, clean], 0.1)
    assert s["errors"] == noisy["reuse_errors"] + clean["reuse_errors"] and s["trials"] == 600
    assert s["fresh_errors"] == noisy["errors"] + clean["errors"]
    assert s["p_reading"] == pytest.approx(M.p_rate_at_least(s["errors"], 600, 0.1))
    assert len(noisy["reuse_error"]) == len(noisy["steps"])


def test_pooled_selection_and_stage_one_best():
    h = M.History(steps=np.array([0, 1, 2, 3]), clean=np.array([True, True, False]),
                  margins=np.array([[0.0, 0.0, 0.0], [1.0, -1.0, -1.0], [1.0, 1.0, -1.0], [1.0, 1.0, 1.0]]),
                  test_accuracy=np.array([0.5, 0.9, 0.95, 0.8]), gamma_max=np.zeros(4), rho_max=np.zeros((4, 3)))
    sel = M.pooled_selection([h, h], 2)
    assert sel == {"precision": 1.0, "recall": 1.0, "clean_share": pytest.approx(2 / 3),
                   "selected_share": pytest.approx(2 / 3)}
    assert M.pooled_selection([h], 3)["precision"] == pytest.approx(2 / 3)
    assert list(M.stage_one_best([h, h], [(1, 3), (None, None)])) == [0.95, 0.95]
    assert list(M.stage_one_best([h], [(3, None)])) == [0.8]


def test_per_run_reading_judges_each_run_against_its_own_flip_rates():
    from scipy.stats import binom
    runs = [{"reuse_errors": 50, "n_reuse": 1000, "flip_rates": (0.10, 0.12)},   # at ½·min = 0.05: holds
            {"reuse_errors": 20, "n_reuse": 1000, "flip_rates": (0.08, 0.20)}]   # bound 0.04: 20/1000 is far below
    out = M.per_run_reading(runs, alpha=1e-3)
    assert out["bounds"] == pytest.approx([0.05, 0.04])
    assert out["p"][1] == pytest.approx(binom.cdf(20, 1000, 0.04))
    assert out["level"] == pytest.approx(5e-4) and not out["holds"]
    assert M.per_run_reading(runs[:1], alpha=1e-3)["holds"]
    # explicit bounds (a control judged against its paired noisy run's bound)
    assert M.per_run_reading(runs[1:], alpha=1e-3, bounds=[0.01])["holds"]
    with pytest.raises(ValueError):
        M.per_run_reading(runs, alpha=1e-3, bounds=[0.01])


def test_paired_changes_counts_by_hand():
    # run 0: 3 test points at 3 recording steps; run 1: 2 points
    r0 = np.array([[True, False, True], [True, True, False], [False, True, True]])
    r1 = np.array([[False, False], [True, False], [True, True]])
    c = M.paired_changes([r0, r1], 1)
    # at index 1 → end: run 0 point 0 right → wrong (worse), point 2 wrong → right (better);
    # run 1 point 1 wrong → right (better)
    assert c == {"worse": 1, "better": 2, "right_at": 3, "pairs": 5}
    assert M.paired_changes([r0], 2) == {"worse": 0, "better": 0, "right_at": 2, "pairs": 3}


def _dim_kw(**over):
    return {**dict(root=5, n=4, m=2, n_snr2=10.0, sigma_xi=1.0, sigma0=0.01, d_ref=64, target_loss=0.3,
                   max_steps=3000, n_test=50, sigma_zeta=0.5), **over}


def _to_loss(tau, rng, d, kw):
    return M.run_to_loss(tau, rng, n=kw["n"], d=d, m=kw["m"], n_snr2=kw["n_snr2"], sigma_xi=kw["sigma_xi"],
                         sigma0=kw["sigma0"] * math.sqrt(kw["d_ref"] / d), eta=1.0 / (kw["sigma_xi"] ** 2 * d),
                         target_loss=kw["target_loss"], max_steps=kw["max_steps"], n_test=kw["n_test"],
                         n_reuse=kw["n_test"], sigma_zeta=kw["sigma_zeta"])


def test_dim_point_draws_d_n_squared_from_the_theorem_stream_and_other_ratios_from_the_sweeps():
    kw = _dim_kw()
    square = M.dim_point(0.25, 4.0, 1, **kw)  # d = n² = 16
    want = _to_loss(0.25, stream(5, "stage2-dimension", 1), 16, kw)
    assert square["n_reuse"] == 50 and square["steps_run"] == want["steps_run"]
    np.testing.assert_array_equal(square["loss"], want["loss"])
    other = M.dim_point(0.25, 2.0, 1, **kw)  # d = 8, the sweep's stream
    want = _to_loss(0.25, stream(5, "stage2-sweep", 2.0, 1), 8, kw)
    np.testing.assert_array_equal(other["loss"], want["loss"])
    wrong = _to_loss(0.25, stream(5, "stage2-dimension", 1), 8, kw)
    assert not np.array_equal(other["loss"], wrong["loss"])


def test_phase_point_reports_the_runs_stage_one_and_lowest_noisy_accuracy():
    common = dict(root=3, n=200, d=800, m=5, sigma_xi=1.0, sigma0=0.01, eta=0.1, steps=100, n_test=0,
                  record_points=10)
    for n_snr2 in (0.2, 12.0):
        p = M.phase_point(n_snr2, 0.2, 0, **common)
        h = M.run_synthetic(0.2, 0, experiment="phase", n_snr2=n_snr2, **common)["history"]
        assert p["stage1"] is M.stage_one_appears(h)
        assert p["min_noisy"] == np.nanmin(h.accuracy("noisy")[1:]) and 0.0 <= p["min_noisy"] <= 1.0
    # a strong signal shows a clean Stage I, a weak one does not
    assert M.phase_point(12.0, 0.2, 0, **common)["stage1"] and not M.phase_point(0.2, 0.2, 0, **common)["stage1"]


def test_digits_run_is_the_task_of_its_stream_trained_with_its_seed():
    kw = dict(root=7, classes=[3, 8], tau=0.2, test_fraction=0.4, epochs=1, lr=0.02, batch=32, width=4)
    got = M.digits_run(2, **kw)
    task = M.digits_task((3, 8), 0.2, 0.4, stream(7, "digits-task", 2))
    want = M.train_digits(task, 1, 0.02, 32, seed=2, width=4, root=7)
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    other = M.digits_run(3, **kw)
    assert any(not np.array_equal(got[k], other[k]) for k in ("clean", "noisy", "test"))


def _reuse_run(errors, n_reuse, noisy_errors, noisy_n):
    return {"reuse_errors": errors, "n_reuse": n_reuse, "reuse_noisy_errors": noisy_errors,
            "reuse_noisy_n": noisy_n}


def test_bound_excess_counts_runs_within_twice_their_bound_and_their_clean_source_error():
    runs = [_reuse_run(82, 1000, 70, 120), _reuse_run(450, 1000, 60, 120), _reuse_run(90, 1000, 60, 100)]
    out = M.bound_excess(runs, [0.06, 0.12, 0.05])
    assert out["ratios"] == pytest.approx([82 / 60, 450 / 120, 90 / 50])
    assert out["clean_source"] == pytest.approx([12 / 880, 390 / 880, 30 / 900])
    assert (out["n"], out["n_within"]) == (3, 2)
    assert (out["within_lo"], out["within_hi"]) == pytest.approx((82 / 60, 1.8))
    assert out["above_lo"] == out["above_hi"] == pytest.approx(3.75)
    assert (out["clean_lo"], out["clean_hi"], out["clean_at_max"]) == pytest.approx((12 / 880, 390 / 880, 390 / 880))
    assert out["sentence"] == ("2 of the 3 runs err within 2 times their bound (error / bound 1.37 to 1.80), the "
                               "other 1 at 3.8 to 3.8 times it; on the test points that reuse a clean sample's "
                               "noise vector the runs err on 0.014 to 0.443 (0.443 in the run furthest above its "
                               "bound)")
    every = M.bound_excess(runs[:1], [0.06])
    assert every["sentence"].startswith("every one of the 1 runs errs within 2 times its bound (error / bound 1.37")
    assert np.isnan(every["above_lo"])
    none = M.bound_excess(runs[1:2], [0.12], within=1.5)
    assert none["n_within"] == 0 and none["sentence"].startswith("none of the 1 runs errs within 1.5 times")
    with pytest.raises(ValueError):
        M.bound_excess(runs, [0.1])
    with pytest.raises(ValueError):
        M.bound_excess(runs[:1], [0.0])


def test_sweep_convergence_reports_runs_outside_the_initialisation_event_apart():
    def run(ratio, seed, loss, event):
        return {"ratio": ratio, "seed": seed, "final_loss": loss, "steps_run": 100 * seed, "init_event": event}

    runs = [run(1.5, 0, 0.0049, True), run(1.5, 1, 0.02, False), run(3.0, 0, 0.005, True)]
    out = M.sweep_convergence(runs, 0.005)
    assert out["holds"] and out["n_outside"] == 1 and out["missed_inside"] == 0
    assert out["worst_inside"] == 0.005 and out["worst_outside"] == 0.02
    assert [q["reached"] for q in out["runs"]] == [True, False, True]
    assert out["runs"][1] == {"ratio": 1.5, "seed": 1, "final_loss": 0.02, "steps_run": 100, "reached": False,
                              "init_event": False}
    bad = M.sweep_convergence([*runs, run(6.0, 2, 0.0051, True)], 0.005)
    assert not bad["holds"] and bad["missed_inside"] == 1 and bad["worst_inside"] == 0.0051
    assert not M.sweep_convergence(runs[1:2], 0.005)["holds"]  # no run inside the event: nothing shown


def test_sweep_convergence_sentence_names_the_runs_that_missed_and_those_outside():
    def run(ratio, seed, loss, event, steps=1000):
        return {"ratio": ratio, "seed": seed, "final_loss": loss, "steps_run": steps, "init_event": event}

    ok = M.sweep_convergence([run(1.5, 0, 0.004, True, 900), run(3.0, 1, 0.005, True, 2000)], 0.005)
    assert ok["sentence"] == ("every one of the 2 runs inside the initialisation event reached it (largest final "
                              "loss 0.0050, after 900 to 2000 steps)")
    bad = M.sweep_convergence([run(1.5, 0, 0.006, True), run(6.0, 2, 0.02, False)], 0.005)
    assert bad["sentence"].startswith("1 of the 1 runs inside the initialisation event did not reach it "
                                      "(d/n = 1.5 seed 0, final loss 0.0060)")
    assert bad["sentence"].endswith("; 1 start outside it (d/n = 6 seed 2, final loss 0.0200, target not reached)")
    assert M.sweep_convergence([run(6.0, 2, 0.02, False)], 0.005)["sentence"].startswith("no run starts inside")


def test_no_rise_is_the_paired_mcnemar_test():
    # 2 runs × 10 points; 5 turn wrong, 1 turns right between index 0 and the end
    start = np.ones((2, 10), bool)
    start[0, 0] = False
    end = start.copy()
    end[0, 0] = True
    end[1, :5] = False
    right = [np.stack([start[0], end[0]]), np.stack([start[1], end[1]])]
    out = M.no_rise(right, 0, alpha=0.05)
    assert (out["worse"], out["better"], out["pairs"]) == (5, 1, 20)
    assert out["rise"] == pytest.approx(4 / 20)
    assert out["p"] == pytest.approx(M.p_rise(5, 1))
    assert out["declare_at"] == 7  # P(Bin(w + 1, ½) ≥ w) = (w + 2)/2^(w+1): 0.0625 at w = 6, 0.035 at w = 7
    assert M.p_rise(out["declare_at"], 1) < 0.05 <= M.p_rise(out["declare_at"] - 1, 1)
    assert out["detectable"] == pytest.approx((out["declare_at"] - 1) / 20)
    assert out["bound"] == pytest.approx(out["detectable"] - 1 / 20)
    assert out["declared"] == (out["rise"] > out["bound"]) == (out["p"] < 0.05)
    assert not M.no_rise([np.stack([start[1], start[1]])], 0, alpha=0.05)["declared"]
