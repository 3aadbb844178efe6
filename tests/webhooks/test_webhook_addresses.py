"""The SSRF rule's tables and the subscribe-time lookup's bound, called directly (no server:
these are pure functions of an address, and a real lookup of ``localhost``)."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

import pydantic
import pytest
from click.testing import CliRunner

from plantstore.cli import main
from plantstore.errors import BadRequest
from plantstore.settings import Settings, SettingsError, load_settings
from plantstore.webhooks.addresses import NOT_GLOBAL, check_webhook_url, is_public
from plantstore.webhooks.attempt_log import origin

# Every range added to what Python's tables refuse, with the first and last address of each.
ADDED_RANGES = [
    "192.0.0.0/24",
    "192.88.99.0/24",
    "198.18.0.0/15",
    "100.64.0.0/10",
    "2001:db8::/32",
    "3fff::/20",
    "fec0::/10",
    "64:ff9b:1::/48",
    "100::/64",
    "100:0:0:1::/64",
    "2001::/23",
    "5f00::/16",
]


@pytest.mark.parametrize("network", ADDED_RANGES)
def test_each_added_range_is_refused_whole(network: str) -> None:
    block = ipaddress.ip_network(network)
    assert block in NOT_GLOBAL
    for address in (block.network_address, block.network_address + 1, block.broadcast_address):
        assert not is_public(address), address


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",  # just below carrier-grade NAT
        "100.128.0.0",  # just above it
        "192.0.1.1",
        "192.88.98.255",
        "198.17.255.255",
        "198.20.0.0",
        "2606:4700::1111",
        "2001:200::1",  # just above 2001::/23
        "3fff:1000::1",  # just above 3fff::/20
        "2001:db9::1",
        "64:ff9b::808:808",  # NAT64 of 8.8.8.8 (the well-known prefix embeds a global one)
    ],
)
def test_global_neighbours_stay_allowed(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


def test_names_that_do_not_resolve_in_time_are_400_naming_url() -> None:
    """``localhost`` resolves, to loopback: without the bound it is refused for that reason."""
    with pytest.raises(BadRequest, match=r"`url`.*did not resolve within 0 s"):
        asyncio.run(check_webhook_url("http://localhost/hook", False, timeout=0))
    with pytest.raises(BadRequest, match="globally routable"):
        asyncio.run(check_webhook_url("http://localhost/hook", False))


@pytest.mark.parametrize(
    "url", ["http://a..b/", f"http://{'x' * 64}.example/", "https://a.b..c:8443/x"]
)
def test_names_the_idna_codec_refuses_are_400_naming_url(url: str) -> None:
    with pytest.raises(BadRequest, match="`url`"):
        asyncio.run(check_webhook_url(url, False))


@pytest.mark.parametrize(
    ("url", "logged"),
    [
        ("https://hooks.slack.com/services/T0/B0/SECRET", "https://hooks.slack.com"),
        (
            "https://hooks.zapier.com:8443/hooks/catch/1/SECRET/?k=SECRET",
            "https://hooks.zapier.com:8443",
        ),
        ("http://[2606:4700::1111]:8080/SECRET#SECRET", "http://[2606:4700::1111]:8080"),
    ],
)
def test_attempt_log_shows_only_the_origin(url: str, logged: str) -> None:
    assert origin(url) == logged


@pytest.mark.parametrize("value", [0, 1001])
def test_the_subscription_cap_setting_is_bounded(value: int) -> None:
    with pytest.raises(pydantic.ValidationError):
        Settings(webhook_max_subscriptions=value)
    assert Settings().webhook_max_subscriptions == 10
    assert Settings(webhook_max_subscriptions=1000).webhook_max_subscriptions == 1000


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        ("webhook_retention", "30 days", "PLANTSTORE_WEBHOOK_RETENTION"),
        ("webhook_retention", "0d", "PLANTSTORE_WEBHOOK_RETENTION"),
        ("webhook_retry_schedule", "0s,soon", "PLANTSTORE_WEBHOOK_RETRY_SCHEDULE"),
    ],
)
def test_bad_webhook_durations_stop_the_program_naming_the_setting(
    name: str, value: str, named: str
) -> None:
    with pytest.raises(SettingsError, match=named):
        load_settings(**{name: value})
    assert load_settings(webhook_retention="7d").webhook_retention == "7d"


@pytest.mark.parametrize("command", ["disable", "enable", "rotate-secret"])
def test_operator_commands_on_a_missing_subscription_fail_in_one_line(
    tmp_path: Path, command: str
) -> None:
    result = CliRunner().invoke(
        main, ["--database", f"sqlite:///{tmp_path / 'p.db'}", "webhook", command, "999"]
    )
    assert result.exit_code == 1
    assert result.output.strip() == "Error: no webhook with id 999"
