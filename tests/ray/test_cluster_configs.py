"""The deployment files under cluster/ agree with the code and with each other.

- Serve configs (cluster/serve/*.yaml and the RayService's serveConfigV2) validate against Ray's own
  `ray.serve.schema.ServeDeploySchema`; the Citadel configs they name load with
  `citadel.config.load_config`.
- Serve-config `deployments:` entries name deployments the builder (`serving.ray.app:build_app`) makes for
  that app's topology and config, and every field they set equals what the builder sets from the
  Citadel config (Serve's value would win, so a difference would silently change the deployment).
- GPU shares: the same in both files, and each fits one GPU worker of the KubeRay manifests.
- KubeRay manifests: no RayService/RayCluster CRD schema is available offline, so these are
  structural checks (apiVersion ray.io/v1, kind, required keys, string rayStartParams), plus: only
  the GPU group asks for nvidia.com/gpu, every pod mounts the shared Citadel home and gets its
  secrets from a Secret, the RayService embeds cluster/serve/gpu-split.yaml and the plain
  RayCluster has the same spec.
- The local Serve config binds 127.0.0.1 (DESIGN.md §8).
- The GPU Serve configs (the RayService's too) run a second app, `citadel-jobs`, which keeps the
  deployment's one job runner actor (indexing/job_runner.py) where no CLI starts it, with the gateways'
  runner threads off in the Citadel config they share.
Paths are resolved from the repo root, so the tests do not depend on the working directory.
Nothing here starts Ray.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from citadel.config import CitadelConfig, load_config

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "cluster"
LOCAL_SERVE = CLUSTER / "serve" / "local.yaml"
GPU_SERVE = CLUSTER / "serve" / "gpu-split.yaml"
LOCAL_CITADEL = CLUSTER / "local.yaml"
GPU_CITADEL = CLUSTER / "gpu.yaml"
RAYSERVICE = CLUSTER / "kuberay" / "rayservice.yaml"
RAYCLUSTER = CLUSTER / "kuberay" / "raycluster.yaml"

GPU = "nvidia.com/gpu"
IMPORT_PATH = "serving.ray.app:build_app"
JOBS_IMPORT_PATH = "indexing.job_runner:build_app"
SPLIT_STAGES = {"gateway", "embedder", "retriever", "generator", "orchestrator"}
GPU_STAGES = {"embedder", "reranker", "generator"}
SECRET_ENV = {"CITADEL_REDIS_URL"}


# ------------------------------------------------------------------------------------ loading
def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _docs(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _the(path: Path, kind: str) -> dict:
    found = [doc for doc in _docs(path) if doc.get("kind") == kind]
    assert len(found) == 1, f"{path.name}: expected one {kind}, found {len(found)}"
    return found[0]


def _embedded_serve_config() -> dict:
    text = _the(RAYSERVICE, "RayService")["spec"]["serveConfigV2"]
    assert isinstance(text, str), "serveConfigV2 is a string holding the Serve config YAML"
    return yaml.safe_load(text)


SERVE_CONFIGS = {
    "local": lambda: _yaml(LOCAL_SERVE),
    "gpu-split": lambda: _yaml(GPU_SERVE),
    "rayservice": _embedded_serve_config,
}


def _citadel(path: Path) -> CitadelConfig:
    return load_config(path, environ={})  # the files alone: no CITADEL_* from the environment


def _app_config(app: dict) -> CitadelConfig:
    """The config an app entry builds with: its args.config file, then args.topology (as app_config)."""
    args = app.get("args") or {}
    config = _citadel(REPO / args["config"])
    if args.get("topology"):
        config.serving.topology = args["topology"]
    return config


def _apps(name: str) -> list[dict]:
    """The serving apps of a Serve config (serving.ray.app:build_app), not its citadel-jobs app."""
    apps = [app for app in SERVE_CONFIGS[name]()["applications"] if app["import_path"] == IMPORT_PATH]
    assert apps, f"{name}: no applications"
    return apps


def _the_app(serve: dict, name: str = "citadel") -> dict:
    (app,) = [app for app in serve["applications"] if app["name"] == name]
    return app


def expected_deployments(config: CitadelConfig) -> set[str]:
    """The deployment names serving/ray/app.py build_app_for makes for this config."""
    if config.serving.topology == "fused":
        return {"fused"}
    return SPLIT_STAGES | ({"reranker"} if config.answer.reranker != "none" else set())


def _groups(cluster_spec: dict) -> dict[str, dict]:
    groups = {"head": cluster_spec["headGroupSpec"]}
    for group in cluster_spec["workerGroupSpecs"]:
        groups[group["groupName"]] = group
    return groups


def _containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


def _gpus(container: dict) -> float:
    resources = container.get("resources") or {}
    limits = float((resources.get("limits") or {}).get(GPU, 0))
    requests = (resources.get("requests") or {}).get(GPU)
    if requests is not None:
        assert float(requests) == limits, f"{container['name']}: GPU requests and limits differ"
    return limits


def _cpus(container: dict) -> float:
    value = str(container["resources"]["limits"]["cpu"])
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _cluster_specs() -> dict[str, dict]:
    return {"rayservice": _the(RAYSERVICE, "RayService")["spec"]["rayClusterConfig"],
            "raycluster": _the(RAYCLUSTER, "RayCluster")["spec"]}


def _gpu_worker(cluster_spec: dict) -> dict:
    gpu_groups = [g for name, g in _groups(cluster_spec).items() if any(_gpus(c) for c in _containers(g))]
    assert len(gpu_groups) == 1, "exactly one worker group asks for GPUs"
    return gpu_groups[0]


@pytest.fixture
def clean_env(monkeypatch):
    """serving.ray.app.app_config reads CITADEL_* from the environment: none of the caller's."""
    import os

    for name in list(os.environ):
        if name.startswith("CITADEL_"):
            monkeypatch.delenv(name)


# ------------------------------------------------------------------------------ serve configs
@pytest.mark.parametrize("name", sorted(SERVE_CONFIGS))
def test_serve_config_validates_against_serve_schema(name):
    schema = pytest.importorskip("ray.serve.schema")
    parsed = schema.ServeDeploySchema.model_validate(SERVE_CONFIGS[name]())
    names = [app.name for app in parsed.applications]
    assert names == (["citadel"] if name == "local" else ["citadel", "citadel-jobs"])
    for app in parsed.applications:
        if app.name == "citadel-jobs":  # no HTTP route; the Citadel config of the serving app
            assert (app.route_prefix, app.import_path) == (None, JOBS_IMPORT_PATH)
            assert app.args == {"config": parsed.applications[0].args["config"]}
            continue
        assert app.route_prefix == "/"
        assert app.import_path == IMPORT_PATH
        assert set(app.args) <= {"config", "topology"}
        assert app.args.get("topology") in ("fused", "split")


@pytest.mark.parametrize("path", [LOCAL_CITADEL, GPU_CITADEL], ids=lambda p: p.name)
def test_citadel_config_loads(path):
    config = _citadel(path)
    assert isinstance(config, CitadelConfig)
    for name in expected_deployments(config):
        assert name in config.serving.deployments


def test_local_serve_config_binds_loopback_and_matches_local_citadel_config():
    serve = _yaml(LOCAL_SERVE)
    assert serve["http_options"] == {"host": "127.0.0.1", "port": 8000}
    assert serve["proxy_location"] == "HeadOnly"
    (app,) = serve["applications"]
    assert app["args"] == {"config": "cluster/local.yaml", "topology": "fused"}
    assert "deployments" not in app  # the Citadel config alone sets the deployment options

    config = _citadel(LOCAL_CITADEL)
    assert config.home == Path("./var")
    assert config.serving.topology == "fused"
    assert (config.serving.host, config.serving.port) == ("127.0.0.1", 8000)
    assert all(s.num_gpus == 0 for s in config.serving.deployments.values())


def test_gpu_citadel_config_is_split_with_gpu_models():
    config = _citadel(GPU_CITADEL)
    assert config.serving.topology == "split"
    assert config.answer.reranker == "cross_encoder"
    assert config.answer.cross_encoder_dir is not None
    assert config.answer.cross_encoder_dir.is_relative_to("/models")
    assert config.answer.generator in ("openai_compatible", "local_llm")
    assert not config.jobs.embedded_runner  # the citadel-jobs app's runner actor works the queue
    serve = _yaml(GPU_SERVE)
    app = _the_app(serve)
    assert app["args"] == {"config": "cluster/gpu.yaml", "topology": "split"}
    assert serve["http_options"]["port"] == config.serving.port


@pytest.mark.parametrize("name", sorted(SERVE_CONFIGS))
def test_app_args_name_an_existing_config_of_the_same_topology(name):
    for app in _apps(name):
        path = REPO / app["args"]["config"]
        assert path.is_file(), f"{name}: args.config {app['args']['config']} is not a file under the repo root"
        # args.topology overrides the file's; they should not disagree silently.
        assert app["args"]["topology"] == _citadel(path).serving.topology


@pytest.mark.parametrize("name", sorted(SERVE_CONFIGS))
def test_deployment_overrides_name_deployments_the_builder_makes(name):
    for app in _apps(name):
        names = [entry["name"] for entry in app.get("deployments") or []]
        assert len(names) == len(set(names)), f"{name}: a deployment is listed twice"
        unknown = set(names) - expected_deployments(_app_config(app))
        assert not unknown, f"{name}: Serve would reject deployments the builder does not make: {unknown}"


@pytest.mark.parametrize("name", sorted(SERVE_CONFIGS))
def test_builder_makes_the_expected_deployments(name, clean_env):
    ray = pytest.importorskip("ray")
    built_app = pytest.importorskip("ray.serve._private.build_app")  # Serve's own graph walk (no cluster needed)
    from serving.ray.app import build_app

    for app in _apps(name):
        args = {**app["args"], "config": str(REPO / app["args"]["config"])}
        built = built_app.build_app(build_app(args), name=app["name"])
        assert {d.name for d in built.deployments} == expected_deployments(_app_config(app))
        assert built.ingress_deployment_name == ("fused" if args["topology"] == "fused" else "gateway")
    assert not ray.is_initialized()


def test_the_jobs_app_builds_one_job_runner_replica(clean_env):
    ray = pytest.importorskip("ray")
    built_app = pytest.importorskip("ray.serve._private.build_app")
    from indexing.job_runner import JOBS_APP_NAME, KEEPER_DEPLOYMENT, build_app

    app = _the_app(_yaml(GPU_SERVE), JOBS_APP_NAME)
    built = built_app.build_app(build_app({"config": str(REPO / app["args"]["config"])}), name=app["name"])
    (keeper,) = built.deployments
    assert (keeper.name, keeper.num_replicas, built.ingress_deployment_name) == (KEEPER_DEPLOYMENT, 1, KEEPER_DEPLOYMENT)
    assert keeper.ray_actor_options["num_cpus"] == 0  # the runner actor reserves its own CPU share
    assert not ray.is_initialized()


@pytest.mark.parametrize("name", sorted(SERVE_CONFIGS))
def test_deployment_overrides_equal_the_builder_options(name):
    """Serve applies these over the builder's options (its value wins; ray_actor_options and
    autoscaling_config replace the builder's dict whole), so each must equal the builder's."""
    pytest.importorskip("ray")
    from serving.ray.app import deployment_options

    for app in _apps(name):
        settings = _app_config(app).serving.deployments
        for entry in app.get("deployments") or []:
            options = deployment_options(entry["name"], settings[entry["name"]])
            for key, value in entry.items():
                assert key in options, f"{name}/{entry['name']}: {key} is not set by the builder"
                assert value == options[key], f"{name}/{entry['name']}.{key}: Serve config {value} != config {options[key]}"


def test_gpu_shares_agree_and_fit_a_gpu_worker():
    config = _citadel(GPU_CITADEL)
    built = expected_deployments(config)
    from_citadel = {n: s.num_gpus for n, s in config.serving.deployments.items() if n in built and s.num_gpus > 0}
    app = _the_app(_yaml(GPU_SERVE))
    from_serve = {e["name"]: e["ray_actor_options"]["num_gpus"] for e in app["deployments"]
                  if (e.get("ray_actor_options") or {}).get("num_gpus", 0) > 0}
    assert set(from_citadel) == GPU_STAGES
    assert from_serve == from_citadel

    for cluster_name, spec in _cluster_specs().items():
        (container,) = _containers(_gpu_worker(spec))
        gpus, cpus = _gpus(container), _cpus(container)
        params = _gpu_worker(spec).get("rayStartParams") or {}
        if "num-gpus" in params:
            assert float(params["num-gpus"]) == gpus
        for stage, share in from_citadel.items():
            assert 0 < share <= gpus, f"{cluster_name}: {stage} needs {share} GPUs, a GPU worker has {gpus}"
            assert config.serving.deployments[stage].num_cpus <= cpus
        # one replica of every GPU stage fits one GPU worker
        assert sum(from_citadel.values()) <= gpus


# --------------------------------------------------------------------------- KubeRay manifests
def test_rayservice_embeds_the_gpu_split_serve_config():
    assert _embedded_serve_config() == _yaml(GPU_SERVE)


def test_raycluster_has_the_rayservice_cluster_spec_and_volumes():
    specs = _cluster_specs()
    assert specs["raycluster"] == specs["rayservice"]
    claims = lambda path: [d for d in _docs(path) if d["kind"] == "PersistentVolumeClaim"]  # noqa: E731
    assert claims(RAYCLUSTER) == claims(RAYSERVICE)


@pytest.mark.parametrize("path,kind", [(RAYSERVICE, "RayService"), (RAYCLUSTER, "RayCluster")],
                         ids=["rayservice", "raycluster"])
def test_kuberay_manifest_structure(path, kind):
    resource = _the(path, kind)
    assert resource["apiVersion"] == "ray.io/v1"
    assert resource["metadata"]["name"]
    spec = resource["spec"]
    if kind == "RayService":
        assert set(spec) >= {"serveConfigV2", "rayClusterConfig"}
        spec = spec["rayClusterConfig"]
    assert set(spec) >= {"rayVersion", "headGroupSpec", "workerGroupSpecs"}
    pinned = re.search(r'"ray\[[^\]]*\]==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert pinned and spec["rayVersion"] == pinned.group(1)

    groups = _groups(spec)
    assert set(groups) == {"head", "gpu", "cpu"}
    head_params = groups["head"]["rayStartParams"]
    assert head_params["num-cpus"] == "0"  # no replicas on the head
    for name, group in groups.items():
        assert all(isinstance(v, str) for v in group["rayStartParams"].values()), f"{name}: rayStartParams are strings"
        assert _containers(group), f"{name}: no containers"
        for container in _containers(group):
            assert container["name"] and container["image"]
            assert set(container["resources"]) == {"requests", "limits"}
        if name != "head":
            assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    for other in _docs(path):
        assert set(other) >= {"apiVersion", "kind", "metadata", "spec"}


@pytest.mark.parametrize("cluster_name", ["rayservice", "raycluster"])
def test_only_the_gpu_group_requests_gpus(cluster_name):
    for name, group in _groups(_cluster_specs()[cluster_name]).items():
        for container in _containers(group):
            if name == "gpu":
                assert _gpus(container) >= 1, f"{container['name']} in the GPU group asks for no {GPU}"
            else:
                assert _gpus(container) == 0, f"{container['name']} in group {name} asks for a GPU"
                assert GPU not in (container["resources"].get("requests") or {})
        if name == "gpu":
            tolerated = {t.get("key") for t in group["template"]["spec"].get("tolerations") or []}
            assert GPU in tolerated


@pytest.mark.parametrize("cluster_name", ["rayservice", "raycluster"])
def test_every_pod_shares_home_config_and_secrets(cluster_name):
    config = _citadel(GPU_CITADEL)
    app = _the_app(_yaml(GPU_SERVE))
    paths = {path: _docs(path) for path in (RAYSERVICE, RAYCLUSTER)}
    claims = {d["metadata"]["name"]: d for docs in paths.values() for d in docs if d["kind"] == "PersistentVolumeClaim"}

    for name, group in _groups(_cluster_specs()[cluster_name]).items():
        pod = group["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in _containers(group):
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
            home = mounts.get(str(config.home))
            assert home and "persistentVolumeClaim" in home, f"{name}: home {config.home} is not a mounted volume"
            claim = claims[home["persistentVolumeClaim"]["claimName"]]
            assert "ReadWriteMany" in claim["spec"]["accessModes"]
            identity = mounts.get(str(config.identity.credentials_file.parent))
            assert identity and "secret" in identity, f"{name}: credentials_file is not mounted from a Secret"
            assert config.identity.service_keys_file.parent == config.identity.credentials_file.parent
            assert {"credentials.json", "service_keys.json"} <= {i["path"] for i in identity["secret"]["items"]}
            if name == "gpu":
                models = [m for m in mounts if config.answer.cross_encoder_dir.is_relative_to(m)]
                assert models, f"{name}: {config.answer.cross_encoder_dir} is on no mounted volume"

            env = {e["name"]: e for e in container["env"]}
            for secret in SECRET_ENV:
                assert "secretKeyRef" in env[secret].get("valueFrom", {}), f"{name}: {secret} not from a Secret"
            # relative Serve args resolve in the container's working directory
            assert Path(container["workingDir"]) / app["args"]["config"] == Path(env["CITADEL_CONFIG"]["value"])
            ports = {p["containerPort"] for p in container.get("ports") or []}
            assert config.serving.port in ports
            # Serve reads its request-path switches when each Ray process starts: every pod sets them
            from serving.ray.local import LEAN_REQUEST_PATH

            if config.serving.lean_request_path:
                for variable, value in LEAN_REQUEST_PATH.items():
                    assert env.get(variable, {}).get("value") == value, f"{name}: {variable} is not {value}"


def test_app_config_loads_local_yaml_with_the_topology_of_args(clean_env, monkeypatch):
    pytest.importorskip("ray")
    from serving.ray.app import app_config

    monkeypatch.chdir(REPO)  # home ./var resolves against the working directory, as in a Serve replica
    path = str(LOCAL_CITADEL)
    split = app_config({"config": path, "topology": "split"})
    assert split.serving.topology == "split"
    assert split.home == REPO / "var"
    assert app_config({"config": path, "topology": "fused"}).serving.topology == "fused"
    assert app_config({"config": path}).serving.topology == "fused"


# ------------------------------------------------------------------------------ multi-node placement
MULTINODE_CITADEL = CLUSTER / "multinode.yaml"


def test_multinode_placement_survives_the_loss_of_one_worker(clean_env):
    """cluster/multinode.yaml (the node-kill drill's deployment): every stage but the ingress has two
    replicas on two nodes; the ingress sits on the head, which has no CPUs; one replica of every
    stage fits one worker as the file's own `citadel cluster up` line sizes it."""
    pytest.importorskip("ray")
    from serving.ray.app import deployment_options

    text = MULTINODE_CITADEL.read_text()
    config = load_config(MULTINODE_CITADEL)
    worker_cpus = float(re.search(r"citadel cluster up .*--cpus-per-node (\d+)", text).group(1))
    for topology in ("split", "fused"):
        config.serving.topology = topology
        per_worker = 0.0
        for name in sorted(expected_deployments(config)):
            options = deployment_options(name, config.serving.deployments[name])
            actor = options["ray_actor_options"]
            if name == "gateway":
                assert actor["num_cpus"] == 0 and set(actor["resources"]) == {"citadel_node_head"}, options
                continue
            assert options.get("num_replicas", 0) >= 2, f"{name}: one replica stalls its stage when its node dies"
            assert options["max_replicas_per_node"] == 1, f"{name}: both replicas could share the node that dies"
            assert options["health_check_period_s"] <= 2
            per_worker += actor["num_cpus"]
        assert per_worker <= worker_cpus, f"{topology}: one replica of each stage needs {per_worker} CPUs a worker"


def test_placement_settings_reach_serve_only_when_set():
    pytest.importorskip("ray")
    from citadel.config import DeploymentSettings
    from serving.ray.app import deployment_options

    plain = deployment_options("generator", DeploymentSettings())
    assert not {"max_replicas_per_node", "health_check_period_s"} & set(plain)
    assert "resources" not in plain["ray_actor_options"]
    placed = deployment_options("generator", DeploymentSettings(max_replicas_per_node=1, health_check_period_s=2,
                                                             resources={"citadel_node_w1": 0.5}))
    assert placed["max_replicas_per_node"] == 1 and placed["health_check_period_s"] == 2
    assert placed["ray_actor_options"]["resources"] == {"citadel_node_w1": 0.5}


def test_a_replica_asks_a_positive_amount_of_each_custom_resource():
    from pydantic import ValidationError

    from citadel.config import DeploymentSettings

    with pytest.raises(ValidationError, match="positive amount"):
        DeploymentSettings(resources={"citadel_node_head": 0})


def test_serve_switches_follow_the_serving_config():
    """The environment `citadel up` sets before Ray starts: the lean request path by default; Serve's
    direct ingress with a short drain only when asked for (Serve's throughput mode turns it on as well);
    HAProxy refused on loopback (its stats and exporter ports bind every interface)."""
    from serving.ray.local import DIRECT_INGRESS_DRAIN, LEAN_REQUEST_PATH, serve_switches

    config = CitadelConfig()
    assert serve_switches(config) == LEAN_REQUEST_PATH
    config.serving.direct_ingress, config.serving.direct_ingress_drain_s = True, 1.5
    switches = serve_switches(config)
    assert switches["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1" and switches[DIRECT_INGRESS_DRAIN] == "1.5"
    config.serving.direct_ingress, config.serving.throughput_optimized = False, True
    assert "RAY_SERVE_ENABLE_DIRECT_INGRESS" not in serve_switches(config)
    assert serve_switches(config)[DIRECT_INGRESS_DRAIN] == "1.5"
    config.serving.haproxy_ingress = True
    with pytest.raises(ValueError, match="all interfaces"):
        serve_switches(config)
