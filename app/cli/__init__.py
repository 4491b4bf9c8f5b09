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

from railab.cli import plan as _plan  # noqa: E402
from railab.cli import generate as _generate  # noqa: E402
from railab.cli import lab as _lab  # noqa: E402
from railab.cli import traffic as _traffic  # noqa: E402
from railab.cli import check as _check  # noqa: E402
from railab.cli import demo as _demo  # noqa: E402
from railab.cli import registry as _registry  # noqa: E402

for _mod in (_plan, _generate, _lab, _traffic, _check, _demo, _registry):
    _mod.register(app)


# Newer Typer vendors click as typer._click (and no longer installs click): take the usage-error
# base class from Typer's own BadParameter, which works with either layout.
_TYPER_CLICK_EXCEPTION = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def main() -> None:
    """Console-script entry point.

    A ``RailabError`` (or a model ``ValueError`` such as a planner or intent error) that escapes a
    command is printed as one ``error: ...`` line on stderr, exit code 1; no traceback.
    """
    import sys

    from railab.errors import RailabError

    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (RailabError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except _TYPER_CLICK_EXCEPTION as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
