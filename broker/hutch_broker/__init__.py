"""hutch-broker: an AMQP 0-9-1 broker with RabbitMQ extension semantics."""

__version__ = "0.1.0"
