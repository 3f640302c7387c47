"""The README is a front door: short, its first block the commands CI runs, and no dead link
in it or in the manuals under docs/ (a moved section is easy to leave pointing at nothing)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 160
MAX_VALIDATION_LINES = 300
CHANGELOG = ROOT / "CHANGELOG.md"
# manuals, docstrings, comments, help and log lines say what is; the story of how it got
# there (pieces of work, rounds of it) belongs in commits and CHANGELOG.md
WORK_HISTORY = re.compile(r"issue ?[0-9]+|this round|last round|next round", re.IGNORECASE)
SAYS_WHAT_IS = (
    "README.md",
    "docs",
    "planner",
    "designs",
    "sim",
    "real",
    "traces",
    "experiments",
    "notebooks",
    "ooblab",
    "benchmarks",
    "examples",
    "deploy",
    "tests",
)
TEXT_SUFFIXES = {".py", ".md", ".txt", ".yaml", ".yml", ".toml", ".sbatch", ".sh", ".json", ".cfg"}

FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
# [text](target) and [text](target "title"); images too; the text may hold one level of brackets
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def prose_lines(text: str, keep_code: bool = False) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed unless `keep_code`."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line if keep_code else INLINE_CODE.sub("", line))
    return out


def links(text: str) -> list[str]:
    """Every link target in a Markdown text, outside code."""
    found = []
    for line in prose_lines(text):
        found += LINK.findall(line)
        ref = REFERENCE.match(line)
        if ref:
            found.append(ref.group(1))
    return found


def slugs(text: str) -> set[str]:
    """GitHub's anchors for a file's headings: lower case, punctuation but - and _ dropped,
    spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(text, keep_code=True):
        match = HEADING.match(line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower(), flags=re.UNICODE).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def dead_links(path: Path, text: str) -> list[str]:
    """The relative links in `text` (a file at `path`) that name no file of the repository
    or no heading of the Markdown file they point into."""
    dead = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path.resolve()
        if file_part and (not dest.is_relative_to(ROOT) or not dest.exists()):
            dead.append(target)
            continue
        if anchor and dest.suffix == ".md" and anchor.lower() not in slugs(dest.read_text() if file_part else text):
            dead.append(target)
    return dead


def first_block(text: str) -> list[str]:
    """The lines of the first fenced block."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if FENCE.match(line))
    end = next(i for i in range(start + 1, len(lines)) if FENCE.match(lines[i]))
    return lines[start + 1 : end]


def steps(command: str) -> list[list[str]]:
    """A `a && b && c` line as its commands' words, pip's -q dropped (CI is quiet, a reader
    sees pip's progress; the commands are otherwise the same)."""
    out = []
    for part in command.split("&&"):
        words = shlex.split(part)
        if words[:1] and words[0].endswith("pip"):
            words = [w for w in words if w != "-q"]
        out.append(words)
    return out


def ci_command() -> str:
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert len(lines) == 1, ".ci/run should run one set-up-and-test line"
    return lines[0]


def test_readme_is_short() -> None:
    count = len(README.read_text().splitlines())
    assert count <= MAX_README_LINES, f"README.md has {count} lines; manuals belong in docs/"


def test_the_validation_manual_is_a_manual() -> None:
    count = len((ROOT / "docs" / "validation.md").read_text().splitlines())
    assert count <= MAX_VALIDATION_LINES, f"docs/validation.md has {count} lines; history belongs in CHANGELOG.md"


def history_mentions(paths: list[Path], root: Path = ROOT) -> list[str]:
    """`file:line: text` (relative to `root`) for each line naming a piece of work or a round of it."""
    found = []
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES)
        for file in files:
            if file.resolve() == Path(__file__).resolve():
                continue
            for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
                if WORK_HISTORY.search(line):
                    found.append(f"{file.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_manuals_and_code_name_no_piece_of_work() -> None:
    found = history_mentions([ROOT / name for name in SAYS_WHAT_IS if (ROOT / name).exists()])
    assert not found, "\n".join(found[:20])


def test_the_history_check_finds_a_mention(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1  # fixed in Issue 15\n")
    (tmp_path / "b.md").write_text("As measured this round.\nissues with the cache\n")
    (tmp_path / "c.bin").write_text("issue 3")
    assert [m.split(":")[0] for m in history_mentions([tmp_path], root=tmp_path)] == ["a.py", "b.md"]


def test_first_block_is_the_two_commands_ci_runs() -> None:
    commands = [line for line in first_block(README.read_text()) if line.strip() and not line.startswith("#")]
    assert len(commands) == 2, commands
    main_job, tests = (steps(c) for c in commands)
    ci = steps(ci_command())
    assert tests == ci, "the README's test command and .ci/run differ"
    # both start with the same set-up (venv, the CPU torch pin) as CI
    assert main_job[:2] == ci[:2]
    assert main_job[-1][-1] == "simulate"


def test_readme_links_every_manual() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README.read_text())}
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


@pytest.mark.parametrize("path", [README, CHANGELOG, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(path: Path) -> None:
    assert not dead_links(path, path.read_text())


def test_the_link_check_finds_dead_links() -> None:
    text = "\n".join(
        [
            "# A heading, with `code`",
            "[ok](README.md) [ok](docs/planner.md) [ok](#a-heading-with-code) [ok](https://x.org/y)",
            "[gone](docs/nothing.md) ![gone](img/none.png) [gone](#no-such-heading)",
            "[outside](../README.md)",
            "`[in code](nowhere.md)`",
            "```",
            "[in a block](nowhere.md)",
            "```",
            "[ref]: docs/gone-too.md",
        ]
    )
    dead = dead_links(ROOT / "example.md", text)
    assert dead == ["docs/nothing.md", "img/none.png", "#no-such-heading", "../README.md", "docs/gone-too.md"]
