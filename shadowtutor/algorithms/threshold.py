"""The THRESHOLD Algorithm 2 scales the stride against: fixed (the paper) or set per session
("auto").

The paper fixes THRESHOLD at 0.8, a little under the best mIoU then reported (0.845): a student that
reaches it is as good as can be hoped, and its stride grows. Against a real teacher on a real camera
the level a student can reach is its own (the teacher's mistakes, small objects), often under 0.8
after every key frame's training, and the stride rarely leaves MIN_STRIDE. The auto policy measures
that level per session, as the median of the metric after distillation over the last :data:`WINDOW`
key frames, and sets the stride's THRESHOLD to :data:`ATTAINABLE_RATIO` of it: the paper's own
proportion. It never exceeds ``params.threshold``, so a student that reaches the paper's level is
strided as in the paper. Until :data:`WINDOW` key frames are in, the stride's THRESHOLD is
``params.threshold``.

Only Algorithm 2 moves: Algorithm 1 keeps training each key frame to ``params.threshold``, so the
metrics measured do not sink with the threshold, and rarer key frames are each trained as much as
before. The rule runs where Algorithm 2 runs, on the metrics the edge receives with each update, so
it needs nothing on the wire.
"""

from __future__ import annotations

import statistics
from collections import deque

from shadowtutor.algorithms.params import AlgorithmParams

# key frames the attainable level is the median of
WINDOW = 8
# the paper's THRESHOLD over the best mIoU it took as attainable
ATTAINABLE_RATIO = 0.8 / 0.845
# keeps the threshold inside (0, 1) when every recent metric is 0
_FLOOR = 1e-3


class StrideThreshold:
    """The THRESHOLD one session's Algorithm 2 uses for its next stride.

    ``current`` is ``params.threshold`` under the "fixed" policy. Under "auto" it is
    ``params.threshold`` until :data:`WINDOW` metrics were observed, then ``min(params.threshold,
    ATTAINABLE_RATIO * median)`` of the last :data:`WINDOW`; always within ``(0,
    params.threshold]``.
    """

    def __init__(self, params: AlgorithmParams) -> None:
        self.params = params
        self.recent: deque[float] = deque(maxlen=WINDOW)

    @property
    def current(self) -> float:
        if self.params.threshold_policy == "fixed" or len(self.recent) < WINDOW:
            return self.params.threshold
        attainable = statistics.median(self.recent)
        return min(self.params.threshold, max(ATTAINABLE_RATIO * attainable, _FLOOR))

    def observe(self, metric: float) -> None:
        """Record the metric after distillation of one answered key frame, an mIoU: it comes from
        the server, so a value outside [0, 1] is clamped into it and a NaN is not recorded."""
        if metric == metric:
            self.recent.append(min(1.0, max(0.0, metric)))
