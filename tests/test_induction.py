"""Tests of lib.induction (chapter 01): the task, the model's gradients, the theory."""

import numpy as np
import pytest
import torch

from lib.induction import experiments as E
from lib.induction import theory as TH
from lib.induction.data import PAD, LengthDist, ood_lengths, sample_ood, sample_train
from lib.induction import compiled
from lib.induction.one_layer import (Embedding, _grads_at_zero_kq, _grads_dense, _scatter,
                                     evaluate, reference_grad, train_two_step)
from lib.induction.realistic import RealisticConfig, Transformer, realistic_cell, train

N, N_TRG = 9, 2




# -- the task ------------------------------------------------------------------------------
def test_training_sequences_follow_definition_1():
    rng = np.random.default_rng(0)
    b = sample_train(rng, N, N_TRG, LengthDist.uniform(2, 5), 500)
    assert np.all(b.l1 == b.l2) and np.all(b.length == 2 * b.l1 + 3)
    for i in range(len(b)):
        z = b.tokens[i, :b.length[i]]
        assert z[b.l1[i]] == b.trigger[i] == z[-1] < N_TRG
        assert z[b.l1[i] + 1] == b.target[i] >= N_TRG
        fillers = np.delete(z, [b.l1[i], b.l1[i] + 1, b.length[i] - 1])
        assert np.all(fillers >= N_TRG)
        assert np.all(b.tokens[i, b.length[i]:] == PAD)
        assert b.pseudo[i] == b.target[i]  # in distribution, ℓ̄+2 is the output position


def test_ood_lengths_are_uniform_on_the_allowed_set():
    rng = np.random.default_rng(1)
    l1, l2 = ood_lengths(rng, 2, 4, 60_000)
    ell = (l1 + l2) // 2
    assert np.all(l1 + l2 == 2 * ell) and np.all(l1 != ell) and np.all(l1 >= 1)
    assert set(np.unique(ell)) == {3, 4}
    for e in (3, 4):
        values, counts = np.unique(l1[ell == e], return_counts=True)
        assert values.tolist() == [v for v in range(1, 2 * e) if v != e]
        assert counts.max() / counts.min() < 1.15


def test_ood_batch_error_mode_targets():
    rng = np.random.default_rng(2)
    b = sample_ood(rng, N, N_TRG, 3, 6, 200)
    for i in range(len(b)):
        mid = (b.l1[i] + b.l2[i]) // 2
        assert b.pseudo[i] == b.tokens[i, mid + 1]
        assert b.leftmost[i] == b.tokens[i, 3 + 1]


@pytest.mark.parametrize("bad", [dict(lengths=[0, 1], probs=[.5, .5]),
                                 dict(lengths=[1, 1], probs=[.5, .5]),
                                 dict(lengths=[1, 2], probs=[.5, .6])])
def test_length_dist_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        LengthDist(np.array(bad["lengths"]), np.array(bad["probs"]))


# -- the model -------------------------------------------------------------------------------
def test_sparse_features_match_dense_embedding():
    emb = Embedding(16, N)
    b = sample_train(np.random.default_rng(3), N, N_TRG, LengthDist.uniform(1, 6), 20)
    dense = emb(b.tokens)
    idx = emb.features(b.tokens)
    rebuilt = torch.zeros(*idx.shape[:2], emb.dim + 1).scatter_add_(
        2, idx, torch.ones(idx.shape))[..., :emb.dim]
    assert torch.equal(dense, rebuilt)
    assert torch.all(dense[:, 0, emb.blocks()["previous"]] == 0)  # nothing before position 1


@pytest.mark.parametrize("wrt", ["v", "kq"])
def test_closed_form_gradients_match_autograd(wrt):
    emb = Embedding(16, N)
    b = sample_train(np.random.default_rng(4), N, N_TRG, LengthDist.uniform(1, 6), 32)
    w_v = torch.randn(N, emb.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    g_v, g_kq = _grads_at_zero_kq(emb, b, w_v)
    ref = reference_grad(emb, b, torch.zeros(emb.dim, emb.dim), w_v.float(), wrt).double()
    mine = (g_v if wrt == "v" else g_kq) / len(b)
    assert torch.allclose(mine, ref, atol=1e-5)


@pytest.mark.parametrize("n_vocab,n_trg,lo,hi", [(9, 2, 1, 6), (9, 1, 3, 3), (40, 5, 2, 9)])
def test_compiled_grads_match_the_dense_products(n_vocab, n_trg, lo, hi):
    """The compiled sums against the dense torch products: x̄ bitwise, the gradients to
    round-off, at W_V = 0 (the first step) and at a random W_V."""
    emb = Embedding(E.n_pos_for(hi), n_vocab)
    b = sample_train(np.random.default_rng(11), n_vocab, n_trg, LengthDist.uniform(lo, hi), 64)
    idx = emb.features(b.tokens)
    inside = (torch.arange(idx.shape[1])[None, :] < torch.as_tensor(b.length)[:, None]).double()
    xbar = _scatter(idx, inside / torch.as_tensor(b.length)[:, None], emb.dim)[:, :emb.dim]
    assert torch.equal(torch.from_numpy(compiled.mean_embedding(b.tokens, b.length, emb.n_pos,
                                                                n_vocab)), xbar)
    zero = torch.zeros(n_vocab, emb.dim, dtype=torch.float64)
    w_v = torch.randn(n_vocab, emb.dim, dtype=torch.float64,
                      generator=torch.Generator().manual_seed(1))
    for mine, dense in [(_grads_at_zero_kq(emb, b, None), _grads_dense(emb, b, zero)),
                        (_grads_at_zero_kq(emb, b, w_v), _grads_dense(emb, b, w_v))]:
        for m, d in zip(mine, dense):
            assert torch.allclose(m, d, rtol=1e-12, atol=1e-12 * float(d.abs().max()))
    assert _grads_at_zero_kq(emb, b, w_v, v=False)[0] is None
    assert _grads_at_zero_kq(emb, b, w_v, kq=False)[1] is None


def test_compiled_two_steps_match_the_dense_ones():
    d = LengthDist.uniform(2, 7)
    emb = Embedding(E.n_pos_for(7), N)
    kw = dict(eta_v=1e3, eta_kq=1e4, m_v=700, m_kq=700, chunk=256)
    fast = train_two_step(np.random.default_rng(12), emb, N_TRG, d, **kw)
    plain = train_two_step(np.random.default_rng(12), emb, N_TRG, d, dense=True, **kw)
    for a, b in zip(fast, plain):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12 * float(b.abs().max()))


def test_first_step_value_matrix_matches_its_expectation():
    """W_V after step 1 (η_V = 1, one length ℓ): its token block is
    (1/T)(diag μ − u μᵀ) + ((T−3)/T)(μ − u)μᵀ + (2/T)(μ − u)νᵀ, μ/ν uniform on ordinary/trigger
    tokens, u uniform on all."""
    ell, T = 3, 9
    emb = Embedding(10, N)
    _, w_v = train_two_step(np.random.default_rng(5), emb, N_TRG, LengthDist.point(ell),
                            eta_v=1.0, eta_kq=0.0, m_v=2**17, m_kq=1)
    mu = np.r_[np.zeros(N_TRG), np.full(N - N_TRG, 1 / (N - N_TRG))]
    nu = np.r_[np.full(N_TRG, 1 / N_TRG), np.zeros(N - N_TRG)]
    u = np.full(N, 1 / N)
    expected = ((np.diag(mu) - np.outer(u, mu)) / T + (T - 3) / T * np.outer(mu - u, mu)
                + 2 / T * np.outer(mu - u, nu))
    assert np.allclose(w_v[:, emb.blocks()["token"]].numpy(), expected, atol=2e-3)


def test_perfect_induction_head_generalises_and_shortcut_does_not():
    emb = Embedding(20, N)
    blk = emb.blocks()
    w_v = np.zeros((N, emb.dim))
    w_v[:, blk["token"]] = np.eye(N)
    test = sample_ood(np.random.default_rng(6), N, N_TRG, 3, 8, 300)
    induction = np.zeros((emb.dim, emb.dim))
    for w in range(N_TRG):
        induction[blk["previous"].start + w, blk["token"].start + w] = 50.0
    assert evaluate(emb, test, induction, w_v)["accuracy"] == 1.0
    shortcut = np.zeros((emb.dim, emb.dim))
    for ell in range(3, 9):
        shortcut[ell + 1, 2 * ell + 2] = 50.0  # key at 1-based ℓ+2, query at T = 2ℓ+3
    res = evaluate(emb, test, shortcut, w_v)
    assert res["pseudo"] == 1.0 and res["accuracy"] < 0.3


def test_cells_are_deterministic():
    kw = dict(root=0, n_vocab=N, n_pos=E.n_pos_for(6), m_train=256, m_test=64)
    assert E.ood_cell(2, 3, 6, 0, **kw) == E.ood_cell(2, 3, 6, 0, **kw)
    assert E.ood_cell(2, 3, 6, 1, **kw) != E.ood_cell(2, 3, 6, 0, **kw)  # another replicate
    assert E.ood_cell(2, 3, 6, 0, **{**kw, "root": 1}) != E.ood_cell(2, 3, 6, 0, **kw)


# -- theory ----------------------------------------------------------------------------------
def test_max_sum_ratio_by_hand():
    assert TH.max_sum_ratio(LengthDist.point(7)) == pytest.approx(1.0)
    assert TH.max_sum_ratio(LengthDist(np.array([1, 2]), np.array([.5, .5]))) == pytest.approx(2 / 3)
    l0, k = 4, 5
    expected = (1 / l0) / sum(1 / (l0 + j) for j in range(k))
    assert TH.max_sum_ratio(LengthDist.uniform(l0, l0 + k - 1)) == pytest.approx(expected)
    # Lemma 7's weights 1/T(ℓ): T = 2ℓ+3
    d = LengthDist(np.array([1, 3]), np.array([.25, .75]))
    assert TH.lemma7_ratio(d, 4) == pytest.approx(4 * (.75 / 9) / (.25 / 5 + .75 / 9))


def test_lemma7_matrix_blocks():
    d = LengthDist(np.array([2, 5]), np.array([.3, .7]))
    L = E.n_pos_for(5)
    w = TH.lemma7_w_kq(d, N_TRG, N, L)
    m = TH.measured_ratio(w, L, N, N_TRG)
    assert m["positional"] == pytest.approx(max(.3 / 7, .7 / 13))
    assert m["induction"] == pytest.approx((.3 / 7 + .7 / 13) / N_TRG)
    assert m["ratio"] == pytest.approx(TH.lemma7_ratio(d, N_TRG))
    assert w[2 + 1, 7 - 1] == w[2 + 2, 7 - 1] == pytest.approx(.3 / 7)


def test_population_two_steps_give_lemma7_ratio_for_one_length():
    """One length: the positional and the induction entry come from the same key, so their
    ratio is exactly N_trg in expectation."""
    emb = Embedding(E.n_pos_for(6), 16)
    w_kq, _ = train_two_step(np.random.default_rng(7), emb, 2, LengthDist.point(6),
                             eta_v=1e3, eta_kq=1e4, m_v=2**15, m_kq=2**15)
    assert TH.measured_ratio(w_kq.numpy(), emb.n_pos, 16, 2)["ratio"] == pytest.approx(2, rel=0.05)


@pytest.mark.parametrize("n_trg", [2, 3, 5])
def test_prop8_lp_matches_closed_form(n_trg):
    q_lp, c_lp = TH.optimal_distribution_lp(n_trg, 20)
    q_cf, c_cf = TH.optimal_distribution_closed_form(n_trg, 20)
    assert c_lp == pytest.approx(c_cf, rel=1e-8)
    assert np.allclose(q_lp, q_cf, atol=1e-7)
    assert TH.max_sum_ratio(LengthDist(np.arange(1, 21), q_cf)) == pytest.approx(1 / n_trg)


def test_uniform_window_to_reach_is_the_narrowest():
    for n_trg, l0 in [(2, 1), (3, 1), (4, 3), (4, 10)]:
        k = TH.uniform_window_to_reach(n_trg, l0)
        assert TH.max_sum_ratio(LengthDist.uniform(l0, l0 + k - 1)) <= 1 / n_trg + 1e-12
        if k > 1:
            assert TH.max_sum_ratio(LengthDist.uniform(l0, l0 + k - 2)) > 1 / n_trg
    assert TH.uniform_window_to_reach(2, 1) == 4  # 1 + 1/2 + 1/3 + 1/4 ≥ 2


def test_fit_transition_recovers_a_known_crossing():
    r = np.geomspace(0.05, 1, 40)
    acc = 1 / (1 + np.exp((np.log(r) - np.log(0.2)) / 0.15))
    assert E.fit_transition(r, acc)["r_star"] == pytest.approx(0.2, rel=1e-3)
    assert E.loglog_slope(r, 3 * r**1.5) == pytest.approx(1.5)



def test_transition_ratio_of_a_known_one_over_n_trg_law():
    """Cells whose accuracy crosses 50% at R* = 0.8/N_trg give R*(4)/R*(8) = 2."""
    r = np.geomspace(0.02, 1, 30)
    rows = [{"n_trg": n, "R": x, "accuracy": 1 / (1 + np.exp((np.log(x * n / 0.8)) / 0.2))}
            for n in (4, 8) for x in r]
    res = E.transition_ratio(rows)
    assert res["R*(4)"] == pytest.approx(0.2, rel=1e-3)
    assert res["R*(4)/R*(8)"] == pytest.approx(2.0, rel=1e-3)


def test_scaling_cell_pairs_the_trained_model_with_the_mechanism():
    kw = dict(root=0, n_vocab=N, n_pos=E.n_pos_for(6), m_train=256, m_test=64)
    res = E.scaling_cell(2, 3, 6, 0, **kw)
    assert res["accuracy"] == E.ood_cell(2, 3, 6, 0, **kw)["accuracy"]
    assert res["mechanism"] == E.mechanism_cell(2, 3, 6, 0, root=0, n_vocab=N,
                                                n_pos=E.n_pos_for(6), m_test=64)["accuracy"]

# -- the realistic model ---------------------------------------------------------------------
def test_realistic_model_shapes_and_determinism():
    cfg = RealisticConfig(n_vocab=N, n_trg=1, n_pos=20, d_model=16, n_heads=2, batch=8, steps=3)
    b = sample_train(np.random.default_rng(8), N, 1, LengthDist.uniform(2, 5), 8)
    out = Transformer(cfg)(torch.as_tensor(b.tokens), torch.as_tensor(b.length))
    assert out.shape == (8, N)
    kw = dict(root=0, n_vocab=N, n_trg=1, n_pos=20, d_model=16, n_heads=2, batch=8, steps=3,
              m_test=32)
    assert realistic_cell(2, 5, 0, **kw) == realistic_cell(2, 5, 0, **kw)


def test_realistic_training_stops_when_the_task_is_solved():
    """Training runs to the step cap while the held-out accuracy is below the target, and not
    a step beyond the first check at which it is reached."""
    kw = dict(n_vocab=N, n_trg=1, n_pos=20, d_model=16, n_heads=2, batch=8, m_check=16,
              check_every=2)
    dist = LengthDist.uniform(2, 4)
    _, never = train(RealisticConfig(steps=5, target_accuracy=1.01, **kw), dist, root=0)
    assert never["steps"] == 5
    _, at_once = train(RealisticConfig(steps=5, target_accuracy=0.0, **kw), dist, root=0)
    assert at_once["steps"] == 0
    model, solved = train(RealisticConfig(steps=400, target_accuracy=0.9, lr=3e-3, **kw),
                          dist, root=0)
    assert solved["id_accuracy"] >= 0.9 and solved["steps"] % 2 == 0 and solved["steps"] < 400


# -- Theorems 5–6 in the population limit: the exact OOD decision and the threshold statistic --
def _brute_force_all_right(dist, n_trg, n_vocab=128):
    return bool(np.all(_brute_force_correct(dist, n_trg, n_vocab)))


def _brute_force_correct(dist, n_trg, n_vocab=128):
    """Lemma 7's W_KQ at hard attention and the copying W_V, on one sequence per OOD
    configuration with fillers all distinct from each other and from o; o is the last token,
    so an exact tie with a filler (argmax takes the first index) counts as wrong. One bool per
    configuration of ``ood_configurations``."""
    from lib.induction.data import sample_sequences
    from lib.induction.one_layer import predict
    from lib.induction.threshold import ood_configurations

    ell, l1 = ood_configurations(dist.l_min, dist.l_max)
    b = sample_sequences(np.random.default_rng(0), n_vocab, n_trg, l1, 2 * ell - l1)
    t_max = b.tokens.shape[1]
    distinct = n_trg + np.arange(t_max)              # fillers: all different, none is o
    for i in range(len(b)):
        keep = b.tokens[i] != PAD
        fill = np.ones(t_max, bool)
        fill[[b.l1[i], b.l1[i] + 1, b.length[i] - 1]] = False
        b.tokens[i, fill & keep] = distinct[fill & keep]
        b.tokens[i, b.l1[i] + 1] = b.target[i] = n_vocab - 1  # last: a tie goes to a filler
    n_pos = 2 * dist.l_max + 4
    emb = Embedding(n_pos, n_vocab)
    w_kq = 1e7 * TH.lemma7_w_kq(dist, n_trg, n_vocab, n_pos)
    w_v = np.zeros((n_vocab, emb.dim))
    blk = emb.blocks()
    w_v[:, blk["token"]] = np.eye(n_vocab)
    w_v[:, blk["previous"]] = np.eye(n_vocab)
    w_v[:n_trg] = 0.0
    return predict(emb, b, w_kq, w_v) == b.target


@pytest.mark.parametrize("a,b,n_trg", [(1, 2, 2), (3, 6, 2), (2, 9, 4), (4, 12, 4), (3, 5, 8),
                                       (6, 20, 8), (1, 14, 3), (2, 3, 1)])
def test_exact_ood_decision_matches_brute_force(a, b, n_trg):
    from lib.induction.threshold import ood_all_right
    d = LengthDist.uniform(a, b)
    assert ood_all_right(d, n_trg) == _brute_force_all_right(d, n_trg)


def test_ood_configurations_are_the_support_of_the_test():
    from lib.induction.threshold import ood_configurations
    ell, l1 = ood_configurations(2, 4)
    got = set(zip(ell.tolist(), l1.tolist()))
    l1s, l2s = ood_lengths(np.random.default_rng(3), 2, 4, 20_000)
    assert got == set(zip(((l1s + l2s) // 2).tolist(), l1s.tolist()))


def test_threshold_statistic_by_hand():
    from lib.induction.threshold import threshold_statistic, window_family
    s = threshold_statistic([0.1, 0.2, 0.3, 0.4], [True, True, False, False])
    assert s["r_ok"] == 0.2 and s["r_fail"] == 0.3 and s["monotone"]
    assert np.isclose(s["r_star"], np.sqrt(0.06))
    s = threshold_statistic([0.1, 0.2, 0.3, 0.4], [True, False, True, False])
    assert s["r_ok"] == 0.3 and s["r_fail"] == 0.2 and not s["monotone"]
    assert np.isnan(threshold_statistic([0.1], [True])["r_fail"])
    assert window_family(4) == [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]


def test_more_triggers_need_more_diverse_windows():
    from lib.induction.threshold import ood_all_right
    d = LengthDist.uniform(4, 30)
    assert ood_all_right(d, 2) and not ood_all_right(d, 16)


# -- Lemma 7 to next order and the batch-means error ------------------------------------------
def test_next_order_weight_by_hand():
    assert np.allclose(TH.next_order_weight(np.array([1, 3])), [3 / 25, 7 / 81])
    d = LengthDist.uniform(3, 4)
    w = np.array([7 / 81, 9 / 121])
    assert np.isclose(TH.lemma7_ratio_next(d, 4), 4 * w.max() / w.sum())
    assert TH.lemma7_ratio_next(LengthDist.point(5), 3) == 3.0



def test_chunks_out_average_to_the_step():
    d = LengthDist.uniform(2, 4)
    emb = Embedding(12, N)
    parts = []
    w_kq, _ = train_two_step(np.random.default_rng(5), emb, N_TRG, d, eta_v=1e3, eta_kq=1e4,
                             m_v=400, m_kq=400, chunk=100, chunks_out=parts)
    assert len(parts) == 4
    assert torch.allclose(sum(parts) / 4, w_kq)


def test_lemma7_tolerance_by_hand():
    from scipy.stats import t as student_t
    tol, q = E.lemma7_tolerance(np.array([2.0]), np.array([0.01]), n_vocab=32, n_trg=2,
                                l_min=np.array([3]), n_chunks=8, n_tests=5)
    assert np.isclose(q, student_t.ppf(1 - 1e-4, 7))
    assert np.allclose(tol, 6 / (30 * 9) * 2.0 + q * 0.01)


def test_lemma7_rule_judges_each_prediction_at_its_own_tolerance():
    kw = dict(n_vocab=32, n_trg=2, l_min=np.array([3, 3]), n_chunks=8, n_tests=2)
    tol, _ = E.lemma7_tolerance(np.array([2.0, 3.0]), np.array([0.01, 0.01]), **kw)
    measured = np.array([2.0, 3.0]) + np.array([0.5, 1.5]) * tol
    out = E.lemma7_rule(measured, [2.0, 3.0], [0.01, 0.01], **kw)
    assert not out["holds"] and out["misses"] == 1 and np.isclose(out["worst"], 1.5)
    assert np.allclose(out["ratios"], [0.5, 1.5])
    assert E.lemma7_rule([2.0, 3.0], [2.0, 3.0], [0.01, 0.01], **kw)["holds"]


def test_realistic_foreach_adamw_is_the_per_tensor_update():
    kw = dict(n_vocab=N, n_trg=1, n_pos=20, d_model=16, n_heads=2, batch=8, steps=6,
              early_stop=False)
    dist = LengthDist.uniform(2, 5)
    loop, _ = train(RealisticConfig(**kw), dist, root=0, foreach=False)
    fused, _ = train(RealisticConfig(**kw), dist, root=0)
    assert all(torch.equal(a, b) for a, b in zip(loop.parameters(), fused.parameters()))


def test_realistic_fixed_schedule_records_the_ood_curve():
    kw = dict(n_vocab=N, n_trg=1, n_pos=20, d_model=16, n_heads=2, batch=8, m_check=16,
              check_every=2)
    dist = LengthDist.uniform(2, 4)
    test = sample_ood(np.random.default_rng(9), N, 1, 2, 4, 32)
    cfg = RealisticConfig(steps=7, target_accuracy=0.0, early_stop=False, curve_every=3, **kw)
    model, info = train(cfg, dist, root=0, ood_test=test)
    assert info["steps"] == 7
    assert [s for s, _ in info["curve"]] == [0, 3, 6, 7]
    from lib.induction.realistic import evaluate as r_evaluate
    assert info["curve"][-1][1] == r_evaluate(model, test)["accuracy"]
    _, none = train(RealisticConfig(steps=3, **kw), dist, root=0, ood_test=test)
    assert none["curve"] == []


# -- Theorems 5–6 with the trained model: exact OOD accuracy, windows, decision rules -----------
@pytest.mark.parametrize("a,b,n_trg", [(2, 3, 2), (4, 7, 4), (3, 9, 4), (8, 17, 8), (2, 9, 3)])
def test_exact_ood_accuracy_matches_brute_force(a, b, n_trg):
    from lib.induction.threshold import ood_accuracy, ood_configurations
    d = LengthDist.uniform(a, b)
    ell, _ = ood_configurations(a, b)
    weight = 1.0 / ((b - a) * (2 * ell - 2))
    assert np.isclose(weight.sum(), 1.0)
    assert np.isclose(ood_accuracy(d, n_trg), np.sum(weight * _brute_force_correct(d, n_trg)))


def test_exact_ood_accuracy_is_one_exactly_when_all_right():
    from lib.induction.threshold import ood_accuracy, ood_all_right
    for a, b, n in [(4, 30, 2), (4, 30, 16), (2, 5, 2), (2, 3, 2)]:
        d = LengthDist.uniform(a, b)
        assert (ood_accuracy(d, n) == 1.0) == ood_all_right(d, n)


def test_regime_windows_straddle_the_products():
    from lib.induction.threshold import ood_all_right
    for n in (2, 4, 8, 16):
        w = E.regime_windows(n, 0.8, 1.15)
        pn = n * TH.max_sum_ratio(LengthDist.uniform(n, w["narrow"]))
        pn_next = n * TH.max_sum_ratio(LengthDist.uniform(n, w["narrow"] + 1))
        pd_ = n * TH.max_sum_ratio(LengthDist.uniform(n, w["diverse"]))
        pd_prev = n * TH.max_sum_ratio(LengthDist.uniform(n, w["diverse"] - 1))
        assert pn >= 1.15 > pn_next and pd_ <= 0.8 < pd_prev
        # the exact rule of the population limit puts them on the two sides
        assert not ood_all_right(LengthDist.uniform(n, w["narrow"]), n)
        assert ood_all_right(LengthDist.uniform(n, w["diverse"]), n)
    assert E.regime_windows(4, 0.8, 1.15) == {"narrow": 7, "diverse": 12}
    with pytest.raises(ValueError):
        E.regime_windows(1, 0.8, 1.15)   # no window from ℓ0 = 1 reaches N_trg·R ≥ 1.15
    with pytest.raises(ValueError):
        E.regime_windows(4, 1.2, 0.8)


def test_contrast_rule_by_hand():
    r = E.contrast_rule([1.0, 0.99], [0.28, 0.11], 1024)
    assert r["holds"] and r["seeds_passing"] == 2
    r = E.contrast_rule([0.52, 1.0], [0.08, 0.08], 1024)
    assert not r["holds"] and r["seeds_passing"] == 1   # 0.52 is not clearly above 1/2
    assert not E.contrast_rule([1.0], [0.6], 1024)["holds"]
    assert not E.contrast_rule([], [], 1024)["holds"]
    d = E.contrast_rule([1.0], [0.0], 1024)["detectable"]
    assert 0.5 < d < 0.56   # one-sided z = 3.09: about 0.5 + 3.09·0.5/√1024


def test_contrast_rule_false_alarm_at_the_boundary():
    """A model at exactly one half on the diverse range passes at most once in a thousand
    (exact binomial sum over the test's outcomes), and so does one at one half on the narrow."""
    from scipy.stats import binom
    m = 1024
    k = np.arange(m + 1)
    lower = np.asarray(E.contrast_rule(k / m, np.zeros(m + 1), m)["lower_diverse"])
    assert binom.pmf(k, m, 0.5)[lower >= 0.5].sum() <= 1e-3
    upper = np.asarray(E.contrast_rule(np.ones(m + 1), k / m, m)["upper_narrow"])
    assert binom.pmf(k, m, 0.5)[upper <= 0.5].sum() <= 1e-3


def test_separation_rule_by_hand():
    div, nar = [0.9, 1.0, 1.0, 1.0], [0.37, 0.24, 0.79, 0.83]
    r_div, r_nar = [0.39, 0.197, 0.099, 0.05], [0.6, 0.33, 0.148, 0.073]
    s = E.separation_rule(div, nar, r_div, r_nar, 1024)
    assert s["holds"] and s["rival_rejected"] and s["gap"] > 0
    assert np.isclose(s["quantile"], 3.66, atol=0.01)   # one-sided 1e-3/8
    s = E.separation_rule([0.9, 0.85], [0.37, 0.84], [0.39, 0.2], [0.6, 0.1], 1024)
    assert not s["holds"]            # the second pair is not separated
    s = E.separation_rule([0.4, 1.0], [0.1, 0.2], [0.39, 0.2], [0.6, 0.3], 1024)
    assert not s["holds"]            # a diverse window below one half
    s = E.separation_rule([0.9, 1.0], [0.1, 0.2], [0.1, 0.2], [0.6, 0.3], 1024)
    assert not s["rival_rejected"]   # no diverse window has a larger R than a narrow one



# -- shortcut-free pretraining and the controls of round 4 -----------------------------------------
def test_shortcut_free_training_draws_independent_lengths():
    rng = np.random.default_rng(1)
    d = LengthDist.uniform(2, 9)
    b = sample_train(rng, N, N_TRG, d, 2000, shortcut_free=True)
    assert np.mean(b.l1 != b.l2) > 0.7
    assert set(np.unique(b.l1)) <= set(d.lengths) and set(np.unique(b.l2)) <= set(d.lengths)
    assert np.all(b.length == b.l1 + b.l2 + 3)
    for i in range(50):
        z = b.tokens[i, :b.length[i]]
        assert z[b.l1[i]] == b.trigger[i] == z[-1] and z[b.l1[i] + 1] == b.target[i]
    # the default is Definition 1, drawn exactly as before
    a = sample_train(np.random.default_rng(1), N, N_TRG, d, 50)
    c = sample_train(np.random.default_rng(1), N, N_TRG, d, 50, shortcut_free=False)
    assert np.array_equal(a.tokens, c.tokens) and np.all(a.l1 == a.l2)


def test_lemma7_next_order_fails_without_its_hypothesis():
    d = LengthDist.uniform(4, 10)
    kw = dict(root=0, n_vocab=32, n_pos=E.n_pos_for(15), m=4096, n_chunks=8)
    for free, within in ((False, True), (True, False)):
        r = E.lemma7_point(2, d, shortcut_free=free, **kw)
        tol, _ = E.lemma7_tolerance(r["next_order"], r["se"], n_vocab=32, n_trg=2, l_min=4, n_chunks=8,
                                    n_tests=10, false_alarm=3e-4)
        assert (abs(r["measured"] - r["next_order"]) <= tol) == within


def test_majority_rule_by_hand_and_at_its_boundary():
    r = E.majority_rule([0.9, 0.88], 1024, false_alarm=2e-4)
    assert r["holds"] and r["seeds_passing"] == 2
    assert not E.majority_rule([0.9, 0.5], 1024, false_alarm=2e-4)["holds"]
    assert not E.majority_rule([], 1024)["holds"]
    m = 256
    k = np.arange(m + 1)
    det = E.majority_rule([1.0], m, false_alarm=2e-4)["detectable"]
    lower = np.asarray(E.majority_rule(k / m, m, false_alarm=2e-4)["lower"])
    assert np.all(lower[k / m >= det] >= 0.5) and np.all(lower[k / m < det] < 0.5)
    assert 0.5 < det < 0.8


def test_control_window_lies_above_the_threshold():
    for n in (4, 8, 16):
        b = E.control_window(n, 0.8, 1.15)
        narrow = E.regime_windows(n, 0.8, 1.15)["narrow"]
        assert b == narrow - 1 and n * TH.max_sum_ratio(LengthDist.uniform(n, b)) >= 1.15
    assert E.control_window(2, 0.8, 1.15) is None  # Unif{2..3} is the only window above the threshold


def test_realistic_shortcut_free_uses_its_own_streams():
    kw = dict(root=3, m_test=64, n_vocab=8, n_trg=1, n_pos=E.n_pos_for(4), n_layers=1, d_model=16, n_heads=2,
              batch=8, steps=3, early_stop=False)
    a = realistic_cell(2, 4, 0, **kw)
    b = realistic_cell(2, 4, 0, shortcut_free=True, **kw)
    assert a == realistic_cell(2, 4, 0, **kw)
    assert a["curve"] == b["curve"] == []
    assert (a["accuracy"], a["pseudo"], a["id_accuracy"]) != (b["accuracy"], b["pseudo"], b["id_accuracy"])


# -- the chapter's tables and decision rules (lib.induction.analysis) ----------------------
def test_spearman_is_one_for_a_monotone_pair_and_nan_for_a_constant_one():
    import pandas as pd
    from lib.induction import analysis as A
    x, y = pd.Series([1.0, 2.0, 3.0, 4.0]), pd.Series([0.1, 0.5, 0.7, 0.9])
    assert A.spearman(x, y) == pytest.approx(1.0)
    assert A.spearman(x, -y) == pytest.approx(-1.0)
    assert np.isnan(A.spearman_if_varies(x, pd.Series([0.5] * 4)))
    assert A.spearman_if_varies(x, y[::-1].reset_index(drop=True)) == pytest.approx(-1.0)


def test_lemma7_distributions_are_distributions_with_one_single_length():
    from lib.induction import analysis as A
    dists = A.lemma7_distributions()
    for d in dists.values():
        assert np.isclose(np.sum(d.probs), 1.0) and np.all(np.asarray(d.probs) > 0)
    assert [name for name, d in dists.items() if d.lengths.size == 1] == ["ℓ ≡ 8"]
    assert dists["Unif{3..15}"].l_min == 3


def test_lemma7_summary_on_a_hand_made_table():
    """Rows measured exactly at the next order have zero error; the single-length row is set
    apart; the deviations are read from the columns as their definitions say."""
    import pandas as pd
    from lib.induction import analysis as A
    lemma7 = pd.DataFrame({"distribution": ["a", "b", "c"], "N_trg": [2, 2, 2], "single": [False, False, True],
                           "ℓ_min": [3, 4, 8], "N_trg·R": [1.0, 2.0, 2.0], "Lemma 7": [1.0, 2.0, 2.0],
                           "next order": [1.1, 2.0, 2.0], "measured": [1.1, 2.2, 2.0],
                           "standard error": [0.1, 0.1, 0.0]})
    lemma7["measured / Lemma 7"] = lemma7["measured"] / lemma7["Lemma 7"]
    lemma7["measured / next order"] = lemma7["measured"] / lemma7["next order"]
    s = A.lemma7_summary(lemma7, n_vocab=32, n_chunks=8, false_alarm=1e-3)
    assert list(s["single"]["distribution"]) == ["c"] and list(s["mix"]["distribution"]) == ["a", "b"]
    assert s["err"] == pytest.approx([0.0, 0.2])
    assert s["z"] == pytest.approx(2.0)
    assert s["dev"] == pytest.approx(0.1) and s["dev_next"] == pytest.approx(0.1)
    assert s["dev_r"] == pytest.approx(0.1) and s["shift"] == pytest.approx(0.1)
    tol, q = E.lemma7_tolerance([1.1, 2.0], [0.1, 0.1], n_vocab=32, n_trg=np.array([2, 2]),
                                l_min=np.array([3, 4]), n_chunks=8, n_tests=2, false_alarm=1e-3)
    assert np.allclose(s["tol"], tol) and s["q"] == q > 0


def test_grid_cells_average_seeds_and_attach_the_mechanism():
    import pandas as pd
    from lib.induction import analysis as A
    ood = pd.DataFrame({"n_trg": [4, 4, 4], "l_min": [3, 3, 5], "l_max": [9, 9, 9], "seed": [0, 1, 0],
                        "R": [0.5, 0.5, 0.25], "accuracy": [1.0, 0.5, 0.0], "pseudo": [0.0, 0.2, 0.9],
                        "leftmost": [0.0, 0.0, 0.1]})
    mech = pd.DataFrame({"n_trg": [4, 4], "l_min": [3, 5], "l_max": [9, 9], "accuracy": [0.9, 0.1]})
    cells = A.grid_cells(ood, mech).set_index("l_min")
    assert cells.loc[3, "accuracy"] == pytest.approx(0.75) and cells.loc[3, "pseudo"] == pytest.approx(0.1)
    assert cells.loc[3, "n_trg_R"] == pytest.approx(2.0) and cells.loc[5, "mechanism"] == pytest.approx(0.1)
    assert "n_trg_R" in ood  # the per-seed column the chapter reads again


def test_exact_thresholds_and_their_summary():
    import pandas as pd
    from lib.induction import analysis as A
    thr = A.exact_thresholds([4, 2], 8)
    assert list(thr.index) == [2, 4]
    assert np.allclose(thr["N_trg·R_ok"], thr.index * thr["r_ok"])
    # thresholds exactly c/N_trg: slopes −1, spreads 1, band log 2.5 / log 4
    exact = pd.DataFrame({"r_ok": [0.5, 0.25, 0.125], "r_fail": [1.0, 0.5, 0.25]}, index=[2, 4, 8])
    exact["N_trg·R_ok"] = exact.index * exact["r_ok"]
    exact["N_trg·R_fail"] = exact.index * exact["r_fail"]
    span, delta, spread, slope = A.threshold_summary(exact, 2.5)
    assert span == 4.0 and delta == pytest.approx(np.log(2.5) / np.log(4))
    assert spread == {"R_ok": 1.0, "R_fail": 1.0}
    assert slope["R_ok"] == pytest.approx(-1.0) and slope["R_fail"] == pytest.approx(-1.0)


def test_grid_thresholds_count_a_window_right_only_when_every_seed_is():
    import pandas as pd
    from lib.induction import analysis as A
    from lib.induction import threshold as TT
    ood = pd.DataFrame({"n_trg": [2] * 4, "l_min": [2, 2, 3, 3], "l_max": [12, 12, 4, 4], "seed": [0, 1, 0, 1],
                        "R": [0.2, 0.2, 0.6, 0.6], "accuracy": [1.0, 1.0, 1.0, 0.99]})
    grid_ok, grid_thr = A.grid_thresholds(ood)
    assert list(grid_ok["ok"]) == [True, False]
    assert list(grid_ok["exact"]) == [TT.ood_all_right(LengthDist.uniform(2, 12), 2),
                                      TT.ood_all_right(LengthDist.uniform(3, 4), 2)]
    assert grid_thr.loc[2, "R_ok (trained)"] == 0.2 and grid_thr.loc[2, "R_fail (trained)"] == 0.6
    assert grid_thr.loc[2, "windows that differ"] == int(np.sum(grid_ok["ok"] != grid_ok["exact"]))


def test_regime_split_and_bounds_follow_each_window():
    import pandas as pd
    from lib.induction import analysis as A
    regime = pd.DataFrame({"n_trg": [4, 2, 2, 4], "n_trg_R": [0.5, 0.7, 1.3, 1.2]})
    div, nar = A.split_regime(regime, 0.8)
    assert list(regime["window"]) == ["diverse", "diverse", "narrow", "narrow"]
    assert list(div["n_trg"]) == [2, 4] and list(nar["n_trg"]) == [2, 4]
    rule = {"lower_diverse": [0.9, 0.8], "upper_narrow": [0.1, 0.2]}  # in N_trg order, as the rule gives them
    assert A.regime_bounds(regime, div, nar, rule) == [0.8, 0.9, 0.1, 0.2]


def test_realistic_cells_seed_values_and_verdict():
    import pandas as pd
    from lib.induction import analysis as A
    realistic = pd.DataFrame({"l_min": [4, 4, 2, 2], "l_max": [5, 5, 16, 16], "seed": [1, 0, 0, 1],
                              "R": [0.9, 0.9, 0.2, 0.2], "accuracy": [0.1, 0.3, 1.0, 0.8],
                              "pseudo": [0.5, 0.7, 0.9, 0.6], "leftmost": [0.0] * 4,
                              "steps": [10, 20, 30, 40], "id_accuracy": [1.0, 0.99, 1.0, 0.995]})
    one_layer = pd.DataFrame({"l_min": [4, 2], "l_max": [5, 16], "seed": [0, 0], "accuracy": [0.0, 1.0]})
    cells = A.realistic_cells(realistic, one_layer)
    assert list(cells["l_min"]) == [2, 4]  # by R: the most diverse first
    assert cells.iloc[0]["accuracy"] == pytest.approx(0.9) and cells.iloc[0]["steps"] == 40
    assert cells.iloc[1]["id_accuracy"] == 0.99 and cells.iloc[1]["one-layer model"] == 0.0
    assert list(A.seed_values(realistic, cells.iloc[1])) == [0.3, 0.1]
    assert list(A.seed_values(realistic, cells.iloc[0], "pseudo")) == [0.9, 0.6]
    assert A.realistic_verdict(detects=True, holds=True, early_stop=False, control_holds=True).endswith("reproduced")
    assert "not reproduced" in A.realistic_verdict(detects=True, holds=False, early_stop=False, control_holds=True)
    both = A.realistic_verdict(detects=False, holds=True, early_stop=True, control_holds=False)
    assert "fixed schedule" in both and "positive control fails" in both
    assert "fixed schedule" not in A.realistic_verdict(detects=False, holds=True, early_stop=False,
                                                       control_holds=False)


def test_the_ood_heatmaps_draw_one_panel_per_trigger_count():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    from lib.induction import figures as F
    cells = pd.DataFrame([{"n_trg": n, "l_min": a, "l_max": b, "accuracy": float(a > 4)}
                          for n in (4, 8) for a in range(3, 8) for b in range(a + 1, 9)])
    transition = {4: {"r_star": 0.3}, 8: {"r_star": 0.15}}
    fig = F.ood_heatmaps(cells, transition, {"r_star": 1.2}, [4, 8], 3, 8)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == [r"OOD accuracy, $N_{\mathrm{trg}}=4$",
                                                 r"OOD accuracy, $N_{\mathrm{trg}}=8$"]
    image = panels[0].get_images()[0].get_array()
    assert image.shape == (6, 6) and image[0, 1] == 0.0 and image[2, 3] == 1.0  # rows ℓ_min − 3, columns ℓ_max − 3
    plt.close("all")
