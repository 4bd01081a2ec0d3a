"""lib.population: a batch of models trained as one, each member as if trained alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lib import population as pop

VOCAB, D, LENGTH, BATCH = 8, 8, 6, 4


def make(member):
    return pop.TinyAttention(VOCAB, D, LENGTH)


DRAW = pop.copy_task(VOCAB, BATCH, LENGTH)
MEMBERS = [{"seed": 0, "lr": 1e-2}, {"seed": 1, "lr": 3e-3}, {"seed": 2, "lr": 1e-2}, {"seed": 3, "lr": 5e-3}]


def close(a: dict, b: dict) -> bool:
    return all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_member_trained_alone_and_in_a_batch_of_four_agree(optimizer):
    alone = pop.train(MEMBERS[2:3], make, DRAW, pop.cross_entropy, steps=25, optimizer=optimizer)
    batch = pop.train(MEMBERS, make, DRAW, pop.cross_entropy, steps=25, optimizer=optimizer)
    assert torch.allclose(torch.tensor(alone.losses[:, 0]), torch.tensor(batch.losses[:, 2]), rtol=1e-5, atol=1e-6)
    assert close({k: v[0] for k, v in alone.params.items()}, {k: v[2] for k, v in batch.params.items()})
    # the comparison can fail: another member (another seed, the same lr) is a different model
    assert not close({k: v[0] for k, v in batch.params.items()}, {k: v[2] for k, v in batch.params.items()})
    assert batch.losses[-1, 2] < batch.losses[0, 2]  # and it learned


def test_the_population_trains_as_a_plain_loop_with_torch_adam_does():
    member = MEMBERS[1]
    model = pop.build(make, member, 0)
    g = pop.data_generator(0, member)
    opt = torch.optim.Adam(model.parameters(), lr=member["lr"])
    for _ in range(10):
        value = pop.cross_entropy(model, DRAW(member, g))
        opt.zero_grad()
        value.backward()
        opt.step()
    trained = pop.train(MEMBERS, make, DRAW, pop.cross_entropy, steps=10).member(1)
    assert close(dict(model.named_parameters()), dict(trained.named_parameters()))


def test_members_draw_from_their_own_streams_and_leave_the_global_generator_alone():
    state = torch.get_rng_state()
    first = pop.train([{"seed": 5}], make, DRAW, pop.cross_entropy, steps=2)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(123)  # whatever the global generator holds, a member's numbers are its seed's
    again = pop.train([{"seed": 5}], make, DRAW, pop.cross_entropy, steps=2)
    assert (first.losses == again.losses).all()
    other = pop.train([{"seed": 6}], make, DRAW, pop.cross_entropy, steps=2)
    assert (first.losses != other.losses).all()
    elsewhere = pop.train([{"seed": 5}], make, DRAW, pop.cross_entropy, steps=2, root=1)  # another chapter seed
    assert (first.losses != elsewhere.losses).all()


def test_an_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="optimizer"):
        pop.train(MEMBERS[:1], make, DRAW, pop.cross_entropy, steps=1, optimizer="lbfgs")


def test_train_stacked_follows_a_schedule_with_weight_decay_as_torch_adamw_with_one_cycle_does():
    member, steps, lr = MEMBERS[1], 12, 1e-2
    model = pop.build(make, member, 0)
    stacked_model = pop.build(make, member, 0)
    initial = {k: v.detach().clone() for k, v in model.named_parameters()}
    g = pop.data_generator(0, member)
    batches = [DRAW(member, g) for _ in range(steps)]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.25)
    schedule = []
    for data in batches:
        schedule.append((opt.param_groups[0]["lr"], opt.param_groups[0]["betas"][0]))
        value = pop.cross_entropy(model, data)
        opt.zero_grad()
        value.backward()
        opt.step()
        sched.step()
    seen = []

    def on_step(step, current):
        if step == 0:   # before the first update the models hold their initial weights
            assert close(dict(current()[0].named_parameters()), initial)
        seen.append(step)

    stacked = [tuple(part[None] for part in data) for data in batches]
    params, _, losses = pop.train_stacked([stacked_model], iter(stacked), pop.cross_entropy, lr=lr,
                                          weight_decay=0.01, schedule=lambda t: schedule[t - 1], on_step=on_step)
    assert seen == list(range(steps)) and losses.shape == (steps, 1)
    assert close({k: v[0] for k, v in params.items()}, dict(model.named_parameters()))
    # the comparison can fail: at the schedule's peak rate throughout, the same loop trains another model
    flat, _, _ = pop.train_stacked([pop.build(make, member, 0)], iter(stacked), pop.cross_entropy, lr=lr,
                                   weight_decay=0.01)
    assert not close({k: v[0] for k, v in flat.items()}, dict(model.named_parameters()))


def test_one_cycle_is_torch_one_cycle_lr_step_by_step():
    steps, lr = 20, 1e-2
    schedule = pop.one_cycle(steps, lr, 0.25)
    opt = torch.optim.AdamW([torch.zeros(3, requires_grad=True)], lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.25)
    for t in range(1, steps + 1):
        assert schedule(t) == (opt.param_groups[0]["lr"], opt.param_groups[0]["betas"][0])
        opt.step()
        sched.step()
    rates = [schedule(t)[0] for t in range(1, steps + 1)]
    assert rates[0] == pytest.approx(lr / 25) and max(rates) == pytest.approx(lr) and rates[-1] < 1e-4
    assert rates.index(max(rates)) == 4  # the peak after a quarter of the steps
    assert schedule(1)[1] == pytest.approx(0.95) and schedule(5)[1] == pytest.approx(0.85)


class WithUnused(pop.TinyAttention):
    """TinyAttention with a parameter its forward pass never reads."""

    def __init__(self):
        super().__init__(VOCAB, D, LENGTH)
        self.unused = torch.nn.Parameter(torch.randn(3))


def test_adam_step_leaves_a_tensor_without_a_gradient_alone():
    p, q = torch.ones(2, 3), torch.ones(2, 3)
    moments = [(torch.zeros(2, 3), torch.zeros(2, 3)), (torch.zeros(2, 3), torch.zeros(2, 3))]
    pop.adam_step([p, q], [torch.full((2, 3), 0.5), None], moments, 1, 0.1, weight_decay=0.1)
    assert torch.equal(q, torch.ones(2, 3)) and not moments[1][0].any() and not moments[1][1].any()
    assert (p < 1).all() and moments[0][0].all()  # the other tensor did step


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_train_stacked_skips_a_parameter_without_gradient_as_torch_does(optimizer):
    member, steps, lr = MEMBERS[0], 6, 1e-2
    model = pop.build(lambda m: WithUnused(), member, 0)
    stacked_model = pop.build(lambda m: WithUnused(), member, 0)
    initial = model.unused.detach().clone()
    g = pop.data_generator(0, member)
    batches = [DRAW(member, g) for _ in range(steps)]
    opt = (torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=lr))
    for data in batches:
        opt.zero_grad(set_to_none=True)
        pop.cross_entropy(model, data).backward()
        opt.step()
    params, _, _ = pop.train_stacked([stacked_model], iter([tuple(x[None] for x in b) for b in batches]),
                                     pop.cross_entropy, lr=lr, optimizer=optimizer,
                                     weight_decay=0.1 if optimizer == "adam" else 0.0)
    assert torch.equal(params["unused"][0], initial) and torch.equal(model.unused.detach(), initial)
    assert close({k: v[0] for k, v in params.items()}, dict(model.named_parameters()))
    assert not torch.equal(params["out.weight"][0], stacked_model.out.weight)  # the used ones trained


def test_a_stacked_loss_trains_on_one_loss_and_records_another():
    """The hook's batched forward (here an explicit loop over members with the stacked parameters)
    trains on cross-entropy + c·|embedding|² and records the cross-entropy, as a plain loop does."""
    steps, lr, c = 8, 1e-2, 0.05
    members = MEMBERS[:2]
    plain = [pop.build(make, m, 0) for m in members]
    gens = [pop.data_generator(0, m) for m in members]
    batches = [[DRAW(m, g) for m, g in zip(members, gens)] for _ in range(steps)]
    base = pop.build(make, members[0], 0)
    recorded_plain = []
    opts = [torch.optim.Adam(m.parameters(), lr=lr) for m in plain]
    for step in batches:
        row = []
        for model, opt, data in zip(plain, opts, step):
            ce = pop.cross_entropy(model, data)
            opt.zero_grad()
            (ce + c * model.embed.weight.square().sum()).backward()
            opt.step()
            row.append(float(ce.detach()))
        recorded_plain.append(row)
    calls = []

    def stacked_loss(params, batch):
        calls.append(len(calls))
        ce = torch.stack([pop.cross_entropy(
            lambda x, i=i: torch.func.functional_call(base, {k: v[i] for k, v in params.items()}, (x,)),
            tuple(part[i] for part in batch)) for i in range(len(members))])
        return ce + c * params["embed.weight"].square().sum((1, 2)), ce

    data = (tuple(torch.stack(parts) for parts in zip(*step)) for step in batches)
    params, _, losses = pop.train_stacked([pop.build(make, m, 0) for m in members], data, None, lr=lr,
                                          stacked_loss=stacked_loss)
    assert len(calls) == steps and losses.shape == (steps, len(members))
    assert np.allclose(losses, recorded_plain, rtol=1e-5, atol=1e-6)
    for i, model in enumerate(plain):
        assert close({k: v[i] for k, v in params.items()}, dict(model.named_parameters()))
    # both halves can fail: without the regulariser the loop trains other weights
    params_ce, _, _ = pop.train_stacked([pop.build(make, m, 0) for m in members],
                                        (tuple(torch.stack(parts) for parts in zip(*step)) for step in batches),
                                        pop.cross_entropy, lr=lr)
    assert not close({k: v[0] for k, v in params_ce.items()}, dict(plain[0].named_parameters()))


def test_adam_step_with_one_cycle_is_torch_adamw_bit_for_bit():
    steps, lr = 1300, 1e-2
    g = torch.Generator().manual_seed(0)
    grads = torch.randn(steps, 2, 5, generator=g)
    ours = torch.randn(2, 5, generator=g)
    start, theirs = ours.clone(), ours.clone().requires_grad_(True)
    opt = torch.optim.AdamW([theirs], lr=lr, weight_decay=0.01, foreach=False)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    schedule, moments = pop.one_cycle(steps, lr, 0.1), [(torch.zeros(2, 5), torch.zeros(2, 5))]
    for t in range(1, steps + 1):
        theirs.grad = grads[t - 1].clone()
        opt.step()
        sched.step()
        rate, b1 = schedule(t)
        pop.adam_step([ours], [grads[t - 1]], moments, t, rate, (b1, 0.999), weight_decay=0.01)
    assert torch.equal(ours, theirs.detach())
    # the comparison can fail: with β₁ held at 0.9 instead of cycled, the same steps end elsewhere
    moments = [(torch.zeros(2, 5), torch.zeros(2, 5))]
    for t in range(1, steps + 1):
        pop.adam_step([start], [grads[t - 1]], moments, t, schedule(t)[0], (0.9, 0.999), weight_decay=0.01)
    assert not torch.equal(start, theirs.detach())


def test_adam_step_with_l2_decay_is_torch_adams_weight_decay_bit_for_bit():
    adam_step = pop.adam_step
    torch.manual_seed(0)
    w = torch.randn(5, 3)
    ours, theirs = w.clone(), w.clone().requires_grad_(True)
    opt = torch.optim.Adam([theirs], lr=0.01, weight_decay=0.1)
    moments = [(torch.zeros_like(w), torch.zeros_like(w))]
    for t in range(1, 40):
        g = torch.randn(5, 3)
        theirs.grad = g.clone()
        opt.step()
        adam_step([ours], [g], moments, t, 0.01, l2_decay=0.1)
        assert torch.equal(ours, theirs.detach()), t
    decoupled = w.clone()
    adam_step([decoupled], [torch.ones(5, 3)], [(torch.zeros_like(w), torch.zeros_like(w))], 1, 0.01, weight_decay=0.1)
    l2 = w.clone()
    adam_step([l2], [torch.ones(5, 3)], [(torch.zeros_like(w), torch.zeros_like(w))], 1, 0.01, l2_decay=0.1)
    assert not torch.equal(decoupled, l2)  # AdamW's decay is another update
