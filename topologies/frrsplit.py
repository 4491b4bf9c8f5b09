"""The split of an integrated ``frr.conf`` into each daemon's own start-up file
(:func:`split_frr_conf`), apart from the rendering in railab.topologies.frr (which re-exports
it): the netns runtime, which every command on a running lab loads, needs only this part, not
the template engine and the BFD/config model behind the rendering."""

from __future__ import annotations

#: Top-level statements of an integrated frr.conf and the daemons that take them (FRR's vtysh
#: sends each command to the daemons that install it: ``vtysh/vtysh.c``, the ``VTYSH_*`` masks).
#: Keys are matched against the statement's leading words, longest first.
_TOP_LEVEL: dict[str, tuple[str, ...]] = {
    "frr version": ("*",),
    "frr defaults": ("*",),
    "hostname": ("*",),
    "log": ("*",),
    "service integrated-vtysh-config": (),  # vtysh's own setting
    "no service cputime-stats": ("*",),  # every daemon's event loop (lib/thread.c)
    "ip forwarding": ("zebra",),
    "ipv6 forwarding": ("zebra",),
    "no zebra": ("zebra",),
    "zebra": ("zebra",),
    "interface": ("zebra",),
    "ip route": ("staticd",),
    "ipv6 route": ("staticd",),
    "router bgp": ("bgpd",),
    "bfd": ("bfdd",),
    "ip prefix-list": ("zebra", "bgpd"),
    "ipv6 prefix-list": ("zebra", "bgpd"),
    "route-map": ("zebra", "bgpd"),
    "bgp community-list": ("bgpd",),
    "bgp as-path": ("bgpd",),
}

#: What an ``interface`` block may hold for it to be zebra's alone (anything else, e.g. a
#: per-interface BFD or OSPF line, belongs to another daemon too: :func:`split_frr_conf` declines).
_ZEBRA_INTERFACE = ("description", "ip address", "ipv6 address", "ipv6 nd", "no ipv6 nd", "mtu",
                    "shutdown", "no shutdown", "link-detect", "no link-detect", "bandwidth")


def _owner(line: str, table) -> str | None:
    words = line.split()
    for n in (3, 2, 1):
        key = " ".join(words[:n])
        if key in table:
            return key
    return None


def split_frr_conf(text: str, daemons: tuple[str, ...] | list[str]) -> dict[str, str] | None:
    """Cut an integrated ``frr.conf`` (``text``) into each daemon's own config file.

    ``daemons``: the node's FRR daemons (its daemons file). Returns ``{daemon: config text}`` for
    every one of them (possibly only the shared ``frr version``/``frr defaults``/``hostname``
    lines), each a valid per-daemon config for ``<daemon> -f FILE`` at start (FRR's classic
    split-config mode, ``lib/libfrr.c`` ``frr_config_read_in``): the global lines first, then
    each block whole (opening line, indented lines, ``exit``). Returns None when the file holds
    a statement this table does not place (:data:`_TOP_LEVEL`), an interface line that is not
    zebra's, or a part for a daemon the node does not run: the caller then pushes the whole file
    with ``vtysh -f``, which knows every command. Comments (``!``) are dropped.
    """
    parts: dict[str, list[str]] = {d: [] for d in daemons}
    owners: tuple[str, ...] = ()
    current: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("!"):
            continue
        if line[0].isspace() or stripped in ("exit", "end"):  # inside the current block
            if not owners and stripped not in ("exit", "end"):
                return None
            if current == "interface" and line[0].isspace() \
                    and _owner(stripped, _ZEBRA_INTERFACE) is None:
                return None
            for d in owners:
                parts[d].append(line)
            if stripped in ("exit", "end") and not line[0].isspace():
                owners = ()
            continue
        current = _owner(stripped, _TOP_LEVEL)
        if current is None:
            return None
        targets = _TOP_LEVEL[current]
        targets = tuple(daemons) if targets == ("*",) else targets
        if any(d not in parts for d in targets):
            return None
        for d in targets:
            parts[d].append(line)
        # blocks open on these statements; the others are one line
        owners = targets if current in ("interface", "router bgp", "bfd", "route-map") else ()
    return {d: "\n".join(lines) + "\n" for d, lines in parts.items()}


#: Interface lines zebra (FRR 8.4) takes through its northbound (YANG) layer, i.e. that it can
#: hold pending between two commits (``lib/if.c``); its RA and address lines are classic commands.
_YANG_INTERFACE = ("description",)
#: FRR's hidden commands around a configuration push (``lib/command.c``; what ``vtysh -b`` sends
#: before and after a file): in between, a northbound change waits for the next commit instead of
#: committing on its own.
START_CONFIG, END_CONFIG = "XFRR_start_configuration", "XFRR_end_configuration"


def zebra_read_order(part: str) -> str:
    """zebra's start-up part (of :func:`split_frr_conf`) arranged so that zebra reads it with one
    northbound commit per interface instead of about three: the same statements, the same
    resulting configuration (issue 47, the 4,096 in a minute).

    Why: zebra commits each northbound change as it reads the file (an ``interface`` line, each
    ``description``), and a classic command (``ipv6 nd ...``, ``ip address``) or ``exit`` commits
    whatever is pending first; every commit validates, diffs and copies the whole candidate
    configuration, whose interface list grows with each block read, so reading the file costs
    O(interfaces squared): 52-58 ms of CPU per zebra with 129 interfaces (``show thread cpu``,
    ``frr_config_read_in``; 7 ms for 33, 18 ms for 65), 5.2 CPU-s of ``rail-optimized-4096-full``'s
    96 zebras. Here the part is read between :data:`START_CONFIG` and :data:`END_CONFIG` (so a
    northbound line waits for the next commit), each interface block has its northbound lines
    (:data:`_YANG_INTERFACE`) last, and the ``exit`` between two interface blocks is left out
    (the next ``interface`` line leaves the block itself: FRR's config reader retries a line the
    current node does not know in its parent node), so the ``description`` of one block is
    committed with the next block's ``interface`` line: 129 commits instead of ~390, 25-35 ms.
    Lines outside interface blocks stay where they are (the header before :data:`START_CONFIG`);
    an ``exit`` still closes the last block and any block followed by something else. A part
    without interface blocks is returned unchanged."""
    lines = [ln for ln in part.splitlines() if ln.strip()]
    if not any(ln.startswith("interface ") for ln in lines):
        return part
    out: list[str] = []
    started = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("interface "):
            out.append(line)
            i += 1
            continue
        if not started:
            out.append(START_CONFIG)
            started = True
        j = i + 1
        while j < len(lines) and lines[j][:1].isspace():
            j += 1
        body = lines[i + 1:j]
        yang = [ln for ln in body if _owner(ln.strip(), _YANG_INTERFACE) is not None]
        out += [line, *(ln for ln in body if ln not in yang), *yang]
        closes = j < len(lines) and lines[j].strip() == "exit"
        nxt = lines[j + 1] if closes and j + 1 < len(lines) else ""
        if closes and nxt.startswith("interface "):
            j += 1  # the next interface line leaves this block
        i = j
    return "\n".join(out + [END_CONFIG]) + "\n"
