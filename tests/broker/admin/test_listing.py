"""Sorting, paging, name filters and columns, as rabbit_mgmt_util does them."""

import pytest
from hutch_broker.admin import errors, listing

ITEMS = [
    {"vhost": "/", "name": "mgmt.q2", "messages": 0, "stats": {"publish": 1, "ack": 0}},
    {"vhost": "/", "name": "bench.q", "messages": 5, "stats": {"publish": 3, "ack": 1}},
    {"vhost": "/", "name": "aliveness-test", "messages": 0},
    {"vhost": "/", "name": "mgmt.q", "messages": 1, "stats": {"publish": 2, "ack": 2}},
]


def render(**params):
    return listing.render_list(ITEMS, listing.parse_query(params))


def test_default_sort_is_vhost_then_name():
    names = [item["name"] for item in render()]
    assert names == ["aliveness-test", "bench.q", "mgmt.q", "mgmt.q2"]


def test_sort_by_dotted_key_and_reverse():
    assert [item["name"] for item in render(sort="stats.publish")] == [
        "aliveness-test",  # missing sorts as 0
        "mgmt.q2",
        "mgmt.q",
        "bench.q",
    ]
    assert render(sort="messages", sort_reverse="true")[0]["name"] == "bench.q"


def test_paging_shape_matches_reference(reference):
    page = render(page="1", page_size="2", name="mgmt", use_regex="false")
    expected = reference("GET_queues?page=1&page_size=2&name=mgmt&use_regex=false.json")
    assert set(page) == set(expected)
    assert {key: page[key] for key in page if key != "items"} == {
        key: expected[key] for key in expected if key != "items"
    }
    assert [item["name"] for item in page["items"]] == ["mgmt.q", "mgmt.q2"]


def test_name_filter_is_case_insensitive_and_regex_optional():
    assert render(page="1", name="MGMT")["filtered_count"] == 2
    assert render(page="1", name="^mgmt\\.q$", use_regex="true")["filtered_count"] == 1
    assert render(page="1", name="^mgmt", use_regex="false")["filtered_count"] == 0


def test_name_filter_needs_paging():
    assert len(render(name="mgmt")) == 4


def test_page_past_the_end_is_page_out_of_range():
    assert render(page="3", page_size="2")["items"] == []  # offset == length is allowed
    with pytest.raises(errors.ApiError) as caught:
        render(page="4", page_size="1", name="mgmt")
    assert caught.value.status == 400
    assert caught.value.body["error"] == "page_out_of_range"


@pytest.mark.parametrize(
    "params",
    [{"page": "0"}, {"page": "1", "page_size": "501"}, {"page": "1", "page_size": "0"}],
)
def test_invalid_paging_parameters(params):
    with pytest.raises(errors.ApiError) as caught:
        render(**params)
    assert caught.value.body["error"] == "invalid_pagination_parameters"


def test_non_numeric_page_is_bad_request():
    with pytest.raises(errors.ApiError) as caught:
        render(page="x")
    assert caught.value.body == {
        "error": "bad_request",
        "reason": "Pagination parameters are invalid",
    }


def test_bad_regex_is_bad_request():
    with pytest.raises(errors.ApiError):
        render(page="1", name="(", use_regex="true")


def test_columns_select_top_level_and_nested_keys():
    items = render(columns="name,stats.publish")
    assert items[1] == {"name": "bench.q", "stats": {"publish": 3}}
    assert items[0] == {"name": "aliveness-test"}


def test_columns_apply_to_paged_items():
    page = render(page="1", page_size="1", columns="name")
    assert page["items"] == [{"name": "aliveness-test"}]
    assert page["total_count"] == 4


def test_columns_on_single_item():
    query = listing.parse_query({"columns": "name,stats"})
    assert listing.render_item(ITEMS[0], query) == {
        "name": "mgmt.q2",
        "stats": {"publish": 1, "ack": 0},
    }
