"""The profile check: a profile the calibration jobs contradict is measured again, the
measurement nearest the calibration is kept in the profile directory, and the choice is
recorded once (`experiments.validation.reprofile`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.validation.reprofile import (
    RECORD,
    REMEASURED,
    REPROFILES,
    Measurement,
    checked_profile,
    choose,
    rescaled,
)


def profile(directory: Path, predicted_s: float, label: str) -> Path:
    """A stand-in profile directory: what its plan predicts and which measurement it is."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "predicted").write_text(str(predicted_s))
    (directory / "label").write_text(label)
    return directory


def predicted_s(directory: Path) -> float:
    return float((directory / "predicted").read_text())


class Measurer:
    """`measure(i)`: the i-th new measurement, predicting the next of `predictions`."""

    def __init__(self, root: Path, predictions: list[float]):
        self.root, self.predictions, self.calls = root, predictions, 0

    def __call__(self, i: int) -> Path:
        self.calls += 1
        return profile(self.root / REMEASURED / str(i) / "profile", self.predictions[i - 1], f"m{i}")


def test_a_profile_the_calibration_confirms_is_kept_without_measuring_again(tmp_path):
    first = profile(tmp_path / "profile", 1.0, "m0")
    measure = Measurer(tmp_path, [0.5])
    record = checked_profile(first, {"oobleck": 1.05, "varuna": 0.93}, predicted_s, measure, progress=lambda _: None)
    assert measure.calls == 0 and record["chosen"] == 0 and len(record["measurements"]) == 1
    assert record["paces"] == {"oobleck": 1.05, "varuna": 0.93}
    assert (first / "label").read_text() == "m0"


def test_an_off_profile_is_measured_again_and_the_confirmed_one_takes_its_place(tmp_path):
    first = profile(tmp_path / "profile", 1.0, "m0")
    measure = Measurer(tmp_path, [0.7, 0.5])
    lines: list[str] = []
    record = checked_profile(first, {"oobleck": 0.67, "varuna": 0.70}, predicted_s, measure, lines.append)
    # the jobs' iterations over the second profile's prediction: 0.67 x 1.0 / 0.7, 0.70 x 1.0 / 0.7
    assert measure.calls == 1 and record["chosen"] == 1
    assert record["paces"] == pytest.approx({"oobleck": 0.67 / 0.7, "varuna": 1.0})
    assert (first / "label").read_text() == "m1"  # both sides plan from the kept one, at the same path
    assert (tmp_path / REMEASURED / "0" / "profile" / "label").read_text() == "m0"  # the first kept aside
    assert json.loads((tmp_path / RECORD).read_text()) == record
    assert any("measuring the profile again (1 of" in line for line in lines)
    assert any("measurement 2 of 2 kept" in line for line in lines)

    def refuse(i: int) -> Path:
        raise AssertionError("a recorded check measures nothing")

    assert checked_profile(first, {"oobleck": 0.5}, predicted_s, refuse, lines.append) == record


def test_measuring_stops_after_the_limit_and_keeps_the_nearest(tmp_path):
    first = profile(tmp_path / "profile", 1.0, "m0")
    # paces 0.5, then 0.5 / 0.65 = 0.77, then 0.5 / 0.7 = 0.71: none within, the second nearest
    measure = Measurer(tmp_path, [0.65, 0.7, 0.9])
    record = checked_profile(first, {"oobleck": 0.5}, predicted_s, measure, progress=lambda _: None)
    assert measure.calls == REPROFILES == len(record["measurements"]) - 1
    assert record["chosen"] == 1 and (first / "label").read_text() == "m1"
    assert record["paces"]["oobleck"] == pytest.approx(0.5 / 0.65)


@pytest.mark.parametrize("paces", [{"oobleck": 0.95, "varuna": 1.16}, {"oobleck": 0.8, "varuna": 1.2}])
def test_jobs_that_disagree_with_each_other_do_not_call_for_a_new_profile(tmp_path, paces):
    # their shared pace (geometric mean) is within: the plans' predictions differ, not the layers
    first = profile(tmp_path / "profile", 1.0, "m0")
    measure = Measurer(tmp_path, [0.5])
    assert checked_profile(first, paces, predicted_s, measure, progress=lambda _: None)["chosen"] == 0
    assert measure.calls == 0


@given(st.floats(0.2, 5.0), st.floats(0.2, 5.0))
def test_a_profile_is_off_by_the_pace_the_jobs_share(a, b):
    shared = (a * b) ** 0.5
    assert Measurement(Path("p"), {"oobleck": a, "varuna": b}).off == pytest.approx(abs(shared - 1.0))
    assert Measurement(Path("p"), {"oobleck": a}).off == pytest.approx(abs(a - 1.0))


def test_without_paces_nothing_is_checked(tmp_path):
    first = profile(tmp_path / "profile", 1.0, "m0")
    measure = Measurer(tmp_path, [0.5])
    assert checked_profile(first, {}, predicted_s, measure, progress=lambda _: None)["chosen"] == 0
    assert measure.calls == 0


paces = st.dictionaries(st.sampled_from(["oobleck", "varuna"]), st.floats(0.2, 5.0), max_size=2)


@given(st.lists(paces, min_size=1, max_size=5))
def test_the_chosen_measurement_is_the_nearest_to_the_calibration(found):
    measurements = [Measurement(Path(f"m{i}"), p) for i, p in enumerate(found)]
    best = choose(measurements)
    assert all(measurements[best].off <= m.off for m in measurements)
    assert all(m.off > measurements[best].off for m in measurements[:best])  # the earliest on a tie


@given(st.floats(0.2, 5.0), st.floats(0.01, 10.0), st.floats(0.01, 10.0))
def test_rescaled_paces_keep_the_measured_iteration(pace, first_s, predicted):
    # pace x prediction is the jobs' measured iteration: the same under either profile
    new = rescaled({"oobleck": pace}, first_s, predicted)["oobleck"]
    assert new * predicted == pytest.approx(pace * first_s)
