"""Where a command will write, checked before its work and without writing there
(planner/output_dirs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.output_dirs import OutputError, check_output_dir, check_output_file


def listing(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*"))


def test_a_directory_to_be_made_is_checked_without_making_it(tmp_path: Path):
    check_output_dir(tmp_path / "a" / "b" / "run")
    check_output_file(tmp_path / "trace.csv")
    assert listing(tmp_path) == []  # the probe file is gone, nothing was made


@pytest.mark.parametrize(
    "make,target,words",
    [
        (lambda t: (t / "f").write_text(""), "f", "exists and is not a directory"),
        (lambda t: (t / "f").write_text(""), "f/run", "is a file, not a directory"),
        (lambda t: None, "x" * 300 + "/run", "is 300 bytes, past the file system's"),
    ],
    ids=["a-file", "through-a-file", "long-name"],
)
def test_a_directory_that_cannot_be_written_is_named(tmp_path: Path, make, target, words):
    make(tmp_path)
    before = listing(tmp_path)
    with pytest.raises(OutputError) as caught:
        check_output_dir(tmp_path / target, "--out")
    assert str(caught.value).startswith("--out ") and words in str(caught.value)
    assert listing(tmp_path) == before


def test_a_file_needs_its_directory_and_must_not_be_one(tmp_path: Path):
    with pytest.raises(OutputError, match="does not exist"):
        check_output_file(tmp_path / "nope" / "x.csv")
    with pytest.raises(OutputError, match="is a directory; name a file"):
        check_output_file(tmp_path)
