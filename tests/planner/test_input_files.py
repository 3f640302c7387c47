"""Reading a user's file (planner/input_files.py): bounded, UTF-8 with or without a byte
order mark, and every refusal naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.input_files import InputFileError, read_json, read_text, shown


def test_a_file_past_its_cap_is_refused_without_reading_it_all(tmp_path: Path):
    path = tmp_path / "big.csv"
    path.write_bytes(b"x" * 1025)
    assert read_text(path, what="a trace file", cap_bytes=1025) == "x" * 1025
    with pytest.raises(InputFileError, match=r"big.csv: larger than the 0.000976\d* MiB that a trace file may be"):
        read_text(path, what="a trace file", cap_bytes=1024)
    if Path("/dev/zero").exists():  # endless: only the cap ends the read
        with pytest.raises(InputFileError, match="larger than"):
            read_text("/dev/zero", what="a trace file", cap_bytes=4096)


def test_each_refusal_names_the_file_and_what_is_wrong(tmp_path: Path):
    (tmp_path / "latin.csv").write_bytes(b"0,add,a\n0,add,\xe9\n")
    (tmp_path / "bad.json").write_text('{"a": 1,\n "b": }')
    cases = [
        (lambda: read_text(tmp_path / "nope.csv", what="a trace file", cap_bytes=10), "nope.csv: no such file"),
        (lambda: read_text(tmp_path, what="a trace file", cap_bytes=10), "is a directory, not a trace file"),
        (lambda: read_text(tmp_path / "latin.csv", what="a trace file", cap_bytes=100), "latin.csv:2: not UTF-8"),
        (lambda: read_json(tmp_path / "bad.json", what="a profile"), "bad.json:2: not JSON"),
        (lambda: read_text("", what="a cost profile", cap_bytes=10), "a cost profile: an empty path names no file"),
    ]
    for read, words in cases:
        with pytest.raises(InputFileError) as caught:
            read()
        assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_byte_order_mark_is_dropped_and_deep_nesting_refused(tmp_path: Path):
    (tmp_path / "bom.json").write_bytes(b'\xef\xbb\xbf{"a": [1, 2]}')
    assert read_json(tmp_path / "bom.json", what="a profile") == {"a": [1, 2]}
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputFileError, match="nested too deeply"):
        read_json(tmp_path / "deep.json", what="a profile")


@settings(max_examples=50, deadline=None)
@given(st.one_of(st.text(max_size=500), st.integers(), st.floats(allow_nan=True), st.binary(max_size=300)))
def test_shown_values_stay_one_short_line(value):
    text = shown(value)
    assert len(text) <= 60 + len(" (1,000,000 characters)") and (len(repr(value)) > 60 or text == repr(value))
