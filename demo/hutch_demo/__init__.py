"""The demo chain: the main job behind ``make run`` and the chain the e2e suite drives.

Why a package of its own: a newcomer looking for how Hutch is deployed and used end to end
should find it by name, not inside the test tooling. ``quickstart`` is the entry point
(``python -m hutch_demo.quickstart``); ``chain`` holds its steps, ``sparkpods``,
``sparksubmit`` and ``sparkoperator`` the Spark job's ways onto the node, and the small
process, port and probe helpers it runs on sit beside them. It imports the product packages
and ``hutch_localkube`` only; the test tooling (``hutch_testing``) imports it, never the
reverse (an import contract in .importlinter).
"""
