"""The agent's configuration: one typed object built once from flags, ``SHADOWTUTOR_*`` variables and defaults.

Every field ``name`` can be set by the flag ``--name`` (dashes for underscores) or the
environment variable ``SHADOWTUTOR_NAME``; a flag wins over the environment, which wins
over the default. Values from both places go through the same parsers, so a bad value
gives the same :class:`SettingsError` wherever it came from.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.protocol.defaults import DEFAULT_FRAME_CODECS, DEFAULT_WEIGHT_CODECS

if TYPE_CHECKING:
    from shadowtutor.acceleration.regions.labeller import FlowPathConfig

ENV_PREFIX = "SHADOWTUTOR_"
EDGE_PATH = "/v1/edge"
MODES = ("distill", "naive")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """A setting has a value the agent cannot use; the message names the setting."""


_REQUIRED = object()


def _setting(default: Any, help_text: str, secret: bool = False) -> Any:
    """A settings field with its help text (the CLI builds its flags from these); a secret stays out of repr."""
    if default is _REQUIRED:
        return field(metadata={"help": help_text})
    if callable(default):
        return field(default_factory=default, metadata={"help": help_text})
    return field(default=default, metadata={"help": help_text}, repr=not secret)


@dataclass(frozen=True)
class EdgeSettings:
    """Everything the agent needs to run; validated on construction."""

    server: str = _setting(_REQUIRED, "server URL, ws(s):// or http(s)://HOST:PORT; the path defaults to /v1/edge")
    source: str = _setting(
        _REQUIRED, "video file, camera index or /dev/videoN, rtsp:// or http:// URL, or a GStreamer pipeline (has '!')"
    )
    edge_id: str = _setting(socket.gethostname, "this edge's name in the server and in metrics (default: hostname)")
    token: str | None = _setting(None, "this edge's token (shadowtutor token new); prefer --token-file", secret=True)
    token_file: Path | None = _setting(None, "file holding this edge's token, reread at every connection")
    ca_file: Path | None = _setting(None, "PEM CA bundle that signs the server's certificate (default: the system's)")
    client_cert: Path | None = _setting(None, "PEM client certificate, for a server that requires one (mutual TLS)")
    client_key: Path | None = _setting(None, "PEM private key of client_cert")
    mode: str = _setting("distill", "distill (ShadowTutor) or naive (every frame labelled by the server)")
    class_names: tuple[str, ...] = _setting(LVS_CLASSES, "comma-separated classes; must equal the server's")
    frame_codecs: tuple[str, ...] = _setting(DEFAULT_FRAME_CODECS, "key-frame codecs offered, in preference order")
    frame_quality: int | None = _setting(
        None, "quality of jpeg and webp key frames, 1..100 (default: the codec's own; docs/protocol.md)"
    )
    weight_codecs: tuple[str, ...] = _setting(
        DEFAULT_WEIGHT_CODECS, "weight codecs offered, in preference order (a delta codec needs a float one too)"
    )
    backend: str = _setting(
        "auto", "student inference: cuda (GPU), torch (fast CPU graph), onnx (ONNX Runtime, CPU), reference, "
        "or auto (cuda when there is a GPU, else torch)"
    )
    resize: tuple[int, int] | None = _setting(None, "resize every frame to WIDTHxHEIGHT")
    max_frames: int | None = _setting(None, "stop after this many frames")
    max_fps: float | None = _setting(None, "process at most this many frames per second (play a file like a camera)")
    wait_timeout: float = _setting(
        10.0, "longest wait, s, for an update at MIN_STRIDE (and for a label map in naive mode)"
    )
    startup_timeout: float = _setting(60.0, "longest wait, s, for the server's first WELCOME before failing")
    ping_interval: float = _setting(20.0, "seconds between keepalive pings to the server")
    ping_timeout: float = _setting(
        20.0, "seconds a ping's pong may take before the connection counts as dead and is reconnected "
        "(a cut network is noticed within ping_interval + ping_timeout)"
    )
    reconnect_min: float = _setting(0.5, "first reconnect delay, s (doubles per failure, jittered)")
    reconnect_max: float = _setting(15.0, "cap of the reconnect delay, s")
    source_retries: int = _setting(10, "reopen attempts for a live source that dropped, before giving up")
    output_dir: Path | None = _setting(None, "directory for summary.json, labels/NNNNNN.png and overlay.mp4")
    save_labels: bool = _setting(True, "write every frame's label map as labels/NNNNNN.png (needs output dir)")
    overlay: bool = _setting(False, "write overlay.mp4: label colours blended over the frames (needs output dir)")
    # 0.0.0.0 so that a Prometheus outside the container or device can scrape the exporter.
    metrics_host: str = _setting("0.0.0.0", "address of the Prometheus exporter (127.0.0.1 keeps it local)")
    metrics_port: int = _setting(9108, "port of the Prometheus exporter; 0 disables it")
    linger: float = _setting(0.0, "keep /metrics up this many seconds after the run (for a last scrape)")
    # --- regions / flow path ---
    flow_path: bool = _setting(
        False, "label frames region by region: a region the decision network trusts is warped from its last "
        "segmentation by optical flow instead of segmented (seed 004 / DVSNet)"
    )
    regions: int = _setting(4, "regions per frame for the flow path (a grid as square as possible)")
    decision_threshold: float = _setting(
        0.93, "confidence score (predicted agreement of flow and student, 0..1) the flow path needs"
    )
    max_key_age: int = _setting(4, "frames a region's segmentation may be warped before it is segmented again")
    decision_network: Path | None = _setting(None, "decision network file (default: the packaged one)")
    cluster: str | None = _setting(
        None, "Ray cluster HOST:PORT (or auto) whose worker nodes label the regions (seed 004); start it with "
        "`ray start --head` here, join workers with `ray start --address HOST:PORT`; uses the flow-path settings"
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "server", normalise_server_url(self.server))
        if not self.source:
            raise SettingsError("source is empty; give a video file, camera index, URL or GStreamer pipeline")
        if not self.edge_id:
            raise SettingsError("edge_id is empty")
        _check_choice("mode", self.mode, MODES)
        from edge_agent.runtime import BACKENDS  # imports torch: not at CLI start

        _check_choice("backend", self.backend, BACKENDS)
        if len(self.class_names) < 2 or len(set(self.class_names)) != len(self.class_names):
            raise SettingsError(f"class_names must be at least two distinct names, got {list(self.class_names)}")
        from shadowtutor.protocol.codecs import FRAME_CODECS, WEIGHT_CODECS  # imports torch: not at CLI start

        _check_codecs("frame_codecs", self.frame_codecs, FRAME_CODECS)
        _check_codecs("weight_codecs", self.weight_codecs, WEIGHT_CODECS)
        if self.frame_quality is not None and not 1 <= self.frame_quality <= 100:
            raise SettingsError(f"frame_quality must lie in 1..100, got {self.frame_quality}")
        if self.resize is not None and min(self.resize) <= 0:
            raise SettingsError(f"resize must be positive, got {self.resize}")
        if self.max_frames is not None and self.max_frames <= 0:
            raise SettingsError(f"max_frames must be positive, got {self.max_frames}")
        if self.max_fps is not None and self.max_fps <= 0:
            raise SettingsError(f"max_fps must be positive, got {self.max_fps}")
        for name in ("wait_timeout", "startup_timeout", "ping_interval", "ping_timeout", "reconnect_min"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.reconnect_max < self.reconnect_min:
            raise SettingsError(f"reconnect_max ({self.reconnect_max}) is below reconnect_min ({self.reconnect_min})")
        if self.source_retries < 0 or self.linger < 0:
            raise SettingsError("source_retries and linger must be >= 0")
        if not 0 <= self.metrics_port <= 65535:
            raise SettingsError(f"metrics_port must lie in 0..65535 (0 disables), got {self.metrics_port}")
        if self.overlay and self.output_dir is None:
            raise SettingsError("overlay needs output_dir")
        self._check_security()
        self._check_flow_path()

    def _check_flow_path(self) -> None:
        from shadowtutor.acceleration.regions.grid import RegionConfigError

        try:
            self.flow_path_config()
        except RegionConfigError as exc:
            raise SettingsError(str(exc)) from None
        if self.decision_network is not None and not self.decision_network.is_file():
            raise SettingsError(f"decision_network: no such file {self.decision_network}")
        if self.cluster is not None and ":" not in self.cluster and self.cluster != "auto":
            raise SettingsError(f"cluster must be HOST:PORT of a Ray cluster or auto, got {self.cluster!r}")

    def flow_path_config(self) -> FlowPathConfig | None:
        """The flow path's configuration (validated even when it is off), or None when it is off."""
        from shadowtutor.acceleration.regions.labeller import FlowPathConfig

        config = FlowPathConfig(self.decision_threshold, self.regions, self.max_key_age, self.decision_network)
        return config if self.flow_path else None

    def _check_security(self) -> None:
        if self.token is not None and self.token_file is not None:
            raise SettingsError("give token or token_file, not both")
        if self.token is not None and not self.token.strip():
            raise SettingsError("token is empty")
        self.read_token()  # a missing or empty token file fails now, not at the first connection
        if (self.client_cert is None) != (self.client_key is None):
            raise SettingsError("client_cert and client_key go together: give both or neither")
        tls_files = {"ca_file": self.ca_file, "client_cert": self.client_cert, "client_key": self.client_key}
        for name, path in tls_files.items():
            if path is not None and not path.is_file():
                raise SettingsError(f"{name}: no such file {path}")
        given = [name for name, path in tls_files.items() if path is not None]
        if given and not self.server.startswith("wss://"):
            raise SettingsError(f"{', '.join(given)} need a wss:// (or https://) server, got {self.server}")

    def read_token(self) -> str | None:
        """The token to send in HELLO: ``token``, or the content of ``token_file`` (reread each call)."""
        if self.token_file is None:
            return self.token
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise SettingsError(f"token_file: cannot read {self.token_file}: {exc.strerror or exc}") from None
        if not token:
            raise SettingsError(f"token_file: {self.token_file} is empty")
        return token

    @classmethod
    def from_sources(cls, flags: Mapping[str, Any], environ: Mapping[str, str]) -> EdgeSettings:
        """Build from parsed flags (``None`` = not given) over ``SHADOWTUTOR_*`` variables over defaults."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = flags.get(f.name)
            origin = f"--{f.name.replace('_', '-')}"
            if raw is None:
                raw, origin = environ.get(env_var(f.name)), env_var(f.name)
            if raw is None:
                continue
            try:
                values[f.name] = _PARSERS.get(f.name, str)(raw)
            except (TypeError, ValueError) as exc:
                raise SettingsError(f"{origin}: {exc}") from None
        for required in ("server", "source"):
            if required not in values:
                raise SettingsError(f"{required} is required: pass --{required} or set {env_var(required)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("output_dir", "token_file", "ca_file", "client_cert", "client_key", "decision_network"):
            out[name] = str(out[name]) if out[name] else None
        out["token"] = "***" if self.token else None  # never written out
        return out


def env_var(name: str) -> str:
    return ENV_PREFIX + name.upper()


def normalise_server_url(url: str) -> str:
    """``http(s)`` becomes ``ws(s)``; an empty path becomes ``/v1/edge``."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss") or not parts.hostname:
        raise SettingsError(f"server must be a ws://, wss://, http:// or https:// URL with a host, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else EDGE_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SettingsError(f"{name} must be one of {list(choices)}, got {value!r}")


def _check_codecs(name: str, offered: tuple[str, ...], known: tuple[str, ...]) -> None:
    if not offered:
        raise SettingsError(f"{name} is empty")
    unknown = [c for c in offered if c not in known]
    if unknown:
        raise SettingsError(f"{name}: unknown codec(s) {unknown}; known: {list(known)}")


def _parse_bool(raw: str | bool) -> bool:
    if isinstance(raw, bool):
        return raw
    text = raw.strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise ValueError(f"expected a boolean (1/0, true/false, yes/no, on/off), got {raw!r}")


def _parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _parse_size(raw: str) -> tuple[int, int] | None:
    if raw.strip() == "":
        return None
    width, sep, height = raw.lower().partition("x")
    if not sep:
        raise ValueError(f"expected WIDTHxHEIGHT, got {raw!r}")
    return int(width), int(height)


def _parse_optional_int(raw: str) -> int | None:
    return int(raw) if raw.strip() else None


def _parse_optional_float(raw: str) -> float | None:
    return float(raw) if raw.strip() else None


def _parse_optional_path(raw: str) -> Path | None:
    return Path(raw) if raw.strip() else None


def _parse_optional_str(raw: str) -> str | None:
    return raw.strip() or None


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "class_names": _parse_list,
    "frame_codecs": _parse_list,
    "weight_codecs": _parse_list,
    "frame_quality": _parse_optional_int,
    "resize": _parse_size,
    "max_frames": _parse_optional_int,
    "max_fps": _parse_optional_float,
    "wait_timeout": float,
    "startup_timeout": float,
    "ping_interval": float,
    "ping_timeout": float,
    "reconnect_min": float,
    "reconnect_max": float,
    "source_retries": int,
    "output_dir": _parse_optional_path,
    "token": _parse_optional_str,
    "token_file": _parse_optional_path,
    "ca_file": _parse_optional_path,
    "client_cert": _parse_optional_path,
    "client_key": _parse_optional_path,
    "save_labels": _parse_bool,
    "overlay": _parse_bool,
    "metrics_port": int,
    "linger": float,
    "regions": int,
    "decision_threshold": float,
    "max_key_age": int,
    "decision_network": _parse_optional_path,
    "flow_path": _parse_bool,
    "cluster": _parse_optional_str,
}
BOOLEAN_SETTINGS = ("save_labels", "overlay", "flow_path")
