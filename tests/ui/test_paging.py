"""Paging through 2,000 queues in the browser: the page asks the API for one page at a time.

The broker's listing is paced and paged (docs/isolation/http.md); the UI must use that, not
fetch every queue and page in the browser. So the test checks what each page shows (the right
500 names, in order, and no more rows than the page size), the pager's counts, the name and
regex filters, and that every request the page made for the list carried ``page_size``.
"""

import time

import pytest
from hutch_testing import clients

pytestmark = pytest.mark.timeout(120)

QUEUES = 2000


@pytest.fixture(scope="module")
def many_queues(ui_broker, api):
    connection = clients.connect(ui_broker)
    try:
        channel = connection.channel()
        for index in range(QUEUES):
            channel.queue_declare(f"bulk-{index:04d}")
    finally:
        connection.close()
    assert api.get("/api/overview")["object_totals"]["queues"] == QUEUES
    return QUEUES


def names_on_page(chromium):
    return chromium.execute(
        "return [...document.querySelectorAll('#queues-table tbody tr td:nth-child(2)')]"
        ".map((cell) => cell.textContent)"
    )


def test_paging_through_2000_queues(chromium, base_url, many_queues, login, shoot):
    login(chromium, base_url)
    chromium.wait_text("#total-queues", lambda text: text == "2,000")
    chromium.get(base_url + "#/queues")
    chromium.wait_text("#page-info", lambda text: text == "Page 1 of 20, 2,000 items")
    assert names_on_page(chromium)[:2] == ["bulk-0000", "bulk-0001"]
    assert len(names_on_page(chromium)) == 100
    chromium.execute("""
        window.listRequests = [];
        const original = window.fetch;
        window.fetch = (url, init) => {
          if (String(url).includes('/api/queues')) window.listRequests.push(String(url));
          return original(url, init);
        };""")

    chromium.find("#page-size option[value='500']").click()
    chromium.wait_text("#page-info", lambda text: text == "Page 1 of 4, 2,000 items")
    timings = []
    for page in range(4):
        expected = [f"bulk-{index:04d}" for index in range(page * 500, page * 500 + 500)]
        chromium.wait(
            lambda: names_on_page(chromium),
            lambda names, e=expected: names == e,
            what=f"page {page + 1}'s names",
        )
        assert chromium.find("#page-info").text == f"Page {page + 1} of 4, 2,000 items"
        if page < 3:
            started = time.monotonic()
            chromium.find("#page-next").click()
            chromium.wait_text("#page-info", lambda text, p=page: text.startswith(f"Page {p + 2} "))
            timings.append(time.monotonic() - started)
    assert chromium.find("#page-next").property("disabled") is True
    chromium.find("#page-prev").click()
    chromium.wait_text("#page-info", lambda text: text.startswith("Page 3 "))

    chromium.find("#filter").type("bulk-1999")
    chromium.wait_text(
        "#page-info", lambda text: text == "Page 1 of 1, 1 items (filtered from 2,000)"
    )
    assert names_on_page(chromium) == ["bulk-1999"]
    chromium.find("#filter").clear()
    chromium.find("#filter").type("^bulk-00[0-1]")
    chromium.find("#filter-regex").click()
    chromium.wait_text(
        "#page-info", lambda text: text == "Page 1 of 1, 20 items (filtered from 2,000)"
    )
    assert names_on_page(chromium) == [f"bulk-{index:04d}" for index in range(20)]

    requests = chromium.execute("return window.listRequests")
    assert requests, "the page made no list requests after the fetch hook"
    assert all("page_size=" in url and "pagination=true" in url for url in requests), requests
    assert max(timings) < 5.0, timings
    print(f"\npage turns of 500 of 2,000 queues: {', '.join(f'{t:.2f}s' for t in timings)}")  # noqa: T201
