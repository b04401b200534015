"""Bytes a reconnecting edge exchanges in its handshake: a new session (full WELCOME) against a resumed
one (WELCOME without weights), for the packaged student and the agent's default codecs.

Usage: ``python lab/scripts/resume_bytes.py --out docs/results/resume/bytes.json``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.defaults import DEFAULT_WEIGHT_CODECS
from shadowtutor.protocol.messages import Hello, encode


def measure() -> dict[str, object]:
    """Encoded sizes of the HELLO and WELCOME of a new and of a resumed session."""
    params = AlgorithmParams()
    student = load_student(default_student_path()).model
    hello = Hello(
        edge_id="cam-1",
        class_names=list(LVS_CLASSES),
        frame_width=1280,
        frame_height=720,
        weight_codecs=list(DEFAULT_WEIGHT_CODECS),
    )
    weight_codec = next(c for c in DEFAULT_WEIGHT_CODECS if "delta" not in c and "sparse" not in c)
    session = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="h264", weight_codec=weight_codec),
        params=params,
        traffic=Traffic(),
        distiller=Distiller(student, params, background_index(LVS_CLASSES)),
    )
    new = len(encode(hello)) + len(encode(session.welcome()))
    resume = Hello(**{**hello.__dict__, "resume_session_id": session.session_id, "resume_version": 41})
    session.version = 41
    resumed = len(encode(resume)) + len(encode(session.welcome(resumed=True)))
    return {
        "weight_codec": weight_codec,
        "new_session_bytes": new,
        "resumed_session_bytes": resumed,
        "ratio": resumed / new,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = measure()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
