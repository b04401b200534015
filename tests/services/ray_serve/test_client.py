"""The ingress's side of the teaching deployment without a Ray cluster: ``ServeTeaching`` over a
stand-in for the deployment handle (a real one needs Ray Serve running), which records each
request and answers as a replica would."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from services.ray_serve.client import ServeTeaching  # noqa: E402
from services.ray_serve.requests import Answer, OpenSession, ResumeSession  # noqa: E402
from services.server.connections.handshake import check_hello  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from services.server.teaching.session import EdgeSession, Traffic  # noqa: E402
from shadowtutor.algorithms.params import AlgorithmParams  # noqa: E402
from shadowtutor.protocol.messages import Error, Hello, KeyFrame, Labels, Message, Update, Welcome  # noqa: E402

CLASSES = ("thing", "background")


class RecordingHandle:
    """Stands in for a Serve deployment handle: ``handle.options(...).METHOD.remote(request)``
    records ``(METHOD, request)`` and answers with the next of ``answers``."""

    def __init__(self, *answers: Message) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, Any]] = []

    def options(self, **_: Any) -> RecordingHandle:
        return self

    def __getattr__(self, method: str) -> Any:
        handle = self

        class Method:
            async def remote(self, request: Any) -> Answer:
                handle.requests.append((method, request))
                return Answer(message=handle.answers.pop(0), replica="host:1", sessions=1, replica_id="r1")

        return Method()


def session(mode: str = "distill") -> EdgeSession:
    """A session whose agreement ``check_hello`` settled, with a student size the server did not
    choose (the edge's)."""
    hello = Hello(edge_id="cam", class_names=list(CLASSES), frame_width=64, frame_height=48, mode=mode,
                  weight_codecs=["f16+zstd"], student_size=[32, 24], token="secret")
    agreement = check_hello(hello, ServerSettings(), CLASSES)
    return EdgeSession(hello=hello, agreement=agreement, params=AlgorithmParams(), traffic=Traffic(), distiller=None)


def test_the_agreement_reaches_the_replica_as_the_handshake_settled_it() -> None:
    edge = session()
    welcome = Welcome(session_id=edge.session_id, version=0, frame_codec="raw", weight_codec="f16+zstd",
                      params={}, class_names=list(CLASSES))
    handle = RecordingHandle(welcome, Error(code="internal", message="not held", fatal=False))
    teaching = ServeTeaching(handle)  # type: ignore[arg-type]
    asyncio.run(teaching.open(edge))
    assert asyncio.run(teaching.resume(edge)) is None
    (_, opened), (_, resumed) = handle.requests
    assert isinstance(opened, OpenSession) and isinstance(resumed, ResumeSession)
    assert edge.agreement.student_size == (32, 24) and edge.agreement.weight_codec == "f16+zstd"
    assert opened.agreement == edge.agreement and resumed.agreement == edge.agreement
    assert opened.hello.token is None


def test_the_sessions_statistics_follow_the_replicas_answers() -> None:
    frame = np.zeros((48, 64, 3), np.uint8)
    update = Update(seq=0, base_version=0, version=1, metric=0.75, initial_metric=0.5, steps=3, full=False,
                    tensors=[], teacher_ms=20.0, distill_ms=40.0)
    labels = Labels(seq=0, frame_index=0, codec="png", width=64, height=48, teacher_ms=10.0)
    distilled, naive = session(), session("naive")
    asyncio.run(ServeTeaching(RecordingHandle(update)).key_frame(  # type: ignore[arg-type]
        distilled, KeyFrame(seq=0, frame_index=0, base_version=0, codec="raw", width=64, height=48), frame))
    asyncio.run(ServeTeaching(RecordingHandle(labels)).key_frame(  # type: ignore[arg-type]
        naive, KeyFrame(seq=0, frame_index=0, base_version=0, codec="raw", width=64, height=48), frame))
    info = distilled.info()
    assert distilled.version == 1 and (distilled.stats.labelled, distilled.stats.distilled) == (1, 1)
    assert (info.last_metric, info.mean_steps) == (0.75, 3.0)
    assert info.mean_teacher_ms == pytest.approx(20.0) and info.mean_distill_ms == pytest.approx(40.0)
    assert (naive.stats.labelled, naive.stats.distilled) == (1, 0)
    assert naive.info().mean_teacher_ms == pytest.approx(10.0)
