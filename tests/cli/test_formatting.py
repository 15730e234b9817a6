"""Outcomes -> rabbitmqctl 3.10.8's text (captured from the real tool), as tables."""

import pytest
from hutch_cli import formatting, plans
from hutch_cli.execution import Outcome

POLICIES = plans.Table(
    ("vhost", "name", "pattern", "apply-to", "definition", "priority"),
    (("/", "p1", "^a", "queues", {"max-length": 5}, 3),),
    ("plain", "plain", "plain", "plain", "json", "plain"),
)
BANNER = ('Listing policies for vhost "/" ...',)


@pytest.mark.parametrize(
    ("style", "stdout"),
    [
        (
            formatting.Style(),
            'Listing policies for vhost "/" ...\n'
            "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n"
            '/\tp1\t^a\tqueues\t{"max-length":5}\t3\n',
        ),
        (
            formatting.Style(quiet=True),
            'vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n/\tp1\t^a\tqueues\t{"max-length":5}\t3\n',
        ),
        (formatting.Style(silent=True), '/\tp1\t^a\tqueues\t{"max-length":5}\t3\n'),
        (
            formatting.Style(json=True),
            "[\n"
            '{"vhost":"/","name":"p1","pattern":"^a","apply-to":"queues",'
            '"definition":"{\\"max-length\\":5}","priority":3}\n'
            "]\n",
        ),
    ],
)
def test_listing_styles(style, stdout):
    printed = formatting.printed(BANNER, Outcome(0, result=POLICIES), style)
    assert printed == formatting.Printed(stdout, "")


def test_an_empty_listing_prints_no_header():
    empty = plans.Table(("name", "messages"), ())
    assert formatting.printed(
        ("Listing ...",), Outcome(0, result=empty), formatting.Style()
    ).stdout == ("Listing ...\n")
    assert (
        formatting.printed((), Outcome(0, result=empty), formatting.Style(json=True)).stdout
        == "[]\n"
    )


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (True, "plain", "true"),
        (False, "plain", "false"),
        (None, "plain", ""),
        (3, "plain", "3"),
        ({}, "pairs", "[]"),
        (
            {"x-max-length": 5, "x-queue-type": "classic"},
            "pairs",
            '[{"x-max-length",5}, {"x-queue-type","classic"}]',
        ),
        (["administrator", "monitoring"], "tags", "[administrator, monitoring]"),
        ("administrator,monitoring", "tags", "[administrator, monitoring]"),
        ([], "tags", "[]"),
        ("str", "json", '"str"'),
        ({"a": [1, 2]}, "json", '{"a":[1,2]}'),
    ],
)
def test_cells(value, kind, text):
    assert formatting.cell(value, kind) == text


def test_errors_are_one_line_on_stderr_after_the_banner():
    printed = formatting.printed(
        ("Clearing policy ...",), Outcome(69, error="Parameter does not exist"), formatting.Style()
    )
    assert printed == formatting.Printed(
        "Clearing policy ...\n", "Error: Parameter does not exist\n"
    )


def test_notes_are_hidden_by_quiet_but_payload_text_is_not():
    done = Outcome(0, result=plans.Done(("Done.",)))
    assert formatting.printed((), done, formatting.Style(quiet=True)).stdout == ""
    text = Outcome(0, result=plans.Text(('{"max-queues":3}',)))
    assert formatting.printed(("Listing ...",), text, formatting.Style(quiet=True)).stdout == (
        '{"max-queues":3}\n'
    )
