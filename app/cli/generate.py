"""``railab generate INTENT [-o/--out DIR] [--name NAME] [--cabling FILE.csv] [--hosts N]``: emit
a lab directory (topologies.generator).

Writes ``<lab>.clab.yml``, ``lab.json`` and ``configs/<switch>/...`` (docs/architecture.md,
docs/generator.md); ``--cabling`` also writes the lab's cabling plan (one row per cable,
:mod:`railab.topologies.cabling`, the rows the cabling check audits). The production plan's and
the lab's warnings (lab.json ``warnings``) are printed after the summary line. ``--list`` shows
the shipped intents. A bad intent prints one ``error: <key>: ...`` line on stderr and exits 2,
as does an output directory that cannot be written; other failures exit 1.

``--hosts N`` (or ``--hosts name=address,...``) also partitions the lab over hosts
(:mod:`railab.topologies.partition`): ``DIR/partition.json``, ``DIR/<host>/<lab>.clab.yml`` per
host (cut leaf-spine links as containerlab ``vxlan`` links) and ``DIR/<lab>.clabernetes.yaml``
(:mod:`railab.topologies.clabernetes`); the partition is built and validated before anything is
written, so a lab that cannot be split leaves no directory behind (docs/scale-out.md).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from railab.errors import EXIT_FAILED, EXIT_USAGE
from railab.testbed.state import running_lab_in

#: ``--underlay-pool`` default: railab.topologies.partition.UNDERLAY_POOL (a string: the CLI stays
#: lazy about importing the partition module)
_DEFAULT_POOL = "10.253.0.0/24"


def register(app: typer.Typer) -> None:
    """Attach ``generate`` to ``app``."""

    @app.command("generate")
    def generate_cmd(
        intent: str | None = typer.Argument(
            None, help="shipped intent name (e.g. mini, rail-only-512) or an intent YAML path"
        ),
        outdir: Path | None = typer.Option(
            None, "--out", "-o", "--outdir", help="lab directory to write (default: ./labs/<lab name>)"
        ),
        name: str | None = typer.Option(None, "--name", help="override the lab name"),
        list_: bool = typer.Option(False, "--list", help="list the shipped intents and exit"),
        frr_check: bool = typer.Option(
            False, "--check", help="also run FRR's dry-run parser on every frr.conf"
        ),
        cabling: Path | None = typer.Option(
            None, "--cabling", metavar="FILE.csv",
            help="also write the lab's cabling plan (one row per cable: kind, both ends' node, "
            "ethK port, production cage/sub-port and SONiC name, rail, group)",
        ),
        sonic_yang: Path | None = typer.Option(
            None, "--sonic-yang", metavar="DIR",
            help="validate every config_db.json against the SONiC YANG models in DIR "
                 "(sonic-buildimage src/sonic-yang-models/yang-models, rendered; needs libyang)"),
        hosts: str | None = typer.Option(
            None, "--hosts", metavar="N|NAME=ADDR,...",
            help="also partition the lab over N hosts (host1..hostN, underlay addresses from "
                 "--underlay-pool) or the named hosts: DIR/<host>/<lab>.clab.yml with vxlan links, "
                 "DIR/<lab>.clabernetes.yaml, DIR/partition.json (docs/scale-out.md)"),
        underlay_pool: str = typer.Option(
            _DEFAULT_POOL, "--underlay-pool", metavar="CIDR",
            help="with --hosts N: host k's underlay address is the pool's k-th address"),
    ) -> None:
        """Generate a lab (containerlab topology, FRR/SONiC configs, lab.json) from an intent."""
        from railab.topologies.cabling import CablingError, lab_cables, spec_breakouts, write_csv
        from railab.topologies.frr import dry_run
        from railab.topologies.generator import OutputError, generate
        from railab.topologies.intent import IntentError, load_intent, resolve_lab, shipped_intents
        from railab.topologies.labspec import LabSpec
        from railab.topologies.partition import PartitionError

        con = Console()
        if list_:
            names = shipped_intents()
            t = Table()
            # names are what the user types next: never cut them (the other columns wrap)
            t.add_column("intent", no_wrap=True, min_width=max(map(len, names), default=6))
            t.add_column("architecture", overflow="fold")
            t.add_column("design", overflow="fold")
            t.add_column("lab", overflow="fold")
            for n in names:
                it = load_intent(n)
                s = resolve_lab(it)
                tiers = (f"{s.pods} pods, {s.spines}/pod spines, {s.superspines} super-spines"
                         if s.three_tier else f"{s.spines} spines")
                t.add_row(
                    n, it.design.architecture, f"{it.design.gpus} GPUs, {it.design.leaf}",
                    f"{s.scale}: {s.groups}g x {s.rails}r, {tiers}, "
                    f"{s.servers} servers, {s.kind}",
                )
            con.print(t)
            return
        if intent is None:
            typer.echo("error: give an INTENT (or --list)", err=True)
            raise typer.Exit(EXIT_USAGE)
        try:
            it = load_intent(intent)
            out = outdir if outdir is not None else Path("labs") / (name or it.name)
            holder = running_lab_in(out)
            if holder:
                typer.echo(f"error: {out} holds running lab {holder}: railab down {holder} first, "
                           f"or generate into another -o", err=True)
                raise typer.Exit(EXIT_USAGE)
            part = None
            if underlay_pool != _DEFAULT_POOL and (hosts is None or not hosts.strip().isdigit()):
                raise PartitionError(f"--underlay-pool {underlay_pool} applies to --hosts N (a count); "
                                     f"named hosts carry their own addresses (--hosts NAME=ADDR,...)"
                                     if hosts is not None else
                                     f"--underlay-pool {underlay_pool} applies to --hosts N: add --hosts")
            if hosts is not None:  # the partition is built and validated before anything is written
                from railab.topologies.partition import generate_hosts, parse_hosts

                try:
                    pool = ipaddress.ip_network(underlay_pool)
                except ValueError as exc:
                    raise PartitionError(f"--underlay-pool {underlay_pool}: {exc}") from None
                labdir, part = generate_hosts(it, out, parse_hosts(hosts, pool=pool), name=name)
            else:
                labdir = generate(it, out, name=name)
        except (IntentError, OutputError, PartitionError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        spec = LabSpec.load(labdir)
        roles = {r: len(spec.by_role(r)) for r in ("superspine", "spine", "leaf", "server")}
        supers = (f"{roles['superspine']} super-spines, {spec.pods} pods, "
                  if roles["superspine"] else "")
        con.print(
            f"[bold]{spec.name}[/]: {spec.architecture}, {supers}{roles['spine']} spines, "
            f"{roles['leaf']} leaves, {roles['server']} servers x {spec.rails} NICs, "
            f"{len(spec.links)} links, {len(spec.bgp_sessions)} BGP sessions -> {labdir}"
        )
        for w in spec.warnings:
            con.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)
        if part is not None:
            for h in part.hosts:
                con.print(f"{h.name} ({h.underlay}): {len(part.nodes_of(h.name))} nodes -> "
                          f"{labdir / h.name / (spec.name + '.clab.yml')}", highlight=False)
            con.print(f"{len(part.cut)} leaf-spine links cut as vxlan (VNI {part.cut[0].vni}.."
                      f"{part.cut[-1].vni}, UDP {part.dst_port}); the underlay between hosts must "
                      f"carry MTU {part.underlay_mtu}; Clabernetes: {labdir / (spec.name + '.clabernetes.yaml')}"
                      if part.cut else "1 host: nothing cut", highlight=False)
            from railab.topologies.clabernetes import tunnel_clashes
            from railab.topologies.yamlio import load_yaml

            clashes = tunnel_clashes(load_yaml((labdir / f"{spec.name}.clab.yml").read_text()))
            if clashes:
                a, b = clashes[0]
                con.print(f"note: Clabernetes makes {len(clashes)} tunnel names that are prefixes of "
                          f"others ({a} / {b}): use a Clabernetes newer than v0.4.1, which deletes "
                          f"tunnels by exact name (clabernetes#252; docs/scale-out.md)", highlight=False)
        if cabling is not None:
            try:
                write_csv(cabling, lab_cables(spec), spec_breakouts(spec))
            except CablingError as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(EXIT_USAGE) from None
            con.print(f"cabling plan: {len(spec.links)} cables -> {cabling}", highlight=False)
        if sonic_yang is not None:
            from railab.topologies.sonic_yang import SonicYangError, load_models, validate_lab

            try:
                load_models(str(sonic_yang))
            except SonicYangError as exc:
                typer.echo(f"error: --sonic-yang: {exc}", err=True)
                raise typer.Exit(EXIT_USAGE) from None
            try:
                n = validate_lab(labdir, sonic_yang)
            except SonicYangError as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(EXIT_FAILED) from None
            con.print(f"SONiC YANG: {n} config_db.json files valid against {sonic_yang}")
        if frr_check:
            bad = []
            for conf in sorted(labdir.glob("configs/*/frr.conf")):
                ok, outp = dry_run(conf)
                if not ok:
                    bad.append(f"{conf}: {outp}")
            if bad:
                typer.echo("error: FRR rejects: " + "; ".join(bad), err=True)
                raise typer.Exit(EXIT_FAILED)
            con.print(f"FRR dry-run: {len(list(labdir.glob('configs/*/frr.conf')))} configs OK")
