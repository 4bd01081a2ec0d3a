"""A chapter's parameter values under any profile: the notebook's declared defaults with the
profile's entry in book/params/<profile>.yaml over them. For prose that sets the run beside the
book's other profiles ("`paper` trains 8 seeds for 1680 steps") with numbers from the files the
runner reads, not typed into a sentence."""

from __future__ import annotations

import yaml

from lib.chapter import CHAPTER_DIR
from lib.parameters import parameters_of


def profile_values(slug: str, profile: str) -> dict:
    """Every declared parameter of chapter ``slug`` as ``companion run --profile <profile>``
    would set it (no ``-p`` overrides)."""
    defaults = {name: p.default for name, p in parameters_of(CHAPTER_DIR / f"{slug}.ipynb").items()}
    path = CHAPTER_DIR.parent / "params" / f"{profile}.yaml"
    if not path.is_file():
        raise ValueError(f"no profile '{profile}' ({path} does not exist)")
    table = yaml.safe_load(path.read_text()) or {}
    return {**defaults, **(table.get(slug) or {})}
