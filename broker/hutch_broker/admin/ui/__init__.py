"""The management Web UI: a static page at ``/`` that drives the management API.

Why a static page over the JSON API rather than server-rendered HTML: the API already holds
every bound the broker promises (paced listings, one listing per user, 2 ms slices, paging of
thousands of objects) and every authorisation rule; a page that calls it gets them all for
free, and there is one code path to secure instead of two. The page keeps the login in the
tab's ``sessionStorage`` and sends it as an ``Authorization`` header, so no cookie exists for a
cross-site request to ride on; ``crossorigin`` refuses API writes a browser marks as coming
from another site, for browsers that hold Basic credentials from a native prompt.

``assets`` serves the files under ``static/`` (shipped in the wheel as package data; no build
step, nothing fetched from the internet) with a strict Content-Security-Policy.
"""
