"""``hybrid admin ports``: the ranges checked from configuration, the firewall rules listed."""

from __future__ import annotations

import json

import dask.config
import pytest
from click.testing import CliRunner

from hybrid.admin.ports import check_ranges, firewall_rules, plan_ports, ranges_overlap
from hybrid.cli import cli
from hybrid.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)


def _settings(**worker: object) -> dask.config.set:
    return dask.config.set({f"hybrid.worker.{key.replace('_', '-')}": value
                            for key, value in worker.items()})


def test_overlap_of_inclusive_ranges() -> None:
    assert ranges_overlap((10000, 10070), (10070, 10140))
    assert ranges_overlap((10000, 10070), (9000, 20000))
    assert not ranges_overlap((10000, 10070), (10071, 10140))


def test_overlapping_nanny_range_is_refused_with_the_fix() -> None:
    with _settings(port_range="10000:10070", nanny_port_range="10050:10120"), \
            pytest.raises(ConfigurationError) as caught:
        plan_ports(2, nanny=True)
    assert caught.value.field == "hybrid.worker.nanny-port-range"
    assert "does not overlap" in str(caught.value)
    assert "past 10070" in str(caught.value)
    # without a nanny the nanny range does not matter
    with _settings(port_range="10000:10070", nanny_port_range="10050:10120"):
        assert plan_ports(2, nanny=False).nanny_ports is None


def test_too_small_worker_range_is_refused_with_the_range_needed() -> None:
    with _settings(port_range="10000:10003"), pytest.raises(ConfigurationError) as caught:
        plan_ports(8, nanny=False)
    assert caught.value.field == "hybrid.worker.port-range"
    assert "at least 8 ports for 8 workers per node" in str(caught.value)
    assert "10000:10007" in str(caught.value)
    with _settings(port_range="10000:10007"):
        assert plan_ports(8, nanny=False).worker_ports == (10000, 10007)


def test_too_small_nanny_range_is_refused() -> None:
    with _settings(port_range="10000:10070", nanny_port_range="10071:10072"), \
            pytest.raises(ConfigurationError) as caught:
        plan_ports(3, nanny=True)
    assert caught.value.field == "hybrid.worker.nanny-port-range"
    assert "one nanny each" in str(caught.value)


@pytest.mark.parametrize("worker, nanny, per_node, contact, field", [
    (None, None, 1, None, "hybrid.worker.port-range"),          # random ports: cannot open
    ("80:90", None, 1, None, "hybrid.worker.port-range"),       # privileged ports
    ("10000-10070", None, 1, None, "hybrid.worker.port-range"),  # wrong separator
    ("10000:10070", None, 0, None, "--workers-per-node"),
    ("10000:10070", None, 2, "tls://203.0.113.5:10000", "hybrid.worker.contact-address"),
    ("10000:10070", None, 1, "203.0.113.5", "hybrid.worker.contact-address"),
])
def test_bad_settings_name_their_field(worker, nanny, per_node, contact, field) -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_ranges(worker, nanny, per_node, nanny=False, contact_address=contact)
    assert caught.value.field == field


def test_rules_say_who_opens_which_connection() -> None:
    rules = firewall_rules((10000, 10070), (10071, 10140), scheduler_host="198.51.100.7",
                           ingress_host="dask.example.org", ingress_port=8786,
                           gateway_http_port=443)
    table = {(r.source, r.destination, r.ports) for r in rules}
    assert ("batch nodes (workers)", "ingress (dask.example.org)", "8786") in table
    assert ("clients (submit nodes, notebooks)", "ingress (dask.example.org)", "8786") in table
    assert ("clients (submit nodes, notebooks)", "gateway HTTP (API, dashboards)", "443") in table
    assert ("scheduler (198.51.100.7)", "batch nodes (workers)", "10000-10070") in table
    assert ("scheduler (198.51.100.7)", "batch nodes (workers)", "10071-10140") in table
    assert ("batch nodes (workers)", "batch nodes (workers)", "10000-10070") in table
    assert len(rules) == 6
    assert all(r.protocol == "tcp" for r in rules)
    assert rules[0].direction == "batch nodes (workers) -> ingress (dask.example.org)"


def test_a_contact_address_is_what_the_scheduler_dials() -> None:
    rules = firewall_rules((10000, 10000), contact_address="tls://203.0.113.5:10000",
                           scheduler_host="198.51.100.7")
    back = [r for r in rules if r.source == "scheduler (198.51.100.7)"]
    assert [(r.destination, r.ports) for r in back] == [("contact address 203.0.113.5", "10000")]


def test_cli_json_lists_the_rules_from_configuration() -> None:
    with _settings(port_range="20000:20015", nanny_port_range="20016:20031", nanny=True):
        result = CliRunner().invoke(cli, ["admin", "ports", "--workers-per-node", "4",
                                          "--scheduler-host", "10.1.2.3", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["worker_ports"] == "20000-20015"
    assert plan["nanny_ports"] == "20016-20031"
    assert plan["workers_per_node"] == 4
    directions = {(r["direction"], r["ports"]) for r in plan["rules"]}
    assert ("scheduler (10.1.2.3) -> batch nodes (workers)", "20000-20015") in directions
    assert ("scheduler (10.1.2.3) -> batch nodes (workers)", "20016-20031") in directions
    assert ("batch nodes (workers) -> ingress (Traefik)", "8786") in directions
    assert all(set(r) == {"direction", "source", "destination", "protocol", "ports", "purpose"}
               for r in plan["rules"])


def test_cli_text_table_and_errors() -> None:
    with _settings(port_range="20000:20015"):
        result = CliRunner().invoke(cli, ["admin", "ports", "--no-nanny"])
        assert result.exit_code == 0, result.output
        assert "worker ports per node: 20000-20015 (16 ports for 1 worker(s))" in result.output
        assert "FROM (opens the connection)" in result.output
        assert "20000-20015" in result.output and "8786" in result.output
        result = CliRunner().invoke(cli, ["admin", "ports", "--no-nanny",
                                          "--workers-per-node", "17"])
    assert result.exit_code == 2
    assert "hybrid.worker.port-range = '20000:20015' is not valid" in result.output
    assert "at least 17 ports" in result.output


@pytest.mark.parametrize("flag", ["--scheduler-host", "--ingress-host"])
def test_cli_hosts_of_the_rules_are_host_names(flag: str) -> None:
    """A host with a space went into the printed rules ("ingress (a b)"), which admins paste
    into their firewall's configuration."""
    result = CliRunner().invoke(cli, ["admin", "ports", flag, "a b"])
    assert result.exit_code == 2 and f"{flag} = 'a b' is not valid" in result.output
