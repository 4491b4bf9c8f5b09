"""Getting configs into docker-sonic-vs under containerlab: binds, start.sh, post-deploy steps.

Sources (docs/containerlab.md): containerlab ``nodes/sonic/sonic.go`` (entrypoint ``/bin/bash``,
post-deploy ``supervisord`` + ``supervisorctl start bgpd``, no config handling) and
sonic-buildimage ``platform/vs/docker-sonic-vs/start.sh`` (``#!/bin/bash -e``): on 202305 and
master it merges ``/etc/sonic/config_db.json`` into ``/tmp/config_db.json`` and ``mv``\\ s it back;
master images since 2026-03 first ``cp /var/sonic/config_db.json /etc/sonic/config_db.json``.

* the start.sh step that matters is reproduced with the emitted binds as real bind mounts (a
  private mount namespace over a scratch root; root only): the old bind on
  ``/etc/sonic/config_db.json`` makes the ``mv`` fail with EBUSY, the emitted binds of both
  image generations do not;
* the containerlab runtime's post-deploy steps, shown by its dry-run plan, and run through
  ``docker exec`` in a real container whose ``sonic-db-cli``/``sonic-cfggen``/``supervisorctl``/
  ``vtysh`` are small stand-ins that record their calls and "boot" with delays (docker-sonic-vs
  itself is not available here), the emitted files bound as real Docker bind mounts;
* ``down`` of a lab with no state record destroys it by name (a stand-in ``containerlab`` on PATH
  that records its argv; no containerlab binary here).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed.clabfile import load_clab
from railab.testbed.runtime.containerlab import (
    ContainerlabRuntime,
    plan_lines,
    post_deploy_plan,
    run_steps,
)
from railab.topologies.generator import generate
from railab.topologies.intent import parse_intent
from railab.topologies.sonic import SONIC_IMAGES, START_SH_WRITES, VAR_SONIC_CONFIG_DB

INTENTS = Path(__file__).resolve().parents[1] / "topologies" / "intents"
PID = os.getpid()


def _sonic_lab(tmp: Path, image: str | None = None, name: str = "svboot") -> Path:
    data = yaml.safe_load((INTENTS / "mini.yml").read_text())
    data["lab"]["kind"] = "sonic-vs"
    if image:
        data["lab"]["sonic_image"] = image
    return generate(parse_intent(data), tmp / f"lab-{image or 'default'}", name=name)


def _binds(labdir: Path, node: str) -> dict[str, Path]:
    clab = load_clab(labdir)
    return dict(clab.nodes[node].binds)


# ---- binds ------------------------------------------------------------------------------------
@pytest.mark.parametrize("image", list(SONIC_IMAGES))
def test_binds_avoid_every_path_start_sh_writes(tmp_path, image):
    labdir = _sonic_lab(tmp_path, image)
    topo = yaml.safe_load(next(labdir.glob("*.clab.yml")).read_text())
    for name, node in topo["topology"]["nodes"].items():
        assert node["restart-policy"] == "no", name
        if node["kind"] != "sonic-vs":
            continue
        targets = [b.split(":")[1] for b in node["binds"]]
        assert not set(targets) & set(START_SH_WRITES), (name, targets)
        assert SONIC_IMAGES[image].config_db_target in targets
        assert "/etc/frr/frr.conf" not in targets  # the image deletes it on purpose


# ---- start.sh's config step with real bind mounts ---------------------------------------------
def _start_sh_lines(image: str) -> list[str]:
    """start.sh's config_db lines (``cat`` stands in for sonic-cfggen's merge to /tmp)."""
    lines = []
    if image == "master":
        v = f"$R{VAR_SONIC_CONFIG_DB}"
        lines.append(f"if [ -f {v} ]; then cp {v} $R/etc/sonic/config_db.json; fi")
    lines.append("if [ -f $R/etc/sonic/config_db.json ]; then cat $R/etc/sonic/config_db.json > $R/tmp/config_db.json; "
                 "mv $R/tmp/config_db.json $R/etc/sonic/config_db.json; fi")
    return lines


def _run_start_sh(root: Path, binds: dict[str, Path], image: str) -> subprocess.CompletedProcess:
    """Bind ``binds`` (container path -> host file) under ``root`` in a private mount namespace,
    then run start.sh's lines under ``bash -e`` as the image does."""
    mounts = []
    for target, src in binds.items():
        mounts.append(f"mkdir -p $R{os.path.dirname(target)} && touch $R{target} && mount --bind {src} $R{target}")
    script = "\n".join(["set -e", f"R={root}", "mkdir -p $R/etc/sonic $R/tmp", *mounts,
                        *_start_sh_lines(image),
                        "if [ -f $R/etc/sonic/config_db.json ]; then cat $R/etc/sonic/config_db.json; fi"])
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-e", "-c", script],
                          capture_output=True, text=True, timeout=30)


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="bind mounts in a private mount namespace need root and unshare")


@needs_root
def test_old_bind_on_etc_sonic_makes_start_sh_abort(tmp_path):
    """What railab emitted before: the ``mv`` onto a bind-mounted config_db.json fails (EBUSY)."""
    labdir = _sonic_lab(tmp_path)
    src = labdir / "configs/g1-leaf1/config_db.json"
    for image in SONIC_IMAGES:
        r = _run_start_sh(tmp_path / f"old-{image}", {"/etc/sonic/config_db.json": src}, image)
        assert r.returncode != 0, r.stdout
        assert "busy" in r.stderr.lower(), r.stderr


@needs_root
@pytest.mark.parametrize("image", list(SONIC_IMAGES))
def test_emitted_binds_survive_start_sh(tmp_path, image):
    labdir = _sonic_lab(tmp_path, image)
    binds = _binds(labdir, "g1-leaf1")
    ours = (labdir / "configs/g1-leaf1/config_db.json").read_text()
    r = _run_start_sh(tmp_path / "root", binds, image)
    assert r.returncode == 0, r.stderr
    if image == "master":  # start.sh copied our file in and its merge kept it
        assert json.loads(r.stdout) == json.loads(ours)
    else:  # nothing of ours at /etc/sonic: start.sh builds its default, railab loads ours after boot
        assert r.stdout == ""
    assert (labdir / "configs/g1-leaf1/config_db.json").read_text() == ours  # host file untouched


# ---- post-deploy plan (dry run) ---------------------------------------------------------------
@pytest.mark.parametrize("image", list(SONIC_IMAGES))
def test_dry_run_plan(tmp_path, image):
    labdir = _sonic_lab(tmp_path, image, name=f"svplan{PID % 1000}")
    lines = ContainerlabRuntime().plan(labdir)
    assert lines[0] == f"containerlab deploy -t {next(labdir.glob('*.clab.yml'))}"
    leaf = [ln for ln in lines if ln.startswith(f"docker exec clab-svplan{PID % 1000}-g1-leaf1 ")]
    cmds = [ln.split(" ", 3)[3].split("  #")[0] for ln in leaf]
    want = ["sh -c 'sonic-db-cli PING | grep -q PONG && echo PONG'",
            "sonic-db-cli CONFIG_DB GET CONFIG_DB_INITIALIZED"]
    if image == "202305":
        want.append("sonic-cfggen -j /etc/railab/config_db.json --write-to-db")
    want += ["sonic-db-cli APPL_DB EXISTS PORT_TABLE:PortInitDone",
             "supervisorctl start zebra staticd bgpd",
             "sh -c 'supervisorctl status zebra staticd bgpd | grep -c RUNNING'",
             "vtysh -f /etc/railab/frr.conf"]
    assert cmds == want
    spec_nodes = {n for n in load_clab(labdir).nodes if not n.startswith("srv")}
    assert set(post_deploy_plan(load_clab(labdir))) == spec_nodes  # every switch, no server


def test_cli_dry_run(tmp_path):
    from typer.testing import CliRunner

    from railab.cli import app

    labdir = _sonic_lab(tmp_path, name=f"svcli{PID % 1000}")
    r = CliRunner().invoke(app, ["up", str(labdir), "--runtime", "containerlab", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].startswith("containerlab deploy -t ")
    assert "vtysh -f /etc/railab/frr.conf" in r.output
    assert st.load(f"svcli{PID % 1000}") is None  # nothing ran, nothing recorded
    r = CliRunner().invoke(app, ["up", str(labdir), "--dry-run"])
    assert r.exit_code == 2 and "--runtime containerlab" in r.output


def test_a_bind_start_sh_breaks_is_refused(tmp_path):
    labdir = _sonic_lab(tmp_path)
    clab_file = next(labdir.glob("*.clab.yml"))
    topo = yaml.safe_load(clab_file.read_text())
    node = topo["topology"]["nodes"]["g1-leaf1"]
    node["binds"][0] = "configs/g1-leaf1/config_db.json:/etc/sonic/config_db.json"
    clab_file.write_text(yaml.safe_dump(topo))
    with pytest.raises(UsageError, match="g1-leaf1 binds /etc/sonic/config_db.json.*EBUSY"):
        plan_lines(load_clab(labdir))
    with pytest.raises(UsageError, match="EBUSY"):
        ContainerlabRuntime().up(labdir)  # before containerlab, Docker or images are looked at


# ---- post-deploy steps through docker exec ------------------------------------------------------
docker = pytest.importorskip("docker")
from test_docker_exec import _busybox_static, engine  # noqa: E402,F401  (the engine fixture)

APPLETS = ["sh", "cat", "cp", "sleep", "touch", "echo", "grep", "mkdir", "test", "[", "printf", "true"]
#: stand-ins for SONiC's CLIs: append their argv to /state/log; "boot" by files the entrypoint makes
FAKES = {
    "sonic-db-cli": """#!/bin/sh
echo "sonic-db-cli $*" >> /state/log
case "$*" in
  PING) [ -f /state/redis ] && echo PONG || echo "Could not connect" ;;
  "CONFIG_DB GET CONFIG_DB_INITIALIZED") cat /state/cfginit 2>/dev/null ;;
  "APPL_DB EXISTS PORT_TABLE:PortInitDone") [ -f /state/portinit ] && echo 1 || echo 0 ;;
esac
""",
    "sonic-cfggen": """#!/bin/sh
echo "sonic-cfggen $*" >> /state/log
[ "$1" = "-j" ] && [ "$3" = "--write-to-db" ] && cp "$2" /state/CONFIG_DB.json
""",
    "supervisorctl": """#!/bin/sh
echo "supervisorctl $*" >> /state/log
if [ "$1" = start ]; then touch /state/frr; echo "zebra: ERROR (already started)"; exit 1; fi
[ -f /state/frr ] && printf 'zebra RUNNING\\nstaticd RUNNING\\nbgpd RUNNING\\n'
""",
    "vtysh": """#!/bin/sh
echo "vtysh $*" >> /state/log
[ "$1" = "-f" ] && cp "$2" /state/frr.conf.applied
""",
}


@pytest.fixture(scope="module")
def fake_sonic_image(engine):  # noqa: F811
    bb = _busybox_static()
    if bb is None:
        pytest.skip("no static busybox for the test image (Debian: apt-get install busybox-static)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(bb, arcname="bin/busybox")
        for name in APPLETS:
            ti = tarfile.TarInfo(f"bin/{name}")
            ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
            tf.addfile(ti)
        for name, text in FAKES.items():
            ti = tarfile.TarInfo(f"bin/{name}")
            ti.size, ti.mode = len(text.encode()), 0o755
            tf.addfile(ti, io.BytesIO(text.encode()))
        for d in ("proc", "sys", "dev", "etc", "tmp", "state", "var"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(ti)
    tag = f"railab-test/fake-sonic:{PID}"
    engine.api.import_image_from_data(buf.getvalue(), repository=tag.split(":")[0], tag=tag.split(":")[1])
    yield tag
    engine.images.remove(tag, force=True)


def _boot(engine, image: str, lab: str, node: str, binds: dict[str, Path], *, port_init: bool = True):  # noqa: F811
    """A container named like the clab node, the emitted files bound as Docker bind mounts, that
    "boots" like start.sh: redis after 1 s, CONFIG_DB loaded after 2 s, PortInitDone after 3 s."""
    steps = "sleep 1; touch /state/redis; sleep 1; echo 1 > /state/cfginit; sleep 1; "
    steps += "touch /state/portinit; " if port_init else ""
    return engine.containers.run(
        image, ["sh", "-c", steps + "exec sleep 3600"], name=f"clab-{lab}-{node}", detach=True,
        network_mode="none", volumes={str(src): {"bind": t, "mode": "ro"} for t, src in binds.items()})


def _log(ctr) -> list[str]:
    return ctr.exec_run(["cat", "/state/log"]).output.decode().splitlines()


def test_post_deploy_steps_in_a_container(engine, fake_sonic_image, tmp_path):  # noqa: F811
    from railab.testbed.docker_exec import DockerExecutor

    lab = f"svdk{PID % 10000}"
    labdir = _sonic_lab(tmp_path, name=lab)
    clab = load_clab(labdir)
    binds = dict(clab.nodes["g1-leaf1"].binds)
    ctr = _boot(engine, fake_sonic_image, lab, "g1-leaf1", binds)
    try:
        with DockerExecutor(lab, base_url=engine.railab_url) as ex:
            done = run_steps(ex, "g1-leaf1", post_deploy_plan(clab)["g1-leaf1"])
        assert [d["step"] for d in done][:3] == ["redis answers", "start.sh loaded CONFIG_DB",
                                                  "load config_db.json into CONFIG_DB"]
        assert done[0]["polls"] > 1  # it really waited for the boot
        log = _log(ctr)
        # CONFIG_DB is loaded only after start.sh's own load, FRR only after PortInitDone
        first = {cmd: i for i, cmd in reversed(list(enumerate(log)))}
        assert first["sonic-cfggen -j /etc/railab/config_db.json --write-to-db"] > \
            max(i for i, c in enumerate(log) if c == "sonic-db-cli CONFIG_DB GET CONFIG_DB_INITIALIZED")
        assert first["vtysh -f /etc/railab/frr.conf"] == len(log) - 1
        loaded = ctr.exec_run(["cat", "/state/CONFIG_DB.json"]).output.decode()
        assert json.loads(loaded) == json.loads((labdir / "configs/g1-leaf1/config_db.json").read_text())
        applied = ctr.exec_run(["cat", "/state/frr.conf.applied"]).output.decode()
        assert applied == (labdir / "configs/g1-leaf1/frr.conf").read_text()
    finally:
        ctr.remove(force=True)


def test_post_deploy_times_out_with_one_clear_error(engine, fake_sonic_image, tmp_path):  # noqa: F811
    from railab.testbed.docker_exec import DockerExecutor

    lab = f"svto{PID % 10000}"
    labdir = _sonic_lab(tmp_path, name=lab)
    clab = load_clab(labdir)
    ctr = _boot(engine, fake_sonic_image, lab, "spine1", dict(clab.nodes["spine1"].binds), port_init=False)
    try:
        with DockerExecutor(lab, base_url=engine.railab_url) as ex:
            steps = post_deploy_plan(clab, boot_timeout_s=4)["spine1"]
            with pytest.raises(RailabError, match="spine1: 'ports initialised' not reached within 4 s"):
                run_steps(ex, "spine1", steps)
        assert not any(c.startswith("vtysh") for c in _log(ctr))  # FRR config never pushed early
    finally:
        ctr.remove(force=True)


# ---- down by name without a record --------------------------------------------------------------
FAKE_CLAB = """#!/bin/sh
echo "$*" >> "{log}"
case "$1" in
  inspect) cat "{rows}" ;;
  destroy) exit 0 ;;
esac
"""


def test_down_without_record_destroys_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    bindir, log, rows = tmp_path / "bin", tmp_path / "clab.log", tmp_path / "rows.json"
    bindir.mkdir()
    (bindir / "containerlab").write_text(FAKE_CLAB.format(log=log, rows=rows))
    (bindir / "containerlab").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    rows.write_text(json.dumps({"gone": [{"lab_name": "gone", "name": "clab-gone-spine1", "state": "running"}]}))
    assert st.load("gone") is None
    ContainerlabRuntime().down("gone")
    assert log.read_text().splitlines() == ["inspect --name gone --format json", "destroy --name gone --cleanup"]
    # containerlab knows no such lab: nothing is destroyed
    log.unlink()
    rows.write_text("{}")
    assert ContainerlabRuntime().destroy_by_name("other") is False
    assert log.read_text().splitlines() == ["inspect --name other --format json"]
    # through the CLI
    from typer.testing import CliRunner

    from railab.cli import app

    rows.write_text(json.dumps({"gone": [{"lab_name": "gone", "name": "clab-gone-spine1", "state": "running"}]}))
    r = CliRunner().invoke(app, ["down", "gone"])
    assert r.exit_code == 0 and "containerlab destroy --name gone" in r.output, r.output


# ---- intent keys ---------------------------------------------------------------------------------
def _intent(**lab):
    data = yaml.safe_load((INTENTS / "mini.yml").read_text())
    data["lab"].update({"kind": "sonic-vs", **lab})
    return data


def test_sonic_image_key_is_checked():
    from railab.topologies.intent import IntentError

    with pytest.raises(IntentError, match="lab.sonic_image"):
        parse_intent(_intent(sonic_image="201911"))


def test_parallel_links_get_numbered_p2p_addresses(tmp_path):
    from railab.topologies.intent import IntentError

    labdir = generate(parse_intent(_intent(spines=1, links_per_pair=2)), tmp_path / "p2", name="svp2")
    db = json.loads((labdir / "configs/spine1/config_db.json").read_text())
    addrs = [k.split("|")[1] for k in db["INTERFACE"] if "|10.254." in k]
    assert len(addrs) == len(db["PORT"]) == 16  # every spine port: 8 leaves x 2 links
    leaf = json.loads((labdir / "configs/g1-leaf1/config_db.json").read_text())
    assert "Ethernet8|10.254.0.0/31" in leaf["INTERFACE"] and "Ethernet0|10.254.0.1/31" in db["INTERFACE"]
    frr = (labdir / "configs/g1-leaf1/frr.conf").read_text()
    assert "neighbor Ethernet8 interface peer-group FABRIC" in frr  # still keyed by interface
    with pytest.raises(IntentError, match="lab.p2p_pool: 10.0.0.0/24 overlaps lab.rail_pool"):
        parse_intent(_intent(spines=1, links_per_pair=2, p2p_pool="10.0.0.0/24"))
    with pytest.raises(IntentError, match="lab.p2p_pool: 10.254.0.0/29 holds 4 /31s"):
        parse_intent(_intent(spines=1, links_per_pair=2, p2p_pool="10.254.0.0/29"))


def test_steps_stop_when_asked():
    import threading

    from railab.topologies.sonic import post_deploy_steps

    class Never:
        def run(self, node, argv, *, timeout=30.0):
            raise AssertionError("nothing may run once stop is set")

    stop = threading.Event()
    stop.set()
    with pytest.raises(RailabError, match="stopped at step 'redis answers'"):
        run_steps(Never(), "g1-leaf1", post_deploy_steps(None, "/etc/railab/frr.conf"), stop=stop)


# ---- the whole `up` on Docker, with a stand-in containerlab -------------------------------------
FAKE_DEPLOY = '''#!{python}
"""Stand-in for containerlab: deploy creates the sonic-vs nodes' containers (name
clab-<lab>-<node>, the topology's binds as bind mounts, a start.sh-like boot), destroy removes
them, inspect lists them. Every call is appended to the log."""
import json, pathlib, sys
import docker, yaml
args = sys.argv[1:]
with open({log!r}, "a") as fh:
    fh.write(" ".join(args) + "\\n")
client = docker.DockerClient(base_url={url!r}) if {url!r} else docker.from_env()
def lab_of():
    if "-t" in args:
        return yaml.safe_load(pathlib.Path(args[args.index("-t") + 1]).read_text())["name"]
    return args[args.index("--name") + 1]
if args[0] == "deploy":
    f = pathlib.Path(args[args.index("-t") + 1])
    topo = yaml.safe_load(f.read_text())
    for name, n in topo["topology"]["nodes"].items():
        if n["kind"] != "sonic-vs":
            continue
        vols = {{str((f.parent / b.split(":")[0]).resolve()): {{"bind": b.split(":")[1], "mode": "ro"}}
                for b in n.get("binds", [])}}
        client.containers.run(n["image"], ["sh", "-c", {boot!r}], name=f"clab-{{topo['name']}}-{{name}}",
                              detach=True, network_mode="none", volumes=vols,
                              labels={{"containerlab": topo["name"]}})
elif args[0] == "destroy":
    for c in client.containers.list(all=True, filters={{"label": f"containerlab={{lab_of()}}"}}):
        c.remove(force=True)
elif args[0] == "inspect":
    lab = lab_of()
    rows = [{{"lab_name": lab, "name": c.name, "state": c.status}}
            for c in client.containers.list(all=True, filters={{"label": f"containerlab={{lab}}"}})]
    print(json.dumps({{lab: rows}} if rows else {{}}))
'''
BOOT = "sleep 1; touch /state/redis; sleep 1; echo 1 > /state/cfginit; sleep 1; touch /state/portinit; exec sleep 3600"


def _fake_containerlab(tmp_path, engine, monkeypatch, boot=BOOT) -> Path:  # noqa: F811
    import sys

    bindir, log = tmp_path / "bin", tmp_path / "clab.log"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "containerlab"
    exe.write_text(FAKE_DEPLOY.format(python=sys.executable, log=str(log), url=engine.railab_url or "",
                                      boot=boot))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    return log


def _fake_lab(tmp_path, image: str, name: str) -> Path:
    return generate(parse_intent(_intent(images={"sonic-vs": image, "server": image})), tmp_path / name, name=name)


def test_up_runs_post_deploy_in_every_sonic_node(engine, fake_sonic_image, tmp_path, monkeypatch):  # noqa: F811
    log = _fake_containerlab(tmp_path, engine, monkeypatch)
    lab = f"svup{PID % 10000}"
    labdir = _fake_lab(tmp_path, fake_sonic_image, lab)
    rt = ContainerlabRuntime(docker_url=engine.railab_url)
    try:
        rec = rt.up(labdir)
        assert rec.phase == "started" and rec.timings["post_deploy_s"] > 0
        switches = [n for n in load_clab(labdir).nodes if not n.startswith("srv")]
        for node in switches:
            calls = _log(engine.containers.get(f"clab-{lab}-{node}"))
            assert calls[-1] == "vtysh -f /etc/railab/frr.conf", (node, calls)
            assert "sonic-cfggen -j /etc/railab/config_db.json --write-to-db" in calls
    finally:
        rt.down(lab)
    assert log.read_text().splitlines()[0].startswith("deploy -t ")
    assert st.load(lab) is None
    assert not engine.containers.list(all=True, filters={"label": f"containerlab={lab}"})


def test_up_that_never_gets_ready_is_rolled_back(engine, fake_sonic_image, tmp_path, monkeypatch):  # noqa: F811
    boot = "sleep 1; touch /state/redis; echo 1 > /state/cfginit; exec sleep 3600"  # no PortInitDone
    log = _fake_containerlab(tmp_path, engine, monkeypatch, boot=boot)
    lab = f"svrb{PID % 10000}"
    labdir = _fake_lab(tmp_path, fake_sonic_image, lab)
    with pytest.raises(RailabError, match="'ports initialised' not reached within 3 s"):
        ContainerlabRuntime(docker_url=engine.railab_url, boot_timeout_s=3).up(labdir)
    assert [ln.split()[0] for ln in log.read_text().splitlines()] == ["deploy", "destroy"]
    assert st.load(lab) is None
    assert not engine.containers.list(all=True, filters={"label": f"containerlab={lab}"})
