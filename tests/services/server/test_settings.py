"""ServerSettings: defaults, SHADOWTUTOR_* variables, explicit values winning, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.server.settings import ServerSettings
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.config.settings_flags import env_var, settings_of
from tests.support.certs import CertAuthority


def test_defaults_are_safe_and_the_papers(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting in settings_of(ServerSettings):
        monkeypatch.delenv(env_var(setting.name), raising=False)
    settings = ServerSettings()
    assert (settings.host, settings.port, settings.teacher, settings.device) == ("127.0.0.1", 8000, "maskrcnn", "auto")
    assert settings.student is None and settings.max_sessions == 16
    assert settings.algorithm_params() == AlgorithmParams()
    assert settings.allowed_frame_codecs() == ("raw", "jpeg", "webp", "png", "h264")


def test_environment_then_explicit_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SHADOWTUTOR_PORT", "9001")
    monkeypatch.setenv("SHADOWTUTOR_TEACHER", "labels")
    monkeypatch.setenv("SHADOWTUTOR_LABELS_DIR", str(tmp_path))
    monkeypatch.setenv("SHADOWTUTOR_WEIGHT_CODECS", "f16+zstd,f32")
    monkeypatch.setenv("SHADOWTUTOR_TEACHER_OPTIONS", '{"class_names": ["a", "background"]}')
    monkeypatch.setenv("SHADOWTUTOR_MAX_UPDATES", "3")
    monkeypatch.setenv("SHADOWTUTOR_STRIDE_METRIC", "before")
    monkeypatch.setenv("SHADOWTUTOR_RESTORE", "weights+adam")
    monkeypatch.setenv("SHADOWTUTOR_WEIGHT_MAP", "instances")
    monkeypatch.setenv("SHADOWTUTOR_LOG_LEVEL", "DEBUG")
    settings = ServerSettings()
    assert (settings.port, settings.teacher, settings.labels_dir) == (9001, "labels", tmp_path)
    assert settings.weight_codecs == ("f16+zstd", "f32") and settings.log_level == "debug"
    assert settings.teacher_options == {"class_names": ["a", "background"]}
    assert settings.algorithm_params().max_updates == 3
    assert settings.algorithm_params().stride_metric == "before"
    params = settings.algorithm_params()
    assert (params.restore, params.weight_map) == ("weights+adam", "instances")
    assert ServerSettings(port="9002", max_updates=5).port == 9002  # explicit values (the CLI's) win


def test_the_algorithm_parameters_are_one_nested_model_under_their_old_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_DISTILL_MODE", "full")
    monkeypatch.setenv("SHADOWTUTOR_MAX_UPDATES", "3")
    monkeypatch.setenv("SHADOWTUTOR_THRESHOLD", "")  # compose's ${VAR:-}: the default
    settings = ServerSettings(max_updates=5, object_weight="2.5")
    assert settings.algorithm == AlgorithmParams(mode="full", max_updates=5, object_weight=2.5)
    assert settings.algorithm_params() is settings.algorithm
    # Ray Serve's replicas get the settings as model_dump writes them
    again = ServerSettings(**settings.model_dump(mode="json", exclude_defaults=True))
    assert again.algorithm == settings.algorithm


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("port", "70000", "less than or equal to 65535"),
        ("frame_codecs", "raw,gif", "unknown codecs ['gif']"),
        ("threshold", "1.5", "threshold must lie in (0, 1)"),
        ("threshold", "fast", "threshold must be a number in (0, 1) or 'auto', got 'fast'"),
        ("min_stride", "80", "min_stride <= max_stride"),
        ("stride_metric", "median", "'after' or 'before'"),
        ("restore", "optimizer", "'weights' or 'weights+adam'"),
        ("weight_map", "boxes", "'instances' or 'regions'"),
        ("distill_mode", "half", "'partial' or 'full'"),
        ("box_dilation", "-1", "box_dilation must be >= 0, got -1.0"),
        ("threshold_policy", "sometimes", "'fixed' or 'auto'"),
        ("student_size", "320", "expected WIDTHxHEIGHT"),
        ("student_size", "0x180", "must be positive"),
        ("teacher_options", "{not json", "must be a JSON object"),
        ("max_sessions", "0", "greater than or equal to 1"),
        ("log_level", "loud", "'critical', 'error', 'warning', 'info' or 'debug'"),
        ("no_such_setting", "1", "Extra inputs are not permitted"),
    ],
)
def test_bad_values_say_what_is_wrong(field: str, value: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        ServerSettings(**{field: value})


@pytest.mark.parametrize("value", ["auto", "AUTO", " auto "])
def test_threshold_auto_selects_the_per_session_policy(value: str) -> None:
    params = ServerSettings(threshold=value).algorithm_params()
    assert (params.threshold_policy, params.threshold) == ("auto", 0.8)  # starts at the paper's value
    assert ServerSettings(threshold="0.7").algorithm_params().threshold_policy == "fixed"


def test_security_defaults_and_consistency(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for setting in settings_of(ServerSettings):
        monkeypatch.delenv(env_var(setting.name), raising=False)
    settings = ServerSettings()
    assert not settings.auth_enabled and not settings.tls_enabled and not settings.protect_metrics
    assert (settings.key_frame_rate, settings.key_frame_burst, settings.hello_timeout) == (0.0, 120, 10.0)
    assert settings.connection_limit() == 2 * 16 + 16
    assert settings.unauthenticated_limit() == 2 * 16 + 16 - 16  # max_sessions places kept for admitted edges
    assert settings.max_unauthenticated_per_source == 8
    assert ServerSettings(max_connections=4, max_sessions=16).unauthenticated_limit() == 1
    monkeypatch.setenv("SHADOWTUTOR_TOKENS", "")  # an empty variable (compose's ${VAR:-}) means unset
    monkeypatch.setenv("SHADOWTUTOR_PROTECT_METRICS", "false")
    assert ServerSettings().tokens is None
    server = CertAuthority(tmp_path).issue("server")
    cert = server.cert
    assert ServerSettings(tls_cert=cert, tls_key=server.key, tokens='{"edges": {}}').auth_enabled
    for changes, message in [
        ({"tls_cert": cert}, "tls_cert and tls_key go together"),
        ({"tls_client_ca": cert}, "tls_client_ca (mutual TLS) needs tls_cert"),
        ({"tls_cert": cert, "tls_key": tmp_path / "no.key"}, "tls_key: no such file"),
        ({"tokens_file": cert, "tokens": "{}"}, "give tokens_file or tokens, not both"),
        ({"protect_metrics": True}, "protect_metrics needs admin tokens"),
        ({"key_frame_rate": -1}, "greater than or equal to 0"),
    ]:
        with pytest.raises(ValidationError, match=re.escape(message)):
            ServerSettings(**changes)


def test_the_student_size_setting() -> None:
    assert ServerSettings().student_size is None and ServerSettings(student_size="native").student_size is None
    assert ServerSettings(student_size="320x180").student_size == (320, 180)


def test_the_checkpoint_secret_comes_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SHADOWTUTOR_CHECKPOINT_SECRET", raising=False)
    secret = tmp_path / "checkpoint_secret"
    secret.write_text("a checkpoint secret from a file\nignored\n")
    settings = ServerSettings(checkpoint_secret_file=secret)
    assert settings.checkpoint_key() == b"a checkpoint secret from a file"
    # What travels (a Serve config's args) names the file, never the secret.
    dumped = settings.model_dump(mode="json", exclude_defaults=True)
    assert dumped == {"checkpoint_secret_file": str(secret)}
    assert ServerSettings(**dumped).checkpoint_key() == b"a checkpoint secret from a file"


@pytest.mark.parametrize("content, message", [
    (None, "cannot be read"),
    ("short\n", "at least 16 characters"),
    ("", "at least 16 characters"),
])
def test_a_bad_checkpoint_secret_file_is_one_clear_error(tmp_path: Path, content: str | None,
                                                         message: str) -> None:
    secret = tmp_path / "checkpoint_secret"
    if content is not None:
        secret.write_text(content)
    with pytest.raises(ValidationError, match=f"checkpoint_secret_file {re.escape(str(secret))}.*{message}"):
        ServerSettings(checkpoint_secret_file=secret)
    with pytest.raises(ValidationError, match="not both"):
        secret.write_text("a long enough secret\n")
        ServerSettings(checkpoint_secret_file=secret, checkpoint_secret="another long secret")


def test_the_update_gating_settings_make_the_sessions_policy() -> None:
    from shadowtutor.algorithms.update_policy import UpdatePolicy

    assert not ServerSettings().update_policy().gated
    settings = ServerSettings(
        update_gating=True, update_min_gain=0.02, update_max_interval=4, update_window=2, downlink_budget="100kbps"
    )
    assert settings.update_policy() == UpdatePolicy(
        gated=True, min_gain=0.02, max_interval=4, window=2, downlink_bps=100_000.0
    )
    with pytest.raises(ValidationError, match="bit rate"):
        ServerSettings(downlink_budget="fast")
