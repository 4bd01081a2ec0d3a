"""Chapter 07 — label noise in the feature learning process (Han et al., arXiv:2505.18909).

The code lives in :mod:`.model` for now; this package re-exports it.
"""

from lib.label_noise.model import *  # noqa: F401,F403
