"""lib.population: a batch of models trained as one, each member as if trained alone."""

from __future__ import annotations

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
