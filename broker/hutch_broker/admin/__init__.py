"""The management HTTP API: RabbitMQ's ``/api`` subset and ``/metrics``.

The contract: docs/contracts/broker.md#http-api.

Why it is split the way it is: the Hutch operator, ``rabbitmqadmin`` and the
Spark connector all speak RabbitMQ's management API, so the JSON shapes and
error bodies are a contract.  Shapes are built by pure functions in
``views/`` (model object in, JSON dict out, testable without a socket);
``handlers/`` holds the thin aiohttp glue that parses a request, checks who
may do it, calls the model and a view; ``app.make_app`` wires both together
with authentication and error translation.
"""
