"""deploy/kubernetes/rayservice.yaml: a KubeRay RayService whose serveConfigV2 is a valid Serve config
(Ray Serve's own schema) of this repository's application, with settings the server accepts, the Ray
version the lock pins, GPUs where the teaching replicas ask for them and the session store mounted
on every pod that may hold a replica; the claims it mounts defined beside it; Ray closed (token
authentication, no public dashboard, a NetworkPolicy); every pod as uid 10001 with fsGroup; a pinned
image in a registry host's namespace, never pulled by a bare name; the autoscaler on.

Validated offline: the Kubernetes objects (claims, NetworkPolicy, every pod template wrapped in a
v1/PodTemplate) against the Kubernetes schemas kubernetes-validate ships, and the RayService
against tests/deploy/rayservice_schema.py, a schema written for this repository from reading
KubeRay's CRD (no package ships KubeRay's CRD schema; none is copied here)."""

from __future__ import annotations

import copy
import importlib

import jsonschema
import kubernetes_validate
import pytest
import yaml

from shadowtutor.version import package_version
from tests.deploy.prometheus_stack import REPO_ROOT
from tests.deploy.rayservice_schema import RAYSERVICE_SCHEMA

MANIFEST = REPO_ROOT / "deploy" / "kubernetes" / "rayservice.yaml"
KUSTOMIZATION = yaml.safe_load((MANIFEST.parent / "kustomization.yaml").read_text())


@pytest.fixture(scope="module")
def documents() -> list[dict]:
    return list(yaml.safe_load_all(MANIFEST.read_text()))


@pytest.fixture(scope="module")
def service(documents: list[dict]) -> dict:
    (rayservice,) = [d for d in documents if d["kind"] == "RayService"]
    return rayservice


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


def test_the_args_are_settings_the_server_accepts(application: dict, tmp_path) -> None:
    """With the files the Secrets hold made here (a certificate and its key, a checkpoint secret)."""
    from services.server.settings import ServerSettings
    from tests.support.certs import CertAuthority

    server = CertAuthority(tmp_path).issue("server")
    secret = tmp_path / "secret"
    secret.write_text("a checkpoint secret of the test\n")
    args = {key: value for key, value in application["args"].items() if key != "store"}
    args.update(tls_cert=server.cert, tls_key=server.key, checkpoint_secret_file=secret)
    settings = ServerSettings(**args)
    assert settings.auth_enabled and settings.device == "cuda" and settings.tls_enabled
    assert settings.checkpoint_key() == b"a checkpoint secret of the test"


def test_teaching_replicas_get_gpus_and_every_pod_mounts_the_store_and_models(service: dict,
                                                                            application: dict) -> None:
    (teaching,) = application["deployments"]
    gpus = teaching["ray_actor_options"]["num_gpus"]
    (workers,) = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    (container,) = workers["template"]["spec"]["containers"]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= gpus == 1
    assert teaching["num_replicas"] <= workers["maxReplicas"]
    assert service["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    args = application["args"]
    paths = [args["store"], args["student"], args["tokens_file"]]
    secrets = [args["tls_cert"], args["tls_key"], args["checkpoint_secret_file"]]
    for pod in _pods(service):
        (container,) = pod["containers"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                  if "persistentVolumeClaim" in v}
        secret_volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        for path in paths:
            (mount,) = [m for p, m in mounts.items() if path == p or path.startswith(p + "/")]
            assert mount["name"] in claims, path
        # every pod builds the settings (ingress, replicas), which read these files
        for path in secrets:
            (mount,) = [m for p, m in mounts.items() if path.startswith(p + "/")]
            assert mount["name"] in secret_volumes and mount["readOnly"] is True, path
        assert not mounts["/data/sessions"].get("readOnly")  # replicas write checkpoints there
        assert mounts["/data/models"]["readOnly"] is True
    assert any(p.get("containerPort") == 8000 for p in _pods(service)[0]["containers"][0]["ports"])


def _kubernetes_objects(documents: list[dict]) -> list[dict]:
    """The manifest's own Kubernetes objects and each pod template as a v1/PodTemplate."""
    objects = [d for d in documents if d["kind"] != "RayService"]
    (service,) = [d for d in documents if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    objects += [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"group-{i}"},
                 "template": group["template"]} for i, group in enumerate(groups)]
    return objects


def test_kubernetes_objects_match_the_kubernetes_schemas(documents: list[dict]) -> None:
    for obj in _kubernetes_objects(documents):
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def test_the_kubernetes_schemas_catch_a_misspelt_pod_field(documents: list[dict]) -> None:
    broken = copy.deepcopy(documents)
    (service,) = [d for d in broken if d["kind"] == "RayService"]
    (container,) = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
    container["imagePullPolicy"] = "IfNotPresnt"
    container["securityContext"]["runAsUsr"] = 10001
    with pytest.raises(kubernetes_validate.ValidationError):
        for obj in _kubernetes_objects(broken):
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def test_the_rayservice_matches_kuberays_fields(service: dict) -> None:
    jsonschema.validate(service, RAYSERVICE_SCHEMA)


@pytest.mark.parametrize("path, value", [
    (("rayClusterConfig", "enableInTreeAutoscalling"), True),
    (("rayClusterConfig", "enableInTreeAutoscaling"), "yes"),
    (("rayClusterConfig", "authOptions", "mode"), "tokens"),
    (("rayClusterConfig", "headGroupSpec", "rayStartParams", "num-gpus"), 0),
    (("serveConfigV2",), {"applications": []}),
])
def test_the_rayservice_schema_catches_a_misspelt_or_mistyped_field(service: dict, path: tuple,
                                                                     value: object) -> None:
    broken = copy.deepcopy(service)
    target = broken["spec"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, RAYSERVICE_SCHEMA)


def test_a_worker_group_without_a_name_is_refused(service: dict) -> None:
    broken = copy.deepcopy(service)
    del broken["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["groupName"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, RAYSERVICE_SCHEMA)


def test_every_claim_a_pod_mounts_is_defined_with_the_access_it_needs(documents: list[dict],
                                                                        service: dict) -> None:
    claims = {d["metadata"]["name"]: d for d in documents if d["kind"] == "PersistentVolumeClaim"}
    writers: dict[str, int] = {name: 0 for name in claims}
    for pod in _pods(service):
        (container,) = pod["containers"]
        read_only = {m["name"]: m.get("readOnly", False) for m in container["volumeMounts"]}
        for volume in pod["volumes"]:
            if "persistentVolumeClaim" in volume:
                name = volume["persistentVolumeClaim"]["claimName"]
                assert name in claims, name
                writers[name] += not read_only[volume["name"]]
    # pods on several nodes mount every claim, and each claim has a writer: ReadWriteMany
    assert writers == {"shadowtutor-models": 0, "shadowtutor-sessions": 2, "shadowtutor-auth": 1}
    for name, claim in claims.items():
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"], name
        # the storage class is kustomization.yaml's setting, never a default class by accident
        assert "storageClassName" not in claim["spec"], name


def test_the_tokens_file_is_on_a_claim_the_head_writes(service: dict, application: dict) -> None:
    tokens = application["args"]["tokens_file"]
    head = _pods(service)[0]
    (container,) = head["containers"]
    (mount,) = [m for m in container["volumeMounts"] if tokens.startswith(m["mountPath"] + "/")]
    assert not mount.get("readOnly") and mount["mountPath"] not in ("/data/models", "/data/sessions")
    assert {"name": "SHADOWTUTOR_TOKENS_FILE", "value": tokens} in container["env"]


def test_tls_and_the_checkpoint_secret_come_from_secrets(service: dict, application: dict) -> None:
    http = yaml.safe_load(service["spec"]["serveConfigV2"])["http_options"]
    args = application["args"]
    assert (http["ssl_certfile"], http["ssl_keyfile"]) == (args["tls_cert"], args["tls_key"])
    assert "checkpoint_secret" not in args and args["checkpoint_secret_file"].startswith("/etc/")
    secrets = {v["secret"]["secretName"] for pod in _pods(service) for v in pod["volumes"] if "secret" in v}
    assert secrets == {"shadowtutor-tls", "shadowtutor-checkpoint"}


def test_every_pod_runs_as_the_images_user_and_can_write_the_volumes(service: dict) -> None:
    for pod in _pods(service):
        context = pod["securityContext"]
        assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"] == 10001
        assert context["runAsNonRoot"] is True
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_image_is_one_setting_in_the_kustomization(service: dict) -> None:
    version = package_version()
    (entry,) = KUSTOMIZATION["images"]
    for pod in _pods(service):
        for container in pod["containers"]:
            # a placeholder on the reserved .invalid domain: never pulled without the kustomization
            assert container["image"] == entry["name"] and entry["name"].split("/")[0].endswith(".invalid")
            assert container["imagePullPolicy"] == "IfNotPresent"
    host = entry["newName"].partition("/")[0]
    # A registry host (a dot or a port), not Docker Hub's namespace a bare name resolves to.
    assert "." in host or ":" in host, entry
    assert entry["newTag"] == version
    autoscaler = service["spec"]["rayClusterConfig"]["autoscalerOptions"]
    assert autoscaler["imagePullPolicy"] == "IfNotPresent"


def test_ray_is_closed_and_the_autoscaler_adds_gpu_workers(documents: list[dict], service: dict) -> None:
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["authOptions"] == {"mode": "token"}
    assert cluster["enableInTreeAutoscaling"] is True
    for group in [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]:
        assert "dashboard-host" not in group.get("rayStartParams", {})
    (head,) = _pods(service)[0]["containers"]
    assert {p["containerPort"] for p in head["ports"]}.isdisjoint({8265, 10001})
    (policy,) = [d for d in documents if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == (
        cluster["headGroupSpec"]["template"]["metadata"]["labels"])
    open_rules = [rule for rule in policy["spec"]["ingress"] if "from" not in rule]
    assert [p["port"] for rule in open_rules for p in rule["ports"]] == [8000]


def test_the_operator_is_admitted_only_from_its_namespace(documents: list[dict]) -> None:
    (policy,) = [d for d in documents if d["kind"] == "NetworkPolicy"]
    (rule,) = [rule for rule in policy["spec"]["ingress"] if "from" in rule]
    for peer in rule["from"]:
        # a namespaceSelector alone, or an empty one, would admit pods of other namespaces
        if "namespaceSelector" in peer:
            assert peer["namespaceSelector"]["matchLabels"].get("kubernetes.io/metadata.name"), peer
            assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "kuberay-operator"}
        else:
            assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "shadowtutor"}
    assert any("namespaceSelector" in peer for peer in rule["from"])


def test_the_kustomization_sets_the_claims_class_and_the_operators_namespace() -> None:
    targets = {patch["target"]["kind"]: yaml.safe_load(patch["patch"]) for patch in KUSTOMIZATION["patches"]}
    (storage,) = targets["PersistentVolumeClaim"]
    assert storage["path"] == "/spec/storageClassName" and storage["value"]
    (namespace,) = targets["NetworkPolicy"]
    assert namespace["path"].endswith("namespaceSelector/matchLabels/kubernetes.io~1metadata.name")


def test_kubectl_kustomize_builds_what_the_docs_apply(run_tool) -> None:
    """The kustomization as kubectl (its built-in kustomize, no cluster) builds it: the image, the
    storage class and the namespace set, the RayService still matching the schemas."""
    result = run_tool("kubectl", "kustomize", str(MANIFEST.parent))
    assert result.returncode == 0, result.stderr
    built = list(yaml.safe_load_all(result.stdout))
    (service,) = [d for d in built if d["kind"] == "RayService"]
    (entry,) = KUSTOMIZATION["images"]
    for pod in _pods(service):
        assert [c["image"] for c in pod["containers"]] == [f"{entry['newName']}:{entry['newTag']}"]
    claims = [d for d in built if d["kind"] == "PersistentVolumeClaim"]
    assert len(claims) == 3 and all(c["spec"]["storageClassName"] for c in claims)
    jsonschema.validate(service, RAYSERVICE_SCHEMA)
    for obj in _kubernetes_objects(built):
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def test_the_fill_pod_matches_the_kubernetes_schemas_and_mounts_the_models_claim_writable() -> None:
    (pod,) = yaml.safe_load_all((MANIFEST.parent / "fill-models.yaml").read_text())
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    (volume,) = pod["spec"]["volumes"]
    (mount,) = pod["spec"]["containers"][0]["volumeMounts"]
    assert volume["persistentVolumeClaim"]["claimName"] == "shadowtutor-models" and not mount.get("readOnly")
