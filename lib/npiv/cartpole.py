"""Off-policy evaluation on gymnasium's CartPole-v1, written as an NPIV problem.

The environment is made noisy: with probability ``noise`` the action the agent chose is
replaced by a uniformly random one. The *target* policy π is a fixed hand-written balancing
controller (a linear state feedback); the *behaviour* policy that logs the data is π made
ε-greedy (a uniformly random action with probability ε = 0.1).

The value ``Q^π`` solves the Bellman equation ``E[r | s, a] = E[Q(s, a) − γ(1 − done) Q(s', π(s'))
| s, a]``: an NPIV problem with instrument ``W = (s, a)``, outcome ``Y = r`` and a treatment
that is a linear functional of the network, ``h_a(A) = Q(s, a) − γ(1 − done) Q(s', π(s'))``.
The policy value is ``v(π) = E_{s0}[Q(s0, π(s0))]`` over the start-state distribution; the
truth is a Monte-Carlo average of discounted returns.

The physics is gymnasium's ``CartPoleEnv.step`` applied to a batch of states at once (its
constants are read from the gymnasium environment; a unit test checks the batched step
against ``gymnasium.make("CartPole-v1")`` transition by transition).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

GAMMA = 0.99
#: The behaviour policy's ε (a uniformly random action with this probability).
EPSILON = 0.1
#: Start states and steps of the Monte-Carlo true value (the discounted tail after HORIZON steps
#: is below γ^HORIZON / (1 − γ)).
N_STARTS = 1000
HORIZON = 1000
#: Gains of the target controller: push right (action 1) when K·s > 0. [reconstructed]
GAINS = np.array([0.5, 1.0, 10.0, 2.0])


@lru_cache(maxsize=1)
def constants() -> dict[str, float]:
    """CartPole-v1's physical constants, read from gymnasium."""
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    env = CartPoleEnv()
    return {k: float(getattr(env, k)) for k in
            ("gravity", "masspole", "total_mass", "length", "polemass_length", "force_mag",
             "tau", "x_threshold", "theta_threshold_radians")}


def step(states: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """gymnasium's CartPole dynamics (Euler integrator) for a batch: states (m, 4), actions
    (m,) in {0, 1}. Returns next states and the ``terminated`` flags."""
    c = constants()
    x, x_dot, theta, theta_dot = states.T
    force = np.where(actions == 1, c["force_mag"], -c["force_mag"])
    cos, sin = np.cos(theta), np.sin(theta)
    temp = (force + c["polemass_length"] * np.square(theta_dot) * sin) / c["total_mass"]
    theta_acc = (c["gravity"] * sin - cos * temp) / (
        c["length"] * (4.0 / 3.0 - c["masspole"] * np.square(cos) / c["total_mass"]))
    x_acc = temp - c["polemass_length"] * theta_acc * cos / c["total_mass"]
    nxt = np.stack([x + c["tau"] * x_dot, x_dot + c["tau"] * x_acc,
                    theta + c["tau"] * theta_dot, theta_dot + c["tau"] * theta_acc], 1)
    done = ((nxt[:, 0] < -c["x_threshold"]) | (nxt[:, 0] > c["x_threshold"])
            | (nxt[:, 2] < -c["theta_threshold_radians"])
            | (nxt[:, 2] > c["theta_threshold_radians"]))
    return nxt, done


def target_policy(states: np.ndarray) -> np.ndarray:
    """The fixed balancing controller π: action 1 (push right) when K·s > 0."""
    return (states @ GAINS > 0).astype(np.int64)


def reset_states(m: int, rng: np.random.Generator) -> np.ndarray:
    """CartPole's start distribution: every coordinate U(−0.05, 0.05)."""
    return rng.uniform(-0.05, 0.05, size=(m, 4))


def _act(states, rng, epsilon: float, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """The logged action (π made ε-greedy) and the executed one (after environment noise)."""
    m = len(states)
    chosen = np.where(rng.random(m) < epsilon, rng.integers(0, 2, m), target_policy(states))
    executed = np.where(rng.random(m) < noise, rng.integers(0, 2, m), chosen)
    return chosen, executed


def true_value(noise: float, rng: np.random.Generator, n_starts: int = N_STARTS,
               horizon: int = HORIZON, gamma: float = GAMMA) -> float:
    """Monte-Carlo ``v(π)``: the mean discounted return of π from ``n_starts`` start states
    in the noisy environment (reward 1 per step, including the terminating one; the
    discounted tail after ``horizon`` steps is below γ^horizon / (1 − γ))."""
    s = reset_states(n_starts, rng)
    alive = np.ones(n_starts, bool)
    ret = np.zeros(n_starts)
    disc = 1.0
    for _ in range(horizon):
        ret += disc * alive
        _, executed = _act(s, rng, 0.0, noise)
        s, done = step(s, executed)
        alive &= ~done
        disc *= gamma
        if not alive.any():
            break
    return float(ret.mean())


@dataclass
class Transitions:
    """Logged transitions (s, a, r, s', done) and the start states to evaluate from."""

    s: np.ndarray
    a: np.ndarray
    r: np.ndarray
    s_next: np.ndarray
    done: np.ndarray
    starts: np.ndarray


def collect(n_episodes: int, noise: float, rng: np.random.Generator, epsilon: float = EPSILON,
            max_steps: int = 500) -> Transitions:
    """Run ``n_episodes`` of the behaviour policy side by side (CartPole-v1's 500-step
    limit truncates, it does not terminate) and log every transition."""
    s = reset_states(n_episodes, rng)
    starts = s.copy()
    alive = np.ones(n_episodes, bool)
    logs = []
    for _ in range(max_steps):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        chosen, executed = _act(s[idx], rng, epsilon, noise)
        nxt, done = step(s[idx], executed)
        logs.append((s[idx], chosen, nxt, done))
        s[idx] = nxt
        alive[idx[done]] = False
    cat = [np.concatenate(x) for x in zip(*logs)]
    return Transitions(s=cat[0], a=cat[1], r=np.ones(len(cat[1])), s_next=cat[2],
                       done=cat[3], starts=starts)


#: Fixed scales that bring CartPole states to order one (for the networks' inputs).
STATE_SCALE = np.array([1.0, 1.0, 0.1, 1.0])


def features(s: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Network input for a state–action pair: scaled state and the action as ±1."""
    return np.concatenate([s / STATE_SCALE, (2.0 * a - 1.0)[:, None]], 1)


@dataclass
class OPEProblem:
    """The NPIV form of a set of transitions, with values scaled by (1 − γ) so that they
    lie in [0, 1]: outcome ``Y = (1 − γ) r``, treatment ``Q(z) + κ Q(z')`` with
    ``z = (s, a)``, ``z' = (s', π(s'))`` and ``κ = −γ(1 − done)``."""

    W: np.ndarray      # (n, 5) instrument = z
    z: np.ndarray      # (n, 5)
    z_next: np.ndarray  # (n, 5)
    kappa: np.ndarray  # (n,)
    Y: np.ndarray      # (n,)
    z_start: np.ndarray  # (m, 5) start states with π's action
    gamma: float = GAMMA

    def value(self, q_start: np.ndarray) -> float:
        """Policy value from the (scaled) Q at the start inputs."""
        return float(np.mean(q_start) / (1 - self.gamma))


def ope_problem(tr: Transitions, n: int, rng: np.random.Generator,
                gamma: float = GAMMA) -> OPEProblem:
    """Subsample ``n`` transitions (uniformly, without replacement) into an NPIV problem."""
    idx = rng.choice(len(tr.a), size=min(n, len(tr.a)), replace=False)
    z = features(tr.s[idx], tr.a[idx])
    z_next = features(tr.s_next[idx], target_policy(tr.s_next[idx]))
    kappa = -gamma * (1.0 - tr.done[idx])
    return OPEProblem(W=z, z=z, z_next=z_next, kappa=kappa, Y=(1 - gamma) * tr.r[idx],
                      z_start=features(tr.starts, target_policy(tr.starts)), gamma=gamma)
