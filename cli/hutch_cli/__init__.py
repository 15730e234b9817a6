"""hutch_cli: hutchctl, rabbitmqctl's verbs for hutch-broker over its management HTTP API.

Why a package of its own: the tool ships in the product wheel (a console script) but is a client
like any other, so it imports nothing from the broker, the operator or Spark (.importlinter) and
works wherever the management port is reachable: a local broker, a Pod through a port-forward, or
HTTPS with a CA file. Layout, pure parts first:

- ``arguments``: argv -> an ``Invocation`` (global options, verb, positionals, verb options);
- ``verbs``: an ``Invocation`` -> a ``plans.Plan`` (HTTP requests and how to read the answers);
- ``execution``: runs a plan through an injected ``send`` and turns answers into an ``Outcome``;
- ``formatting``: an ``Outcome`` -> the text rabbitmqctl would print;
- ``client`` (the only module doing network I/O) and ``hutchctl`` (the thin shell: sys.argv, env,
  files, stdout/stderr, exit code). ``client`` is reusable by other front ends (kubectl hutch ctl).

``kubectl hutch`` (docs/kubectl-hutch.md), the kubectl plugin, lives here too: ``kubeargs``
(argv -> a command), ``kubeplans`` and ``kubejobs`` (kubectl argument lists, the Broker and
perf-test Job manifests, reading kubectl's JSON; pure), ``kubectl_hutch`` (the shell running
kubectl and hutchctl), and the perf-test load generator ``perffigures`` (pure) and
``perftest`` (its sockets), which the Job runs in the broker image.
"""

# The CLI's own version, as cli/pyproject.toml sets it (tests/cli keeps the two equal): what
# ``kubectl hutch version`` prints, whichever distribution installed the package (hutch-cli in
# the broker image, the root project in development), so no distribution is looked up by name.
__version__ = "0.1.0"
