"""hutchctl's command-line grammar: rabbitmqctl's options anywhere, every mistake a UsageError."""

import pytest
from hutch_cli import arguments


@pytest.mark.parametrize(
    ("argv", "verb", "positionals", "options"),
    [
        (["list_queues"], "list_queues", (), {}),
        (
            ["-p", "v", "list_queues", "name", "--formatter", "json", "messages"],
            "list_queues",
            ("name", "messages"),
            {"vhost": "v", "formatter": "json"},
        ),
        (
            ["set_policy", "p", "^a", "{}", "--priority=3", "--apply-to", "queues", "-q"],
            "set_policy",
            ("p", "^a", "{}"),
            {"priority": "3", "apply-to": "queues", "quiet": True},
        ),
        (["set_vhost_limits", "-1"], "set_vhost_limits", ("-1",), {}),
        (["import_definitions", "-"], "import_definitions", ("-",), {}),
        (["set_policy", "--", "p", "-x", "{}"], "set_policy", ("p", "-x", "{}"), {}),
        ([], None, (), {}),
    ],
)
def test_parse(argv, verb, positionals, options):
    parsed = arguments.parse(argv)
    assert (parsed.verb, parsed.positionals, parsed.options) == (verb, positionals, options)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["list_queues", "--nope"], "Invalid options for this command: --nope"),
        (["list_queues", "-p"], "option -p needs a value"),
        (["list_queues", "--formatter", "csv"], "formatter 'csv' is not one of: table, json"),
    ],
)
def test_mistakes(argv, message):
    with pytest.raises(arguments.UsageError, match=message):
        arguments.parse(argv)
