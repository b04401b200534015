"""The decision network (DVSNet's DN; Yang et al. fig. 4): a small regression model on flow-path
features.

It predicts a region's *confidence score*: the fraction of pixels on which the flow path's
warped labels would agree with the segmentation path's labels. DVSNet feeds the DN the
last feature map of its flow network; our flow is DIS (no network), so the features are
built from the flow field and the frame difference instead (:func:`region_features`): the
flow pooled to a 4x4 grid, its magnitude statistics, the residual of the key warped to now
(pooled 4x4 and mean), the plain difference, and the key's age, all read at every
:data:`FEATURE_STEP`-th pixel. A 3-layer MLP maps them to a score in [0, 1]; a region whose
score reaches the threshold takes the flow path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch import nn

from shadowtutor.acceleration.regions.flow import FlowPart

FORMAT = "shadowtutor-decision-network/1"
ASSET_NAME = "decision_network.pt"
POOL = 4
# The features read every 4th pixel of each row and column of the region's flow and images: 1/16 of
# the work (the statistics they take hardly move), so deciding costs a fraction of the flow itself.
FEATURE_STEP = 4
FEATURE_NAMES = (
    *(f"flow_{axis}_{i}" for axis in "xy" for i in range(POOL * POOL)),
    "flow_magnitude_mean",
    "flow_magnitude_std",
    "flow_magnitude_max",
    *(f"residual_{i}" for i in range(POOL * POOL)),
    "residual_mean",
    "difference_mean",
    "key_age",
)
FEATURE_COUNT = len(FEATURE_NAMES)


class DecisionNetworkError(ValueError):
    """A decision-network file that is missing, of another format, or of other features."""


def region_features(result: FlowPart, age: int, max_age: int) -> np.ndarray:
    """The DN's input for one region: float32 ``(FEATURE_COUNT,)``, flow in region
    widths/heights."""
    w, h = result.size
    scale = np.array([w, h], dtype=np.float32)
    pooled = cv2.resize(result.flow, (POOL, POOL), interpolation=cv2.INTER_AREA) / scale
    # NumPy, not cv2.magnitude / meanStdDev: their SIMD paths depend on the arrays' alignment, which
    # made the features (and the trained network) differ in the last bits from run to run
    magnitude = np.sqrt(np.square(result.flow[..., 0] / w) + np.square(result.flow[..., 1] / h))
    residual = cv2.resize(result.residual, (POOL, POOL), interpolation=cv2.INTER_AREA) / 255.0
    return np.concatenate(
        [
            pooled[..., 0].ravel(),
            pooled[..., 1].ravel(),
            [magnitude.mean(), magnitude.std(), magnitude.max()],
            residual.ravel(),
            [residual.mean(), result.difference / 255.0, age / max_age],
        ]
    ).astype(np.float32)


class DecisionNetwork(nn.Module):
    """Standardised features -> 64 -> 32 -> 1 (sigmoid): the predicted confidence score."""

    # buffers, registered in __init__
    feature_mean: torch.Tensor
    feature_std: torch.Tensor

    def __init__(self, hidden: tuple[int, int] = (64, 32)) -> None:
        super().__init__()
        self.register_buffer("feature_mean", torch.zeros(FEATURE_COUNT))
        self.register_buffer("feature_std", torch.ones(FEATURE_COUNT))
        self.layers = nn.Sequential(
            nn.Linear(FEATURE_COUNT, hidden[0]),
            nn.ReLU(),
            nn.Linear(hidden[0], hidden[1]),
            nn.ReLU(),
            nn.Linear(hidden[1], 1),
        )

    def set_standardisation(self, features: torch.Tensor) -> None:
        self.feature_mean.copy_(features.mean(0))
        self.feature_std.copy_(features.std(0).clamp_min(1e-6))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Scores ``(N,)`` in [0, 1] for features ``(N, FEATURE_COUNT)``."""
        return torch.sigmoid(
            self.layers((features - self.feature_mean) / self.feature_std)
        ).squeeze(-1)

    def scores(self, features: np.ndarray) -> np.ndarray:
        """:meth:`forward` in NumPy, for a few regions per frame (a tenth of torch's call
        overhead)."""
        x = (
            np.asarray(features, dtype=np.float32) - self.feature_mean.numpy()
        ) / self.feature_std.numpy()
        for layer in self.layers:
            if isinstance(layer, nn.Linear):
                x = x @ layer.weight.detach().numpy().T + layer.bias.detach().numpy()
            else:
                x = np.maximum(x, 0)
        return (1 / (1 + np.exp(-x[:, 0]))).astype(np.float32)


def save_decision_network(net: DecisionNetwork, path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "format": FORMAT,
            "features": list(FEATURE_NAMES),
            "feature_step": FEATURE_STEP,
            "state_dict": net.state_dict(),
            "meta": meta,
        },
        path,
    )


def load_decision_network(path: Path) -> tuple[DecisionNetwork, dict[str, Any]]:
    """The network in ``path`` and its metadata (how it was trained)."""
    if not path.is_file():
        raise DecisionNetworkError(
            f"no decision network at {path}; make one with `shadowtutor regions train-decision "
            f"--out {path}`"
        )
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        # torch raises many types for a damaged or foreign file
        raise DecisionNetworkError(
            f"{path} cannot be read as a decision network (not a PyTorch file of one: "
            f"{type(exc).__name__})"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DecisionNetworkError(f"{path} is not a decision network ({FORMAT})")
    if (
        tuple(data.get("features", ())) != FEATURE_NAMES
        or data.get("feature_step", 1) != FEATURE_STEP
    ):
        raise DecisionNetworkError(
            f"{path} was trained on other features than this version computes; make it again with "
            f"`shadowtutor regions train-decision`"
        )
    net = DecisionNetwork()
    try:
        net.load_state_dict(data["state_dict"])
    except (KeyError, RuntimeError, TypeError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise DecisionNetworkError(
            f"{path} holds no weights of this decision network ({detail})"
        ) from None
    return net.eval(), dict(data.get("meta", {}))


def default_decision_network_path() -> Path:
    """The packaged decision network (``shadowtutor/assets/decision_network.pt``)."""
    return Path(__file__).resolve().parents[2] / "assets" / ASSET_NAME
