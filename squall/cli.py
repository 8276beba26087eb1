"""The ``squall`` command line."""

from __future__ import annotations

import json
import logging
import sys

import click

CONF_FILE_HELP = (
    "a JSON object of config keys to values (secrets kept out of the command line); --conf values override it"
)


def read_conf_file(path: str | None) -> dict:
    """The config in ``path``: a JSON object, ``{"key": value, ...}``, values of any JSON type."""
    from squall.model.errors import SquallError

    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as source:
            conf = json.load(source)
    except OSError as exc:
        raise SquallError(f"--conf-file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise SquallError(f"--conf-file {path} is not JSON: {exc}") from None
    if not isinstance(conf, dict):
        raise SquallError(f"--conf-file {path} must hold a JSON object of config keys, got {type(conf).__name__}")
    return conf


def conf_pairs_with(conf_file: str | None, pairs: list[str]) -> list[str]:
    """``--conf-file``'s config under the ``--conf`` pairs, every ``${NAME}`` expanded from the environment, as
    ``key=JSON`` pairs (what ``squall run`` takes): the values never appear on a command line."""
    from squall.model.config import expand_env
    from squall.runner import parse_conf_pairs

    conf = expand_env({**read_conf_file(conf_file), **parse_conf_pairs(pairs)})
    return [f"{key}={json.dumps(value)}" for key, value in conf.items()]


VERBOSE_HELP = "log what squall does, on stderr (before or after the subcommand)"


def _set_verbose(ctx: click.Context, param: click.Parameter, verbose: bool) -> None:
    if verbose:
        logging.getLogger().setLevel(logging.INFO)


def verbose_option(command: click.Command) -> click.Command:
    """``-v``/``--verbose`` on a subcommand too, so that ``squall run FILE -v`` logs as ``squall -v run FILE`` does."""
    return click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_set_verbose, help=VERBOSE_HELP)(
        command
    )


class VerboseGroup(click.Group):
    """A group whose every subcommand takes ``-v``/``--verbose`` as well as the group itself."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        verbose_option(cmd)
        super().add_command(cmd, name)


@click.group(cls=VerboseGroup)
@click.version_option(package_name="squall")
@click.option("-v", "--verbose", is_flag=True, help=VERBOSE_HELP)
def main(verbose: bool) -> None:
    """squall: Storm's processing guarantees for Python, on Apache Spark."""
    # Before the subcommand's options are read: a -v after the subcommand raises the level set here.
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--conf", "conf_pairs", multiple=True, metavar="KEY=VALUE", help="config, repeatable")
@click.option("--conf-file", type=click.Path(exists=True, dir_okay=False), help=CONF_FILE_HELP)
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
@click.option("--ui-port", type=click.IntRange(0, 65535), help="the web UI's port (default 8080, or a free one)")
@click.option("--ui-host", help="the web UI's address (default 127.0.0.1)")
@click.option("--no-ui", is_flag=True, help="serve no web UI, REST API or /metrics")
@click.option(
    "--kill-wait",
    type=float,
    default=5.0,
    show_default=True,
    help="on Ctrl-C, seconds pending trees get to finish before they are failed back to their source",
)
@click.option(
    "--progress-secs",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="when the output is not a terminal (nohup, CI, a pipe), print a line of progress this often",
)
def run(
    path,
    conf_pairs,
    conf_file,
    spark_pairs,
    master,
    name,
    duration,
    idle_secs,
    ui_port,
    ui_host,
    no_ui,
    kill_wait,
    progress_secs,
) -> None:
    """Run the topology a file declares, with progress, a web UI and a closing summary.

    Config comes from the file's CONF, then --conf-file, then --conf; ${NAME} in a value is the environment
    variable NAME."""
    from squall.model.config import expand_env
    from squall.model.errors import SquallError
    from squall.runner import parse_spark_pairs, run_file

    try:
        pairs = conf_pairs_with(conf_file, list(conf_pairs))
        spark = [f"{k}={v}" for k, v in expand_env(parse_spark_pairs(list(spark_pairs))).items()]
        run_file(
            path,
            pairs,
            master,
            name,
            duration,
            idle_secs,
            spark_pairs=spark,
            ui_port=ui_port,
            ui_host=ui_host,
            ui=not no_ui,
            kill_wait=kill_wait,
            progress_secs=progress_secs,
        )
    except SquallError as exc:
        click.echo(f"squall: {exc}", err=True)
        sys.exit(1)


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot"]), default="mermaid", show_default=True)
@click.option("--conf", "conf_pairs", multiple=True, metavar="KEY=VALUE", help="config for build_topology, repeatable")
@click.option("--conf-file", type=click.Path(exists=True, dir_okay=False), help=CONF_FILE_HELP)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="write here (default: stdout)")
def visualize(path, fmt, conf_pairs, conf_file, output) -> None:
    """Write the graph of the topology a file declares, as Mermaid or Graphviz DOT."""
    from squall.model.drawing import draw
    from squall.model.errors import SquallError
    from squall.runner import load_module, parse_conf_pairs, topology_of

    try:
        conf = parse_conf_pairs(conf_pairs_with(conf_file, list(conf_pairs)))
        module = load_module(path)
        topology = topology_of(module, {**getattr(module, "CONF", {}), **conf})
    except SquallError as exc:
        click.echo(f"squall: {exc}", err=True)
        sys.exit(1)
    text = draw(getattr(topology, "topology", topology), fmt)  # a transactional topology wraps its graph
    if output:
        with open(output, "w") as out:
            out.write(text)
    else:
        click.echo(text, nl=False)


def _url_option(command):
    return click.option(
        "--url",
        help="the web UI of a running squall run (default: the one of this user on this machine that serves the"
        " topology, whatever port it took; with none found, http://127.0.0.1:8080)",
    )(command)


def _token_option(command):
    return click.option(
        "--token",
        envvar="SQUALL_UI_TOKEN",
        help="the server's token (default: $SQUALL_UI_TOKEN, else the token file a squall run on this machine wrote"
        " for the URL's host and port); needed for a squall run on another machine",
    )(command)


def _client(url: str, token: str | None = None):
    from squall.ui.client import UIClient

    return UIClient(url, token=token)


def _fail(exc: Exception) -> None:
    click.echo(f"squall: {exc}", err=True)
    sys.exit(1)


def _control(
    url: str | None, name: str, action: str, done: str, wait: float | None = None, token: str | None = None
) -> None:
    """``action`` on topology ``name`` through the REST API, with the token; says ``done`` or why not. With no
    ``url``, the web UI of this user's that serves ``name``."""
    from squall.model.errors import SquallError
    from squall.ui.client import url_serving

    try:
        _client(url or url_serving(name), token).control(name, action, wait)
    except SquallError as exc:
        _fail(exc)
    click.echo(f"{done} {name}")


@main.command(name="list")
@click.option(
    "--url",
    help="the web UI of a running squall run (default: every one this user runs on this machine, whatever port"
    " each took; with none found, http://127.0.0.1:8080)",
)
def list_topologies(url: str | None) -> None:
    """List the topologies running squall runs serve, with their status and key figures, and each one's web UI."""
    from squall.model.errors import SquallError
    from squall.ui.client import local_urls

    urls = [url] if url else local_urls()
    listed, unreachable = [], []
    for each in urls:
        try:
            listed += [(t, each) for t in _client(each).topologies()]
        except SquallError as exc:
            if len(urls) == 1:
                _fail(exc)
            unreachable.append(str(exc))  # one of several stopping meanwhile: the others are listed
    for why in unreachable:
        click.echo(f"squall: {why}", err=True)
    if not listed:
        click.echo("no topologies running")
        return
    click.echo(f"{'name':<24} {'status':<9} {'uptime':>9} {'waves':>9} {'pending':>9} {'restarts':>8}  web UI")
    for t, each in listed:
        click.echo(
            f"{t['name']:<24} {t['status']:<9} {t['uptimeSeconds']:>8.0f}s {t['waves']:>9}"
            f" {t['pendingTrees']:>9} {t['workerRestarts']:>8}  {each}"
        )


@main.command()
@click.argument("name")
@click.option("--wait", "-w", type=float, default=30.0, show_default=True, help="seconds pending trees get to finish")
@_url_option
@_token_option
def kill(name: str, wait: float, url: str | None, token: str | None) -> None:
    """Stop a topology as storm kill -w does: deactivate its spouts, let pending trees finish for up to WAIT
    seconds, fail those left back to their source, and close it."""
    _control(url, name, "kill", "killed", wait, token)


@main.command()
@click.argument("name")
@_url_option
@_token_option
def deactivate(name: str, url: str | None, token: str | None) -> None:
    """Pause a topology's spouts (Storm's deactivate)."""
    _control(url, name, "deactivate", "deactivated", token=token)


@main.command()
@click.argument("name")
@_url_option
@_token_option
def activate(name: str, url: str | None, token: str | None) -> None:
    """Resume a topology's spouts (Storm's activate)."""
    _control(url, name, "activate", "activated", token=token)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="the address to listen on")
@click.option("--port", type=click.IntRange(0, 65535), default=3772, show_default=True, help="0: any free port")
@click.option(
    "--timeout-secs",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="a request unanswered this long fails (drpc.request.timeout.secs)",
)
def drpc(host: str, port: int, timeout_secs: float) -> None:
    """Serve DRPC: callers POST /drpc/<function> (Storm's DRPC HTTP API, or DRPCClient); topologies take the
    requests through drpc.servers and drpc.port. Every route needs the token written to
    ~/.squall/drpc/<host>_<port>.token. Runs until interrupted."""
    import signal
    import threading

    from squall.drpc.server import DRPCServer
    from squall.model.errors import SquallError

    try:
        server = DRPCServer(host, port, timeout_secs)
    except SquallError as exc:
        _fail(exc)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    click.echo(f"squall drpc serving on {server.host}:{server.port}; token in {server.token_file}", err=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


@main.command()
@click.option("--sentence", default="the cow jumped over the moon", show_default=True)
def demo(sentence: str) -> None:
    """Walk one sentence of the word-count topology through the groupings and the XOR acker, without Spark."""
    from squall.demo import run as run_demo

    sys.exit(0 if run_demo(sentence=sentence) else 1)


if __name__ == "__main__":
    main()
