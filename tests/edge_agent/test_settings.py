from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from edge_agent.settings import EdgeSettings, SettingsError, normalise_server_url


def build(flags: dict | None = None, env: dict | None = None) -> EdgeSettings:
    """Settings from ``flags`` (``None`` = not given) over exactly the ``SHADOWTUTOR_*`` variables ``env``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWTUTOR_")} | (env or {})
    with mock.patch.dict(os.environ, environ, clear=True):
        return EdgeSettings(**{k: v for k, v in (flags or {}).items() if v is not None})


def test_flags_win_over_environment_over_defaults() -> None:
    settings = build(
        {"server": "ws://flag:1", "wait_timeout": "3", "overlay": None},
        {"SHADOWTUTOR_SERVER": "ws://env:2", "SHADOWTUTOR_SOURCE": "0", "SHADOWTUTOR_WAIT_TIMEOUT": "9",
         "SHADOWTUTOR_RESIZE": "320x180", "SHADOWTUTOR_FRAME_CODECS": "raw, jpeg",
         "SHADOWTUTOR_OUTPUT_DIR": "/tmp/x", "SHADOWTUTOR_OVERLAY": "yes", "SHADOWTUTOR_METRICS_PORT": "0"},
    )
    assert settings.server == "ws://flag:1/v1/edge"
    assert settings.source == "0"
    assert settings.wait_timeout == 3.0
    assert settings.resize == (320, 180)
    assert settings.frame_codecs == ("raw", "jpeg")
    assert settings.output_dir == Path("/tmp/x") and settings.overlay is True
    assert settings.metrics_port == 0


def test_defaults() -> None:
    settings = build({"server": "http://gpu-box:8000", "source": "video.mp4"})
    assert settings.server == "ws://gpu-box:8000/v1/edge"
    assert settings.edge_id  # the hostname
    assert settings.mode == "distill" and settings.metrics_port == 9108 and settings.metrics_host == "0.0.0.0"
    assert settings.frame_codecs == ("h264", "jpeg", "raw") and settings.frame_quality is None
    assert settings.weight_codecs == ("q4sparse+zstd", "q8delta+zstd", "f16+zstd", "f32+zstd", "f32")
    assert settings.output_dir is None and settings.max_frames is None and settings.resize is None
    assert settings.save_labels is False and settings.labels_max_bytes == 1024**3 and settings.labels_max_age == 0
    assert settings.state_dir is not None and settings.state_dir.name == "shadowtutor"


def test_retention_and_state_settings_take_units_and_an_empty_state_dir_turns_it_off() -> None:
    settings = build({"server": "ws://h", "source": "x", "labels_max_bytes": "500M", "labels_max_age": "12h",
                      "state_dir": "", "state_save_interval": "5"}, {"SHADOWTUTOR_SAVE_LABELS": "true"})
    assert settings.save_labels is True and settings.labels_max_bytes == 500 * 1024**2
    assert settings.labels_max_age == 12 * 3600 and settings.state_dir is None and settings.state_save_interval == 5
    assert build({"server": "ws://h", "source": "x", "labels_max_bytes": "2GiB"}).labels_max_bytes == 2 * 1024**3
    for bad, message in (({"labels_max_age": "3w"}, "s/m/h/d"),
                         ({"labels_max_bytes": "-1"}, "greater than or equal to 0"),
                         ({"labels_max_bytes": "lots"}, "--labels-max-bytes")):
        with pytest.raises(SettingsError, match=message):
            build({"server": "ws://h", "source": "x", **bad})


@pytest.mark.parametrize(
    "url, expected",
    [
        ("ws://h:8000", "ws://h:8000/v1/edge"),
        ("https://h", "wss://h/v1/edge"),
        ("ws://h:8000/custom/path", "ws://h:8000/custom/path"),
        ("http://h:1/?token=x", "ws://h:1/v1/edge?token=x"),
    ],
)
def test_server_url_normalisation(url: str, expected: str) -> None:
    assert normalise_server_url(url) == expected


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"source": "x"}, "server is required: pass --server or set SHADOWTUTOR_SERVER"),
        ({"server": "ws://h"}, "source is required"),
        ({"server": "h:8000", "source": "x"}, "server must be a ws://"),
        ({"server": "ws://h", "source": "x", "mode": "fast"}, "--mode: Input should be 'distill' or 'naive'"),
        ({"server": "ws://h", "source": "x", "frame_codecs": "jpeg,gif"}, r"unknown codec\(s\) \['gif'\]"),
        ({"server": "ws://h", "source": "x", "resize": "320"}, "--resize: expected WIDTHxHEIGHT"),
        ({"server": "ws://h", "source": "x", "wait_timeout": "soon"}, "--wait-timeout: Input should be a valid number"),
        ({"server": "ws://h", "source": "x", "overlay": "maybe"}, "--overlay: Input should be a valid boolean"),
        ({"server": "ws://h", "source": "x", "overlay": True}, "overlay needs output_dir"),
        ({"server": "ws://h", "source": "x", "reconnect_min": "5", "reconnect_max": "1"}, "reconnect_max"),
        ({"server": "ws://h", "source": "x", "metrics_port": "70000"},
         "--metrics-port: Input should be less than or equal to 65535"),
        ({"server": "ws://h", "source": "x", "class_names": "a,a"}, "distinct"),
        ({"server": "ws://h", "source": "x", "regions": "0"}, "regions must be a positive integer"),
        ({"server": "ws://h", "source": "x", "decision_threshold": "2"}, "decision threshold must lie in"),
        ({"server": "ws://h", "source": "x", "max_key_age": "0"}, "max key age"),
        ({"server": "ws://h", "source": "x", "decision_budget": "-0.1"}, "decision budget must be > 0"),
        ({"server": "ws://h", "source": "x", "decision_network": "/nonexistent.pt"}, "decision_network: no such"),
        ({"server": "ws://h", "source": "x", "cluster": "somewhere"}, "cluster must be HOST:PORT"),
        ({"server": "ws://h", "source": "x", "student_size": "0x9"}, "--student-size: .*must be positive"),
        ({"server": "ws://h", "source": "x", "student_size": "320x180", "flow_path": True},
         "flow_path .* and student_size exclude each other"),
    ],
)
def test_bad_values_say_what_is_wrong(flags: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        build(flags)


def test_flow_path_settings() -> None:
    off = build({"server": "ws://h", "source": "x"})
    assert off.flow_path is False and off.flow_path_config() is None
    default = build({"server": "ws://h", "source": "x", "flow_path": True}).flow_path_config()
    assert default is not None and default.interval == 3 and default.load_network() is None  # no network needed
    on = build({"server": "ws://h", "source": "x", "flow_path": True},
               {"SHADOWTUTOR_REGIONS": "6", "SHADOWTUTOR_KEY_INTERVAL": "0", "SHADOWTUTOR_DECISION_THRESHOLD": "0.9",
                "SHADOWTUTOR_MAX_KEY_AGE": "8"})
    config = on.flow_path_config()
    assert config is not None
    assert (config.regions, config.threshold, config.max_key_age, config.network) == (6, 0.9, 8, None)
    assert config.interval is None and config.budget is None  # DVSNet's per-frame rule unless a budget is set
    budget = build({"server": "ws://h", "source": "x", "flow_path": True, "key_interval": 0},
                   {"SHADOWTUTOR_DECISION_BUDGET": "0.1"})
    assert budget.flow_path_config() is not None and budget.flow_path_config().budget == 0.1
    cluster = build({"server": "ws://h", "source": "x", "cluster": "127.0.0.1:6379", "key_interval": 5})
    assert cluster.flow_path_config() is not None and cluster.flow_path_config().interval == 5  # its workers' rule


@pytest.mark.parametrize("environment",
                         [{"SHADOWTUTOR_DECISION_THRESHOLD": "0.9"}, {"SHADOWTUTOR_DECISION_BUDGET": "0.1"}])
def test_a_decision_setting_with_a_fixed_interval_is_refused(environment: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match="apply when the decision network picks the path: set key_interval to 0"):
        build({"server": "ws://h", "source": "x", "flow_path": True}, environment)
    with pytest.raises(SettingsError, match="key_interval to 0"):
        build({"server": "ws://h", "source": "x", "flow_path": True, "key_interval": 4, "decision_threshold": 0.5})


def test_the_student_size_setting() -> None:
    assert build({"server": "ws://h", "source": "x"}).student_size is None
    scaled = build({"server": "ws://h", "source": "x"}, {"SHADOWTUTOR_STUDENT_SIZE": "320x180"})
    assert scaled.student_size == (320, 180)


def test_environment_errors_name_the_variable() -> None:
    with pytest.raises(SettingsError, match="SHADOWTUTOR_MAX_FRAMES"):
        build({"server": "ws://h", "source": "x"}, {"SHADOWTUTOR_MAX_FRAMES": "ten"})
    with pytest.raises(SettingsError, match="SHADOWTUTOR_SOURCE: source is empty"):
        build({"server": "ws://h"}, {"SHADOWTUTOR_SOURCE": ""})


def test_token_and_tls_settings(tmp_path: Path) -> None:
    token_file, ca = tmp_path / "token", tmp_path / "ca.pem"
    token_file.write_text("  s3cret-token\n")
    ca.write_text("pem")
    settings = build({"server": "https://gpu-box:8443", "source": "0", "token_file": str(token_file)},
                     {"SHADOWTUTOR_CA_FILE": str(ca), "SHADOWTUTOR_TOKEN": ""})  # empty variable: unset
    assert settings.server == "wss://gpu-box:8443/v1/edge" and settings.read_token() == "s3cret-token"
    assert settings.ca_file == ca and settings.token is None
    inline = build({"server": "ws://a:1", "source": "0"}, {"SHADOWTUTOR_TOKEN": "s3cret-token"})
    assert inline.read_token() == "s3cret-token"
    assert "s3cret" not in repr(inline) and inline.to_dict()["token"] == "***"  # never printed or written


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"token": "a", "token_file": "TOKEN"}, "give token or token_file, not both"),
        ({"token_file": "missing"}, "token_file: cannot read"),
        ({"token_file": "EMPTY"}, "is empty"),
        ({"server": "wss://a:1", "ca_file": "missing.pem"}, "ca_file: no such file"),
        ({"server": "wss://a:1", "client_cert": "TOKEN"}, "client_cert and client_key go together"),
        ({"ca_file": "TOKEN"}, "ca_file need a wss:// (or https://) server"),
    ],
)
def test_bad_security_settings_say_what_is_wrong(tmp_path: Path, flags: dict, message: str) -> None:
    (tmp_path / "TOKEN").write_text("t")
    (tmp_path / "EMPTY").write_text("\n")
    paths = {k: str(tmp_path / v) if k != "token" and k != "server" else v for k, v in flags.items()}
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build({"server": "ws://a:1", "source": "0", **paths})


def test_change_based_settings(tmp_path: Path) -> None:
    from shadowtutor.acceleration.change_based.thresholds import threshold_document, zero_thresholds

    assert build({"server": "ws://h", "source": "x"}).change_based_options() is None
    options = build({"server": "ws://h", "source": "x"}, {"SHADOWTUTOR_CHANGE_BASED": "1",
                                                          "SHADOWTUTOR_CHANGE_SCALE": "2"}).change_based_options()
    assert options.scale == 2.0 and options.thresholds_file is None
    good = tmp_path / "t.json"
    good.write_text(threshold_document(zero_thresholds(), "test"))
    settings = build({"server": "ws://h", "source": "x", "change_based": True, "change_thresholds": str(good)})
    assert settings.change_based_options().thresholds() == zero_thresholds()


@pytest.mark.parametrize(("flags", "message"), [
    ({"change_based": True, "change_thresholds": "/nonexistent.json"}, "cannot read change-threshold file"),
    ({"change_based": True, "change_scale": "-1"}, "--change-scale: Input should be greater than or equal to 0"),
    ({"change_based": True, "backend": "cuda"}, "onnx or torch backend"),
    ({"change_thresholds": "t.json"}, "change_thresholds needs change_based"),
])
def test_bad_change_based_settings_say_what_is_wrong(flags: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        build({"server": "ws://h", "source": "x", **flags})
