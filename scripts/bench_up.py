#!/usr/bin/env python3
"""Benchmark the netns runtime: up-to-converged time, down time, peak RSS of the lab's processes.

Usage (root, Debian frr): ``python scripts/bench_up.py [INTENT ...] [--idle S] [--commands] [--estimate]
[--lean-ab [--runs N]] [--baseline REV [--runs N] [--repeat K] [--callgrind] [--prefix P]]``
(INTENT: a shipped intent's name or an intent YAML path)
(default intents: mini, rail-optimized-1024, rail-optimized-1024-full). Each intent is generated
into a temp dir under a unique lab name, brought up with ``railab.checks.deploy.bring_up`` (convergence
checked against lab.json), sampled for RSS while converging and for 2 s after, then brought down.
``--idle S`` (default 10) measures the machine's CPU (``/proc/stat``, all cores) and the lab's
processes' CPU over S seconds of the converged, idle lab (0: skip). Each row also has the memory
estimate of the preflight (railab.topologies.estimate) and the host's ``MemAvailable`` drop from
before ``up`` to converged, and the phase breakdown (``railab inspect``'s table).
``--commands`` also times ``railab check LAB --json`` (every family) and ``railab traffic LAB
--pattern cross-group -n 8`` on the converged lab, each its own process (issue 12's check and
traffic rows).
``--baseline REV`` runs the same user commands with two revisions side by side instead: the
working tree and REV (a git revision, checked out by ``git worktree add`` into a temp dir and
removed after), each its own ``python -m railab`` process with ``PYTHONPATH`` pointed at that tree
(a symlink farm of its package-dir mapping, every module imported once first so that its bytecode
is in a per-side cache), alternating old/new (ABBA), ``--runs N`` rounds (default 3): ``up DIR
--no-progress`` (to converged), ``status LAB --json`` and ``list`` (each ``--repeat K`` times,
default 3), ``down LAB``; medians per side, new/old ratios of the medians and of the means,
a Mann-Whitney U p-value per command (do the samples tell the sides apart?) and the load
average around each intent (the host is shared). Each command is measured as wall time and as CPU time (user +
system of the process and the children it waited for), the latter far less sensitive to the
shared host's load. ``--callgrind`` adds, per side, the instructions the ``status``, ``list`` and
``down`` processes execute (valgrind callgrind: nearly independent of the load; slow, one sample
each). ``--prefix P`` names the labs (default ``bench``).
``--lean-ab`` (issue 47) brings each intent up twice, one lab at a time: with the FRR daemons'
memory settings off (``RAILAB_FRR_LEAN=0``, old) and on (new; railab.testbed.runtime.netns.frrmem),
``--runs N`` rounds (default 1) alternating the order, and prints memory per daemon, per router and
per BGP session end side by side (PSS from smaps_rollup), the MemAvailable drop, the estimate and
the load average; with ``--commands`` each side also runs ``railab check`` (every family) and
``railab traffic``. ``--idle`` defaults to 0 with it.
``--estimate`` only generates and prints each intent's estimate and whether this host would admit it
(nothing is brought up; safe for rail-optimized-4096-full). Prints one JSON line per intent and a
table. Targets (issue 4): mini < 10 s; full 1024-GPU fabric < 60 s and < 4 GiB; (issue 12):
rail-optimized-1024-full up <= 15 s and idle CPU <= 20 % of the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from railab.checks.controlplane import smaps_kib  # noqa: E402
from railab.checks.deploy import bring_up  # noqa: E402
from railab.cli.lab import phase_rows  # noqa: E402
from railab.errors import RailabError  # noqa: E402
from railab.progress import ConvergeBar  # noqa: E402
from railab.testbed import state as st  # noqa: E402
from railab.testbed.runtime.netns import MEM_HEADROOM_BYTES, mem_available_bytes  # noqa: E402
from railab.testbed.runtime.netns.deploy import NetnsDeployer  # noqa: E402
from railab.testbed.runtime.netns.frrmem import LEAN_ENV, lean_in_effect  # noqa: E402
from railab.testbed.runtime.netns.procs import _ns_inode, _pids_in_namespaces  # noqa: E402
from railab.topologies.estimate import GIB, estimate_memory  # noqa: E402
from railab.topologies.generator import generate  # noqa: E402
from railab.topologies.labspec import LabSpec  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies over all cores from /proc/stat (busy excludes idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def _proc_jiffies(pids: list[int]) -> dict[int, tuple[str, int]]:
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        out[pid] = (comm, int(fields[11]) + int(fields[12]))
    return out


def idle_cpu(lab: str, seconds: float) -> dict:
    """CPU over ``seconds`` of an idle lab: ``machine_pct`` (all cores, 100 = every core busy,
    everything on the host counted), ``lab_pct`` (the lab's processes, same scale) and
    ``by_daemon`` (percent of one core per process name, summed over nodes)."""
    rec = st.load(lab)
    inodes = {i for i in (_ns_inode(ns) for ns in (rec.namespaces if rec else {}).values()) if i}
    pids = _pids_in_namespaces(inodes)
    p0, (b0, t0) = _proc_jiffies(pids), _cpu_times()
    time.sleep(seconds)
    p1, (b1, t1) = _proc_jiffies(pids), _cpu_times()
    cores = os.cpu_count() or 1
    by: dict[str, float] = {}
    for pid, (comm, j) in p1.items():
        if pid in p0:
            by[comm] = by.get(comm, 0.0) + (j - p0[pid][1]) / TICK / seconds * 100
    return {
        "seconds": seconds,
        "machine_pct": round(100 * (b1 - b0) / max(1, t1 - t0), 1),
        "lab_pct": round(sum(by.values()) / cores, 1),
        "by_daemon_pct_of_core": {k: round(v, 1) for k, v in sorted(by.items(), key=lambda kv: -kv[1])},
    }


def phase_text(timings: dict) -> list[str]:
    """The phase breakdown (``railab inspect``'s rows) as indented lines ``phase  s  pct``."""
    return [f"{'  ' * d}{p:<{24 - 2 * d}} {s:7.2f} s" + (f" {pct:4.0f} %" if pct is not None else "")
            for d, p, s, pct in phase_rows(timings)]


def _intent_path(intent: str) -> Path:
    """A shipped intent's name, or a path to an intent YAML (e.g. a variant with ``lab.bfd``)."""
    return Path(intent) if intent.endswith((".yml", ".yaml")) else ROOT / "topologies" / "intents" / f"{intent}.yml"


def estimate_row(intent: str, workdir: Path) -> dict:
    """Generate ``intent`` and report its memory estimate and whether this host admits it."""
    labdir = generate(_intent_path(intent), workdir / Path(intent).stem)
    spec = LabSpec.load(labdir)
    est = estimate_memory(spec, lean=lean_in_effect())
    avail, source = mem_available_bytes()
    return {
        "intent": intent, "nodes": len(spec.nodes), "links": len(spec.links),
        "bgp_sessions": len(spec.bgp_sessions), "estimate_gib": round(est.total_bytes / GIB, 2),
        "estimate": est.describe(), "available_gib": round(avail / GIB, 2), "available_from": source,
        "admitted": est.total_bytes <= avail - MEM_HEADROOM_BYTES,
        "bfd": spec.bfd.model_dump(), "ra_interval_s": spec.ra_interval_s,
    }


def lab_rss_bytes(lab: str) -> tuple[int, int]:
    """(total RSS in bytes, process count) of every process inside the lab's namespaces."""
    rec = st.load(lab)
    inodes = {i for i in (_ns_inode(ns) for ns in (rec.namespaces if rec else {}).values()) if i}
    total = n = 0
    for pid in _pids_in_namespaces(inodes):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        n += 1
        except OSError:
            pass
    return total, n


def frr_memory(lab: str, spec: LabSpec) -> dict:
    """Memory of the lab's FRR daemons (issue 47), from smaps_rollup of every process whose
    command line names ``/run/railab/<lab>/<node>/``: PSS (shared library pages split between
    the processes that map them, so the sum is what the daemons take), RSS and private bytes.

    ``by_daemon``: per daemon name, processes and MiB per process (mean PSS, RSS, private);
    ``bgpd_by_role``: bgpd's mean PSS and session ends per router role; ``per_router_mib``: all
    FRR daemons' PSS / routers; ``per_session_end_mib``: all bgpds' PSS / BGP session ends (both
    include bgpd's fixed part); ``fit``: least squares of each router's bgpd PSS against its
    session ends (``slope_mib`` per session end, ``intercept_mib``) and ``router_fixed_mib`` =
    intercept + the other daemons' PSS per router: the estimate's two figures; ``cpu_s``: the
    daemons' user + system CPU since they started."""
    ends: dict[str, int] = {}
    for s in spec.bgp_sessions:  # one per link: both ends count
        for node in (s.node, s.peer):
            ends[node] = ends.get(node, 0) + 1
    roles = {n.name: n.role for n in spec.nodes}
    root = f"/run/railab/{lab}/"
    per: dict[tuple[str, str], dict[str, int]] = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        where = next((a for a in argv if a.startswith(root)), None)
        if not argv or where is None or not argv[0].startswith("/usr/lib/frr/"):
            continue
        node, daemon = where[len(root):].split("/")[0], os.path.basename(argv[0])
        sm = smaps_kib(pid)
        cpu = _proc_jiffies([pid]).get(pid)
        if sm:
            per[(node, daemon)] = {**sm, "cpu_jiffies": cpu[1] if cpu else 0}
    mib = 1024.0
    by_daemon: dict[str, dict] = {}
    for (_, d), sm in per.items():
        b = by_daemon.setdefault(d, {"procs": 0, "pss": 0, "rss": 0, "private": 0})
        b["procs"] += 1
        b["pss"] += sm.get("Pss", 0)
        b["rss"] += sm.get("Rss", 0)
        b["private"] += sm.get("Private_Dirty", 0) + sm.get("Private_Clean", 0)
    daemons = {d: {"procs": b["procs"], "pss_mib": round(b["pss"] / b["procs"] / mib, 2),
                   "rss_mib": round(b["rss"] / b["procs"] / mib, 2),
                   "private_mib": round(b["private"] / b["procs"] / mib, 2),
                   "pss_total_mib": round(b["pss"] / mib, 1)} for d, b in sorted(by_daemon.items())}
    routers = sorted({n for n, _ in per})
    bgp = [(ends.get(n, 0), per[(n, "bgpd")]["Pss"] / mib) for n in routers if (n, "bgpd") in per]
    other = sum(sm.get("Pss", 0) for (n, d), sm in per.items() if d != "bgpd") / mib
    total = sum(sm.get("Pss", 0) for sm in per.values()) / mib
    by_role: dict[str, dict] = {}
    for n in routers:
        if (n, "bgpd") in per:
            r = by_role.setdefault(roles.get(n, "?"), {"routers": 0, "pss": 0.0, "ends": 0})
            r["routers"] += 1
            r["pss"] += per[(n, "bgpd")]["Pss"] / mib
            r["ends"] += ends.get(n, 0)
    fit = None
    if len({x for x, _ in bgp}) > 1:
        mx, my = sum(x for x, _ in bgp) / len(bgp), sum(y for _, y in bgp) / len(bgp)
        slope = sum((x - mx) * (y - my) for x, y in bgp) / sum((x - mx) ** 2 for x, _ in bgp)
        fit = {"slope_mib": round(slope, 3), "intercept_mib": round(my - slope * mx, 2),
               "router_fixed_mib": round(my - slope * mx + other / max(1, len(routers)), 2)}
    n_ends = sum(x for x, _ in bgp)
    return {
        "routers": len(routers), "session_ends": n_ends, "total_pss_mib": round(total, 1),
        # CPU the daemons used from their start until now (user + system): what bringing the lab
        # up cost them, far less sensitive to the shared host's load than up's wall time
        "cpu_s": round(sum(sm["cpu_jiffies"] for sm in per.values()) / TICK, 2),
        "per_router_mib": round(total / max(1, len(routers)), 2),
        "per_session_end_mib": round(sum(y for _, y in bgp) / max(1, n_ends), 3),
        "by_daemon": daemons,
        "bgpd_by_role": {k: {"routers": v["routers"], "pss_mib": round(v["pss"] / v["routers"], 2),
                             "session_ends_each": round(v["ends"] / v["routers"], 1)}
                         for k, v in sorted(by_role.items())},
        "fit": fit,
    }


def timed_commands(lab: str) -> dict:
    """Wall time of ``railab check LAB --json`` (every family) and of ``railab traffic LAB
    --pattern cross-group -n 8`` on the converged lab, each its own process as a user runs it;
    ``{"check_s", "check_ok", "check_rows", "traffic_s", "traffic_rc"}``."""
    out: dict = {}
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "railab", "check", lab, "--json"], capture_output=True, text=True)
    out["check_s"] = round(time.monotonic() - t, 2)
    try:
        doc = json.loads(p.stdout)
        out["check_ok"] = doc.get("ok")
        out["check_rows"] = sum(v.get("pass", 0) + v.get("fail", 0) for v in doc.get("summary", {}).values())
    except json.JSONDecodeError:
        out["check_ok"], out["check_rows"] = False, None
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "railab", "traffic", lab, "--pattern", "cross-group", "-n", "8"],
                       capture_output=True, text=True)
    out["traffic_s"] = round(time.monotonic() - t, 2)
    out["traffic_rc"] = p.returncode
    return out


def bench(intent: str, workdir: Path, idle_s: float = 10.0, commands: bool = False) -> dict:
    name = f"bench{os.getpid() % 10000}-{Path(intent).stem[:12].strip('-')}".lower()
    labdir = generate(_intent_path(intent), workdir / name, name=name)
    spec = LabSpec.load(labdir)
    rt = NetnsDeployer()
    peak = [0, 0]
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            rss, n = lab_rss_bytes(name)
            if rss > peak[0]:
                peak[:] = [rss, n]
            stop.wait(0.25)

    th = threading.Thread(target=sampler, daemon=True)
    load_before = os.getloadavg()[0]
    avail_before = mem_available_bytes()[0]
    avail_converged = None
    idle = None
    cmd: dict = {}
    frr_mem = None
    th.start()
    t0 = time.monotonic()
    error = None
    rec = {"timings": {}}
    try:
        try:
            with ConvergeBar() as bar:
                rec = bring_up(rt, labdir, on_progress=bar if sys.stderr.isatty() else None)
            t_up = time.monotonic() - t0
            avail_converged = mem_available_bytes()[0]
            time.sleep(2)  # keep sampling RSS on the converged lab
            frr_mem = frr_memory(name, spec)
            if idle_s > 0:
                idle = idle_cpu(name, idle_s)
            if commands:
                cmd = timed_commands(name)
        except RailabError as exc:  # e.g. convergence timeout: still report time and memory
            t_up = time.monotonic() - t0
            error = str(exc).splitlines()[0] + " " + " ".join(line.strip()[:160] for line in str(exc).splitlines()[1:])
    finally:
        stop.set()
        th.join()
        t1 = time.monotonic()
        rt.down(name)
        t_down = time.monotonic() - t1
    return {
        "intent": intent,
        "nodes": len(spec.nodes),
        "switches": sum(1 for n in spec.nodes if n.role != "server"),
        "links": len(spec.links),
        "bgp_sessions": len(spec.bgp_sessions),
        "up_s": round(t_up, 2),
        "down_s": round(t_down, 2),
        "peak_rss_mib": round(peak[0] / 2**20, 1),
        "processes": peak[1],
        "timings": rec["timings"],
        "phases": phase_text(rec["timings"]),
        "estimate_gib": round(estimate_memory(spec, lean=lean_in_effect()).total_bytes / GIB, 2),
        "mem_used_gib": (round((avail_before - avail_converged) / GIB, 2)
                         if avail_converged is not None else None),
        "idle_cpu": idle,
        "frr_lean": os.environ.get(LEAN_ENV, "1"),
        "frr_memory": frr_mem,
        **cmd,
        "bfd": spec.bfd.model_dump(), "ra_interval_s": spec.ra_interval_s,
        "load1_before": round(load_before, 2),  # the 2-core host is shared: say what else ran
        "load1_after": round(os.getloadavg()[0], 2),
        "converged": error is None,
        "error": error,
    }


# ---- side by side with another revision (--baseline) ------------------------------------------
SIDE_COMMANDS = ("up", "status", "list", "down")


def _shim(tree: Path, dest: Path) -> Path:
    """A directory whose ``railab`` package is ``tree`` laid out as installed: symlinks following
    ``tree``'s own pyproject ``[tool.setuptools.package-dir]`` (``railab`` = app/, ``railab.testbed``
    = testbed/ ...), so ``PYTHONPATH=dest`` imports that revision (ahead of the venv's editable
    finder, which Python asks last). Returns ``dest``."""
    import tomllib

    dirs = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top = dest / "railab"
    top.mkdir(parents=True)
    for entry in (tree / dirs["railab"]).iterdir():
        (top / entry.name).symlink_to(entry)
    for pkg, folder in dirs.items():
        if pkg != "railab":
            (top / pkg.split(".", 1)[1]).symlink_to(tree / folder)
    return dest


def _side_env(shim: Path, pyc: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(shim), PYTHONPYCACHEPREFIX=str(pyc))
    return env


def _timed_cli(env: dict[str, str], *args: str) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds, exit code, last stderr line) of ``python -m railab ARGS`` as its
    own process. CPU = user + system of that process and the children it waited for (ip, nft,
    vtysh -C; not the FRR daemons, which detach): what the command itself costs, far less
    sensitive than wall time to what else the shared host runs."""
    import resource

    r0, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    p = subprocess.run([sys.executable, "-m", "railab", *args], env=env, capture_output=True, text=True)
    wall, r1 = time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu, p.returncode, (p.stderr.strip().splitlines() or [""])[-1]


def _instructions(env: dict[str, str], *args: str) -> int | None:
    """Instructions the ``python -m railab ARGS`` process executes (valgrind callgrind's ``I
    refs``; its children, e.g. ``ip`` and ``vtysh``, are not traced), or None without valgrind.
    Unlike a time, this count hardly depends on what else the host runs."""
    import re
    import shutil

    if shutil.which("valgrind") is None:
        return None
    with tempfile.NamedTemporaryFile(prefix="railab-callgrind-") as out:
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
                            sys.executable, "-m", "railab", *args], env=env, capture_output=True, text=True)
    m = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    return int(m.group(1).replace(",", "")) if m else None


def _distinct(old: list[float], new: list[float]) -> float | None:
    """Two-sided Mann-Whitney U p-value of two sides' samples (scipy.stats.mannwhitneyu): under
    0.05 the samples tell the sides apart; above it a median ratio off 1 is within the host's
    noise (bimodal timings on a shared host move a median of 9 by ~5 % with no shift in the mean).
    None without scipy or with fewer than 3 samples a side."""
    if min(len(old), len(new)) < 3:
        return None
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:
        return None
    return float(mannwhitneyu(old, new, alternative="two-sided").pvalue)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def side_by_side(intents: list[str], baseline: str, runs: int = 3, prefix: str = "bench",
                 repeat: int = 3, callgrind: bool = False) -> list[dict]:
    """Old (``baseline``, a git revision) and new (this working tree) side by side: for each
    intent, ``runs`` rounds alternating the sides (ABBA), each timing ``up`` (to converged),
    ``status --json``, ``list`` and ``down`` as separate ``python -m railab`` processes; one row
    per intent with every sample, the medians and new/old ratios. ``status`` and ``list`` (a few
    tenths of a second, where the host's noise is largest) run ``repeat`` times per round.
    ``callgrind``: then, per side, the instructions of ``status --json``, ``list`` and ``down``
    on a freshly brought-up lab (:func:`_instructions`), in ``instructions`` of the row. Raises RuntimeError when a
    side's ``up`` fails (its lab is taken down first)."""
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{baseline}^{{commit}}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory(prefix="railab-bench-ab-") as tmp_:
        tmp = Path(tmp_)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tmp / "old"), rev],
                       check=True)
        try:
            envs = {"old": _side_env(_shim(tmp / "old", tmp / "shim-old"), tmp / "pyc-old"),
                    "new": _side_env(_shim(ROOT, tmp / "shim-new"), tmp / "pyc-new")}
            # bytecode first (every module imported once through the shim, so the cache holds the
            # paths imports use; compileall does not enter symlinked folders): no timing pays compiling
            warm = ("import importlib, pkgutil, railab\n"
                    "for m in pkgutil.walk_packages(railab.__path__, 'railab.'):\n"
                    "    try:\n        importlib.import_module(m.name)\n    except Exception:\n        pass\n")
            for env in envs.values():
                subprocess.run([sys.executable, "-c", warm], env=env, capture_output=True)
            for intent in intents:
                name = f"{prefix}{os.getpid() % 1000}"
                labdirs = {}
                for side, env in envs.items():
                    labdirs[side] = tmp / "labs" / side / name
                    path = str(_intent_path(intent)) if intent.endswith((".yml", ".yaml")) else intent
                    subprocess.run([sys.executable, "-m", "railab", "generate", path, "-o", str(labdirs[side]),
                                    "--name", name], env=env, check=True, capture_output=True)
                samples: dict[str, dict[str, list[float]]] = {s: {c: [] for c in SIDE_COMMANDS} for s in envs}
                cpu: dict[str, dict[str, list[float]]] = {s: {c: [] for c in SIDE_COMMANDS} for s in envs}
                loads = [os.getloadavg()[0]]
                for r in range(runs):
                    for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
                        env = envs[side]
                        for cmd, args in (("up", ("up", str(labdirs[side]), "--no-progress")),
                                          *[("status", ("status", name, "--json"))] * repeat,
                                          *[("list", ("list",))] * repeat,
                                          ("down", ("down", name))):
                            t, c, rc, err = _timed_cli(env, *args)
                            if rc != 0 and cmd in ("up", "down"):
                                _timed_cli(env, "down", name)
                                raise RuntimeError(f"{side} ({intent}): railab {cmd} exit {rc}: {err}")
                            samples[side][cmd].append(t)
                            cpu[side][cmd].append(c)
                        loads.append(os.getloadavg()[0])
                ir: dict[str, dict[str, int | None]] = {}
                if callgrind:
                    for side, env in envs.items():
                        _timed_cli(env, "up", str(labdirs[side]), "--no-progress")
                        ir[side] = {"status": _instructions(env, "status", name, "--json"),
                                    "list": _instructions(env, "list"),
                                    "down": _instructions(env, "down", name)}
                        _timed_cli(env, "down", name)  # if the traced down failed
                med = {s: {c: round(_median(v), 3) for c, v in cmds.items()} for s, cmds in samples.items()}
                med_cpu = {s: {c: round(_median(v), 3) for c, v in cmds.items()} for s, cmds in cpu.items()}
                row = {"intent": intent, "baseline": rev[:12], "runs": runs,
                       "median_s": med,
                       "new_over_old": {c: round(med["new"][c] / med["old"][c], 3) for c in SIDE_COMMANDS},
                       "mean_new_over_old": {c: round(sum(samples["new"][c]) / sum(samples["old"][c])
                                                      * len(samples["old"][c]) / len(samples["new"][c]), 3)
                                              for c in SIDE_COMMANDS},
                       "mwu_p": {c: (None if (pv := _distinct(samples["old"][c], samples["new"][c])) is None
                                     else round(pv, 3)) for c in SIDE_COMMANDS},
                       "median_cpu_s": med_cpu,
                       "cpu_new_over_old": {c: round(med_cpu["new"][c] / med_cpu["old"][c], 3)
                                            for c in SIDE_COMMANDS},
                       "samples_s": {s: {c: [round(x, 3) for x in v] for c, v in cmds.items()}
                                     for s, cmds in samples.items()},
                       "samples_cpu_s": {s: {c: [round(x, 3) for x in v] for c, v in cmds.items()}
                                         for s, cmds in cpu.items()},
                       "instructions": ir,
                       "load1": {"min": round(min(loads), 2), "max": round(max(loads), 2),
                                 "mean": round(sum(loads) / len(loads), 2)}}
                print(json.dumps(row), flush=True)
                rows.append(row)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "old")],
                           capture_output=True)
    print(f"\nold = {rev[:12]}, new = working tree; medians (s) of {runs} rounds ({repeat} samples "
          f"per round for status and list), ABBA order, each command "
          "its own process")
    print("| lab | command | wall old | wall new | new/old | mean new/old | p (MWU) | CPU old | CPU new "
          "| new/old | load1 (min-max, mean) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ld, w, c_ = r["load1"], r["median_s"], r["median_cpu_s"]
        for c in SIDE_COMMANDS:
            print(f"| {r['intent']} | {c} | {w['old'][c]:.3f} | {w['new'][c]:.3f} | {r['new_over_old'][c]:.3f} | "
                  f"{r['mean_new_over_old'][c]:.3f} | {r['mwu_p'][c]} | "
                  f"{c_['old'][c]:.3f} | {c_['new'][c]:.3f} | {r['cpu_new_over_old'][c]:.3f} | "
                  f"{ld['min']}-{ld['max']}, {ld['mean']} |")
    for r in rows:
        ir = r["instructions"]
        if ir and all(ir["old"].get(c) and ir["new"].get(c) for c in ("status", "list", "down")):
            print(f"\n{r['intent']}: instructions of the railab process (callgrind), old -> new: "
                  + ", ".join(f"{c} {ir['old'][c] / 1e6:,.0f} M -> {ir['new'][c] / 1e6:,.0f} M "
                              f"({ir['new'][c] / ir['old'][c]:.3f})" for c in ("status", "list", "down")))
    return rows


def lean_side_by_side(intents: list[str], workdir: Path, runs: int = 1, idle_s: float = 0.0,
                      commands: bool = False) -> list[dict]:
    """Issue 47: each intent brought up with the FRR daemons' memory settings off
    (``RAILAB_FRR_LEAN=0``, "old") and on ("new", railab.testbed.runtime.netns.frrmem), one lab
    at a time, ``runs`` rounds alternating the order (old first in the first round); each row is
    :func:`bench`'s with ``side`` set. Prints the rows as JSON lines, then one table per intent:
    memory per daemon, per router and per BGP session end (:func:`frr_memory`, the converged
    lab 2 s after convergence, before ``--commands``), the MemAvailable drop, ``up`` and the
    load average (1 min) before and after each side. ``RAILAB_FRR_LEAN`` is restored after."""
    saved = os.environ.get(LEAN_ENV)
    rows: list[dict] = []
    try:
        for intent in intents:
            for r in range(runs):
                for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
                    os.environ[LEAN_ENV] = "0" if side == "old" else "1"
                    row = {"side": side, **bench(intent, workdir, idle_s, commands)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        if saved is None:
            os.environ.pop(LEAN_ENV, None)
        else:
            os.environ[LEAN_ENV] = saved
    for intent in intents:
        mine = [r for r in rows if r["intent"] == intent and r.get("frr_memory")]
        sides = {s: [r for r in mine if r["side"] == s] for s in ("old", "new")}
        if not all(sides.values()):
            continue

        def mean(side: str, get, sides=sides) -> float:
            xs = [get(r) for r in sides[side]]
            return sum(xs) / len(xs)

        loads = ", ".join(f"{r['side']} {r['load1_before']} -> {r['load1_after']}" for r in mine)
        print(f"\n{intent}: FRR memory, old (RAILAB_FRR_LEAN=0) vs new, {runs} run(s) a side, "
              f"PSS in MiB (smaps_rollup, 2 s after convergence); load1 {loads}")
        print("| what | old | new | new/old |")
        print("|---|---|---|---|")
        table = [(f"{d} per process", (lambda r, d=d: r["frr_memory"]["by_daemon"].get(d, {}).get("pss_mib", 0.0)))
                 for d in sorted(sides["old"][0]["frr_memory"]["by_daemon"])]
        table += [(f"bgpd per {role} ({sides['old'][0]['frr_memory']['bgpd_by_role'][role]['session_ends_each']:.0f} "
                   "session ends)", (lambda r, role=role: r["frr_memory"]["bgpd_by_role"][role]["pss_mib"]))
                  for role in sorted(sides["old"][0]["frr_memory"]["bgpd_by_role"])]
        table += [("**per router** (all FRR daemons / routers)", lambda r: r["frr_memory"]["per_router_mib"]),
                  ("**per BGP session end** (all bgpds / session ends)",
                   lambda r: r["frr_memory"]["per_session_end_mib"]),
                  ("fit: bgpd per session end (slope)", lambda r: (r["frr_memory"]["fit"] or {}).get("slope_mib", 0.0)),
                  ("fit: router without sessions (bgpd intercept + other daemons)",
                   lambda r: (r["frr_memory"]["fit"] or {}).get("router_fixed_mib", 0.0)),
                  ("all FRR daemons", lambda r: r["frr_memory"]["total_pss_mib"]),
                  ("MemAvailable drop up -> converged (GiB)", lambda r: r["mem_used_gib"] or 0.0),
                  ("preflight estimate (GiB)", lambda r: r["estimate_gib"]),
                  ("up -> converged (s)", lambda r: r["up_s"]),
                  ("FRR daemons' CPU from start to 2 s after convergence (s)",
                   lambda r: r["frr_memory"].get("cpu_s", 0.0))]
        if all("check_s" in r for r in mine):
            table.append(("railab check (s; every family)", lambda r: r["check_s"]))
        for what, get in table:
            o, n = mean("old", get), mean("new", get)
            print(f"| {what} | {o:.3f} | {n:.3f} | {n / o if o else float('nan'):.2f} |")
        for r in mine:
            if "check_s" in r:
                print(f"{r['side']}: check ok {r['check_ok']} ({r['check_rows']} rows), traffic exit {r['traffic_rc']}")
            if not r["converged"]:
                print(f"{r['side']}: did not converge: {r['error']}")
    return rows


def main() -> None:
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:  # before anything is brought up
        print(__doc__)
        return
    idle_s = 0.0 if "--lean-ab" in args else 10.0
    if "--idle" in args:
        i = args.index("--idle")
        idle_s = float(args[i + 1])
        del args[i:i + 2]
    commands = "--commands" in args
    opts = {}
    callgrind = "--callgrind" in args
    for flag in ("--baseline", "--runs", "--prefix", "--repeat"):
        if flag in args:
            i = args.index(flag)
            opts[flag] = args[i + 1]
            del args[i:i + 2]
    if "--baseline" in opts:
        intents = [a for a in args if not a.startswith("-")] or ["mini", "rail-optimized-1024-full"]
        side_by_side(intents, opts["--baseline"], int(opts.get("--runs", 3)), opts.get("--prefix", "bench"),
                     int(opts.get("--repeat", 3)), callgrind)
        return
    intents = [a for a in args if not a.startswith("-")] or [
        "mini", "rail-optimized-1024", "rail-optimized-1024-full"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="railab-bench-") as tmp:
        if "--lean-ab" in args:
            lean_side_by_side(intents, Path(tmp), int(opts.get("--runs", 1)), idle_s, commands)
            return
        if "--estimate" in args:
            for intent in intents:
                print(json.dumps(estimate_row(intent, Path(tmp))), flush=True)
            return
        for intent in intents:
            row = bench(intent, Path(tmp), idle_s, commands)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| lab | nodes | links | sessions | up->converged | down | peak RSS (procs) | estimate / "
          "MemAvailable drop | idle CPU (machine / lab) | load1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = r["timings"]
        up = f"{r['up_s']} s (build {t.get('build_s', '?')} s, converge {t.get('converge_s', '?')} s)"
        if not r["converged"]:
            up = f"did not converge ({r['up_s']} s)"
        idle = r["idle_cpu"]
        cpu = f"{idle['machine_pct']} % / {idle['lab_pct']} %" if idle else "-"
        print(f"| {r['intent']} | {r['nodes']} | {r['links']} | {r['bgp_sessions']} | {up} | "
              f"{r['down_s']} s | {r['peak_rss_mib']} MiB ({r['processes']}) | "
              f"{r['estimate_gib']} / {r['mem_used_gib']} GiB | {cpu} | "
              f"{r['load1_before']} -> {r['load1_after']} |")
    for r in rows:
        if "check_s" in r:
            print(f"\n{r['intent']}: check {r['check_s']} s ({r['check_rows']} rows, ok {r['check_ok']}), "
                  f"traffic -n 8 {r['traffic_s']} s (exit {r['traffic_rc']})")
    for r in rows:
        print(f"\n{r['intent']} phases:")
        print("\n".join(r["phases"]))


if __name__ == "__main__":
    main()
