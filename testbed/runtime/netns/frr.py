"""FRR start phase of ``up``: the start waves by tier, spawning daemons, reaping, waiting for files."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from railab.errors import RailabError
from railab.testbed import state as st
from railab.testbed.clabfile import ClabFile
from railab.testbed.namespaces import entered
from railab.testbed.runtime.netns.constants import FRR_BIN, FRR_FD_LIMIT, FRR_USER, RA_GATE_SETTLE_S, SPAWN_THREADS
from railab.testbed.runtime.netns.frrmem import daemon_env
from railab.testbed.runtime.netns.ipv6 import (
    fabric_ports,
    ra_gate_wanted,
    set_ra_gate,
    solicit_router_advertisements,
    tier_order,
)
from railab.testbed.runtime.netns.ribhold import hold_ms, start_line
from railab.testbed.runtime.phases import since, timed
from railab.testbed.signals import signals_deferred
from railab.topologies.frrsplit import split_frr_conf, zebra_read_order


class FrrMixin:
    """NetnsRuntime's FRR: the configs' dry run, daemon argv, spawn, waves, reaping."""

    def _dry_run(self, clab: ClabFile) -> None:
        """Check every node's frr.conf with ``vtysh -C`` (parallel); RailabError names the node.

        A config this vtysh already passed is not checked again: a pass leaves a marker named
        by the SHA-256 of vtysh's and bgpd's identity (path, inode, size, mtime, ctime) and the file's bytes
        under :func:`railab.testbed.state.cache_dir` (``frr-config-ok/``). ``vtysh -C`` builds
        every daemon's command tree per call, ~0.1 CPU-s per node: 2.4 CPU-s of the full
        1024-GPU fabric's ``up`` and 96 processes on the 4096-GPU one, for configs that
        ``generate`` writes byte-identical on every run. A rejected config leaves no marker."""
        vtysh = shutil.which("vtysh") or "vtysh"
        try:  # vtysh and the daemons' package: a reinstall changes ctime, which no one can set
            identity = b"".join(
                f"{os.path.realpath(f)}\0{i.st_ino}\0{i.st_size}\0{i.st_mtime_ns}\0{i.st_ctime_ns}\0".encode()
                for f in (vtysh, FRR_BIN / "bgpd") for i in (os.stat(f),))
        except OSError:
            identity = None  # no vtysh: let Popen say so
        ok_dir = st.cache_dir() / "frr-config-ok"
        todo: dict[str, tuple[Path, Path | None, bytes]] = {}
        for n in clab.routers:
            conf = Path(n.frr_conf)
            marker, text = None, b""
            try:
                text = conf.read_bytes()
                if identity is not None:
                    marker = ok_dir / hashlib.sha256(identity + text).hexdigest()
                    if marker.exists():
                        continue
            except OSError:
                pass  # unreadable file (vtysh -C reports it) or cache: check it
            todo[n.name] = (conf, marker, text)
        procs = {
            name: subprocess.Popen(
                [vtysh, "-C", "-f", str(conf)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            for name, (conf, _, _) in todo.items()
        }
        bad = []
        for name, p in procs.items():
            out, _ = p.communicate()
            if p.returncode != 0:
                lines = [line.strip() for line in out.splitlines() if line.strip()]
                bad.append(f"{name} ({clab.nodes[name].frr_conf}): " + "; ".join(lines[:5]))
            elif (marker := todo[name][1]) is not None:
                conf, _, text = todo[name]
                try:
                    if conf.read_bytes() == text:  # what vtysh read is what was hashed
                        marker.parent.mkdir(parents=True, exist_ok=True)
                        marker.touch()
                except OSError:
                    pass  # a read-only run root: check again next time
        if bad:
            raise RailabError("FRR rejected the config of " + " | ".join(bad))


    def _spawn(self, argv: list[str], *, ns: str | None = None, uts: int | None = None,
               hostname: str | None = None, **kwargs: Any) -> tuple[subprocess.Popen, int | None]:
        """Popen ``argv`` (in namespace ``ns`` and a UTS namespace: ``uts`` or a new one named
        ``hostname``, see railab.testbed.namespaces.entered), remembered so a rollback can kill
        it (see _kill_children). Signals are deferred until the child is recorded. Returns the
        process and an fd of its UTS namespace (None without ``ns``; the caller closes it)."""
        with signals_deferred():
            held = None
            if ns is None:
                p = subprocess.Popen(argv, **kwargs)
            else:
                with entered(ns, uts=uts, hostname=hostname) as held:
                    p = subprocess.Popen(argv, **kwargs)
            self._children.append(p)
        return p, held

    def _kill_children(self) -> None:
        """Kill and reap every process this ``up`` spawned that is still running.

        Runs before ``down`` sweeps the lab, so no child can fork a daemon after the sweep.
        """
        for p in getattr(self, "_children", []):
            if p.poll() is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._children = []

    def _daemon_argv(self, lab: str, node: str, daemon: str,
                     options: list[str] | None = None, config: Path | None = None) -> list[str]:
        """argv of FRR ``daemon`` on ``node``: railab's per-node paths, then ``options`` (the
        node's ``<daemon>_options`` from its daemons file, ``ClabNode.daemon_options``: the node
        kind's ``daemon_options`` are their one home, e.g. zebra's ``-s``). ``config``: the
        daemon's own part of the node's frr.conf, read at start (None: start bare, ``/dev/null``,
        and let ``vtysh -f`` push the config)."""
        d = st.node_dir(lab, node)
        argv = [
            str(FRR_BIN / daemon), "-d", "-u", FRR_USER, "-g", FRR_USER,
            "-f", str(config or "/dev/null"),  # never the host's /etc/frr
            "-i", str(d / f"{daemon}.pid"),
            "--vty_socket", str(d),
            "-P", "0",  # no TCP vty
            "-z", str(d / "zserv.api"),
            "--log", f"file:{d / (daemon + '.log')}",
            "--limit-fds", str(FRR_FD_LIMIT),
        ]
        if daemon == "bfdd":
            argv += ["--bfdctl", str(d / "bfdd.sock")]
        return argv + list(options or [])

    def _start_frr(self, clab: ClabFile, record: st.LabState) -> None:
        lab = clab.name
        routers = clab.routers
        try:
            pw = pwd.getpwnam(FRR_USER)
        except KeyError:
            raise RailabError(f"user {FRR_USER!r} missing (Debian's frr package creates it): "
                              "apt-get install frr") from None
        # Each daemon reads its own part of the node's frr.conf at start (split_frr_conf), so
        # no vtysh round trip per config line (that push was 158 s of the 4096-GPU fabric's up
        # on 2 cores). Nodes whose file holds a statement the split does not place are pushed
        # whole with `vtysh -f` after the daemons start, as FRR's init script does.
        parts: dict[str, dict[str, Path]] = {}
        # zebra holds its RIB queue while the fabric comes up (ribhold; released once converged)
        hold = hold_ms()
        for n in routers:
            d = st.node_dir(lab, n.name)
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, pw.pw_uid, pw.pw_gid)
            split = split_frr_conf(Path(n.frr_conf).read_text(), n.daemons)
            if split is not None:
                parts[n.name] = {}
                for daemon, text in split.items():
                    if daemon == "zebra":  # read with few northbound commits (frrsplit)
                        text = zebra_read_order(text) + start_line(hold, split.get("bgpd", ""))
                    f = d / f"{daemon}.conf"
                    f.write_text(text)
                    parts[n.name][daemon] = f
        timings = record.timings
        # the daemons' allocator settings and ringbuf_wipe (frrmem; RAILAB_FRR_LEAN=0: none)
        env = daemon_env()
        # The RA gate (RA_GATE_TABLE): every router drops the RAs it receives until its bgpd has
        # had both of zebra's interface answers; the gate then opens tier by tier, top first, each
        # tier soliciting its peers' RAs (_open_ra_gate). Without nft, or with RAILAB_RA_GATE=0,
        # the RAs are solicited between the waves instead, as before.
        # A lab without router-router links (Rail-only) has no unnumbered session to hold back.
        gate_ports = fabric_ports(clab, record.namespaces)
        gate = (ra_gate_wanted() and shutil.which("nft") is not None
                and bool(gate_ports))
        gate_open = not gate
        if gate:
            with timed(timings, "frr_ra_gate_s"):
                set_ra_gate([record.namespaces[n.name] for n in routers], True)
        # One UTS namespace per node, named after it (BGP's hostname capability and `show bgp
        # summary` then name the peer switch, not the host), shared by the node's daemons.
        uts: dict[str, int] = {}
        solicit: subprocess.Popen | None = None
        t_rs, err = 0.0, ""
        try:
            for wave in self._daemon_waves(routers, clab):
                t_wave = time.monotonic()
                names = "/".join(dict.fromkeys(d for _, d in wave))  # the wave is in start order

                def spawn(nd: tuple[Any, str]) -> tuple[subprocess.Popen, int | None]:
                    n, daemon = nd
                    return self._spawn(
                        self._daemon_argv(lab, n.name, daemon, n.daemon_options.get(daemon),
                                          parts.get(n.name, {}).get(daemon)),
                        ns=record.namespaces[n.name], uts=uts.get(n.name), hostname=n.name,
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        env=env,
                    )

                # From several threads: Popen returns only once its child has exec'd, and on a
                # host kept busy by the daemons already started each child waits for a CPU (the
                # 4096-GPU fabric: ~1 s per spawn, one at a time, while bgpd converged). A
                # Ctrl-C waits until every spawned daemon is recorded for the rollback.
                # Every spawned daemon's UTS fd is kept or closed before an error or the signal
                # leaves the block (the children themselves are in self._children for rollback).
                procs: dict[str, subprocess.Popen] = {}
                failure: BaseException | None = None
                with signals_deferred(), ThreadPoolExecutor(max_workers=SPAWN_THREADS) as pool:
                    futures = [(nd, pool.submit(spawn, nd)) for nd in wave]
                    for (n, daemon), fut in futures:
                        try:
                            proc, held = fut.result()
                        except BaseException as exc:  # noqa: BLE001 - raised after the loop
                            failure = failure or exc
                            continue
                        procs[f"{n.name} {daemon}"] = proc
                        if n.name in uts:
                            os.close(held)
                        else:  # the zebra wave: one daemon per node, its new UTS namespace
                            uts[n.name] = held
                if failure is not None:
                    raise failure
                self._reap(procs, names, lab)
                zebra_wave = names == "zebra"
                if zebra_wave:
                    self._wait_files([st.node_dir(lab, n.name) / "zserv.api" for n, _ in wave],
                                     "zebra's zserv socket")
                for n, daemon in wave:
                    pidfile = st.node_dir(lab, n.name) / f"{daemon}.pid"
                    record.routers[n.name].pids[daemon] = int(pidfile.read_text().split()[0])
                since(t_wave, timings, f"frr_{names}_s")
                st.update(record)  # not st.save: never brings back a lab another down removed
                if not gate_open and "bgpd" in names:
                    time.sleep(RA_GATE_SETTLE_S)
                    gate_open = True  # even if opening fails: the rollback removes the namespaces
                    with timed(timings, "frr_ra_release_s"):
                        record.solicit["gate"] = self._open_ra_gate(clab, record, gate_ports)
                if zebra_wave and not gate:
                    # Once every zebra runs with its RA config, solicit the RAs so that each zebra
                    # knows its peers' link-locals (bgpd learns them from zebra) and no session
                    # waits an RA interval: once on every port now, then, from a process of its
                    # own beside the next wave, on the ports whose new veth had no carrier yet
                    # (railab.testbed.solicit; bgpd needs a few hundred ms to start anyway).
                    with timed(timings, "frr_ra_solicit_s"):
                        solicit = self._solicit(clab, lab, parts, record)
                    t_rs = time.monotonic()
            if not gate_open:  # no bgpd in any wave (a lab of zebra-only nodes): open it all the same
                gate_open = True
                record.solicit["gate"] = self._open_ra_gate(clab, record, gate_ports)
        finally:
            try:
                if solicit is not None:
                    # bounded (2 s of retries); on an error or a Ctrl-C the
                    # rollback kills it (it is one of self._children)
                    try:
                        out, err = solicit.communicate(timeout=60)
                    except subprocess.TimeoutExpired:
                        solicit.kill()
                        out, err = solicit.communicate()
                    since(t_rs, timings, "frr_ra_solicit_beside_s")
                    try:
                        record.solicit["later"] = json.loads(out or "{}").get("sent", 0)
                    except (ValueError, AttributeError):
                        pass
            finally:
                for fd in uts.values():
                    os.close(fd)
        if solicit is not None and solicit.returncode != 0:
            raise RailabError(f"lab {lab}: soliciting the router advertisements failed "
                              f"(exit {solicit.returncode}): {(err or '').strip()[-300:]}")
        # The lines a split-started daemon refused are read while bring_up waits for convergence
        # (startup_problems): each daemon answers only once it has read its config, which took
        # 8.3 s of the 4096-GPU fabric's up when waited for here.
        # The nodes without a split: the integrated config, applied as FRR's init script does
        # (vtysh pushes each daemon its part).
        with timed(timings, "frr_config_s"):
            procs = {
                n.name: self._spawn(
                    ["vtysh", "--vty_socket", str(st.node_dir(lab, n.name)), "-f", str(n.frr_conf)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                )[0]
                for n in routers if n.name not in parts
            }
            self._reap(procs, "vtysh -f frr.conf", lab)
        if procs:  # nodes configured only now by vtysh: solicit their peers' RAs again
            with timed(timings, "frr_ra_solicit_s", add=True):
                solicit_router_advertisements(clab, record.namespaces)


    @staticmethod
    def _daemon_waves(routers: list, clab: ClabFile | None = None) -> list[list[tuple[Any, str]]]:
        """The FRR start waves, each a list of ``(node, daemon)`` started together and waited for
        (a daemon started with ``-d`` returns once it runs, its pid file written) before the next:
        zebra everywhere (the others connect to it), then every other daemon of every node at
        once (they only need zebra, not each other), by position in each node's own daemon
        list (its daemons file's start order). Empty waves are left out.

        The second wave starts every bgpd first, top tier first (:func:`tier_order` of
        ``clab``'s links), then the other daemons. The upper end of every fabric link only
        listens (railab.topologies.frr, ``passive``): a lower-tier bgpd whose first connect
        meets a bgpd not listening yet is refused and waits bgpd's 1 s idle hold before it
        tries again (FRR 8.4 ``BGP_INIT_START_TIMER``; on the 4 x 16 Clos with every bgpd
        spawned in node order, 3 of a leaf's 4 sessions did). Spawned first, the listeners are
        up first, and the other daemons start while bgpd reads its config and learns its
        interfaces. Measured: it does not prevent those retries (3-10 of a spine's 16 sessions
        still retried: zebra's neighbour updates kill first connects too, docs/runtime.md
        "Issue 12, fourth pass"), and no gain in ``up`` was measurable.

        Measured, not kept: starting the listening tier's bgpd in a wave of its own before the
        other nodes' took the full 1024-GPU fabric's ``up`` from 17.7-18.7 s to 19.1-21.1 s
        (the lower tier's sessions then start later)."""
        rank = tier_order(clab) if clab is not None else {}
        routers = sorted(routers, key=lambda n: rank.get(n.name, 0))
        first = [(n, n.daemons[0]) for n in routers if n.daemons]
        rest = [(n, d, pos) for n in routers for pos, d in enumerate(n.daemons) if pos]
        rest.sort(key=lambda x: (x[1] != "bgpd", x[2]))  # stable: tier order within each
        return [w for w in (first, [(n, d) for n, d, _ in rest]) if w]


    def _reap(self, procs: dict[str, subprocess.Popen], what: str, lab: str) -> None:
        bad = []
        for name, p in procs.items():
            out, _ = p.communicate(timeout=60)
            if p.returncode != 0:
                text = (out or b"").decode(errors="replace").strip().splitlines()
                bad.append(f"{name}: {'; '.join(text[-3:]) or f'exit {p.returncode}'}")
        if bad:
            raise RailabError(f"lab {lab}: {what} failed on " + " | ".join(bad))

    @staticmethod
    def _wait_files(paths: list[Path], what: str, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        pending = list(paths)
        while pending:
            pending = [p for p in pending if not p.exists()]
            if pending and time.monotonic() > end:
                raise RailabError(f"{what} did not appear within {timeout:g} s: {', '.join(map(str, pending[:5]))}")
            if pending:
                time.sleep(0.01)

