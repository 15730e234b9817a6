"""Sans-I/O AMQP 0-9-1 server protocol: frames, connection and channel state, reply-code errors.

No asyncio, sockets or clock reads here (import-linter keeps it so).  ``connection`` is the state
machine, ``events`` its output vocabulary, ``errors`` the reply-code error tree, ``codec`` the
frame codec (pamqp plus hand-written hot paths), ``properties`` lazy access to raw content
headers and ``sasl`` the PLAIN / AMQPLAIN responses.
"""
