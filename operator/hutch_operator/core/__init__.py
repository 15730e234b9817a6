"""What both halves of the operator stand on: errors, conditions, settings, the two clients.

``instances`` (Broker CRs as running hutch-brokers) and ``topology`` (the kinds reconciled over
the management API) never import each other; anything both need lives here: the error tree and
its Ready reasons, condition upserts, settings from the environment, metrics, the Kubernetes
client, the management-API client and how a ``brokerRef`` or ``connectionSecret`` reaches a
broker, and the Kopf patches. Nothing here knows a kind's handlers (``operator-core``).
"""
