"""Every random draw of a chapter comes from here: the chapter seed and a key naming what is drawn.

    rng = stream(ch.seed, "ood-grid", n_trg, l_min, l_max, rep)   # a numpy Generator
    gen = torch_generator(ch.seed, "init", width, rep)            # a torch.Generator
    seed_torch(ch.seed, "init", width, rep)                       # torch's global generator (nn.Module init)
    init_seed = seed_of(ch.seed, "init", rep)                      # an int, for APIs that take one

The chapter seed is the :class:`numpy.random.SeedSequence`'s entropy and the key its spawn key,
so two different chapter seeds never share a stream, whatever the keys. A key is a tuple of
names, ints, floats and tuples of them (a sweep point's values and its replicate index, say), never
a position in a list; it is hashed whole into a fixed-length spawn key, so ``("a", 1)`` and
``("a", 1, 0)`` are different streams and no arithmetic on seeds is ever needed.

A model's own constants (a fixed reference sample that defines a design) come from
:func:`constant_stream`, the same for every chapter seed.

A test hook: with ``COMPANION_STREAM_LOG`` naming a file, every stream appends ``root<TAB>key``
to it (tests/test_book.py checks that each draw of a chapter run derives from its seed or is a
model constant).
"""

from __future__ import annotations

import hashlib
import os

#: The file every stream is logged to when set (tests only).
LOG_ENV = "COMPANION_STREAM_LOG"
_MAX_ROOT = 2**32 - 1


def _canonical(part):
    """A key entry as plain Python: numpy scalars become ints and floats, sequences tuples."""
    import numpy as np

    if isinstance(part, (bool, np.bool_)):
        return ("bool", bool(part))
    if isinstance(part, (int, np.integer)):
        return int(part)
    if isinstance(part, (float, np.floating)):
        return float(part)
    if isinstance(part, str):
        return part
    if isinstance(part, (tuple, list, np.ndarray)):
        return tuple(_canonical(p) for p in part)
    raise TypeError(f"a stream key holds names, ints, floats and tuples of them, not {type(part).__name__}")


def _spawn_key(key: tuple) -> tuple[int, ...]:
    text = repr(_canonical(key)).encode()
    digest = hashlib.blake2b(text, digest_size=16).digest()
    return tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4))


#: What the stream log names as the root of a model constant (:func:`constant_stream`).
MODEL_ROOT = "model"


def _sequence(root: int, key: tuple, logged_root: str):
    import numpy as np

    spawn = _spawn_key(key)
    if log := os.environ.get(LOG_ENV):
        with open(log, "a") as f:
            f.write(f"{logged_root}\t{spawn[0]:08x}{spawn[1]:08x}{spawn[2]:08x}{spawn[3]:08x}\t{_canonical(key)!r}\n")
    return np.random.SeedSequence(int(root), spawn_key=spawn)


def sequence(root: int, *key):
    """The :class:`numpy.random.SeedSequence` of sub-stream ``key`` of chapter seed ``root``."""
    import numpy as np

    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root <= _MAX_ROOT:
        raise ValueError(f"a chapter seed is an integer in [0, {_MAX_ROOT}], not {root!r}")
    return _sequence(root, key, str(int(root)))


def constant_stream(*key):
    """A stream that is part of a model's definition, the same whatever the chapter seed (say, a
    fixed reference sample that sets a design's scales): not a draw of the experiment. It is the
    stream ``key`` of root 0, logged with the root ``"model"``."""
    import numpy as np

    return np.random.Generator(np.random.PCG64(_sequence(0, key, MODEL_ROOT)))


def stream(root: int, *key):
    """An independent numpy Generator for sub-stream ``key`` of chapter seed ``root``."""
    import numpy as np

    return np.random.Generator(np.random.PCG64(sequence(root, *key)))


def seed_of(root: int, *key) -> int:
    """A 63-bit integer seed for sub-stream ``key``, for APIs that take an int (``torch.manual_seed``);
    :func:`seed32` for those that take only 32-bit ones."""
    return int(sequence(root, *key).generate_state(1, dtype="uint64")[0] >> 1)


def seed32(root: int, *key) -> int:
    """A 32-bit integer seed drawn from sub-stream ``key``, for APIs that refuse larger ones
    (scikit-learn's ``random_state``)."""
    return int(stream(root, *key).integers(2**32))


def seed_torch(root: int, *key) -> None:
    """Seed torch's global generator from sub-stream ``key``, for what draws from it with no
    ``generator=`` argument (``nn.Module`` initialisation, dropout)."""
    import torch

    torch.manual_seed(seed_of(root, *key))


def seed_globals(root: int) -> None:
    """Seed numpy's and torch's global generators from chapter seed ``root`` (a safety net for
    library code that draws from them; the chapters' own draws name their streams)."""
    import numpy as np

    np.random.seed(sequence(root, "numpy-global").generate_state(4))
    try:
        seed_torch(root, "torch-global")
    except ImportError:  # a chapter without torch
        pass


def torch_generator(root: int, *key):
    """A CPU ``torch.Generator`` for sub-stream ``key`` of chapter seed ``root``."""
    import torch

    return torch.Generator().manual_seed(seed_of(root, *key))


def constant_torch_generator(*key):
    """A CPU ``torch.Generator`` that is part of a definition, the same whatever the chapter seed
    (a benchmark's inputs): :func:`constant_stream`'s stream ``key``, as a torch generator."""
    import torch

    return torch.Generator().manual_seed(int(constant_stream(*key).integers(2**63)))
