"""`companion`: list, run, build and check the book's chapters.

    companion list
    companion run CH... [--profile quick|default|paper] [-p NAME VALUE]... [--out DIR]
                  [--force] [--jobs N] [--scheduler ADDRESS] [--dry-run]
    companion params CH [--profile P] [-p NAME VALUE]...   (flat YAML for `papermill -f`)
    companion build [--profile P] [--jobs N]
    companion status [--profile P]
    companion seeds CH... [--seeds 0-9|3,17,42] [--profile P] [--jobs N] [--scheduler ADDRESS]
    companion bench swr [...]
    companion strip [NOTEBOOK...]
    companion clean --points                  remove the kept sweep points (resume data)
    companion record CH... [--profile P] [--from DIR]   store the run as book/records/P/<slug>.json
    companion profile CH [--profile P] [-p NAME VALUE]...   where a run's time goes, FLOP/s vs peak
    companion verify CH... [--profile P] [--scheduler ADDRESS] [--run DIR]   recompute (or read DIR),
                                              compare with the record
    companion rekey CH... [--profile paper]   carry stale records whose canary gives the same numbers
    companion --version

Exit codes of ``run`` and ``build``: 0 every theorem claim held, 1 a notebook failed,
2 a theorem or check claim did not hold, 64 bad usage. ``seeds``: 0 every theorem and check
claim held on every seed, 2 otherwise (or a run failed), 64 bad usage.
``verify``: 0 the rerun agrees with the record, 2 it differs, 1 it failed, 64 bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from lib.claims import tally
from lib.pipeline.chapters import PROFILES, Book, UsageError, quote
from lib.pipeline import record_commands, record_pages, records
from lib.pipeline.cache import is_fresh, stored
from lib.pipeline.cores import check_scheduler
from lib.pipeline.runner import CLAIM_FAILED, EXEC_FAILED, OK, USAGE, RunResult, plan_all, resolve, run


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 64, as for every usage error
        raise UsageError(f"{self.prog}: {message}")


MAX_JOBS = 256
PROFILE_HELP = ("quick: seconds per chapter (smoke test); default: what the book shows, ≤ 3 CPU-minutes "
                "per chapter; paper: the papers' scale where a CPU reaches it (book/params/)")


def _jobs(text: str) -> int:
    """--jobs: a whole number of parallel runs, 1 to MAX_JOBS."""
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if not 1 <= jobs <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {MAX_JOBS}, got {text!r}")
    return jobs


def _out(text: str) -> str:
    """--out: kept as typed ('' must not become '.'), checked against the output rule later."""
    return text


def split_params(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    """Take ``-p NAME VALUE`` / ``--param NAME VALUE`` out of ``argv`` verbatim, so a value that
    starts with a dash (``-inf``, ``-5``) is a value, never an option."""
    rest, params, i = [], [], 0
    while i < len(argv):
        if argv[i] == "--":
            rest += argv[i:]
            break
        if argv[i] in ("-p", "--param"):
            if len(argv) - i < 3:
                raise UsageError(f"companion: {argv[i]} takes two values, NAME VALUE")
            if any(name == argv[i + 1] for name, _ in params):
                raise UsageError(f"companion: -p {quote(argv[i + 1])} is given twice; give each parameter once")
            params.append([argv[i + 1], argv[i + 2]])
            i += 3
            continue
        rest.append(argv[i])
        i += 1
    return rest, params


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="companion", description="Run and build the companion book.")
    p.add_argument("--version", action="version", version=f"companion {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="chapters, their parameters, types and defaults")

    run = sub.add_parser("run", help="execute chapters with papermill")
    run.add_argument("chapters", nargs="+", metavar="CH", help="number (1, 01) or slug; 'all'")
    run.add_argument("--profile", default="default", choices=PROFILES, help=PROFILE_HELP)
    run.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    run.add_argument("--out", type=_out, help="output folder (one chapter): new, empty, or an earlier run's")
    run.add_argument("--force", action="store_true", help="run even if cached")
    run.add_argument("--jobs", type=_jobs, default=1, help="chapters in parallel (cores are split)")
    run.add_argument("--scheduler", help="Dask scheduler address for the chapters' sweeps")
    run.add_argument("--dry-run", action="store_true",
                     help="resolve and validate the parameters, print them, execute nothing")

    params = sub.add_parser("params", help="a chapter's resolved parameters as YAML, for `papermill -f`")
    params.add_argument("chapter", metavar="CH")
    params.add_argument("--profile", default="default", choices=PROFILES, help=PROFILE_HELP)
    params.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))

    build = sub.add_parser("build", help="run what is missing or stale, then build the HTML book")
    build.add_argument("--profile", default="default", choices=PROFILES, help=PROFILE_HELP)
    build.add_argument("--jobs", type=_jobs, default=1)
    build.add_argument("--force", action="store_true")

    status = sub.add_parser("status", help="per chapter: cached?, claims held, runtime")
    status.add_argument("--profile", default="default", choices=PROFILES, help=PROFILE_HELP)

    seeds = sub.add_parser("seeds", help="run chapters over many seeds; how often each claim holds")
    seeds.add_argument("chapters", nargs="+", metavar="CH", help="number (1, 01) or slug; 'all'")
    seeds.add_argument("--seeds", default="0-9", help="a range 0-9, a list 3,17,42, or both (0-4,17)")
    seeds.add_argument("--profile", default="default", choices=PROFILES, help=PROFILE_HELP)
    seeds.add_argument("--jobs", type=_jobs, default=1, help="runs in parallel (cores are split)")
    seeds.add_argument("--scheduler", help="Dask scheduler address for the chapters' sweeps")
    seeds.add_argument("--force", action="store_true", help="run even if cached")

    bench = sub.add_parser("bench", help="kernel benchmarks")
    bench.add_argument("what", choices=["swr"])
    bench.add_argument("args", nargs=argparse.REMAINDER)

    clean = sub.add_parser("clean", help="remove kept sweep points (what lets a killed run resume)")
    clean.add_argument("--points", action="store_true", required=True,
                       help="remove _build/points/ (finished sweep points of interrupted or past runs)")

    record = sub.add_parser("record", help="store a chapter's run as a committed record (book/records/)")
    record.add_argument("chapters", nargs="+", metavar="CH", help="number (1, 01) or slug; 'all'")
    record.add_argument("--profile", default="default", choices=PROFILES, help=PROFILE_HELP)
    record.add_argument("--from", dest="from_dir", type=Path, metavar="DIR",
                        help="the run folder to record (default: the book's run of the profile)")

    verify = sub.add_parser("verify", help="rerun recorded chapters and compare with their records")
    verify.add_argument("chapters", nargs="+", metavar="CH", help="number (1, 01) or slug; 'all'")
    verify.add_argument("--profile", default="default", choices=PROFILES, help=PROFILE_HELP)
    verify.add_argument("--scheduler", help="Dask scheduler address for the chapters' sweeps")
    verify.add_argument("--run", type=Path, metavar="DIR",
                        help="compare the run in DIR with the record instead of recomputing")

    rekey = sub.add_parser("rekey", help="carry stale records to the current code where their canary "
                                         "(the quick run) gives the same claims and metrics")
    rekey.add_argument("chapters", nargs="+", metavar="CH", help="number (1, 01) or slug; 'all'")
    rekey.add_argument("--profile", default="paper", choices=PROFILES, help=PROFILE_HELP)

    prof = sub.add_parser("profile", help="run one chapter with profiling on: time per cell and "
                                          "sweep function, FLOP/s against the matmul peak")
    prof.add_argument("chapter", metavar="CH")
    prof.add_argument("--profile", default="default", choices=PROFILES, help=PROFILE_HELP)
    prof.add_argument("--record", action="store_true",
                      help="also store it as book/records/profile/P/<slug>.json (the reproducing page's table)")
    prof.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))

    strip = sub.add_parser("strip", help="remove outputs from chapter notebooks (in place)")
    strip.add_argument("notebooks", nargs="*", type=Path)
    return p


def _select(book: Book, keys: list[str]):
    if keys == ["all"]:
        return book.chapters()
    return [book.chapter(k) for k in keys]


def _report(r: RunResult) -> None:
    claims = r.results.get("claims", [])
    tag = {"cached": "cached", "ran": "ran", "failed": "FAILED"}[r.status]
    line = f"{r.chapter.slug} [{r.profile}] {tag} ({r.runtime_s:.1f}s)"
    if r.status != "failed":
        line += f": {tally(claims)} → {r.out_dir}"
    print(line, flush=True)
    if r.status == "failed":
        print(r.message, file=sys.stderr, flush=True)
    for c in r.failed_claims:
        print(f"  {c['kind']} claim '{c['id']}' does not hold: {c['statement']} "
              f"(theory {c['theory']}, simulation {c['simulation']}, {c['tolerance']})",
              file=sys.stderr, flush=True)


def _exit(results: list[RunResult]) -> int:
    codes = {r.exit_code for r in results}
    return EXEC_FAILED if EXEC_FAILED in codes else CLAIM_FAILED if CLAIM_FAILED in codes else OK


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("companion-book")
    except PackageNotFoundError:
        return "unknown"


def cmd_list(book: Book, args) -> int:
    for ch in book.chapters():
        print(f"{ch.slug}  {ch.title}")
        for p in ch.parameters.values():
            allowed = f"  {p.constraint.text}" if p.constraint else ""
            print(f"    {p.name:<18} {p.type_name:<14} {p.default!r}{allowed}")
    return OK


def cmd_params(book: Book, args) -> int:
    import yaml

    ch = book.chapter(args.chapter)
    params = resolve(book, ch, args.profile, dict(args.param))
    if "profile" in ch.parameters:  # `papermill -f` alone then labels the run with its profile
        params = {"profile": args.profile, **params}
    print(yaml.safe_dump(params, sort_keys=False, allow_unicode=True), end="")
    return OK


def cmd_run(book: Book, args) -> int:
    overrides = dict(args.param)
    requests = plan_all(book, _select(book, args.chapters), args.profile, overrides, args.out, args.force)
    if args.dry_run:
        check_scheduler(args.scheduler)
        for r in requests:
            print(f"{r.chapter.slug} [{r.profile}]: " + ", ".join(f"{k}={v!r}" for k, v in r.params.items()))
            print(f"  expected: {_expected_time(book, r.chapter, r.profile, overrides)}")
        return OK
    return _exit(run(book, requests, args.jobs, args.scheduler, _report))


def _expected_time(book: Book, chapter, profile: str, overrides: dict) -> str:
    """What a run is likely to cost, from the profile's committed record or the last run there."""
    record = records.load(book, profile, chapter)
    prov, source = ((record or {}).get("provenance") or {}), "its committed record"
    if not prov:
        doc = stored(book.run_dir(profile, chapter)) or {}
        prov, source = doc.get("provenance") or {}, "the last run at this profile"
    if not prov.get("runtime_s"):
        return "unknown (no record and no earlier run at this profile)"
    cpu = f", {prov['cpu_s'] / 60:.1f} CPU-minutes" if prov.get("cpu_s") else ""
    caveat = " with other parameters" if overrides else ""
    return f"about {prov['runtime_s'] / 60:.1f} minutes of wall time{cpu} ({source}{caveat})"


def cmd_status(book: Book, args) -> int:
    """Per chapter: its run at the profile (cached, stale or not run) and its record there
    (current, stale and what changed, or none)."""
    print(f"profile {args.profile} (runs in {book.build_dir / 'runs' / args.profile}, records in "
          f"book/records/{args.profile}; --profile quick|default|paper for another)")
    states = record_pages.record_states(book, args.profile)
    for ch in book.chapters():
        params = resolve(book, ch, args.profile, {})
        fresh, doc = is_fresh(book, ch, params, book.run_dir(args.profile, ch))
        if doc is None:
            run = "not run"
        else:
            run = (f"run: {'cached' if fresh else 'stale'}, {tally(doc.get('claims', []))}, "
                   f"{doc['provenance'].get('runtime_s', 0):.1f}s")
        print(f"{ch.slug:<40} {run}; record: {states[ch.slug]}")
    return OK


def cmd_build(book: Book, args) -> int:
    from lib.pipeline.book import build_html

    results = run(book, plan_all(book, book.chapters(), args.profile, force=args.force), args.jobs,
                  report=_report)
    code = _exit(results)
    if code == EXEC_FAILED:
        print("not building the book: a chapter failed", file=sys.stderr)
        return code
    ok = build_html(book, args.profile)
    _recap(results, args.profile)
    return code if ok else EXEC_FAILED


def _recap(results: list[RunResult], profile: str) -> None:
    """The build's last lines: every chapter's outcome, so the one that matters is not lost among
    minutes of progress output."""
    print(f"\nrecap ({profile}):")
    for r in results:
        claims = (r.results or {}).get("claims", [])
        word = "FAILED TO RUN" if r.status == "failed" else tally(claims)
        print(f"  {r.chapter.slug:<40} {word}")


def cmd_seeds(book: Book, args) -> int:
    from lib.pipeline.seeds import all_held, claim_line, parse_seeds, run_seeds, seeds_dir

    seeds = parse_seeds(args.seeds)
    chapters = _select(book, args.chapters)
    results = run_seeds(book, chapters, seeds, args.profile, args.jobs, args.scheduler,
                        lambda r: print(f"  {r.chapter.slug} {r.out_dir.name}: {r.status}", flush=True),
                        args.force)
    ok = True
    for summary, executed in results:
        print(f"{summary['chapter']} [{summary['profile']}] over {len(seeds)} seeds:")
        if not executed:
            print("  some runs failed to execute (see above)")
        for c in summary["claims"]:
            print(f"  {c['kind']:<9} {c['id']:<40} {claim_line(c, seeds, summary['profile'])}")
        print(f"  → {seeds_dir(book, summary['profile'], book.chapter(summary['chapter'])) / 'summary.json'}")
        ok &= all_held(summary, executed)
    return OK if ok else CLAIM_FAILED


def cmd_bench(book: Book, args) -> int:
    from lib.swr_bench.cli import main

    return main(args.args) or OK


def cmd_clean(book: Book, args) -> int:
    """Remove the sweep points runs kept (``*.pkl`` under _build/points) and the folders they
    leave empty; anything else found there is left alone and named."""
    points = book.build_dir / "points"
    files = [p for p in points.rglob("*") if p.is_file() and not p.is_symlink()] if points.is_dir() else []
    ours = [p for p in files if p.suffix == ".pkl" or p.suffix.startswith(".tmp")]
    size = sum(p.stat().st_size for p in ours)
    for p in ours:
        p.unlink()
    for folder in sorted((d for d in points.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only if empty
    with contextlib.suppress(OSError):
        points.rmdir()
    print(f"removed {len(ours)} sweep points from {points} ({size / 1e6:.1f} MB)")
    if kept := len(files) - len(ours):
        print(f"left {kept} files there that no run wrote", file=sys.stderr)
    return OK


def _notebook(path: Path) -> dict:
    """The notebook at ``path``, or UsageError with one line saying why it is not one."""
    if not path.is_file():
        raise UsageError(f"strip: {path}: {'is not a file' if path.exists() else 'no such file'}")
    if path.suffix != ".ipynb":
        raise UsageError(f"strip: {path}: not a notebook (.ipynb)")
    try:
        nb = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"strip: {path}: not a readable notebook ({type(exc).__name__})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or \
            not all(isinstance(c, dict) and "cell_type" in c for c in nb["cells"]):
        raise UsageError(f"strip: {path}: not a notebook (no list of cells)")
    return nb


def cmd_strip(book: Book, args) -> int:
    paths = args.notebooks or sorted(book.chapter_dir.glob("*.ipynb"))
    notebooks = [(path, _notebook(path)) for path in paths]  # every file checked before any is written
    for path, nb in notebooks:
        changed = False
        for cell in nb["cells"]:
            if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count")):
                cell["outputs"], cell["execution_count"] = [], None
                changed = True
        if changed:
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            print(f"stripped {path}")
    return OK


def cmd_profile(book: Book, args) -> int:
    from lib.pipeline.profile import profile, write_record

    chapter = book.chapter(args.chapter)
    code = profile(book, chapter, args.profile, dict(args.param), _report)
    if args.record and code in (OK, CLAIM_FAILED):
        print(f"→ {write_record(book, chapter, args.profile)}")
    return code


COMMANDS = {"list": cmd_list, "run": cmd_run, "params": cmd_params, "status": cmd_status, "build": cmd_build,
            "seeds": cmd_seeds, "bench": cmd_bench, "strip": cmd_strip, "clean": cmd_clean,
            "record": record_commands.cmd_record, "verify": record_commands.cmd_verify,
            "rekey": record_commands.cmd_rekey,
            "profile": cmd_profile}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # a newcomer's first try: the commands, not an error
        _parser().print_help()
        return OK
    try:
        params = []
        if argv and argv[0] in ("run", "params", "profile"):
            argv, params = split_params(argv)
        args = _parser().parse_args(argv)
        if params:
            args.param = params
        return COMMANDS[args.command](Book(), args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        # A kernel the Ctrl-C reached first leaves papermill's cell task failed with
        # DeadKernelError; asyncio would print that task's traceback when it is collected at exit.
        logging.getLogger("asyncio").disabled = True
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `companion list | head -1`: the reader has all it wants
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK


if __name__ == "__main__":
    sys.exit(main())
