"""``GET /metrics`` (API-14): Prometheus text, rabbitmq_prometheus names, no authentication."""

from prometheus_client.parser import text_string_to_metric_families


async def scrape(api):
    async with api.client.get("/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await response.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_api_14_metrics_without_auth(topology, memory):
    samples = await scrape(topology)
    queue = (("queue", "mgmt.q"), ("vhost", "/"))
    assert samples[("rabbitmq_queue_messages_ready", queue)] == 1
    assert samples[("rabbitmq_queue_messages_unacked", queue)] == 0
    assert samples[("rabbitmq_queues", ())] == 3
    assert samples[("rabbitmq_connections", ())] == 0
    assert samples[("rabbitmq_channels", ())] == 0
    assert samples[("rabbitmq_global_messages_received_total", ())] == 1
    assert samples[("rabbitmq_resident_memory_limit_bytes", ())] == memory.mem_limit
    assert samples[("rabbitmq_process_resident_memory_bytes", ())] == memory.mem_used
    assert samples[("rabbitmq_alarms_memory_used_watermark", ())] == 0


async def test_api_14_alarm_metric(api, memory):
    memory.mem_used = 10**12
    samples = await scrape(api)
    assert samples[("rabbitmq_alarms_memory_used_watermark", ())] == 1


async def test_management_writes_are_counted_by_route_and_logged(api, caplog):
    """Every request that may change state, refused or not, with its route template."""
    caplog.set_level("INFO", logger="hutch_broker.admin.audit")
    assert (await api.put("/api/queues/%2F/audited", {"durable": True})).status == 201
    assert (await api.put("/api/queues/%2F/audited", {"durable": True})).status == 204
    assert (await api.put("/api/queues/%2F/audited", {"durable": False})).status == 400
    assert (await api.get("/api/queues/%2F/audited")).status == 200
    assert (await api.delete("/api/queues/%2F/audited")).status == 204
    assert (await api.delete("/api/no/such/route")).status == 404

    samples = await scrape(api)

    def writes(method, route, code):
        labels = (("code", code), ("method", method), ("route", route))
        return samples.get(("hutch_management_writes_total", labels), 0)

    queue = "/api/queues/{vhost}/{queue}"
    assert writes("PUT", queue, "2xx") == 2
    assert writes("PUT", queue, "4xx") == 1
    assert writes("DELETE", queue, "2xx") == 1
    assert writes("DELETE", "unmatched", "4xx") == 1
    assert not [key for key in samples if key[0] == "hutch_management_writes_total"
                and ("method", "GET") in key[1]]  # fmt: skip
    lines = [r.getMessage() for r in caplog.records if r.name == "hutch_broker.admin.audit"]
    assert lines == [
        "management PUT /api/queues/%2F/audited -> 201 (user guest from 127.0.0.1)",
        "management PUT /api/queues/%2F/audited -> 204 (user guest from 127.0.0.1)",
        "management PUT /api/queues/%2F/audited -> 400 (user guest from 127.0.0.1)",
        "management DELETE /api/queues/%2F/audited -> 204 (user guest from 127.0.0.1)",
        "management DELETE /api/no/such/route -> 404 (user guest from 127.0.0.1)",
    ]
