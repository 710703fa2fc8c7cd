"""What operators run, in ``infra/``: checked offline, nothing started.

- The systemd units pass ``systemd-analyze verify`` with nothing to say (a misspelt
  directive, a bad value or a missing executable makes it speak).
- The Kubernetes manifests validate against the schemas ``kubernetes-validate`` ships
  for ``K8S_VERSION``, strictly (an unknown field fails).
- Every ``ATOMQ_*`` variable named anywhere in ``infra/`` is one atomq reads, every value
  the env example and the ConfigMap give one is one its option accepts, and every flag of
  an ``atomq`` command line in a unit or a manifest is one of that command's options: a
  renamed option breaks this test, not an operator's deployment.

Not checked: that the units start on a real systemd, that the pods run on a real cluster,
that the image exists, that valkey-node.conf.example is read by a real valkey-server.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from atomq import defaults
from atomq.api.auth import PUBLIC_PATHS
from atomq.cli import main
from atomq.node.owner_key import OWNER_KEY_ENV
from atomq.spark_workers.processes import SPARK
from atomq.workers.processes import FORK

INFRA = Path(__file__).resolve().parent.parent / "infra"
SYSTEMD = INFRA / "systemd"
KUBERNETES = INFRA / "kubernetes"
UNITS = sorted(SYSTEMD.glob("*.service"))
ENV_EXAMPLE = SYSTEMD / "atomq.env.example"
# *.yaml is what `kubectl apply -f infra/kubernetes/` applies; the Secret's example is not
# applied (it is created with kubectl) but is validated all the same.
MANIFESTS = sorted([*KUBERNETES.glob("*.yaml"), *KUBERNETES.glob("*.yaml.example")])

K8S_VERSION = "1.33.0"
"""The Kubernetes version the manifests are validated against (its schemas ship with
kubernetes-validate, so no network is needed)."""
INSTALL_PREFIX = "/opt/atomq/"
"""Where the units expect atomq and valkey-server (see infra/README.md)."""
TEMPLATE_INSTANCE = "7001"
"""The instance a template unit (NAME@.service) is verified as."""
TOLERATED_VERIFY_LINES: tuple[re.Pattern[str], ...] = ()
"""Lines of ``systemd-analyze verify`` that do not count as complaints. None so far: on
systemd 252 a unit's User= that does not exist on this machine (atomq, valkey) draws no
remark, and the executables are replaced by stand-ins (see ``staged_units``). Add a
pattern here, with the reason, only for a remark that is about this machine, never about
the units."""

EXEC_LINE = re.compile(r"^(Exec(?:Start|StartPre|StartPost|Stop|StopPost|Reload|Condition))=(.*)$", re.M)
ATOMQ_VARIABLE = re.compile(r"\bATOMQ_[A-Z0-9_]*[A-Z0-9]\b")
ENV_ASSIGNMENT = re.compile(r"^#?(ATOMQ_[A-Z0-9_]+)=(.*)$", re.M)


# -- what the command line reads -------------------------------------------------------------------


def commands() -> dict[str, click.Command]:
    """Every command of ``atomq`` by its name, subcommands of groups as "group sub"."""
    found: dict[str, click.Command] = {}

    def walk(command: click.Command, name: str) -> None:
        found[name] = command
        if isinstance(command, click.Group):
            for sub_name, sub in command.commands.items():
                walk(sub, f"{name} {sub_name}".strip())

    walk(main, "")
    return found


def envvars(option: click.Option) -> list[str]:
    if option.envvar is None:
        return []
    return [option.envvar] if isinstance(option.envvar, str) else list(option.envvar)


def options_by_variable() -> dict[str, list[click.Option]]:
    """The options that read each ``ATOMQ_*`` variable, over every command."""
    found: dict[str, list[click.Option]] = {}
    for command in commands().values():
        for param in command.params:
            if isinstance(param, click.Option):
                for name in envvars(param):
                    found.setdefault(name, []).append(param)
    return found


def variables_atomq_reads() -> set[str]:
    """The options' variables, and those the code reads itself (the owner key, the
    processes registered for each engine)."""
    return set(options_by_variable()) | {OWNER_KEY_ENV, FORK.env, SPARK.env}


def flags_of(command: click.Command) -> set[str]:
    return {opt for param in command.params if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts)}


def check_command_line(argv: list[str], where: str) -> click.Command:
    """The atomq command ``argv`` runs (argv[0] is atomq); each of its flags one it has."""
    assert Path(argv[0]).name == "atomq", f"{where}: {argv[0]} is not atomq"
    assert len(argv) > 1, f"{where}: atomq without a command"
    command = commands().get(argv[1])
    assert command is not None, f"{where}: atomq has no command {argv[1]!r}"
    unknown = [arg for arg in argv[2:] if arg.startswith("-") and arg.split("=", 1)[0] not in flags_of(command)]
    assert not unknown, f"{where}: `atomq {argv[1]}` has no option {unknown}"
    return command


def check_value(variable: str, value: str, where: str) -> None:
    """``value`` is one that every option reading ``variable`` accepts."""
    for option in options_by_variable().get(variable, []):
        try:
            option.type.convert(value, option, None)
        except click.BadParameter as exc:
            pytest.fail(f"{where}: {variable}={value!r} is refused by {option.opts}: {exc.message}")


# -- systemd -------------------------------------------------------------------------------------


def unit_settings(text: str) -> dict[tuple[str, str], list[str]]:
    """A unit's settings: (section, key) to its values in order."""
    settings: dict[tuple[str, str], list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault((section, key.strip()), []).append(value.strip())
    return settings


def exec_argv(value: str) -> list[str]:
    """An Exec*= command line, without its special prefixes (-, @, :, +, !, |)."""
    argv = shlex.split(value)
    argv[0] = argv[0].lstrip("-@:+!|")
    return argv


TIMESPAN_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0}


def systemd_seconds(value: str) -> float:
    """A systemd time span in seconds: "90", "90s", "1min 30s" (the units these files use)."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    assert parts and re.fullmatch(r"(\s*\d+(?:\.\d+)?\s*[a-z]*)+\s*", value), f"not a time span: {value!r}"
    assert all(unit in TIMESPAN_UNITS or unit == "" for _, unit in parts), f"unknown unit in {value!r}"
    return sum(float(n) * TIMESPAN_UNITS.get(unit, 1.0) for n, unit in parts)


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (it comes with systemd)")
    return found


@pytest.fixture
def staged_units(tmp_path: Path) -> Iterator[Path]:
    """Copies of the units in a temporary directory, their Exec*= executables (all under
    INSTALL_PREFIX) pointed at stand-ins made there: verify checks that they exist, and
    nothing may be written to /opt. Nothing else of the units changes."""
    units = tmp_path / "units"
    units.mkdir()
    root = tmp_path / "root"
    for unit in UNITS:
        text = unit.read_text()

        def stand_in(match: re.Match[str], unit: Path = unit) -> str:
            argv = exec_argv(match.group(2))
            binary = argv[0]
            assert binary.startswith(INSTALL_PREFIX), f"{unit.name}: {match.group(1)} runs {binary}, " \
                                                      f"outside {INSTALL_PREFIX}"
            fake = root / binary.lstrip("/")
            fake.parent.mkdir(parents=True, exist_ok=True)
            fake.write_text("#!/bin/sh\nexit 0\n")
            fake.chmod(0o755)
            return match.group(0).replace(binary, str(fake), 1)

        (units / unit.name).write_text(EXEC_LINE.sub(stand_in, text))
    yield units


def verify(unit: Path) -> list[str]:
    """What ``systemd-analyze verify`` says of ``unit`` (a template as its instance
    TEMPLATE_INSTANCE), less the TOLERATED_VERIFY_LINES; its exit status must be 0."""
    target = unit.with_name(unit.name.replace("@.", f"@{TEMPLATE_INSTANCE}.")) if "@." in unit.name else unit
    result = subprocess.run([_systemd_analyze(), "verify", "--man=no", str(target)],
                            capture_output=True, text=True, timeout=30, cwd=unit.parent,
                            env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""})
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if line.strip() and not any(p.search(line) for p in TOLERATED_VERIFY_LINES)]
    if result.returncode != 0 and not lines:
        lines = [f"systemd-analyze verify exited with {result.returncode}"]
    return lines


def test_there_are_units_and_manifests() -> None:
    assert {u.name for u in UNITS} == {"atomq-serve.service", "atomq-worker.service",
                                      "atomq-spark-worker.service", "valkey@.service"}
    assert len(MANIFESTS) >= 5


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_unit_passes_systemd_analyze_verify(unit: Path, staged_units: Path) -> None:
    assert verify(staged_units / unit.name) == []


def test_verify_speaks_of_a_misspelt_directive_and_a_missing_executable(staged_units: Path) -> None:
    """The check above can fail: what verify says of a broken unit is not filtered away."""
    unit = staged_units / "atomq-serve.service"
    text = unit.read_text()
    unit.write_text(text.replace("\nRestart=on-failure", "\nRestrat=on-failure"))
    assert any("Restrat" in line for line in verify(unit))
    unit.write_text(text.replace("TimeoutStopSec=", "TimeoutStopSec=soon"))
    assert verify(unit) != []
    unit.write_text(EXEC_LINE.sub(lambda m: f"{m.group(1)}=/nonexistent/atomq serve", text))
    assert any("/nonexistent/atomq" in line for line in verify(unit))


@pytest.mark.parametrize("unit", [u for u in UNITS if u.name.startswith("atomq-")], ids=lambda u: u.name)
def test_atomq_unit_runs_an_atomq_command_as_it_should(unit: Path) -> None:
    settings = unit_settings(unit.read_text())
    [exec_start] = settings[("Service", "ExecStart")]
    command = check_command_line(exec_argv(exec_start), unit.name)
    assert settings[("Service", "User")] == ["atomq"]
    assert settings[("Service", "EnvironmentFile")] == ["/etc/atomq/atomq.env"]
    assert settings[("Service", "Restart")] == ["on-failure"]
    # SIGTERM to the main process alone, which stops its children in order.
    assert settings[("Service", "KillMode")] == ["mixed"]
    assert settings[("Service", "KillSignal")] == ["SIGTERM"]
    stop_s = systemd_seconds(settings[("Service", "TimeoutStopSec")][0])
    if command.name == "serve":
        assert "--data-dir /var/lib/atomq" in exec_start
        assert settings[("Service", "StateDirectory")] == ["atomq"]
        assert settings[("Service", "WorkingDirectory")] == ["/var/lib/atomq"]
        # Its execution workers, then its requests in flight, each up to --shutdown-timeout.
        assert stop_s > 2 * defaults.SHUTDOWN_TIMEOUT_S
    else:
        # The running execution finishes first.
        assert stop_s > defaults.EXECUTION_TIMEOUT_S


def test_valkey_unit_reads_its_instances_config() -> None:
    settings = unit_settings((SYSTEMD / "valkey@.service").read_text())
    [exec_start] = settings[("Service", "ExecStart")]
    argv = exec_argv(exec_start)
    assert Path(argv[0]).name == "valkey-server"
    assert argv[1] == "/etc/valkey/%i.conf"
    assert argv[argv.index("--port") + 1] == "%i"


def test_valkey_config_example_is_a_cluster_node_atomq_can_use() -> None:
    config: dict[str, str] = {}
    for line in (SYSTEMD / "valkey-node.conf.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            assert key not in config, f"{key} set twice"
            config[key] = value.strip()
    assert config["cluster-enabled"] == "yes"
    assert config["appendonly"] == "yes"
    assert config["appendfsync"] == "everysec"
    assert config["maxmemory-policy"] == "noeviction"
    assert config["cluster-require-full-coverage"] == "no"
    assert config["cluster-node-timeout"] == "2000"


# -- Kubernetes ----------------------------------------------------------------------------------


def resources() -> list[tuple[Path, dict[str, Any]]]:
    import yaml  # comes with kubernetes-validate

    return [(path, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def containers(resource: dict[str, Any]) -> list[dict[str, Any]]:
    if resource["kind"] not in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return []
    spec = resource["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_against_the_kubernetes_schemas(path: Path) -> None:
    try:
        import kubernetes_validate
    except ImportError:
        pytest.fail("kubernetes-validate, a test dependency, is not installed: pip install -e '.[test]'")
    found = [doc for p, doc in resources() if p == path]
    assert found, f"{path.name} holds no resource"
    for resource in found:
        name = f"{path.name}: {resource.get('kind')}/{resource.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(resource, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{name}: {exc.message}")


def test_manifests_run_atomq_commands_with_what_they_need() -> None:
    """Each container runs an atomq command with flags it has, and gets every variable of a
    required option (from its env, or the ConfigMap or Secret it takes whole)."""
    everything = resources()
    keys = {(doc["kind"], doc["metadata"]["name"]): set(doc.get("data", {})) | set(doc.get("stringData", {}))
            for _, doc in everything if doc["kind"] in ("ConfigMap", "Secret")}
    ran = set()
    for path, resource in everything:
        for container in containers(resource):
            where = f"{path.name}: {resource['metadata']['name']}/{container['name']}"
            argv = [*container.get("command", []), *container.get("args", [])]
            command = check_command_line(argv, where)
            ran.add(command.name)
            given = {e["name"] for e in container.get("env", [])}
            for source in container.get("envFrom", []):
                for kind, ref in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if ref in source:
                        assert (kind, source[ref]["name"]) in keys, f"{where}: no {kind} {source[ref]['name']}"
                        given |= keys[(kind, source[ref]["name"])]
            for e in container.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef") or e.get("valueFrom", {}).get("configMapKeyRef")
                if ref is not None:
                    kind = "Secret" if "secretKeyRef" in e["valueFrom"] else "ConfigMap"
                    assert ref["key"] in keys.get((kind, ref["name"]), set()), f"{where}: no {ref}"
            for param in command.params:
                if isinstance(param, click.Option) and param.required:
                    assert set(envvars(param)) & given or set(param.opts) & set(argv), \
                        f"{where}: `atomq {command.name}` needs {param.opts[0]} or {envvars(param)}"
    assert ran == {"serve", "worker", "spark-worker"}


def test_serve_deployment_is_probed_and_leaves_execution_to_the_workers() -> None:
    [serve] = [d for _, d in resources() if d["kind"] == "Deployment" and d["metadata"]["name"] == "atomq-serve"]
    [container] = containers(serve)
    argv = container["command"]
    assert argv[argv.index("--workers") + 1] == "0"
    assert "--no-spark" in argv
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    assert port == defaults.PORT
    assert container["readinessProbe"]["httpGet"]["path"] == "/v1/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v1/health"
    # Probes come with no key: the paths must stay public.
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] in PUBLIC_PATHS
    assert serve["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > defaults.SHUTDOWN_TIMEOUT_S
    for _, resource in resources():
        if resource["kind"] == "Deployment":
            pod = resource["spec"]["template"]["spec"]
            # A Service named atomq would otherwise set ATOMQ_PORT=tcp://... in every pod.
            assert pod["enableServiceLinks"] is False, resource["metadata"]["name"]
            assert all("/" not in c["image"].split(":")[0] for c in pod["containers"]), "no registry in images"
            if resource["metadata"]["name"] != "atomq-serve":
                assert pod["terminationGracePeriodSeconds"] > defaults.EXECUTION_TIMEOUT_S


# -- the variables ---------------------------------------------------------------------------------


def test_every_atomq_variable_infra_names_is_one_atomq_reads() -> None:
    known = variables_atomq_reads()
    named: dict[str, set[str]] = {}
    for path in sorted(INFRA.rglob("*")):
        if path.is_file():
            for name in ATOMQ_VARIABLE.findall(path.read_text()):
                named.setdefault(name, set()).add(str(path.relative_to(INFRA)))
    # Not vacuous: the env example, the ConfigMap and the Secret name several.
    assert {"ATOMQ_OWNER_KEY", "ATOMQ_REDIS_URL", "ATOMQ_RQ_REDIS_URL", "ATOMQ_HOST", "ATOMQ_PORT",
            "ATOMQ_ADVERTISE_URL"} <= set(named)
    unknown = {name: sorted(files) for name, files in named.items() if name not in known}
    assert not unknown, f"atomq reads no such variable: {unknown}"


def test_every_value_the_env_example_and_the_config_map_give_is_accepted() -> None:
    given = [(name, value.strip(), ENV_EXAMPLE.name) for name, value in ENV_ASSIGNMENT.findall(ENV_EXAMPLE.read_text())]
    given += [(name, value, f"{path.name}: {doc['metadata']['name']}") for path, doc in resources()
              if doc["kind"] in ("ConfigMap", "Secret")
              for name, value in {**doc.get("data", {}), **doc.get("stringData", {})}.items()]
    assert len(given) >= 10
    for name, value, where in given:
        if value:
            check_value(name, value, where)
