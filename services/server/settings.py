"""The server's configuration: one typed object built once at start.

Every field reads the environment variable ``SHADOWTUTOR_<FIELD>`` (e.g. ``SHADOWTUTOR_PORT``)
and is also a ``shadowtutor serve --<field>`` flag (``services.cli``), which wins over the
variable. This module imports neither torch nor FastAPI so that the CLI stays quick.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

if TYPE_CHECKING:
    from shadowtutor.algorithms.params import AlgorithmParams

ENV_PREFIX = "SHADOWTUTOR_"
LogLevel = Literal["critical", "error", "warning", "info", "debug"]
CommaList = Annotated[tuple[str, ...] | None, NoDecode]


class ServerSettings(BaseSettings):
    """Server configuration; ``None`` on an algorithm field means the paper's default."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    # -- network ------------------------------------------------------------------------------
    host: str = Field(
        "127.0.0.1", description="interface to listen on; 0.0.0.0 in containers (the Dockerfile sets it)"
    )
    port: int = Field(8000, ge=0, le=65535, description="TCP port")
    log_level: LogLevel = Field("info", description="logging level of the server and uvicorn")
    max_message_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="largest WebSocket message accepted, in bytes"
    )

    # -- models -------------------------------------------------------------------------------
    teacher: str = Field("maskrcnn", description="teacher backend: maskrcnn, detectron2, onnx or labels")
    device: str = Field("auto", description="device of the teacher and of distillation: auto, cpu, cuda[:N]")
    student: Path | None = Field(
        None, description="pre-trained student checkpoint (default: the project's committed student)"
    )
    labels_dir: Path | None = Field(None, description="labels teacher: a labels directory or a scene directory")
    weights_path: Path | None = Field(None, description="maskrcnn/detectron2 teacher: local weights file")
    onnx_model: Path | None = Field(None, description="onnx teacher: the model file")
    teacher_classes: CommaList = Field(
        None, description="comma-separated class names the teacher labels with (default: the backend's own)"
    )
    teacher_options: dict[str, Any] = Field(
        default_factory=dict, description='other teacher options as a JSON object, e.g. {"score_threshold": 0.6}'
    )

    # -- sessions and work --------------------------------------------------------------------
    max_sessions: int = Field(16, ge=1, description="most edges connected at once; more get server_busy")
    max_frame_width: int = Field(1920, ge=1, description="widest frame an edge may announce")
    max_frame_height: int = Field(1080, ge=1, description="tallest frame an edge may announce")
    frame_codecs: CommaList = Field(None, description="comma-separated frame codecs allowed (default: all)")
    weight_codecs: CommaList = Field(None, description="comma-separated weight codecs allowed (default: all)")
    teacher_batch_size: int = Field(8, ge=1, description="most queued key frames the teacher labels in one call")
    distill_workers: int = Field(2, ge=1, description="threads running distillation (sessions in parallel)")
    max_pending_key_frames: int = Field(
        4, ge=1, description="key frames queued per session before the server stops reading from that edge"
    )

    # -- the paper's algorithm parameters (sent to every edge in WELCOME) ---------------------
    distill_mode: Literal["partial", "full"] | None = Field(None, description="partial (default) or full")
    threshold: float | None = Field(None, description="Algorithm 1 THRESHOLD (default 0.8)")
    max_updates: int | None = Field(None, description="Algorithm 1 MAX_UPDATES (default 8)")
    learning_rate: float | None = Field(None, description="Adam learning rate (default 0.01)")
    min_stride: int | None = Field(None, description="Algorithm 2 MIN_STRIDE (default 8)")
    max_stride: int | None = Field(None, description="Algorithm 2 MAX_STRIDE (default 64)")

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("teacher_classes", "frame_codecs", "weight_codecs", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip()) or None
        return value

    @field_validator("teacher_options", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"teacher_options must be a JSON object: {exc}") from None
        return value

    @field_validator("frame_codecs", "weight_codecs")
    @classmethod
    def _known_codecs(cls, value: tuple[str, ...] | None, info: Any) -> tuple[str, ...] | None:
        if value is None:
            return None
        from shadowtutor.protocol.codecs import FRAME_CODECS, WEIGHT_CODECS

        known = FRAME_CODECS if info.field_name == "frame_codecs" else WEIGHT_CODECS
        unknown = [c for c in value if c not in known]
        if unknown:
            raise ValueError(f"unknown codecs {unknown}; choose from {list(known)}")
        return value

    @model_validator(mode="after")
    def _valid_algorithm_params(self) -> ServerSettings:
        self.algorithm_params()  # raises ValueError with the offending parameter
        return self

    def algorithm_params(self) -> AlgorithmParams:
        """The parameters sent in WELCOME (imported lazily: they pull in torch)."""
        from shadowtutor.algorithms.params import AlgorithmParams

        given = {
            "mode": self.distill_mode,
            "threshold": self.threshold,
            "max_updates": self.max_updates,
            "learning_rate": self.learning_rate,
            "min_stride": self.min_stride,
            "max_stride": self.max_stride,
        }
        return AlgorithmParams(**{k: v for k, v in given.items() if v is not None})

    def allowed_frame_codecs(self) -> tuple[str, ...]:
        from shadowtutor.protocol.codecs import FRAME_CODECS

        return self.frame_codecs or FRAME_CODECS

    def allowed_weight_codecs(self) -> tuple[str, ...]:
        from shadowtutor.protocol.codecs import WEIGHT_CODECS

        return self.weight_codecs or WEIGHT_CODECS
