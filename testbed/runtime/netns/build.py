"""Build phase of ``up``: dry run of the configs, namespaces, links, addresses, sysctls, capacity."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from railab.errors import RailabError
from railab.testbed import state as st
from railab.testbed.clabfile import ClabFile
from railab.testbed.namespaces import create_netns, entered, ip_batch, netns_path, set_link_up
from railab.testbed.signals import signals_deferred
from railab.topologies import routing

if TYPE_CHECKING:  # what only `up` needs is imported there: `down` and the rest start faster
    from railab.topologies.labspec import LabSpec

from railab.testbed.runtime.netns.constants import FRR_BIN
from railab.testbed.runtime.netns.preflight import (
    _write_sysctl,
    raise_neighbour_tables,
)


class BuildMixin:
    """NetnsRuntime's build methods (mixed into railab.testbed.runtime.netns.NetnsRuntime)."""

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

    @staticmethod
    def _open_node_ns(node, ns: str, deferred: dict[str, dict[str, str]], fds: dict[str, int]) -> None:
        """In namespace ``ns`` (already created): bring its loopback up, apply the namespace-wide
        sysctls (interface ones go to ``deferred``) and keep an fd on it (``fds``) for placing
        veth peers and the stitch's tunnels."""
        with entered(ns):
            set_link_up("lo")
            later = {}
            for key, value in node.sysctls.items():
                if not _write_sysctl(key, value):
                    later[key] = value
            deferred[node.name] = later
        fds[node.name] = os.open(netns_path(ns), os.O_RDONLY)

    def _build(self, clab: ClabFile, spec: LabSpec, record: st.LabState) -> None:
        timings = record.timings
        fds: dict[str, int] = {}
        deferred: dict[str, dict[str, str]] = {}
        t0 = time.monotonic()
        # 0. host-wide neighbour tables (shared by all namespaces) sized for this lab's links.
        plan = getattr(self, "_stitch", None)
        raised = raise_neighbour_tables(2 * len(plan.all_links if plan is not None else clab.links))
        if raised:
            record.host_sysctls = dict(raised)
        try:
            # 1. namespaces (one `ip -batch`), loopback up, namespace-wide sysctls (accept_dad
            # before any link).
            with signals_deferred():
                create_netns(record.namespaces[n] for n in clab.nodes)
            for node in clab.nodes.values():
                with signals_deferred():  # every fd opened is in fds before a Ctrl-C lands
                    self._open_node_ns(node, record.namespaces[node.name], deferred, fds)
            timings["namespaces_s"] = round(time.monotonic() - t0, 3)

            # 2. veth pairs, both ends made in place with their MTU (one `ip -batch`: the
            # kernel places each end in its namespace), the a-ends up at creation, then the
            # b-ends up, one batch per namespace.
            t1 = time.monotonic()
            ns_of = record.namespaces
            peers_up: dict[str | None, list[str]] = {}
            adds = []
            for link in clab.links:
                (na, ia), (nb, ib) = link.a, link.b
                adds.append(f"link add name {ia} netns {ns_of[na]} mtu {link.mtu} up "
                            f"type veth peer name {ib} netns {ns_of[nb]} mtu {link.mtu}")
                peers_up.setdefault(ns_of[nb], []).append(f"link set {ib} up")
            with signals_deferred():
                ip_batch({None: adds}, what=f"lab {clab.name}: creating {len(adds)} veth pairs")
                ip_batch(peers_up, what=f"lab {clab.name}: setting the veth peers up")
            if plan is not None:  # the one-machine proof: hosts, underlay, VXLAN cut links
                from railab.testbed import stitch as stitch_mod

                with signals_deferred():
                    stitch_mod.build(plan, fds)
                for t in plan.tunnels:
                    with entered(record.namespaces[t.node]):
                        set_link_up(t.interface)
            timings["links_s"] = round(time.monotonic() - t1, 3)

            # 3. per-interface sysctls, now that interfaces exist.
            for name, later in deferred.items():
                if not later:
                    continue
                with entered(record.namespaces[name]):
                    for key, value in later.items():
                        if not _write_sysctl(key, value):
                            raise RailabError(f"{clab.path.name}: node {name}: sysctl {key} does not exist")

            # 4. server NICs: address, per-NIC table default route, source rule (lab.json,
            # numbering and priorities from railab.topologies.routing).
            t2 = time.monotonic()
            ends = {(n, i) for ln in clab.links for n, i in (ln.a, ln.b)}
            nic_lines: dict[str | None, list[str]] = {}
            for nic in spec.nics:
                if nic.server not in fds:
                    raise RailabError(f"lab.json NIC {nic.server}:{nic.interface} names a node absent from "
                                      f"{clab.path.name}")
                if (nic.server, nic.interface) not in ends:
                    raise RailabError(f"lab.json NIC {nic.server}:{nic.interface} has no link in {clab.path.name}")
                addr, plen = str(nic.address.ip), nic.address.network.prefixlen
                nic_lines.setdefault(ns_of[nic.server], []).extend([
                    f"address add {addr}/{plen} dev {nic.interface}",
                    f"route add default via {nic.gateway} dev {nic.interface} table {nic.table}",
                    f"rule add from {addr}/32 table {nic.table} priority {routing.rule_priority(nic.nic)}",
                ])
            with signals_deferred():
                ip_batch(nic_lines, what=f"lab {clab.name}: addressing the server NICs")
            timings["servers_s"] = round(time.monotonic() - t2, 3)

            # 4b. lab.capacity: egress queues on every link end, ECN tables on the switches
            # (railab.testbed.capacity); they live in the namespaces and go with them.
            from railab.testbed import capacity

            if capacity.enabled(spec):
                t_cap = time.monotonic()
                capacity.apply(spec, record.namespaces.__getitem__)
                timings["capacity_s"] = round(time.monotonic() - t_cap, 3)
        finally:
            for fd in fds.values():
                os.close(fd)

        # 5. FRR: each daemon wave in parallel across nodes, then push the configs.
        t3 = time.monotonic()
        if plan is not None:
            from railab.testbed import stitch as stitch_mod

            clab = stitch_mod.with_cut_links(plan)
        self._start_frr(clab, record)
        timings["frr_s"] = round(time.monotonic() - t3, 3)
        timings["build_s"] = round(time.monotonic() - t0, 3)
        record.phase = "started"
        st.save(record)

