"""Instance management: a Broker CR becomes a running hutch-broker, and its status says what runs.

``brokers`` applies the children (``children/``, one builder per object) and reports through
``brokerstatus``; ``memory``, ``overrides`` and ``podstate`` are the pure decisions under them.
Nothing here knows the topology kinds: what a Broker's timer does for the objects waiting on it
is wired in ``hutch_operator.handlers.brokers``, the one place both halves meet.
"""
