"""Loaders on hand-written files: formats, headers, line endings, errors with file:line, repair."""

from __future__ import annotations

import re

import pytest

import traces
from traces import TraceError


def write(tmp_path, name, text, newline="\n"):
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode())
    return path


def triples(trace):
    return [(e.time_s, e.kind, e.node) for e in trace.events]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("header", ["", "time_ms,event,node\n"])
def test_event_csv_with_or_without_header_and_crlf(tmp_path, newline, header):
    path = write(tmp_path, "t.csv", header + "0,add,a\n0,add,b\n1500,remove,a\n", newline)
    trace, report = traces.load_with_report(path)
    assert report.fmt == "events" and report.detected
    assert triples(trace) == [(0.0, "add", "a"), (0.0, "add", "b"), (1.5, "remove", "a")]
    assert trace.name == "t"


def test_event_csv_header_can_switch_to_seconds(tmp_path):
    path = write(tmp_path, "t.csv", "time_s,event,node\n0,add,a\n2.5,remove,a\n")
    assert triples(traces.load(path)) == [(0.0, "add", "a"), (2.5, "remove", "a")]


ERROR_CASES = [
    ("remove_absent", "0,add,a\n10,remove,b\n", 2, "removes 'b', which is not present (it was never added)"),
    ("remove_twice", "0,add,a\n10,remove,a\n20,remove,a\n", 3, "it was removed at line 2"),
    ("added_twice", "0,add,a\n5,add,b\n10,add,a\n", 3, "adds 'a', which is already present (added at line 1)"),
    ("negative", "0,add,a\n-5,remove,a\n", 2, "time '-5' is negative"),
    ("non_numeric", "0,add,a\nsoon,remove,a\n", 2, "time 'soon' is not a number"),
    ("not_finite", "0,add,a\nnan,remove,a\n", 2, "not a finite number"),
    ("unknown_word", "0,add,a\n5,preempt,a\n", 2, "unknown event 'preempt'"),
    ("field_count", "0,add,a\n5,remove\n", 2, "expected 3 comma-separated fields"),
    ("empty_node", "0,add,\n", 1, "empty node name"),
    ("out_of_order", "0,add,a\n10000,add,b\n5000,remove,a\n", 3, "time 5 s is earlier than 10 s at line 2"),
    ("duplicate", "0,add,a\n0,add,a\n", 2, "exact duplicate of line 1"),
]


@pytest.mark.parametrize("case, text, line, message", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_event_csv_errors_name_file_and_line(tmp_path, case, text, line, message):
    path = write(tmp_path, f"{case}.csv", text)
    with pytest.raises(TraceError) as info:
        traces.load(path, "events")
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert message in str(info.value)
    assert info.value.line == line and info.value.source == str(path)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "  \r\n"])
def test_empty_files_are_errors(tmp_path, text):
    path = write(tmp_path, "empty.csv", text)
    with pytest.raises(TraceError, match=re.escape(f"{path}: empty")):
        traces.load(path)


def test_header_only_is_an_error(tmp_path):
    path = write(tmp_path, "h.csv", "time_ms,event,node\n")
    with pytest.raises(TraceError, match="no data rows after the header at line 1"):
        traces.load(path, "events")


def test_missing_file_binary_file_and_unknown_format(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        traces.load(tmp_path / "nope.csv")
    binary = tmp_path / "x.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(TraceError, match="not UTF-8"):
        traces.load(binary)
    good = write(tmp_path, "g.csv", "0,add,a\n")
    with pytest.raises(TraceError, match=r"unknown trace format 'xml' \(known: events, counts"):
        traces.load(good, "xml")
    odd = write(tmp_path, "odd.txt", "hello world\n")
    with pytest.raises(TraceError, match=r"odd.txt:1: cannot tell the trace format"):
        traces.load(odd)


def test_repair_sorts_and_drops_exact_duplicates_and_reports(tmp_path):
    text = "0,add,a\n0,add,b\n20000,remove,a\n0,add,b\n10000,add,c\n10000,add,c\n"
    path = write(tmp_path, "messy.csv", text)
    with pytest.raises(TraceError, match=r"messy.csv:4: .*earlier"):
        traces.load(path)
    trace, report = traces.load_with_report(path, repair=True)
    assert triples(trace) == [(0.0, "add", "a"), (0.0, "add", "b"), (10.0, "add", "c"), (20.0, "remove", "a")]
    assert report.reordered_lines == (4, 5, 6)
    assert report.dropped_lines == (4, 6)
    assert report.changed
    text_out = "\n".join(report.describe())
    assert "3 row(s) were out of order" in text_out and "dropped 2 exact duplicate" in text_out


def test_repair_does_not_hide_real_membership_errors(tmp_path):
    path = write(tmp_path, "bad.csv", "5,remove,a\n0,add,b\n")
    with pytest.raises(TraceError, match=r"bad.csv:1: removes 'a'"):
        traces.load(path, repair=True)


def test_a_node_may_come_back_after_removal(tmp_path):
    path = write(tmp_path, "back.csv", "0,add,a\n5,remove,a\n5,add,a\n9,remove,a\n")
    assert [e.kind for e in traces.load(path).events] == ["add", "remove", "add", "remove"]


def test_seconds_and_hours_counts_and_inference(tmp_path):
    secs = write(tmp_path, "s.csv", "0,2\n60,3\n60,1\n120,1\n")
    hours = write(tmp_path, "h.csv", "0.000,2\n0.5,3\n0.5,1\n")
    trace, report = traces.load_with_report(secs)
    assert report.fmt == "counts" and any("so seconds" in n for n in report.notes)
    assert [(e.time_s, e.kind) for e in trace.events] == [
        (0.0, "add"),
        (0.0, "add"),
        (60.0, "add"),
        (60.0, "remove"),
        (60.0, "remove"),
    ]
    trace_h, report_h = traces.load_with_report(hours)
    assert any("so hours" in n for n in report_h.notes)
    assert trace_h.live_counts().time_s.tolist() == [0.0, 1800.0]
    assert traces.load(hours, "counts-s").end_s == 0.5  # naming the unit overrides inference


def test_count_header_names_the_unit(tmp_path):
    path = write(tmp_path, "ms.csv", "delta_ms,count\n0,1\n1500,2\n")
    trace, report = traces.load_with_report(path)
    assert trace.end_s == 1.5
    assert any("from the header 'delta_ms'" in n for n in report.notes)


def test_count_errors(tmp_path):
    cases = [
        ("0,2\n10,-1\n", 2, "node count '-1' is not a whole number"),
        ("0,2\n10,1.5\n", 2, "node count '1.5' is not a whole number"),
        ("0,2\nlater,1\n", 2, "x 'later' is not a number"),
        ("0,2\n10,1\n5,3\n", 3, "earlier than 10 s at line 2"),
        ("0,2\n10,1\n10,1\n", 3, "exact duplicate of line 2"),
        ("0,2\n-1,1\n", 2, "x '-1' is negative"),
        ("0,2,3\n", 1, "expected 2 comma-separated fields"),
    ]
    for i, (text, line, message) in enumerate(cases):
        path = write(tmp_path, f"c{i}.csv", text)
        with pytest.raises(TraceError) as info:
            traces.load(path, "counts-s")
        assert str(info.value).startswith(f"{path}:{line}: "), text
        assert message in str(info.value), text


def test_count_log_repeats_and_going_backwards_are_repaired(tmp_path):
    text = "0,4\n100,4\n100,4\n300,2\n200,3\n300,2\n400,4\n"
    path = write(tmp_path, "log.csv", text)
    trace, report = traces.load_with_report(path, "counts-s", repair=True)
    assert report.reordered_lines == (5,)
    assert report.dropped_lines == (3, 6)
    assert trace.live_counts().values.tolist() == [[0, 4], [200, 3], [300, 2], [400, 4]]


def test_all_zero_counts_are_an_error(tmp_path):
    path = write(tmp_path, "zero.csv", "0,0\n10,0\n")
    with pytest.raises(TraceError, match="node count of 0"):
        traces.load(path)


def test_gcp_and_iso_count_logs(tmp_path):
    gcp = write(tmp_path, "g.txt", "2021-12-11, 23:59:30, 3\n2021-12-12, 00:00:30, 2\n")
    trace, report = traces.load_with_report(gcp)
    assert report.fmt == "gcp-counts"
    assert trace.live_counts().values.tolist() == [[0, 3], [60, 2]]
    bad = write(tmp_path, "b.txt", "2021-12-11, 23:59:30, 3\n2021-13-11, 00:00:30, 2\n")
    with pytest.raises(TraceError, match=r"b.txt:2: .*not a YYYY-MM-DD"):
        traces.load(bad, "gcp-counts")
    for header in ("", "timestamp,count\n"):
        iso = write(tmp_path, "i.csv", header + "2021-07-26T18:42:00Z,5\n2021-07-26T19:42:00.5Z,4\n")
        trace, report = traces.load_with_report(iso)
        assert report.fmt == "iso-counts"
        assert trace.live_counts().values.tolist() == [[0, 5], [3600.5, 4]]
    mixed = write(tmp_path, "m.csv", "2021-07-26T18:42:00Z,5\n2021-07-26T19:42:00,4\n")
    with pytest.raises(TraceError, match=r"m.csv:2: mixes timestamps"):
        traces.load(mixed)
    backwards = write(tmp_path, "back.csv", "2021-07-26T18:42:00Z,5\n2021-07-26T18:41:00Z,4\n")
    with pytest.raises(TraceError, match=r"back.csv:2: .*earlier"):
        traces.load(backwards)
    repaired = traces.load(backwards, repair=True)
    assert repaired.live_counts().values.tolist() == [[0, 4], [60, 5]]


def test_window_json_lines(tmp_path):
    text = (
        '[0, "add", {"nodes": ["n0", "n1", "n2"], "duration": 60000}]\n'
        '[60000, "no-op", {"nodes": []}]\n'
        '[120000, "remove", {"nodes": ["n1"]}]\n'
        '[180000, "migration", {"nodes": []}]\n'
    )
    path = write(tmp_path, "w.txt", text)
    trace, report = traces.load_with_report(path)
    assert report.fmt == "windows"
    assert triples(trace) == [(0.0, "add", "n0"), (0.0, "add", "n1"), (0.0, "add", "n2"), (120.0, "remove", "n1")]
    cases = [
        ('[0, "add", {"nodes": ["a"]}]\n[60000, "evict", {"nodes": ["a"]}]\n', 2, "unknown action 'evict'"),
        ('[0, "add", {"nodes": ["a"]}]\n{"t": 1}\n', 2, "expected [t_ms"),
        ('[0, "add", {"nodes": ["a"]}]\n[60000, "remove", {"nodes": ["a"]\n', 2, "not valid JSON"),
        ('[0, "add", {"nodes": ["a"]}]\n[60000, "remove", {"nodes": ["b"]}]\n', 2, "removes 'b'"),
        ('[0, "add", {"nodes": ["a"]}]\n[60000, "no-op", {"nodes": ["a"]}]\n', 2, "must list no nodes"),
        ('[0, "add", {"nodes": "a"}]\n', 1, "must be a list of node names"),
        ('["0", "add", {"nodes": ["a"]}]\n', 1, "time '0' is not a number"),
    ]
    for i, (text, line, message) in enumerate(cases):
        bad = write(tmp_path, f"w{i}.txt", text)
        with pytest.raises(TraceError) as info:
            traces.load(bad, "windows")
        assert str(info.value).startswith(f"{bad}:{line}: "), text
        assert message in str(info.value), text


def test_format_aliases(tmp_path):
    path = write(tmp_path, "p.csv", "0,1\n60000,2\n")
    assert traces.load(path, "delta_ms").end_s == 60.0
    assert traces.load(path, "Counts-MS").end_s == 60.0
