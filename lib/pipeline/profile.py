"""`companion profile CH`: where one chapter's run spends its time, and how fast its torch loops
compute against the machine's own matmul speed.

The chapter runs through the runner (forced, never from the cache) into
``_build/profile/<profile>/<slug>/run/``, with the run context's ``profiling`` naming
``sweeps.jsonl`` beside it, where :mod:`lib.sweep` appends one line per sweep. Afterwards
``profile.json`` in the same folder and a table on stdout give

- each code cell's wall time (papermill's per-cell metadata in the executed notebook);
- per sweep function: sweeps, points and their wall time; the matmul FLOPs of one point
  (torch's ``FlopCounterMode``, in one extra run of the first point) over that point's own
  uncounted time is the function's achieved FLOP/s;
- the peak it is compared with: a 2048 × 2048 fp32 matmul, timed on the run's thread count and on
  one thread (a sweep point inside ``lib.sweep.one_thread`` has one), and in fp64 on one thread
  (the ceiling of a chapter that computes in float64, about half the fp32 one), just before and after
  the run (median of the repeats, so a peak taken while other work shares the cores is of the
  same conditions as the run; the load average is recorded with it).

FLOPs are those of matrix products (mm, bmm, addmm, convolutions, attention), the ones a matmul
peak bounds; elementwise work and numpy are not counted, so a function that trains with numpy
shows no FLOP rate at all.

What bounds a sweep function below the matmul peak is named from a second count of the same
probe: the torch operators its point dispatches (forward, backward and optimiser). Each costs
PyTorch a fixed overhead whatever its size; the yardstick is that overhead measured on this
machine, one thread, before and after the run: a tiny training step (an 8-8-1 tanh network on 4
rows, Adam) timed and divided by its own operator count. A point's operators × that cost is the
time it would take if every operator were free of arithmetic; where that floor is at least half
the point's time, the function is bound by per-operator overhead (the lever is fewer, larger
operators: batching or compiling), and where it is not, by the arithmetic the FLOP counter does
not see (elementwise work, memory traffic, numpy).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from pathlib import Path

from lib.pipeline.chapters import Book, ChapterSource, UsageError
from lib.pipeline.runner import EXEC_FAILED, plan, run
from lib.run import PROFILING_ENV, requested_threads

PEAK_N = 2048
PEAK_REPEATS = 5
OP_STEPS = 400  # tiny training steps per timing of the per-operator cost
#: a function at this share of a thread's matmul peak is bound by arithmetic; a point whose
#: operator floor is this share of its time is bound by per-operator overhead
MATMUL_BOUND, OVERHEAD_BOUND = 0.4, 0.5
SWEEPS = "sweeps.jsonl"
PROFILE = "profile.json"


def profile_dir(book: Book, chapter: ChapterSource, profile: str) -> Path:
    return book.build_dir / "profile" / profile / chapter.slug


def matmul_peak(threads: int, n: int = PEAK_N, repeats: int = PEAK_REPEATS, dtype: str = "float32") -> list[float]:
    """FLOP/s of ``repeats`` timed n × n matmuls (fp32 unless ``dtype``) on ``threads`` threads
    (after a warm-up)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)
        a, b = (torch.randn(n, n, generator=g, dtype=getattr(torch, dtype)) for _ in range(2))
        a @ b
        rates = []
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            rates.append(2 * n ** 3 / (time.perf_counter() - t))
        return rates
    finally:
        torch.set_num_threads(previous)


def op_cost(repeats: int = PEAK_REPEATS, steps: int = OP_STEPS) -> list[float]:
    """Seconds per dispatched torch operator on one thread: ``repeats`` timings of ``steps`` tiny
    training steps (8-8-1 tanh network, 4 rows, Adam), each divided by the operators one step
    dispatches (counted as :mod:`lib.sweep`'s probe counts them)."""
    import torch

    from lib.profiling import op_counter
    from lib.sweep import one_thread

    g = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.randn(4, 8, generator=g)

    def step():
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()

    with one_thread():
        step()
        counter = op_counter()
        with counter:
            step()
        costs = []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(steps):
                step()
            costs.append((time.perf_counter() - t) / (steps * counter.count))
    return costs


def bound(row: dict, op_s: float) -> str:
    """What limits a sweep function's speed (module docstring): "matmul", "per-op overhead",
    "non-matmul work" or, without torch operators, "numpy / compiled"."""
    if not row.get("ops"):
        return "numpy / compiled"
    if (row["of_peak_1_thread"] or 0.0) >= MATMUL_BOUND:
        return "matmul"
    if row["ops"] * op_s >= OVERHEAD_BOUND * row["probe_seconds"]:
        return "per-op overhead"
    return "non-matmul work"


def cell_times(notebook: Path) -> list[dict]:
    """Each executed code cell: its index in the notebook, first line of code and wall time."""
    cells = json.loads(notebook.read_text())["cells"]
    found = []
    for i, cell in enumerate(cells):
        seconds = cell.get("metadata", {}).get("papermill", {}).get("duration")
        if cell["cell_type"] != "code" or seconds is None:
            continue
        lines = [ln.strip() for ln in "".join(cell["source"]).splitlines()]
        first = next((ln for ln in lines if ln and not ln.startswith("#")), "")
        found.append({"cell": i, "code": first, "seconds": round(seconds, 3)})
    return found


def sweep_table(lines: list[dict], peak: float, peak_1: float, op_s: float) -> list[dict]:
    """The sweeps' lines (lib.sweep) summed per function, with the achieved FLOP/s of its probe,
    that rate as a share of the peak on the run's threads and on one thread, its operator count,
    the share of its time those operators' fixed cost ``op_s`` accounts for, and its bound."""
    rows: dict[str, dict] = {}
    for line in lines:
        row = rows.setdefault(line["function"], {"function": line["function"], "sweeps": 0, "points": 0,
                                                 "seconds": 0.0, "flops_per_point": None,
                                                 "probe_seconds": None, "flops_per_s": None,
                                                 "ops": None})
        row["sweeps"] += 1
        row["points"] += line["points"]
        row["seconds"] = round(row["seconds"] + line["seconds"], 4)
        if "probe" in line and row["flops_per_point"] is None:
            row["flops_per_point"], row["probe_seconds"] = line["probe"]["flops"], line["probe"]["seconds"]
            row["ops"] = line["probe"].get("ops")
            if line["probe"]["flops"] and line["probe"]["seconds"] > 0:
                row["flops_per_s"] = line["probe"]["flops"] / line["probe"]["seconds"]
    for row in rows.values():
        rate = row["flops_per_s"]
        row["of_peak"] = None if rate is None else round(rate / peak, 4)
        row["of_peak_1_thread"] = None if rate is None else round(rate / peak_1, 4)
        ops, seconds = row["ops"], row["probe_seconds"]
        row["overhead_share"] = round(ops * op_s / seconds, 4) if ops and seconds else None
        row["bound"] = bound(row, op_s)
    return sorted(rows.values(), key=lambda r: -r["seconds"])


def profile(book: Book, chapter: ChapterSource, profile: str, overrides: dict, report) -> int:
    """Run ``chapter`` with profiling on, write profile.json, print the table; the run's exit code."""
    folder = profile_dir(book, chapter, profile)
    request = plan(book, chapter, profile, overrides, folder / "run", force=True)  # UsageError before any work
    threads = requested_threads() or os.cpu_count() or 1  # what the runner sets
    folder.mkdir(parents=True, exist_ok=True)
    sweeps = folder / SWEEPS
    sweeps.unlink(missing_ok=True)

    def peaks() -> dict:
        return {"load": round(os.getloadavg()[0], 2), "threads": matmul_peak(threads), "one_thread": matmul_peak(1),
                "one_thread_float64": matmul_peak(1, dtype="float64"),
                "op_s": op_cost()}

    before = peaks()
    with _environ(PROFILING_ENV, str(sweeps)):
        [result] = run(book, [request], report=report)
    if result.status == "failed":
        return EXEC_FAILED
    after = peaks()
    peak = statistics.median(before["threads"] + after["threads"])
    peak_1 = statistics.median(before["one_thread"] + after["one_thread"])
    peak_64 = statistics.median(before["one_thread_float64"] + after["one_thread_float64"])
    op_s = statistics.median(before["op_s"] + after["op_s"])
    lines = [json.loads(ln) for ln in sweeps.read_text().splitlines()] if sweeps.exists() else []
    doc = {
        "chapter": chapter.slug, "profile": profile, "overrides": overrides, "run": str(request.out_dir),
        "runtime_s": round(result.runtime_s, 2), "threads": threads,
        "peak": {"matmul_n": PEAK_N, "flops_per_s": peak, "one_thread_flops_per_s": peak_1,
                 "one_thread_float64_flops_per_s": peak_64,
                 "op_s": op_s, "before": before, "after": after},
        "cells": cell_times(request.out_dir / f"{chapter.slug}.ipynb"),
        "sweeps": sweep_table(lines, peak, peak_1, op_s),
        # the probes' extra runs: inside the cell times and runtime_s, outside the sweeps' seconds
        "probe_overhead_s": round(sum(ln.get("probe", {}).get("overhead_s", 0.0) for ln in lines), 3),
    }
    tmp = folder / f".{PROFILE}.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, folder / PROFILE)
    print(render(doc))
    print(f"→ {folder / PROFILE}")
    return result.exit_code


@contextlib.contextmanager
def _environ(name: str, value: str):
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def _g(flops: float | None) -> str:
    return "-" if flops is None else f"{flops / 1e9:.2f}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}"


def _ops_share(share: float | None) -> str:
    """The operator floor's share of a point's time. The yardstick (a tiny training step driven
    from Python) charges each operator Python's dispatch too, while the backward pass's operators
    are dispatched from C++: the floor is an upper estimate, so a share above 100 % reads as
    ">100" (bound by per-operator overhead), never as a measured percentage."""
    return ">100" if share is not None and share > 1 else _pct(share)


def render(doc: dict, top: int = 10) -> str:
    """The readable table of a profile.json document."""
    total = doc["runtime_s"] or 1.0
    p = doc["peak"]
    out = [f"{doc['chapter']} [{doc['profile']}]: {doc['runtime_s']:.1f} s on {doc['threads']} threads",
           f"matmul peak ({p['matmul_n']}² fp32, median before and after the run): "
           f"{_g(p['flops_per_s'])} GFLOP/s on {doc['threads']} threads, {_g(p['one_thread_flops_per_s'])} "
           f"on 1, {_g(p['one_thread_float64_flops_per_s'])} on 1 in fp64 "
           f"(load average {p['before']['load']} → {p['after']['load']}); "
           f"{1e6 * p['op_s']:.1f} µs per torch operator on 1 thread", "",
           f"{'cell':>6}  {'first line of code':<58} {'s':>8} {'%':>6}"]
    cells = sorted(doc["cells"], key=lambda c: -c["seconds"])
    for c in cells[:top]:
        out.append(f"{c['cell']:>6}  {c['code'][:58]:<58} {c['seconds']:>8.2f} {100 * c['seconds'] / total:>6.1f}")
    if rest := cells[top:]:
        s = sum(c["seconds"] for c in rest)
        out.append(f"{'':>6}  {f'{len(rest)} other cells':<58} {s:>8.2f} {100 * s / total:>6.1f}")
    out += ["", f"{'sweep function':<44} {'sweeps':>6} {'points':>6} {'s':>8} {'%':>6} "
                f"{'GFLOP/pt':>9} {'GFLOP/s':>8} {'%peak':>6} {'%1-thr':>6} {'ops/pt':>9} {'%ops':>6}  bound"]
    for r in doc["sweeps"]:
        out.append(f"{r['function'][-44:]:<44} {r['sweeps']:>6} {r['points']:>6} {r['seconds']:>8.2f} "
                   f"{100 * r['seconds'] / total:>6.1f} {_g(r['flops_per_point']):>9} {_g(r['flops_per_s']):>8} "
                   f"{_pct(r['of_peak']):>6} {_pct(r['of_peak_1_thread']):>6} {r['ops'] or '-':>9} "
                   f"{_ops_share(r['overhead_share']):>6}  {r['bound']}")
    if not doc["sweeps"]:
        out.append("(no sweeps)")
    extra = doc.get("probe_overhead_s", 0.0)
    outside = doc["runtime_s"] - sum(r["seconds"] for r in doc["sweeps"]) - extra
    out.append(f"{'outside sweeps':<44} {'':>6} {'':>6} {outside:>8.2f} {100 * outside / total:>6.1f}")
    out.append(f"{'FLOP probes (extra runs, in the cells above)':<58} {extra:>8.2f} {100 * extra / total:>6.1f}")
    return "\n".join(out)


# -- profile records: where each chapter's time goes, committed like the paper records -------------
RECORDS = "records/profile"
PAGE_MARKER = "<!-- profile-records -->"


def record_path(book: Book, profile: str, chapter: ChapterSource) -> Path:
    return book.root / "book" / RECORDS / profile / f"{chapter.slug}.json"


def write_record(book: Book, chapter: ChapterSource, profile: str) -> Path:
    """Store the chapter's last profile (``profile.json``) as ``book/records/profile/P/<slug>.json``
    with the commit and the machine it was measured on; the reproducing page is built from these."""
    from lib.pipeline.records import machine
    from lib.provenance import git_commit

    source = profile_dir(book, chapter, profile) / PROFILE
    if not source.is_file():
        raise UsageError(f"no profile of {chapter.slug} at {profile}: run `companion profile {chapter.number} "
                         f"--profile {profile}` first")
    doc = json.loads(source.read_text())
    if doc.get("overrides"):
        raise UsageError(f"the profile of {chapter.slug} ran with -p overrides: a record is of the profile's values")
    doc.pop("run", None)
    doc["provenance"] = {"git": git_commit(book.root), "machine": machine()}
    path = record_path(book, profile, chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def _top_sweeps(doc: dict, share: float = 0.05) -> str:
    total = doc["runtime_s"] or 1.0
    rows = []
    for r in sorted(doc["sweeps"], key=lambda r: -r["seconds"]):
        if r["seconds"] < share * total:
            continue
        if r.get("bound") == "numpy / compiled":
            rows.append(f"`{r['function'].rsplit('.', 1)[-1]}` {r['seconds']:.0f} s: numpy / compiled")
        else:
            rows.append(f"`{r['function'].rsplit('.', 1)[-1]}` {r['seconds']:.0f} s: "
                        f"{_g(r.get('flops_per_s'))} GFLOP/s, {_pct(r.get('of_peak_1_thread'))} % of one thread's "
                        f"peak, {r.get('ops') or 0:,} operators per point; {r['bound']}")
    return "<br>".join(rows) or "no sweep function over 5 % of the run"


def records_markdown(book: Book, profile: str = "default") -> str:
    """The reproducing page's table of where each chapter's time goes, from the profile records."""
    lines = ["| chapter | run (s) | in sweeps | sweep functions over 5 % of the run: time; matmul rate, share of "
             "one thread's fp32 peak, torch operators per point; bound | measured |",
             "|---|---:|---:|---|---|"]
    machines = set()
    for ch in book.chapters():
        path = record_path(book, profile, ch)
        if not path.is_file():
            lines.append(f"| {ch.number} | not recorded | | `companion profile {ch.number} --record` | |")
            continue
        doc = json.loads(path.read_text())
        prov = doc.get("provenance", {})
        swept = sum(r["seconds"] for r in doc["sweeps"]) / (doc["runtime_s"] or 1.0)
        load = doc["peak"]["before"].get("load"), doc["peak"]["after"].get("load")
        cpu = prov.get("machine", {}).get("cpu", "?")
        machines.add(f"{cpu}: {_g(doc['peak']['one_thread_flops_per_s'])} GFLOP/s fp32 and "
                     f"{_g(doc['peak']['one_thread_float64_flops_per_s'])} fp64 on one thread")
        lines.append(f"| {ch.number} | {doc['runtime_s']:.0f} | {100 * swept:.0f} % | {_top_sweeps(doc)} | "
                     f"`{prov.get('git', '?')}`, load {load[0]} → {load[1]} |")
    tail = ["", "Measured on " + "; ".join(sorted(machines)) + "." if machines else ""]
    return "\n".join(lines + tail)


def stage_page(book: Book, dest: Path) -> None:
    """Fill the staged reproducing page's generated tables: the paper profiles' parameters and the
    profile records."""
    page = dest / "book" / "reproducing.md"
    if not page.exists():
        return
    text = page.read_text()
    if PAGE_MARKER in text:
        text = text.replace(PAGE_MARKER, records_markdown(book))
    if PARAMETERS_MARKER in text:
        text = text.replace(PARAMETERS_MARKER, paper_parameters_markdown(book))
    page.write_text(text)


PARAMETERS_MARKER = "<!-- paper-parameters -->"


def paper_parameters_markdown(book: Book) -> str:
    """What each chapter's `paper` profile changes from `default` (read from book/params/)."""
    from lib.pipeline.runner import resolve as resolve_params

    lines = ["| chapter | `default` → `paper` |", "|---|---|"]
    for ch in book.chapters():
        default, paper = resolve_params(book, ch, "default", {}), resolve_params(book, ch, "paper", {})
        changed = [f"`{k}` {_short(default.get(k))} → {_short(v)}" for k, v in paper.items()
                   if k not in ("out_dir", "profile") and default.get(k) != v]
        lines.append(f"| {ch.number} | {'; '.join(changed) or 'the `default` values'} |")
    return "\n".join(lines)


def _short(value, limit: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"
