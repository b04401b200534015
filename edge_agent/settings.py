"""The agent's configuration: one typed object built once from flags, ``SHADOWTUTOR_*`` variables
and defaults.

Configured like the server (:mod:`shadowtutor.config.settings_flags`): every field ``name``
reads the environment variable ``SHADOWTUTOR_NAME`` and is the flag ``--name`` of
``shadowtutor edge`` (dashes for underscores); a flag wins over the variable, which wins
over the default. A bad value raises :class:`SettingsError` naming the flag or variable.

To add a setting, add one field: ``name: type = Field(default, description="help text")``
(constraints such as ``gt=0`` in ``Field``; checks across fields in :meth:`_consistent`).
This module imports neither torch nor OpenCV, so that the CLI stays quick.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shadowtutor.algorithms.link_budget import LinkBudget
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.config.rates import parse_rate
from shadowtutor.config.settings_flags import ENV_PREFIX, describe_validation_error
from shadowtutor.models.backends import STUDENT_BACKENDS
from shadowtutor.models.scale import setting as student_size_setting
from shadowtutor.protocol.defaults import DEFAULT_FRAME_CODECS, DEFAULT_WEIGHT_CODECS
from shadowtutor.protocol.messages import SessionMode

if TYPE_CHECKING:
    from shadowtutor.acceleration.labellers.registry import LabellerSpec
    from shadowtutor.acceleration.regions.labeller import FlowPathConfig

EDGE_PATH = "/v1/edge"
# pixels: beyond it a frame (3 bytes a pixel) would need gigabytes
MAX_RESIZE_SIDE = 8192
# Comma-separated in flags and variables ("jpeg,raw"), not JSON.
CommaList = Annotated[tuple[str, ...], NoDecode]
FrameSize = Annotated[tuple[int, int] | None, NoDecode]


class SettingsError(ValueError):
    """A setting has a value the agent cannot use; the message names the setting."""


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/shadowtutor``, else ``~/.local/state/shadowtutor`` (the images set
    /data/output/state)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "shadowtutor"


_BYTE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SECOND_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_bytes(raw: str | int) -> int:
    """``500M``, ``2G``, ``1048576`` (binary units; a trailing ``B`` or ``iB`` is allowed)."""
    if isinstance(raw, int):
        return raw
    text = raw.strip().lower().removesuffix("b").removesuffix("i")
    unit = text[-1:] if text[-1:] in _BYTE_UNITS and text[-1:] else ""
    return int(float(text[: len(text) - len(unit)]) * _BYTE_UNITS[unit])


def parse_seconds(raw: str | float) -> float:
    """``90``, ``90s``, ``30m``, ``12h``, ``7d``."""
    if isinstance(raw, (int, float)):
        return float(raw)
    text = raw.strip().lower()
    unit = text[-1:] if text[-1:].isalpha() else ""
    if unit not in _SECOND_UNITS:
        raise ValueError(f"expected seconds with an optional s/m/h/d suffix, got {raw!r}")
    return float(text[: len(text) - len(unit)]) * _SECOND_UNITS[unit]


class EdgeSettings(BaseSettings):
    """Everything the agent needs to run; validated on construction."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, frozen=True
    )

    # -- the server and the camera ------------------------------------------------------------
    server: str = Field(
        description="server URL, ws(s):// or http(s)://HOST:PORT; the path defaults to /v1/edge"
    )
    source: str = Field(
        description="video file, camera index or /dev/videoN, rtsp:// or http:// URL, or a "
        "GStreamer pipeline (has '!')"
    )
    edge_id: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        description="this edge's name in the server and in metrics (default: hostname)",
    )
    mode: SessionMode = Field(
        "distill", description="distill (ShadowTutor) or naive (every frame labelled by the server)"
    )

    # -- security (docs/security.md) ------------------------------------------------------------
    token: str | None = Field(
        None,
        repr=False,
        description="this edge's token (shadowtutor token new); prefer --token-file",
    )
    token_file: Path | None = Field(
        None, description="file holding this edge's token, reread at every connection"
    )
    ca_file: Path | None = Field(
        None,
        description="PEM CA bundle that signs the server's certificate (default: the system's)",
    )
    client_cert: Path | None = Field(
        None, description="PEM client certificate, for a server that requires one (mutual TLS)"
    )
    client_key: Path | None = Field(None, description="PEM private key of client_cert")

    # -- protocol -------------------------------------------------------------------------------
    class_names: CommaList = Field(
        LVS_CLASSES, description="comma-separated classes; must equal the server's"
    )
    frame_codecs: CommaList = Field(
        DEFAULT_FRAME_CODECS, description="key-frame codecs offered, in preference order"
    )
    frame_quality: int | None = Field(
        None,
        ge=1,
        le=100,
        description="quality of jpeg and webp key frames, 1..100 (default: the codec's own; "
        "docs/protocol.md)",
    )
    key_frame_scale: float = Field(
        1.0,
        gt=0,
        le=1,
        description="distill mode: key frames go to the server at this share of the frame's sides, "
        "each rounded to an even number (1: the frame's size; docs/design/key-frame-stream.md)",
    )
    weight_codecs: CommaList = Field(
        DEFAULT_WEIGHT_CODECS,
        description="weight codecs offered, in preference order (a delta codec needs a float one "
        "too)",
    )

    # -- the link's byte budget (shadowtutor.algorithms.link_budget) -----------------------------
    uplink_budget: float | None = Field(
        None,
        gt=0,
        description="most bits per second this camera sends, kept over budget_window by sending "
        "key frames less often (e.g. 200kbps; empty: no budget; the model download at connection "
        "is not counted)",
    )
    downlink_budget: float | None = Field(
        None,
        gt=0,
        description="most bits per second this camera receives, kept the same way (e.g. 200kbps)",
    )
    budget_window: float = Field(
        30.0,
        ge=1,
        description="seconds of the source's time over which the budgets are kept (s/m/h suffixes)",
    )

    # -- the student and the frames -------------------------------------------------------------
    backend: str = Field(
        "auto",
        description="student inference: onnx-trt, onnx-cuda (ONNX Runtime's TensorRT, CUDA "
        "provider: "
        "GPU, onnxruntime-gpu), cuda (PyTorch, GPU), onnx (ONNX Runtime, CPU), torch (fast CPU "
        "graph), reference, "
        "or auto (the fastest available: onnx-cuda, cuda, onnx, torch)",
    )
    resize: FrameSize = Field(None, description="resize every frame to WIDTHxHEIGHT")
    student_size: FrameSize = Field(
        None,
        description="WIDTHxHEIGHT the student runs at (each frame resized to it, its labels "
        "upsampled to the frame; the server's copy trains at the same size); empty: the server's "
        "choice (native by default)",
    )
    max_frames: int | None = Field(None, gt=0, description="stop after this many frames")
    max_fps: float | None = Field(
        None,
        gt=0,
        description="process at most this many frames per second (play a file like a camera)",
    )

    # -- timing and reconnection ----------------------------------------------------------------
    wait_timeout: float = Field(
        10.0,
        gt=0,
        description="longest wait, s, for an update at MIN_STRIDE (and for a label map in naive "
        "mode)",
    )
    startup_timeout: float = Field(
        10.0,
        gt=0,
        description="longest wait, s, at start for the server: then distill mode labels with its "
        "own "
        "student (the last weights held, or the packaged one) and joins later; naive mode fails",
    )
    ping_interval: float = Field(
        20.0, gt=0, description="seconds between keepalive pings to the server"
    )
    ping_timeout: float = Field(
        20.0,
        gt=0,
        description="seconds a ping's pong may take before the connection counts as dead and is "
        "reconnected (a cut network is noticed within ping_interval + ping_timeout)",
    )
    reconnect_min: float = Field(
        0.5, gt=0, description="first reconnect delay, s (doubles per failure, jittered)"
    )
    reconnect_max: float = Field(15.0, gt=0, description="cap of the reconnect delay, s")
    source_retries: int = Field(
        10, ge=0, description="reopen attempts for a live source that dropped, before giving up"
    )

    # -- outputs --------------------------------------------------------------------------------
    output_dir: Path | None = Field(
        None, description="directory for summary.json, labels/NNNNNN.png and overlay.mp4"
    )
    overlay: bool = Field(
        False,
        description="write overlay.mp4: label colours blended over the frames (needs output dir)",
    )
    # 0.0.0.0 so that a Prometheus outside the container or device can scrape the exporter.
    metrics_host: str = Field(
        "0.0.0.0", description="address of the Prometheus exporter (127.0.0.1 keeps it local)"
    )
    metrics_port: int = Field(
        9108, ge=0, le=65535, description="port of the Prometheus exporter; 0 disables it"
    )
    linger: float = Field(
        0.0,
        ge=0,
        description="keep /metrics up this many seconds after the run (for a last scrape)",
    )

    # -- field operations: label retention, offline state -----------------------------------------
    save_labels: bool = Field(
        False,
        description="write every frame's label map as labels/NNNNNN.png (needs output dir; bounded "
        "by labels_max_*)",
    )
    labels_max_bytes: int = Field(
        1024**3,
        ge=0,
        description="most bytes of label maps kept (K/M/G suffixes; 0 = no bound): the oldest are "
        "removed first",
    )
    labels_max_age: float = Field(
        0.0,
        ge=0,
        description="oldest label map kept, seconds (s/m/h/d suffixes; 0 = no bound): older ones "
        "are removed",
    )
    state_dir: Path | None = Field(
        default_factory=default_state_dir,
        description="where the last weights held are kept, to label with them when the next start "
        "is offline ('' = off; default $XDG_STATE_HOME/shadowtutor or ~/.local/state/shadowtutor)",
    )
    state_save_interval: float = Field(
        60.0, ge=0, description="least seconds between two saves of the held weights to state_dir"
    )

    # -- change-based inference (static cameras; shadowtutor.acceleration.change_based) ----------
    change_based: bool = Field(
        False,
        description="label static-camera frames change-based: recompute only what changed since "
        "the last frames (CPU; frames that changed too much go to the backend, torch or onnx)",
    )
    change_thresholds: Path | None = Field(
        None,
        description="change-threshold file (shadowtutor change-based calibrate); default: the "
        "packaged student's",
    )
    change_scale: float = Field(
        1.0,
        ge=0,
        description="multiply every change threshold: above 1 faster and less exact, 0 exact",
    )

    # -- regions / flow path and the edge cluster (DVSNet; shadowtutor.acceleration.regions) ---
    flow_path: bool = Field(
        False,
        description="label frames region by region: a region is either segmented or warped from "
        "its last segmentation by optical flow (DVSNet)",
    )
    regions: int = Field(
        4, description="regions per frame for the flow path (a grid as square as possible)"
    )
    key_interval: int = Field(
        3,
        ge=0,
        description="segment every K-th frame and warp the frames between (at the same speed this "
        "keeps more mIoU than the decision network); 0: the decision network picks each frame's "
        "path (--decision-threshold or --decision-budget)",
    )
    decision_threshold: float = Field(
        0.97,
        description="with --key-interval 0: the confidence score (predicted agreement of flow and "
        "student, 0..1) the flow path needs (DVSNet's rule)",
    )
    decision_budget: float | None = Field(
        None,
        description="with --key-interval 0, instead of the threshold: the predicted loss (1 - "
        "score) a key may accumulate over the frames warped from it, e.g. 0.05",
    )
    max_key_age: int = Field(
        4,
        description="with --key-interval 0: frames a region's segmentation may be warped before it "
        "is segmented again",
    )
    decision_network: Path | None = Field(
        None,
        description="with --key-interval 0: the decision network file (default: the packaged one)",
    )
    cluster: str | None = Field(
        None,
        description="Ray cluster HOST:PORT (or auto) whose worker nodes label the regions; start "
        "it with `ray start --head` here, join workers with `ray start --address HOST:PORT`; uses "
        "the flow-path settings",
    )

    acceleration_trial: int = Field(
        60,
        ge=0,
        description="frames over which change_based, flow_path or cluster is timed against the "
        "plain student on the default backend (auto); measured slower, it steps aside and the "
        "plain student labels the rest of the run (0: keep it whatever it costs)",
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError(describe_validation_error(exc, values)) from None

    # -- parsing (the same for flags and variables) ---------------------------------------------
    @field_validator(
        "token",
        "token_file",
        "ca_file",
        "client_cert",
        "client_key",
        "output_dir",
        "frame_quality",
        "max_frames",
        "max_fps",
        "state_dir",
        "change_thresholds",
        "decision_network",
        "decision_budget",
        "cluster",
        "uplink_budget",
        "downlink_budget",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("labels_max_bytes", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> Any:
        return parse_bytes(value) if isinstance(value, str) else value

    @field_validator("labels_max_age", "budget_window", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        return parse_seconds(value) if isinstance(value, str) else value

    @field_validator("uplink_budget", "downlink_budget", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        return parse_rate(value) if isinstance(value, str) else value

    def link_budget(self) -> LinkBudget:
        """The budgets as the client loop's gate keeps them (inactive when neither is set)."""
        return LinkBudget(self.uplink_budget, self.downlink_budget, self.budget_window)

    @field_validator("class_names", "frame_codecs", "weight_codecs", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return value

    @field_validator("resize", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if isinstance(value, str):
            if not value.strip():
                return None
            width, sep, height = value.lower().partition("x")
            if not sep:
                raise ValueError(f"expected WIDTHxHEIGHT, got {value!r}")
            return width, height
        return value

    # -- checks ---------------------------------------------------------------------------------
    @field_validator("server")
    @classmethod
    def _server_url(cls, value: str) -> str:
        return normalise_server_url(value)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if not value:
            raise ValueError(
                "source is empty; give a video file, camera index, URL or GStreamer pipeline"
            )
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if value not in STUDENT_BACKENDS:
            raise ValueError(f"backend must be one of {list(STUDENT_BACKENDS)}, got {value!r}")
        return value

    @field_validator("class_names")
    @classmethod
    def _classes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) < 2 or len(set(value)) != len(value):
            raise ValueError(f"class_names must be at least two distinct names, got {list(value)}")
        return value

    @field_validator("frame_codecs", "weight_codecs")
    @classmethod
    def _codecs(cls, offered: tuple[str, ...], info: Any) -> tuple[str, ...]:
        # imports torch: not at CLI start
        from shadowtutor.protocol.codecs import FRAME_CODECS, WEIGHT_CODECS

        known = FRAME_CODECS if info.field_name == "frame_codecs" else WEIGHT_CODECS
        if not offered:
            raise ValueError(f"{info.field_name} is empty")
        unknown = [c for c in offered if c not in known]
        if unknown:
            raise ValueError(f"unknown codec(s) {unknown}; known: {list(known)}")
        return offered

    @field_validator("student_size", mode="before")
    @classmethod
    def _student_size(cls, value: Any) -> Any:
        return student_size_setting(value)

    @field_validator("resize")
    @classmethod
    def _positive_size(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and min(value) <= 0:
            raise ValueError(f"resize must be positive, got {value}")
        if value is not None and max(value) > MAX_RESIZE_SIDE:
            raise ValueError(
                f"resize {value[0]}x{value[1]}: each side is at most {MAX_RESIZE_SIDE} pixels"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EdgeSettings:
        if self.reconnect_max < self.reconnect_min:
            raise ValueError(
                f"reconnect_max ({self.reconnect_max}) is below reconnect_min "
                f"({self.reconnect_min})"
            )
        if self.overlay and self.output_dir is None:
            raise ValueError("overlay needs output_dir")
        if self.mode == "naive" and self.link_budget().active:
            raise ValueError(
                "uplink_budget and downlink_budget need distill mode (naive mode sends every frame)"
            )
        self._check_accelerations()
        self._check_change_based()
        self._check_flow_path()
        if self.token is not None and self.token_file is not None:
            raise ValueError("give token or token_file, not both")
        # a missing or empty token file fails now, not at the first connection
        self.read_token()
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("client_cert and client_key go together: give both or neither")
        tls_files = {
            "ca_file": self.ca_file,
            "client_cert": self.client_cert,
            "client_key": self.client_key,
        }
        for name, path in tls_files.items():
            if path is not None and not path.is_file():
                raise ValueError(f"{name}: no such file {path}")
        given = [name for name, path in tls_files.items() if path is not None]
        if given and not self.server.startswith("wss://"):
            raise ValueError(
                f"{', '.join(given)} need a wss:// (or https://) server, got {self.server}"
            )
        return self

    def _check_change_based(self) -> None:
        if not self.change_based:
            if self.change_thresholds is not None:
                raise ValueError("change_thresholds needs change_based")
            return
        # imports torch
        from shadowtutor.acceleration.change_based.thresholds import ThresholdFileError

        try:
            # a bad file or scale fails now
            self.change_based_options().thresholds()
        except (ThresholdFileError, ValueError) as exc:
            raise ValueError(f"change_based: {exc}") from None

    def _check_flow_path(self) -> None:
        from shadowtutor.acceleration.regions.grid import RegionConfigError

        try:
            self.flow_path_config()
        except RegionConfigError as exc:
            raise ValueError(str(exc)) from None
        if self.decision_network is not None and not self.decision_network.is_file():
            raise ValueError(f"decision_network: no such file {self.decision_network}")
        decision = sorted(
            {"decision_threshold", "decision_budget", "decision_network"} & self.model_fields_set
        )
        if self.key_interval and decision:
            raise ValueError(
                f"{', '.join(decision)} apply when the decision network picks the path: "
                "set key_interval to 0"
            )
        if self.cluster is not None and ":" not in self.cluster and self.cluster != "auto":
            raise ValueError(
                f"cluster must be HOST:PORT of a Ray cluster or auto, got {self.cluster!r}"
            )

    def _check_accelerations(self) -> None:
        """The exclusions the labeller registry declares (which accelerations, backends and sizes
        combine)."""
        from shadowtutor.acceleration.labellers.registry import check

        on = {name for name in ("change_based", "flow_path") if getattr(self, name)}
        on |= {"cluster"} if self.cluster is not None else set()
        check(on, self.backend, student_size=self.student_size is not None)

    def flow_path_config(self) -> FlowPathConfig | None:
        """The flow path's configuration (validated even when it is off), or None when neither the
        flow path nor a cluster (whose workers follow it) is on."""
        from shadowtutor.acceleration.regions.labeller import FlowPathConfig

        config = FlowPathConfig(
            threshold=self.decision_threshold,
            regions=self.regions,
            max_key_age=self.max_key_age,
            network=self.decision_network,
            budget=self.decision_budget,
            interval=self.key_interval or None,
        )
        return config if self.flow_path or self.cluster is not None else None

    def labeller_spec(self) -> LabellerSpec:
        """The student and accelerations these settings ask for, as the labeller registry builds
        them."""
        from shadowtutor.acceleration.labellers.registry import LabellerSpec

        return LabellerSpec(
            backend=self.backend,
            change_based=self.change_based_options(),
            flow_path=self.flow_path_config(),
            cluster=self.cluster,
            flow_path_on=self.flow_path,
            trial_frames=self.acceleration_trial,
        )

    def change_based_options(self) -> Any:
        """The student's :class:`~shadowtutor.acceleration.change_based.backend.ChangeBasedOptions`,
        or None."""
        if not self.change_based:
            return None
        from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions

        return ChangeBasedOptions(thresholds_file=self.change_thresholds, scale=self.change_scale)

    def read_token(self) -> str | None:
        """The token to send in HELLO: ``token``, or the content of ``token_file`` (reread each
        call)."""
        if self.token_file is None:
            return self.token
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise SettingsError(
                f"token_file: cannot read {self.token_file}: {exc.strerror or exc}"
            ) from None
        if not token:
            raise SettingsError(f"token_file: {self.token_file} is empty")
        return token

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON has them; the token is never written out."""
        out = self.model_dump(mode="json")
        out["token"] = "***" if self.token else None
        return out


def normalise_server_url(url: str) -> str:
    """``http(s)`` becomes ``ws(s)``; an empty path becomes ``/v1/edge``."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss") or not parts.hostname:
        raise SettingsError(
            f"server must be a ws://, wss://, http:// or https:// URL with a host, got {url!r}"
        )
    path = parts.path if parts.path not in ("", "/") else EDGE_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))
