"""Rendering scenes frame by frame, and writing them in the format of :mod:`shadowtutor.scene_store`.

A scene is a sequence of shots separated by hard cuts. Each shot draws (from its own random
stream, seeded by the scene seed and the shot index) a background canvas, a camera path, a
cast of objects with trajectories and pre-rendered sprites, and a lighting drift; frames are
then rendered independently, so rendering is deterministic by seed. Each frame also gets the
boxes of its instances (each object's layers of one class form one instance, boxed where it is
visible), as a detector's instances would give them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.scene_store import (
    DEFAULT_BACKGROUNDS,
    INSTANCES_NAME,
    LABELS_DIR,
    META_NAME,
    VIDEO_NAME,
    SceneError,
    SceneMeta,
    Size,
    instances_json,
    label_path,
    scene_written_into,
)
from shadowtutor_lab.scenes.backgrounds import check_backgrounds, make_background
from shadowtutor_lab.scenes.camera import camera_path
from shadowtutor_lab.scenes.compose import Placement, paste, sprite_affine
from shadowtutor_lab.scenes.lighting import Lighting
from shadowtutor_lab.scenes.motion import HORIZON, Track, make_track
from shadowtutor_lab.scenes.presets import ScenePreset, get_preset
from shadowtutor_lab.scenes.resample import resampled
from shadowtutor_lab.scenes.sprites import PHASES, Sprite, make_sprite

# Bump when the same arguments would render a different scene (invalidates cached scenes).
GENERATOR_VERSION = 2  # 2: instances.json
MIN_SIDE = 16
_PNG_FLAGS = [cv2.IMWRITE_PNG_COMPRESSION, 1]


@dataclass(frozen=True)
class RenderedFrame:
    image: np.ndarray  # (H, W, 3) BGR uint8, before video encoding
    label: np.ndarray  # (H, W) uint8 class indices
    instances: np.ndarray  # (N, 5) int64: class index, x0, y0, x1, y1 (exclusive) of each visible instance


def _cast(rng: np.random.Generator, preset: ScenePreset) -> list[str]:
    """Each class of the mix once, then extra objects by weight; shuffled."""
    names = list(preset.classes)
    weights = np.array([w for _, w in preset.class_mix], np.float64)
    total = int(rng.integers(preset.objects[0], preset.objects[1] + 1))
    if total > len(names) and weights.sum() > 0:
        names += list(rng.choice(preset.classes, size=total - len(names), p=weights / weights.sum()))
    return [str(names[i]) for i in rng.permutation(len(names))]


class Shot:
    """One continuous shot between cuts."""

    def __init__(self, preset: ScenePreset, frames: int, fps: float, size: Size,
                 rng: np.random.Generator, class_names: tuple[str, ...],
                 backgrounds: str = DEFAULT_BACKGROUNDS) -> None:
        self.size = size
        self.camera = camera_path(preset.camera, frames, fps, size, rng)
        horizon = self.camera.canvas[1] / 2 + (HORIZON - 0.5) * size[1]
        self.background = make_background(rng, preset.category, self.camera.canvas, horizon, backgrounds)
        cast = _cast(rng, preset)
        # Spread the starting positions so that objects begin mostly side by side.
        slots = (np.arange(len(cast)) + rng.uniform(0.2, 0.8, len(cast))) / len(cast)
        self.tracks: list[Track] = [
            make_track(rng, name, self.camera, fps, 0.9 * (slot - 0.5), preset.speed, preset.scale)
            for name, slot in zip(cast, slots, strict=True)
        ]
        max_zoom = float(self.camera.zoom.max())
        self.sprites: list[Sprite] = [
            make_sprite(rng, t.class_name, min(2 * size[1], math.ceil(float(t.height.max()) * max_zoom) + 2))
            for t in self.tracks
        ]
        self.lighting = Lighting(preset.lighting, frames, fps, size, rng)
        self._class_index = {name: i for i, name in enumerate(class_names)}
        self._background_index = background_index(class_names)
        self._view_key: bytes | None = None
        self._view: np.ndarray | None = None

    def placements(self, frame: int) -> list[Placement]:
        """The sprite layers of ``frame``, bottom (farthest) first."""
        camera = self.camera.matrix(frame)
        out = []
        for k in sorted(range(len(self.tracks)), key=lambda k: self.tracks[k].depth[frame]):
            track, sprite = self.tracks[k], self.sprites[k]
            phase = int(track.phase[frame] * PHASES) % PHASES
            world = sprite_affine(sprite.anchor, (track.x[frame], track.y[frame]),
                                  track.height[frame] / sprite.size[1], track.angle[frame],
                                  mirror=track.facing[frame] < 0)
            affine = (camera @ world)[:2]
            for layer in sprite.layers:
                class_index = self._class_index[layer.class_name]
                instance = 1 + k * len(self._class_index) + class_index  # one per object and class
                out.append(Placement(class_index, layer.textures[phase], layer.masks[phase], affine, instance))
        return out

    def background_view(self, frame: int) -> np.ndarray:
        """The background as the camera sees it at ``frame``, as a new float32 image."""
        m = self.camera.matrix(frame)[:2]
        key = m.tobytes()
        if self._view is None or key != self._view_key:  # a resting camera reuses its last view
            self._view = cv2.warpAffine(self.background, m, self.size, flags=cv2.INTER_LINEAR,
                                        borderMode=cv2.BORDER_REFLECT)
            self._view_key = key
        return self._view.astype(np.float32)

    def render(self, frame: int) -> RenderedFrame:
        image = self.background_view(frame)
        label = np.full((self.size[1], self.size[0]), self._background_index, np.uint8)
        instances = np.zeros(label.shape, np.int32)
        classes = {}
        for placement in self.placements(frame):
            paste(image, label, placement, instances)
            classes[placement.instance] = placement.class_index
        return RenderedFrame(self.lighting.apply(image, frame), label, instance_boxes(instances, classes))


def instance_boxes(instances: np.ndarray, classes: dict[int, int]) -> np.ndarray:
    """``(N, 5)`` rows ``class, x0, y0, x1, y1`` (exclusive ends) of the numbers in an instance map."""
    rows = []
    for instance in np.unique(instances[instances > 0]):
        ys, xs = np.nonzero(instances == instance)
        rows.append((classes[int(instance)], xs.min(), ys.min(), xs.max() + 1, ys.max() + 1))
    return np.array(rows, np.int64).reshape(-1, 5)


def check_size(size: Size) -> Size:
    w, h = (int(v) for v in size)
    if w < MIN_SIDE or h < MIN_SIDE or w % 2 or h % 2:
        raise ValueError(f"frame size must be even and at least {MIN_SIDE}x{MIN_SIDE} "
                         f"(MPEG-4 needs even sides), got {w}x{h}")
    return (w, h)


class SceneRenderer:
    """Renders a preset's scene frame by frame; iterate it for :class:`RenderedFrame` s."""

    def __init__(self, preset: ScenePreset | str, frames: int, seed: int, size: Size = (1280, 720),
                 fps: float = 30, backgrounds: str = DEFAULT_BACKGROUNDS, cut_interval: int | None = None) -> None:
        self.preset = get_preset(preset) if isinstance(preset, str) else preset
        if frames <= 0:
            raise ValueError(f"frames must be positive, got {frames}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.frames, self.seed, self.size, self.fps = frames, seed, check_size(size), float(fps)
        self.backgrounds = check_backgrounds(backgrounds)
        self.class_names = LVS_CLASSES
        if cut_interval is not None and cut_interval < 0:
            raise ValueError(f"the cut interval must be >= 0 frames (0: no cut), got {cut_interval}")
        self.cut_interval = cut_interval  # None: the preset's
        interval = self.preset.cut_interval if cut_interval is None else cut_interval or frames
        self.cuts = tuple(range(interval, frames, interval))

    @property
    def meta(self) -> SceneMeta:
        p = self.preset
        return SceneMeta(preset=p.name, seed=self.seed, frames=self.frames, width=self.size[0],
                         height=self.size[1], fps=self.fps, class_names=self.class_names,
                         camera=p.camera.regime, category=p.category, cuts=self.cuts,
                         description=p.description, backgrounds=self.backgrounds, cut_interval=self.cut_interval)

    def shot(self, index: int) -> Shot:
        """Shot ``index`` (0 before the first cut)."""
        bounds = (0, *self.cuts, self.frames)
        if not 0 <= index < len(bounds) - 1:
            raise IndexError(f"shot {index} out of range: the scene has {len(bounds) - 1} shots")
        rng = np.random.default_rng([self.seed, index])
        return Shot(self.preset, bounds[index + 1] - bounds[index], self.fps, self.size, rng, self.class_names,
                    self.backgrounds)

    def __iter__(self) -> Iterator[RenderedFrame]:
        bounds = (0, *self.cuts, self.frames)
        for index in range(len(bounds) - 1):
            shot = self.shot(index)
            for frame in range(bounds[index + 1] - bounds[index]):
                yield shot.render(frame)


def _prepare_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise SceneError(f"output {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise SceneError(f"output directory {out} is not empty (use --force to replace a scene)")
        if not (out / META_NAME).is_file():
            raise SceneError(f"refusing to replace {out}: it is not a scene directory (no {META_NAME})")


def make_scene(preset: ScenePreset | str, frames: int, seed: int, out: str | Path, size: Size = (1280, 720),
               fps: float = 30, progress: bool = True, force: bool = False, sample_fps: float | None = None,
               backgrounds: str = DEFAULT_BACKGROUNDS, cut_interval: int | None = None) -> Path:
    """Render a scene into ``out`` (see :mod:`shadowtutor.scene_store` for the format) and return ``out``.

    ``out`` must be absent or empty, or, with ``force``, hold a scene that is replaced. The
    scene is written next to ``out`` first and moved into place when complete. ``sample_fps``:
    render the ``frames`` frames at ``fps`` and keep those of the video re-sampled to ``sample_fps``
    (:mod:`shadowtutor_lab.scenes.resample`). ``backgrounds``: the background set
    (:data:`shadowtutor_lab.scenes.backgrounds.BACKGROUND_SETS`; ``held-out`` for places pre-training never saw).
    ``cut_interval``: frames between hard cuts instead of the preset's (0: one continuous shot).
    """
    from shadowtutor.progress import progress_bar

    renderer = SceneRenderer(preset, frames, seed, size, fps, backgrounds, cut_interval)
    meta, kept = resampled(renderer.meta, sample_fps)
    written = {source: index for index, source in enumerate(kept)}  # source frame -> its index in the scene
    out = Path(out)
    _prepare_out(out, force)
    with scene_written_into(out) as tmp:  # the encoder's frames are checked before the scene moves in
        (tmp / LABELS_DIR).mkdir()
        writer = cv2.VideoWriter(str(tmp / VIDEO_NAME), cv2.VideoWriter_fourcc(*"mp4v"), meta.fps, renderer.size)
        if not writer.isOpened():
            raise RuntimeError("OpenCV cannot open an 'mp4v' video writer")
        boxes = []
        try:
            bar = progress_bar(renderer, total=frames, desc=renderer.preset.name, unit="frame", disable=not progress)
            for source_index, frame in enumerate(bar):
                index = written.get(source_index)
                if index is None:
                    continue
                writer.write(frame.image)
                if not cv2.imwrite(str(label_path(tmp, index)), frame.label, _PNG_FLAGS):
                    raise RuntimeError(f"cannot write {label_path(tmp, index)}")
                boxes.append(frame.instances)
        finally:
            writer.release()
        (tmp / INSTANCES_NAME).write_text(instances_json(boxes))
        (tmp / META_NAME).write_text(meta.to_json())
    return out
