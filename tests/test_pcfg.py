"""Chapter 10: exact PCFG probabilities against brute force, the posterior, the sequence format."""

import itertools

import numpy as np
import pytest
import torch

from lib import metadata as M
from lib import pcfg
from lib.seeding import seed32
from lib.seeding import torch_generator


@pytest.fixture(scope="module", params=["binary-ternary", "unary"])
def grammar(request):
    if request.param == "unary":  # right-hand sides of 1, 2 or 3 symbols, as in the chapter's grammar
        return pcfg.random_grammar(depth=3, nonterminals=3, terminals=5, root=3, rhs_lengths=(1, 2, 3))
    return pcfg.random_grammar(depth=3, nonterminals=2, terminals=3, root=3)


def test_the_grammar_and_the_probe_seed_follow_their_streams():
    kw = dict(depth=3, nonterminals=2, terminals=3)
    assert pcfg.random_grammar(**kw, root=3) == pcfg.random_grammar(**kw, root=3, index=0)
    assert pcfg.random_grammar(**kw, root=3) != pcfg.random_grammar(**kw, root=4)
    assert pcfg.random_grammar(**kw, root=3) != pcfg.random_grammar(**kw, root=3, index=1)
    seeds = {seed32(root, "probe", k) for root in range(3) for k in range(50)}
    assert len(seeds) == 150 and all(0 <= s < 2**32 for s in seeds)  # what scikit-learn accepts


def test_hand_checked_grammar():
    # S -> A A | A B under both rule sets at level 0; A -> 0 | 1 (set 0) or 1 1 | ... by hand:
    # level 1 symbols rewrite to terminals. One level-0 rule set per j_0, one terminal level.
    g = pcfg.Grammar(rules=(
        (((( 0, 0), (0, 1)),), (((1, 1), (0, 1)),)),          # level 0: S under j_0 = 0 and 1
        ((((0, 0), (1, 1)), ((0, 1), (1, 0))), (((0, 0), (0, 1)), ((1, 1), (1, 0)))),  # level 1: A, B
    ), n_symbols=(1, 2, 2))
    # j = (0, 0): S -> A A | A B (½ each); A -> 00 | 11; B -> 01 | 10.
    dist = pcfg.yields(g, (0, 0))
    assert dist[(0, 0, 0, 0)] == pytest.approx(0.5 * 0.25)
    assert dist[(0, 0, 0, 1)] == pytest.approx(0.5 * 0.25)
    assert sum(dist.values()) == pytest.approx(1.0)
    L = pcfg.prefix_log_probs(g, [(0, 0, 0, 1)])
    c = g.configs().index((0, 0))
    # p(x_<1 = 0) = p(A starts with 0) = ½ ; p(x_<3 = 000) = ½ (A=00) × [½ (A A: A=00 → ½) + ½ (A B: B=01 → ½)]
    assert np.exp(L[0, c, 1]) == pytest.approx(0.5)
    assert np.exp(L[0, c, 3]) == pytest.approx(0.5 * (0.5 * 0.5 + 0.5 * 0.5))
    assert np.exp(L[0, c, 5]) == pytest.approx(dist[(0, 0, 0, 1)])


def test_prefix_probabilities_match_enumeration(grammar):
    rng = np.random.default_rng(0)
    lang = pcfg.Language(grammar)
    strings, _ = lang.sample(6, rng)
    L = pcfg.prefix_log_probs(grammar, strings)
    dists = {j: pcfg.yields(grammar, j) for j in grammar.configs()}
    for b, x in enumerate(strings):
        for c, j in enumerate(grammar.configs()):
            for t in range(len(x) + 1):
                brute = sum(p for s, p in dists[j].items() if s[:t] == x[:t])
                assert np.exp(L[b, c, t]) == pytest.approx(brute, abs=1e-12)
    assert pcfg.brute_force_prefix(grammar, grammar.configs()[1], x[:3]) == pytest.approx(np.exp(L[-1, 1, 3]))


def test_language_is_normalised_and_sampling_is_seeded(grammar):
    lang = pcfg.Language(grammar)
    assert lang.probs.sum() == pytest.approx(1.0)
    a = lang.sample(20, np.random.default_rng(5))
    b = lang.sample(20, np.random.default_rng(5))
    assert a[0] == b[0] and np.array_equal(a[1], b[1])


def test_bayes_posterior_and_mixture(grammar):
    lang = pcfg.Language(grammar)
    strings, js = lang.sample(50, np.random.default_rng(1))
    bz = pcfg.bayes(grammar, strings, js)
    post = bz.posterior
    for b, x in enumerate(strings):
        assert np.allclose(post[b, : len(x) + 1].sum(-1), 1.0)
        assert np.allclose(post[b, 0], 1 / len(grammar.configs()))  # the prior before any token
    # the mixture predictor is never better than the one that knows j on average (CMI ≥ 0)
    cmi, _ = pcfg.per_position_mean(bz.gap)
    assert np.all(cmi[:8] > -1e-9)
    # by hand for one string and position: mixture = Σ π p
    b, t = 0, 2
    L = pcfg.prefix_log_probs(grammar, strings[:1])
    alive = post[b, t] > 0  # metadata vectors still possible after x_<t
    p_next = np.exp(L[0, alive, t + 1] - L[0, alive, t])
    assert -np.log(np.dot(post[b, t, alive], p_next)) == pytest.approx(bz.loss_without_j[b, t])


def test_bayes_loss_for_every_metadata_depth_matches_enumeration(grammar):
    lang = pcfg.Language(grammar)
    strings, js = lang.sample(5, np.random.default_rng(4))
    bz = pcfg.bayes(grammar, strings, js)
    assert len(bz.loss_given) == grammar.depth + 1
    for dm in range(grammar.depth + 1):
        for b, x in enumerate(strings):
            brute = pcfg.brute_force_loss(grammar, x, tuple(js[b]), dm)
            assert np.allclose(bz.loss_given[dm][b, : len(x) + 1], brute, atol=1e-10, rtol=1e-9)
            assert np.all(np.isnan(bz.loss_given[dm][b, len(x) + 1 :]))
    # revealing more levels never hurts on average: I(x_t; j_<dm | x_<t) grows with dm
    cmis = [np.nanmean(bz.gap_at(dm)) for dm in range(grammar.depth + 1)]
    assert cmis[0] == 0.0 and np.all(np.diff(cmis) > -1e-12)


def test_bayes_grammaticality_matches_enumeration(grammar):
    lang = pcfg.Language(grammar)
    strings, js = lang.sample(6, np.random.default_rng(6))
    prompts = [x[:k] for x, k in zip(strings, (0, 1, 2, 3, 4, len(strings[5])))]
    got = pcfg.bayes_grammatical(lang, prompts, js)
    configs = grammar.configs()
    dists = {c: pcfg.yields(grammar, c) for c in configs}
    for b, prompt in enumerate(prompts):
        k = len(prompt)
        # p(s | prompt) ∝ Σ_j p(j) p(s | j) over strings s that start with the prompt
        total, good = 0.0, 0.0
        for c in configs:
            for s, p in dists[c].items():
                if s[:k] == prompt:
                    total += p
                    good += p * (s in dists[tuple(js[b])])
        assert got[b] == pytest.approx(good / total, abs=1e-12)
    assert 0.0 < got[0] < 1.0


def test_grammaticality_is_cyk_membership(grammar):
    lang = pcfg.Language(grammar)
    inside = set(lang.strings)
    candidates = [s for n in (4, 5, 6) for s in itertools.product(range(grammar.n_terminals), repeat=n)][:400]
    ok = pcfg.is_grammatical(grammar, candidates)
    assert list(ok) == [s in inside for s in candidates]


def test_sequence_format():
    vocab = M.Vocab(n_terminals=3, depth=2, n_sets=2)
    tokens, targets = M.encode(vocab, [(0, 1), (2,)], np.array([[1, 0], [0, 1]]), np.array([2, 0]))
    assert tokens[0].tolist() == [vocab.bos, vocab.meta(0, 1), vocab.meta(1, 0), 0, 1, vocab.eos]
    assert tokens[1].tolist()[:4] == [vocab.bos, vocab.mask, vocab.mask, 2]
    # metadata depth 1: the first level shown, the rest masked (always D slots)
    one, _ = M.encode(vocab, [(0, 1)], np.array([[1, 0]]), 1)
    assert one[0].tolist() == [vocab.bos, vocab.meta(0, 1), vocab.mask, 0, 1, vocab.eos]
    # input index D + t predicts x_t, then EOS
    assert targets[0].tolist() == [M.IGNORE, M.IGNORE, 0, 1, vocab.eos, M.IGNORE]
    assert targets[1].tolist() == [M.IGNORE, M.IGNORE, 2, vocab.eos, M.IGNORE, M.IGNORE]


def test_training_is_deterministic_and_logs(grammar):
    lang = pcfg.Language(grammar)
    strings, js = lang.sample(64, np.random.default_rng(2))
    torch.set_num_threads(1)
    (m1,), (hist,) = M.train(lang, dms=(2,), steps=25, batch=16, root=0, d_model=32, log_every=10,
                             log_set=(strings, js))
    (m2,), _ = M.train(lang, dms=(2,), steps=25, batch=16, root=0, d_model=32)
    l1, h = M.evaluate(m1, grammar, strings, js, dm=2)
    l2, _ = M.evaluate(m2, grammar, strings, js, dm=2)
    assert np.allclose(l1, l2, equal_nan=True) and h.shape[:2] == l1.shape
    assert hist.steps == [0, 10, 20, 25] and hist.losses[2].shape == (4,) + l1.shape
    assert np.allclose(hist.losses[2][-1], l1, equal_nan=True)  # the last entry is the final model
    vocab_size = M.Vocab(grammar.n_terminals, grammar.depth, grammar.n_sets).size
    assert np.nanmean(l1) < np.log(vocab_size)  # better than uniform after a few steps


def test_prefix_split_keeps_each_prefix_on_one_side(grammar):
    lang = pcfg.Language(grammar)
    strings, _ = lang.sample(300, np.random.default_rng(8))
    tr, te = M.prefix_split(strings, 4, np.random.default_rng(0))
    assert len(tr) + len(te) == sum(len(s) >= 4 for s in strings)
    assert not {strings[i][:4] for i in tr} & {strings[i][:4] for i in te}
    assert len(tr) > 0 and len(te) > 0


def test_grammatical_under_true_and_any_metadata(grammar):
    lang = pcfg.Language(grammar)
    configs = grammar.configs()
    strings = [lang.strings[i] for i in range(0, len(lang.strings), max(1, len(lang.strings) // 40))]
    owners = [{configs[c] for s2, c in zip(lang.strings, lang.config_of) if s2 == s} for s in strings]
    js = np.asarray([configs[(k * 5) % len(configs)] for k in range(len(strings))])
    true_ok, any_ok = M.grammatical(grammar, strings + [None], np.vstack([js, js[:1]]))
    assert list(true_ok[:-1]) == [tuple(j) in o for j, o in zip(js, owners)]
    assert any_ok[:-1].all() and not any_ok[-1] and not true_ok[-1]  # None: an unfinished sample


def test_train_point_matches_the_steps_it_bundles(grammar):
    lang = pcfg.Language(grammar)
    eval_set = lang.sample(40, np.random.default_rng(1))
    splits = {2: M.prefix_split(eval_set[0], 2, np.random.default_rng(2))}
    prompts = [s[:1] for s in eval_set[0][:4]]
    kw = dict(grammar=grammar, eval_set=eval_set, log_set=eval_set, log_every=2, probe_splits=splits,
              prompts=prompts, prompt_js=eval_set[1][:4], train_kw=dict(steps=4, batch=8, d_model=16, n_layers=1))
    threads = torch.get_num_threads()
    r = M.train_point((7, 2), dms=(0, 1), root=4, **kw)["runs"]
    assert torch.get_num_threads() == threads  # restored
    assert [(x["rep"], x["dm"]) for x in r] == [(7, 0), (7, 1), (2, 0), (2, 1)]
    models, hists = M.train(lang, dms=(0, 1), reps=(7, 2), root=4, steps=4, batch=8, d_model=16, n_layers=1,
                            log_every=2, log_set=eval_set)
    model, hist, r = models[1], hists[1], r[1]
    masked, hidden = M.evaluate(model, grammar, *eval_set, dm=0)
    np.testing.assert_array_equal(r["masked"], masked)
    np.testing.assert_array_equal(r["given"], M.evaluate(model, grammar, *eval_set, dm=1)[0])
    assert hist.steps == r["hist"].steps
    tr, te = splits[2]
    np.testing.assert_array_equal(r["probes"][0][0], M.probe(hidden, eval_set[1][:, 0], 2, tr, te,
                                                             random_state=seed32(4, "probe", 1, 7, 0, 2)))
    out = M.continuations(model, grammar, prompts, torch_generator(4, "continuations", 1, 7))
    np.testing.assert_array_equal(r["grammatical_true"], M.grammatical(grammar, out, eval_set[1][:4])[0])
