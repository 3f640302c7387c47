"""The test command's scheduling (`-n 2 --dist loadgroup`, conftest's scheduler): the tests
sharing the quick-results tree form one unit of work, a costly module another, and every
other test is its own."""

from __future__ import annotations

from .conftest import ONE_WORKER_MODULES, QUICK_RESULTS, REPO_ROOT, worker_group


def test_the_quick_results_tests_are_one_unit_and_the_rest_spread():
    quick = {worker_group(f"{path}::test_x[a]") for path in QUICK_RESULTS}
    assert quick == {"quick-results"}
    assert {worker_group(f"{path}::test_y") for path in ONE_WORKER_MODULES} == ONE_WORKER_MODULES
    alone = ["tests/planner/test_batching.py::test_a", "tests/planner/test_batching.py::test_b"]
    assert [worker_group(n) for n in alone] == alone  # spread test by test


def test_every_grouped_module_exists():
    # a renamed module would silently fall back to test-by-test scheduling
    for path in QUICK_RESULTS | ONE_WORKER_MODULES:
        assert (REPO_ROOT / path).is_file(), path


def _defined(nodeid: str) -> bool:
    path, name = nodeid.split("::", 1)
    return f"def {name.split('[', 1)[0]}(" in (REPO_ROOT / path).read_text()


def test_every_test_left_out_of_ci_exists_and_names_its_cover():
    from .conftest import SLOW

    for nodeid, covers in SLOW.items():
        assert _defined(nodeid), nodeid
        assert covers and all(_defined(cover) and cover not in SLOW for cover in covers), (nodeid, covers)
