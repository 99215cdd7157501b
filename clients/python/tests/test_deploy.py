"""The deployment files as users apply them: the Kubernetes manifest is valid
for its API version (kubernetes-validate, the schemas inside the package)
and keeps the choices deploy/README.md explains; the Dockerfile builds what
the manifest runs."""

import glob
import os
import re
import shlex
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from rundaemon import REPO

K8S_VERSION = "1.33.0"  # the oldest release the manifest is kept valid for (native sidecars: 1.29+)
MANIFESTS = sorted(glob.glob(os.path.join(REPO, "deploy", "*.yaml")))


def objects():
    for path in MANIFESTS:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                    yield path, doc


def pod_spec(doc):
    return doc["spec"]["template"]["spec"] if doc["kind"] == "Job" else doc["spec"]


def flag(args, name):
    """The value of --name in an argument list (None if absent)."""
    return args[args.index(name) + 1] if name in args else None


def seconds(duration):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", duration)
    assert m, f"duration {duration!r}"
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def sidecar_pods():
    found = [(path, doc) for path, doc in objects()
             if any(c["name"] == "dataloaderd" for c in pod_spec(doc).get("initContainers", []))]
    assert found, "no manifest runs the dataloaderd sidecar"
    return found


@pytest.mark.parametrize("path,doc", list(objects()), ids=lambda x: os.path.basename(x) if isinstance(x, str) else "")
def test_manifest_is_valid_kubernetes(path, doc):
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_training_pod_choices():
    for path, doc in sidecar_pods():
        spec = pod_spec(doc)
        # A failed trainer is retried by the Job in a new pod, with a fresh daemon.
        assert doc["kind"] == "Job" and spec["restartPolicy"] == "Never", path
        side = next(c for c in spec["initContainers"] if c["name"] == "dataloaderd")
        assert side.get("restartPolicy") == "Always", "the sidecar must be a native sidecar"
        # One user for trainer and daemon: rings are 0600, the socket 0660.
        pod_sc = spec.get("securityContext", {})
        for c in spec["initContainers"] + spec["containers"]:
            sc = {**pod_sc, **c.get("securityContext", {})}
            assert (sc.get("runAsUser"), sc.get("runAsGroup")) == (pod_sc["runAsUser"], pod_sc["runAsGroup"]), c["name"]
        assert pod_sc["runAsUser"] != 0
        assert {"requests", "limits"} <= set(side["resources"]), "the sidecar needs requests and limits"
        # Every probe waits longer than the healthcheck gives itself.
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = side[kind]
            cmd = probe["exec"]["command"]
            assert cmd[:2] == ["dataloaderd", "healthcheck"], kind
            own = seconds(flag(cmd, "--timeout") or "3s")  # the healthcheck's default
            assert probe.get("timeoutSeconds", 1) > own, f"{kind}: timeoutSeconds {probe.get('timeoutSeconds', 1)} <= --timeout {own}"
            assert flag(cmd, "--socket") == flag(side["args"], "--socket"), kind
        # The pod's grace period holds the trainer's last save and then the
        # daemon's own stop (the default 30 s is too short for the first).
        grace = spec.get("terminationGracePeriodSeconds")
        assert grace is not None, "the pod must set terminationGracePeriodSeconds"
        assert grace > seconds(flag(side["args"], "--stop-timeout") or "10s"), "the daemon must stop within the pod's grace period"
        # The rings' budget fits in the shm volume.
        shm = next(v for v in spec["volumes"] if v["name"] == "shm")
        assert shm["emptyDir"]["medium"] == "Memory"
        limit_gi = float(shm["emptyDir"]["sizeLimit"].rstrip("Gi"))
        assert int(flag(side["args"], "--ring-budget-mb")) <= limit_gi * 1024


def mib(quantity):
    """A Kubernetes memory quantity (4Gi, 4096Mi, 4G, 4294967296) in MiB."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(quantity))
    assert m, f"memory quantity {quantity!r}"
    unit = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return float(m.group(1)) * unit / (1 << 20)


def readme_default(flag_name):
    """The default the README's daemon flags table gives a flag, in MiB."""
    with open(os.path.join(REPO, "README.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 3 and cells[0] == f"`{flag_name}`":
                m = re.match(r"(\d+)", cells[2])
                assert m, f"the README gives {flag_name} no default in MiB: {cells[2]!r}"
                return int(m.group(1))
    raise AssertionError(f"the README's daemon flags table has no {flag_name}")


def test_sidecar_memory_budgets_fit():
    # The daemon's memory budgets, its reserve beside them, fit the
    # container's memory limit: shm rings count there too (the daemon writes
    # their pages, and the kernel charges them to its cgroup). The daemon
    # refuses to start otherwise; the manifest gave 6,144 MiB of rings under
    # 4 GiB (issue 23). Flags left out count at the README's defaults.
    for path, doc in sidecar_pods():
        side = next(c for c in pod_spec(doc)["initContainers"] if c["name"] == "dataloaderd")
        args = side["args"]
        ring = flag(args, "--ring-budget-mb")
        assert ring is not None, f"{path}: give --ring-budget-mb (its default follows the node's RAM, not the pod's limit)"
        total = int(ring)
        total += int(flag(args, "--token-cache-mb") or readme_default("--token-cache-mb"))
        if flag(args, "--object-cache-dir") is None:
            total += int(flag(args, "--object-cache-mb") or readme_default("--object-cache-mb"))
        total += int(flag(args, "--memory-reserve-mb") or readme_default("--memory-reserve-mb"))
        limit = mib(side["resources"]["limits"]["memory"])
        assert total <= limit, f"{path}: the sidecar's budgets and reserve are {total} MiB, over its memory limit of {limit:g} MiB"


def walk(node):
    """Every (key, value) of the dicts in a YAML document."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield k, v
            yield from walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v)


def test_readme_says_what_the_manifest_does():
    with open(os.path.join(REPO, "deploy", "README.md")) as f:
        section = f.read().split("\n## Kubernetes\n", 1)[1].split("\n## ", 1)[0]
    said = re.findall(r"`(\w+): ([^`]+)`", section)
    assert any(k == "restartPolicy" for k, _ in said), "the README names the pod's restartPolicy"
    for path, doc in sidecar_pods():
        spec = pod_spec(doc)
        told = {v for k, v in said if k == "restartPolicy"} - {"Always"}  # Always: the sidecar's own
        assert told == {spec["restartPolicy"]}, f"{path}: the README says restartPolicy {told}"
        # Every other `key: value` the README quotes is in the manifest.
        values = {}
        for k, v in walk(doc):
            values.setdefault(k, set()).add(str(v))
        for k, v in said:
            assert v in values.get(k, ()), f"the README says `{k}: {v}`; {path} has {sorted(values.get(k, ()))}"
        # And the healthcheck's --timeout it quotes is the probes'.
        side = next(c for c in spec["initContainers"] if c["name"] == "dataloaderd")
        for t in re.findall(r"healthcheck --timeout (\S+?)`", section):
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert flag(side[kind]["exec"]["command"], "--timeout") == t, kind


def dockerfile():
    with open(os.path.join(REPO, "Dockerfile")) as f:
        return f.read()


def test_image_runs_as_the_pods_user():
    text = dockerfile()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users, "the image must not run as root"
    uid, _, gid = users[-1].partition(":")
    for _, doc in sidecar_pods():
        sc = pod_spec(doc)["securityContext"]
        assert (int(uid), int(gid or uid)) == (sc["runAsUser"], sc["runAsGroup"])
    entry = re.findall(r"^ENTRYPOINT\s+(.+)$", text, re.M)[-1]
    assert yaml.safe_load(entry)[0].endswith("/dataloaderd")


def test_image_builds_the_way_make_build_does():
    text = dockerfile()
    go_mod = open(os.path.join(REPO, "go.mod")).read()
    go = re.search(r"^go (\S+)", go_mod, re.M).group(1)
    assert re.search(rf"^FROM (docker.io/library/)?golang:{re.escape(go)}\b", text, re.M), f"the build stage must use Go {go} of go.mod"
    build = " ".join(line for line in text.splitlines() if "go build" in line or line.startswith("    -o"))
    assert "CGO_ENABLED=0" in build and "-X main.version=${DATALOADERD_VERSION}" in build
    assert re.search(r"^ARG DATALOADERD_VERSION", text, re.M)
    # The binary dlopens the CUDA driver (purego): its run stage needs glibc.
    run_base = re.findall(r"^FROM\s+(\S+)", text, re.M)[-1]
    assert "static" not in run_base and "scratch" not in run_base, run_base
    make = open(os.path.join(REPO, "Makefile")).read()
    assert "--build-arg DATALOADERD_VERSION=$(DATALOADERD_VERSION)" in make
    for _, doc in sidecar_pods():
        side = next(c for c in pod_spec(doc)["initContainers"] if c["name"] == "dataloaderd")
        assert side["image"].split(":")[0] == re.search(r"^IMAGE \?= ([^:]+):", make, re.M).group(1)


def test_systemd_unit_says_what_it_does():
    with open(os.path.join(REPO, "deploy", "dataloaderd.service")) as f:
        unit = f.read()
    exec_start = " ".join(line.rstrip("\\") for line in unit.split("ExecStart=", 1)[1].split("\n")[:3])
    args = shlex.split(exec_start)
    sock = flag(args, "--socket")
    assert sock.startswith("/run/" + re.search(r"^RuntimeDirectory=(\S+)", unit, re.M).group(1) + "/")
    assert sock in unit.split("[Unit]")[0], "the header comment names the socket the unit serves"
    assert re.search(r"^Restart=on-failure", unit, re.M)
    # The numbers the comments give are the unit's.
    comments = "\n".join(line for line in unit.splitlines() if line.startswith("#"))
    mode = re.search(r"^RuntimeDirectoryMode=(\d+)", unit, re.M).group(1)
    assert f"the directory below is {mode}" in comments, "the header comment gives the socket directory's mode"
    stop = flag(args, "--stop-timeout") or "10s"
    assert f"--stop-timeout ({seconds(stop):g} s)" in comments
    kill = re.search(r"^TimeoutStopSec=(\d+)", unit, re.M).group(1)
    assert f"systemd waits {kill} s before SIGKILL" in comments
    post = re.search(r"^ExecStartPost=.*$", unit, re.M).group(0)
    tries, pause, each = re.search(r"seq (\d+)\).*--timeout (\d+)s.*sleep ([\d.]+)", post).group(1, 3, 2)
    assert f"{tries} tries {pause} s apart, each given {each} s" in " ".join(comments.replace("#", " ").split())


def test_systemd_unit_stops_in_time():
    with open(os.path.join(REPO, "deploy", "dataloaderd.service")) as f:
        unit = f.read()
    stop = flag(shlex.split(unit.split("ExecStart=", 1)[1].split("\n# ")[0].replace("\\\n", " ")), "--stop-timeout") or "10s"
    assert int(re.search(r"^TimeoutStopSec=(\d+)", unit, re.M).group(1)) > seconds(stop), \
        "systemd must wait longer than the daemon's own --stop-timeout before SIGKILL"
    post = re.search(r"^ExecStartPost=.*$", unit, re.M).group(0)
    sock = flag(shlex.split(unit.split("ExecStart=", 1)[1].split("\n")[0].rstrip("\\")), "--socket")
    assert f"--socket {sock}" in post


def test_systemd_unit_is_hardened():
    # docs/security.md: no privilege, a read-only system but for the socket
    # directory, the shm directory and the checkpoint root, and the data and
    # checkpoint roots mounted first. (systemd-analyze security --offline
    # rated this unit 3.0 OK; 9.2 UNSAFE before.)
    with open(os.path.join(REPO, "deploy", "dataloaderd.service")) as f:
        unit = f.read()
    setting = lambda key: re.search(rf"^{key}=(.*)$", unit, re.M).group(1).split()  # noqa: E731
    for key, want in [("NoNewPrivileges", ["yes"]), ("ProtectSystem", ["strict"]), ("ProtectHome", ["yes"]),
                      ("PrivateTmp", ["yes"]), ("RestrictAddressFamilies", ["AF_UNIX", "AF_INET", "AF_INET6"])]:
        assert setting(key) == want, key
    assert re.search(r"^CapabilityBoundingSet=$", unit, re.M)
    args = shlex.split(unit.split("ExecStart=", 1)[1].split("\n# ")[0].replace("\\\n", " "))
    roots = [args[i + 1] for i, a in enumerate(args) if a == "--allow-root"]
    assert roots and set(roots) <= set(setting("RequiresMountsFor"))
    writable = set(setting("ReadWritePaths"))
    assert "/dev/shm" in writable and "/checkpoints" in writable


SYSTEM_UNITS = next((d for d in ("/usr/lib/systemd/system", "/lib/systemd/system") if os.path.isdir(d)), None)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None or SYSTEM_UNITS is None,
                    reason="needs systemd-analyze and systemd's units (Debian's package systemd)")
def test_systemd_unit_verifies(tmp_path):
    # systemd-analyze verify in a root of its own: systemd's units, this unit,
    # and a stand-in for each program it runs (verify checks that they are
    # executable). It needs no running systemd. It warns of an unknown key or
    # a bad value but still exits 0, so any output fails the test.
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "deploy", "dataloaderd.service"), root / "etc/systemd/system")
    with open(os.path.join(REPO, "deploy", "dataloaderd.service")) as f:
        programs = re.findall(r"^Exec\w+=[-@:+!]*(/\S+)", f.read(), re.M)
    assert "/usr/local/bin/dataloaderd" in programs
    for prog in programs:
        stub = root / prog.lstrip("/")
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
    r = subprocess.run(["systemd-analyze", "verify", f"--root={root}", "dataloaderd.service"],
                       capture_output=True, text=True, timeout=60)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 0 and not out, out


def test_sbatch_recipe_shape():
    # make slurm-check runs the recipe on a real cluster (root, Debian's
    # Slurm); this reads it, so that make test catches a recipe that lost
    # one of the choices deploy/README.md describes.
    path = os.path.join(REPO, "deploy", "slurm", "dataloaderd.sbatch")
    subprocess.run(["bash", "-n", path], check=True)
    with open(path) as f:
        text = f.read()
    joined = text.replace("\\\n", " ")
    # A node-local socket named by the job.
    sock = re.search(r"^export DATALOADERD_SOCKET=\$\{DATALOADERD_SOCKET:-(\S+)\}$", text, re.M).group(1)
    assert sock.startswith("/tmp/") and "$SLURM_JOB_ID" in sock
    assert re.search(r"^export DATALOADERD_JOB=\S*\$SLURM_JOB_ID", text, re.M)
    # One daemon per node, an overlapping step, stopped with its slurmstepd.
    daemon = next(line for line in joined.splitlines() if " serve " in line and line.startswith("srun "))
    assert "--overlap" in daemon and "--ntasks-per-node=1" in daemon and "--exit-with-parent" in daemon
    assert daemon.rstrip().endswith("&"), "the daemons' step runs in the background"
    # torchrun per node, in the background so that a signal is handled while
    # it runs; signals go to it, the daemons are stopped after.
    trainer = next(line for line in joined.splitlines() if line.startswith("srun ") and "torchrun" in line.lower())
    assert "--ntasks-per-node=1" in trainer and '--nnodes="$SLURM_NNODES"' in trainer
    assert '--rdzv-id="$SLURM_JOB_ID"' in trainer and trainer.rstrip().endswith("&")
    assert re.search(r"^trap stop_daemons EXIT$", text, re.M)
    assert re.search(r"^trap 'on_signal TERM' TERM$", text, re.M)
    assert re.search(r"^#SBATCH --signal=B:TERM@\d+$", text, re.M)
