"""deploy/k8s: each overlay renders with kustomize into valid Kubernetes objects that run the suite as the code expects.

Rendering needs kubectl (its built-in kustomize); validation uses the Kubernetes JSON schemas that the
kubernetes-validate package ships, offline. No cluster is involved.
"""

from __future__ import annotations

import functools
import importlib.util
import ipaddress
import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from jsonschema import Draft202012Validator
from prometheus_client import CollectorRegistry
from referencing import Registry, Resource

from mcp_client_service.config.servers_file import HttpServerConfig, parse_servers_config
from suite_common.mcp_tool import MCP_PATH
from suite_common.metrics import metrics_route
from suite_common.ssrf import EgressPolicy, blocked_reason
from unit.deploy.components import COMPONENTS, DEPLOY, HEALTH_PATHS, ROOT, Component, component, parse_env_file

SECRET_VALUE = "a-secret-" + "0" * 32
"""What a test gives each secret setting: long enough for every rule (the tool-cache pepper: 32 characters)."""

OVERLAYS = ("dev", "prod")
KUBECTL = shutil.which("kubectl")
SCHEMAS = files("kubernetes_validate") / "kubernetes-json-schema"
OLDEST_SUPPORTED = "1.30.0"
"""matchLabelKeys in topology spread constraints (prod) is on by default from 1.27; 1.30 is the oldest still patched."""
SECRET = "loopsuite-secrets"
SHARED_SECRET_KEY = "mcp-service-secret"
DATABASE_URL_KEY = "database-url"
REDIS_URL_KEY = "redis-url"
REQUIRED_SECRET_KEYS = {SHARED_SECRET_KEY, DATABASE_URL_KEY, REDIS_URL_KEY}
CALLERS_KEY = "callers.toml"
"""The callers file, a file of the Secret mounted in prod's agent-service (required there)."""
"""Without these a pod cannot start: the others (provider keys and the like) are optional."""
CREDENTIAL_SETTINGS = {
    "agent-service": ["AGENT_DATABASE_URL", "AGENT_REDIS_URL"],
    "mcp-client-service": ["MCP_CLIENT_DATABASE_URL"],
}
"""Settings that are no ``SecretStr`` but hold a password all the same: from the Secret, never a ConfigMap."""
BACKING_SERVICES = {"dev": {"postgres", "redis"}, "prod": set()}
"""What an overlay runs beside the suite's components (prod's database is a managed one, outside the cluster)."""
POSTGRES_PORT = 5432
REDIS_PORT = 6379

# Values of the base ConfigMaps that differ from the code's defaults, on purpose: listen on the pod's
# address, find the other services by name, and what the containers' filesystem and network need.
CLUSTER_VALUES = {
    "agent-service": {"AGENT_HOST", "AGENT_COMPLETION_URL", "AGENT_MCP_CLIENT_URL"},
    "completion-service": {"COMPLETION_HOST", "COMPLETION_SHUTDOWN_GRACE_SECONDS"},
    "mcp-client-service": {
        "MCP_CLIENT_HOST",
        "MCP_CLIENT_SERVERS_FILE",
        "MCP_CLIENT_SSRF_ALLOW_PRIVATE",
        "MCP_CLIENT_SHUTDOWN_GRACE_SECONDS",
    },
    "mcp-rag-tool": {"RAG_HOST", "RAG_QDRANT_PATH"},
    "mcp-web-search": {"WEB_SEARCH_HOST"},
}

# The requests a service must let finish when it stops.
LONGEST_REQUEST = {
    "agent-service": "AGENT_RUN_DEADLINE_SECONDS",
    "completion-service": "COMPLETION_REQUEST_TIMEOUT_SECONDS",
    "mcp-client-service": "MCP_CLIENT_CALL_TIMEOUT_SECONDS",
}
LAST_WORDS_SECONDS = 5
"""After the drain, interrupted work sends its last event (suite_common.serve allows 2 s) and the process exits."""

# The only calls inside the namespace that the NetworkPolicies let through.
ALLOWED_CALLS = {
    ("agent-service", "completion-service"),
    ("agent-service", "mcp-client-service"),
    ("mcp-client-service", "mcp-rag-tool"),
    ("mcp-client-service", "mcp-web-search"),
}
PUBLIC_ADDRESS = "93.184.215.14"
SCRAPER_LABEL = "loopsuite.io/metrics-scraper"


@functools.cache
def rendered(overlay: str) -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: the Kubernetes overlays cannot be rendered (kubectl kustomize)")
    result = subprocess.run(
        [KUBECTL, "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def objects(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [item for item in rendered(overlay) if item["kind"] == kind]


def named(overlay: str, kind: str, name: str) -> dict[str, Any]:
    (found,) = [item for item in objects(overlay, kind) if item["metadata"]["name"] == name]
    return found


def container(overlay: str, item: Component) -> dict[str, Any]:
    (found,) = named(overlay, "Deployment", item.name)["spec"]["template"]["spec"]["containers"]
    assert isinstance(found, dict)
    return found


def config(overlay: str, item: Component) -> dict[str, str]:
    """The ConfigMap data the component's container reads through envFrom."""
    data: dict[str, str] = {}
    for source in container(overlay, item).get("envFrom", []):
        data.update(named(overlay, "ConfigMap", source["configMapRef"]["name"])["data"])
    return data


def secret_refs(overlay: str, item: Component) -> dict[str, dict[str, Any]]:
    """Environment variable -> its secretKeyRef."""
    return {
        env["name"]: env["valueFrom"]["secretKeyRef"]
        for env in container(overlay, item).get("env", [])
        if "secretKeyRef" in env.get("valueFrom", {})
    }


def _latest_schema_version() -> str:
    versions = [entry.name[1:].split("-")[0] for entry in SCHEMAS.iterdir() if entry.name.endswith("-local-strict")]
    return max(versions, key=lambda version: tuple(int(part) for part in version.split(".")))


@functools.cache
def _definitions(version: str) -> Registry[Any]:
    text = (SCHEMAS / f"v{version}-local-strict" / "_definitions.json").read_text(encoding="utf-8")
    return Resource.from_contents(json.loads(text)) @ Registry()


@functools.cache
def schema_validator(version: str, kind: str, api_version: str) -> Draft202012Validator:
    """The strict schema (unknown fields are errors) of one kind, as kubernetes-validate lays them out."""
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = json.loads(
        (SCHEMAS / f"v{version}-local-strict" / f"{kind.lower()}-{group}.json").read_text(encoding="utf-8")
    )
    return Draft202012Validator(schema, registry=Resource.from_contents(schema) @ _definitions(version))


def schema_errors(item: dict[str, Any], version: str) -> list[str]:
    validator = schema_validator(version, item["kind"], item["apiVersion"])
    where = f"{item['kind']}/{item['metadata']['name']}"
    return [f"{where} {'/'.join(map(str, error.path))}: {error.message}" for error in validator.iter_errors(item)]


# --- rendering and schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, _latest_schema_version()])
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_overlay_renders_into_objects_that_kubernetes_accepts(overlay: str, version: str) -> None:
    errors = [error for item in rendered(overlay) for error in schema_errors(item, version)]
    assert errors == []


def test_the_schema_check_would_catch_a_misspelt_field() -> None:
    deployment = json.loads(json.dumps(named("dev", "Deployment", "agent-service")))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/readyz"}}
    assert schema_errors(deployment, OLDEST_SUPPORTED) != []


def _built_images() -> dict[str, str]:
    """What ``make images`` (deploy/docker/build_images.py) tags, by component: ``loopsuite/<name>:<tag>``."""
    spec = importlib.util.spec_from_file_location("build_images", DEPLOY / "docker" / "build_images.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: module.image_name(name, "dev") for name in module.SUITE_IMAGES}


def test_the_dev_overlay_runs_exactly_the_images_make_images_builds() -> None:
    running = {item.name: container("dev", item)["image"] for item in COMPONENTS}
    assert running == _built_images()


def test_the_prod_overlay_runs_the_same_images_under_their_release_tag() -> None:
    built = _built_images()
    for item in COMPONENTS:
        repository, _, tag = container("prod", item)["image"].rpartition(":")
        assert repository == built[item.name].rpartition(":")[0]
        assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", tag), "prod runs a release, never the dev tag"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_and_tool_has_a_deployment_service_autoscaler_and_disruption_budget(overlay: str) -> None:
    for kind in ("HorizontalPodAutoscaler", "PodDisruptionBudget"):
        assert sorted(item["metadata"]["name"] for item in objects(overlay, kind)) == sorted(c.name for c in COMPONENTS)
    # A backing service the overlay runs may be a Deployment too (dev's Redis): one pod, no autoscaler.
    assert sorted(item["metadata"]["name"] for item in objects(overlay, "Deployment")) == sorted(
        [c.name for c in COMPONENTS] + [name for name in BACKING_SERVICES[overlay] if name != "postgres"]
    )
    assert sorted(item["metadata"]["name"] for item in objects(overlay, "Service")) == sorted(
        [c.name for c in COMPONENTS] + list(BACKING_SERVICES[overlay])
    )
    for item in COMPONENTS:
        deployment = named(overlay, "Deployment", item.name)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert _selects(deployment["spec"]["selector"]["matchLabels"], labels)
        assert "replicas" not in deployment["spec"], "the autoscaler owns the replica count"
        assert _selects(named(overlay, "Service", item.name)["spec"]["selector"], labels)
        assert _selects(named(overlay, "PodDisruptionBudget", item.name)["spec"]["selector"]["matchLabels"], labels)
        autoscaler = named(overlay, "HorizontalPodAutoscaler", item.name)
        assert autoscaler["apiVersion"] == "autoscaling/v2"
        assert autoscaler["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": item.name,
        }
        assert 1 <= autoscaler["spec"]["minReplicas"] <= autoscaler["spec"]["maxReplicas"]


def test_production_keeps_two_pods_of_everything_spread_over_nodes() -> None:
    for autoscaler in objects("prod", "HorizontalPodAutoscaler"):
        assert autoscaler["spec"]["minReplicas"] >= 2
    for deployment in objects("prod", "Deployment"):
        (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert spread["topologyKey"] == "kubernetes.io/hostname"
        assert "app.kubernetes.io/name" in spread["matchLabelKeys"]


# --- ports, probes, lifecycle ------------------------------------------------------------------------


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_ask_the_health_routes_on_the_port_the_service_listens_on(overlay: str, item: Component) -> None:
    spec = container(overlay, item)
    port = int(config(overlay, item)[item.env("port")])
    assert port == item.port
    assert spec["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert named(overlay, "Service", item.name)["spec"]["ports"] == [
        {"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}
    ]
    assert {"/healthz", "/readyz"} == HEALTH_PATHS
    assert spec["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert spec["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    if item.package.startswith("tools/"):
        assert spec["args"] == ["--transport", "streamable-http"]


def test_the_rag_tool_may_take_minutes_to_build_its_index_before_it_counts_as_started() -> None:
    probe = container("prod", component("mcp-rag-tool"))["startupProbe"]
    assert probe["httpGet"] == {"path": "/readyz", "port": "http"}
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 300


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_stopping_pod_drains_its_longest_request_before_kubernetes_kills_it(overlay: str, item: Component) -> None:
    data = config(overlay, item)
    drain = float(data[item.env("shutdown_grace_seconds")])
    if item.name in LONGEST_REQUEST:
        assert drain >= float(data[LONGEST_REQUEST[item.name]])
    pod = named(overlay, "Deployment", item.name)["spec"]["template"]["spec"]
    pause = int(container(overlay, item)["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] >= pause + drain + LAST_WORDS_SECONDS


# --- security ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_unprivileged_on_a_read_only_filesystem(overlay: str, item: Component) -> None:
    pod = named(overlay, "Deployment", item.name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False, "service links would add *_PORT variables next to the settings"
    spec = container(overlay, item)
    assert spec["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: volumes[mount["name"]] for mount in spec["volumeMounts"]}
    assert "emptyDir" in mounts["/tmp"], "the one writable place: /tmp on an emptyDir"
    assert all("sizeLimit" in volume["emptyDir"] for volume in volumes.values() if "emptyDir" in volume)


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_every_container_requests_resources_within_its_limits(item: Component) -> None:
    resources = container("prod", item)["resources"]
    for resource in ("cpu", "memory"):
        assert 0 < _quantity(resources["requests"][resource]) <= _quantity(resources["limits"][resource])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_namespace_enforces_the_restricted_pod_security_standard(overlay: str) -> None:
    (namespace,) = objects(overlay, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {item["metadata"].get("namespace") for item in rendered(overlay) if item["kind"] != "Namespace"} == {
        namespace["metadata"]["name"]
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_value_is_in_the_manifests_only_references_to_the_operators_secret(overlay: str) -> None:
    assert objects(overlay, "Secret") == []
    for item in COMPONENTS:
        refs = secret_refs(overlay, item)
        secret_settings = item.secret_env + CREDENTIAL_SETTINGS.get(item.name, [])
        assert sorted(refs) == sorted(secret_settings), f"{item.name}: each secret setting from the Secret"
        assert {ref["name"] for ref in refs.values()} <= {SECRET}
        assert set(secret_settings) & set(config(overlay, item)) == set(), "no secret setting in a ConfigMap"
        for name, ref in refs.items():
            assert ref.get("optional", False) is (ref["key"] not in REQUIRED_SECRET_KEYS), (
                f"{name}: only the shared secret and the database and Redis URLs are required"
            )
    shared = {
        secret_refs(overlay, component("agent-service"))["AGENT_MCP_SERVICE_SECRET"]["key"],
        secret_refs(overlay, component("mcp-client-service"))["MCP_CLIENT_SERVICE_SECRET"]["key"],
    }
    assert shared == {SHARED_SECRET_KEY}


def test_the_operations_guide_tells_the_operator_every_key_of_the_secret() -> None:
    keys = {
        env["valueFrom"]["secretKeyRef"]["key"]
        for overlay in OVERLAYS
        for item in rendered(overlay)
        if item["kind"] in ("Deployment", "StatefulSet")
        for spec in item["spec"]["template"]["spec"]["containers"]
        for env in spec.get("env", [])
        if "secretKeyRef" in env.get("valueFrom", {})
    }
    assert keys >= REQUIRED_SECRET_KEYS
    guide = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert sorted(key for key in keys if f"`{key}`" not in guide) == []
    assert "kubectl apply -k deploy/k8s/overlays/dev" in guide
    assert f"create secret generic {SECRET}" in guide


# --- configuration -------------------------------------------------------------------------------------


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_configmap_holds_every_setting_but_the_secrets_and_the_service_accepts_it(
    overlay: str, item: Component, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = config(overlay, item)
    documented = _base_config_file(item)[1]  # `# NAME=`: unset by default, named for the operator
    missing = [name for name in item.plain_env if name not in data and name not in documented]
    assert missing == [], f"add to deploy/k8s/base/config/{item.name}.env: {missing}"
    assert sorted(name for name in data if name not in item.settings_env) == []
    settings = item.load({**data, **dict.fromkeys(item.secret_env, SECRET_VALUE)}, monkeypatch)
    assert settings.host == "0.0.0.0"


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_the_base_configmaps_restate_the_code_defaults_but_where_the_cluster_needs_another_value(
    item: Component, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = _base_config_file(item)[0]
    secrets = dict.fromkeys(item.secret_env, SECRET_VALUE)
    from_file = item.load({**given, **secrets}, monkeypatch)
    defaults = item.load(secrets, monkeypatch)
    differing = {item.env(field) for field, value in from_file if value != getattr(defaults, field)}
    assert differing <= CLUSTER_VALUES[item.name], "a value the code no longer has as its default"


def _base_config_file(item: Component) -> tuple[dict[str, str], dict[str, str]]:
    return parse_env_file((DEPLOY / "k8s" / "base" / "config" / f"{item.name}.env").read_text(encoding="utf-8"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_agent_service_calls_the_other_services_by_their_service_names_and_ports(overlay: str) -> None:
    data = config(overlay, component("agent-service"))
    for setting, target in [
        ("AGENT_COMPLETION_URL", "completion-service"),
        ("AGENT_MCP_CLIENT_URL", "mcp-client-service"),
    ]:
        url = urlsplit(data[setting])
        assert (url.hostname, url.port) == (target, named(overlay, "Service", target)["spec"]["ports"][0]["port"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_mcp_client_service_reaches_the_tool_servers_by_service_name_over_streamable_http(overlay: str) -> None:
    gateway = component("mcp-client-service")
    servers_path = PurePosixPath(config(overlay, gateway)["MCP_CLIENT_SERVERS_FILE"])
    pod = named(overlay, "Deployment", gateway.name)["spec"]["template"]["spec"]
    (mount,) = [m for m in container(overlay, gateway)["volumeMounts"] if m["mountPath"] == str(servers_path.parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    text = named(overlay, "ConfigMap", volume["configMap"]["name"])["data"][servers_path.name]
    targets = set()
    for server in parse_servers_config(text).servers.values():
        assert isinstance(server, HttpServerConfig)
        url = urlsplit(server.url)
        service = named(overlay, "Service", str(url.hostname))
        assert (url.port, url.path) == (service["spec"]["ports"][0]["port"], MCP_PATH)
        targets.add(url.hostname)
    assert targets == {"mcp-rag-tool", "mcp-web-search"}


def test_compose_and_kubernetes_list_the_same_tool_servers() -> None:
    compose = (DEPLOY / "compose" / "mcp_servers.json").read_text(encoding="utf-8")
    kubernetes = (DEPLOY / "k8s" / "base" / "config" / "mcp_servers.json").read_text(encoding="utf-8")
    assert json.loads(compose) == json.loads(kubernetes)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_ssrf_guard_of_mcp_client_service_lets_it_reach_cluster_services_but_not_the_metadata_server(
    overlay: str,
) -> None:
    data = config(overlay, component("mcp-client-service"))
    policy = EgressPolicy.create(
        allow_loopback=data["MCP_CLIENT_SSRF_ALLOW_LOOPBACK"] == "true",
        allow_private=data["MCP_CLIENT_SSRF_ALLOW_PRIVATE"] == "true",
        allowed_cidrs=[cidr for cidr in data["MCP_CLIENT_SSRF_ALLOWED_NETWORKS"].split(",") if cidr],
    )
    assert blocked_reason("10.96.12.34", policy) is None  # a ClusterIP in kubeadm's default Service range
    assert blocked_reason("169.254.169.254", policy) is not None


def test_in_dev_the_rag_index_lives_in_local_mode_on_an_emptydir() -> None:
    rag = component("mcp-rag-tool")
    path = PurePosixPath(config("dev", rag)["RAG_QDRANT_PATH"])
    pod = named("dev", "Deployment", rag.name)["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = [m for m in container("dev", rag)["volumeMounts"] if path.is_relative_to(m["mountPath"])]
    assert mounts
    assert all("emptyDir" in volumes[m["name"]] for m in mounts)
    assert not config("dev", rag).get("RAG_QDRANT_URL")


def test_in_prod_the_rag_tool_uses_the_qdrant_server_which_its_network_policy_lets_it_reach() -> None:
    rag = component("mcp-rag-tool")
    url = urlsplit(config("prod", rag)["RAG_QDRANT_URL"])
    service, namespace = str(url.hostname).split(".")[:2]
    qdrant = {"namespace": namespace, "labels": {"app.kubernetes.io/name": service}}
    source = _pod("prod", rag.name)
    assert _egress_allowed(objects("prod", "NetworkPolicy"), source, qdrant, url.port or 80, "TCP")
    assert not _egress_allowed(objects("dev", "NetworkPolicy"), _pod("dev", rag.name), qdrant, url.port or 80, "TCP")


# --- the run store --------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_agent_service_stores_its_runs_in_postgresql_with_the_url_from_the_secret(overlay: str) -> None:
    agent = component("agent-service")
    ref = secret_refs(overlay, agent)["AGENT_DATABASE_URL"]
    assert (ref["name"], ref["key"], ref.get("optional", False)) == (SECRET, DATABASE_URL_KEY, False)
    assert "AGENT_DATABASE_URL" not in config(overlay, agent), "a ConfigMap value would hide nothing: env wins"
    assert _base_config_file(agent)[1].get("AGENT_DATABASE_URL") == "", "named for the operator, unset"
    assert config(overlay, agent)["AGENT_DATABASE_MIGRATE"] == "true", "no Job migrates the schema: the pods do"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_keeps_tenant_servers_in_postgresql_with_the_url_and_key_from_the_secret(overlay: str) -> None:
    gateway = component("mcp-client-service")
    refs = secret_refs(overlay, gateway)
    url = refs["MCP_CLIENT_DATABASE_URL"]
    assert (url["name"], url["key"], url.get("optional", False)) == (SECRET, DATABASE_URL_KEY, False)
    key = refs["MCP_CLIENT_SECRETS_KEY"]
    assert (key["name"], key["key"], key.get("optional", False)) == (SECRET, "mcp-client-secrets-key", True)
    assert "MCP_CLIENT_DATABASE_URL" not in config(overlay, gateway), "a ConfigMap value would hide nothing: env wins"
    assert config(overlay, gateway)["MCP_CLIENT_DATABASE_MIGRATE"] == "true", "no Job migrates the schema: the pods do"


def test_production_runs_agent_service_on_several_pods_that_share_the_runs() -> None:
    autoscaler = named("prod", "HorizontalPodAutoscaler", "agent-service")
    assert autoscaler["spec"]["minReplicas"] >= 2
    assert named("prod", "PodDisruptionBudget", "agent-service")["spec"]["maxUnavailable"] == 1


def test_dev_runs_its_own_single_postgres_on_a_volume_claim() -> None:
    (statefulset,) = objects("dev", "StatefulSet")
    assert statefulset["metadata"]["name"] == "postgres"
    assert statefulset["spec"]["replicas"] == 1
    pod = statefulset["spec"]["template"]["spec"]
    (spec,) = pod["containers"]
    assert spec["image"].startswith("postgres:")
    env = {item["name"]: item for item in spec["env"]}
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": SECRET, "key": "postgres-password"}
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    (data,) = [mount for mount in spec["volumeMounts"] if mount["name"] == claim["metadata"]["name"]]
    assert PurePosixPath(env["PGDATA"]["value"]).is_relative_to(data["mountPath"])
    assert PurePosixPath(env["PGDATA"]["value"]) != PurePosixPath(data["mountPath"]), "initdb wants its own folder"
    assert spec["readinessProbe"]["exec"]["command"][0] == "pg_isready"
    service = named("dev", "Service", statefulset["spec"]["serviceName"])
    assert _selects(service["spec"]["selector"], statefulset["spec"]["template"]["metadata"]["labels"])
    assert [port["port"] for port in service["spec"]["ports"]] == [POSTGRES_PORT]
    # The namespace enforces the restricted Pod Security Standard on this pod too.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert objects("prod", "StatefulSet") == [], "prod's database is a managed one"


def test_dev_postgres_stops_fast_within_its_grace_period() -> None:
    # SIGTERM alone waits for agent-service's pooled sessions to end: the SIGKILL after the grace period
    # would leave crash recovery for the next start.
    pod = named("dev", "StatefulSet", "postgres")["spec"]["template"]["spec"]
    command = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["pg_ctl", "stop"]
    assert "--mode=fast" in command
    (timeout,) = [int(arg.split("=")[1]) for arg in command if arg.startswith("--timeout=")]
    assert pod["terminationGracePeriodSeconds"] > timeout


def test_in_dev_only_agent_service_and_the_gateway_reach_postgres() -> None:
    policies = objects("dev", "NetworkPolicy")
    template = named("dev", "StatefulSet", "postgres")["spec"]["template"]
    postgres = {"namespace": named("dev", "StatefulSet", "postgres")["metadata"]["namespace"], **template["metadata"]}
    callers = {
        item.name for item in COMPONENTS if _call_allowed(policies, _pod("dev", item.name), postgres, POSTGRES_PORT)
    }
    assert callers == {"agent-service", "mcp-client-service"}
    outsider = {"namespace": "llm-core", "labels": {"app": "llm-core"}}
    assert not _ingress_allowed(policies, outsider, postgres, POSTGRES_PORT, "TCP")


def test_in_prod_only_agent_service_and_the_gateway_reach_a_managed_postgres_on_a_private_address() -> None:
    policies = objects("prod", "NetworkPolicy")
    callers = {
        item.name
        for item in COMPONENTS
        if _egress_to_ip(policies, _pod("prod", item.name), "10.20.30.40", POSTGRES_PORT)
    }
    assert callers == {"agent-service", "mcp-client-service"}
    for name in callers:
        pod = _pod("prod", name)
        assert not _egress_to_ip(policies, pod, "10.20.30.40", 22), "the database port only"
        assert not _egress_to_ip(policies, pod, "169.254.169.254", POSTGRES_PORT)
        assert not _egress_to_ip(policies, pod, PUBLIC_ADDRESS, POSTGRES_PORT)


# --- the run slots (Redis) -----------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_agent_service_shares_its_run_slots_in_redis_with_the_url_from_the_secret(overlay: str) -> None:
    agent = component("agent-service")
    ref = secret_refs(overlay, agent)["AGENT_REDIS_URL"]
    assert (ref["name"], ref["key"], ref.get("optional", False)) == (SECRET, REDIS_URL_KEY, False)
    assert "AGENT_REDIS_URL" not in config(overlay, agent), "a ConfigMap value would hide nothing: env wins"
    assert _base_config_file(agent)[1].get("AGENT_REDIS_URL") == "", "named for the operator, unset"
    assert config(overlay, agent)["AGENT_MAX_CONCURRENT_RUNS_PER_TENANT"] == "16"


# --- callers -------------------------------------------------------------------------------------------


def test_production_requires_a_caller_key_with_the_callers_file_from_the_secret() -> None:
    agent = component("agent-service")
    data = config("prod", agent)
    callers_file = PurePosixPath(data["AGENT_CALLERS_FILE"])
    assert data["AGENT_CALLER_KEYS_IN_STORE"] == "true", "keys may also be added in the store, without a rollout"
    [mount] = [
        m for m in container("prod", agent)["volumeMounts"] if PurePosixPath(m["mountPath"]) == callers_file.parent
    ]
    assert mount["readOnly"] is True
    [volume] = [
        v
        for v in named("prod", "Deployment", "agent-service")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == mount["name"]
    ]
    secret = volume["secret"]
    assert secret["secretName"] == SECRET
    assert secret.get("optional", False) is False, "no Secret key, no pod: never an open API"
    assert [(item["key"], item["path"]) for item in secret["items"]] == [(CALLERS_KEY, callers_file.name)]
    guide = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert f"`{CALLERS_KEY}`" in guide


def test_dev_leaves_the_api_open() -> None:
    data = config("dev", component("agent-service"))
    assert "AGENT_CALLERS_FILE" not in data
    assert data["AGENT_CALLER_KEYS_IN_STORE"] == "false"


def test_dev_runs_its_own_single_redis_in_memory_under_the_restricted_pod_security_standard() -> None:
    deployment = named("dev", "Deployment", "redis")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    (spec,) = pod["containers"]
    assert spec["image"].startswith("redis:7")
    assert spec["readinessProbe"]["exec"]["command"] == ["redis-cli", "ping"]
    service = named("dev", "Service", "redis")
    assert _selects(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    assert [port["port"] for port in service["spec"]["ports"]] == [REDIS_PORT]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert [item for item in objects("prod", "Deployment") if item["metadata"]["name"] == "redis"] == [], (
        "prod's Redis is a managed one"
    )


def test_in_dev_only_agent_service_reaches_redis() -> None:
    policies = objects("dev", "NetworkPolicy")
    deployment = named("dev", "Deployment", "redis")
    redis = {"namespace": deployment["metadata"]["namespace"], **deployment["spec"]["template"]["metadata"]}
    callers = {item.name for item in COMPONENTS if _call_allowed(policies, _pod("dev", item.name), redis, REDIS_PORT)}
    assert callers == {"agent-service"}
    outsider = {"namespace": "llm-core", "labels": {"app": "llm-core"}}
    assert not _ingress_allowed(policies, outsider, redis, REDIS_PORT, "TCP")


def test_in_prod_only_agent_service_reaches_a_managed_redis_on_a_private_address() -> None:
    policies = objects("prod", "NetworkPolicy")
    callers = {
        item.name for item in COMPONENTS if _egress_to_ip(policies, _pod("prod", item.name), "10.20.30.50", REDIS_PORT)
    }
    assert callers == {"agent-service"}
    agent = _pod("prod", "agent-service")
    assert not _egress_to_ip(policies, agent, "169.254.169.254", REDIS_PORT)
    assert not _egress_to_ip(policies, agent, PUBLIC_ADDRESS, REDIS_PORT)


# --- network policies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_let_through_only_the_calls_the_suite_makes(overlay: str) -> None:
    policies = objects(overlay, "NetworkPolicy")
    allowed = set()
    for source in COMPONENTS:
        for target in COMPONENTS:
            port = int(container(overlay, target)["ports"][0]["containerPort"])
            if _call_allowed(policies, _pod(overlay, source.name), _pod(overlay, target.name), port):
                allowed.add((source.name, target.name))
    assert allowed == ALLOWED_CALLS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_from_outside_the_namespace_only_agent_service_can_be_called(overlay: str) -> None:
    policies = objects(overlay, "NetworkPolicy")
    caller = {"namespace": "llm-core", "labels": {"app": "llm-core"}}
    reachable = {
        item.name
        for item in COMPONENTS
        if _ingress_allowed(policies, caller, _pod(overlay, item.name), item.port, "TCP")
    }
    assert reachable == {"agent-service"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_services_metrics_can_be_scraped_from_a_namespace_labelled_for_it(overlay: str) -> None:
    policies = objects(overlay, "NetworkPolicy")
    scraper = {"namespace": "monitoring", "namespace_labels": {SCRAPER_LABEL: "true"}, "labels": {"app": "prometheus"}}
    for name in ("agent-service", "completion-service", "mcp-client-service"):
        item = component(name)
        annotations = named(overlay, "Deployment", name)["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(item.port),
            "prometheus.io/path": metrics_route(CollectorRegistry()).path,
        }
        assert _ingress_allowed(policies, scraper, _pod(overlay, name), item.port, "TCP")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_may_resolve_names_with_the_cluster_dns(overlay: str) -> None:
    policies = objects(overlay, "NetworkPolicy")
    dns = {"namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}}
    for item in COMPONENTS:
        assert _egress_allowed(policies, _pod(overlay, item.name), dns, 53, "UDP")
        assert _egress_allowed(policies, _pod(overlay, item.name), dns, 53, "TCP")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_completion_service_and_web_search_reach_the_internet_and_never_private_or_metadata_addresses(
    overlay: str,
) -> None:
    policies = objects(overlay, "NetworkPolicy")
    online = {
        item.name for item in COMPONENTS if _egress_to_ip(policies, _pod(overlay, item.name), PUBLIC_ADDRESS, 443)
    }
    assert online == {"completion-service", "mcp-web-search"}
    for item in COMPONENTS:
        for address in ("169.254.169.254", "10.0.0.7", "192.168.1.1", "127.0.0.1"):
            assert not _egress_to_ip(policies, _pod(overlay, item.name), address, 443), (item.name, address)


def _pod(overlay: str, name: str) -> dict[str, Any]:
    template = named(overlay, "Deployment", name)["spec"]["template"]
    namespace = named(overlay, "Deployment", name)["metadata"]["namespace"]
    return {"namespace": namespace, "labels": template["metadata"]["labels"]}


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"} or "matchExpressions" not in selector, "only matchLabels is modelled"
    match_labels = selector.get("matchLabels", selector)
    return all(labels.get(key) == value for key, value in match_labels.items())


def _policies_for(policies: Iterable[dict[str, Any]], pod: Mapping[str, Any], direction: str) -> list[dict[str, Any]]:
    return [
        policy
        for policy in policies
        if policy["metadata"]["namespace"] == pod["namespace"]
        and direction in policy["spec"].get("policyTypes", ["Ingress"])
        and _selects(policy["spec"]["podSelector"], pod["labels"])
    ]


def _peer_matches(peer: Mapping[str, Any], policy_namespace: str, pod: Mapping[str, Any]) -> bool:
    if "ipBlock" in peer:
        return False  # pods are addressed by selectors here; ipBlock is for addresses outside the cluster
    namespace_labels = {"kubernetes.io/metadata.name": pod["namespace"], **pod.get("namespace_labels", {})}
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], namespace_labels):
            return False
    elif pod["namespace"] != policy_namespace:
        return False
    return _selects(peer.get("podSelector", {}), pod["labels"])


def _port_matches(rule: Mapping[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports)


def _egress_allowed(
    policies: list[dict[str, Any]], source: Mapping[str, Any], target: Mapping[str, Any], port: int, protocol: str
) -> bool:
    selecting = _policies_for(policies, source, "Egress")
    return not selecting or any(
        _port_matches(rule, port, protocol)
        and (
            not rule.get("to")
            or any(_peer_matches(peer, policy["metadata"]["namespace"], target) for peer in rule["to"])
        )
        for policy in selecting
        for rule in policy["spec"].get("egress", [])
    )


def _ingress_allowed(
    policies: list[dict[str, Any]], source: Mapping[str, Any], target: Mapping[str, Any], port: int, protocol: str
) -> bool:
    selecting = _policies_for(policies, target, "Ingress")
    return not selecting or any(
        _port_matches(rule, port, protocol)
        and (
            not rule.get("from")
            or any(_peer_matches(peer, policy["metadata"]["namespace"], source) for peer in rule["from"])
        )
        for policy in selecting
        for rule in policy["spec"].get("ingress", [])
    )


def _call_allowed(
    policies: list[dict[str, Any]], source: Mapping[str, Any], target: Mapping[str, Any], port: int
) -> bool:
    return _egress_allowed(policies, source, target, port, "TCP") and _ingress_allowed(
        policies, source, target, port, "TCP"
    )


def _egress_to_ip(policies: list[dict[str, Any]], source: Mapping[str, Any], address: str, port: int) -> bool:
    ip = ipaddress.ip_address(address)

    def in_block(block: Mapping[str, Any]) -> bool:
        network = ipaddress.ip_network(block["cidr"])
        if ip.version != network.version or ip not in network:
            return False
        return not any(ip in ipaddress.ip_network(excluded) for excluded in block.get("except", []))

    selecting = _policies_for(policies, source, "Egress")
    return not selecting or any(
        _port_matches(rule, port, "TCP")
        and (not rule.get("to") or any("ipBlock" in peer and in_block(peer["ipBlock"]) for peer in rule["to"]))
        for policy in selecting
        for rule in policy["spec"].get("egress", [])
    )


def _quantity(value: str | int) -> float:
    units = {"m": 1e-3, "": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    assert match, f"not a quantity: {value!r}"
    assert match[2] in units, f"not a unit of quantity: {value!r}"
    return float(match[1]) * units[match[2]]
