"""Preflight phase of ``up``: the lab file and model, the checks before anything is made, the
host limits, and the first state record.

Imported by railab.testbed.runtime.netns.deploy (``NetnsDeployer.up``, with :mod:`.build`), never
by the commands on a running lab: this module and ``build`` load the lab model
(railab.topologies.labspec), ``lab.capacity`` with the PFC plan (railab.testbed.capacity) and the
stitch (railab.testbed.stitch), ~125 M instructions (~20 ms) that ``down``, ``exec`` and
``inspect`` do not pay (docs/architecture.md, "Imports")."""

from __future__ import annotations

import shutil
from pathlib import Path

from railab.errors import RailabError, UsageError
from railab.testbed import capacity
from railab.testbed import state as st
from railab.testbed import stitch as stitch_mod
from railab.testbed.clabfile import ClabFile, load_clab
from railab.testbed.namespaces import netns_path
from railab.testbed.runtime.netns import NetnsRuntime
from railab.testbed.runtime.netns.constants import FRR_BIN
from railab.testbed.runtime.netns.host import check_memory, check_prerequisites, raise_nofile
from railab.testbed.runtime.netns.ipv6 import ra_gate_wanted
from railab.testbed.runtime.netns.ribhold import hold_ms
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import is_lab_name, lab_name_rule, netns_name


def load(labdir: Path, stitch: bool) -> tuple[ClabFile, stitch_mod.StitchPlan | None, LabSpec]:
    """``up``'s checks before anything is made: the lab file (and its stitch plan), root and FRR,
    node kinds, the lab name, lab.json, nft for lab.capacity, RAILAB_RA_GATE, name clashes.
    Returns ``(clab, stitch plan or None, spec)``; raises UsageError/RailabError as ``up``
    documents."""
    clab = load_clab(labdir)  # bad input (UsageError, exit 2) before the host's prerequisites
    plan = stitch_mod.stitch_plan(labdir) if stitch else None
    if plan is not None:
        clab = plan.clab
    if clab.external_links:
        x = clab.external_links[0]
        raise UsageError(f"lab {clab.name}: {len(clab.external_links)} {x.type} link(s) ({x.endpoint[0]}:"
                         f"{x.endpoint[1]} ...): the netns runtime makes veth pairs only; "
                         f"use --runtime containerlab (for one host of a partitioned lab: "
                         f"--host HOST), or deploy every host of the partition on this "
                         f"machine with railab up LABDIR --stitch")
    check_prerequisites()
    lab = clab.name
    foreign = sorted(n.name for n in clab.nodes.values() if n.kind != "linux")
    if foreign:
        kinds = sorted({clab.nodes[n].kind for n in foreign})
        raise RailabError(
            f"lab {lab}: {len(foreign)} node(s) of kind {', '.join(kinds)} ({', '.join(foreign[:4])}"
            f"{', ...' if len(foreign) > 4 else ''}) need their own images: the netns runtime runs "
            f"FRR on `linux` nodes only. Use --runtime containerlab, or set `kind: frr` in the intent's lab:"
        )
    if not is_lab_name(lab):
        raise RailabError(lab_name_rule(lab, "lab"))
    try:
        spec = LabSpec.load(clab.directory)
    except FileNotFoundError as exc:
        raise RailabError(str(exc)) from None
    if spec.name != lab:
        raise RailabError(f"{clab.path.name} names lab {lab!r} but lab.json names {spec.name!r}")
    if capacity.enabled(spec) and shutil.which("nft") is None:
        raise RailabError(f"lab {lab} has lab.capacity (ECN marking, PFC counters in nftables "
                          f"tables) but nft is not installed: apt-get install nftables")
    ra_gate_wanted()  # a misspelt RAILAB_RA_GATE is refused before anything is made
    hold_ms()  # and so is a misspelt RAILAB_RIB_HOLD_MS
    if st.lab_dir(lab).exists():
        raise UsageError(st.already_up(lab))
    extra_ns = plan.namespaces if plan is not None else []
    clash = [ns for ns in [netns_name(lab, n) for n in clab.nodes] + extra_ns if netns_path(ns).exists()]
    if clash:
        owner = st.ledger().get(clash[0])
        whose = f"it belongs to lab {owner}" if owner else "railab did not make it"
        raise UsageError(
            f"namespace {clash[0]} already exists ({whose}): give this lab another name "
            f"(railab up INTENT --name NEW, or railab generate INTENT --name NEW)"
        )
    return clab, plan, spec


def host(rt: NetnsRuntime, clab: ClabFile, spec: LabSpec) -> dict[str, tuple[int, int]]:
    """The host preflight (``up``'s ``preflight`` phase): memory, file limits, FRR's dry run of
    every config (``rt._dry_run``), every daemon installed. Returns the host limits raised."""
    check_memory(spec)
    limits = raise_nofile(len(clab.nodes))
    rt._dry_run(clab)
    missing = sorted({d for n in clab.routers for d in n.daemons if not (FRR_BIN / d).exists()})
    if missing:
        raise RailabError(f"lab {clab.name}: FRR daemon {', '.join(missing)} not installed in {FRR_BIN}")
    return limits


def new_record(rt: NetnsRuntime, clab: ClabFile, plan: stitch_mod.StitchPlan | None,
               limits: dict, timings: dict[str, float]) -> st.LabState:
    """The state record ``up`` saves first (phase ``creating``)."""
    lab = clab.name
    record = st.LabState(
        lab=lab,
        runtime=rt.name,
        phase="creating",
        labdir=str(clab.directory),
        clab_file=str(clab.path),
        namespaces={n: netns_name(lab, n) for n in clab.nodes},
        links=[(f"{lk.a[0]}:{lk.a[1]}", f"{lk.b[0]}:{lk.b[1]}", lk.mtu) for lk in clab.links],
        routers={
            n.name: st.RouterState(dir=str(st.node_dir(lab, n.name)), config=str(n.frr_conf),
                                   daemons=list(n.daemons))
            for n in clab.routers
        },
        host_limits=limits,
        timings=dict(timings),
    )
    if plan is not None:
        record.stitch = plan.record()
    return record
