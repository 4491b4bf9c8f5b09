"""Naming: the one home for every name railab derives (lab, namespace, container, node, port).

Rules (docs/architecture.md, "Naming"):

* lab name: :data:`LAB_NAME` (``^[a-z][a-z0-9-]{0,31}$``), checked by :func:`check_lab_name`;
* network namespace of a node: ``clab-<lab>-<node>`` on both runtimes (containerlab's own scheme,
  ``clab-<lab>-<node>`` is also the container name), so traffic and executors work on either;
* nodes: spines ``spine<i>``; Rail-optimized leaves ``g<group>-leaf<rail>``; Rail-only leaves
  ``leaf<i>``; servers ``srv<i>`` numbered across the whole lab (group 1 first); all 1-based;
  three-tier fabrics (pods under super-spines): pod spines ``p<pod>-spine<i>``, super-spines
  ``superspine<i>`` (groups and leaves keep their lab-wide numbers);
* lab ports: ``eth<k>`` (k >= 1; server NIC ``n`` is ``eth<n>`` on rail ``n``);
* SONiC ports: ``eth<k>`` <-> ``Ethernet<4(k-1)>`` (sonic-vs maps the container interface
  ``eth<k>`` to the port of index ``k-1``; the vs HwSKU Force10-S6000 gives every port 4 lanes);
  :func:`nos_port` / :func:`lab_port` convert between the two for any node kind (its
  ``port_naming``): links stay ``eth<k>`` (the container's interfaces), while ``lab.json``'s
  session interfaces, expected route interfaces and NIC leaf ports use the NOS name;
* production breakout ports (:func:`breakout_port`): SONiC names a port after the first lane it
  uses, ``Ethernet<lanes_per_cage x (cage-1) + lane offset>``. An 800G OSFP cage has 8 lanes; split
  2x400G, cage 12 becomes ``Ethernet88`` (lanes 88-91) and ``Ethernet92`` (lanes 92-95), aliases
  ``etp12a`` / ``etp12b``. Sources: SONiC's Dynamic Port Breakout HLD
  (sonic-net/SONiC ``doc/dynamic-port-breakout/sonic-dynamic-port-breakout-HLD.md``: child ports
  are named after their first lane, ``platform.json`` ``breakout_modes``) and the ``etp<cage><a..>``
  aliases of NVIDIA's Spectrum SKUs in sonic-buildimage (``device/mellanox/*/platform.json``).
* production port of a lab port (:func:`production_port`, :func:`production_port_name`): the
  lab's ``eth<k>`` is the switch's k-th port at the fabric speed, counted cage by cage, so with
  ``breakout`` ports per cage (CX864E-N at 400G: 2) ``eth<k>`` is cage ``ceil(k / breakout)``,
  sub-port ``(k-1) mod breakout + 1`` (``eth24`` = cage 12 breakout 2 = ``Ethernet92``,
  ``etp12b``). The cabling plan and the cabling check both print these.
* link id (:func:`link_id`): ``"g1-leaf1:eth4--spine2:eth1"``, the ends sorted, so the same from
  either end (the checks' rows, the drills' and load runs' FIB traces, the graph).
"""

from __future__ import annotations

import re
import string

from railab.errors import UsageError

#: The lab-name rule as shown to people (docs, error messages).
LAB_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,31}$"
#: The compiled rule, anchored with ``\A``/``\Z`` (Python's ``$`` also matches before a final
#: newline, so ``'rvx\n'`` would pass); use :func:`is_lab_name` (``fullmatch``).
LAB_NAME = re.compile(r"\A[a-z][a-z0-9-]{0,31}\Z")
#: lanes of one SONiC port on the sonic-vs HwSKU (Force10-S6000: 32 x 40G, 4 lanes each)
SONIC_VS_LANES_PER_PORT = 4
#: lanes of one 800G OSFP / QSFP-DD cage (8 x 100G SerDes)
CAGE_LANES = 8

_ETH = re.compile(r"^eth(?P<k>[1-9][0-9]*)$")
_ETHERNET = re.compile(r"^Ethernet(?P<n>0|[1-9][0-9]*)$")


class NamingError(UsageError):
    """A name that breaks a naming rule (exit 2); the message says the rule."""


def is_lab_name(name: object) -> bool:
    """True if ``name`` is a str that follows the lab-name rule as a whole (no trailing newline)."""
    return isinstance(name, str) and LAB_NAME.fullmatch(name) is not None


def check_lab_name(name: str, key: str = "name") -> str:
    """Return ``name`` if it is a valid lab name, else raise :class:`NamingError` (a UsageError,
    so a ValueError) naming ``key`` and the rule."""
    if not is_lab_name(name):
        raise NamingError(lab_name_rule(name, key))
    return name


def lab_name_rule(name: str, key: str = "name") -> str:
    """The message for an invalid lab name ``name`` under key ``key`` (no prefix if key is '')."""
    head = f"{key}: " if key else ""
    return (f"{head}{name!r} is not a valid lab name: use 1-32 characters, lowercase letters, "
            f"digits and '-', starting with a letter ({LAB_NAME_PATTERN})")


def netns_prefix(lab: str) -> str:
    """Prefix shared by every namespace/container of ``lab``: ``clab-<lab>-``."""
    return f"clab-{lab}-"


def netns_name(lab: str, node: str) -> str:
    """Network namespace (and containerlab container) name of ``node`` in ``lab``."""
    return f"{netns_prefix(lab)}{node}"


def container_name(lab: str, node: str) -> str:
    """containerlab's container name for ``node`` (``clab-<lab>-<node>``, the same as the netns)."""
    return netns_name(lab, node)


def node_of_netns(lab: str, name: str) -> str:
    """The node name inside a namespace/container name of ``lab`` ("" if the prefix differs)."""
    prefix = netns_prefix(lab)
    return name[len(prefix):] if name.startswith(prefix) else ""


# ---- nodes -------------------------------------------------------------------------------------


def spine_name(i: int) -> str:
    """Spine ``i`` (1-based): ``spine<i>``."""
    return f"spine{i}"


def leaf_name(index: int, *, group: int | None = None, rail: int | None = None) -> str:
    """A leaf's name: ``g<group>-leaf<rail>`` when ``group`` and ``rail`` are given
    (Rail-optimized: one leaf per rail per group, ``rail`` = its first rail), else ``leaf<index>``
    (Rail-only; ``index`` 1-based across the lab)."""
    if group is not None and rail is not None:
        return f"g{group}-leaf{rail}"
    return f"leaf{index}"


def pod_spine_name(pod: int, i: int) -> str:
    """Spine ``i`` (1-based within its pod) of pod ``pod`` (1-based) in a three-tier fabric:
    ``p<pod>-spine<i>``."""
    return f"p{pod}-spine{i}"


def superspine_name(i: int) -> str:
    """Super-spine ``i`` (1-based across the fabric) of a three-tier fabric: ``superspine<i>``."""
    return f"superspine{i}"


def server_name(i: int) -> str:
    """Server ``i`` (1-based across the whole lab, group 1 first): ``srv<i>``."""
    return f"srv{i}"


# ---- ports -------------------------------------------------------------------------------------


def eth(k: int) -> str:
    """Lab port ``k`` (1-based): ``eth<k>``; server NIC ``n`` is ``eth(n)``."""
    if k < 1:
        raise NamingError(f"port numbers start at 1 (eth1), got {k}")
    return f"eth{k}"


def eth_index(name: str) -> int:
    """``eth<k>`` -> ``k``; raises NamingError for other names (a sort key for port lists)."""
    m = _ETH.match(name)
    if not m:
        raise NamingError(f"{name!r} is not a lab port name (eth1, eth2, ...)")
    return int(m["k"])


def sonic_port(name: str, max_ports: int | None = None) -> str:
    """Map a container interface ``eth<k>`` (k >= 1) to its SONiC port ``Ethernet<4(k-1)>``.

    ``max_ports``: the node kind's data ports (sonic-vs: 32); raises NamingError (a ValueError) for
    names that are not ``eth<k>`` or beyond ``max_ports``.
    """
    m = _ETH.match(name)
    if not m:
        hi = f"eth{max_ports}" if max_ports else "ethN"
        raise NamingError(f"sonic-vs data interfaces are eth1..{hi}, got {name!r}")
    k = int(m["k"])
    if max_ports is not None and k > max_ports:
        raise NamingError(f"sonic-vs has {max_ports} data ports; {name} does not exist")
    return f"Ethernet{SONIC_VS_LANES_PER_PORT * (k - 1)}"


def eth_of_sonic(name: str) -> str:
    """Inverse of :func:`sonic_port`: ``Ethernet<4(k-1)>`` -> ``eth<k>``.

    Raises NamingError for a name that is not ``Ethernet<n>`` with ``n`` a multiple of 4.
    """
    m = _ETHERNET.match(name)
    if not m or int(m["n"]) % SONIC_VS_LANES_PER_PORT:
        raise NamingError(f"{name!r} is not a sonic-vs port (Ethernet0, Ethernet4, ...)")
    return eth(int(m["n"]) // SONIC_VS_LANES_PER_PORT + 1)


def nos_port(name: str, naming: str = "eth", max_ports: int | None = None) -> str:
    """The name the switch's NOS gives lab port ``name`` (``eth<k>``): itself on ``eth`` kinds
    (FRR), ``Ethernet<4(k-1)>`` on ``sonic`` kinds (:func:`sonic_port`). ``naming`` is the node
    kind's ``port_naming``. This is the name ``frr.conf``, config_db and FRR's JSON use, so
    ``lab.json`` records it for session interfaces, expected route interfaces and NIC leaf ports.
    Raises NamingError for a name that is not ``eth<k>`` (or beyond ``max_ports``) on sonic
    kinds, and for an unknown ``naming``."""
    if naming == "eth":
        return name
    if naming == "sonic":
        return sonic_port(name, max_ports)
    raise NamingError(f"unknown port naming {naming!r}: use 'eth' or 'sonic'")


def lab_port(name: str) -> str:
    """Inverse of :func:`nos_port`: the lab (container) interface ``eth<k>`` of a port name a NOS
    uses. ``eth<k>`` stays itself; ``Ethernet<4(k-1)>`` -> ``eth<k>`` (:func:`eth_of_sonic`).
    Raises NamingError for any other name."""
    if _ETH.match(name):
        return name
    return eth_of_sonic(name)


def breakout_port(cage: int, sub: int = 1, *, breakout: int = 1,
                  lanes_per_cage: int = CAGE_LANES) -> str:
    """SONiC name of sub-port ``sub`` (1-based) of front-panel ``cage`` (1-based) split into
    ``breakout`` ports: ``Ethernet<lanes_per_cage x (cage-1) + (sub-1) x lanes_per_cage/breakout>``.

    E.g. ``breakout_port(12, 2, breakout=2)`` = ``Ethernet92`` (800G cage 12 as 2 x 400G).
    Raises NamingError when ``breakout`` does not divide the lanes or ``sub`` is out of range.
    """
    if cage < 1:
        raise NamingError(f"cages are numbered from 1, got {cage}")
    if breakout < 1 or lanes_per_cage % breakout:
        raise NamingError(f"a {lanes_per_cage}-lane cage cannot break out into {breakout} ports")
    if not 1 <= sub <= breakout:
        raise NamingError(f"cage {cage} breakout {breakout} has sub-ports 1..{breakout}, got {sub}")
    return f"Ethernet{lanes_per_cage * (cage - 1) + (sub - 1) * (lanes_per_cage // breakout)}"


def breakout_alias(cage: int, sub: int = 1, *, breakout: int = 1) -> str:
    """Front-panel alias: ``etp<cage>`` unsplit, ``etp<cage><a|b|...>`` for sub-port ``sub``."""
    if breakout == 1:
        return f"etp{cage}"
    if not 1 <= sub <= min(breakout, 26):
        raise NamingError(f"cage {cage} breakout {breakout} has sub-ports 1..{breakout}, got {sub}")
    return f"etp{cage}{string.ascii_lowercase[sub - 1]}"


def parse_breakout_port(name: str, *, breakout: int = 1,
                        lanes_per_cage: int = CAGE_LANES) -> tuple[int, int]:
    """Inverse of :func:`breakout_port`: ``Ethernet92`` (breakout 2) -> ``(12, 2)``.

    Raises NamingError for a name that is not the first lane of a sub-port of that breakout.
    """
    m = _ETHERNET.match(name)
    if not m or breakout < 1 or lanes_per_cage % breakout:
        raise NamingError(f"{name!r} is not a SONiC port name of a {breakout}-way breakout")
    lane = int(m["n"])
    width = lanes_per_cage // breakout
    if lane % width:
        raise NamingError(f"{name!r} does not start a {width}-lane sub-port (breakout {breakout})")
    return lane // lanes_per_cage + 1, (lane % lanes_per_cage) // width + 1


def production_port(k: int, *, breakout: int = 1) -> tuple[int, int]:
    """The front-panel ``(cage, sub-port)`` (both 1-based) of lab port ``eth<k>`` on a switch
    whose cages each carry ``breakout`` ports at the fabric speed (1: unsplit; CX864E-N 800G
    cages at 400G: 2). Ports fill cages in order: ``eth1``/``eth2`` share cage 1.

    Raises NamingError for ``k < 1`` or ``breakout < 1``.
    """
    if k < 1:
        raise NamingError(f"port numbers start at 1 (eth1), got {k}")
    if breakout < 1:
        raise NamingError(f"a cage carries at least 1 port, got breakout {breakout}")
    return (k - 1) // breakout + 1, (k - 1) % breakout + 1


def production_port_name(k: int, *, breakout: int = 1,
                         lanes_per_cage: int = CAGE_LANES) -> tuple[str, str]:
    """``(SONiC name, front-panel alias)`` of lab port ``eth<k>`` on a production switch
    (:func:`production_port` then :func:`breakout_port` / :func:`breakout_alias`): ``eth24``
    with breakout 2 -> ``("Ethernet92", "etp12b")``; unsplit ``eth5`` -> ``("Ethernet32",
    "etp5")``."""
    cage, sub = production_port(k, breakout=breakout)
    return (breakout_port(cage, sub, breakout=breakout, lanes_per_cage=lanes_per_cage),
            breakout_alias(cage, sub, breakout=breakout))


def link_id(node_a: str, if_a: str, node_b: str, if_b: str) -> str:
    """Canonical name of the link between ``node_a:if_a`` and ``node_b:if_b``, the same from
    either end: ``"g1-leaf1:eth4--spine2:eth1"`` (ends sorted)."""
    ends = sorted((f"{node_a}:{if_a}", f"{node_b}:{if_b}"))
    return f"{ends[0]}--{ends[1]}"
