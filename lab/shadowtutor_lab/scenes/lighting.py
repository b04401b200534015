"""Lighting drift (global brightness and white balance over time) and sensor noise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shadowtutor_lab.scenes.signals import smooth_noise

_NOISE_BANK = 3  # noise fields drawn per shot; each frame takes one at a random offset
_NOISE_PAD = 16


@dataclass(frozen=True)
class LightingParams:
    brightness: float = 0.12  # amplitude of the relative brightness drift
    colour: float = 0.05  # amplitude of each channel's relative drift (white balance)
    trend: float = 0.1  # largest monotone brightness change per 10 s (clouds, dusk, exposure)
    period_s: tuple[float, float] = (4.0, 15.0)
    noise: float = 2.0  # sensor noise standard deviation, grey levels

    def __post_init__(self) -> None:
        if min(self.brightness, self.colour, self.trend, self.noise) < 0:
            raise ValueError(f"lighting amplitudes must be >= 0, got {self}")
        if self.brightness + self.trend >= 0.9:
            raise ValueError("brightness + trend must stay below 0.9 or frames go black")


class Lighting:
    """Per-frame channel gains and a bank of noise fields for one shot."""

    def __init__(self, params: LightingParams, frames: int, fps: float, size: tuple[int, int],
                 rng: np.random.Generator) -> None:
        w, h = size
        level = (1.0 + params.brightness * smooth_noise(rng, frames, fps, params.period_s)
                 + params.trend * rng.uniform(-1, 1) * np.minimum(1.0, np.arange(frames) / (10.0 * fps)))
        tint = np.stack([1.0 + params.colour * smooth_noise(rng, frames, fps, params.period_s)
                         for _ in range(3)], axis=1)
        self.gains = (level[:, None] * tint).astype(np.float32)  # (frames, 3), BGR
        self._bank = (params.noise * rng.standard_normal(
            (_NOISE_BANK, h + _NOISE_PAD, w + _NOISE_PAD, 3), dtype=np.float32)) if params.noise > 0 else None
        self._picks = rng.integers((0, 0, 0), (_NOISE_BANK, _NOISE_PAD, _NOISE_PAD), size=(frames, 3))
        self._size = size

    def apply(self, image: np.ndarray, frame: int) -> np.ndarray:
        """Light and expose ``image`` (float32 BGR, modified in place) into a uint8 frame."""
        image *= self.gains[frame]
        if self._bank is not None:
            k, dy, dx = (int(v) for v in self._picks[frame])
            w, h = self._size
            image += self._bank[k, dy:dy + h, dx:dx + w]
        image += 0.5
        np.clip(image, 0, 255, out=image)
        return image.astype(np.uint8)
