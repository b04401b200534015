"""A JSON schema of the RayService fields deploy/kubernetes/rayservice.yaml uses.

Written for this repository from reading KubeRay's CRDs (ray.io/v1 RayService and RayCluster,
KubeRay 1.5): the types, enums and required fields of those fields, not a copy of the CRD. No PyPI
package ships KubeRay's schema. Every object is closed (``additionalProperties: false``): a field
this schema does not name is an error, so a misspelt field fails here instead of being pruned in
silence by the API server. Pod templates are not described here: the test wraps each one in a
``v1/PodTemplate`` and validates it against the Kubernetes schemas (kubernetes-validate).
A new RayService field the manifest starts to use is added here from the CRD first.
"""

from __future__ import annotations

from typing import Any

_INT32: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
_START_PARAMS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_PULL_POLICY: dict[str, Any] = {"type": "string", "enum": ["Always", "Never", "IfNotPresent"]}
# Pod templates and container security contexts: shape only here, their fields are checked
# against the Kubernetes schemas.
_OBJECT: dict[str, Any] = {"type": "object"}

_AUTOSCALER: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "upscalingMode": {"type": "string", "enum": ["Default", "Aggressive", "Conservative"]},
        "idleTimeoutSeconds": _INT32,
        "image": {"type": "string"},
        "imagePullPolicy": _PULL_POLICY,
        "securityContext": _OBJECT,
        "resources": _OBJECT,
        "env": {"type": "array"},
        "envFrom": {"type": "array"},
        "volumeMounts": {"type": "array"},
        "version": {"type": "string", "enum": ["v1", "v2"]},
    },
}

_HEAD_GROUP: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["template"],
    "properties": {
        "rayStartParams": _START_PARAMS,
        "template": _OBJECT,
        "serviceType": {"type": "string", "enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
        "enableIngress": {"type": "boolean"},
        "headService": _OBJECT,
    },
}

_WORKER_GROUP: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["groupName", "template"],
    "properties": {
        "groupName": {"type": "string", "minLength": 1},
        "replicas": _INT32,
        "minReplicas": _INT32,
        "maxReplicas": _INT32,
        "idleTimeoutSeconds": _INT32,
        "numOfHosts": _INT32,
        "suspend": {"type": "boolean"},
        "rayStartParams": _START_PARAMS,
        "template": _OBJECT,
        "scaleStrategy": _OBJECT,
    },
}

_RAY_CLUSTER: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["headGroupSpec"],
    "properties": {
        "rayVersion": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "authOptions": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "mode": {"type": "string", "enum": ["disabled", "token"]},
                "secretName": {"type": "string"},
            },
        },
        "enableInTreeAutoscaling": {"type": "boolean"},
        "autoscalerOptions": _AUTOSCALER,
        "headGroupSpec": _HEAD_GROUP,
        "workerGroupSpecs": {"type": "array", "items": _WORKER_GROUP},
        "suspend": {"type": "boolean"},
    },
}

RAYSERVICE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayService"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}},
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["serveConfigV2", "rayClusterConfig"],
            "properties": {
                "serveConfigV2": {"type": "string"},
                "deploymentUnhealthySecondThreshold": _INT32,
                "serviceUnhealthySecondThreshold": _INT32,
                "excludeHeadPodFromServeSvc": {"type": "boolean"},
                "upgradeStrategy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"type": {"type": "string", "enum": [
                        "NewCluster", "NewClusterWithIncrementalUpgrade", "None"]}},
                },
                "serveService": _OBJECT,
                "rayClusterConfig": _RAY_CLUSTER,
            },
        },
    },
}
