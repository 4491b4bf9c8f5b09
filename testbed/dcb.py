"""``dcb pfc`` for the emulated ports of a lab with ``lab.capacity`` (``railab exec LAB NODE --
dcb pfc show dev eth1``): the PFC configuration of railab's ports, as iproute2's ``dcb`` shows
and sets a NIC's (``dcb-pfc(8)``).

veths have no DCB: the system's ``dcb`` answers them with "Operation not supported". railab's
PFC is an emulation (:mod:`railab.testbed.pfc`) with one lossless class, on the lab's
``qos.roce_tc`` priority; a port whose PFC is on another priority is listed in the lab's
:data:`railab.testbed.pfc.PFC_PRIORITY_FILE` (the ``pfc-priority`` fault, and this tool) and
neither sends nor honours PAUSE for RoCE. So this tool shows each port's ``prio-pfc`` from that
file (the lossless priority on, unless the file names another) and ``dcb pfc set dev PORT
prio-pfc P:on Q:off`` rewrites it; one priority must stay on (the emulation has one lossless
class). ``pfc-cap`` is 8, ``macsec-bypass`` off, ``delay`` 0; the PFC frame counters (``-s``)
are not emulated (a paused lossless queue shows in ``tc -s qdisc show dev PORT``: its tbf at
8Kbit).

Run by :mod:`railab.testbed.nodetools`'s ``dcb`` in ``railab exec`` (``RAILAB_LAB``,
``RAILAB_NODE``); without them, or on a lab without ``lab.capacity``, the system's ``dcb`` runs
with the same arguments. Exit status: 0, 1 for an error (as ``dcb``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys

from railab.errors import RailabError
from railab.testbed import capacity as cap
from railab.testbed import state as st
from railab.testbed.labref import resolve
from railab.testbed.nodetools import tool_dir
from railab.testbed.pfc import FAULTS_LOCK, PFC_PRIORITY_FILE, read_pfc_priorities
from railab.topologies.atomicfile import write_atomic
from railab.topologies.labspec import LabSpec

USAGE = ("Usage: dcb [ -j | --json ] [ -p | --pretty ] pfc show dev DEV\n"
         "           [ prio-pfc | pfc-cap | macsec-bypass | delay ]\n"
         "       dcb pfc set dev DEV prio-pfc PRIO:{ on | off } [ PRIO:{ on | off } ... ]\n"
         "       (railab's emulated ports: PFC only, one priority on per port; PRIO 0-7 or all)")


class DcbError(Exception):
    """A command this tool refuses (printed, exit 1)."""


def enabled(spec: LabSpec, node: str, port: str) -> set[int]:
    """The priorities PFC is on at ``node:port`` (the lossless one, unless the lab's PFC
    priority file names another)."""
    prio = read_pfc_priorities(st.lab_dir(spec.name)).get((node, port))
    return {spec.qos.roce_tc if prio is None else prio}


def set_priorities(spec: LabSpec, node: str, port: str, changes: list[str]) -> set[int]:
    """Apply ``prio-pfc`` changes (``["3:on", "4:off", "all:off"]``, in order) to ``node:port``
    and write the lab's PFC priority file (under the lab's fault lock); returns the priorities
    on. DcbError for a malformed change or a result that is not exactly one priority on."""
    run_dir = st.lab_dir(spec.name)
    with open(run_dir / FAULTS_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            on = enabled(spec, node, port)
            for ch in changes:
                prio, sep, state = ch.partition(":")
                if not sep or state not in ("on", "off") or not (prio == "all" or prio.isdigit() and int(prio) < 8):
                    raise DcbError(f'Invalid prio-pfc mapping "{ch}": use PRIO:on or PRIO:off, PRIO 0-7 or all')
                prios = set(range(8)) if prio == "all" else {int(prio)}
                on = on | prios if state == "on" else on - prios
            if len(on) != 1:
                raise DcbError(f"railab emulates PFC on one priority per port (one lossless class): "
                               f"{port} would have {'none' if not on else ', '.join(map(str, sorted(on)))} on; "
                               f"keep exactly one on (RoCE's is {spec.qos.roce_tc}: prio-pfc all:off "
                               f"{spec.qos.roce_tc}:on)")
            (prio,) = on
            prios = read_pfc_priorities(run_dir)
            if prio == spec.qos.roce_tc:
                prios.pop((node, port), None)
            else:
                prios[(node, port)] = prio
            write_atomic(run_dir / PFC_PRIORITY_FILE,
                         json.dumps({f"{n}:{q}": v for (n, q), v in sorted(prios.items())}, indent=1))
            return on
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def show(spec: LabSpec, node: str, port: str, attrs: list[str], *, as_json: bool, pretty: bool) -> str:
    """``dcb pfc show dev PORT [ATTR...]`` as dcb prints it."""
    on = enabled(spec, node, port)
    doc = {"pfc_cap": 8, "macsec_bypass": False, "delay": 0,
           "prio_pfc": {str(p): p in on for p in range(8)}}
    names = {"pfc-cap": "pfc_cap", "macsec-bypass": "macsec_bypass", "delay": "delay", "prio-pfc": "prio_pfc"}
    for a in attrs:
        if a not in names:
            raise DcbError(f'What is "{a}"?\n{USAGE}')
    keys = [names[a] for a in attrs] or list(doc)
    if as_json:
        return json.dumps({k: doc[k] for k in keys}, indent=2 if pretty else None)
    words = {"pfc_cap": "pfc-cap 8", "macsec_bypass": "macsec-bypass off", "delay": "delay 0",
             "prio_pfc": "prio-pfc " + " ".join(f"{p}:{'on' if p in on else 'off'}" for p in range(8))}
    head = " ".join(words[k] for k in keys if k != "prio_pfc")
    return "\n".join(x for x in (head, words["prio_pfc"] if "prio_pfc" in keys else "") if x)


def run(spec: LabSpec, node: str, argv: list[str]) -> str:
    """One ``dcb`` command line (without ``dcb``) on ``node`` of ``spec``: its output. DcbError
    for what it refuses."""
    as_json = pretty = stats = False
    args = list(argv)
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt in ("-j", "--json"):
            as_json = True
        elif opt in ("-p", "--pretty"):
            pretty = True
        elif opt in ("-s", "--statistics"):
            stats = True
        elif opt in ("-h", "--help"):
            return USAGE
        else:
            raise DcbError(f'Option "{opt}" is unknown to railab\'s dcb\n{USAGE}')
    if not args or args[0] == "help":
        return USAGE
    if args[0] != "pfc":
        raise DcbError(f"railab emulates PFC only (dcb pfc show|set), not dcb {args[0]}\n{USAGE}")
    if len(args) < 2 or args[1] == "help":
        return USAGE
    cmd, rest = args[1], args[2:]
    if cmd not in ("show", "set") or len(rest) < 2 or rest[0] != "dev":
        raise DcbError(USAGE)
    port = rest[1]
    ports = sorted(p.interface for p in cap.ports(spec) if p.node == node)
    if port not in ports:
        raise DcbError(f"Device \"{port}\" does not exist on {node} (its ports: {', '.join(ports)})")
    if cmd == "show":
        out = show(spec, node, port, rest[2:], as_json=as_json, pretty=pretty)
        if stats:
            out += ("\n(railab: PFC frame counters are not emulated, veths carry no PFC frames; a "
                    f"paused lossless queue shows in `tc -s qdisc show dev {port}`: its tbf at 8Kbit)")
        return out
    if len(rest) < 4 or rest[2] != "prio-pfc":
        raise DcbError(f"railab's dcb sets prio-pfc only\n{USAGE}")
    set_priorities(spec, node, port, rest[3:])
    return ""


def _system_dcb(argv: list[str]) -> None:
    """Replace this process with the system's ``dcb`` (PATH without railab's tool directory)."""
    mine = str(tool_dir())
    path = os.pathsep.join(p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p and p != mine)
    real = shutil.which("dcb", path=path)
    if real is None:
        sys.exit("dcb: command not found (iproute2's dcb is not installed)")
    os.execv(real, [real, *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    lab, node = os.environ.get("RAILAB_LAB"), os.environ.get("RAILAB_NODE")
    spec = None
    if lab and node:
        try:
            spec = resolve(lab).spec()
        except (RailabError, OSError, ValueError):
            spec = None
    if spec is None or not spec.qos.capacity.enabled:
        _system_dcb(argv)
        return 127  # not reached
    try:
        out = run(spec, node, argv)
    except DcbError as exc:
        print(exc, file=sys.stderr)
        return 1
    if out:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
