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
