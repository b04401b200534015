"""Scene presets named after the paper's seven LVS categories (camera x scene), and ``patrol-street``.

``patrol-street`` is not one of the paper's categories: a moving street camera that travels and
dwells in turn (a pan-tilt-zoom camera on a patrol tour, a vehicle in traffic), the case where
how much of the view moves changes over time. Pre-training and the decision network's training
use the seven (their ``DEFAULT_PRESETS``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from shadowtutor.classes import LVS_CLASSES
from shadowtutor_lab.scenes.backgrounds import CATEGORIES
from shadowtutor_lab.scenes.camera import CameraParams
from shadowtutor_lab.scenes.lighting import LightingParams
from shadowtutor_lab.scenes.sprites import SPECS

Category = Literal["animals", "people", "street"]


@dataclass(frozen=True)
class ScenePreset:
    """What a scene shows and how it moves.

    Every shot holds each class of ``class_mix`` at least once, plus extra objects drawn by the
    mix's weights up to a total within ``objects``. A hard cut (new background, objects,
    camera path and lighting) happens every ``cut_interval`` frames.
    """

    name: str
    description: str
    category: Category
    camera: CameraParams
    class_mix: tuple[tuple[str, float], ...]  # (class, weight of the extra objects)
    objects: tuple[int, int]  # min and max objects per shot
    speed: float = 1.0  # multiplies each class's natural speed
    scale: float = 1.0  # multiplies each class's natural size
    cut_interval: int = 300
    lighting: LightingParams = field(default_factory=LightingParams)

    def __post_init__(self) -> None:
        names = [c for c, _ in self.class_mix]
        unknown = [c for c in names if c not in LVS_CLASSES or c not in SPECS]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(f"preset {self.name!r}: class_mix needs distinct object classes of "
                             f"{list(SPECS)}, got {names}")
        if min(w for _, w in self.class_mix) < 0:
            raise ValueError(f"preset {self.name!r}: class weights must be >= 0")
        if self.category not in CATEGORIES:
            raise ValueError(f"preset {self.name!r}: category must be one of {CATEGORIES}")
        if not len(names) <= self.objects[0] <= self.objects[1]:
            raise ValueError(f"preset {self.name!r}: need {len(names)} <= min objects <= max objects, "
                             f"got {self.objects}")
        if self.speed <= 0 or self.scale <= 0 or self.cut_interval <= 0:
            raise ValueError(f"preset {self.name!r}: speed, scale and cut_interval must be positive")

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.class_mix)


_FIXED = CameraParams("fixed")
_MOVING = CameraParams("moving", pan=0.3, tilt=0.04, zoom=0.3, pan_period_s=(5.0, 12.0), shake=0.003)
_PATROL = dataclasses.replace(_MOVING, dwell_s=(1.5, 4.0), travel_s=(1.0, 3.0))
_EGOCENTRIC = CameraParams("egocentric", pan=0.25, tilt=0.06, zoom=0.1, pan_period_s=(2.5, 7.0),
                           shake=0.018, roll_deg=3.0, turns_per_min=8.0, turn=0.3)

_ANIMALS = (("bird", 1.0), ("dog", 1.0), ("horse", 1.0), ("elephant", 0.6), ("giraffe", 0.6))
_PEOPLE = (("person", 3.0), ("bicycle", 1.0))
_STREET = (("person", 2.0), ("bicycle", 1.0), ("auto", 1.5))

PRESETS: dict[str, ScenePreset] = {p.name: p for p in (
    ScenePreset("fixed-animals", "static camera, grazing and walking animals, birds overhead",
                "animals", _FIXED, _ANIMALS, (5, 7), speed=0.9, cut_interval=300),
    ScenePreset("fixed-people", "static camera, pedestrians and cyclists crossing and occluding",
                "people", _FIXED, _PEOPLE, (3, 6), cut_interval=300),
    ScenePreset("fixed-street", "static street camera, cars, cyclists and pedestrians",
                "street", _FIXED, _STREET, (4, 7), cut_interval=300),
    ScenePreset("moving-animals", "panning and zooming camera following a herd",
                "animals", _MOVING, _ANIMALS, (5, 7), speed=1.2, cut_interval=240),
    ScenePreset("moving-people", "panning and zooming camera following people and cyclists",
                "people", _MOVING, _PEOPLE, (3, 6), speed=1.2, cut_interval=240),
    ScenePreset("moving-street", "panning and zooming camera over traffic",
                "street", _MOVING, _STREET, (4, 7), speed=1.2, cut_interval=240),
    ScenePreset("patrol-street", "street camera on a patrol tour: pans and zooms, then dwells for seconds",
                "street", _PATROL, _STREET, (4, 7), speed=1.2, cut_interval=240),
    ScenePreset("egocentric-people", "head-worn camera: shake, roll, sudden turns, people close by",
                "people", _EGOCENTRIC, _PEOPLE, (3, 6), speed=1.1, scale=1.15, cut_interval=200,
                lighting=LightingParams(brightness=0.18, colour=0.07, trend=0.15, period_s=(2.0, 8.0),
                                        noise=3.0)),
)}


def get_preset(name: str) -> ScenePreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown scene preset {name!r}; known: {', '.join(PRESETS)}") from None
