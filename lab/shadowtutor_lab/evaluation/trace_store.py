"""Per-frame traces on disk with the configuration that made them, so that a rerun can reuse them."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from shadowtutor_lab.evaluation.harness import SceneEvaluation

log = logging.getLogger(__name__)


def load_trace(path: Path, fingerprint: dict[str, Any]) -> SceneEvaluation | None:
    """The evaluation stored at ``path`` if it was made with ``fingerprint``; else None."""
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text())
        if stored.get("config") != json.loads(json.dumps(fingerprint)):
            log.info("%s: made with another configuration; running again", path)
            return None
        log.info("reusing %s", path)
        return SceneEvaluation.from_dict(stored["evaluation"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("cannot reuse %s (%s); running again", path, exc)
        return None


def store_trace(path: Path, fingerprint: dict[str, Any], evaluation: SceneEvaluation) -> None:
    """Write atomically (an interrupted run leaves no half-written trace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"config": fingerprint, "evaluation": evaluation.to_dict()}))
    tmp.replace(path)
