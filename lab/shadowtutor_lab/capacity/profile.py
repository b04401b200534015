"""Server profiles: what one server spends per key frame, measured on a named device, read and checked.

A profile is a JSON object (written by ``shadowtutor bench server --profile-out FILE``)::

    {"schema": "shadowtutor.server_profile/1",
     "device": "NVIDIA H200",                  # the device the figures were measured on (free text)
     "measured": "2026-11-26",                 # ISO date
     "command": "shadowtutor bench server ...",
     "teacher": "maskrcnn",                    # the teacher measured
     "teacher_weights": "random ...",          # optional: the teacher's weights in that run
     "sizes": {"1280x720": {                   # the key frames' size, WxH
         "teacher_ms": 14.2,                   # teacher time per key frame (amortised at the best batch)
         "step_ms": 1.8,                       # time per key frame per distillation step (idem)
         "key_frame_ms": 20.5,                 # teacher + all steps per key frame = 1000 / sustained key frames/s
         "steps": 8,                           # distillation steps per key frame in that measurement
         "sessions": 64}}}                     # concurrent sessions it was measured at

:func:`load_profile` accepts exactly that: the schema string, non-empty strings for the text
fields (``teacher_weights`` may be absent: :data:`WEIGHTS_NOT_STATED`), an ISO date, at least
one size ``WxH`` of positive integers, and every number finite and > 0. Anything else raises
:class:`ProfileError` with one line naming the file and the problem.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

SCHEMA = "shadowtutor.server_profile/1"
SIZE_FIELDS = ("teacher_ms", "step_ms", "key_frame_ms", "steps", "sessions")
TEXT_FIELDS = ("device", "measured", "command", "teacher")
# the teacher's weights of a profile that does not say which it measured
WEIGHTS_NOT_STATED = "not stated in the profile"
_SIZE = re.compile(r"^([0-9]+)x([0-9]+)$")

Size = tuple[int, int]


class ProfileError(ValueError):
    """A server profile cannot be read or breaks the format; the message names the file and the problem."""


@dataclass(frozen=True)
class SizeProfile:
    """What the server spends per key frame of one size (milliseconds)."""

    teacher_ms: float
    step_ms: float
    key_frame_ms: float
    steps: float
    sessions: float

    def key_frame_ms_at(self, mean_steps: float | None) -> float:
        """Server time per key frame with ``mean_steps`` distillation steps each: the measured
        ``key_frame_ms`` when the steps match (or are unknown), else ``teacher_ms + step_ms * mean_steps``."""
        if mean_steps is None or math.isclose(mean_steps, self.steps):
            return self.key_frame_ms
        return self.teacher_ms + self.step_ms * mean_steps


@dataclass(frozen=True)
class ServerProfile:
    path: str
    device: str
    measured: str
    command: str
    teacher: str
    sizes: dict[Size, SizeProfile]
    # which weights the teacher ran with (random weights time the computation, not the labels)
    teacher_weights: str = WEIGHTS_NOT_STATED

    def provenance(self) -> str:
        """One line: the file, the device, the date, the teacher and its weights, and the command
        that made the profile."""
        sessions = sorted({p.sessions for p in self.sizes.values()})
        return (
            f"{Path(self.path).name}: {self.device}, measured {self.measured}, teacher {self.teacher} "
            f"with {self.teacher_weights} weights, {', '.join(f'{s:g}' for s in sessions)} sessions; "
            f"made by `{self.command}`"
        )

    def nearest_size(self, size: Size) -> Size:
        """The measured size closest to ``size`` in pixel count (``size`` itself when measured)."""
        if size in self.sizes:
            return size
        pixels = size[0] * size[1]
        return min(self.sizes, key=lambda s: (abs(math.log(s[0] * s[1] / pixels)), s))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "path": self.path, "device": self.device, "measured": self.measured,
            "command": self.command, "teacher": self.teacher, "teacher_weights": self.teacher_weights,
            "sizes": {f"{w}x{h}": vars(p) for (w, h), p in self.sizes.items()},
        }


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where} must be a finite number > 0, got {json.dumps(value)}")
    return float(value)


def _size_key(key: str) -> Size:
    match = _SIZE.match(key)
    if not match or int(match[1]) <= 0 or int(match[2]) <= 0:
        raise ValueError(f"size {key!r} is not WxH with positive integers")
    return int(match[1]), int(match[2])


def parse_profile(data: Any) -> tuple[str, str, str, str, dict[Size, SizeProfile], str]:
    """The checked fields of a profile object (ValueError naming the first problem)."""
    if not isinstance(data, dict):
        raise ValueError(f"a profile is a JSON object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"schema must be {SCHEMA!r}, got {json.dumps(data.get('schema'))}")
    for name in TEXT_FIELDS:
        if not isinstance(data.get(name), str) or not data[name].strip():
            raise ValueError(f"{name!r} must be a non-empty string, got {json.dumps(data.get(name))}")
    try:
        datetime.date.fromisoformat(data["measured"])
    except ValueError:
        raise ValueError(f"'measured' must be an ISO date (YYYY-MM-DD), got {data['measured']!r}") from None
    sizes = data.get("sizes")
    if not isinstance(sizes, dict) or not sizes:
        raise ValueError("'sizes' must be a non-empty object of WxH -> figures")
    parsed: dict[Size, SizeProfile] = {}
    for key, figures in sizes.items():
        size = _size_key(key)
        if not isinstance(figures, dict):
            raise ValueError(f"sizes[{key!r}] must be an object")
        missing = [name for name in SIZE_FIELDS if name not in figures]
        if missing:
            raise ValueError(f"sizes[{key!r}] lacks {', '.join(missing)}")
        parsed[size] = SizeProfile(**{name: _positive(figures[name], f"sizes[{key!r}].{name}")
                                      for name in SIZE_FIELDS})
    weights = data.get("teacher_weights", WEIGHTS_NOT_STATED)
    if not isinstance(weights, str) or not weights.strip():
        raise ValueError(f"'teacher_weights' must be a non-empty string, got {json.dumps(weights)}")
    return data["device"], data["measured"], data["command"], data["teacher"], parsed, weights


def load_profile(path: str | Path) -> ServerProfile:
    """The profile in ``path``; :class:`ProfileError` (one line: the file and the problem) if it is not one."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ProfileError(f"server profile {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"server profile {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        device, measured, command, teacher, sizes, weights = parse_profile(data)
    except ValueError as exc:
        raise ProfileError(f"server profile {path}: {exc}") from None
    return ServerProfile(str(path), device, measured, command, teacher, sizes, weights)


def shipped_profiles() -> list[ServerProfile]:
    """The profiles packaged in ``lab/shadowtutor_lab/capacity/profiles/`` (sorted by file name)."""
    folder = resources.files("shadowtutor_lab.capacity") / "profiles"
    if not folder.is_dir():
        return []
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".json")), key=lambda f: f.name)
    return [load_profile(Path(str(f))) for f in files]
