"""Pure pieces of web_search: URL normalisation for duplicates and tracking, site names, the TTL cache."""

from __future__ import annotations

import pytest

from mcp_web_search.cache import TtlCache
from mcp_web_search.urls import clean_url, host_in_site, normalize_site, url_key


@pytest.mark.parametrize(
    "variant",
    [
        "https://example.org/docs/page",
        "http://example.org/docs/page",
        "HTTPS://EXAMPLE.ORG/docs/page/",
        "https://example.org:443/docs/page",
        "https://example.org/docs/page#install",
        "https://example.org/docs/page?utm_source=x&utm_campaign=y",
        "https://example.org/docs/page?gclid=abc&fbclid=def&msclkid=ghi",
        "https://example.org./docs/page",
    ],
)
def test_variants_of_one_page_share_a_key(variant: str) -> None:
    assert url_key(variant) == url_key("https://example.org/docs/page")


@pytest.mark.parametrize(
    "other",
    [
        "https://example.org/docs/Page",  # paths are case sensitive
        "https://example.org/docs/page?id=2",
        "https://example.org:8443/docs/page",
        "https://www.example.org/docs/page",
        "https://example.org/docs",
    ],
)
def test_different_pages_have_different_keys(other: str) -> None:
    assert url_key(other) != url_key("https://example.org/docs/page")


def test_query_order_does_not_matter_but_values_do() -> None:
    assert url_key("https://e.org/s?a=1&b=2") == url_key("https://e.org/s?b=2&a=1")
    assert url_key("https://e.org/s?a=1") != url_key("https://e.org/s?a=2")


def test_clean_url_drops_only_tracking_parameters() -> None:
    assert clean_url("https://e.org/p?id=7&utm_source=n&UTM_Medium=m&gclid=1#top") == "https://e.org/p?id=7#top"
    assert clean_url("https://e.org/p?utm_source=n") == "https://e.org/p"
    assert clean_url("https://e.org/p?q=a+b&x=%2F") == "https://e.org/p?q=a+b&x=%2F"  # untouched, as given


@pytest.mark.parametrize(
    ("site", "expected"),
    [
        ("docs.python.org", "docs.python.org"),
        ("  Docs.Python.ORG. ", "docs.python.org"),
        ("https://docs.python.org/3/library/", "docs.python.org"),
        ("www.python.org", "python.org"),
        ("example.com/path", "example.com"),
        ("bücher.de", "bücher.de"),
        ("localhost", None),
        ("two words.com", None),
        ("", None),
        ("a..b", None),
    ],
)
def test_site_names_are_normalised_or_refused(site: str, expected: str | None) -> None:
    assert normalize_site(site) == expected


def test_a_site_includes_its_subdomains_and_nothing_else() -> None:
    assert host_in_site("https://docs.python.org/3/", "python.org")
    assert host_in_site("https://python.org/", "python.org")
    assert not host_in_site("https://notpython.org/", "python.org")
    assert not host_in_site("https://python.org.evil.example/", "python.org")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_cache_entries_expire_after_the_ttl() -> None:
    clock = _Clock()
    cache: TtlCache[str, int] = TtlCache(ttl_seconds=60, max_entries=10, clock=clock)
    cache.put("q", 1)

    clock.now += 59.9
    assert cache.get("q") == 1
    clock.now += 0.1
    assert cache.get("q") is None
    assert len(cache) == 0


def test_the_least_recently_used_entry_goes_first_when_full() -> None:
    cache: TtlCache[str, int] = TtlCache(ttl_seconds=60, max_entries=2, clock=_Clock())
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)

    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_a_ttl_of_zero_keeps_nothing() -> None:
    cache: TtlCache[str, int] = TtlCache(ttl_seconds=0, max_entries=2)
    cache.put("a", 1)

    assert cache.get("a") is None
