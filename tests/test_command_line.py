"""The ``squall`` command line's shared options: ``-v`` goes before the subcommand or anywhere after it."""

import pytest
from click.testing import CliRunner

from squall.cli import main

SUBCOMMANDS = sorted(main.commands)


def test_every_subcommand_is_covered():
    assert {"run", "visualize", "list", "kill", "activate", "deactivate", "drpc", "demo"} <= set(SUBCOMMANDS)


@pytest.mark.parametrize("command", SUBCOMMANDS)
@pytest.mark.parametrize("flag", ["-v", "--verbose"])
def test_verbose_is_accepted_after_the_subcommand_and_in_its_help(command, flag):
    # --help is read once every option is, so an unknown -v would be a usage error (exit 2) before it.
    result = CliRunner().invoke(main, [command, flag, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "-v, --verbose" in result.output and "log what squall does, on stderr" in result.output


def test_verbose_before_the_subcommand_is_in_the_group_help():
    result = CliRunner().invoke(main, ["--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "-v, --verbose" in result.output
