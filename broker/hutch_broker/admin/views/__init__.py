"""Pure model -> JSON functions, one module per kind of object.

Nothing here reads a clock, a socket or a request: every input is a model
object or a plain value, so each shape can be checked against the captured
RabbitMQ 3.10.8 responses in a unit test.
"""
