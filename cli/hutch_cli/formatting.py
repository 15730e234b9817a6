"""An Outcome -> the text rabbitmqctl prints: banner, header, tab-separated rows, or JSON.

Why pure and apart: output is a compatibility surface (scripts cut -f the columns), so each rule
measured on rabbitmqctl 3.10.8 is a table-driven test: the banner goes to stdout unless --quiet or
--silent; --silent and --no-table-headers drop the header; --formatter json prints an array of
objects and no banner; booleans print as true/false, arguments as [{"key",value}], tags as
[a, b], definitions and parameter values as compact JSON; an error is one line on stderr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hutch_cli import plans
from hutch_cli.execution import Outcome


@dataclass(frozen=True)
class Style:
    quiet: bool = False
    silent: bool = False
    no_headers: bool = False
    json: bool = False

    @property
    def banner(self) -> bool:
        return not (self.quiet or self.silent or self.json)


@dataclass(frozen=True)
class Printed:
    stdout: str
    stderr: str


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def cell(value: Any, kind: str = "plain") -> str:
    """One value in a tab-separated row."""
    if kind == "pairs":
        pairs = value.items() if isinstance(value, dict) else []
        return "[" + ", ".join(f'{{"{key}",{compact(item)}}}' for key, item in pairs) + "]"
    if kind == "tags":
        tags = value if isinstance(value, list) else [t for t in str(value or "").split(",") if t]
        return "[" + ", ".join(str(tag) for tag in tags) + "]"
    if kind == "json":
        return compact(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return compact(value)
    return str(value)


def json_value(value: Any, kind: str = "plain") -> Any:
    """One value in --formatter json output (definitions and values stay JSON text)."""
    return compact(value) if kind == "json" else value


def table_lines(table: plans.Table, style: Style) -> list[str]:
    kinds = table.kinds or ("plain",) * len(table.columns)
    if style.json:
        objects = [
            compact(
                {
                    name: json_value(v, k)
                    for name, v, k in zip(table.columns, row, kinds, strict=True)
                }
            )
            for row in table.rows
        ]
        return ["[", "\n,".join(objects), "]"] if objects else ["[]"]
    if not table.rows:
        return []  # rabbitmqctl prints no header over an empty listing
    lines = [] if style.silent or style.no_headers else ["\t".join(table.columns)]
    lines.extend(
        "\t".join(cell(value, kind) for value, kind in zip(row, kinds, strict=True))
        for row in table.rows
    )
    return lines


def printed(banner: tuple[str, ...], outcome: Outcome, style: Style) -> Printed:
    """What goes to stdout and stderr for this plan's banner and outcome."""
    out = list(banner) if style.banner else []
    result = outcome.result
    if isinstance(result, plans.Table):
        out.extend(table_lines(result, style))
    elif isinstance(result, plans.Text):
        out.extend(result.lines)
    elif isinstance(result, plans.Done) and not (style.quiet or style.silent):
        out.extend(result.notes)
    err = f"Error: {outcome.error}\n" if outcome.error is not None else ""
    return Printed("".join(line + "\n" for line in out), err)
