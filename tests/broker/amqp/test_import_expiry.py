"""An imported queue starts its x-expires lease at the import (issue 11, item 2).

Imported queues used to get a last-used time of 0 (1970), so every imported queue with
``x-expires`` and no consumer was deleted by the next expiry tick, messages and all.
"""

import time

from hutch_demo import management

DEFINITIONS = {
    "queues": [
        {
            "name": "celery-reply",
            "vhost": "/",
            "durable": True,
            "auto_delete": False,
            "arguments": {"x-expires": 3000},
        }
    ]
}


def test_an_imported_queue_with_x_expires_lives_out_its_lease(hutch_broker):
    mgmt = management.Management(hutch_broker)
    assert mgmt.post("/definitions", DEFINITIONS).ok
    time.sleep(1.0)  # ten expiry ticks
    assert mgmt.queue_exists("celery-reply"), "deleted at once: its lease started in 1970"
    idle_since = mgmt.queue("celery-reply")["idle_since"]
    assert not idle_since.startswith("1970"), idle_since
    deadline = time.monotonic() + 10
    while mgmt.queue_exists("celery-reply") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not mgmt.queue_exists("celery-reply"), "x-expires still applies"
