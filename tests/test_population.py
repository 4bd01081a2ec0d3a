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
