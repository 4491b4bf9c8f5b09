"""``railab otg LAB [--bind 127.0.0.1:8443] [--token T]``: serve the Open Traffic Generator
REST API over a running lab, for snappi scripts (railab.otg; docs/otg.md).

Loopback only by default; a non-loopback bind without ``--token`` is refused (exit 2, one line),
as ``railab ui``.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach ``otg`` to ``app``."""

    @app.command("otg")
    def otg(
        lab: str = typer.Argument(..., help="a lab up on this host (its name)"),
        bind: str = typer.Option("127.0.0.1:8443", "--bind", help="HOST:PORT to serve on (loopback by default)"),
        token: str | None = typer.Option(
            None, "--token", envvar="RAILAB_OTG_TOKEN",
            help="every request must carry it (Authorization: Bearer T); required for a non-loopback bind "
                 "(also from $RAILAB_OTG_TOKEN, which keeps it out of ps)"),
    ) -> None:
        """Serve the OTG API (snappi's /config, /control/state, /monitor/metrics,
        /capabilities/version) over LAB's server NICs and railab's engines; Ctrl-C stops it and
        heals the link faults it injected."""
        from railab import otg as O

        host, port = O.parse_bind(bind)
        O.check_bind(host, token)
        config = O.OtgConfig(lab=lab, host=host, port=port, token=token or None)
        server = O.make_server(config)  # UsageError (exit 2) for a lab that is not up
        base = f"http://{host if ':' not in host else '[' + host.strip('[]') + ']'}:{port}"
        u = server.lab.units
        scale = (f"time scale {u.time_scale:g} ({u.fabric_gbps:g} Gb/s fabric ports)" if u.fabric_gbps
                 else "time scale 1 (no qos.capacity)")
        who = ("token required: Authorization: Bearer T" if token
               else "open to every local user: --token T to require one")
        typer.echo(f"railab otg {lab} on {base} ({who}); {scale}; Ctrl-C stops it")
        O.serve_server(server)
