from click.testing import CliRunner

from squall.cli import main


def test_demo_follows_a_sentence_until_its_tree_completes():
    result = CliRunner().invoke(main, ["demo", "--sentence", "a b a"], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    assert "tree complete" in result.output
    assert result.output.count(" acks 'a'") == 2 and "acks 'b'" in result.output
