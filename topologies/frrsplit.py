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
