"""aiohttp glue, one module per resource: parse, authorise, call the model, render a view.

Each module exposes ``routes`` (an ``aiohttp.web.RouteTableDef``) that
``app.make_app`` registers.  Handlers stay a few lines long: the shapes are
in ``views``, the rules in ``auth``/``bodies``/``listing``, the message
operations in ``messaging``.
"""
