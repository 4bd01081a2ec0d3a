"""Chapter 03: neural NPIV by mean-field Langevin bilevel optimisation (F²BMLD).

``meanfield``: particle systems, MFLD steps, F²BMLD and the Lagrangian; ``demand``: the demand
design; ``cartpole``: off-policy evaluation data on gymnasium's CartPole-v1; ``baselines``:
sieve 2SLS, kernel IV and DFIV; ``analysis``: rate and bias–variance fits, the λ sweep's decision
rule, claim and metrics, and the off-policy summary.
"""
