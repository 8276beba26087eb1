"""The ``squall`` command line."""

from __future__ import annotations

import logging
import sys

import click


@click.group()
@click.version_option(package_name="squall")
@click.option("-v", "--verbose", is_flag=True, help="log squall's progress")
def main(verbose: bool) -> None:
    """squall: Storm's processing guarantees for Python, on Apache Spark."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--conf", "conf_pairs", multiple=True, metavar="KEY=VALUE", help="config, repeatable")
@click.option(
    "--spark-conf",
    "spark_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="a Spark setting for the SparkConf, repeatable",
)
@click.option("--master", help="Spark master URL (default local[*]); same as --conf squall.spark.master=URL")
@click.option("--name", help="topology name (default: the file's NAME, or its stem)")
@click.option("--duration", type=float, help="stop after this many seconds")
@click.option(
    "--idle-secs",
    type=float,
    default=3.0,
    show_default=True,
    help="stop once no tree is pending and nothing has moved for this long (0: run until interrupted)",
)
def run(path, conf_pairs, spark_pairs, master, name, duration, idle_secs) -> None:
    """Run the topology a file declares, with progress and a closing summary."""
    from squall.model.errors import SquallError
    from squall.runner import run_file

    try:
        run_file(path, list(conf_pairs), master, name, duration, idle_secs, spark_pairs=list(spark_pairs))
    except SquallError as exc:
        click.echo(f"squall: {exc}", err=True)
        sys.exit(1)


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot"]), default="mermaid", show_default=True)
@click.option("--conf", "conf_pairs", multiple=True, metavar="KEY=VALUE", help="config for build_topology, repeatable")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="write here (default: stdout)")
def visualize(path, fmt, conf_pairs, output) -> None:
    """Write the graph of the topology a file declares, as Mermaid or Graphviz DOT."""
    from squall.model.drawing import draw
    from squall.model.errors import SquallError
    from squall.runner import load_module, parse_conf_pairs, topology_of

    try:
        module = load_module(path)
        topology = topology_of(module, {**getattr(module, "CONF", {}), **parse_conf_pairs(list(conf_pairs))})
    except SquallError as exc:
        click.echo(f"squall: {exc}", err=True)
        sys.exit(1)
    text = draw(getattr(topology, "topology", topology), fmt)  # a transactional topology wraps its graph
    if output:
        with open(output, "w") as out:
            out.write(text)
    else:
        click.echo(text, nl=False)


@main.command()
@click.option("--sentence", default="the cow jumped over the moon", show_default=True)
def demo(sentence: str) -> None:
    """Walk one sentence of the word-count topology through the groupings and the XOR acker, without Spark."""
    from squall.demo import run as run_demo

    sys.exit(0 if run_demo(sentence=sentence) else 1)


if __name__ == "__main__":
    main()
