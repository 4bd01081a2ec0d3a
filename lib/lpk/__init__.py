"""Chapter 06 — the loss path kernel (LPK) of gradient flow (Chen et al., arXiv:2506.11357).

The code lives in :mod:`.network` for now; this package re-exports it.
"""

from lib.lpk.network import *  # noqa: F401,F403
from lib.lpk.network import _flip  # noqa: F401
