"""Applies protocol events to the model and turns results into protocol output (sync).

The modules import one way, highest first (the ``dispatch-one-way`` contract in
.importlinter holds it, type-checking imports included)::

    sessions > methods > publishing | declares > channels > context
        > replyto | flow | commits | turns

A lower module that holds or calls a higher one's objects declares the little it uses of
them as a ``typing.Protocol`` (``commits.Waiter``, ``flow.Publisher``,
``replyto.ReplyChannel``, ``context.Member``, ``channels.ChannelOwner``), so a change to a
session never ripples down into the rules for confirms, flow control or reply-to.
"""
