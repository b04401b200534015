"""Which teaching replica runs an edge's session: the least-loaded one, moved as replicas join and
leave.

:class:`SessionBalanceRouter` is the teaching deployment's Ray Serve request router (every
handle to the deployment, so every ingress replica, routes with its own instance). For a request
of an edge (its ``multiplexed_model_id``) it applies :func:`choose` over

* what every replica reports holding (the edge ids of ``TeachingReplica.record_routing_stats``,
  which Serve polls and broadcasts to the routers), and
* where this router placed its own edges (newer than any report, and the truth for its edges
  while a moved edge's old replica still reports it).

A move costs the edge one slower answer: the new replica rebuilds the session from its
checkpoint. The old replica's copy is released by the ingress (``release`` requests, which this
router sends to the replica they name), as is a session that ended. The rule's limits are in
docs/design/ray_serve.md.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

# the method of the teaching deployment that drops one edge's slot on one named replica
RELEASE = "release"
# seconds a router waits after a move before it makes another, drawn anew each time: the replicas'
# reports show a move about a second later, and routers that decided on the same stale reports at
# the same moment would move edges back and forth
MOVE_PAUSE = (1.0, 2.0)


def owners(reported: Mapping[str, Mapping[str, int]], placed: Mapping[str, str]) -> dict[str, str]:
    """Edge id -> the replica counted as holding it: the replica it was ``placed`` on when that
    replica is among the ``reported`` ones (replica -> {edge id: version held}), else the replica
    reporting the highest version of it (a copy left behind by a move is older; ties: the lowest
    id)."""
    best: dict[str, tuple[int, str]] = {}
    for replica in sorted(reported):
        for edge, version in reported[replica].items():
            if edge not in best or version > best[edge][0]:
                best[edge] = (version, replica)
    found = {edge: replica for edge, (_, replica) in best.items()}
    found.update((edge, replica) for edge, replica in placed.items() if replica in reported)
    return found


def choose(
    edge: str,
    reported: Mapping[str, Mapping[str, int]],
    placed: Mapping[str, str],
    may_move: bool = True,
) -> str:
    """The replica (a key of ``reported``, which must not be empty) to run ``edge``'s next request.

    Its holder (see :func:`owners`) keeps it unless the holder has at least 2 sessions more than the
    least-loaded other replica and ``may_move``: then, and when no live replica holds it, it goes to
    the least-loaded replica (ties: the lowest id). So loads end within 1 of each other, and one
    move never makes the spread worse.
    """
    if not reported:
        raise ValueError("no teaching replica to choose from")
    holders = owners(reported, placed)
    counts = dict.fromkeys(reported, 0)
    for replica in holders.values():
        counts[replica] += 1
    holder = holders.get(edge)
    others = [replica for replica in reported if replica != holder]
    if not others:
        return next(iter(reported))
    least = min(others, key=lambda replica: (counts[replica], replica))
    if holder is not None and (not may_move or counts[holder] - counts[least] < 2):
        return holder
    return least


class SessionBalanceRouter(RequestRouter):
    """Routes each edge's requests by :func:`choose`, with a pause of ``MOVE_PAUSE`` after each
    move; ``release`` requests to the replica they name; requests of no edge (naive-mode labelling)
    to the replica with the shortest queue. A replica that has not reported yet counts as empty."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # edge id -> replica unique id, for the edges this router placed
        self.placed: dict[str, str] = {}
        # time.monotonic() before which this router makes no move
        self.next_move = 0.0

    def _reported(self) -> dict[str, dict[str, int]]:
        """Replica unique id -> {edge id: version} it holds, for every running replica; one that has
        not reported yet (it just started) counts as holding none."""
        return {
            replica_id.unique_id: dict(replica.routing_stats.get("edges", {}))
            for replica_id, replica in self.curr_replicas.items()
        }

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if pending_request is None or not candidate_replicas:
            return [candidate_replicas]
        # when the replica chosen is busy or slow to say how busy it is, Serve waits, longer each
        # time, and asks again (without this it would ask again at once, with the same short
        # deadline)
        pending_request.routing_context.should_backoff = True
        by_id = {replica.replica_id.unique_id: replica for replica in self.curr_replicas.values()}
        metadata = pending_request.metadata
        if metadata.call_method == RELEASE:
            release = pending_request.args[0]
            if release.ended and self.placed.get(release.edge_id) == release.replica_id:
                del self.placed[release.edge_id]
            target = by_id.get(release.replica_id)
            # a replica that is gone has nothing to release; any other treats the request as a no-op
            return [[target]] if target is not None else [candidate_replicas]
        edge = metadata.multiplexed_model_id
        if not edge:
            return [candidate_replicas]
        now = time.monotonic()
        reported = self._reported()
        holder = owners(reported, self.placed).get(edge)
        chosen = choose(edge, reported, self.placed, may_move=now >= self.next_move)
        if holder is not None and chosen != holder:
            self.next_move = now + random.uniform(*MOVE_PAUSE)
        self.placed[edge] = chosen
        # only there: another replica would be a move the rule did not make
        return [[by_id[chosen]]]
