"""Command line -> requests, as tables: what each verb sends and what a status means for it.

The exit codes and messages are rabbitmqctl 3.10.8's for the same mistake (tests/sidebyside/
test_hutchctl.py measures them on the real tool).
"""

import pytest
from hutch_cli import plans, verbs
from hutch_cli.plans import Fail, Request, Substitute


def requests(plan, bodies=None):
    return [step.resolve(bodies or []) for step in plan.steps]


def test_set_policy_checks_the_vhost_then_puts_the_policy(context):
    plan = verbs.plan(
        context("set_policy", "-p", "v/1", "p 1", "^q", '{"max-length":5}', "--priority", "3")
    )
    assert plan.banner == (
        'Setting policy "p 1" for pattern "^q" to "{"max-length":5}" with priority "3" for vhost "v/1" ...',
    )
    assert requests(plan) == [
        Request("GET", "/api/vhosts/v%2F1"),
        Request(
            "PUT",
            "/api/policies/v%2F1/p%201",
            {"pattern": "^q", "definition": {"max-length": 5}, "priority": 3, "apply-to": "all"},
        ),
    ]
    assert plan.steps[0].on_status == {404: Fail(65, "Virtual host 'v/1' does not exist")}


def test_operator_policy_uses_its_own_path_and_wording(context):
    plan = verbs.plan(context("set_operator_policy", "o", "^q", "{}", "--apply-to", "queues"))
    assert plan.banner[0].startswith('Setting operator policy override "o"')
    assert requests(plan)[1] == Request(
        "PUT",
        "/api/operator-policies/%2F/o",
        {"pattern": "^q", "definition": {}, "priority": 0, "apply-to": "queues"},
    )


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["nosuchverb"], 64, "Command 'nosuchverb' not found"),
        ([], 64, "no command given"),
        (["set_policy", "x"], 64, "not enough arguments"),
        (["clear_policy", "a", "b"], 64, "too many arguments"),
        (["set_policy", "x", "^a", "{}", "--priority", "abc"], 64, "--priority : abc"),
        (["list_queues", "--priority", "1"], 64, "Invalid options for this command: --priority"),
        (
            ["list_queues", "name", "bogus", "worse"],
            64,
            "Info key(s) bogus,worse are not supported",
        ),
    ],
)
def test_usage_errors_are_64_before_any_request(context, argv, code, message):
    failure = verbs.plan(context(*argv))
    assert isinstance(failure, Fail)
    assert failure.code == code
    assert message in failure.message


@pytest.mark.parametrize(
    "argv",
    [
        ["set_policy", "x", "^a", "notjson"],
        ["set_operator_policy", "x", "^a", "{"],
        ["set_parameter", "c", "n", "bad"],
        ["set_global_parameter", "g", "bad"],
        ["set_vhost_limits", "bad"],
        ["set_user_limits", "u", "bad"],
    ],
)
def test_bad_json_fails_69_after_the_banner_without_a_request(context, argv):
    plan = verbs.plan(context(*argv))
    assert plan.banner
    assert plan.steps == ()
    assert plan.render([]) == Fail(69, "JSON decoding error. Reason: badarg")


def test_set_vhost_limits_replaces_the_whole_object(context):
    plan = verbs.plan(context("set_vhost_limits", "-p", "v", '{"max-queues":7}'))
    assert requests(plan)[1] == Request(
        "PUT",
        "/api/parameters/vhost-limits/v/limits",
        {"component": "vhost-limits", "vhost": "v", "name": "limits", "value": {"max-queues": 7}},
    )


def test_set_user_limits_sets_key_by_key(context):
    plan = verbs.plan(context("set_user_limits", "u", '{"max-channels":3,"max-connections":2}'))
    assert requests(plan) == [
        Request("GET", "/api/users/u"),
        Request("PUT", "/api/user-limits/u/max-channels", {"value": 3}),
        Request("PUT", "/api/user-limits/u/max-connections", {"value": 2}),
    ]


def test_set_permissions_checks_user_first_then_vhost(context):
    plan = verbs.plan(context("set_permissions", "-p", "v", "u", ".*", "", "^r"))
    assert [step.on_status for step in plan.steps[:2]] == [
        {404: Fail(67, "User u does not exist")},
        {404: Fail(69, "Virtual host v does not exist")},
    ]
    assert requests(plan)[2] == Request(
        "PUT", "/api/permissions/v/u", {"configure": ".*", "write": "", "read": "^r"}
    )


def test_clear_permissions_that_are_not_set_succeeds(context):
    plan = verbs.plan(context("clear_permissions", "u"))
    assert plan.steps[2].on_status == {404: Substitute()}


def test_add_user_refuses_an_existing_user_with_70(context):
    plan = verbs.plan(context("add_user", "u", "pw"))
    assert plan.steps[0].on_status[200] == Fail(70, 'User "u" already exists')
    assert requests(plan)[1] == Request("PUT", "/api/users/u", {"password": "pw", "tags": ""})


def test_add_user_reads_the_password_from_stdin_or_fails_65(context):
    piped = verbs.plan(context("add_user", "u", password="secret"))
    assert requests(piped)[1].body == {"password": "secret", "tags": ""}
    missing = verbs.plan(context("add_user", "u"))
    assert missing.render([]) == Fail(65, "Password is not provided via argument or stdin")


def test_change_password_keeps_the_tags(context):
    plan = verbs.plan(context("change_password", "u", "new"))
    user = {"name": "u", "tags": ["monitoring", "policymaker"]}
    assert requests(plan, [user])[1] == Request(
        "PUT", "/api/users/u", {"password": "new", "tags": "monitoring,policymaker"}
    )


def test_set_user_tags_keeps_the_password(context):
    plan = verbs.plan(context("set_user_tags", "u", "administrator", "monitoring"))
    assert plan.banner == ('Setting tags for user "u" to [administrator, monitoring] ...',)
    user = {"name": "u", "password_hash": "H", "hashing_algorithm": "A", "tags": []}
    assert requests(plan, [user])[1] == Request(
        "PUT",
        "/api/users/u",
        {"password_hash": "H", "hashing_algorithm": "A", "tags": "administrator,monitoring"},
    )


def test_listing_an_unknown_vhost_is_empty_for_queues_but_65_for_policies(context):
    queues = verbs.plan(context("list_queues", "-p", "nope"))
    assert queues.steps[0].on_status == {404: Substitute([])}
    policies = verbs.plan(context("list_policies", "-p", "nope"))
    assert policies.steps[0].on_status == {404: Fail(65, "Virtual host 'nope' does not exist")}


def test_list_queues_columns(context):
    plan = verbs.plan(context("list_queues", "name", "messages", "consumers", "arguments"))
    items = [{"name": "q", "messages": 2, "consumers": 1, "arguments": {"x-max-length": 5}}]
    assert plan.render([items]) == plans.Table(
        ("name", "messages", "consumers", "arguments"),
        (("q", 2, 1, {"x-max-length": 5}),),
        ("plain", "plain", "plain", "pairs"),
    )


def test_list_parameters_shows_operator_policies_but_not_policies(context):
    plan = verbs.plan(context("list_parameters", "-p", "v"))
    listed = [
        {"vhost": "v", "component": "vhost-limits", "name": "limits", "value": {"max-queues": 1}},
        {"vhost": "v", "component": "operator_policy", "name": "o", "value": {"pattern": "^"}},
        {"vhost": "v", "component": "policy", "name": "p", "value": {}},
        {"vhost": "other", "component": "vhost-limits", "name": "limits", "value": {}},
    ]
    table = plan.render([{}, listed])
    assert [row[:2] for row in table.rows] == [("vhost-limits", "limits"), ("operator_policy", "o")]


def test_delete_queue_reports_the_ready_messages(context):
    plan = verbs.plan(context("delete_queue", "q", "--if-empty"))
    assert plan.banner == ("Deleting queue 'q' on vhost '/' if queue is empty ...",)
    assert requests(plan)[1] == Request("DELETE", "/api/queues/%2F/q?if-empty=true")
    assert plan.steps[0].on_status == {404: Fail(64, "Queue not found")}
    assert plan.render([{"messages_ready": 4}, None]) == plans.Done(
        ("Queue was successfully deleted with 4 ready messages",)
    )


def test_purge_of_a_missing_queue_is_69(context):
    plan = verbs.plan(context("purge_queue", "q"))
    assert requests(plan) == [Request("DELETE", "/api/queues/%2F/q/contents")]
    assert plan.steps[0].on_status == {404: Fail(69, "not_found")}


def test_close_connection_passes_the_reason(context):
    plan = verbs.plan(context("close_connection", "127.0.0.1:1 -> 127.0.0.1:2", "bye"))
    assert requests(plan) == [
        Request(
            "DELETE",
            "/api/connections/127.0.0.1%3A1%20-%3E%20127.0.0.1%3A2",
            headers=(("X-Reason", "bye"),),
        )
    ]


def test_import_definitions_reads_and_validates_the_file(context):
    files = {"good.json": '{"vhosts":[{"name":"v"}]}', "bad.json": "{bad"}
    good = verbs.plan(context("import_definitions", "good.json", files=files))
    assert requests(good) == [Request("POST", "/api/definitions", {"vhosts": [{"name": "v"}]})]
    bad = verbs.plan(context("import_definitions", "bad.json", files=files))
    assert bad.steps == ()
    assert bad.render([]).code == 65
    missing = verbs.plan(context("import_definitions", "nope.json", files=files))
    assert isinstance(missing, Fail)
    assert missing.code == 65


def test_export_definitions_to_stdout_or_a_file(context):
    to_stdout = verbs.plan(context("export_definitions", "-"))
    assert to_stdout.banner == ()
    assert to_stdout.render([{"vhosts": []}]) == plans.Text(('{"vhosts":[]}',))
    to_file = verbs.plan(context("export_definitions", "out.json"))
    assert to_file.render([{"a": 1}]) == plans.WriteFile("out.json", '{"a":1}\n')


def test_every_required_verb_is_in_the_table():
    required = [
        "set_policy",
        "clear_policy",
        "list_policies",
        "set_operator_policy",
        "clear_operator_policy",
        "list_operator_policies",
        "set_parameter",
        "clear_parameter",
        "list_parameters",
        "set_global_parameter",
        "clear_global_parameter",
        "list_global_parameters",
        "list_queues",
        "list_exchanges",
        "list_bindings",
        "list_connections",
        "list_channels",
        "list_consumers",
        "add_vhost",
        "delete_vhost",
        "list_vhosts",
        "add_user",
        "delete_user",
        "change_password",
        "set_user_tags",
        "list_users",
        "set_permissions",
        "clear_permissions",
        "list_permissions",
        "set_topic_permissions",
        "set_vhost_limits",
        "set_user_limits",
        "purge_queue",
        "delete_queue",
        "close_connection",
        "export_definitions",
        "import_definitions",
        "status",
        "await_startup",
    ]
    assert set(required) <= set(verbs.VERBS)
