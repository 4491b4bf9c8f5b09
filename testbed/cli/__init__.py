"""The ``railab`` command line (Typer). Each area registers its own sub-commands."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="railab",
    help="Plan, emulate and test Rail-only / Rail-optimized RoCEv2 GPU backend fabrics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

from testbed.cli import plan as _plan  # noqa: E402
from testbed.cli import generate as _generate  # noqa: E402
from testbed.cli import lab as _lab  # noqa: E402
from testbed.cli import traffic as _traffic  # noqa: E402
from testbed.cli import check as _check  # noqa: E402
from testbed.cli import demo as _demo  # noqa: E402

for _mod in (_plan, _generate, _lab, _traffic, _check, _demo):
    _mod.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
