"""``railab ui [--bind 127.0.0.1:8080] [--token T] [--trainee LAB ...]``: the live lab console and
the trainer's class board in the browser (railab.ui; docs/ui.md).

Loopback only by default; a non-loopback bind without ``--token`` is refused (exit 2, one line).
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach ``ui`` to ``app``."""

    @app.command("ui")
    def ui(
        bind: str = typer.Option("127.0.0.1:8080", "--bind", help="HOST:PORT to serve on (loopback by default)"),
        token: str | None = typer.Option(
            None, "--token", envvar="RAILAB_UI_TOKEN",
            help="the trainer's token (every request must carry it); required for a non-loopback bind "
                 "(also from $RAILAB_UI_TOKEN, which keeps it out of ps)"),
        trainees: list[str] = typer.Option(
            None, "--trainee",
            help="mint a trainee token for this lab and print its link (repeatable; the class board "
                 "makes more)"),
        allow: str = typer.Option("check", "--trainee-allow",
                                  help="what --trainee tokens may do: comma-separated of check,fault,traffic,drill"),
        interval: float = typer.Option(1.0, "--interval", min=0.2, max=10.0,
                                       help="seconds between two observations of a watched lab"),
    ) -> None:
        """Serve the live lab console (fabric diagram with live link/BGP/daemon state, faults,
        checks, the event log) and the trainer's class board; Ctrl-C stops it."""
        from railab import ui as U
        from railab.errors import UsageError
        from railab.testbed import state as st

        host, port = U.parse_bind(bind)
        U.check_bind(host, token)
        allowed = tuple(a.strip() for a in allow.split(",") if a.strip())
        bad = [a for a in allowed if a not in U.TRAINEE_ACTIONS]
        if bad:
            raise UsageError(f"--trainee-allow {','.join(bad)}: choose from {','.join(U.TRAINEE_ACTIONS)}")
        config = U.UiConfig(host=host, port=port, token=token or None, interval=interval)
        base = f"http://{host if ':' not in host else '[' + host.strip('[]') + ']'}:{port}"
        lines = []
        for lab in trainees or []:
            if lab not in st.labs():
                raise UsageError(f"--trainee {lab}: no such lab is up here ({st.running_labs()})")
            tok = config.mint_trainee(lab, allowed)
            lines.append(f"  trainee of {lab}: {base}/t/{lab}?token={tok}")
        who = "trainer: pass the token (?token=T once, or Authorization: Bearer T)" if token else \
            "trainer (open to every local user: --token T to require one)"
        typer.echo(f"railab ui on {base}/ ({who}); Ctrl-C stops it")
        for line in lines:
            typer.echo(line)
        U.serve(config)
