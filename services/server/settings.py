"""The server's configuration: one typed object built once at start.

Every setting reads the environment variable ``SHADOWTUTOR_<NAME>`` (e.g. ``SHADOWTUTOR_PORT``)
and is also a ``shadowtutor serve --<name>`` flag (``services.cli``), which wins over the
variable. The algorithm parameters are one nested model, :class:`AlgorithmParams`, whose fields
are settings of their own (``--threshold``, ``SHADOWTUTOR_DISTILL_MODE``...:
:mod:`shadowtutor.config.settings_flags`). This module imports neither torch nor FastAPI so
that the CLI stays quick.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from services.server.metrics.fleet import DEFAULT_MAX_EDGES, DEFAULT_RETENTION
from shadowtutor.algorithms.engine_options import Convolution, Objective  # no torch either
from shadowtutor.algorithms.params import AlgorithmParams  # no torch: quick CLI
from shadowtutor.algorithms.sparse_options import SparseChoice, SparseOptions  # no torch either
from shadowtutor.algorithms.update_policy import UpdatePolicy  # no torch either
from shadowtutor.config.rates import parse_rate
from shadowtutor.config.settings_flags import FlatSettings
from shadowtutor.models.precision import DistillPrecision, Precision  # no torch either
from shadowtutor.models.scale import setting as student_size_setting

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
DistillEngine = Literal["auto", "batched", "sequential"]
DistillTail = Literal["auto", "fused", "written"]
CommaList = Annotated[tuple[str, ...] | None, NoDecode]
FrameSize = Annotated[tuple[int, int] | None, NoDecode]
# the longest timeout or interval accepted: beyond it a value is a mistake
MAX_SECONDS = 24 * 3600.0
# the largest message limit accepted (1 GiB)
MAX_MESSAGE_BYTES = 1 << 30


class ServerSettings(FlatSettings):
    """Server configuration; the algorithm parameters are :attr:`algorithm` (flat keywords such as
    ``ServerSettings(threshold=0.7)`` or ``distill_mode="full"`` set its fields)."""

    model_config = SettingsConfigDict(extra="forbid", validate_default=True)
    # checkpoint_secret_file's secret, read once by the validator (never dumped)
    _checkpoint_file_secret: SecretStr | None = PrivateAttr(None)

    # -- network ------------------------------------------------------------------------------
    host: str = Field(
        "127.0.0.1",
        description="interface to listen on; 0.0.0.0 in containers (the Dockerfile sets it)",
    )
    port: int = Field(8000, ge=0, le=65535, description="TCP port")
    log_level: LogLevel = Field("info", description="logging level of the server and uvicorn")
    max_message_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        le=MAX_MESSAGE_BYTES,
        description="largest WebSocket message accepted after a HELLO, in bytes (before it: the "
        "largest HELLO, 65,544 bytes)",
    )
    max_connections: int | None = Field(
        None,
        ge=1,
        description="most WebSocket connections at once; max_sessions of them are kept for "
        "admitted edges, the rest is room for connections whose HELLO is not accepted yet (when "
        "that is full, the oldest idle one makes room, else HTTP 403); default 2 x max_sessions + "
        "16",
    )
    max_unauthenticated_per_source: int = Field(
        8,
        ge=1,
        description="most connections one address may hold before their HELLO is accepted; a new "
        "one closes that address's oldest idle one (server_busy), else it is refused (HTTP 403)",
    )
    hello_timeout: float = Field(
        10.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a new WebSocket may take to send its HELLO",
    )
    ping_interval: float = Field(
        20.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds between WebSocket keepalive pings to each edge (shadowtutor serve)",
    )
    ping_timeout: float = Field(
        20.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a ping's pong may take before the connection counts as dead and is "
        "closed (a cut network is noticed within ping_interval + ping_timeout)",
    )
    send_timeout: float = Field(
        60.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds one message to an edge may wait for the edge to read; past it the "
        "session ends with send_timeout (an edge that stopped reading)",
    )

    # -- security (docs/security.md) ------------------------------------------------------------
    tls_cert: Path | None = Field(
        None, description="PEM certificate (chain) to serve https:// and wss:// with"
    )
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    tls_client_ca: Path | None = Field(
        None, description="PEM CA bundle: require client certificates signed by it (mutual TLS)"
    )
    tokens_file: Path | None = Field(
        None,
        description="JSON file of hashed edge and admin tokens (shadowtutor token new); when set, "
        "every edge needs its token and /v1/sessions an admin bearer token",
    )
    tokens: str | None = Field(
        None,
        description="the tokens file's JSON given inline instead (for secrets in environment "
        "variables)",
    )
    tokens_poll_seconds: float = Field(
        2.0,
        ge=0.1,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="how often the tokens file is checked for changes (SIGHUP reloads it at once)",
    )
    protect_metrics: bool | None = Field(
        None,
        description="/metrics needs an admin bearer token too; default: yes when tokens are "
        "configured. Unprotected under authentication, /metrics leaves out the per-edge series (no "
        "device identities)",
    )
    auth_failure_delay: float = Field(
        1.0,
        ge=0,
        le=60,
        allow_inf_nan=False,
        description="seconds a refused bearer token or HELLO token waits before its answer (a "
        "client looping on bad credentials is slowed to that pace)",
    )
    auth_checks_per_source: int = Field(
        4,
        ge=1,
        description="most administrators' bearer-token checks one address may have queued or "
        "running; more are answered 429 after auth_failure_delay",
    )
    auth_checks_total: int = Field(
        16,
        ge=1,
        description="most bearer-token checks queued or running from all addresses together",
    )
    max_refused_waiting_per_source: int = Field(
        8,
        ge=1,
        description="most connections of one address whose HELLO token was refused and that wait "
        "out auth_failure_delay before their answer (outside the room for unauthenticated "
        "connections); more refusals from it are answered at once",
    )
    max_refused_waiting: int = Field(
        256,
        ge=1,
        description="most refused connections waiting out auth_failure_delay from all addresses",
    )
    checkpoint_secret: SecretStr | None = Field(
        None,
        description="with --ray: a secret (at least 16 characters) that every session checkpoint "
        "is tagged with (HMAC-SHA256); a checkpoint without a matching tag is refused. The same on "
        "every replica",
    )
    checkpoint_secret_file: Path | None = Field(
        None,
        description="with --ray: a file whose first line is the checkpoint secret (a compose or "
        "Kubernetes secret mounted as a file), read by every replica at its start; the Serve "
        "config names the file, never the secret",
    )
    checkpoint_ttl: float = Field(
        3600.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="with --ray: seconds a session's checkpoints stay in the store after its last "
        "update; past that the teaching replicas remove them (a connected edge sends a key frame "
        "at least every max_stride frames, so only edges that left are idle that long)",
    )
    checkpoint_every: int = Field(
        16,
        ge=1,
        le=1_000_000,
        description="with --ray: a session's whole state is stored every this many versions; each "
        "version between stores only what the edge was sent (its journal entry), before the answer "
        "leaves. A session taken over from a journal trains on from the weights the edge holds and "
        "Adam's state of the last whole one",
    )
    forwarded_allow_ips: CommaList = Field(
        None,
        description="comma-separated addresses (or networks, or *) of reverse proxies whose "
        "X-Forwarded-For and X-Forwarded-Proto are trusted (uvicorn's forwarded_allow_ips); "
        "default: none, every connection's address is its peer's",
    )
    key_frame_rate: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="key frames per second an edge may send on average (a quota of teacher time "
        "per edge); 0 = no limit beyond back-pressure",
    )
    key_frame_burst: int = Field(
        120, ge=1, description="key frames an edge may send at once above key_frame_rate"
    )
    edge_log_lines_per_minute: int = Field(
        30,
        ge=1,
        description="log lines one edge's messages may cause per minute (ERROR reports, resync "
        "reasons), in bursts of as many; more are dropped and summed up in one 'suppressed N log "
        "lines' line. Edge text in a log line is escaped and cut to 200 characters",
    )
    resync_rate: float = Field(
        0.1,
        gt=0,
        allow_inf_nan=False,
        description="RESYNC_REQUESTs per second an edge may send on average (each is answered "
        "with full weights, and also takes a key frame's share of key_frame_rate when that is "
        "set); one over gets a non-fatal rate_limited ERROR",
    )
    resync_burst: int = Field(
        2, ge=1, description="RESYNC_REQUESTs an edge may send at once above resync_rate"
    )

    # -- models -------------------------------------------------------------------------------
    teacher: str = Field(
        "maskrcnn", description="teacher backend: maskrcnn, detectron2, onnx, labels or mediapipe"
    )
    device: str = Field(
        "auto", description="device of the teacher and of distillation: auto, cpu, cuda[:N]"
    )
    student: Path | None = Field(
        None,
        description="pre-trained student checkpoint (default: the project's committed student)",
    )
    labels_dir: Path | None = Field(
        None, description="labels teacher: a labels directory or a scene directory"
    )
    weights_path: Path | None = Field(
        None, description="maskrcnn/detectron2 teacher: local weights file"
    )
    onnx_model: Path | None = Field(None, description="onnx teacher: the model file")
    teacher_classes: CommaList = Field(
        None,
        description="comma-separated class names the teacher labels with (default: the backend's "
        "own)",
    )
    teacher_options: dict[str, Any] = Field(
        default_factory=dict,
        description='other teacher options as a JSON object, e.g. {"score_threshold": 0.6}',
    )
    teacher_precision: Precision | None = Field(
        None,
        description="maskrcnn teacher: precision of its forward pass, fp32 (default), tf32 or bf16 "
        "(docs/design/gpu_teacher.md: speed, and how often the labels differ from fp32's)",
    )

    # -- sessions and work --------------------------------------------------------------------
    max_sessions: int = Field(
        16, ge=1, description="most edges connected at once; more get server_busy"
    )
    max_frame_width: int = Field(1920, ge=1, description="widest frame an edge may announce")
    max_frame_height: int = Field(1080, ge=1, description="tallest frame an edge may announce")
    frame_codecs: CommaList = Field(
        None, description="comma-separated frame codecs allowed (default: all)"
    )
    weight_codecs: CommaList = Field(
        None, description="comma-separated weight codecs allowed (default: all)"
    )
    sparse_fraction: float = Field(
        SparseOptions.fraction,
        gt=0.0,
        le=1.0,
        description="sessions with a sparse delta codec (q4sparse+zstd, q8sparse+zstd): the share "
        "of the student's trainable coordinates trained and sent (docs/design/sparse_updates.md)",
    )
    sparse_every: int = Field(
        SparseOptions.every,
        ge=1,
        description="sessions with a sparse delta codec: key frames trained on one coordinate set "
        "before it is chosen again from the accumulated gradient",
    )
    sparse_choice: SparseChoice = Field(
        SparseOptions.choice,
        description="sessions with a sparse delta codec: 'gradient' trains and sends a set chosen "
        "by the accumulated gradient; 'residual' trains every coordinate and sends the "
        "sparse_fraction furthest from what the edge holds (docs/design/sparse_updates.md)",
    )
    update_gating: bool = Field(
        UpdatePolicy.gated,
        description="train on every key frame but send an update only when it pays: when it "
        "scores update_min_gain over the weights the edge holds on its recent key frames, or "
        "update_max_interval key frames went without one (edges that accept it; "
        "docs/design/update_gating.md)",
    )
    update_min_gain: float = Field(
        UpdatePolicy.min_gain,
        ge=0.0,
        le=1.0,
        description="with update_gating: the mIoU gain (0..1, mean over update_window key frames) "
        "that sends an update",
    )
    update_max_interval: int = Field(
        UpdatePolicy.max_interval,
        ge=1,
        description="with update_gating: key frames after which any gain sends an update",
    )
    update_window: int = Field(
        UpdatePolicy.window,
        ge=1,
        description="with update_gating: the recent key frames a gain is measured on",
    )
    downlink_budget: float | None = Field(
        None,
        gt=0,
        description="with update_gating: the bits per second of updates a camera may receive, "
        "kept over 30 s by holding updates back (e.g. 100kbps; an edge's HELLO may name its "
        "own; empty: none)",
    )
    teacher_batch_size: int = Field(
        8, ge=1, description="most queued key frames the teacher labels in one call"
    )
    distill_workers: int = Field(
        2,
        ge=1,
        description="threads running distillation with the sequential engine (sessions in "
        "parallel), and encoding updates with either engine",
    )
    distill_engine: DistillEngine = Field(
        "auto",
        description="how sessions' key frames are distilled: batched (the key frames queued from "
        "all sessions trained together as one batch), sequential (each through its own Distiller "
        "in the thread pool) or auto (batched on a GPU, sequential on a CPU, where the sequential "
        "path's fused tail is faster)",
    )
    distill_batch_size: int = Field(
        64,
        ge=1,
        le=1024,
        description="batched engine: most key frames (one per session) trained as one batch",
    )
    distill_engines: int = Field(
        1,
        ge=1,
        le=8,
        description="batched engine: threads that each train a batch, so that one batch's host "
        "work (Python, autograd, kernel launches) runs beside another's GPU work; each holds its "
        "batch in device memory (docs/design/batched_distillation.md)",
    )
    distill_convolution: Convolution = Field(
        "grouped",
        description="batched engine: how each session's own convolutions run, grouped (one grouped "
        "convolution per layer) or matmul (im2col and one batched matrix product per layer: more "
        "memory); the same function, rounded differently; which is faster depends on the GPU "
        "(docs/design/batched_distillation.md)",
    )
    distill_graphs: bool = Field(
        False,
        description="batched engine on CUDA: replay a batch as one CUDA graph captured for its "
        "shape (group, session count) when the engine thread's previous batch had the same shape, "
        "so that under steady load the host's cost of training a batch (Python, autograd, kernel "
        "launches) is gone; the same arithmetic; each engine thread keeps one captured batch in "
        "GPU memory; no effect elsewhere",
    )
    distill_objective: Objective = Field(
        "eager",
        description="batched engine: how each batch's loss and metric run on its sessions' "
        "logits, eager (one "
        "PyTorch operation at a time) or compiled (torch.compile fuses them into a few kernels "
        "that read the logits "
        "once; the first batch of each frame size compiles, seconds to a minute); the same "
        "function, rounded "
        "differently (docs/design/batched_distillation.md)",
    )
    distill_tail: DistillTail = Field(
        "auto",
        description="the student's tail in distillation: fused (one convolution at a quarter of "
        "the resolution, fewer multiply-adds, more small kernels), written (as the paper's network "
        "is written) or auto (fused on a CPU and under the batched engine, written for the "
        "sequential engine on an accelerator); the same function, rounded differently",
    )
    distill_precision: DistillPrecision = Field(
        "fp32",
        description="arithmetic of distillation: fp32 (IEEE float32, as the paper), tf32 (TF32 "
        "tensor cores for convolutions and matmuls on CUDA; fp32 on a CPU), bf16 (the trained "
        "layers' forward pass in bfloat16 under autocast; weights, Adam, loss and metric float32) "
        "or auto (bf16 on a CUDA device with bfloat16, fp32 elsewhere; opt-in until bf16 holds P-8 "
        "within 0.5 points on held-out scenes too). The TF32 switches are per process: teacher and "
        "distillation overlap only when they want the same (teacher fp32 with distillation fp32 or "
        "bf16; teacher tf32 or bf16 with distillation tf32), otherwise they take turns "
        "(docs/design/training_precision.md)",
    )
    max_pending_key_frames: int = Field(
        4,
        ge=1,
        description="key frames queued per session before the server stops reading from that edge",
    )

    # -- fleet metrics: per-edge series on /metrics from the edges' TELEMETRY
    # (docs/deploy/metrics.md)
    # ------
    edge_report_interval: float = Field(
        10.0,
        ge=0,
        allow_inf_nan=False,
        description="seconds between the TELEMETRY reports each edge is asked for in WELCOME (at "
        "least 1); 0 = ask for none (no per-edge figures beyond sessions)",
    )
    max_edge_series: int = Field(
        DEFAULT_MAX_EDGES,
        ge=0,
        description="most edges with per-edge series on /metrics; past it the edge that "
        "disconnected longest ago gives up its series, or a newcomer gets none (counted)",
    )
    edge_series_retention: float = Field(
        DEFAULT_RETENTION,
        ge=0,
        allow_inf_nan=False,
        description="seconds an edge's series stay on /metrics after its session ended",
    )

    # -- the paper's algorithm parameters (sent to every edge in WELCOME); each field is a setting
    # ----
    algorithm: AlgorithmParams = Field(
        default_factory=AlgorithmParams,
        description="Algorithms 1 and 2's parameters, sent to every edge",
    )
    student_size: FrameSize = Field(
        None,
        description="WIDTHxHEIGHT the student runs at on both sides (key frames and labels resized "
        "to it, its labels upsampled to the frame) for edges that announce none; empty or native: "
        "the frame's size",
    )

    @field_validator("checkpoint_secret")
    @classmethod
    def _long_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("checkpoint_secret must have at least 16 characters")
        return value

    def checkpoint_key(self) -> bytes | None:
        """The checkpoint secret (``checkpoint_secret``, else ``checkpoint_secret_file``'s, read
        when the settings were made) as an HMAC key; None without one."""
        secret = self.checkpoint_secret or self._checkpoint_file_secret
        return None if secret is None else secret.get_secret_value().encode()

    @field_validator("edge_report_interval")
    @classmethod
    def _report_interval(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError("edge_report_interval must be 0 (off) or at least 1 second")
        return value

    @field_validator("student_size", mode="before")
    @classmethod
    def _student_size(cls, value: Any) -> Any:
        return student_size_setting(value)

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator(
        "teacher_classes", "frame_codecs", "weight_codecs", "forwarded_allow_ips", mode="before"
    )
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip()) or None
        return value

    @field_validator(
        "tokens",
        "tokens_file",
        "checkpoint_secret",
        "checkpoint_secret_file",
        "tls_cert",
        "tls_key",
        "tls_client_ca",
        "max_connections",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

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
    def _consistent_security(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("tls_client_ca (mutual TLS) needs tls_cert and tls_key")
        for name in ("tls_cert", "tls_key", "tls_client_ca"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{name}: no such file {path}")
        if self.tls_cert is not None and self.tls_key is not None:
            _check_key_pair(self.tls_cert, self.tls_key)
        if self.tokens_file is not None and self.tokens is not None:
            raise ValueError("give tokens_file or tokens, not both")
        if self.protect_metrics and not self.auth_enabled:
            raise ValueError("protect_metrics needs admin tokens: set tokens_file (or tokens)")
        if self.auth_checks_total < self.auth_checks_per_source:
            raise ValueError("auth_checks_total must be at least auth_checks_per_source")
        if self.checkpoint_secret_file is not None:
            if self.checkpoint_secret is not None:
                raise ValueError("give checkpoint_secret or checkpoint_secret_file, not both")
            self._checkpoint_file_secret = _read_secret_file(self.checkpoint_secret_file)
        if self.max_refused_waiting < self.max_refused_waiting_per_source:
            raise ValueError("max_refused_waiting must be at least max_refused_waiting_per_source")
        return self

    @property
    def metrics_protected(self) -> bool:
        """/metrics needs an administrator's token: as set, else whenever tokens are configured."""
        return self.auth_enabled if self.protect_metrics is None else self.protect_metrics

    @property
    def metrics_carry_edges(self) -> bool:
        """/metrics lists per-edge series (edge ids, agents): when protected, or with authentication
        off."""
        return self.metrics_protected or not self.auth_enabled

    @property
    def auth_enabled(self) -> bool:
        """Tokens are configured: edges and admin endpoints must authenticate."""
        return self.tokens_file is not None or self.tokens is not None

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None

    def connection_limit(self) -> int:
        return self.max_connections or 2 * self.max_sessions + 16

    def unauthenticated_limit(self) -> int:
        """Room for connections whose HELLO is not accepted yet: all but the sessions' share (at
        least 1)."""
        return max(1, self.connection_limit() - self.max_sessions)

    def algorithm_params(self) -> AlgorithmParams:
        """The parameters sent in WELCOME (:attr:`algorithm`)."""
        return self.algorithm

    def allowed_frame_codecs(self) -> tuple[str, ...]:
        from shadowtutor.protocol.codecs import FRAME_CODECS

        return self.frame_codecs or FRAME_CODECS

    def allowed_weight_codecs(self) -> tuple[str, ...]:
        from shadowtutor.protocol.codecs import WEIGHT_CODECS

        return self.weight_codecs or WEIGHT_CODECS

    def sparse_options(self) -> SparseOptions:
        """What sessions with a sparse delta codec train and send."""
        return SparseOptions(self.sparse_fraction, self.sparse_every, self.sparse_choice)

    def update_policy(self) -> UpdatePolicy:
        """When sessions whose edges accept held-back answers get an update."""
        return UpdatePolicy(
            gated=self.update_gating,
            min_gain=self.update_min_gain,
            max_interval=self.update_max_interval,
            window=self.update_window,
            downlink_bps=self.downlink_budget,
        )

    @field_validator("downlink_budget", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        return parse_rate(value) if isinstance(value, str) else value


def _read_secret_file(path: Path) -> SecretStr:
    """The first line of ``path`` (at least 16 characters) as a secret; ValueError naming the file
    and the problem otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ValueError(f"checkpoint_secret_file {path} cannot be read ({reason})") from None
    lines = text.splitlines()
    secret = lines[0].strip() if lines else ""
    if len(secret) < 16:
        raise ValueError(
            f"checkpoint_secret_file {path}: its first line must hold at least 16 characters"
        )
    return SecretStr(secret)


def _check_key_pair(cert: Path, key: Path) -> None:
    """Raise ValueError unless ``cert`` and ``key`` are PEM files that belong together (checked at
    start, before the models load, instead of when uvicorn first needs them)."""
    import ssl

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        reason = exc.reason or exc.strerror or str(exc)
        raise ValueError(
            f"tls_cert {cert} and tls_key {key} are not a PEM certificate and its private key "
            f"({reason})"
        ) from None
    except OSError as exc:
        raise ValueError(f"tls_cert {cert} / tls_key {key}: {exc.strerror or exc}") from None
