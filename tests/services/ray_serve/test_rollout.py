"""What a new Serve config does to a running deployment, decided before anything is applied: the live
settings travel as the deployments' user_config (reconfigured in place), every other setting as the
application's args (a rebuild that restarts the ingress: refused with the flags that would restart it), and
HTTP options that a running Serve would ignore are refused too. No Ray cluster needed: the configs are
data (tests/services/ray_serve/test_rollout_live.py applies them to a running one)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="the serve extra is not installed")

from ray.serve.schema import ServeDeploySchema  # noqa: E402

from services.ray_serve.app import ServeOptions, serve_config  # noqa: E402
from services.ray_serve.rollout import live_settings, plan  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from tests.support.certs import CertAuthority  # noqa: E402


def _config(tmp_path: Path, **settings: object) -> dict:
    return serve_config(ServerSettings(**settings), ServeOptions(replicas=2, store=str(tmp_path)))


def _running(config: dict) -> tuple[dict, dict]:
    """What Serve reports for ``config`` deployed: its app config and its HTTP options."""
    (app,) = config["applications"]
    return app, {"ssl_certfile": None, "ssl_keyfile": None, "ssl_ca_certs": None, **config["http_options"]}


def test_live_settings_are_user_config_and_the_rest_args(tmp_path: Path) -> None:
    config = _config(tmp_path, checkpoint_ttl=40, checkpoint_every=4, max_updates=3, log_level="debug")
    ServeDeploySchema.model_validate(config)
    (app,) = config["applications"]
    deployments = {d["name"]: d for d in app["deployments"]}
    assert deployments["teaching"]["user_config"] == {"checkpoint_ttl": 40.0, "checkpoint_every": 4,
                                                      "log_level": "debug"}
    assert deployments["ingress"]["user_config"] == {"log_level": "debug"}
    assert app["args"]["algorithm"] == {"max_updates": 3}
    assert not {"checkpoint_ttl", "checkpoint_every", "log_level"} & set(app["args"])


def test_a_live_setting_change_rolls_in_place_and_the_replica_counts_too(tmp_path: Path) -> None:
    deployed, http = _running(_config(tmp_path, checkpoint_ttl=3600))
    change = plan(deployed, http, _config(tmp_path, checkpoint_ttl=40, log_level="debug"))
    assert change.refusal() is None and change.live == ("--checkpoint-ttl", "--log-level")
    more = serve_config(ServerSettings(), ServeOptions(replicas=5, ingresses=2, store=str(tmp_path)))
    assert plan(deployed, http, more).refusal() is None
    assert plan(None, None, more).refusal() is None  # nothing runs yet


def test_a_change_that_restarts_the_ingress_is_refused_with_what_would_restart(tmp_path: Path) -> None:
    deployed, http = _running(_config(tmp_path))
    change = plan(deployed, http, _config(tmp_path, max_updates=3, teacher="labels"))
    assert change.restarting == ("--max-updates", "--teacher")
    refusal = change.refusal()
    assert refusal.startswith("changing --max-updates, --teacher restarts the ingress and every teaching replica")
    assert "--ray-restart" in refusal and "--checkpoint-ttl" in refusal
    other_store = serve_config(ServerSettings(), ServeOptions(replicas=2, store=str(tmp_path / "other")))
    assert plan(deployed, http, other_store).restarting == ("--checkpoint-store",)


def test_another_port_or_tls_is_refused_where_serve_runs_not_ignored(tmp_path: Path) -> None:
    deployed, http = _running(_config(tmp_path, port=8000))
    change = plan(deployed, http, _config(tmp_path, port=8100))
    assert change.http == ("--port",) and "already run" in change.refusal() and "--port" in change.refusal()
    server = CertAuthority(tmp_path / "ca").issue("server")
    tls = _config(tmp_path, tls_cert=server.cert, tls_key=server.key)
    assert plan(deployed, http, tls).http == ("--tls-cert", "--tls-key")
    # Serve running without the application (removed): the port still cannot change
    assert plan(None, http, _config(tmp_path, port=8100)).http == ("--port",)


def test_live_settings_are_checked_as_settings() -> None:
    settings = ServerSettings(max_updates=3)
    changed = live_settings(settings, {"checkpoint_ttl": 40, "log_level": "DEBUG"})
    assert (changed.checkpoint_ttl, changed.log_level, changed.algorithm_params().max_updates) == (40.0, "debug", 3)
    with pytest.raises(ValueError, match="checkpoint_ttl"):
        live_settings(settings, {"checkpoint_ttl": -1})
    with pytest.raises(ValueError, match="user_config takes only .*; got max_updates"):
        live_settings(settings, {"max_updates": 4})


def test_serve_has_flags_to_restart_list_and_stop() -> None:
    from shadowtutor_cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve", "--ray", "auto", "--ray-restart"]).ray_restart
    assert parser.parse_args(["serve", "--ray", "auto", "--list"]).list
    assert parser.parse_args(["serve", "--ray", "auto", "--stop"]).stop
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--ray", "auto", "--list", "--stop"])


def test_list_and_stop_need_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    from shadowtutor_cli import main

    assert main(["serve", "--stop"]) == 2
    assert "--list and --stop need --ray ADDRESS" in capsys.readouterr().err
