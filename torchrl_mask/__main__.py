"""``torchrl-mask`` and ``python -m torchrl_mask``: ``bench ...`` goes to the benchmark harness
(:func:`torchrl_mask.bench.commands.main`), every other command to the app (:func:`torchrl_mask.app.cli.main`).

The one module that imports both: the app never imports the benchmark, which builds its runs through the app.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torchrl-mask`` with ``argv`` (default: the process's arguments) and return the exit status.

    :param argv: the arguments after the program name.
    :return: the command's exit status.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["bench"]:
        try:
            from torchrl_mask.bench.commands import main as bench
        except ModuleNotFoundError as err:
            if not (err.name or "").startswith("torchrl_mask.bench"):
                raise
            print(
                f"torchrl-mask bench: this install has no benchmark (module {err.name} is missing); update "
                "torchrl_mask, or run the scripts in benchmarks/ from a clone of the repository.",
                file=sys.stderr,
            )
            return 1
        return bench(args[1:])
    from torchrl_mask.app.cli import main as app

    return app(args)


if __name__ == "__main__":
    sys.exit(main())
