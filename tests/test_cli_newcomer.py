"""The command line as a newcomer meets it: help without arguments, every --profile explained, a
dry run that says what a run will cost, and a build that ends with every chapter's outcome."""

from types import SimpleNamespace

from lib.pipeline import cli


def test_companion_alone_prints_the_commands(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr()
    assert "usage: companion" in out.out and "run" in out.out and "build" in out.out and out.err == ""


def test_every_profile_option_says_what_the_profiles_are(capsys):
    for command in ("run", "params", "build", "status", "seeds", "record", "verify", "profile"):
        try:
            cli.main([command, "--help"])
        except SystemExit:
            pass
        text = " ".join(capsys.readouterr().out.split())
        assert "--profile" in text and "quick: seconds per chapter" in text, command


def test_a_dry_run_gives_the_expected_time(capsys):
    assert cli.main(["run", "05", "--profile", "paper", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("05-exploration-tree-markov-chains [paper]:")
    assert lines[1].startswith("  expected: ")
    assert "minutes" in lines[1] or "unknown" in lines[1]


def test_the_build_ends_with_a_recap_of_every_chapter(capsys):
    chapters = [SimpleNamespace(slug="01-a"), SimpleNamespace(slug="02-b")]
    results = [SimpleNamespace(chapter=chapters[0], status="ran",
                               results={"claims": [{"kind": "theorem", "holds": True},
                                                   {"kind": "theorem", "holds": False, "declared": "why"}]}),
               SimpleNamespace(chapter=chapters[1], status="failed", results=None)]
    cli._recap(results, "default")
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == ["recap (default):", f"  {'01-a':<40} 1/1 claims hold; 1 fails as declared",
                        f"  {'02-b':<40} FAILED TO RUN"]
