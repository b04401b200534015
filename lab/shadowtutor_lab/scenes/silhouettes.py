"""Class-specific, articulated silhouettes drawn at a gait phase in [0, 1).

Every figure faces right (+x) and stands with its lowest point near the bottom of the sprite
(y = 1); the sprite is mirrored for motion to the left. A ``Look`` holds the colours of an
individual (shirt, fur, car paint...), drawn once per object by the class's palette.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shadowtutor_lab.scenes.painter import Colour, Painter, Point

Look = dict[str, Colour]


def _dir(angle_deg: float) -> Point:
    """Unit vector at ``angle_deg`` from straight down, positive towards +x (forward)."""
    a = math.radians(angle_deg)
    return (math.sin(a), math.cos(a))


def _add(p: Point, v: Point, k: float = 1.0) -> Point:
    return (p[0] + k * v[0], p[1] + k * v[1])


def _shade(c: Colour, k: float) -> Colour:
    return (c[0] * k, c[1] * k, c[2] * k)


def _two_link(root: Point, target: Point, l1: float, l2: float, prefer: Point) -> Point:
    """Middle joint of a two-segment limb reaching from ``root`` towards ``target``.

    Of the two solutions, the one further along ``prefer`` (e.g. forward for a knee).
    Out-of-reach targets stretch the limb straight towards them.
    """
    dx, dy = target[0] - root[0], target[1] - root[1]
    d = min(max(math.hypot(dx, dy), abs(l1 - l2) + 1e-6), l1 + l2 - 1e-6)
    base = math.atan2(dy, dx)
    spread = math.acos((l1 * l1 + d * d - l2 * l2) / (2 * l1 * d))
    options = [(root[0] + l1 * math.cos(base + s * spread), root[1] + l1 * math.sin(base + s * spread))
               for s in (1.0, -1.0)]
    return max(options, key=lambda p: p[0] * prefer[0] + p[1] * prefer[1])


def _pick(rng: np.random.Generator, options: list[Colour], jitter: float = 0.08) -> Colour:
    c = options[int(rng.integers(len(options)))]
    k = rng.uniform(1 - jitter, 1 + jitter, size=3)
    return tuple(float(min(255.0, v * f)) for v, f in zip(c, k, strict=True))  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------- people

@dataclass(frozen=True)
class _Body:
    """Key points of a human figure in sprite units (near = the side facing the camera)."""

    hip: Point
    shoulder: Point
    knees: tuple[Point, Point]  # (far, near)
    ankles: tuple[Point, Point]
    toes: tuple[Point, Point]
    elbows: tuple[Point, Point]
    wrists: tuple[Point, Point]
    scale: float


def _walking_body(phase: float) -> _Body:
    s, c = math.sin(2 * math.pi * phase), math.cos(2 * math.pi * phase)
    cx = 0.3
    hip, shoulder = (cx, 0.52), (cx + 0.01, 0.22)
    thigh = (-26 * s, 26 * s)
    flex = (40 * max(0.0, -c), 40 * max(0.0, c))
    knees = tuple(_add(hip, _dir(a), 0.225) for a in thigh)
    ankles = tuple(_add(k, _dir(a - f), 0.215) for k, a, f in zip(knees, thigh, flex, strict=True))
    lowest = max(a[1] for a in ankles)
    dy = 0.955 - lowest  # keep the supporting foot on the ground: the body bobs
    sh = lambda p: (p[0], p[1] + dy)  # noqa: E731
    arm = (22 * s, -22 * s)
    elbows = tuple(_add(shoulder, _dir(a), 0.15) for a in arm)
    wrists = tuple(_add(e, _dir(a + 22), 0.14) for e, a in zip(elbows, arm, strict=True))
    return _Body(
        hip=sh(hip), shoulder=sh(shoulder),
        knees=tuple(map(sh, knees)), ankles=tuple(map(sh, ankles)),  # type: ignore[arg-type]
        toes=tuple(sh(_add(a, (0.055, 0.012))) for a in ankles),  # type: ignore[arg-type]
        elbows=tuple(map(sh, elbows)), wrists=tuple(map(sh, wrists)),  # type: ignore[arg-type]
        scale=1.0,
    )


# Bicycle geometry in the bicycle sprite's units (aspect 1.3).
_REAR, _FRONT, _WHEEL_R = (0.32, 0.8), (1.0, 0.8), 0.19
_CRANK, _CRANK_R = (0.6, 0.82), 0.075
_SEAT, _BAR = (0.5, 0.485), (0.86, 0.41)


def _riding_body(phase: float) -> _Body:
    k = 0.95  # the rider in bicycle units
    a = 2 * math.pi * phase
    hip = (_SEAT[0], _SEAT[1] - 0.015)
    shoulder = _add(hip, _dir(180 - 35), 0.3 * k)
    pedals = (_add(_CRANK, (math.cos(a + math.pi), math.sin(a + math.pi)), _CRANK_R),
              _add(_CRANK, (math.cos(a), math.sin(a)), _CRANK_R))
    knees = tuple(_two_link(hip, p, 0.24 * k, 0.23 * k, (1.0, -0.2)) for p in pedals)
    elbows = tuple(_two_link(shoulder, (_BAR[0] - dx, _BAR[1]), 0.15 * k, 0.14 * k, (0.0, 1.0))
                   for dx in (0.01, 0.0))
    return _Body(
        hip=hip, shoulder=shoulder, knees=knees, ankles=pedals,  # type: ignore[arg-type]
        toes=tuple(_add(p, (0.045, 0.0)) for p in pedals),  # type: ignore[arg-type]
        elbows=elbows, wrists=((_BAR[0] - 0.01, _BAR[1]), _BAR), scale=k,  # type: ignore[arg-type]
    )


def _draw_body(p: Painter, look: Look, b: _Body) -> None:
    k = b.scale
    for side in (0, 1):  # far limbs first and darker, near limbs over the torso
        tone = 0.72 if side == 0 else 1.0
        if side == 1:
            _draw_torso(p, look, b)
        p.chain([b.hip, b.knees[side], b.ankles[side]], 0.075 * k, _shade(look["trousers"], tone))
        p.capsule(b.ankles[side], b.toes[side], 0.045 * k, _shade(look["shoes"], tone))
        p.capsule(b.shoulder, b.elbows[side], 0.055 * k, _shade(look["shirt"], tone))
        p.capsule(b.elbows[side], b.wrists[side], 0.047 * k, _shade(look["sleeve"], tone))


def _draw_torso(p: Painter, look: Look, b: _Body) -> None:
    k = b.scale
    ux, uy = b.shoulder[0] - b.hip[0], b.shoulder[1] - b.hip[1]
    n = math.hypot(ux, uy)
    ux, uy = ux / n, uy / n
    nx, ny = -uy, ux
    p.ellipse(b.hip, (0.07 * k, 0.05 * k), 0.0, look["trousers"])
    p.polygon([_add(b.shoulder, (nx, ny), 0.073 * k), _add(b.shoulder, (nx, ny), -0.073 * k),
               _add(b.hip, (nx, ny), -0.066 * k), _add(b.hip, (nx, ny), 0.066 * k)], look["shirt"])
    p.capsule(_add(b.shoulder, (nx, ny), 0.04 * k), _add(b.shoulder, (nx, ny), -0.04 * k),
              0.07 * k, look["shirt"])
    neck = _add(b.shoulder, (ux, uy), 0.06 * k)
    p.capsule(b.shoulder, neck, 0.045 * k, look["skin"])
    head = _add(_add(b.shoulder, (ux, uy), 0.125 * k), (0.008, 0.0))
    p.ellipse(head, (0.052 * k, 0.065 * k), 0.0, look["skin"])
    p.ellipse(_add(head, (-0.01 * k, -0.02 * k)), (0.055 * k, 0.048 * k), 0.0, look["hair"])


def draw_person(p: Painter, phase: float, look: Look) -> None:
    _draw_body(p, look, _walking_body(phase))


def draw_rider(p: Painter, phase: float, look: Look) -> None:
    _draw_body(p, look, _riding_body(phase))


def person_palette(rng: np.random.Generator) -> Look:
    skin = _pick(rng, [(160, 185, 225), (120, 150, 200), (85, 110, 160), (60, 80, 115), (140, 170, 215)])
    shirt = _pick(rng, [(40, 40, 200), (180, 90, 30), (40, 160, 40), (220, 220, 220), (30, 30, 30),
                        (30, 190, 220), (120, 40, 120), (150, 110, 60)], 0.15)
    return {
        "skin": skin,
        "hair": _pick(rng, [(20, 25, 35), (40, 60, 90), (60, 110, 170), (150, 150, 150)]),
        "shirt": shirt,
        "sleeve": shirt if rng.random() < 0.5 else skin,
        "trousers": _pick(rng, [(90, 50, 30), (35, 35, 35), (110, 160, 180), (100, 100, 100), (40, 60, 90)]),
        "shoes": _pick(rng, [(25, 25, 25), (200, 200, 200), (30, 50, 80)]),
        # a cyclist's bicycle, drawn from the same look
        "frame": _pick(rng, [(30, 30, 200), (200, 120, 30), (30, 30, 30), (200, 200, 200), (40, 160, 60)]),
    }


# ---------------------------------------------------------------------------------------- vehicles

def draw_bicycle(p: Painter, phase: float, look: Look) -> None:
    tyre, metal, frame = (30, 30, 30), (160, 160, 165), look["frame"]
    spin = 2 * math.pi * phase / 6  # six-fold spokes: a sixth of a turn per cycle looks continuous
    for hub in (_REAR, _FRONT):
        for j in range(6):
            a = spin + j * math.pi / 3
            p.capsule(hub, _add(hub, (math.cos(a), math.sin(a)), _WHEEL_R - 0.02), 0.01, metal)
        p.ring(hub, _WHEEL_R - 0.016, 0.032, tyre)
        p.circle(hub, 0.022, metal)
    joint, head_top, head_bottom = (0.53, 0.53), (0.84, 0.5), (0.87, 0.59)
    p.chain([_REAR, _CRANK, joint, _REAR], 0.024, frame)
    p.chain([_CRANK, head_bottom, head_top, joint], 0.03, frame)
    p.capsule(head_bottom, _FRONT, 0.024, frame)
    p.chain([head_top, (0.85, 0.43), _BAR], 0.022, metal)
    p.capsule(joint, (_SEAT[0], _SEAT[1] + 0.01), 0.022, metal)
    p.ellipse(_SEAT, (0.055, 0.016), -5.0, (35, 35, 35))
    a = 2 * math.pi * phase
    pedal = _add(_CRANK, (math.cos(a), math.sin(a)), _CRANK_R)
    p.circle(_CRANK, 0.035, metal)
    p.capsule(_CRANK, pedal, 0.02, metal)
    p.capsule(_add(pedal, (-0.025, 0.0)), _add(pedal, (0.025, 0.0)), 0.018, (40, 40, 40))


def draw_auto(p: Painter, phase: float, look: Look) -> None:
    bob = 0.006 * math.sin(4 * math.pi * phase)
    up = lambda pts: [(x, y + bob) for x, y in pts]  # noqa: E731
    body, glass = look["paint"], (70, 50, 40)
    p.polygon(up([(0.04, 0.44), (0.12, 0.36), (0.56, 0.33), (0.8, 0.07), (1.52, 0.06), (1.84, 0.32),
                  (2.18, 0.37), (2.27, 0.47), (2.27, 0.74), (0.04, 0.76)]), body)
    p.polygon(up([(0.66, 0.32), (0.84, 0.11), (1.14, 0.11), (1.14, 0.32)]), glass)
    p.polygon(up([(1.21, 0.32), (1.21, 0.11), (1.5, 0.11), (1.74, 0.32)]), glass)
    p.polygon(up([(0.1, 0.5), (2.2, 0.5), (2.2, 0.52), (0.1, 0.52)]), _shade(body, 0.7))
    p.ellipse((2.22, 0.46 + bob), (0.045, 0.03), 0.0, (200, 235, 250))
    p.ellipse((0.08, 0.46 + bob), (0.035, 0.03), 0.0, (40, 40, 210))
    for hub in ((0.52, 0.8), (1.78, 0.8)):
        p.circle(hub, 0.2, (28, 28, 28))
        p.circle(hub, 0.11, (165, 165, 170))
        for j in range(5):
            a = 2 * math.pi * (phase + j / 5)
            p.circle(_add(hub, (math.cos(a), math.sin(a)), 0.06), 0.022, (70, 70, 75))


def auto_palette(rng: np.random.Generator) -> Look:
    return {"paint": _pick(rng, [(30, 30, 190), (150, 80, 20), (230, 230, 230), (170, 170, 175),
                                 (25, 25, 25), (30, 200, 230), (40, 110, 40)], 0.1)}


# ------------------------------------------------------------------------------------------ animals

def draw_bird(p: Painter, phase: float, look: Look) -> None:
    w = math.sin(2 * math.pi * phase)

    def wing(flap: float, dx: float, colour: Colour) -> None:
        p.polygon([(0.9 + dx, 0.5), (0.72 + dx, 0.52 - 0.3 * flap), (0.45 + dx, 0.55 - 0.45 * flap),
                   (0.55 + dx, 0.56 - 0.22 * flap), (0.62 + dx, 0.56)], colour)

    wing(0.85 * w, 0.04, _shade(look["wing"], 0.7))
    p.polygon([(0.48, 0.52), (0.12, 0.45), (0.16, 0.66), (0.48, 0.6)], look["wing"])
    p.ellipse((0.75, 0.55), (0.32, 0.11), -8.0, look["body"])
    p.circle((1.08, 0.47), 0.09, look["head"])
    p.polygon([(1.14, 0.44), (1.32, 0.49), (1.14, 0.52)], (40, 140, 230))
    p.circle((1.1, 0.45), 0.016, (10, 10, 10))
    wing(w, 0.0, look["wing"])


def bird_palette(rng: np.random.Generator) -> Look:
    body = _pick(rng, [(120, 120, 125), (60, 90, 130), (230, 230, 230), (40, 40, 40), (60, 140, 190)], 0.1)
    return {"body": body, "head": _pick(rng, [body, (30, 30, 30), (240, 240, 240)]),
            "wing": _shade(body, rng.uniform(0.6, 0.9))}


@dataclass(frozen=True)
class _Quadruped:
    """Proportions of a four-legged animal in sprite units."""

    body: tuple[Point, tuple[float, float], float]  # centre, semi-axes, angle
    hips: tuple[Point, Point]  # (hind, front) joint of the legs
    legs: tuple[float, float]  # upper and lower leg length
    widths: tuple[float, float]
    swing: float  # degrees
    feet: float  # ground contact y


def _legs(p: Painter, q: _Quadruped, phase: float, colour: Colour, hoof: Colour | None,
          near: bool, dy: float) -> None:
    # Diagonal gait: the near hind leg moves with the far front leg.
    for joint, offset in zip(q.hips, (0.0, 0.5) if near else (0.5, 0.0), strict=True):
        t = 2 * math.pi * (phase + offset)
        upper = q.swing * math.sin(t)
        lower = upper - 1.1 * q.swing * max(0.0, math.cos(t))
        hip = (joint[0] + (0.0 if near else 0.03), joint[1] + dy)
        knee = _add(hip, _dir(upper), q.legs[0])
        foot = _add(knee, _dir(lower), q.legs[1])
        tone = 1.0 if near else 0.72
        p.capsule(hip, knee, q.widths[0], _shade(colour, tone))
        p.capsule(knee, foot, q.widths[1], _shade(colour, tone))
        if hoof is not None:
            p.capsule(foot, _add(foot, _dir(lower), 0.035), q.widths[1] * 1.05, _shade(hoof, tone))


def _body_bob(q: _Quadruped, phase: float) -> float:
    """Vertical shift that keeps the lowest foot on the ground."""
    lowest = 0.0
    for offset in (0.0, 0.5):
        t = 2 * math.pi * (phase + offset)
        upper = q.swing * math.sin(t)
        lower = upper - 1.1 * q.swing * max(0.0, math.cos(t))
        y = max(h[1] for h in q.hips) + q.legs[0] * _dir(upper)[1] + q.legs[1] * _dir(lower)[1]
        lowest = max(lowest, y)
    return q.feet - lowest


_DOG = _Quadruped(((0.7, 0.47), (0.36, 0.14), 0.0), ((0.42, 0.5), (0.98, 0.5)), (0.24, 0.23),
                  (0.09, 0.06), 30.0, 0.97)
_HORSE = _Quadruped(((0.66, 0.42), (0.36, 0.15), -3.0), ((0.38, 0.45), (0.92, 0.45)), (0.26, 0.24),
                    (0.1, 0.045), 24.0, 0.95)
_ELEPHANT = _Quadruped(((0.62, 0.43), (0.42, 0.27), 0.0), ((0.38, 0.58), (0.86, 0.58)), (0.2, 0.19),
                       (0.17, 0.15), 14.0, 0.97)
_GIRAFFE = _Quadruped(((0.43, 0.5), (0.24, 0.1), -12.0), ((0.25, 0.53), (0.55, 0.49)), (0.22, 0.22),
                      (0.05, 0.035), 20.0, 0.98)


def _quadruped(p: Painter, q: _Quadruped, phase: float, look: Look, hoof: Colour | None,
               front: Callable[[float], None], back: Callable[[float], None]) -> None:
    """Far legs, ``back`` parts (tail), body, ``front`` parts (neck, head), near legs."""
    dy = _body_bob(q, phase)
    _legs(p, q, phase, look["coat"], hoof, near=False, dy=dy)
    back(dy)
    centre, axes, angle = q.body
    p.ellipse((centre[0], centre[1] + dy), axes, angle, look["coat"])
    front(dy)
    _legs(p, q, phase, look["coat"], hoof, near=True, dy=dy)


def draw_dog(p: Painter, phase: float, look: Look) -> None:
    wag = 0.05 * math.sin(4 * math.pi * phase)
    coat, dark = look["coat"], look["dark"]

    def front(dy: float) -> None:
        p.capsule((1.0, 0.42 + dy), (1.13, 0.25 + dy), 0.14, coat)
        p.ellipse((1.2, 0.22 + dy), (0.12, 0.09), 10.0, coat)
        p.ellipse((1.33, 0.27 + dy), (0.09, 0.05), 0.0, coat)
        p.circle((1.41, 0.26 + dy), 0.022, (20, 20, 20))
        p.polygon([(1.1, 0.16 + dy), (1.18, 0.13 + dy), (1.1, 0.31 + dy)], dark)

    def back(dy: float) -> None:
        p.chain([(0.37, 0.42 + dy), (0.26, 0.31 + dy), (0.2 + wag, 0.2 + dy)], 0.05, coat)

    _quadruped(p, _DOG, phase, look, None, front, back)


def draw_horse(p: Painter, phase: float, look: Look) -> None:
    sway = 0.03 * math.sin(2 * math.pi * phase)
    coat, dark = look["coat"], look["dark"]

    def front(dy: float) -> None:
        p.polygon([(0.82, 0.34 + dy), (1.0, 0.46 + dy), (1.13, 0.17 + dy), (1.05, 0.07 + dy)], coat)
        p.chain([(0.84, 0.32 + dy), (0.95, 0.18 + dy), (1.04, 0.07 + dy)], 0.04, dark)
        p.ellipse((1.17, 0.15 + dy), (0.15, 0.058), 40.0, coat)
        p.polygon([(1.04, 0.07 + dy), (1.07, 0.01 + dy), (1.1, 0.07 + dy)], coat)

    def back(dy: float) -> None:
        p.chain([(0.31, 0.36 + dy), (0.25, 0.5 + dy), (0.24 + sway, 0.68 + dy)], 0.06, dark)

    _quadruped(p, _HORSE, phase, look, (30, 30, 35), front, back)


def draw_elephant(p: Painter, phase: float, look: Look) -> None:
    sway = 0.05 * math.sin(2 * math.pi * phase)
    coat = look["coat"]

    def front(dy: float) -> None:
        p.circle((1.03, 0.33 + dy), 0.17, coat)
        trunk = [(1.14, 0.4 + dy), (1.21, 0.55 + dy), (1.23 + sway / 2, 0.72 + dy), (1.2 + sway, 0.88 + dy)]
        for (a, b), w in zip(zip(trunk[:-1], trunk[1:], strict=True), (0.1, 0.08, 0.06), strict=True):
            p.capsule(a, b, w, coat)
        p.capsule((1.12, 0.46 + dy), (1.2, 0.53 + dy), 0.026, (225, 235, 235))
        p.ellipse((0.93, 0.37 + dy), (0.12, 0.17), 0.0, _shade(coat, 0.82))
        p.circle((1.08, 0.3 + dy), 0.014, (15, 15, 15))

    def back(dy: float) -> None:
        p.capsule((0.22, 0.36 + dy), (0.18 + sway / 2, 0.56 + dy), 0.025, coat)

    _quadruped(p, _ELEPHANT, phase, look, None, front, back)


def draw_giraffe(p: Painter, phase: float, look: Look) -> None:
    sway = 0.02 * math.sin(2 * math.pi * phase)
    coat, dark = look["coat"], look["dark"]

    def front(dy: float) -> None:
        p.polygon([(0.49, 0.45 + dy), (0.65, 0.47 + dy), (0.79 + sway, 0.11 + dy), (0.73 + sway, 0.08 + dy)],
                  coat)
        p.ellipse((0.82 + sway, 0.09 + dy), (0.085, 0.035), 25.0, coat)
        for dx in (0.0, 0.03):
            p.capsule((0.75 + dx + sway, 0.065 + dy), (0.74 + dx + sway, 0.03 + dy), 0.016, dark)

    def back(dy: float) -> None:
        p.capsule((0.21, 0.47 + dy), (0.16 + sway, 0.63 + dy), 0.02, coat)
        p.ellipse((0.16 + sway, 0.66 + dy), (0.015, 0.03), 0.0, dark)

    _quadruped(p, _GIRAFFE, phase, look, (40, 50, 60), front, back)


def _coat_palette(coats: list[Colour], dark: list[Colour]) -> Callable[[np.random.Generator], Look]:
    def palette(rng: np.random.Generator) -> Look:
        return {"coat": _pick(rng, coats), "dark": _pick(rng, dark)}

    return palette


dog_palette = _coat_palette([(60, 110, 170), (40, 60, 90), (200, 210, 220), (30, 30, 30), (90, 150, 200)],
                            [(20, 25, 35), (50, 70, 100)])
horse_palette = _coat_palette([(40, 70, 120), (30, 45, 70), (60, 100, 160), (170, 170, 175), (25, 25, 30)],
                              [(15, 20, 25), (40, 50, 60)])
elephant_palette = _coat_palette([(125, 125, 130), (110, 115, 125), (140, 135, 135)], [(90, 90, 95)])
giraffe_palette = _coat_palette([(120, 175, 215), (110, 160, 200), (135, 185, 220)], [(40, 60, 90)])
