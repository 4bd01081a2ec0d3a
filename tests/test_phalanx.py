"""Tests of lib.phalanx: theory helpers, layers and the corpus."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kernels.swr import naive, swr
from lib import phalanx as M




def test_error_bound_by_hand():
    # ℓ = 2, L = 6: windows 1 2 | 3 4 | 3 4; blocks 0 and 1 are exact
    b = M.error_bound(0.5, 6, 2, u_inf=1.0)
    assert np.allclose(b, [0, 0, 0, 0, 0.5**3 / 0.5, 0.5**4 / 0.5])


@pytest.mark.parametrize("rho", [0.5, 0.8, 0.95])
def test_truncation_identity_and_bound(rho):
    r = M.truncation_experiment(rho, 80, 8, channels=3, generator=torch.Generator().manual_seed(1),
                                jitter=0.3)
    assert r["identity_gap"] <= 1e-12
    assert r["bound_ratio"] <= 1.0
    assert r["error"][:16].max() <= 1e-12 and r["error"][16:].max() > 0


def test_bound_is_attained_order_of_magnitude_for_constant_input():
    # u ≡ 1, a ≡ ρ: x_{s−1} → 1/(1−ρ), so the error approaches the bound from below
    a = torch.full((1, 1, 200), 0.8, dtype=torch.float64)
    u = torch.ones(1, 1, 200, 1, dtype=torch.float64)
    err = (naive.scan_reference(a, u) - swr(a, u, block=16))[0, 0, :, 0].numpy()
    bound = M.error_bound(0.8, 200, 16, 1.0)
    assert np.all(err <= bound + 1e-15) and err[-1] / bound[-1] > 0.99


def test_implementation_agreement_is_tiny():
    worst = M.implementation_agreement([(1, 2, 37, 3), (1, 1, 16, 2)], root=3)
    assert {"masked", "decode", "chunked"} <= set(worst)
    assert max(worst.values()) <= 1e-10


def test_phalanx_matches_its_definition():
    torch.manual_seed(0)
    layer = M.Phalanx(32, block=4).double()
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    a = torch.sigmoid(layer.decay(x))
    b, c = layer.bc(x).chunk(2, dim=-1)
    v = layer.value(x)
    out = torch.zeros_like(x)
    for bi in range(2):
        for h in range(2):
            sl = slice(16 * h, 16 * h + 16)
            hh = naive.swr_matrix(a[bi, :, h], 4) @ (torch.sigmoid(b[bi, :, sl]) * v[bi, :, sl])
            out[bi, :, sl] = c[bi, :, sl] * hh + v[bi, :, sl]
    assert torch.allclose(layer(x), layer.out(out), atol=1e-12)


def test_phalanx_is_causal_and_local():
    torch.manual_seed(0)
    layer = M.Phalanx(16, block=4).double()
    x = torch.randn(1, 20, 16, dtype=torch.float64, requires_grad=True)
    layer(x)[0, 13].sum().backward()  # position 13 in block 3 sees blocks 2 and 3: [8, 13]
    touched = (x.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
    assert touched == list(range(8, 14))


def test_swa_layer_window():
    torch.manual_seed(0)
    layer = M.Attention(16, window=4).double()
    x = torch.randn(1, 20, 16, dtype=torch.float64, requires_grad=True)
    layer(x)[0, 13].sum().backward()
    touched = (x.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
    assert touched == list(range(8, 14))


def test_decoder_patterns_and_parameters():
    assert M.hybrid_pattern("P", 4) == "PPPG" and M.hybrid_pattern("S", 8) == "SSSGSSSG"
    n = {p: M.Decoder(p, d_model=64).n_params() for p in ("GGGG", "SSSG", "PPPG")}
    assert n["GGGG"] == n["SSSG"]
    assert abs(n["PPPG"] / n["SSSG"] - 1) < 0.01
    logits = M.Decoder("PPPG", d_model=32)(torch.randint(0, 256, (2, 21)))
    assert logits.shape == (2, 21, 256)
    with pytest.raises(ValueError):
        M.Decoder("PXG")


def test_corpus_is_fixed_and_split():
    c = M.load_corpus(("bisect", "colorsys"), valid_fraction=0.25)
    assert set(c.hashes) == {"bisect", "colorsys"} and all(len(h) == 64 for h in c.hashes.values())
    assert len(c.train) + len(c.valid) == c.n_bytes
    assert 0.2 < len(c.valid) / c.n_bytes < 0.3
    assert torch.equal(M.load_corpus(("bisect", "colorsys"), 0.25).train, c.train)
    x, y = M.valid_batches(c.valid, 32, 4)
    assert torch.equal(x[:, 1:], y[:, :-1])
    with pytest.raises(ValueError):
        M.load_corpus(("no_such_module_xyz",))


def test_training_lowers_the_loss():
    c = M.load_corpus(("bisect", "colorsys", "heapq"))
    r = M.train_lm("PG", c, root=0, steps=30, batch=4, seq_len=32, d_model=32, eval_every=30,
                   valid_windows=8)
    assert r["valid_loss"][-1] < r["valid_loss"][0] - 1.0
    r2 = M.train_lm("PG", c, root=0, steps=30, batch=4, seq_len=32, d_model=32, eval_every=30,
                    valid_windows=8)
    assert r2["valid_loss"] == r["valid_loss"]


def test_training_draws_name_their_streams():
    # another replicate or chapter seed trains another model; the replicate's batches are
    # shared by every pattern, its initialisation is not
    c = M.load_corpus(("bisect", "colorsys"))
    kw = dict(steps=3, batch=2, seq_len=16, d_model=16, eval_every=3, valid_windows=2)
    base = M.train_lm("PG", c, root=0, rep=0, **kw)["valid_loss"]
    assert M.train_lm("PG", c, root=0, rep=1, **kw)["valid_loss"] != base
    assert M.train_lm("PG", c, root=1, rep=0, **kw)["valid_loss"] != base
    from lib.seeding import torch_generator
    x, _ = M.sample_batch(c.train, 2, 16, torch_generator(0, "lm-batches", 0))
    assert torch.equal(x, M.sample_batch(c.train, 2, 16, torch_generator(0, "lm-batches", 0))[0])


def test_truncation_point_has_its_own_stream():
    kw = dict(root=0, length=48, block=8, channels=2, jitter=0.2)
    a = M.truncation_point(0.8, 1, **kw)
    assert np.array_equal(a["error"], M.truncation_point(0.8, 1, **kw)["error"])  # deterministic
    # another input, decay bound or chapter seed draws another input
    for other in (M.truncation_point(0.8, 2, **kw), M.truncation_point(0.5, 1, **kw),
                  M.truncation_point(0.8, 1, **{**kw, "root": 1})):
        assert not np.array_equal(a["bound"], other["bound"])
    assert a["identity_gap"] < 1e-12 and a["bound_ratio"] <= 1.0


def test_lm_point_trains_on_the_named_corpus_and_refuses_another():
    c = M.load_corpus(("bisect", "colorsys"))
    kw = dict(steps=2, batch=2, seq_len=16, d_model=16, eval_every=2, valid_windows=2)
    r = M.lm_point("PG", 3, root=5, corpus_sha256=c.hashes, **kw)
    assert r["valid_loss"] == M.train_lm("PG", c, root=5, rep=3, **kw)["valid_loss"]
    with pytest.raises(ValueError, match="standard-library sources differ"):
        M.lm_point("PG", 3, root=5, corpus_sha256={**c.hashes, "bisect": "0" * 64}, **kw)


def test_full_scan_phalanx_is_the_untruncated_recurrence():
    """With the full scan the layer equals its SWR twin on sequences within two blocks (where
    the window holds everything) and differs beyond."""
    torch.manual_seed(0)
    trunc = M.Phalanx(32, block=4)
    full = M.Phalanx(32, block=4, full=True)
    full.load_state_dict(trunc.state_dict())
    x = torch.randn(2, 8, 32)
    assert torch.allclose(trunc(x), full(x), atol=1e-6)
    x = torch.randn(2, 40, 32)
    assert not torch.allclose(trunc(x), full(x), atol=1e-4)


def test_wide_swa_sees_more_than_narrow():
    torch.manual_seed(1)
    narrow = M.make_mixer("S", 32, 4)
    wide = M.make_mixer("W", 32, 4, wide_block=16)
    wide.load_state_dict(narrow.state_dict())
    x = torch.randn(1, 16, 32)
    assert not torch.allclose(narrow(x), wide(x), atol=1e-5)
    full = M.make_mixer("G", 32, 4)
    full.load_state_dict(narrow.state_dict())
    assert torch.allclose(wide(x), full(x), atol=1e-5)  # 16 tokens: one wide block sees all
    model = M.Decoder("FFWG", d_model=32, block=4, wide_block=8)
    assert model(torch.zeros(1, 9, dtype=torch.long)).shape == (1, 9, 256)


def test_unigram_loss_by_hand():
    c = M.Corpus(train=torch.tensor([0, 0, 1]), valid=torch.tensor([0, 1]), hashes={}, n_bytes=5)
    counts = np.ones(256)
    counts[0] += 2
    counts[1] += 1
    p = counts / counts.sum()
    assert np.isclose(M.unigram_loss(c), -(np.log(p[0]) + np.log(p[1])) / 2)


def test_learning_rate_warms_up_then_decays_to_zero_at_the_last_step():
    # the chapter's settling rule reads the end of a run as a plateau of its schedule
    for steps in (6, 120, 2000):
        f = np.array([M.lr_factor(s, steps) for s in range(steps)])
        warmup = max(1, steps // 10)
        assert int(np.argmax(f)) == warmup - 1 and f[warmup - 1] > 0.97
        assert np.all(np.diff(f[:warmup]) > 0)
        assert np.all(np.diff(f[warmup - 1:]) <= 1e-12)
        assert f[-1] == pytest.approx(0.5 * (1 - math.cos(math.pi / steps)), rel=1e-12) and f[-1] < 0.07
        assert M.lr_factor(steps, steps) == pytest.approx(0.0, abs=1e-15)


def test_recall_windows_repeat_at_half_the_window_and_source_windows_are_unchanged():
    data = torch.arange(1000) % 251
    start = torch.tensor([3, 500])
    src = M._windows(data, start, 9, "source")
    assert torch.equal(src, data[start[:, None] + torch.arange(10)])
    rec = M._windows(data, start, 9, "recall")
    span = M.recall_span(9)
    assert span == 5 and rec.shape == (2, 10)
    assert torch.equal(rec[:, span:], rec[:, :10 - span])
    assert torch.equal(rec[:, :span], src[:, :span])
    with pytest.raises(ValueError):
        M._windows(data, start, 9, "other")
    x, y = M.valid_batches(data, 9, 3, "recall")
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(x[:, 5:], x[:, :4])


def test_noninferiority_by_hand_and_its_false_alarm_rate():
    from scipy import stats as st

    gaps = np.array([-0.01, -0.02, -0.015, -0.005])
    t = M.noninferiority(gaps, margin=0.02, alpha=1e-3)
    se = gaps.std(ddof=1) / 2
    assert t.se == pytest.approx(se) and t.upper == pytest.approx(gaps.mean() + st.t.isf(1e-3, 3) * se)
    assert t.holds == (t.upper < 0.02) and t.all_below_zero
    assert t.detectable == pytest.approx((st.t.isf(1e-3, 3) + st.t.isf(0.2, 3)) * se)
    # under the null (true mean gap = margin) the rule passes at about its stated rate
    rng = np.random.default_rng(0)
    sims = 0.02 + 0.01 * rng.standard_normal((5000, 4))
    rate = np.mean([M.noninferiority(g, 0.02, 0.05).holds for g in sims])
    assert abs(rate - 0.05) < 0.015
    one = M.noninferiority([0.0], 0.02, 1e-3)
    assert not one.holds and one.detectable is None


def test_step_doubling_and_the_design_numbers():
    from scipy.stats import t as student_t
    moved = M.step_doubling([0.03, 0.01], [0.0, 0.0], 0.01)
    assert np.isclose(moved["change"], -0.02) and np.isclose(moved["half"], 0.02) and not moved["stable"]
    # the paired change's 90% interval by hand: changes -0.005, -0.004, -0.006 (mean -0.005, sd 0.001)
    calm = M.step_doubling([0.01, 0.02, 0.03], [0.005, 0.016, 0.024], 0.01)
    half_width = student_t.isf(0.05, 2) * 0.001 / np.sqrt(3)
    assert np.isclose(calm["change"], -0.005) and np.isclose(calm["upper"], -0.005 + half_width)
    assert calm["stable"]
    # a mean change inside the band whose own noise is larger is not stable (the referee's case)
    noisy = M.step_doubling([-0.080, -0.122, -0.138], [-0.127, -0.123, -0.144], 0.01)
    assert abs(noisy["change"]) < 0.02 and noisy["lower"] < -0.01 and not noisy["stable"]
    assert not M.step_doubling([0.005], [0.0], 0.01)["stable"]  # one seed: no interval
    with pytest.raises(ValueError):
        M.step_doubling([0.0, 0.1], [0.0], 0.01)
    test = M.noninferiority([-0.01, -0.012, -0.011], 0.02, 1e-3)
    d = M.comparison_design(test, learned=True, stable=True, param_ratio=1.001, max_param_ratio=1.02,
                            context_control=None)
    assert d == {"effect": 0.02, "ceiling": None, "matched": True, "detectable": test.detectable, "control": None}
    for bad in (dict(learned=False, stable=True, param_ratio=1.0), dict(learned=True, stable=False, param_ratio=1.0),
                dict(learned=True, stable=True, param_ratio=1.1)):
        assert not M.comparison_design(test, max_param_ratio=1.02, context_control=True, **bad)["matched"]
    # the positive control failed: the regime does not use context, so the arms are not compared where it matters
    assert not M.comparison_design(test, learned=True, stable=True, param_ratio=1.0, max_param_ratio=1.02,
                                   context_control=False)["matched"]
    assert M.comparison_design(test, learned=True, stable=True, param_ratio=1.0, max_param_ratio=1.02,
                               context_control=True)["matched"]
    short = M.comparison_design(M.noninferiority([0.0], 0.02, 1e-3), learned=True, stable=True, param_ratio=1.0,
                                max_param_ratio=1.02, context_control=True)
    assert short["control"] is False and short["detectable"] is None


def test_wider_window_control():
    helps = M.wider_window_helps([2.0, 2.1, 2.2], [1.6, 1.7, 1.75], alpha=1e-3)
    assert helps["holds"] and helps["upper"] < 0
    assert not M.wider_window_helps([2.0, 2.1, 2.2], [2.0, 2.12, 2.19], alpha=1e-3)["holds"]
    assert not M.wider_window_helps([2.0], [1.0], alpha=1e-3)["holds"]


def test_final_losses_are_paired_by_replicate_and_filtered_by_pattern():
    records = [{"rep": 1, "pattern": "SSSG", "final_valid_loss": 2.5},
               {"rep": 0, "pattern": "PPPG", "final_valid_loss": 2.0},
               {"rep": 0, "pattern": "SSSG", "final_valid_loss": 2.25},
               {"rep": 1, "pattern": "PPPG", "final_valid_loss": 1.75}]
    assert M.final_losses(records, "SSSG").tolist() == [2.25, 2.5]
    assert M.final_losses(records, "PPPG").tolist() == [2.0, 1.75]
    assert M.final_losses(records[:2]).tolist() == [2.0, 2.5]  # every run, by replicate


def test_estimable_formats_a_value_or_says_why_not():
    assert M.estimable(0.0123, "+.2%") == "+1.23%"
    assert M.estimable(None, ".2%") == M.estimable(math.inf, ".2%") == "not estimable from fewer than two seeds"
    assert M.estimable(math.nan, ".2%").startswith("not estimable")
