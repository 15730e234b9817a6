"""argv -> an Invocation: rabbitmqctl's option grammar, pure.

Why hand-written rather than argparse: rabbitmqctl accepts its options anywhere on the line
(``list_queues -p / name --formatter json``), takes column names as free positionals, and answers
every mistake with exit code 64 and one line; argparse would print its own usage and exit by
itself. Which options a verb accepts is checked later, against the verb's table (verbs/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Options that take a value, by every spelling; the first name is the canonical key.
VALUE_OPTIONS: dict[str, str] = {
    "-p": "vhost",
    "--vhost": "vhost",
    "--url": "url",
    "--username": "username",
    "--password": "password",
    "--credentials-file": "credentials-file",
    "--cacert": "cacert",
    "--formatter": "formatter",
    "-t": "timeout",
    "--timeout": "timeout",
    "--priority": "priority",
    "--apply-to": "apply-to",
    "--description": "description",
    "--tags": "tags",
    "--default-queue-type": "default-queue-type",
    "--user": "user",
    "--reason": "reason",
}
FLAG_OPTIONS: dict[str, str] = {
    "-q": "quiet",
    "--quiet": "quiet",
    "-s": "silent",
    "--silent": "silent",
    "--no-table-headers": "no-table-headers",
    "--if-empty": "if-empty",
    "--if-unused": "if-unused",
    "--help": "help",
    "-h": "help",
}
# Accepted by every verb: where the broker is, how to print.
GLOBAL_OPTIONS = frozenset(
    {
        "vhost", "url", "username", "password", "credentials-file", "cacert", "formatter",
        "timeout", "quiet", "silent", "no-table-headers", "help",
    }
)  # fmt: skip
FORMATTERS = ("table", "json")
_NEGATIVE_NUMBER = re.compile(r"^-\d")


class UsageError(Exception):
    """A command line rabbitmqctl would refuse with exit code 64."""


@dataclass(frozen=True)
class Invocation:
    verb: str | None
    positionals: tuple[str, ...]
    options: dict[str, str | bool] = field(default_factory=dict)

    def value(self, key: str, default: str | None = None) -> str | None:
        found = self.options.get(key)
        return found if isinstance(found, str) else default

    def flag(self, key: str) -> bool:
        return self.options.get(key) is True


def parse(argv: list[str]) -> Invocation:
    """Split argv into the verb, its positionals and every option (global or not)."""
    options: dict[str, str | bool] = {}
    words: list[str] = []
    words_left = iter(argv)
    for word in words_left:
        if word == "--":
            words.extend(words_left)
            break
        name, _, inline = word.partition("=")
        if name in VALUE_OPTIONS:
            value = inline if "=" in word else next(words_left, None)
            if value is None:
                raise UsageError(f"option {name} needs a value")
            options[VALUE_OPTIONS[name]] = value
        elif word in FLAG_OPTIONS:
            options[FLAG_OPTIONS[word]] = True
        elif word.startswith("-") and word != "-" and not _NEGATIVE_NUMBER.match(word):
            raise UsageError(f"Invalid options for this command: {word}")
        else:
            words.append(word)
    formatter = options.get("formatter")
    if isinstance(formatter, str) and formatter not in FORMATTERS:
        raise UsageError(f"formatter {formatter!r} is not one of: {', '.join(FORMATTERS)}")
    verb = words[0] if words else None
    return Invocation(verb=verb, positionals=tuple(words[1:]), options=options)
