"""The Serve config of the deployment: ``max_sessions`` (the ingress's admission) and the students
one teaching replica holds are two settings; the second defaults to the first, travels in the
config's args and is read back by ``app_builder``. No Ray cluster needed: the config is data and the
application is only built (``build_app`` binds, it does not deploy)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="the serve extra is not installed")

from ray.serve.schema import ServeDeploySchema  # noqa: E402

from services.ray_serve.app import ServeOptions, app_builder, serve_config  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402


def test_students_per_replica_default_to_max_sessions_and_can_differ(tmp_path: Path) -> None:
    settings = ServerSettings(max_sessions=64)
    assert ServeOptions(store=str(tmp_path)).students(settings) == 64
    assert ServeOptions(store=str(tmp_path), replica_sessions=24).students(settings) == 24
    with pytest.raises(ValueError, match="students per replica"):
        ServeOptions(replica_sessions=0)


def test_the_config_carries_both_settings_and_app_builder_reads_them(tmp_path: Path) -> None:
    settings = ServerSettings(max_sessions=64)
    config = serve_config(settings, ServeOptions(replicas=3, store=str(tmp_path), replica_sessions=24))
    ServeDeploySchema.model_validate(config)
    (app,) = config["applications"]
    assert (app["args"]["max_sessions"], app["args"]["replica_sessions"]) == (64, 24)
    built = app_builder(app["args"])
    teaching = built._bound_deployment.init_args[1]  # the ingress is bound to (settings, teaching)
    assert teaching._bound_deployment.init_args[2] == 24
    assert teaching._bound_deployment.max_ongoing_requests == 48
    assert "replica_sessions" not in serve_config(settings, ServeOptions(store=str(tmp_path)))[
        "applications"][0]["args"]


def test_serve_has_a_flag_for_students_per_replica() -> None:
    from shadowtutor_cli import build_parser

    args = build_parser().parse_args(["serve", "--ray", "auto", "--ray-replica-sessions", "8"])
    assert args.ray_replica_sessions == 8


def test_the_config_sets_the_ingress_replicas_and_the_teaching_router(tmp_path: Path) -> None:
    config = serve_config(ServerSettings(), ServeOptions(replicas=2, ingresses=3, store=str(tmp_path)))
    ServeDeploySchema.model_validate(config)
    deployments = {d["name"]: d for d in config["applications"][0]["deployments"]}
    assert (deployments["ingress"]["num_replicas"], deployments["teaching"]["num_replicas"]) == (3, 2)
    built = app_builder(config["applications"][0]["args"])
    teaching = built._bound_deployment.init_args[1]
    router = teaching._bound_deployment._deployment_config.request_router_config
    assert router.request_router_class == "services.ray_serve.placement.SessionBalanceRouter"
    assert router.request_routing_stats_period_s == 0.5


@pytest.mark.parametrize(("options", "message"), [
    ({"ingresses": 0}, "ingress replicas must be >= 1"),
    ({"gpus": -1.0}, "gpus and cpus per replica must be >= 0"),
])
def test_bad_options_are_one_clear_error(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServeOptions(**options)  # type: ignore[arg-type]


def test_serve_has_a_flag_for_ingress_replicas() -> None:
    from shadowtutor_cli import build_parser

    assert build_parser().parse_args(["serve", "--ray", "auto", "--ray-ingresses", "2"]).ray_ingresses == 2


def test_the_config_names_the_checkpoint_secret_file_and_refuses_an_inline_secret(tmp_path: Path) -> None:
    secret = tmp_path / "checkpoint_secret"
    secret.write_text("a checkpoint secret of the fleet\n")
    settings = ServerSettings(checkpoint_secret_file=secret)
    config = serve_config(settings, ServeOptions(store=str(tmp_path)))
    (app,) = config["applications"]
    assert app["args"]["checkpoint_secret_file"] == str(secret)
    assert "checkpoint secret of the fleet" not in str(config) and "checkpoint_secret" not in app["args"]
    teaching = app_builder(app["args"])._bound_deployment.init_args[1]
    replica_settings = teaching._bound_deployment.init_args[0]
    assert replica_settings.checkpoint_key() == b"a checkpoint secret of the fleet"
    # Inline, the secret would be dumped masked ("**********") and every replica would refuse it.
    with pytest.raises(ValueError, match="--checkpoint-secret-file"):
        serve_config(ServerSettings(checkpoint_secret="an inline checkpoint secret"),
                     ServeOptions(store=str(tmp_path)))
