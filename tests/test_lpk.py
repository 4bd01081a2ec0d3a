"""Tests of lib.lpk: closed forms against torch.func / autograd, the kernel-machine identity and
the two LPK identities on small problems, the bound's arithmetic, the data."""

import math

import numpy as np
import pytest
import torch

from lib import lpk as L
from lib.lpk.data import _flip


@pytest.fixture(scope="module")
def tiny():
    return L.gaussian_mixture(12, d=5, noise=0.2, n_test=7, root=3)


def test_tangent_and_loss_gram_match_torch_func(tiny):
    p = L.init_params(5, 9, root=1)
    G = L.per_sample_grads(p, tiny.X, tiny.y)
    ref = G @ G.T
    fast = L.loss_grad_gram(p, tiny.X, tiny.y, tiny.X, tiny.y)
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-12)
    slopes = L.logistic_slope(L.forward(p, tiny.X), tiny.y)
    torch.testing.assert_close(L.tangent_sq_norms(p, tiny.X) * slopes ** 2, torch.diagonal(ref),
                               rtol=1e-10, atol=1e-12)


def test_full_gradient_matches_autograd(tiny):
    p = {k: v.clone().requires_grad_(True) for k, v in L.init_params(5, 9, root=2).items()}
    L.losses(p, tiny.X, tiny.y).mean().backward()
    g, _ = L.full_gradient({k: v.detach() for k, v in p.items()}, tiny.X, tiny.y)
    for k in p:
        torch.testing.assert_close(g[k], p[k].grad, rtol=1e-10, atol=1e-12)


def test_euler_kernel_is_gradient_descent_lpk(tiny):
    """The accumulated kernel of method='euler' is η Σ_k G_k G_kᵀ of gradient descent, computed
    independently from torch.func per-sample gradients."""
    traj = L.gradient_flow(tiny, 9, T=2.0, step=0.1, method="euler", root=4, kernels=True)
    ref = L.brute_force_lpk(tiny, 9, T=2.0, step=0.1, root=4)
    torch.testing.assert_close(traj.K, ref, rtol=1e-9, atol=1e-12)
    assert traj.sum_K[-1] == pytest.approx(float(traj.K.sum()), rel=1e-10)
    assert traj.trace_K[-1] == pytest.approx(float(torch.trace(traj.K)), rel=1e-10)


def test_two_identities_under_rk4(tiny):
    traj = L.gradient_flow(tiny, 16, T=20.0, step=0.25, method="rk4", root=5, kernels=True)
    n = tiny.n
    drop = traj.train_loss[0] - traj.train_loss[-1]
    assert drop > 0.05
    assert float(traj.K.sum()) / n ** 2 == pytest.approx(drop, rel=1e-6)
    # the kernel is symmetric positive semi-definite
    torch.testing.assert_close(traj.K, traj.K.T)
    assert float(torch.linalg.eigvalsh(traj.K).min()) > -1e-10


def test_kernel_machine_identity_converges_with_step(tiny):
    errs = []
    for step in (0.2, 0.1, 0.05):
        traj = L.gradient_flow(tiny, 16, T=4.0, step=step, method="euler", root=6, kernels=True)
        errs.append(L.identity_error(L.kernel_machine(traj, tiny)))
    assert errs[0] > errs[1] > errs[2]
    order = np.polyfit(np.log([0.2, 0.1, 0.05]), np.log(errs), 1)[0]
    assert 0.8 < order < 1.2            # gradient descent is first order in η
    rk = L.gradient_flow(tiny, 16, T=4.0, step=0.2, method="rk4", root=6, kernels=True)
    assert L.identity_error(L.kernel_machine(rk, tiny)) < errs[-1] / 100


def test_brute_trace_matches_closed_form(tiny):
    """Tr K accumulated from torch.func per-sample gradients equals the closed-form trace, for
    both integrators (same quadrature weights)."""
    for method, step in (("rk4", 0.5), ("euler", 0.25)):
        traj = L.gradient_flow(tiny, 7, T=3.0, step=step, method=method, root=8, kernels=True,
                               brute_trace=True)
        ref = traj.extras["trace_K_torch_func"]
        assert ref == pytest.approx(float(torch.trace(traj.K)), rel=1e-10)
        assert ref == pytest.approx(traj.trace_K[-1], rel=1e-10)


def test_directional_second_derivative_matches_hessian(tiny):
    p = L.init_params(5, 6, root=9)
    v = {k: torch.randn(t.shape, generator=torch.Generator().manual_seed(3), dtype=L.DTYPE)
         for k, t in p.items()}
    got = L.directional_derivatives_torch_func(p, v, tiny.X_test, tiny.y_test, 2)[1]
    flat = torch.cat([p["W"].reshape(-1), p["a"]])
    vf = torch.cat([v["W"].reshape(-1), v["a"]])
    m, d = p["W"].shape
    for i in range(tiny.X_test.shape[0]):
        def loss_i(w, i=i):
            q = {"W": w[: m * d].reshape(m, d), "a": w[m * d:]}
            return L.losses(q, tiny.X_test[i:i + 1], tiny.y_test[i:i + 1])[0]
        H = torch.autograd.functional.hessian(loss_i, flat)
        assert float(got[i]) == pytest.approx(float(vf @ H @ vf), rel=1e-9, abs=1e-12)


def test_directional_derivatives_match_torch_func_and_finite_differences(tiny):
    """The closed-form derivatives of s ↦ ℓ(w + s·v, z) up to order 4 against nested
    torch.func.jvp, and orders 2–4 against central finite differences of the next lower order
    (step 1e-4: the truncation error, O(h²)·ℓ^(j+2), is ~1e-7 relative here)."""
    p = L.init_params(5, 6, root=9)
    g = torch.Generator().manual_seed(3)
    v = {k: 0.5 * torch.randn(t.shape, generator=g, dtype=L.DTYPE) for k, t in p.items()}
    X, y = tiny.X_test, tiny.y_test
    got = L.directional_derivatives(p, v, X, y, order=4)
    ref = L.directional_derivatives_torch_func(p, v, X, y, order=4)
    torch.testing.assert_close(got, ref, rtol=1e-8, atol=1e-12)
    torch.testing.assert_close(got[1], L.directional_derivatives_torch_func(p, v, X, y, 2)[1],
                               rtol=1e-8, atol=1e-12)
    h = 1e-4
    at = torch.tensor([-h, h], dtype=L.DTYPE)
    both = L.directional_derivatives(p, v, X, y, order=4, at=at)      # (2, 4, N)
    fd = (both[1] - both[0]) / (2 * h)                                 # d/ds of orders 1..3
    torch.testing.assert_close(fd[:3], got[1:], rtol=1e-6, atol=1e-9)
    # the first derivative against finite differences of the loss itself
    def loss_at(s):
        return L.losses({k: p[k] + s * v[k] for k in p}, X, y)
    torch.testing.assert_close((loss_at(h) - loss_at(-h)) / (2 * h), got[0], rtol=1e-6, atol=1e-9)
    # evaluating at an offset is evaluating at the moved point
    moved = L.directional_derivatives({k: p[k] + 0.3 * v[k] for k in p}, v, X, y, order=3)
    torch.testing.assert_close(L.directional_derivatives(p, v, X, y, 3, at=[0.3])[0], moved,
                               rtol=1e-10, atol=1e-13)
    with pytest.raises(ValueError):
        L.directional_derivatives(p, v, X, y, order=5)


def test_taylor_terms_and_lagrange_intervals_of_gradient_descent(tiny):
    """Under gradient descent the first-order Taylor sum is the kernel machine's change; the gap
    network − machine, less the second- (and third-) order sums, lies inside the Lagrange
    intervals; and leaving the last term out puts it far outside (the check can fail)."""
    traj = L.gradient_flow(tiny, 16, T=6.0, step=0.6, method="euler", root=6, kernels=True,
                           taylor_order=3, remainder_nodes=9)
    km = L.kernel_machine(traj, tiny)
    np.testing.assert_allclose(traj.extras["taylor_first"], km["machine"] - km["initial"],
                               rtol=1e-10, atol=1e-13)
    rep = L.taylor_report(traj, km)
    assert rep["residual"][1] == 1.0
    assert rep["residual"][3] < rep["residual"][2] < 0.2
    for t in (1, 2, 3):
        assert rep["position"][t] <= 1.0
        # fewer nodes, narrower (or equal) intervals: the position can only grow
        assert rep["position_coarse"][t] >= rep["position"][t] - 1e-12
    for t in (2, 3):
        assert rep["position_without"][t] > 3.0
    # a wrong third-order sum (twice the true one) leaves the interval
    bad = dict(traj.extras)
    bad["taylor"] = traj.extras["taylor"] * np.array([[1.0], [2.0]])
    wrong = L.taylor_report(L.Trajectory(**{**traj.__dict__, "extras": bad}), km)
    assert wrong["position"][3] > 1.0
    # only the Taylor terms, without intervals: the same sums
    plain = L.gradient_flow(tiny, 16, T=6.0, step=0.6, method="euler", root=6, taylor_order=3,
                            remainder_nodes=0)
    np.testing.assert_allclose(plain.extras["taylor"], traj.extras["taylor"], rtol=1e-12)
    assert "remainder_lo" not in plain.extras
    with pytest.raises(ValueError):
        L.taylor_report(plain, km)
    with pytest.raises(ValueError):
        L.gradient_flow(tiny, 4, T=1.0, step=0.5, method="rk4", taylor_order=2, root=0)
    with pytest.raises(ValueError):
        L.gradient_flow(tiny, 4, T=1.0, step=0.5, method="euler", taylor_order=4, root=0)


def test_taylor_residuals_shrink_with_the_step(tiny):
    """Network − kernel machine under gradient descent is the accumulated second-order Taylor
    term up to a remainder of higher order: over a fixed horizon, the relative residual after
    the second-order term halves with the step, and after the third-order term it quarters."""
    resid = {2: [], 3: []}
    for step in (0.4, 0.2):
        traj = L.gradient_flow(tiny, 16, T=4.0, step=step, method="euler", root=6, kernels=True,
                               taylor_order=3, remainder_nodes=0)
        km = L.kernel_machine(traj, tiny)
        gap = km["network"] - km["machine"]
        S2, S3 = traj.extras["taylor"]
        resid[2].append(np.abs(gap - S2).max() / np.abs(gap).max())
        resid[3].append(np.abs(gap - S2 - S3).max() / np.abs(gap).max())
    assert resid[2][0] < 0.1
    assert 1.6 < resid[2][0] / resid[2][1] < 2.4
    assert 3.0 < resid[3][0] / resid[3][1] < 5.0


def test_bound_arithmetic():
    assert L.lpk_complexity(4.0, 9.0, 2) == pytest.approx(2 * 6 / 4)
    assert L.confidence_term(50, 0.01, 2.0) == pytest.approx(6 * math.sqrt(math.log(200) / 100))
    # The RKHS Rademacher bound behind it, by Monte Carlo on a random PSD kernel: for
    # ‖h‖_H ≤ B, sup (1/n)Σσ_i h(z_i) = (B/n)√(σᵀKσ), whose mean is ≤ (B/n)√Tr K (Jensen).
    # With B = √(1ᵀK1)/n (the norm of h = (1/n)Σ_i K(·, z_i)) that is lpk_complexity / 2.
    rng = np.random.default_rng(0)
    n = 30
    A = rng.standard_normal((n, 5))
    K = A @ A.T + 0.1 * np.eye(n)
    sig = rng.choice([-1, 1], size=(20000, n))
    B = math.sqrt(K.sum()) / n
    rad = B / n * np.mean(np.sqrt(np.einsum("si,ij,sj->s", sig, K, sig)))
    half = L.lpk_complexity(K.sum(), np.trace(K), n) / 2
    assert 0.7 * half < rad <= half

def test_bound_report_caps_loss(tiny):
    traj = L.gradient_flow(tiny, 16, T=30.0, step=0.5, root=7)
    rep = L.bound_report(traj, tiny, loss_cap=0.3)
    assert rep.train_loss <= 0.3 and rep.test_loss <= 0.3
    assert rep.confidence == pytest.approx(L.confidence_term(tiny.n, 0.01, 0.3))
    assert rep.lpk_bound == pytest.approx(rep.lpk_term + rep.confidence)
    big = L.bound_report(traj, tiny, loss_cap=1e6)
    assert big.gap == pytest.approx(big.gap_raw)
    assert big.gap_clean == pytest.approx(big.gap)   # the split's own labels are the clean ones
    # measured on the noisy distribution: the same run, the gap against the noisy test labels,
    # gap_clean unchanged
    noisy = tiny.with_noisy_test()
    torch.testing.assert_close(noisy.y_test_clean, tiny.y_test)
    torch.testing.assert_close(noisy.y_test, tiny.y_test_noisy)
    rep_noisy = L.bound_report(traj, noisy, loss_cap=1e6)
    lT = L.losses(traj.params, tiny.X_test, tiny.y_test_noisy).mean()
    lS = L.losses(traj.params, tiny.X, tiny.y).mean()
    assert rep_noisy.gap == pytest.approx(float(lT - lS), rel=1e-12)
    assert rep_noisy.gap_clean == pytest.approx(big.gap, rel=1e-12)
    with pytest.raises(ValueError):
        noisy.with_noisy_test()
    with pytest.raises(ValueError):
        L.bound_report(traj, tiny, loss_cap=0.0)


def test_data():
    a = L.digits_1v7(100, noise=0.0, root=1)
    b = L.digits_1v7(100, noise=0.0, root=1)
    torch.testing.assert_close(a.X, b.X)
    # the noise is drawn after the split: the same images at every noise level
    torch.testing.assert_close(L.digits_1v7(100, noise=0.4, root=1).X, a.X)
    # another replicate key or another chapter seed: other images and another w_0
    assert not torch.equal(L.digits_1v7(100, root=1, key=(1,)).X, a.X)
    assert not torch.equal(L.digits_1v7(100, root=2).X, a.X)
    assert not torch.equal(L.init_params(5, 3, root=1)["W"], L.init_params(5, 3, root=1, key=(0,))["W"])
    assert a.X.shape == (100, 64) and a.X_test.shape[0] + 100 == 361
    torch.testing.assert_close(a.X.norm(dim=1), torch.ones(100, dtype=L.DTYPE))
    assert set(a.y.tolist()) == {-1.0, 1.0} and a.flipped == 0
    # the 2023 protocol: ⌊n·p⌋ labels replaced by uniform ones, so about n·p/2 change
    noisy = L.gaussian_mixture(4000, noise=0.5, n_test=4000, root=0)
    assert abs(noisy.flipped / 4000 - 0.25) < 0.02
    # the test labels of the noisy distribution: the same protocol, about a quarter changed at p = 0.5
    assert abs(float((noisy.y_test_noisy != noisy.y_test).double().mean()) - 0.25) < 0.02
    torch.testing.assert_close(a.y_test_noisy, a.y_test)
    d = L.digits_1v7(100, noise=1.0, root=1)
    assert 0.3 < float((d.y_test_noisy != d.y_test).double().mean()) < 0.7
    with pytest.raises(ValueError):
        L.digits_1v7(400, root=0)
    with pytest.raises(ValueError):
        L.gaussian_mixture(10, noise=1.5, root=0)
    with pytest.raises(ValueError):
        L.run("mnist", 10, 4, 0.0, 0, 1.0, 0.5, root=0)


def test_rank_correlations():
    assert L.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert L.kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert L.spearman_rho([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)


def test_run_sweeps_shares_configurations():
    base = dict(dataset=["gaussian"], T=[2.0], step=[1.0])
    grids = {"a": dict(n=[10, 12], width=[4], noise=[0.0], **base),
             "b": dict(n=[10], width=[4, 6], noise=[0.0], **base)}
    runs = L.run_sweeps(grids, seeds=range(2), root=3, progress=False)
    assert len(runs) == 8 and set(runs.sweep) == {"a", "b"}
    shared = runs[(runs.n == 10) & (runs.width == 4)]
    assert len(shared) == 4
    for seed in (0, 1):
        gaps = shared[shared.seed == seed].gap.to_numpy()
        assert gaps[0] == gaps[1]
    one = L.run("gaussian", 12, 4, 0.0, 1, 2.0, 1.0, root=3)
    row = runs[(runs.sweep == "a") & (runs.n == 12) & (runs.seed == 1)].iloc[0]
    assert row.gap == one["gap"]


def test_label_noise_replaces_a_fraction_by_random_labels():
    y = np.ones(1000)
    rng = np.random.default_rng(0)
    out, changed = _flip(y, 0.3, rng)
    assert changed == int(np.sum(out != y)) and set(np.unique(out)) <= {-1.0, 1.0}
    assert 100 <= changed <= 200            # Binomial(300, ½): mean 150, sd 8.7
    all_random, _ = _flip(y, 1.0, np.random.default_rng(1))
    assert abs(np.mean(all_random == 1.0) - 0.5) < 0.06
    # exactly ⌊n·p⌋ labels are redrawn: with y = +1 everywhere and redraws forced to −1, the count shows
    class Forced:
        def choice(self, a, size, replace=True):
            return np.arange(size) if np.ndim(a) == 0 else np.full(size, -1.0)
    out, changed = _flip(np.ones(10), 0.35, Forced())
    assert changed == 3 and out.tolist() == [-1, -1, -1] + [1] * 7


def test_kendall_tools_against_brute_force():
    import itertools
    import math

    # S and its null distribution by enumerating permutations
    for k in (2, 3, 4, 5):
        counts = {}
        for perm in itertools.permutations(range(k)):
            s = L.kendall_s(range(k), perm)
            counts[s] = counts.get(s, 0) + 1
        null = L.kendall_s_null(k)
        assert set(null) == set(counts)
        for s, c in counts.items():
            assert null[s] == pytest.approx(c / math.factorial(k))
    x, y = [1, 2, 3, 4], [1, 3, 2, 4]
    assert L.kendall_s(x, y) == 4 and L.kendall_tau(x, y) == pytest.approx(4 / 6)
    # stratified: two strata of 3; p-value by enumerating both strata's permutations
    xs, ys, strata = [1, 2, 3, 1, 2, 3], [1, 2, 3, 2, 1, 3], [0, 0, 0, 1, 1, 1]
    out = L.stratified_kendall(xs, ys, strata)
    assert out["S"] == 3 + 1 and out["pairs"] == 6 and out["tau"] == pytest.approx(4 / 6)
    tot = [L.kendall_s(range(3), a) + L.kendall_s(range(3), b)
           for a in itertools.permutations(range(3)) for b in itertools.permutations(range(3))]
    assert out["p"] == pytest.approx(np.mean(np.array(tot) >= 4))
    # with 36 equally likely arrangements no p-value reaches 1e-3: nothing is detectable
    assert math.isnan(out["critical"])
    big = L.stratified_kendall(np.tile(np.arange(6), 4), np.tile(np.arange(6), 4), np.repeat(np.arange(4), 6),
                               alpha=1e-3)
    assert big["tau"] == 1 and big["p"] == pytest.approx((1 / 720) ** 4) and big["critical"] < 1
    # partial τ by hand
    x, y, z = [1, 2, 3, 4, 5], [2, 1, 4, 3, 5], [1, 2, 3, 5, 4]
    txy, txz, tyz = 0.6, 0.8, 0.4
    assert L.partial_kendall(x, y, z) == pytest.approx((txy - txz * tyz) / math.sqrt((1 - txz**2) * (1 - tyz**2)))
    assert math.isnan(L.partial_kendall([1, 2, 3], [3, 1, 2], [4, 5, 6]))


def test_gradient_and_tangent_is_full_gradient_and_tangent_norms(tiny):
    p = L.init_params(5, 9, root=6)
    g, s, tangent = L.gradient_and_tangent(p, tiny.X, tiny.y)
    g_ref, s_ref = L.full_gradient(p, tiny.X, tiny.y)
    for k in g:
        torch.testing.assert_close(g[k], g_ref[k], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(s, s_ref, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(tangent, L.tangent_sq_norms(p, tiny.X), rtol=1e-12, atol=1e-15)


def test_batched_flow_is_the_single_runs_and_its_probe_kernel_the_lpk():
    """Every member of a batch follows its own single RK4 run (recorded curves and w_T), whoever
    else is in the batch; probing a member with its own training set gives its LPK K_T(S, S)."""
    splits = [L.gaussian_mixture(10, d=4, noise=nz, n_test=6, root=3, key=(j,))
              for j, nz in enumerate((0.0, 0.4, 1.0))]
    keys = [(j,) for j in range(3)]
    trajs, KP = L.gradient_flow_batch(splits, 7, T=12.0, step=0.5, root=8, keys=keys,
                                      probes=[(s.X, s.y) for s in splits])
    alone, _ = L.gradient_flow_batch(splits[1:2], 7, T=12.0, step=0.5, root=8, keys=keys[1:2])
    for j, (s, tr) in enumerate(zip(splits, trajs)):
        ref = L.gradient_flow(s, 7, 12.0, 0.5, method="rk4", root=8, key=keys[j], kernels=True)
        for name in ("times", "train_loss", "test_loss", "trace_K", "sum_K"):
            np.testing.assert_allclose(getattr(tr, name), getattr(ref, name), rtol=1e-12, atol=1e-14)
        for k in ("W", "a"):
            torch.testing.assert_close(tr.params[k], ref.params[k], rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(tr.params0[k], ref.params0[k], rtol=0, atol=0)
        torch.testing.assert_close(KP[j], ref.K, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(alone[0].sum_K, trajs[1].sum_K, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError):
        L.gradient_flow_batch(splits, 7, T=1.0, step=0.5, root=8, keys=keys[:2])


def test_chen2023_bound_against_explicit_loops():
    """U₁, U₂ and the bound of the 2023 code's formula, written out element by element."""
    K = np.array([[[2.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 3.0]],
                  [[1.5, 0.7, 0.0], [0.7, 2.5, 0.4], [0.0, 0.4, 1.0]],
                  [[2.2, 0.1, 0.3], [0.1, 0.5, 0.2], [0.3, 0.2, 2.0]]])
    sums = np.array([40.0, 90.0, 10.0])
    loss = np.array([[0.1, 0.5, 0.2], [0.3, 0.1, 0.2], [0.0, 0.9, 0.4]])
    out = L.chen2023_bound(K, sums, 5, loss, train_loss=0.25, delta=0.01)
    B = math.sqrt(90.0) / 5
    trace = max(np.trace(K[j]) for j in range(3))           # 5.5, 5.0, 4.7
    spread = sum((max(K[j][a, b] for j in range(3)) - min(K[j][a, b] for j in range(3))) / 2
                 for a in range(3) for b in range(3) if a != b)
    u1 = B * math.sqrt(trace + spread) / 3
    u2 = max(sum(abs(loss[j][i] - loss[l][i]) for i in range(3)) for j in range(3) for l in range(3)) / 3
    conf = 3 * math.sqrt(math.log(2 / 0.01) / (2 * 3))
    assert trace == 6.0 and spread == pytest.approx(2 * (0.3 + 0.15 + 0.1))
    assert out["U1"] == pytest.approx(u1, rel=1e-14) and out["U2"] == pytest.approx(u2, rel=1e-14)
    assert out["bound"] == pytest.approx(0.25 + 2 * min(u1, u2) + conf, rel=1e-14)
    with pytest.raises(ValueError):
        L.chen2023_bound(K[:1], sums[:1], 5, loss[:1], train_loss=0.0)
    # the floor: row means 0.8/3, 0.6/3, 1.3/3 → the largest excess over row 0 is 0.5/3, below U₂
    assert L.chen2023_u2_floor(loss) == pytest.approx(0.5 / 3, rel=1e-14)
    assert L.chen2023_u2_floor(loss) <= out["U2"]


def test_features_gram_and_sq_norms_are_the_references(tiny):
    """The run-time forms of the kernel integrand and of the torch.func trace against
    :func:`loss_grad_gram` and the squared rows of :func:`per_sample_grads`."""
    p = L.init_params(5, 9, root=7)
    X, y, Xt, yt = tiny.X, tiny.y, tiny.X_test, tiny.y_test
    g, s, tangent, train = L.gradient_and_tangent(p, X, y, x_sq=(X ** 2).sum(1), features=True)
    test = L.slopes_and_features(p, Xt, yt)
    torch.testing.assert_close(L.features_gram(p["a"], train, train, X @ X.T),
                               L.loss_grad_gram(p, X, y, X, y), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(L.features_gram(p["a"], test, train, Xt @ X.T),
                               L.loss_grad_gram(p, Xt, yt, X, y), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(L.per_sample_sq_norms(p, X, y), (L.per_sample_grads(p, X, y) ** 2).sum(1),
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kw", [{}, {"kernels": True, "brute_trace": True}])
def test_gradient_flow_is_the_previous_implementation(tiny, kw):
    """The RK4 loop against its earlier, plainer form (lib.lpk.bench.previous_rk4, the benchmark's
    baseline): the same w_T, Tr K, 1ᵀK1 and K to rounding."""
    from lib.lpk.bench import previous_rk4

    new = L.gradient_flow(tiny, 9, 6.0, 0.5, method="rk4", root=5, **kw)
    old = previous_rk4(tiny, 9, 6.0, 0.5, root=5, **kw)
    for k in ("W", "a"):
        torch.testing.assert_close(new.params[k], old["params"][k], rtol=1e-12, atol=1e-14)
    assert new.trace_K[-1] == pytest.approx(old["trace_K"], rel=1e-12)
    assert new.sum_K[-1] == pytest.approx(old["sum_K"], rel=1e-12)
    if kw:
        torch.testing.assert_close(new.K, old["K"], rtol=1e-12, atol=1e-14)
        assert new.extras["trace_K_torch_func"] == pytest.approx(old["trace_K_torch_func"], rel=1e-12)


def test_arora_complexity_is_the_quadratic_form(tiny):
    traj = L.gradient_flow(tiny, 16, T=5.0, step=0.5, root=7)
    from lib.lpk.network import tangent_gram
    H = tangent_gram(traj.params0, tiny.X, tiny.X).double().numpy()
    y = tiny.y.double().numpy()
    expected = math.sqrt(2 * y @ np.linalg.solve(H, y) / tiny.n)
    assert L.arora_complexity(traj, tiny) == pytest.approx(expected, rel=1e-8)
    rep = L.bound_report(traj, tiny)
    assert rep.arora_term == pytest.approx(expected, rel=1e-8)
    assert rep.arora_bound == pytest.approx(rep.arora_term + rep.confidence)


def test_violation_ceiling_sign_test_and_kendall_test():
    assert L.violation_ceiling([0.1, 0.5], [0.6, 0.6]) == 0.0
    assert L.violation_ceiling([0.1, 0.9], [0.6, 0.6]) == pytest.approx(0.3)
    s = L.sign_test(9, 10, 0.05)
    assert s["p"] == pytest.approx(11 / 1024) and s["share"] == 0.9
    assert s["critical"] == 0.9                 # P(X ≥ 8) = 56/1024 > 0.05, P(X ≥ 9) < 0.05
    assert np.isnan(L.sign_test(3, 3, 1e-3)["critical"])
    x = np.arange(6.0)
    k = L.kendall_test(x, x, alpha=0.01)
    assert k["tau"] == 1.0 and k["p"] == pytest.approx(1 / 720)
    assert k["critical"] == pytest.approx(L.stratified_kendall(x, x, np.zeros(6), alpha=0.01)["critical"])
    assert L.one_sided_z(0.001) == pytest.approx(3.0902, abs=1e-4)


def test_kendall_power_and_detectable_are_consistent():
    from lib.seeding import stream
    sizes, alpha = [5] * 4, 1e-2
    null = L.kendall_power(sizes, 0.0, alpha, stream(0, "t", "null"), reps=4000)
    assert null <= alpha * 3                                   # exact test: at most its level, up to noise
    assert L.kendall_power(sizes, 0.9, alpha, stream(0, "t", "strong"), reps=2000) > 0.8
    tau80 = L.kendall_detectable(sizes, alpha, stream(0, "t", "det"), reps=2000)
    x = np.arange(20.0)
    critical = L.stratified_kendall(x, x, np.repeat(np.arange(4), 5), alpha=alpha)["critical"]
    assert critical < tau80 < 1.0                              # 80 % power needs more than the rejection threshold
    assert L.kendall_power(sizes, tau80 + 0.05, alpha, stream(0, "t", "above"), reps=3000) > 0.75
    assert L.kendall_power(sizes, tau80 - 0.1, alpha, stream(0, "t", "below"), reps=3000) < 0.8


def test_sign_test_detectable_is_the_exact_binomial_80_percent_point():
    from scipy import stats
    trials, alpha = 17, 1.5e-4
    need = round(L.sign_test(0, trials, alpha=alpha)["critical"] * trials)
    q = L.sign_test_detectable(trials, alpha)
    assert stats.binom.sf(need - 1, trials, q) == pytest.approx(0.8, abs=1e-4)
    assert q > need / trials - 1e-9 or q > 0.9
    assert L.sign_test_detectable(3, 1e-6) == 1.0             # no share of 3 trials reaches 1e-6


def test_step_convergence_is_the_runs_one_by_one(tiny):
    """The step-size study returns, per method and step, the identity error of that single run,
    and for gradient descent the relative residuals after S₂ and after S₂ + S₃ (by hand here)."""
    conv, resid, resid3 = L.step_convergence(tiny, 16, 4.0, (0.4, 0.2), (0.4,), beta=10.0, root=6)
    assert list(conv) == ["euler", "rk4"] and len(conv["euler"]) == 2 and len(conv["rk4"]) == 1
    for h, err, r2, r3 in zip((0.4, 0.2), conv["euler"], resid, resid3):
        traj = L.gradient_flow(tiny, 16, T=4.0, step=h, method="euler", root=6, kernels=True,
                               taylor_order=3, remainder_nodes=0)
        km = L.kernel_machine(traj, tiny)
        assert err == L.identity_error(km)
        gap, (S2, S3) = km["network"] - km["machine"], traj.extras["taylor"]
        scale = np.abs(km["initial"] - km["network"]).max()
        assert r2 == pytest.approx(np.abs(gap - S2).max() / scale, rel=1e-12)
        assert r3 == pytest.approx(np.abs(gap - S2 - S3).max() / scale, rel=1e-12)
    rk = L.gradient_flow(tiny, 16, T=4.0, step=0.4, method="rk4", root=6, kernels=True)
    assert conv["rk4"][0] == L.identity_error(L.kernel_machine(rk, tiny))
    assert conv["euler"][1] < conv["euler"][0] and resid3[1] < resid[1]


def _runs_frame():
    import pandas as pd
    columns = ["sweep", "width", "noise", "seed", "gap", "lpk_bound", "lpk_term"]
    rows = [  # the noise sweep and the width sweep share (width 8, noise 0.2, seed 0)
        ("noise, digits", 8, 0.0, 0, 0.1, 0.5, 0.3),
        ("noise, digits", 8, 0.0, 1, 0.3, 0.6, 0.2),
        ("noise, digits", 8, 0.2, 0, 0.4, 0.7, 0.8),
        ("noise, digits", 8, 0.2, 1, 0.0, 0.9, 0.4),
        ("width, digits", 8, 0.2, 0, 0.4, 0.7, 0.8),
        ("width, digits", 4, 0.2, 0, 0.5, 0.2, 0.1),
    ]
    return pd.DataFrame(rows, columns=columns).assign(dataset="digits", n=10)


def test_unique_runs_values_by_level_and_median_ratio():
    runs = _runs_frame()
    unique = L.unique_runs(runs)
    assert len(unique) == 5 and list(unique.index) == [0, 1, 2, 3, 5]   # the shared run kept once, first
    noise = runs[runs.sweep == "noise, digits"]
    np.testing.assert_array_equal(L.values_by_level(noise, "noise", "gap"), [[0.1, 0.3], [0.4, 0.0]])
    # term / gap where gap > 0 in the noise sweep: 3, 2/3, 2 → median 2
    assert L.median_positive_ratio(noise.lpk_term, noise.gap) == pytest.approx(2.0)


def test_bound_above_gap_text_names_the_worst_run():
    runs = _runs_frame()
    axis_of = {"noise, digits": "noise", "width, digits": "width"}
    text = L.bound_above_gap_text(L.unique_runs(runs), axis_of)
    assert text.startswith("the bound is below the measured gap in 1 of the 5 runs, by up to 0.300")
    assert "(on the digits at width 4); in the other 4 it is at least the gap" in text
    above = L.unique_runs(runs)[lambda u: u.width == 8]
    assert L.bound_above_gap_text(above, axis_of) == (
        "the bound is at least the measured gap in all 4 runs (smallest bound − gap 0.300)")


def test_bound_over_gap_by_n_and_its_summary_by_hand():
    import pandas as pd
    runs = pd.DataFrame([
        dict(sweep="n, digits", n=50, gap=0.5, lpk_bound=1.0),
        dict(sweep="n, digits", n=50, gap=0.25, lpk_bound=2.0),    # ratios 2 and 8: geometric mean 4
        dict(sweep="n, digits", n=100, gap=0.0, lpk_bound=4.0),    # no positive gap: no ratio
        dict(sweep="n, digits", n=100, gap=0.5, lpk_bound=0.5),    # ratio 1
        dict(sweep="n, digits", n=200, gap=0.0, lpk_bound=0.1),
    ])
    by_n = L.bound_over_gap_by_n(runs, ["n, digits"], loss_cap=3.0)
    assert by_n.n.tolist() == [50, 100, 200] and by_n.runs.tolist() == [2, 2, 1]
    assert by_n.non_vacuous.tolist() == [2, 1, 1]                   # the bound 4 is ≥ M = 3
    np.testing.assert_allclose(by_n.ratio[0], [2.0, 8.0])
    assert len(by_n.ratio[2]) == 0
    means = L.geometric_means(by_n.ratio)
    assert means[0] == pytest.approx(4.0) and means[1] == pytest.approx(1.0) and np.isnan(means[2])
    ratio_by_n, slope, share = L.by_n_summary(by_n, ["n, digits"])
    assert ratio_by_n["n, digits, n=50"] == pytest.approx(4.0) and ratio_by_n["n, digits, n=200"] is None
    assert slope["n, digits"] == pytest.approx(-2.0)               # 4 → 1 as n doubles: slope log 4 / log 2
    np.testing.assert_allclose(share["n, digits"], [1.0, 0.5, 1.0])


def test_rank_statistics_are_the_per_sweep_tests():
    runs = _runs_frame().assign(arora_bound=[1.0, 2.0, 3.0, 4.0, 3.0, 5.0], train_loss=[0.4, 0.3, 0.2, 0.1, 0.2, 0.0])
    axis_of = {"noise, digits": "noise", "width, digits": "width"}
    r = L.rank_statistics(runs, axis_of, ["noise, digits"], alpha=0.1)
    noise = runs[runs.sweep == "noise, digits"]
    assert set(r["tau"]) == {"noise, digits", "width, digits"}
    # width sweep: two runs, the larger bound with the smaller gap: τ = −1
    assert r["tau"]["width, digits"] == pytest.approx(-1.0)
    assert r["tau"]["noise, digits"] == L.kendall_tau(noise.lpk_bound, noise.gap)
    assert r["design_tau"]["noise, digits"] == L.kendall_tau(noise.noise, noise.gap)
    assert r["partial"]["noise, digits"] == L.partial_kendall(noise.lpk_bound, noise.gap, noise.noise)
    assert r["across"]["noise, digits"] == L.kendall_test(noise.lpk_bound, noise.gap, alpha=0.1)
    # two levels of two runs: no within-level τ reaches 0.1 (critical NaN)
    within = L.stratified_kendall(noise.lpk_bound, noise.gap, noise.noise, alpha=0.1)
    assert np.isnan(within["critical"]) and r["within"]["noise, digits"] == pytest.approx(within, nan_ok=True)
    assert set(r["controls"]) == {("noise, digits", col) for col in ("noise", "arora_bound", "train_loss")}
    assert r["controls"][("noise, digits", "train_loss")] == L.kendall_test(noise.train_loss, noise.gap, alpha=0.1)


def test_detectable_taus_sizes_and_their_streams():
    from lib.seeding import stream
    runs = _runs_frame()
    axis_of = {"noise, digits": "noise", "width, digits": "width"}
    sizes, detect80 = L.detectable_taus(runs, axis_of, ["noise, digits"], alpha=0.2, root=5)
    assert sizes == {"noise, digits": {"across": [4], "within": [2, 2]}}
    assert set(detect80) == {("noise, digits", "across"), ("noise, digits", "within")}
    assert detect80[("noise, digits", "within")] == L.kendall_detectable(
        [2, 2], 0.2, stream(5, "power", "noise, digits", "within"))
    again = L.detectable_taus(runs, axis_of, ["noise, digits"], alpha=0.2, root=5)[1]
    assert again == detect80
