"""One device's region labeller (DVSNet on one edge): per region, the segmentation path or the flow
path.

For every frame each region either runs the *segmentation path* (the student on the region
and a context margin; its labels become the region's new key) or the *flow path* (dense flow
from the key's context to now, the key's labels warped by it; :class:`RegionKey`). A policy
picks the path: a fixed key interval (:class:`FixedIntervalPolicy`, DVSNet's baseline and the
edge's default), the decision network with a threshold on each frame's score
(:class:`DecisionPolicy`, DVSNet's rule), or the decision network's predicted loss accumulated
since the key against a budget (:class:`BudgetPolicy`). Either way a region is segmented when it
has no key, its key is older than ``max_key_age`` frames, or its key was made by an older student
(:meth:`RegionLabeller.invalidate_keys`, called after a weight update).

The student's context: with ``margin=None`` (the default) a frame where any region needs the
segmentation path is segmented whole and every region gets a new key (the student normalises each
layer by the statistics of what it sees, so its labels of a region depend on the rest of the frame).
With ``margin=M`` only the regions that need it are segmented, in one student call on the box
holding them and M pixels around them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from shadowtutor.acceleration.regions.decision import (
    FEATURE_STEP,
    DecisionNetwork,
    default_decision_network_path,
    load_decision_network,
    region_features,
)
from shadowtutor.acceleration.regions.flow import FlowEstimator, FlowResult
from shadowtutor.acceleration.regions.grid import (
    Box,
    RegionConfigError,
    RegionGrid,
    crop,
    grid_shape,
    inner,
)

SEGMENT, FLOW = "segment", "flow"


class PathPolicy(Protocol):
    """Decides, per keyed region, whether it is segmented again or warped along the optical flow
    (the decision network, or a fixed interval)."""

    # whether it decides from flow features (then flow runs for every keyed region)
    needs_flow: bool

    def due(self, keys: Sequence[RegionKey]) -> np.ndarray:
        """Which of these keyed regions are segmented now without computing their flow first."""

    def take_flow(
        self, features: np.ndarray, ages: np.ndarray, spent: np.ndarray, together: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """For regions with a usable key: which take the flow path, and their scores (if any).

        ``spent``: each key's predicted loss accumulated while it was warped (:func:`charge`);
        ``together``: the regions share one path (the whole frame is segmented or none of it).
        """


class DecisionPolicy:
    """DVSNet's rule: the flow path where the decision network's score reaches ``threshold``."""

    needs_flow = True

    def __init__(self, network: DecisionNetwork, threshold: float) -> None:
        if not 0 <= threshold <= 1:
            raise RegionConfigError(f"decision threshold must lie in [0, 1], got {threshold}")
        self.network = network
        self.threshold = threshold

    def due(self, keys: Sequence[RegionKey]) -> np.ndarray:
        return np.zeros(len(keys), dtype=bool)

    def take_flow(
        self, features: np.ndarray, ages: np.ndarray, spent: np.ndarray, together: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        scores = self.network.scores(features)
        # the frame's predicted agreement: the mean over its equal-sized regions
        if together:
            return np.full(len(scores), float(scores.mean()) >= self.threshold), scores
        return scores >= self.threshold, scores


class BudgetPolicy:
    """The decision network's predicted loss (1 - score) summed since the key, against ``budget``.

    A region is warped while the loss its key has accumulated, this frame's included, stays within
    the budget. If the warp error grows with key age at a rate ``a``, this spaces keys by about
    ``sqrt(2 * budget / a)``: fewer keys where the view changes slowly, more where it changes fast,
    the spacing that minimises the mean error for a given number of keys (DVSNet's per-frame
    threshold spaces them by ``1/a``, over-reacting; a fixed interval does not react at all).
    Look-ahead: when the last warped frame's loss (the error only grows with age) would overrun the
    budget, the region is *due* and is segmented without computing a flow it would not use.
    """

    needs_flow = True

    def __init__(self, network: DecisionNetwork, budget: float) -> None:
        if not budget > 0:
            raise RegionConfigError(f"decision budget must be > 0, got {budget}")
        self.network = network
        self.budget = budget

    def due(self, keys: Sequence[RegionKey]) -> np.ndarray:
        return np.array([key.spent + key.last_loss > self.budget for key in keys], dtype=bool)

    def take_flow(
        self, features: np.ndarray, ages: np.ndarray, spent: np.ndarray, together: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        scores = self.network.scores(features)
        if together:
            within = float(spent.mean()) + 1.0 - float(scores.mean()) <= self.budget
            return np.full(len(scores), within), scores
        return spent + 1.0 - scores <= self.budget, scores


class FixedIntervalPolicy:
    """The baseline: a region is segmented every ``interval`` frames and warped in between."""

    needs_flow = False

    def __init__(self, interval: int) -> None:
        if interval < 1:
            raise RegionConfigError(f"key interval must be >= 1, got {interval}")
        self.interval = interval

    def due(self, keys: Sequence[RegionKey]) -> np.ndarray:
        return np.zeros(len(keys), dtype=bool)

    def take_flow(
        self, features: np.ndarray, ages: np.ndarray, spent: np.ndarray, together: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        take = ages < self.interval
        return (np.full(len(take), bool(take.all())) if together else take), None


@dataclass(kw_only=True)
class RegionKey:
    """A region's last segmentation, over its *context*: the area its flow is estimated on.

    The context is the whole frame when the regions share a path (one device), else the region
    and its margin, so that motion across the region's border has something to match.
    """

    # the context at the flow scale
    grey: np.ndarray
    # the segmentation path's labels of the context
    labels: np.ndarray
    frame: int
    # the student that made it
    generation: int
    # in frame pixels
    context: Box
    # in frame pixels, inside ``context``
    region: Box
    # the decision network's predicted loss summed over the frames warped from it
    spent: float = 0.0
    # the predicted loss of the last frame warped from it
    last_loss: float = 0.0

    @classmethod
    def cut(
        cls,
        flow: FlowEstimator,
        grey: np.ndarray,
        labels: np.ndarray,
        context: Box,
        region: Box,
        frame: int,
        generation: int,
    ) -> RegionKey:
        """A key from the frame at the flow scale (``grey``, cut to ``context`` here; kept as it is
        when the context is the whole frame) and the segmentation's labels of ``context``."""
        small = flow.small_box(context)
        key_grey = (
            grey if small == (0, 0, grey.shape[1], grey.shape[0]) else crop(grey, small).copy()
        )
        return cls(
            grey=key_grey,
            labels=np.ascontiguousarray(labels),
            frame=frame,
            generation=generation,
            context=context,
            region=region,
        )

    def region_labels(self, context_labels: np.ndarray) -> np.ndarray:
        """The region's part of labels over the context."""
        return np.ascontiguousarray(crop(context_labels, inner(self.region, self.context)))


class KeyFlows:
    """One frame's flows to its regions' keys: each key context's flow estimated, and warped, once.

    Regions whose keys share a context and a frame (all of them, when the regions share a path)
    share one estimate; the decision features and the warped labels are each region's part of it.
    """

    def __init__(self, flow: FlowEstimator, grey: np.ndarray) -> None:
        self.flow = flow
        # the current frame at the flow scale
        self.grey = grey
        self._results: dict[tuple[Box, int], FlowResult] = {}
        self._warped: dict[tuple[Box, int], np.ndarray] = {}

    def result(self, key: RegionKey) -> FlowResult:
        """The flow from now to ``key`` over the key's context."""
        name = (key.context, key.frame)
        if name not in self._results:
            self._results[name] = self.flow.estimate(
                crop(self.grey, self.flow.small_box(key.context)), key.grey
            )
        return self._results[name]

    def features(self, key: RegionKey, age: int, max_age: int) -> np.ndarray:
        """The decision network's input for ``key``'s region."""
        region, context = self.flow.small_box(key.region), self.flow.small_box(key.context)
        part = self.result(key).part(inner(region, context), FEATURE_STEP)
        return region_features(part, age, max_age)

    def warped_labels(self, key: RegionKey) -> np.ndarray:
        """``key``'s labels of its region, moved to now by the flow (the flow path's output)."""
        name = (key.context, key.frame)
        if name not in self._warped:
            self._warped[name] = self.flow.warp_labels(key.labels, self.result(key))
        return key.region_labels(self._warped[name])


def charge(key: RegionKey, score: float | None) -> None:
    """Book one warped frame's predicted loss (``1 - score``) on ``key`` (what :class:`BudgetPolicy`
    reads)."""
    if score is not None:
        key.last_loss = 1.0 - score
        key.spent += key.last_loss


@dataclass(frozen=True)
class FrameRegions:
    """What happened to one frame's regions."""

    paths: tuple[str, ...]
    # frames since each region's key, after this frame (0 = segmented now)
    key_ages: tuple[int, ...]
    scores: tuple[float | None, ...]


class RegionLabeller:
    """Labels whole frames region by region; ``segment(frame_part) -> labels`` is the student."""

    def __init__(
        self,
        segment: Callable[[np.ndarray], np.ndarray],
        policy: PathPolicy,
        regions: int = 4,
        *,
        margin: int | None = None,
        max_key_age: int = 15,
        flow: FlowEstimator | None = None,
    ) -> None:
        if max_key_age < 1:
            raise RegionConfigError(f"max key age must be >= 1 frame, got {max_key_age}")
        # a bad count or margin fails now
        RegionGrid(width=64 * regions, height=64 * regions, regions=regions, margin=margin or 0)
        self.segment = segment
        self.policy = policy
        self.regions = regions
        self.margin = margin
        self.max_key_age = max_key_age
        self.flow = flow or FlowEstimator()
        self.grid: RegionGrid | None = None
        self.keys: list[RegionKey | None] = []
        self.generation = 0
        self.frame_index = 0
        self.last: FrameRegions | None = None

    def invalidate_keys(self) -> None:
        """The student changed: every key it made before is stale, so each region is segmented
        next."""
        self.generation += 1

    def label(self, frame: np.ndarray) -> np.ndarray:
        """Labels ``uint8 (H, W)`` of one BGR frame; :attr:`last` says which path each region
        took."""
        t = self.frame_index
        self.frame_index += 1
        if self.grid is None or not self.grid.fits(frame):
            self.grid = RegionGrid(
                width=frame.shape[1],
                height=frame.shape[0],
                regions=self.regions,
                margin=self.margin or 0,
            )
            self.keys = [None] * self.regions
        flows = KeyFlows(self.flow, self.flow.small_grey(frame))
        flowed, scores = self._choose(t, flows)
        segmented = [r for r in range(self.regions) if r not in flowed]
        out = np.empty(frame.shape[:2], dtype=np.uint8)
        if segmented:
            self._segment(frame, t, flows.grey, segmented, out)
        for r in flowed:
            key = self.keys[r]
            assert key is not None
            x0, y0, x1, y1 = self.grid.boxes[r]
            out[y0:y1, x0:x1] = flows.warped_labels(key)
        # all of them: every region has one after a frame
        keys = [key for key in self.keys if key is not None]
        self.last = FrameRegions(
            tuple(FLOW if r in flowed else SEGMENT for r in range(self.regions)),
            tuple(t - key.frame for key in keys),
            tuple(scores.get(r) for r in range(self.regions)),
        )
        return out

    def _choose(self, t: int, flows: KeyFlows) -> tuple[list[int], dict[int, float]]:
        """The regions that take the flow path, and their scores (if the policy computed any)."""
        # the usable keys by region
        keys = {
            r: key
            for r, key in enumerate(self.keys)
            if key is not None
            and key.generation == self.generation
            and t - key.frame <= self.max_key_age
        }
        # one student call for the whole frame: all regions share a path
        together = self.margin is None
        if keys:
            due = self.policy.due(list(keys.values()))
            keys = (
                {}
                if together and due.any()
                else {r: key for (r, key), d in zip(keys.items(), due, strict=True) if not d}
            )
        if not keys or (together and len(keys) < self.regions):
            return [], {}
        keyed = list(keys)
        ages = np.array([t - key.frame for key in keys.values()], dtype=np.int64)
        spent = np.array([key.spent for key in keys.values()])
        features = np.zeros((len(keyed), 0), dtype=np.float32)
        if self.policy.needs_flow:
            features = np.stack(
                [
                    flows.features(key, int(age), self.max_key_age)
                    for key, age in zip(keys.values(), ages, strict=True)
                ]
            )
        take, scores = self.policy.take_flow(features, ages, spent, together)
        score_of = {r: float(scores[i]) for i, r in enumerate(keyed)} if scores is not None else {}
        flowed = [r for r, ok in zip(keyed, take, strict=True) if ok]
        frame_score = float(scores.mean()) if together and scores is not None else None
        # shared path: every region books the frame's mean, so their sums stay equal
        for r in flowed:
            charge(keys[r], frame_score if together else score_of.get(r))
        return flowed, score_of

    def _segment(
        self, frame: np.ndarray, t: int, grey: np.ndarray, regions: list[int], out: np.ndarray
    ) -> None:
        """The segmentation path for ``regions``: one student call, new keys (``grey``: the frame at
        the flow scale)."""
        grid = self.grid
        assert grid is not None
        whole = (0, 0, grid.width, grid.height)
        context = grid.context_box(regions) if self.margin is not None else whole
        labels = self.segment(np.ascontiguousarray(crop(frame, context)))
        for r in regions:
            key_context = grid.margin_box(r) if self.margin is not None else whole
            key_labels = (
                labels if key_context == context else crop(labels, inner(key_context, context))
            )
            key = RegionKey.cut(
                self.flow, grey, key_labels, key_context, grid.boxes[r], t, self.generation
            )
            x0, y0, x1, y1 = grid.boxes[r]
            out[y0:y1, x0:x1] = key.region_labels(key.labels)
            self.keys[r] = key


@dataclass(kw_only=True, frozen=True)
class FlowPathConfig:
    """How an edge runs the flow path: regions, the rule that picks each frame's path, the key age
    bound.

    ``interval`` K (the default, 3) segments every K-th frame and warps the frames between
    (:class:`FixedIntervalPolicy`); ``interval`` None lets the decision network pick: DVSNet's rule
    with ``threshold`` when ``budget`` is None, else the :class:`BudgetPolicy` with that budget.
    """

    threshold: float = 0.97
    regions: int = 4
    max_key_age: int = 4
    # None: the packaged decision network
    network: Path | None = None
    budget: float | None = None
    interval: int | None = 3

    def __post_init__(self) -> None:
        grid_shape(self.regions)
        if not 0 <= self.threshold <= 1:
            raise RegionConfigError(f"decision threshold must lie in [0, 1], got {self.threshold}")
        if self.max_key_age < 1:
            raise RegionConfigError(f"max key age must be >= 1 frame, got {self.max_key_age}")
        if self.budget is not None and not self.budget > 0:
            raise RegionConfigError(f"decision budget must be > 0, got {self.budget}")
        if self.interval is not None and self.interval < 1:
            raise RegionConfigError(f"key interval must be >= 1 frame, got {self.interval}")

    @property
    def rule(self) -> str:
        """The path rule in words (for reports and logs)."""
        if self.interval is not None:
            return f"a fixed key interval of {self.interval} frames"
        decision = (
            f"budget {self.budget}" if self.budget is not None else f"threshold {self.threshold}"
        )
        return f"the decision network ({decision}, max key age {self.max_key_age})"

    def load_network(self) -> DecisionNetwork | None:
        """The decision network the rule needs (None for a fixed interval); an error if its file is
        missing."""
        if self.interval is not None:
            return None
        network, _meta = load_decision_network(self.network or default_decision_network_path())
        return network

    def policy(self, network: DecisionNetwork | None) -> PathPolicy:
        """The rule this configuration names (over ``network``, which the decision rules need)."""
        if self.interval is not None:
            return FixedIntervalPolicy(self.interval)
        if network is None:
            raise RegionConfigError("the decision rules need a decision network")
        if self.budget is None:
            return DecisionPolicy(network, self.threshold)
        return BudgetPolicy(network, self.budget)

    def build(self, segment: Callable[[np.ndarray], np.ndarray]) -> RegionLabeller:
        """A labeller over ``segment`` (the student)."""
        return RegionLabeller(
            segment, self.policy(self.load_network()), self.regions, max_key_age=self.max_key_age
        )
