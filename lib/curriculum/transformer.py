"""The paper's restricted transformer: positional attention over orthogonal position embeddings and
a fixed FFN that computes the chain step."""

from __future__ import annotations

import numpy as np

from lib.curriculum.policy import greedy, reinforce_gradient, sample_paths
from lib.curriculum.tree import ReasoningTree


class PositionalTransformer:
    """A one-block transformer whose embeddings put tokens and positions in orthogonal
    subspaces.  Generating chain step ℓ, the query is the position of the ℓ-th chain slot, the
    keys the positions of the ``d`` input tokens; only the positional score matrix ``W`` is
    trained (zero at the start: uniform attention).  The attention law picks the child
    ``i_ℓ``; its value is the token ``x_{i_ℓ}`` (one-hot), and a fixed two-layer ReLU FFN maps
    ``(z_{ℓ−1}, x_{i_ℓ})`` to ``z_ℓ = a·z_{ℓ−1} + x_{i_ℓ} (mod p)``.

    With orthonormal position embeddings ``P`` the scores are ``S = P_q W P_kᵀ`` and a gradient
    step ``W ← W − η P_qᵀ G P_k`` moves them by exactly ``−η G``: the same update as the tabular
    logits.  (Blocked trees are not supported: their keys depend on the depth.)
    """

    def __init__(self, tree: ReasoningTree, rng: np.random.Generator, width: int | None = None):
        import torch

        if tree.blocked:
            raise ValueError("the positional transformer reads one shared input")
        self.tree = tree
        n_pos = tree.d + tree.k
        width = width or 2 * n_pos
        basis, _ = torch.linalg.qr(torch.from_numpy(rng.standard_normal((width, width))))
        self.pos = basis[:n_pos]  # orthonormal rows: positions 0..d-1 inputs, d..d+k-1 chain
        self.W = torch.zeros(width, width, dtype=torch.float64, requires_grad=True)
        # fixed FFN on one-hot (z, x): hidden unit (u, v) = ReLU(z_u + x_v − 1), output
        # w = Σ_{a·u+v ≡ w} hidden(u, v)
        p = tree.p
        self.ffn_out = torch.zeros(p * p, p, dtype=torch.float64)
        for u in range(p):
            for v in range(p):
                self.ffn_out[u * p + v, (tree.a * u + v) % p] = 1.0

    def scores(self):
        """Attention scores ``(k, d)`` of the chain slots over the input positions."""
        q = self.pos[self.tree.d:]
        return q @ self.W @ self.pos[: self.tree.d].T

    def ffn(self, z_onehot, x_onehot):
        """The fixed step ``z ← a·z + x (mod p)`` on one-hot codes (``(..., p)`` each)."""
        import torch

        hidden = torch.relu(z_onehot[..., :, None] + x_onehot[..., None, :] - 1)
        return hidden.flatten(-2) @ self.ffn_out

    def chain(self, x: np.ndarray, paths: np.ndarray) -> np.ndarray:
        """Run the fixed FFN along sampled children: the prefix answers ``(..., k)``."""
        import torch

        p = self.tree.p
        tok = torch.nn.functional.one_hot(torch.as_tensor(self.tree.read(x, paths)), p).double()
        z = torch.nn.functional.one_hot(torch.zeros(tok.shape[:-2], dtype=torch.long), p).double()
        out = []
        for ell in range(paths.shape[-1]):
            z = self.ffn(z, tok[..., ell, :])
            out.append(z.argmax(-1))
        return torch.stack(out, -1).numpy()

    def reinforce_step(self, paths: np.ndarray, rewards: np.ndarray, lr: float,
                       baseline: bool = False) -> None:
        """One SGD ascent step on ``(1/n) Σ (r − b) log π(path)`` through autograd."""
        import torch

        logp = torch.log_softmax(self.scores(), dim=-1)  # (k, d)
        pt = torch.as_tensor(paths)
        r = torch.as_tensor(rewards - rewards.mean() if baseline else rewards)
        chosen = logp[torch.arange(self.tree.k), pt].sum(-1)  # (n,)
        obj = (r * chosen).mean()
        (g,) = torch.autograd.grad(obj, self.W)
        with torch.no_grad():
            self.W += lr * g


def compare_transformer(tree: ReasoningTree, *, steps: int, batch: int, lr: float,
                        rng: np.random.Generator) -> dict:
    """Train the restricted transformer and the tabular policy side by side on the same inputs
    and the same uniforms (direct route, terminal oracle).  Returns the largest gap between
    their logits over training, their final greedy paths, and whether the transformer's FFN
    chain agreed with the tree's answers on every rollout."""
    model = PositionalTransformer(tree, rng)
    theta = np.zeros((tree.k, tree.d))
    gap, ffn_ok = 0.0, True
    for _ in range(steps):
        u = rng.random((batch, tree.k))
        x = tree.sample_inputs(rng, (batch,))
        s_model = model.scores().detach().numpy()
        paths_model = sample_paths(s_model, batch, rng, uniforms=u)
        paths_tab = sample_paths(theta, batch, rng, uniforms=u)
        ffn_ok &= bool(np.array_equal(model.chain(x, paths_model), tree.prefix_answers(x, paths_model)))
        model.reinforce_step(paths_model, tree.terminal_reward(x, paths_model), lr, baseline=True)
        r_tab = tree.terminal_reward(x, paths_tab)
        theta += lr * reinforce_gradient(theta, paths_tab, r_tab, baseline=True)
        gap = max(gap, float(np.abs(model.scores().detach().numpy() - theta).max()))
    return {"max_logit_gap": gap, "greedy_model": greedy(model.scores().detach().numpy())[0],
            "greedy_tabular": greedy(theta)[0], "ffn_matches_tree": ffn_ok,
            "logits": theta}
