"""A definitions import of 5,000 queues is all or nothing, and consistent beside AMQP deletes.

On a real hutch-broker: an invalid document (a bad binding after 5,000 good queues and 5,000
bindings) is refused with a clear reason and changes nothing; and a client deleting the
document's queues while the import applies leaves no binding pointing at a missing queue.

Why a module of its own: these measure nothing (no clock, no canary, no CPU figure), so they run
in the broker level's parallel pass; the import's canary is test_definitions_isolation.py, in
the serial pass (hutch_testing.serial).
"""

import threading

import pytest
from hutch_demo import management
from hutch_testing import definitions as documents
from hutch_testing.clients import connect

QUEUES = 5000
EXCHANGES = 50


@pytest.mark.timeout(240)
def test_an_invalid_document_of_5000_queues_changes_nothing(hutch_broker):
    admin = management.Management(hutch_broker, timeout=180.0)
    assert admin.put("/vhosts/import-a", {}).ok
    before = admin.get("/definitions").body
    refused = admin.post(
        "/definitions/import-a",
        documents.imported(QUEUES, EXCHANGES, QUEUES, bad_binding_at_the_end=True),
    )
    assert refused.status == 400, refused
    assert "no-such-queue" in refused.body["reason"]
    assert admin.get("/definitions").body == before


@pytest.mark.timeout(240)
def test_an_import_racing_with_amqp_deletes_ends_consistent(hutch_broker):
    """A client deletes the document's queues while the import applies: each delete is either
    before the queue's declare (then the import declares it) or after (then its bindings go
    too); the import answers 204 and no binding is left pointing at a missing queue."""
    admin = management.Management(hutch_broker, timeout=180.0)
    assert admin.put("/vhosts/race", {}).ok
    assert admin.put("/permissions/race/guest", {"configure": ".*", "write": ".*", "read": ".*"}).ok
    answer: list[management.Response] = []
    importer = threading.Thread(
        target=lambda: answer.append(
            admin.post("/definitions/race", documents.imported(QUEUES, EXCHANGES, QUEUES))
        )
    )
    connection = connect(hutch_broker, vhost="race")
    channel = connection.channel()
    importer.start()
    deleted = 0
    while importer.is_alive():
        for index in range(0, QUEUES, 97):
            channel.queue_delete(f"imported-{index:05d}")
            deleted += 1
    importer.join()
    connection.close()
    assert answer[0].status == 204, answer[0]
    assert deleted > 0
    exported = admin.get("/definitions/race").body
    queues = {item["name"] for item in exported["queues"]}
    assert all(item["destination"] in queues for item in exported["bindings"])
    assert admin.post("/definitions/race", exported).status == 204  # and it imports as it is
