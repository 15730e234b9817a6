"""argv -> a KubeCommand for ``kubectl hutch``, pure.

Why argparse here when hutchctl hand-writes its grammar: hutchctl copies rabbitmqctl's odd
grammar (options anywhere, exit code 64); a kubectl plugin follows kubectl's own conventions
(``-n``/``--context``/``--kubeconfig``, ``--flag value``), which argparse already knows. kubectl
refuses flags placed before a plugin's name (``kubectl -n ns hutch ...``), so the plugin takes
them itself, before or after its verb. ``ctl`` and ``perf-test`` pass every word after the
Broker's name through untouched (hutchctl's verbs, the load generator's options).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, NoReturn

VERBS = (
    "create", "list", "get", "delete", "secrets", "manage", "ctl", "perf-test", "tail",
    "pause-reconciliation", "resume-reconciliation", "list-paused", "version",
)  # fmt: skip


class UsageError(Exception):
    """A command line the plugin refuses before running anything (exit code 2)."""


@dataclass(frozen=True)
class Scope:
    """Which cluster and namespace every kubectl call uses (kubectl's own flags)."""

    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    all_namespaces: bool = False

    def flags(self) -> list[str]:
        found: list[str] = []
        if self.kubeconfig:
            found.append(f"--kubeconfig={self.kubeconfig}")
        if self.context:
            found.append(f"--context={self.context}")
        if self.namespace:
            found.append(f"--namespace={self.namespace}")
        return found


@dataclass(frozen=True)
class KubeCommand:
    verb: str
    scope: Scope
    names: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    rest: tuple[str, ...] = ()  # ctl's hutchctl words, perf-test's generator options

    @property
    def name(self) -> str:
        return self.names[0] if self.names else ""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise UsageError(message or f"exit {status}")


def _scope_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("kubectl options")
    group.add_argument("-n", "--namespace", default=argparse.SUPPRESS)
    group.add_argument("--context", default=argparse.SUPPRESS)
    group.add_argument("--kubeconfig", default=argparse.SUPPRESS)


def _parser() -> argparse.ArgumentParser:
    root = _Parser(prog="kubectl hutch", add_help=False)
    _scope_options(root)
    verbs = root.add_subparsers(dest="verb", parser_class=_Parser)
    made: dict[str, argparse.ArgumentParser] = {}
    for verb in VERBS:
        made[verb] = verbs.add_parser(verb, add_help=False)
        _scope_options(made[verb])
    create = made["create"]
    create.add_argument("names", nargs=1, metavar="NAME")
    create.add_argument("--replicas", type=int)
    create.add_argument("--image")
    create.add_argument("--image-pull-secret", action="append", default=[])
    create.add_argument("--memory", help="memory request and limit (e.g. 1Gi)")
    create.add_argument("--memory-request")
    create.add_argument("--memory-limit")
    create.add_argument("--cpu-request")
    create.add_argument("--cpu-limit")
    create.add_argument("--memory-high-watermark", type=float)
    create.add_argument("--storage-size")
    create.add_argument("--storage-class")
    create.add_argument("--service", choices=("ClusterIP", "NodePort", "LoadBalancer"))
    create.add_argument("--service-annotation", action="append", default=[])
    create.add_argument("--tls-secret")
    create.add_argument("--tls-ca-secret")
    create.add_argument("--disable-non-tls-listeners", action="store_true")
    create.add_argument("--allow-namespace", action="append", default=[])
    create.add_argument("--additional-config-file")
    create.add_argument("--termination-grace-period", type=int)
    made["list"].add_argument("-A", "--all-namespaces", action="store_true")
    made["list-paused"].add_argument("-A", "--all-namespaces", action="store_true")
    made["get"].add_argument("names", nargs=1, metavar="NAME")
    made["delete"].add_argument("names", nargs="+", metavar="NAME")
    made["secrets"].add_argument("names", nargs=1, metavar="NAME")
    made["secrets"].add_argument("--user", help="a User object's credentials instead")
    made["manage"].add_argument("names", nargs=1, metavar="NAME")
    made["manage"].add_argument("--port", type=int, help="local port (0: any free port)")
    made["manage"].add_argument("--open", action="store_true", help="open a browser too")
    made["tail"].add_argument("names", nargs=1, metavar="NAME")
    made["tail"].add_argument("--no-follow", action="store_true")
    made["tail"].add_argument("--tail", type=int, default=-1, dest="lines")
    for verb in ("pause-reconciliation", "resume-reconciliation"):
        made[verb].add_argument("names", nargs="+", metavar="[KIND/]NAME")
    for verb in ("ctl", "perf-test"):
        made[verb].add_argument("names", nargs=1, metavar="NAME")
        made[verb].add_argument("rest", nargs=argparse.REMAINDER)
    made["perf-test"].add_argument("--no-wait", action="store_true")
    return root


SCOPE_FLAGS = ("-n", "--namespace", "--context", "--kubeconfig")
PASSTHROUGH_VERBS = ("ctl", "perf-test")
OWN_FLAGS = ("--no-wait",)  # perf-test's own flags, before the Broker's name


def parse(argv: list[str]) -> KubeCommand:
    if not argv or argv[0] in ("-h", "--help", "help"):
        return KubeCommand("help", Scope())
    if argv == ["--version"]:  # as kubectl and most tools spell it, besides the verb
        return KubeCommand("version", Scope())
    parsed = vars(_parser().parse_args(_split_passthrough(list(argv))))
    verb = parsed.pop("verb", None)
    if verb is None:
        raise UsageError(f"a command is needed: one of {', '.join(VERBS)}")
    scope = Scope(
        namespace=parsed.pop("namespace", None),
        context=parsed.pop("context", None),
        kubeconfig=parsed.pop("kubeconfig", None),
        all_namespaces=bool(parsed.pop("all_namespaces", False)),
    )
    names = tuple(parsed.pop("names", ()))
    rest = tuple(parsed.pop("rest", ()))
    if rest[:1] == ("--",):
        rest = rest[1:]
    if verb == "ctl" and not rest:
        raise UsageError("ctl needs a hutchctl command: kubectl hutch ctl NAME -- list_queues")
    return KubeCommand(verb, scope, names, parsed, rest)


def _skip_flags(words: list[str], start: int, own: tuple[str, ...] = ()) -> int:
    """The index of the first word at or after ``start`` that is not a kubectl scope flag
    (with its value) or one of ``own``."""
    at = start
    while at < len(words):
        word = words[at]
        if word in SCOPE_FLAGS:
            at += 2
        elif word.startswith(tuple(f"{flag}=" for flag in SCOPE_FLAGS)) or word in own:
            at += 1
        else:
            return at
    return at


def _split_passthrough(words: list[str]) -> list[str]:
    """For ``ctl`` and ``perf-test``: the plugin's flags before the Broker's name stay the
    plugin's; every word after the name is handed through (after a ``--``), even one that looks
    like a plugin flag (``hutchctl -p /``, the generator's ``-n``-less options)."""
    verb_at = _skip_flags(words, 0)
    if verb_at >= len(words) or words[verb_at] not in PASSTHROUGH_VERBS:
        return words
    name_at = _skip_flags(words, verb_at + 1, OWN_FLAGS)
    if name_at >= len(words):
        return words
    after = words[name_at + 1 :]
    if after[:1] == ["--"]:
        after = after[1:]
    return [*words[: name_at + 1], "--", *after]
