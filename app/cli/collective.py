"""``railab collective LAB all-reduce|all-to-all --bytes N [--pxn] [--json]``: an NCCL-style
collective over the lab's GPUs, every network flow at once, reported as nccl-tests does (time,
algbw, busbw), in lab units and converted to fabric time with the lab's time scale.

On a lab with ``lab.capacity`` the run happens inside the capacity dataplane's switch agent
(:func:`railab.testbed.capacity.pfc_session`): ECN marks from the real queue depths always, the
PFC emulation when ``--pfc on`` (default: the intent's ``lab.capacity.pfc``), as ``railab
traffic`` load runs do; ``railab ecmp`` runs inside it too, with the intent's setting.

Exit codes: 0 when the collective completed, or when the design makes part of it unreachable
(Rail-only inter-rail without PXN: said in words and in ``unreachable_by_design``), or when
packets were lost on a lab whose configuration predicts drops (ports shaped, PFC off: a measured
result, ``completed`` false); 1 when packets were lost where the lab promises lossless (PFC on,
or unshaped ports), a flow the design says is unreachable delivered, or the engine could not
keep its rate (the host delayed a flow by more than 10 % of its time: ``keeps_rate`` false); 2 for
bad options.
"""

from __future__ import annotations

import json
import re
from contextlib import nullcontext

import typer
from rich.console import Console
from rich.table import Table

from railab.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, report_interrupted

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """``4096``, ``64K``, ``1M``, ``2G`` (nccl-tests' suffixes: powers of 1024) -> bytes.
    Raises ValueError naming the accepted forms."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"--bytes {text!r}: write a byte count such as 1048576, 64K, 1M or 1G")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m[2].upper()]
    return int(m[1]) * mult


def _usage(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _fmt(v, nd: int = 3) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def lossless_promised(spec, pfc: bool | None = None) -> bool:
    """Whether the lab promises no loss for a collective: unshaped ports (nothing can queue or
    drop) or shaped ports with the PFC emulation on (``pfc`` overrides the intent's setting)."""
    cap = spec.qos.capacity
    return (not cap.enabled) or (cap.pfc if pfc is None else pfc)


def pfc_choice(spec, pfc: str | None) -> bool:
    """``--pfc on|off|None`` -> whether the run's switch agent runs the PFC emulation: the
    intent's ``lab.capacity.pfc`` when None, never on a lab without ``lab.capacity``. Raises
    ValueError for another word, or for ``on`` on a lab without ``lab.capacity`` (no queues
    to pause), naming what to change."""
    if pfc is not None and pfc not in ("on", "off"):
        raise ValueError(f"--pfc must be on or off (got {pfc!r})")
    cap = spec.qos.capacity
    if not cap.enabled:
        if pfc == "on":
            raise ValueError(f"--pfc on: lab {spec.name} has no lab.capacity (no queues to "
                             "pause); use an intent with lab.capacity (e.g. mini-lossless) or "
                             "drop --pfc")
        return False
    return cap.pfc if pfc is None else pfc == "on"


def switch_agent(spec, netns_of, pfc_on: bool):
    """The context a collective or ECMP run happens in: on a lab with ``lab.capacity`` the
    switch agent (:func:`railab.testbed.capacity.pfc_session`, ECN always, PFC when
    ``pfc_on``), which stops when the block ends (Ctrl-C included); nothing otherwise."""
    if not spec.qos.capacity.enabled:
        return nullcontext()
    from railab.testbed.capacity import pfc_session

    return pfc_session(spec, netns_of, enabled=pfc_on)


def queue_totals(spec, netns_of):
    """Start reading the shaped ports' counters for a run inside :func:`switch_agent`: returns
    a function that, called at the run's end, gives the totals over the run
    (:func:`railab.testbed.capacity.totals` of the deltas: ``dropped``, ``lossless_dropped``,
    ``ce_marked``, ``pause_events``, ``resume_events`` integers, ``paused_s`` lab seconds);
    that function returns None on a lab without ``lab.capacity``."""
    if not spec.qos.capacity.enabled:
        return lambda: None
    from railab.testbed import capacity as cap
    from railab.testbed.state import lab_dir

    run_dir = lab_dir(spec.name)
    before = cap.port_counters(spec, netns_of, run_dir=run_dir)

    def end() -> dict:
        t = cap.totals(cap.delta(before, cap.port_counters(spec, netns_of, run_dir=run_dir)))
        return {k: (round(v, 6) if k == "paused_s" else int(v)) for k, v in t.items()}

    return end


def collective_failed(results: list, promised: bool, queue_drops: int = 0) -> bool:
    """The exit-1 rule of ``railab collective`` over its runs (module docstring): a run that
    contradicts the design (``CollectiveResult.ok`` false), lost packets or port queue drops
    (``queue_drops``, the lossless class's over the runs) where the lab promises lossless
    (``promised``, :func:`lossless_promised`: PFC on), or an engine that did not keep its rate.
    Drops on a lab that predicts them (PFC off) are a measured result."""
    if promised and queue_drops > 0:
        return True
    return any((not r.ok) or (r.lost and promised) or not r.keeps_rate for r in results)


def register(app: typer.Typer) -> None:
    """Attach ``collective`` to ``app``."""

    @app.command()
    def collective(
        lab: str = typer.Argument(..., help="running lab name or lab directory"),
        op: str = typer.Argument(..., help="all-reduce | all-to-all"),
        nbytes: str = typer.Option("1M", "--bytes", "-b",
                                   help="bytes per rank, as nccl-tests (-b): 1048576, 64K, 1M, 1G"),
        pxn: bool = typer.Option(False, "--pxn",
                                 help="NCCL PXN: inter-rail data crosses NVLink first, then stays on the rail"),
        qps: int = typer.Option(1, "--qps", help="QPs per connection (NCCL_IB_QPS_PER_CONNECTION), 1-64"),
        sport: str = typer.Option("per-qp", "--sport",
                                  help="UDP source port per QP: per-qp (Linux rdma_get_udp_sport) | "
                                       "fixed (one port: the low-entropy case)"),
        compare_sport: bool = typer.Option(
            False, "--compare-sport",
            help="run twice, per-qp then fixed source ports, and report the slowdown the "
                 "hash collisions cause"),
        hash_policy: str | None = typer.Option(
            None, "--hash", help="switches' ECMP hash for the run: l3 | l4 (default: the lab's, l4)"),
        seed: int = typer.Option(0x7261696C, "--seed",
                                 help="fib_multipath_hash_seed on every switch for the run (deterministic)"),
        pfc: str | None = typer.Option(
            None, "--pfc", help="PFC emulation on | off for the run (default: the intent's "
            "lab.capacity.pfc; labs without lab.capacity have no queues to pause)"),
        cc: str = typer.Option(
            "dcqcn", "--cc", help="congestion control of the QPs on a lab with port capacity: "
            "dcqcn (the lab's qos.dcqcn) | none (every QP at its share of its NIC)"),
        nic: str = typer.Option(
            "none", "--nic", help="the NICs' RC transport on a lab with port capacity: none "
            "(every packet sent once) | gbn (go-back-N) | ooo (out-of-order placement, "
            "selective repeat)"),
        port_rate: str = typer.Option(
            "auto", "--port-rate", help="lab port rate for the run on a lab with port capacity: "
            "auto (the fastest at which this host keeps every NIC at line rate: the ports are "
            "slowed for the run, time dilation) | lab (the lab's own) | Mb/s (at most the lab's)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    ) -> None:
        """Run an NCCL-style collective over every GPU of the lab and report time, algbw and
        busbw the way nccl-tests does (lab units and fabric units), with the line-rate bound
        beside them on a lab with port capacity."""
        from railab.errors import RailabError
        from railab.testbed.dilation import dilated
        from railab.testbed.labref import resolve
        from railab.traffic.collective import OPS, run_collective, run_rate_mbps, schedule, slowdown
        from railab.traffic.ecmp import HASH_POLICIES, SPORT_MODES
        from railab.traffic.engine import sigint_event

        if op not in OPS:
            _usage(f"collective must be one of {', '.join(OPS)} (got {op!r})")
        if cc not in ("dcqcn", "none"):
            _usage(f"--cc must be dcqcn or none (got {cc!r})"
                   + ("; dcqcn-ns3 (ns-3's DCQCN rules) is for railab traffic's incast, beside "
                      "ns-3's stored runs" if cc == "dcqcn-ns3" else ""))
        if nic not in ("none", "gbn", "ooo"):
            _usage(f"--nic must be none, gbn or ooo (got {nic!r})")
        if sport not in SPORT_MODES:
            _usage(f"--sport must be one of {', '.join(SPORT_MODES)} (got {sport!r})")
        if hash_policy is not None and hash_policy not in HASH_POLICIES:
            _usage(f"--hash must be one of {', '.join(HASH_POLICIES)} (got {hash_policy!r})")
        if not 0 <= seed < 2 ** 32:
            _usage(f"--seed must be 0..{2 ** 32 - 1} (got {seed})")
        if not 1 <= qps <= 64:
            _usage(f"--qps must be 1-64 QPs per connection (got {qps})")
        if pfc is not None and pfc not in ("on", "off"):
            _usage(f"--pfc must be on or off (got {pfc!r})")
        try:
            size = parse_bytes(nbytes)
        except ValueError as exc:
            _usage(str(exc))
        try:
            ref = resolve(lab)
            spec = ref.spec()
            try:
                sched = schedule(spec, op, size, pxn=pxn, qps=qps)
                pfc_on = pfc_choice(spec, pfc)
                rate = run_rate_mbps(spec, sched, port_rate) if spec.qos.capacity.enabled else None
            except (RailabError, ValueError) as exc:
                _usage(str(exc))
            runs = [sport] if not compare_sport else ["per-qp", "fixed"]
            results = {}
            # the ports slowed for the run (time dilation) before the switch agent starts, so
            # the agent, the QPs and the figures all run at the run's rate and time scale
            with sigint_event() as stop, \
                    (dilated(spec, ref.netns_of, rate) if rate else nullcontext(spec)) as run_spec, \
                    switch_agent(run_spec, ref.netns_of, pfc_on):
                queues_end = queue_totals(run_spec, ref.netns_of)
                for mode in runs:
                    results[mode] = run_collective(run_spec, ref.netns_of, sched, sport_mode=mode,
                                                   policy=hash_policy, seed=seed, stop=stop,
                                                   pfc=pfc_on, cc=cc, nic=nic, port_rate="lab")
                    if rate:
                        results[mode].lab_port_rate_mbps = spec.qos.capacity.port_rate_mbps
                queues = queues_end()
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            report_interrupted()
            raise typer.Exit(EXIT_INTERRUPTED) from None
        main = results[runs[0]]
        promised = lossless_promised(spec, pfc_on)
        failed = collective_failed(list(results.values()), promised,
                                   (queues or {}).get("lossless_dropped", 0))
        out = main.to_dict()
        out["lab"] = spec.name
        out["pfc"] = "on" if pfc_on else "off"
        out["queues"] = queues  # switch/NIC port totals over all runs; None: ports not shaped
        out["lossless_promised"] = promised
        if compare_sport:
            fixed = results["fixed"]
            sd = slowdown(main, fixed)
            out["compare_sport"] = {"fixed": fixed.to_dict(),
                                    "slowdown": None if sd is None else round(sd, 3)}
        if as_json:
            print(json.dumps(out, indent=2, sort_keys=True))
        else:
            _show(spec, results, promised, pfc_on, queues)
        if failed:
            raise typer.Exit(EXIT_FAILED)


def register_ecmp(app: typer.Typer) -> None:
    """Attach ``ecmp`` to ``app``."""

    @app.command()
    def ecmp(
        lab: str = typer.Argument(..., help="running lab name or lab directory"),
        src: str = typer.Argument(..., help="source GPU, e.g. srv1:gpu0 (or srv1:nic1)"),
        dst: str = typer.Argument(..., help="destination GPU on another leaf, e.g. srv9:gpu0"),
        qps: int = typer.Option(16, "--qps", help="QPs of the connection (1-256), each its own flow"),
        nbytes: str = typer.Option("256K", "--bytes", "-b", help="bytes per QP: 65536, 256K, 1M"),
        sport: str = typer.Option("both", "--sport",
                                  help="per-qp | fixed | both (run each, compare)"),
        hash_policy: str | None = typer.Option(
            None, "--hash", help="switches' ECMP hash for the run: l3 | l4 (default: the lab's)"),
        seed: int = typer.Option(0x7261696C, "--seed", help="fib_multipath_hash_seed for the run"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    ) -> None:
        """ECMP under load: QPs of one connection across the spines, per-uplink byte load (port
        counters, net of BGP/BFD background), with per-QP or fixed UDP source ports.

        Exits 1 when packets were lost where the lab promises lossless; 0 otherwise, whatever
        the spread (the spread is the measurement)."""
        from railab.testbed.labref import resolve
        from railab.traffic import ecmp as E
        from railab.traffic.engine import sigint_event
        from railab.traffic.patterns import Flow, PatternError, parse_endpoint, route

        modes = list(E.SPORT_MODES) if sport == "both" else [sport]
        if sport != "both" and sport not in E.SPORT_MODES:
            _usage(f"--sport must be per-qp, fixed or both (got {sport!r})")
        if hash_policy is not None and hash_policy not in E.HASH_POLICIES:
            _usage(f"--hash must be one of {', '.join(E.HASH_POLICIES)} (got {hash_policy!r})")
        if not 1 <= qps <= 256:
            _usage(f"--qps must be 1-256 (got {qps})")
        if not 0 <= seed < 2 ** 32:
            _usage(f"--seed must be 0..{2 ** 32 - 1} (got {seed})")
        try:
            size = parse_bytes(nbytes)
        except ValueError as exc:
            _usage(str(exc))
        try:
            ref = resolve(lab)
            spec = ref.spec()
            try:
                a, b = parse_endpoint(spec, src), parse_endpoint(spec, dst)
            except PatternError as exc:
                _usage(str(exc))
            base = [route(spec, Flow(a, b, qp=q, mtu=4096)) for q in range(qps)]
            if base[0].expected_hops in (None, 0, 1):
                _usage(f"{src} -> {dst} does not cross the spines "
                       f"({'unreachable' if base[0].expected_hops is None else 'same leaf'}): "
                       "pick a destination on another leaf (e.g. another group, same rail)")
            flows = [E.size_flow(f, size) for f in base]
            cap = spec.qos.capacity
            flows = E.pace(flows, cap.port_rate_mbps if cap.enabled else 400.0)
            runs = {}
            pfc_on = pfc_choice(spec, None)
            with sigint_event() as stop, switch_agent(spec, ref.netns_of, pfc_on):
                for mode in modes:
                    runs[mode] = E.run_ecmp(spec, ref.netns_of, flows, sport_mode=mode,
                                            policy=hash_policy, seed=seed, stop=stop)
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            report_interrupted()
            raise typer.Exit(EXIT_INTERRUPTED) from None
        leaf = spec.nic(base[0].src[0], base[0].src_nic).leaf
        out = {"lab": spec.name, "src": src, "dst": dst, "qps": qps, "bytes_per_qp": size,
               "leaf": leaf, "runs": {m: r.to_dict() for m, r in runs.items()}}
        if as_json:
            print(json.dumps(out, indent=2, sort_keys=True))
        else:
            con = Console() if Console().is_terminal else Console(width=160)
            t = Table(title=f"{spec.name}: {qps} QPs {src} -> {dst}, uplinks of {leaf}",
                      title_justify="left")
            t.add_column("uplink")
            for m in runs:
                t.add_column(f"{m} share", justify="right")
            names = list(E.uplinks(spec)[leaf])
            for u in names:
                t.add_row(u.name, *[f"{runs[m].load.leaves[leaf].share.get(u.name, 0):.2f}"
                                    if leaf in runs[m].load.leaves else "-" for m in runs])
            con.print(t)
            for m, r in runs.items():
                ll = r.load.leaves.get(leaf)
                if ll:
                    con.print(f"{m}: busiest uplink {ll.max_share_ratio:.2f}x the fair share "
                              f"1/{ll.uplink_count}, max/mean {ll.imbalance:.2f}; lost {r.lost}",
                              highlight=False)
        if any(r.lost for r in runs.values()) and lossless_promised(spec, pfc_on):
            raise typer.Exit(EXIT_FAILED)


def _show(spec, results: dict, promised: bool, pfc_on: bool = False,
          queues: dict | None = None) -> None:
    from railab.traffic.collective import slowdown

    con = Console() if Console().is_terminal else Console(width=160)
    first = next(iter(results.values()))
    s = first.schedule
    cap = spec.qos.capacity
    rate = first.port_rate_mbps or cap.port_rate_mbps
    own = first.lab_port_rate_mbps or cap.port_rate_mbps
    scale = first.time_scale or cap.time_scale
    slowed = (f" (the lab's {own:g} Mb/s slowed for this run so the host keeps every NIC at "
              f"line rate: time dilation, --port-rate)" if cap.enabled and rate < own else "")
    unit = (f"lab ports {rate:g} Mb/s{slowed}, time scale {scale:g} "
            f"(fabric {cap.fabric_rate_gbps} Gb/s), PFC {'on' if pfc_on else 'off'}" if cap.enabled else
            "ports not shaped: times are the engine's, no fabric conversion")
    t = Table(title=f"{spec.name}: {s.op}{' (PXN)' if s.pxn else ''}, {s.bytes_per_rank} B per "
              f"rank, {s.ranks} ranks, {len(s.flows)} network flows", title_justify="left")
    for col in ("sport", "time (lab s)", "algbw (lab Gb/s)", "busbw (lab Gb/s)",
                "time (fabric us)", "algbw (fabric Gb/s)", "busbw (fabric Gb/s)", "lost",
                "uplink imbalance"):
        t.add_column(col, justify="right")
    for mode, r in results.items():
        fab = r.fabric or {}
        w = r.uplink_load.worst if r.uplink_load else None
        t.add_row(mode, _fmt(r.time_s, 4), _fmt(r.algbw_gbps, 4), _fmt(r.busbw_gbps, 4),
                  _fmt(fab.get("time_us"), 1), _fmt(fab.get("algbw_gbps"), 1),
                  _fmt(fab.get("busbw_gbps"), 1), str(r.lost),
                  f"{w.imbalance:.2f} of {w.uplink_count}" if w else "-")
    con.print(t)
    con.print(unit, highlight=False)
    if first.bound and first.bound.get("busbw_gbps"):
        b = first.bound
        con.print(f"line-rate bound (every NIC at the port rate, computed): busbw "
                  f"{b['busbw_gbps']:.4f} lab Gb/s, time {b['time_s']:.4f} lab s; measured "
                  + ", ".join(f"{m} {r.busbw_gbps / b['busbw_gbps']:.0%} of it"
                              for m, r in results.items() if r.busbw_gbps), highlight=False)
        con.print(f"engine: {first.engine} ({first.engine_pps:,.0f} data packets per lab s), "
                  f"QPs under {first.cc}", highlight=False)
    for mode, r in results.items():
        if r.transport:
            tr = r.transport
            con.print(f"{mode}: RC transport {tr['nic']}: {tr['retx_packets']} packets "
                      f"retransmitted ({tr['retx_bytes']:,} B), {tr['naks']} NAKs, "
                      f"{tr['timeouts']} timeouts; FCT p50 {tr['fct_p50_s']} s, p99 "
                      f"{tr['fct_p99_s']} s (lab)", highlight=False)
    if queues:
        con.print(f"ports over the run: {queues['dropped']} dropped, {queues['ce_marked']} "
                  f"CE-marked, {queues['pause_events']} PAUSEs", highlight=False)
    for note in s.notes:
        con.print(f"  {note}", highlight=False)
    if first.unreachable_by_design:
        con.print(f"[yellow]unreachable by design:[/yellow] {len(s.unreachable)} of {len(s.flows)} "
                  f"network flows ({spec.architecture} without PXN: inter-rail pairs on different "
                  "leaves); run with --pxn", highlight=False)
    for mode, r in results.items():
        if r.lost:
            why = ("the lab promises lossless: a failure" if promised else
                   "PFC off: drops under congestion are what this configuration predicts")
            con.print(f"[red]{mode}: lost {r.lost} packets[/red] ({why}); the collective did "
                      "not complete", highlight=False)
    for mode, r in results.items():
        if not r.keeps_rate:
            con.print(f"[red]{mode}: the engine did not keep its rate[/red] (the host delayed "
                      f"a flow by {r.sender_lag:.0%} of its time: the host's CPU, not the fabric, "
                      "set the time; run on a quieter machine, with a lower --port-rate or a smaller --bytes/lab)",
                      highlight=False)
    if "fixed" in results and "per-qp" in results:
        sd = slowdown(results["per-qp"], results["fixed"])
        con.print(f"hash collisions (fixed source port vs per-QP): slowdown "
                  f"{'-' if sd is None else f'{sd:.2f}x'}", highlight=False)
