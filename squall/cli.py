"""The ``squall`` command line."""

from __future__ import annotations

import sys

import click


@click.group()
@click.version_option(package_name="squall")
def main() -> None:
    """squall: Storm's processing guarantees for Python, on Apache Spark."""


@main.command()
@click.option("--sentence", default="the cow jumped over the moon", show_default=True)
def demo(sentence: str) -> None:
    """Walk one sentence of the word-count topology through the groupings and the XOR acker."""
    from squall.demo import run

    sys.exit(0 if run(sentence=sentence) else 1)


if __name__ == "__main__":
    main()
