"""Sorting, filtering, paging and ``?columns=`` for list and item responses.

This follows RabbitMQ's ``rabbit_mgmt_util`` so tools that page through big
brokers (the web UI, ``rabbitmqadmin``, the operator's drift checks) see the
same numbers: lists are sorted by ``vhost`` then ``name`` unless ``?sort=``
names a dotted key; ``?name=`` filters only when ``?page=`` asks for a page;
a page past the end is a 400 ``page_out_of_range``.  Everything is pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from hutch_broker.admin import errors
from hutch_broker.model import patterns

DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 500
DEFAULT_SORT: Final = ("vhost", "name")

Item = dict[str, Any]
Columns = tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Paging:
    page: int
    page_size: int
    name: str | None
    use_regex: bool


@dataclass(frozen=True, slots=True)
class ListQuery:
    columns: Columns | None = None
    sort: str | None = None
    sort_reverse: bool = False
    paging: Paging | None = None


def parse_query(params: Mapping[str, str]) -> ListQuery:
    """The list options of a query string; bad paging values are a 400."""
    return ListQuery(
        columns=parse_columns(params.get("columns")),
        sort=params.get("sort"),
        sort_reverse=params.get("sort_reverse", "").lower() == "true",
        paging=_parse_paging(params),
    )


def parse_columns(value: str | None) -> Columns | None:
    if not value:
        return None
    return tuple(
        tuple(part for part in column.split(".") if part)
        for column in value.split(",")
        if column.strip(".")
    )


def _int_param(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.ApiError(
            400, {"error": "bad_request", "reason": "Pagination parameters are invalid"}
        ) from None


def _parse_paging(params: Mapping[str, str]) -> Paging | None:
    page = _int_param(params.get("page"))
    page_size = _int_param(params.get("page_size"))
    if page is None:
        return None
    size = DEFAULT_PAGE_SIZE if page_size is None else page_size
    if page <= 0 or not 0 < size <= MAX_PAGE_SIZE:
        reason = f"Invalid pagination parameters: page number {page}, page size {page_size}"
        raise errors.ApiError(400, {"error": "invalid_pagination_parameters", "reason": reason})
    name = params.get("name") or None
    return Paging(page, size, name, params.get("use_regex", "").lower() == "true")


# -- sorting ------------------------------------------------------------------------------


def _dotted(item: Item, key: str) -> Any:
    value: Any = item
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return 0 if value is None else value


def _comparable(value: Any) -> tuple[int, Any]:
    """Erlang term order, roughly: numbers < atoms < strings < everything else."""
    if isinstance(value, bool) or value is None:
        return (1, str(value))
    if isinstance(value, int | float):
        return (0, value)
    if isinstance(value, str):
        return (2, value)
    return (3, json.dumps(value, sort_keys=True, default=str))


def sort_keys(query: ListQuery, default_sort: Sequence[str]) -> list[str]:
    """The dotted keys a list is sorted by: ``?sort=`` first, then the list's default."""
    return [query.sort, *default_sort] if query.sort else list(default_sort)


def sort_key(item: Item, keys: Sequence[str]) -> list[tuple[int, Any]]:
    return [_comparable(_dotted(item, key)) for key in keys]


def key_value(value: Any) -> tuple[int, Any]:
    """One part of ``sort_key`` from a top-level value read without rendering the item
    (None: the item has no such key)."""
    return _comparable(0 if value is None else value)


def sort_items(items: Sequence[Item], keys: Sequence[str], *, reverse: bool) -> list[Item]:
    ordered = sorted(items, key=lambda item: sort_key(item, keys))
    return ordered[::-1] if reverse else ordered


# -- filtering and paging -----------------------------------------------------------------


NameMatcher = re.Pattern[str] | patterns.Matcher


def name_matcher(paging: Paging) -> NameMatcher:
    """``?name=`` as a case-insensitive search; with ``use_regex``, through the policy
    patterns' bounded matcher, as a ``re`` search over every name of a listing could
    backtrack for minutes on one pattern such as ``(a+)+$``."""
    if not paging.use_regex:
        return re.compile(re.escape(paging.name or ""), re.IGNORECASE)
    try:
        return patterns.compile_pattern("(?i)" + (paging.name or ""))
    except patterns.PatternError as exc:
        raise errors.bad_request(f"invalid regular expression in name: {exc}") from None


def filter_by_name(items: Sequence[Item], paging: Paging) -> list[Item]:
    if not paging.name:
        return list(items)
    matcher = name_matcher(paging)
    return [item for item in items if matcher.search(str(item.get("name", "")))]


def page_envelope(paging: Paging, *, filtered: int, total: int) -> dict[str, Any]:
    """The paged object around a page of ``filtered`` matches (``items`` left empty);
    a page past the end is RabbitMQ's 400 ``page_out_of_range``."""
    offset = (paging.page - 1) * paging.page_size
    if offset > filtered:
        reason = (
            f"Page out of range, page: {paging.page} page size: {paging.page_size}, len: {filtered}"
        )
        raise errors.ApiError(400, {"error": "page_out_of_range", "reason": reason})
    return {
        "filtered_count": filtered,
        "item_count": min(paging.page_size, filtered - offset),
        "items": [],
        "page": paging.page,
        "page_count": -(-filtered // paging.page_size),
        "page_size": paging.page_size,
        "total_count": total,
    }


def page(items: Sequence[Item], paging: Paging, total: int) -> dict[str, Any]:
    filtered = filter_by_name(items, paging)
    result = page_envelope(paging, filtered=len(filtered), total=total)
    offset = (paging.page - 1) * paging.page_size
    result["items"] = filtered[offset : offset + paging.page_size]
    return result


# -- columns ------------------------------------------------------------------------------


def select_columns(value: Any, columns: Columns | None) -> Any:
    """Keep only the requested (dotted) keys, descending into objects and lists."""
    if columns is None:
        return value
    if isinstance(value, list):
        return [select_columns(item, columns) for item in value]
    if not isinstance(value, dict):
        return value
    selected: dict[str, Any] = {}
    for key, item in value.items():
        wanted = [column for column in columns if column and column[0] == key]
        if not wanted:
            continue
        rest = (
            None
            if any(len(column) == 1 for column in wanted)
            else tuple(column[1:] for column in wanted)
        )
        selected[key] = select_columns(item, rest)
    return selected


# -- the two entry points -----------------------------------------------------------------


def render_list(
    items: Sequence[Item], query: ListQuery, default_sort: Sequence[str] = DEFAULT_SORT
) -> Any:
    """A list response: sorted, then paged (if asked), then cut to the columns."""
    ordered = sort_items(items, sort_keys(query, default_sort), reverse=query.sort_reverse)
    if query.paging is None:
        return select_columns(ordered, query.columns)
    result = page(ordered, query.paging, len(items))
    result["items"] = select_columns(result["items"], query.columns)
    return result


def render_item(item: Item, query: ListQuery) -> Any:
    return select_columns(item, query.columns)
