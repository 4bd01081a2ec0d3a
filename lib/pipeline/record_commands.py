"""The commands over records: ``companion record``, ``verify`` and ``rekey`` (see
:mod:`lib.pipeline.records` for the record and docs/design.md, "Records", for the contract)."""

from __future__ import annotations

import sys
from pathlib import Path

from lib.claims import tally
from lib.pipeline.chapters import Book, ChapterSource, UsageError
from lib.pipeline.records import (_canary_entry, canary, changes, compare, exactness, load, make_record, record_path,
                                  rekey, write)
from lib.pipeline.cache import is_fresh


def _select(book: Book, keys: list[str]) -> list[ChapterSource]:
    """The chapters named on the command line (as the CLI selects them; 'all' for every one)."""
    return book.chapters() if keys == ["all"] else [book.chapter(k) for k in keys]


def _report(r) -> None:
    """One line per rerun, as `companion run` prints it (the notebook's error when it failed)."""
    tag = {"cached": "cached", "ran": "ran", "failed": "FAILED"}[r.status]
    line = f"{r.chapter.slug} [{r.profile}] {tag} ({r.runtime_s:.1f}s)"
    print(line + (f": {tally(r.results.get('claims', []))} → {r.out_dir}" if r.status != "failed" else ""),
          flush=True)
    if r.status == "failed":
        print(r.message, file=sys.stderr, flush=True)


def cmd_record(book: Book, args) -> int:
    """`companion record CH... --profile P [--from DIR]`: writes book/records/P/<slug>.json and
    nothing else, with the chapter's canary (its `quick` run, cached when the code is unchanged)."""
    chapters = _select(book, args.chapters)
    if args.from_dir and len(chapters) > 1:
        raise UsageError("--from takes one chapter at a time")
    made = [(ch, make_record(book, ch, args.profile, args.from_dir)) for ch in chapters]  # all checked first
    for ch, record in made:
        record["canary"] = _canary_entry(canary(book, ch))
        path = write(book, record)
        print(f"{record['chapter']} [{args.profile}] recorded at commit {record['provenance']['git']}: "
              f"{tally(record['claims'])} → {path.relative_to(book.root)}")
    return 0


def _rerun(book: Book, chapters, records_: dict, profile: str, scheduler) -> list:
    from lib.pipeline.runner import plan, run

    for ch in chapters:
        if changed := changes(book, ch, records_[ch.slug]):
            print(f"{ch.slug}: the record is stale (changed: {', '.join(changed)}); "
                  f"rerunning the current code with the record's parameters")
    requests = [plan(book, ch, profile, records_[ch.slug]["parameters"], book.build_dir / "verify" / profile / ch.slug,
                     force=True) for ch in chapters]  # forced: every point computed
    return run(book, requests, 1, scheduler, _report)


def cmd_verify(book: Book, args) -> int:
    """`companion verify CH... --profile P [--run DIR]`: rerun each recorded chapter with the
    record's parameters (forced, every sweep point computed, into _build/verify/), or read the run
    in DIR, and compare with its record: exactly on the record's CPU model and library versions,
    within RTOL otherwise. 0 agree, 2 differ, 1 a rerun failed, 64 bad usage."""
    from lib import results
    from lib.pipeline.runner import CLAIM_FAILED, EXEC_FAILED, OK

    chapters = _select(book, args.chapters)
    if args.run and len(chapters) > 1:
        raise UsageError("--run takes one chapter at a time")
    records_ = {}
    for ch in chapters:
        records_[ch.slug] = load(book, args.profile, ch)
        if records_[ch.slug] is None:
            raise UsageError(f"{ch.slug} has no {args.profile} record to verify "
                             f"({record_path(book, args.profile, ch).relative_to(book.root)}; "
                             f"`companion record {ch.number} --profile {args.profile}` makes one)")
    if args.run:
        ch = chapters[0]
        doc = results.read(args.run)
        if doc is None or doc.get("chapter") != ch.slug:
            raise UsageError(f"--run {args.run}: no run of {ch.slug} there (no results.json of it)")
        if doc.get("parameters") != records_[ch.slug]["parameters"]:
            raise UsageError(f"--run {args.run}: that run's parameters are not the record's")
        fresh, _ = is_fresh(book, ch, doc["parameters"], Path(args.run))
        print(f"{ch.slug}: comparing the run in {args.run} (" +
              ("of the current code" if fresh else "NOT of the current code: it shows what that run computed")
              + ") with the record, without recomputing")
        pairs = [(ch, doc)]
    else:
        runs = _rerun(book, chapters, records_, args.profile, args.scheduler)
        if any(r.exit_code == EXEC_FAILED for r in runs):
            return EXEC_FAILED
        pairs = [(r.chapter, r.results) for r in runs]
    code = OK
    for ch, doc in pairs:
        exact, how = exactness(book, records_[ch.slug])
        diffs = compare(records_[ch.slug], doc, exact)
        if not diffs:
            print(f"{ch.slug} [{args.profile}] agrees with its record ({len(doc.get('claims', []))} claims "
                  f"and the metrics {how})")
            continue
        code = CLAIM_FAILED
        print(f"{ch.slug} [{args.profile}] differs from its record in {len(diffs)} place(s), {how}:")
        for line in diffs[:20]:
            print(f"  {line}")
        if len(diffs) > 20:
            print(f"  … and {len(diffs) - 20} more")
    return code


def cmd_rekey(book: Book, args) -> int:
    """`companion rekey CH... [--profile paper]`: for each stale record, run the chapter's canary
    (its `quick` run) on the current code and compare its claims and metrics with the canary stored
    with the record, or, for a record without one, with the canary run at the record's commit (a
    `git worktree` checkout). Equal: the record is carried to the current code, with the commit
    and both canaries' digests as evidence. Otherwise it stays stale. 0 every record current or
    carried, 2 some stay stale, 64 bad usage."""
    chapters = _select(book, args.chapters)
    for ch in chapters:  # every record exists before any canary runs
        if load(book, args.profile, ch) is None:
            raise UsageError(f"{ch.slug} has no {args.profile} record to rekey")
    code = 0
    for ch in chapters:
        ok, what = rekey(book, ch, args.profile)
        print(f"{ch.slug} [{args.profile}]: {what}", flush=True)
        code = code if ok else 2
    return code
