"""connection.update-secret is answered with update-secret-ok, as RabbitMQ 3.10.8 does (issue 14).

pika, the Java client's credentials refresh and .NET send it to refresh OAuth tokens; before,
hutch-broker closed the connection with 540 NOT_IMPLEMENTED.
"""


def test_update_secret_keeps_the_connection_working(target):
    conn = target.connect()
    conn.update_secret("guest", "token refresh")  # blocks for update-secret-ok
    ch = conn.channel()
    q = target.name("after-refresh")
    ch.queue_declare(q)
    ch.basic_publish("", q, b"still working")
    _method, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"still working"
    assert conn.is_open
    conn.close()
