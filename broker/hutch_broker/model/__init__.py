"""The broker state: vhosts, exchanges, queues, bindings, policies, users (sync, clock given)."""
