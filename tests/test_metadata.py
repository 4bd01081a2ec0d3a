"""Chapter 10's training: data-matched arms, and the population trains what the plain loop trains."""

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


def test_the_schedule_is_torch_one_cycle():
    rates, beta1 = M._schedule(20, 1e-2, 0.25)
    assert rates[0] == pytest.approx(1e-2 / 25) and rates.max() == pytest.approx(1e-2)
    assert int(np.argmax(rates)) == 4 and rates[-1] < 1e-4
    assert beta1[0] == pytest.approx(0.95) and beta1[4] == pytest.approx(0.85)


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
