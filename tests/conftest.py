"""Root test configuration: registers the shared pytest plugins.

``hutch_testing.localkube_plugin`` (the local Kubernetes plane's fixtures and hooks) is also
the ``pytest11`` entry point of hutch-testing (testing/pyproject.toml), registered under its module
name, so naming it here as well loads it once: this line serves a venv installed before the entry
point existed. ``hutch_testing.pytest_plugin`` (brokers on loopback, the test levels),
``hutch_testing.broker_plugin`` (a test's hutch-broker: fresh, or a vhost on its module's shared
one), ``hutch_testing.brokerstarts`` (``--broker-starts``: hutch-broker starts per module) and
``hutch_testing.backgroundbuild`` (a test that runs helm waits for scripts/test.sh's background
build before its timeout starts) are needed by tests/ only.
"""

pytest_plugins = [
    "hutch_testing.localkube_plugin",
    "hutch_testing.pytest_plugin",
    "hutch_testing.broker_plugin",
    "hutch_testing.brokerstarts",
    "hutch_testing.backgroundbuild",
]
