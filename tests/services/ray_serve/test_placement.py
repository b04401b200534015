"""The placement rule (``services.ray_serve.placement.choose``) and a replica's slot table, without Ray:
the rule is a function of what replicas report and where this router placed its edges."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

import pytest

pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from services.ray_serve.placement import SessionBalanceRouter, choose, owners  # noqa: E402
from services.ray_serve.slots import SlotTable  # noqa: E402

Reports = dict[str, dict[str, int]]
ReplicaId = namedtuple("ReplicaId", "unique_id")


def _route(edges: list[str], reported: Reports, placed: dict[str, str], may_move: bool = True) -> None:
    """Each edge sends one request, in order; the chosen replica reports it at once (one version further),
    its old one not."""
    for edge in edges:
        chosen = choose(edge, reported, placed, may_move)
        placed[edge] = chosen
        version = max((held.pop(edge, -1) for held in reported.values()), default=-1)
        reported[chosen][edge] = version + 1


def _loads(reported: Reports) -> list[int]:
    return sorted(len(held) for held in reported.values())


def _held(*edges: str) -> dict[str, int]:
    return dict.fromkeys(edges, 3)


@pytest.mark.parametrize("replicas", [2, 3, 4])
@pytest.mark.parametrize("edges", [1, 7, 8, 9])
def test_new_edges_spread_within_one_of_even(replicas: int, edges: int) -> None:
    reported: Reports = {f"r{i}": {} for i in range(replicas)}
    _route([f"cam-{i}" for i in range(edges)], reported, {})
    loads = _loads(reported)
    assert loads[-1] - loads[0] <= 1 and sum(loads) == edges


def test_a_joining_replica_takes_sessions_until_within_one_and_then_nothing_moves() -> None:
    reported = {"a": _held(*(f"cam-{i}" for i in range(0, 9, 2))),
                "b": _held(*(f"cam-{i}" for i in range(1, 9, 2)))}
    placed: dict[str, str] = {}
    edges = [f"cam-{i}" for i in range(9)]
    _route(edges, reported, placed)  # two replicas, 5/4: nothing moves
    assert _loads(reported) == [4, 5] and placed == owners(reported, {})
    reported["c"] = {}
    _route(edges, reported, placed, may_move=False)  # no move allowed now: everyone stays
    assert _loads(reported) == [0, 4, 5]
    _route(edges, reported, placed)  # one round of key frames after the join
    assert _loads(reported) == [3, 3, 3]
    before = dict(placed)
    _route(edges * 3, reported, placed)
    assert placed == before  # balanced: every edge stays where it is


def test_a_replica_that_leaves_hands_its_edges_to_the_least_loaded() -> None:
    reported = {"a": _held("cam-0", "cam-1", "cam-2"), "b": _held("cam-3", "cam-4"), "c": _held("cam-5")}
    placed = owners(reported, {})
    del reported["a"]
    _route(["cam-0", "cam-1", "cam-2"], reported, placed)
    assert _loads(reported) == [3, 3]


def test_a_copy_left_behind_by_a_move_does_not_count() -> None:
    # cam-0 moved from a to b (b holds a newer version); a still reports it until its release lands
    reported = {"a": {"cam-0": 4, "cam-1": 2}, "b": {"cam-0": 5}}
    assert owners(reported, {}) == {"cam-0": "b", "cam-1": "a"}
    # this router's own placement is newer than any report, unless its replica is gone
    assert owners(reported, {"cam-1": "b"}) == {"cam-0": "b", "cam-1": "b"}
    assert owners(reported, {"cam-1": "gone"}) == {"cam-0": "b", "cam-1": "a"}
    assert choose("cam-0", reported, {}) == "b"


def test_edges_arriving_at_once_spread_before_every_replica_has_reported() -> None:
    # a router's view: replica "a" has reported (empty), "b" has just started and not yet
    replicas = {
        ReplicaId("a"): SimpleNamespace(routing_stats={"edges": {}}),
        ReplicaId("b"): SimpleNamespace(routing_stats={}),
    }
    reported = SessionBalanceRouter._reported(SimpleNamespace(curr_replicas=replicas))  # type: ignore[arg-type]
    assert reported == {"a": {}, "b": {}}
    placed: dict[str, str] = {}
    for edge in ("cam-0", "cam-1", "cam-2", "cam-3"):  # no report arrives in between
        placed[edge] = choose(edge, reported, placed)
    assert sorted(placed.values()) == ["a", "a", "b", "b"]


def test_no_replica_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="no teaching replica"):
        choose("cam-0", {}, {})


def test_the_slot_table_keeps_the_most_recently_used_and_releases_on_demand() -> None:
    made: list[str] = []
    slots = SlotTable(2, lambda edge: made.append(edge) or edge.upper())
    assert (slots.take("a"), slots.take("b"), slots.take("a")) == ("A", "B", "A")
    slots.take("c")  # past the capacity: b, the least recently used, goes
    assert slots.edges() == ["a", "c"] and made == ["a", "b", "c"]
    assert slots.release("a") and not slots.release("a") and slots.edges() == ["c"]
    with pytest.raises(ValueError, match="at least 1"):
        SlotTable(0, str)
