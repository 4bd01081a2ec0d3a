"""Recorded runs: a small, committed record of one chapter run, and what the book shows from it.

``companion record CH --profile paper`` copies from the run in ``_build/runs/<profile>/<slug>/``
its parameters, claims and metrics and its provenance (commit, cache key, the library files it
imported, machine, wall and CPU time) into ``book/records/<profile>/<slug>.json``, with a
fingerprint of every input the cache key covers (``inputs``), so that a record whose key no
longer matches the current code can say what changed. Records are data: no notebook, no figure.

This module is the record itself: making and writing it, what changed since (``changes``),
comparing a run with it (``compare``, ``exactness``), its canary and carrying it across a
refactor (``rekey``). What the book shows of records is :mod:`lib.pipeline.record_pages`; the
``record``, ``verify`` and ``rekey`` commands are :mod:`lib.pipeline.record_commands`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from lib.claims import format_value, status_of
from lib.pipeline.chapters import Book, ChapterSource, UsageError
from lib import digests
from lib.pipeline.cache import ENV_FILES, is_fresh
from lib.pipeline.runner import resolve

RECORD_VERSION = 2
#: Records written before the syntax-tree digests: read and shown, stale until rekeyed.
OLD_VERSIONS = (1,)
#: The profile the book's pages show records of.
SHOWN = "paper"
#: Metrics that are wall-clock measurements: they differ between any two runs.
TIMINGS = "timings"
#: How far a rerun's metric may move and still agree with a record made on another CPU model or
#: with other library versions (float32 reassociation by other vector widths or kernels); on the
#: same CPU model and library versions a rerun must give every number exactly.
RTOL, ATOL = 1e-6, 1e-12
#: The canary: the profile whose run stands for a record's numbers when it is carried across a
#: refactor (`companion rekey`).
CANARY = "quick"
#: How a record was last confirmed.
RECOMPUTED, CARRIED = "recomputed", "carried by canary"
#: The numerical libraries whose versions, with the CPU model, decide whether verify is exact.
LIBRARIES = ("numpy", "torch", "scipy", "numba")


def record_path(book: Book, profile: str, chapter: ChapterSource) -> Path:
    return book.root / "book" / "records" / profile / f"{chapter.slug}.json"


def load(book: Book, profile: str, chapter: ChapterSource) -> dict | None:
    """The chapter's record at ``profile``; None when there is none, UsageError when it is not
    a record (a hand-edited or truncated file is reported, never shown as "not yet recorded")."""
    path = record_path(book, profile, chapter)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        ok = (record.get("record_version") in (RECORD_VERSION, *OLD_VERSIONS)
              and record.get("chapter") == chapter.slug
              and {"parameters", "claims", "metrics", "inputs"} <= set(record)
              and {"cache_key", "deps"} <= set(record.get("provenance", {})))
    except (OSError, ValueError, AttributeError):
        ok = False
    if not ok:
        raise UsageError(f"{path.relative_to(book.root)} is not a record of {chapter.slug} "
                         f"(remake it with `companion record {chapter.number} --profile {profile}`)")
    return record


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def inputs(book: Book, chapter: ChapterSource, deps: list[str]) -> dict:
    """The digest of each input that can change a number (lib.digests): the notebook's code cells,
    the resolved environment, each source file of ``deps`` (presentation modules excepted)."""
    return {"notebook": digests.notebook_digest(chapter.path),
            "environment": digests.environment(book.root),
            "files": {rel: digests.file_digest(book.root / rel, rel) for rel in sorted(deps)}}


_ISA = {"x86-64-v2": {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"},
        "x86-64-v3": {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
        "x86-64-v4": {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}}


def isa_level(flags: set[str], arch: str | None = None) -> str:
    """The x86-64 micro-architecture level the CPU flags reach (v1 to v4), or the architecture."""
    arch = arch or platform.machine()
    if arch not in ("x86_64", "AMD64"):
        return arch
    level = "x86-64-v1"
    for name, needed in _ISA.items():
        if not needed <= flags:
            break
        level = name
    return level


def machine() -> dict:
    """The CPU model, its x86-64 level (from /proc/cpuinfo's flags) and the core count."""
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), cpu)
        flags = set(next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), []))
    except OSError:
        pass
    return {"cpu": cpu, "isa": isa_level(flags) if flags else platform.machine(), "cores": os.cpu_count()}


# -- the working tree -----------------------------------------------------------------------
def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, text=True, capture_output=True)


def run_inputs(book: Book, chapter: ChapterSource, deps: list[str]) -> list[str]:
    """Every file a run of ``chapter`` depends on, relative to the root: its notebook, its deps,
    the profiles' parameter files and the environment files."""
    params = sorted(os.path.relpath(p, book.root) for p in book.params_dir.glob("*.yaml"))
    return sorted({os.path.relpath(chapter.path, book.root), *deps, *params, *ENV_FILES})


def clean_commit(book: Book, chapter: ChapterSource, deps: list[str]) -> str:
    """The checked-out commit, when every file the run depends on is as committed there (the rest
    of the working tree may differ); UsageError naming the files otherwise."""
    head = _git(book.root, "rev-parse", "--short=12", "HEAD")
    if head.returncode != 0:
        raise UsageError(f"{book.root} is not a git checkout with a commit: a record names the commit "
                         f"its code is")
    paths = [p for p in run_inputs(book, chapter, deps) if (book.root / p).exists()
             or _git(book.root, "ls-files", "--error-unmatch", p).returncode == 0]
    out = _git(book.root, "status", "--porcelain", "--untracked-files=all", "--", *paths)
    changed = sorted({line[3:].split(" -> ")[-1] for line in out.stdout.splitlines() if line.strip()})
    if out.returncode != 0 or changed:
        raise UsageError(f"{chapter.slug}: files the run depends on differ from commit {head.stdout.strip()} "
                         f"({', '.join(changed[:5]) or out.stderr.strip()}{' …' if len(changed) > 5 else ''}): "
                         f"commit them, or record from a clean `git worktree` checkout")
    return head.stdout.strip()


# -- making a record --------------------------------------------------------------------------
#: What of a claim is a number or a verdict (its statement and tolerance are words: rewording one
#: changes no number, and fields added to claims later are not in older canaries).
CLAIM_NUMBERS = ("id", "kind", "theory", "simulation", "holds", "false_alarm", "verdict")


def _claim_numbers(claim: dict) -> dict:
    alt, power = claim.get("alternative") or {}, claim.get("power") or {}
    return {**{k: claim.get(k) for k in CLAIM_NUMBERS}, "word": status_of(claim),
            "alternative": [alt.get("prediction"), alt.get("rejected")] if alt else None,
            "power": [power.get("detects"), power.get("value")] if power else None}


def numbers(doc: dict) -> dict:
    """What a run's numbers are for comparison: each claim's values and verdict, and its metrics
    outside timings."""
    return {"claims": [_claim_numbers(c) for c in doc.get("claims", [])],
            "metrics": {k: v for k, v in (doc.get("metrics") or {}).items() if k != TIMINGS}}


def numbers_digest(doc: dict) -> str:
    return _digest(json.dumps(numbers(doc), sort_keys=True, allow_nan=True).encode())


def _checked_run(book: Book, chapter: ChapterSource, profile: str, run_dir: Path) -> dict:
    """The results of the run in ``run_dir``: the profile's run of the current code, whose inputs
    were not edited while it ran; UsageError otherwise."""
    fresh, doc = is_fresh(book, chapter, resolve(book, chapter, profile, {}), run_dir)
    if doc is None:
        raise UsageError(f"{chapter.slug} has no {profile} run to record in {run_dir} "
                         f"(run `companion run {chapter.number} --profile {profile}` first)")
    if not fresh or doc.get("profile") != profile or doc.get("chapter") != chapter.slug:
        raise UsageError(f"the {profile} run of {chapter.slug} in {run_dir} is not of the current code and "
                         f"profile (rerun `companion run {chapter.number} --profile {profile}` first)")
    prov = doc["provenance"]
    # The runner keys a run by its inputs' contents at the end: one edited while it ran may not be
    # what the kernel imported, so such a run is not recorded.
    started = datetime.fromisoformat(prov["started"]).timestamp()
    edited = [rel for rel in [os.path.relpath(chapter.path, book.root), *prov["deps"]]
              if (book.root / rel).exists() and (book.root / rel).stat().st_mtime >= started]
    if edited:
        raise UsageError(f"{', '.join(edited)} changed while the {profile} run of {chapter.slug} was executing "
                         f"(rerun `companion run {chapter.number} --profile {profile}` first)")
    return doc


def make_record(book: Book, chapter: ChapterSource, profile: str, run_dir: Path | None = None) -> dict:
    """The record of the chapter's run at ``profile`` in ``run_dir`` (default: the book's run
    folder), without its canary; UsageError when there is none, when it is not the profile's run
    of the current code, or when a file it depends on differs from the checked-out commit."""
    doc = _checked_run(book, chapter, profile, Path(run_dir) if run_dir else book.run_dir(profile, chapter))
    prov = doc["provenance"]
    commit = clean_commit(book, chapter, prov["deps"])
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return {"record_version": RECORD_VERSION, "chapter": chapter.slug, "profile": profile,
            "parameters": doc["parameters"], "claims": doc["claims"], "metrics": doc.get("metrics", {}),
            "provenance": {**{k: prov.get(k) for k in ("cache_key", "started", "runtime_s", "cpu_s",
                                                      "threads", "python", "torch", "numpy")},
                           "git": commit, "machine": machine(), "deps": prov["deps"],
                           "sweeps": prov.get("sweeps", [])},
            "inputs": inputs(book, chapter, prov["deps"]),
            "confirmed": {"method": RECOMPUTED, "commit": commit, "date": now}}


def canary(book: Book, chapter: ChapterSource, out: Path | None = None, force: bool = False) -> dict:
    """The chapter's canary run (its `quick` profile, cached when the code is unchanged) into
    ``out`` (default: the book's quick run folder): ``{profile, digest, sweeps, deps}``;
    UsageError when it fails."""
    from lib.pipeline.runner import plan, run_chapter

    r = run_chapter(book, plan(book, chapter, CANARY, out=out, force=force), progress=False)
    if r.status == "failed":
        error = [ln for ln in r.message.splitlines() if ln.strip() and not ln.startswith("(executed notebook")]
        raise UsageError(f"{chapter.slug}: the {CANARY} canary run failed ({(error or ['no message'])[-1].strip()})")
    return {"profile": CANARY, "digest": numbers_digest(r.results),
            "sweeps": r.results["provenance"].get("sweeps", []), "deps": r.results["provenance"]["deps"],
            "results": r.results}


def _canary_entry(c: dict) -> dict:
    return {"profile": c["profile"], "digest": c["digest"], "sweeps": c["sweeps"]}


def write(book: Book, record: dict) -> Path:
    path = record_path(book, record["profile"], book.chapter(record["chapter"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


# -- staleness ----------------------------------------------------------------------------------
def changes(book: Book, chapter: ChapterSource, record: dict) -> list[str]:
    """What changed since the record was made, that can change a number (lib.digests): a
    parameter of the profile (both values), the notebook's code, Python or an installed package
    (both versions), or a source file the run depended on. Empty: the record is current."""
    found = []
    try:
        now = resolve(book, chapter, record["profile"], {})
    except UsageError as exc:
        now = {}
        found.append(f"the profile's parameters ({exc})")
    recorded = record["parameters"]
    for name in sorted(set(now) | set(recorded)):
        was, new = recorded.get(name, "absent"), now.get(name, "absent")
        if now and was != new:
            found.append(f"parameter {name} ({_short(was)} → {_short(new)})")
    if record.get("record_version") in OLD_VERSIONS:
        return found + ["the record predates the syntax-tree digests "
                        f"(`companion rekey {chapter.number} --profile {record['profile']}`)"]
    then, current = record["inputs"], inputs(book, chapter, record["provenance"]["deps"])
    if current["notebook"] != then["notebook"]:
        found.append("the notebook's code")
    env_then, env_now = then["environment"], current["environment"]
    if env_then["python"] != env_now["python"]:
        found.append(f"Python ({env_then['python']} → {env_now['python']})")
    for name in sorted(set(env_then["packages"]) | set(env_now["packages"])):
        was, new = env_then["packages"].get(name, "absent"), env_now["packages"].get(name, "absent")
        if was != new:
            found.append(f"{name} ({was} → {new})")
    found += [rel for rel, h in current["files"].items() if then["files"].get(rel) != h]
    return found


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "…"


# -- verify ---------------------------------------------------------------------------------
def flatten(value, prefix: str = "", lists: bool = True) -> dict:
    """Nested metrics as {"a.b[2]": leaf} (lists kept whole with ``lists=False``)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k), lists))
        return out
    if isinstance(value, list) and lists:
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]", lists))
        return out
    return {prefix: value}


def _versions(record: dict) -> dict:
    """The Python and numerical library versions a record (or this process) ran with."""
    env = (record.get("inputs") or {}).get("environment")
    if env:
        return {"python": env["python"].split()[-1],
                **{k: env["packages"].get(k, "absent") for k in LIBRARIES}}
    prov = record.get("provenance", {})  # a record from before the environment was itemised
    return {"python": prov.get("python"), "numpy": prov.get("numpy"), "torch": prov.get("torch")}


def exactness(book: Book, record: dict) -> tuple[bool, str]:
    """Whether a rerun here must give the record's numbers exactly (same CPU model and library
    versions) or within RTOL/ATOL, and the sentence that says which and why."""
    then_cpu = (record["provenance"].get("machine") or {}).get("cpu")
    now_cpu = machine()["cpu"]
    then = _versions(record)
    now = _versions({"inputs": {"environment": digests.environment(book.root)}})
    differ = [f"{k} {then[k]} → {now.get(k)}" for k in then if then[k] != now.get(k)]
    if then_cpu == now_cpu and not differ:
        return True, f"compared exactly (same CPU model, {now_cpu}, and library versions)"
    why = "; ".join(filter(None, [f"CPU {then_cpu} → {now_cpu}" if then_cpu != now_cpu else "", *differ]))
    return False, f"compared within a relative {RTOL:g} (absolute {ATOL:g}) since {why}"


def _agree(a, b, exact: bool) -> bool:
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    if not numbers:
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b if exact else math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)


def compare(record: dict, doc: dict, exact: bool = False) -> list[str]:
    """Where a rerun's results.json differs from the record: a claim's word (holds, FAILS, an
    empirical verdict) or whether its alternative is rejected, and each metric leaf outside
    timings: exactly (``exact``) or beyond RTOL/ATOL."""
    diffs = []
    old = {c["id"]: c for c in record["claims"]}
    new = {c["id"]: c for c in doc.get("claims", [])}
    for cid in sorted(set(old) | set(new)):
        if cid not in new or cid not in old:
            diffs.append(f"claim {cid}: {'not in the rerun' if cid in old else 'not in the record'}")
            continue
        if status_of(old[cid]) != status_of(new[cid]):
            diffs.append(f"claim {cid}: {status_of(old[cid])} in the record, {status_of(new[cid])} now")
        rejected = [(c.get("alternative") or {}).get("rejected") for c in (old[cid], new[cid])]
        if rejected[0] != rejected[1]:
            diffs.append(f"claim {cid}: alternative rejected {rejected[0]} in the record, {rejected[1]} now")
    old_m, new_m = flatten(numbers(record)["metrics"]), flatten(numbers(doc)["metrics"])
    for key in sorted(set(old_m) | set(new_m)):
        if key not in old_m or key not in new_m:
            diffs.append(f"metric {key}: {'not in the rerun' if key in old_m else 'not in the record'}")
        elif not _agree(old_m[key], new_m[key], exact):
            diffs.append(f"metric {key}: {_exact(old_m[key], exact)} in the record, {_exact(new_m[key], exact)} now")
    return diffs


def _exact(value, exact: bool) -> str:
    """A metric as shown in a difference: every digit when compared exactly."""
    return repr(value) if exact and isinstance(value, float) else format_value(value)


@contextlib.contextmanager
def _worktree(book: Book, commit: str):
    """A clean checkout of ``commit`` in a temporary folder (``git worktree``), removed after."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix=f"canary-{commit[:12]}-"))
    out = _git(book.root, "worktree", "add", "--detach", str(where / "tree"), commit)
    if out.returncode != 0:
        raise UsageError(f"cannot check out commit {commit}: {out.stderr.strip().splitlines()[-1]}")
    try:
        yield where / "tree"
    finally:
        _git(book.root, "worktree", "remove", "--force", str(where / "tree"))
        shutil.rmtree(where, ignore_errors=True)


def canary_at(book: Book, chapter: ChapterSource, commit: str) -> dict:
    """The chapter's canary run on the code of ``commit`` (a `git worktree` checkout of it, run
    with this environment): ``{digest, results}``; UsageError when it fails."""
    import sys as _sys

    with _worktree(book, commit) as tree:
        out = tree / "_build" / "canary"
        env = {**os.environ, "COMPANION_ROOT": str(tree),
               "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
        env.pop("COMPANION_RUN", None)
        proc = subprocess.run([_sys.executable, "-m", "lib.pipeline.cli", "run", chapter.slug, "--profile", CANARY,
                               "--out", str(out)], cwd=tree, env=env, text=True, capture_output=True)
        doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
        if doc is None:
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines()
                     if ln.strip() and not ln.strip().startswith("(executed notebook")]
            tail = (lines or ["no output"])[-1]
            raise UsageError(f"{chapter.slug}: the {CANARY} canary at commit {commit} failed ({tail})")
    return {"digest": numbers_digest(doc), "results": doc}


def rekey(book: Book, chapter: ChapterSource, profile: str) -> tuple[bool, str]:
    """Carry the chapter's record to the current code when its canary gives the same claims and
    metrics (see :func:`cmd_rekey`); (carried or already current, what happened)."""
    record = load(book, profile, chapter)
    if record is None:
        raise UsageError(f"{chapter.slug} has no {profile} record to rekey")
    changed = changes(book, chapter, record)
    if not changed:
        return True, "current: nothing to carry"
    if any(c.startswith("parameter ") or c.startswith("the profile's") for c in changed):
        return False, f"stays stale: the profile's parameters changed ({', '.join(changed)}); rerun it"
    commit = record["provenance"]["git"]
    reference = (record.get("canary") or {}).get("digest")
    if reference is None and str(commit).endswith("-dirty"):
        return False, (f"stays stale: recorded from a modified working tree (commit {commit}), so its code is "
                       f"not the commit's and no canary can stand for it; rerun "
                       f"`companion run {chapter.number} --profile {profile}` and record it")
    head_commit = clean_commit(book, chapter, record["provenance"]["deps"])
    try:
        now = canary(book, chapter, book.build_dir / "canary" / CANARY / chapter.slug)
    except UsageError as exc:  # the current code's canary fails: nothing to carry the record to
        return False, f"stays stale: {exc}"
    clean_commit(book, chapter, now["deps"])  # the canary's own deps are committed too
    old_doc = None
    if reference is None:  # no canary stored with the record: run one at the record's commit
        try:
            then = canary_at(book, chapter, commit)
        except UsageError as exc:
            return False, f"stays stale: {exc}"
        reference, old_doc = then["digest"], then["results"]
    missing = sorted(set(record["provenance"].get("sweeps") or []) - set(now["sweeps"]))
    if missing:
        return False, f"stays stale: the canary does not run the sweep functions {', '.join(missing)}"
    if now["digest"] != reference:
        detail = ""
        if old_doc is not None:
            diffs = compare(old_doc, now["results"], exact=True)
            detail = f": {len(diffs)} difference(s), first {diffs[0]}" if diffs else ""
        return False, (f"stays stale: its {CANARY} canary differs between commit {commit} and now "
                       f"({reference} → {now['digest']}{detail}); rerun it")
    deps = sorted(set(record["provenance"]["deps"]) | set(now["deps"]))
    carried = {**record, "record_version": RECORD_VERSION,
               "provenance": {**record["provenance"], "deps": deps,
                              "sweeps": record["provenance"].get("sweeps") or now["sweeps"]},
               "inputs": inputs(book, chapter, deps),
               "canary": _canary_entry(now),
               "confirmed": {"method": CARRIED, "commit": head_commit, "from_commit": commit,
                             "canary_at_record": reference, "canary_now": now["digest"],
                             "date": datetime.now(UTC).isoformat(timespec="seconds"),
                             "changed": changed}}
    write(book, carried)
    return True, (f"carried by canary from commit {commit} to {head_commit} (canary {now['digest']} at both; "
                  f"changed: {', '.join(changed)})")
