"""The searchers, pure: grid and random values, ASHA's rungs and promotions."""

from __future__ import annotations

from typing import Any

import pytest
from trainhub.experiments import searchers as s
from trainhub.experiments.searchspec import SearchSpec, SearchSpecError

PARAMS = {
    "lr": {"type": "log_uniform", "low": 0.01, "high": 0.3},
    "l2": {"type": "uniform", "low": 0.0, "high": 0.2},
    "dim": {"type": "int", "low": 8, "high": 32},
    "opt": {"type": "categorical", "values": ["adagrad", "sgd"]},
}


def search(**fields: Any) -> SearchSpec:
    return SearchSpec.from_dict({"metric": "test_rmse", "params": PARAMS, **fields})


def test_grid_is_the_product_and_sizes_max_trials() -> None:
    spec = search(method="grid")
    points = s.grid(spec)
    assert len(points) == spec.max_trials == 3 * 3 * 3 * 2
    assert points[0] == {"lr": pytest.approx(0.01), "l2": 0.0, "dim": 8, "opt": "adagrad"}
    assert {p["dim"] for p in points} == {8, 20, 32}
    assert len({tuple(p.values()) for p in points}) == len(points)


def test_random_values_stay_in_range_and_repeat_for_the_same_seed() -> None:
    spec = search(method="random", max_trials=50, seed=3)
    values = [s.trial_params(spec, n) for n in range(1, 51)]
    assert values == [s.trial_params(spec, n) for n in range(1, 51)]
    assert all(0.01 <= v["lr"] <= 0.3 and 0 <= v["l2"] <= 0.2 for v in values)
    assert all(isinstance(v["dim"], int) and 8 <= v["dim"] <= 32 for v in values)
    assert values != [s.trial_params(search(method="random", seed=4), n) for n in range(1, 51)]


def test_a_finite_space_is_sampled_without_repeats() -> None:
    spec = SearchSpec.from_dict(
        {
            "method": "asha",
            "metric": "m",
            "max_budget": 9,
            "max_trials": 9,
            "params": {
                "a": {"type": "categorical", "values": [1, 2, 3]},
                "b": {"type": "int", "low": 0, "high": 2},
            },
        }
    )
    picked = {tuple(s.trial_params(spec, n).values()) for n in range(1, 10)}
    assert len(picked) == 9


def test_a_huge_finite_space_is_sampled_by_index_without_building_it() -> None:
    # 10**18 points: a search that built (or permuted) the space would never get here.
    wide = {"type": "int", "low": 1, "high": 1000}
    spec = SearchSpec.from_dict(
        {
            "method": "random",
            "metric": "m",
            "max_trials": 200,
            "params": {name: wide for name in "abcdef"},
        }
    )
    picked = [tuple(s.trial_params(spec, n).values()) for n in range(1, 201)]
    assert len(set(picked)) == 200
    assert all(1 <= v <= 1000 for point in picked for v in point)


def test_a_grid_beyond_the_trial_limit_says_so() -> None:
    wide = {"type": "int", "low": 1, "high": 100}
    with pytest.raises(SearchSpecError) as caught:
        SearchSpec.from_dict(
            {
                "method": "grid",
                "metric": "m",
                "grid_points": 20,
                "params": {"a": wide, "b": wide, "c": wide},
            }
        )
    assert "more than the 1000 trials" in caught.value.errors["search.params"]


def test_asha_rungs_grow_by_the_reduction_factor_up_to_the_full_budget() -> None:
    assert search(method="asha", max_budget=9).rungs() == (1, 3, 9)
    assert search(method="asha", max_budget=10, min_budget=2).rungs() == (2, 6, 10)
    assert search(method="random", max_budget=9).rungs() == (9,)


def view(number: int, status: str, rung: int, **results: float) -> s.TrialView:
    return s.TrialView(number, status, rung, {int(k[1:]): v for k, v in results.items()})


def test_asha_promotes_the_top_third_of_a_rung_before_starting_new_trials() -> None:
    spec = search(method="asha", max_budget=9, max_trials=9, max_concurrent=1)
    trials = [view(1, s.WAITING, 0, r0=0.9), view(2, s.WAITING, 0, r0=0.8)]
    assert s.next_actions(spec, trials) == [s.Start(3, s.trial_params(spec, 3))]
    trials.append(view(3, s.WAITING, 0, r0=0.95))
    assert s.next_actions(spec, trials) == [s.Promote(2, 1)]  # the best of three
    trials[1] = view(2, s.WAITING, 1, r0=0.8, r1=0.7)  # promoted once: not again at rung 0
    assert s.next_actions(spec, trials) == [s.Start(4, s.trial_params(spec, 4))]


def test_a_higher_rung_is_promoted_from_first_and_goal_maximize_ranks_high_first() -> None:
    spec = search(method="asha", max_budget=9, max_concurrent=1, goal="maximize")
    trials = [view(n, s.WAITING, 0, r0=0.1 * n) for n in range(1, 7)]  # 6 at rung 0
    trials += [view(n, s.WAITING, 1, r0=0.1 * n, r1=0.2 * n) for n in range(7, 10)]
    assert s.next_actions(spec, trials) == [s.Promote(9, 2)]


def test_asha_fills_every_free_slot_and_never_more() -> None:
    spec = search(method="asha", max_budget=9, max_trials=5, max_concurrent=3)
    actions = s.next_actions(spec, [view(1, s.RUNNING, 0)])
    assert [type(a) for a in actions] == [s.Start, s.Start]
    full = [view(n, s.RUNNING, 0) for n in range(1, 4)]
    assert s.next_actions(spec, full) == []


def test_finished_and_best() -> None:
    spec = search(method="asha", max_budget=3, max_trials=3, max_concurrent=1)
    trials = [
        view(1, s.DONE, 1, r0=0.9, r1=0.8),
        view(2, s.WAITING, 0, r0=0.95),
        view(3, s.WAITING, 0, r0=0.97),
    ]
    assert s.finished(spec, trials)
    assert s.best(spec, trials) == (1, 1, 0.8)
    assert not s.finished(spec, [*trials[:2], view(3, s.RUNNING, 0)])


def _param(name: str, **body: Any) -> dict[str, Any]:
    return {"method": "random", "params": {name: body}}


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"method": "bayes"}, "search.method"),
        ({"method": "asha"}, "search.max_budget"),
        ({"method": "asha", "max_budget": 3, "min_budget": 5}, "search.min_budget"),
        ({"method": "random", "max_concurrent": 0}, "search.max_concurrent"),
        ({"method": "random", "goal": "lowest"}, "search.goal"),
        (_param("lr", type="uniform", low=1, high=0), "search.params.lr.high"),
        (_param("lr", type="log_uniform", low=0, high=1), "search.params.lr.low"),
        (_param("d", type="int", low=1.5, high=4), "search.params.d.low"),
        (_param("d", type="int", low=-(10**400), high=4), "search.params.d.low"),
        (_param("c", type="categorical", values=[]), "search.params.c.values"),
        (_param("c", type="categorical", values=[1.0, float("nan")]), "search.params.c.values"),
        (_param("c", type="categorical", values=[[1]]), "search.params.c.values"),
        (_param("bad-name", type="uniform", low=0, high=1), "search.params.bad-name"),
        ({"method": "grid", "max_trials": 4}, "search.max_trials"),
        ({"method": "random", "colour": "red"}, "search.colour"),
    ],
)
def test_each_bad_field_is_named(block: dict[str, Any], field: str) -> None:
    with pytest.raises(SearchSpecError) as caught:
        SearchSpec.from_dict({"metric": "m", "params": PARAMS, **block})
    assert field in caught.value.errors, caught.value.errors


def test_the_spec_round_trips() -> None:
    spec = search(method="asha", max_budget=27, reduction_factor=3)
    assert SearchSpec.from_dict(spec.to_dict()) == spec
