"""deploy/kubernetes/rayservice.yaml: a KubeRay RayService whose serveConfigV2 is a valid Serve config
(Ray Serve's own schema) of this repository's application, with settings the server accepts, the Ray
version the lock pins, GPUs where the teaching replicas ask for them and the session store mounted
on every pod that may hold a replica."""

from __future__ import annotations

import importlib

import pytest
import yaml

from tests.deploy.prometheus_stack import REPO_ROOT

MANIFEST = REPO_ROOT / "deploy" / "kubernetes" / "rayservice.yaml"


@pytest.fixture(scope="module")
def service() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


@pytest.fixture(scope="module")
def application(service: dict) -> dict:
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    return app


def _pods(service: dict) -> list[dict]:
    cluster = service["spec"]["rayClusterConfig"]
    return [cluster["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"]
                                                             for g in cluster["workerGroupSpecs"]]


def test_it_is_a_rayservice_on_the_pinned_ray(service: dict) -> None:
    assert (service["apiVersion"], service["kind"]) == ("ray.io/v1", "RayService")
    pins = dict(line.split("==") for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert service["spec"]["rayClusterConfig"]["rayVersion"] == pins["ray"]


def test_serve_config_is_valid_for_ray_serve_and_names_this_application(service: dict, application: dict) -> None:
    schema = pytest.importorskip("ray.serve.schema", reason="the serve extra is not installed")
    schema.ServeDeploySchema.model_validate(yaml.safe_load(service["spec"]["serveConfigV2"]))
    module, _, name = application["import_path"].partition(":")
    assert callable(getattr(importlib.import_module(module), name))
    assert [d["name"] for d in application["deployments"]] == ["teaching"]


def test_the_args_are_settings_the_server_accepts(application: dict) -> None:
    from services.server.settings import ServerSettings

    args = {key: value for key, value in application["args"].items() if key != "store"}
    settings = ServerSettings(**args)
    assert settings.auth_enabled and settings.device == "cuda"


def test_teaching_replicas_get_gpus_and_every_pod_mounts_the_store_and_models(service: dict,
                                                                            application: dict) -> None:
    (teaching,) = application["deployments"]
    gpus = teaching["ray_actor_options"]["num_gpus"]
    (workers,) = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    (container,) = workers["template"]["spec"]["containers"]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= gpus == 1
    assert teaching["num_replicas"] <= workers["maxReplicas"]
    assert service["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    paths = [application["args"]["store"], application["args"]["student"], application["args"]["tokens_file"]]
    for pod in _pods(service):
        (container,) = pod["containers"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
        for path in paths:
            (mount,) = [m for p, m in mounts.items() if path == p or path.startswith(p + "/")]
            assert mount["name"] in claims, path
        assert not mounts["/data/sessions"].get("readOnly")  # replicas write checkpoints there
    assert any(p.get("containerPort") == 8000 for p in _pods(service)[0]["containers"][0]["ports"])
