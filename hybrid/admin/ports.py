"""Worker port ranges, checked, and the firewall rules a deployment needs.

Who opens which connection (the gateway's proxy carries only the first kind):

* workers and clients -> the ingress (TLS, routed by SNI to the scheduler);
* the scheduler -> each worker's listen port (and nanny port) on the batch nodes;
* workers <-> workers on the worker port range (data transfers between workers);
* clients -> the gateway's HTTP port (API and dashboards).

The ranges come from ``hybrid.worker.port-range``, ``hybrid.worker.nanny-port-range`` and
``hybrid.worker.contact-address`` (see ``hybrid.yaml``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from distributed.comm.addressing import get_address_host_port

from hybrid import config
from hybrid.admin.ingress import DEFAULT_PORT, check_port
from hybrid.errors import ConfigurationError
from hybrid.fields import Address, count, port_range_bounds, validate_value
from hybrid.fields import PortRange as PortRangeText

PortRange = tuple[int, int]

#: The dask-gateway Helm chart's Traefik serves the API and dashboards on port 80.
DEFAULT_GATEWAY_HTTP_PORT = 80


@dataclass(frozen=True)
class FirewallRule:
    """One connection an admin must allow: opened by ``source``, accepted by ``destination``."""

    source: str
    destination: str
    protocol: str
    ports: str
    purpose: str

    @property
    def direction(self) -> str:
        """``source -> destination``: the side that opens the connection comes first."""
        return f"{self.source} -> {self.destination}"

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"direction": self.direction, **asdict(self)}


@dataclass(frozen=True)
class PortPlan:
    """The checked ranges for one node, and the firewall rules they need."""

    worker_ports: PortRange
    nanny_ports: PortRange | None
    workers_per_node: int
    contact_address: str | None
    rules: tuple[FirewallRule, ...]

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return {
            "worker_ports": _ports_text(self.worker_ports),
            "nanny_ports": _ports_text(self.nanny_ports) if self.nanny_ports else None,
            "workers_per_node": self.workers_per_node,
            "contact_address": self.contact_address,
            "rules": [rule.as_dict() for rule in self.rules],
        }


def _ports_text(ports: PortRange) -> str:
    first, last = ports
    return str(first) if first == last else f"{first}-{last}"


def _size(ports: PortRange) -> int:
    return ports[1] - ports[0] + 1


def ranges_overlap(a: PortRange, b: PortRange) -> bool:
    """True when the two inclusive ranges share a port."""
    return a[0] <= b[1] and b[0] <= a[1]


def check_ranges(
    worker_range: str | int | None,
    nanny_range: str | int | None,
    workers_per_node: int,
    nanny: bool,
    contact_address: str | None = None,
) -> tuple[PortRange, PortRange | None]:
    """Parse and check the ranges; raise :class:`ConfigurationError` on the first problem.

    Each worker on a node takes one worker port, and with a nanny one nanny port too. A
    fixed ``contact_address`` names one port: one worker per node.
    """
    validate_value(count(1, None, "an integer >= 1"), workers_per_node, "--workers-per-node")
    worker_ports = _port_range(
        worker_range, "hybrid.worker.port-range",
        "Without a range workers listen on random ports and the firewall would have to open "
        "every port to the scheduler; set one, e.g. \"10000:10070\".")
    if _size(worker_ports) < workers_per_node:
        raise ConfigurationError(
            "hybrid.worker.port-range", worker_range,
            f"at least {workers_per_node} ports for {workers_per_node} workers per node",
            fix=f"Widen the range to {worker_ports[0]}:{worker_ports[0] + workers_per_node - 1} "
                "or more, or run fewer workers per node.",
        )
    if contact_address is not None:
        accepted = "an address with a port (1-65535), like tls://203.0.113.5:10000"
        try:
            validate_value(Address, contact_address, "hybrid.worker.contact-address")
            host, port = get_address_host_port(str(contact_address))
            has_port = bool(host) and 0 < int(port) <= 65535
        except (ConfigurationError, ValueError, TypeError):
            has_port = False
        if not has_port:
            raise ConfigurationError("hybrid.worker.contact-address", contact_address, accepted)
        if workers_per_node > 1:
            raise ConfigurationError(
                "hybrid.worker.contact-address", contact_address,
                "no fixed contact address with more than one worker per node",
                fix="A contact address names one port, so only one worker per node can have "
                    "it: unset it (workers advertise their own address) or use "
                    "--workers-per-node 1.",
            )
    if not nanny:
        return worker_ports, None
    nanny_ports = _port_range(
        nanny_range, "hybrid.worker.nanny-port-range",
        "Workers with a nanny need a nanny port range the scheduler can reach; set one or run "
        "workers without a nanny.")
    if ranges_overlap(worker_ports, nanny_ports):
        raise ConfigurationError(
            "hybrid.worker.nanny-port-range", nanny_range,
            f"a range that does not overlap hybrid.worker.port-range ({worker_range})",
            fix="A worker and a nanny on one node cannot bind the same port; move the nanny "
                f"range past {worker_ports[1]}.",
        )
    if _size(nanny_ports) < workers_per_node:
        raise ConfigurationError(
            "hybrid.worker.nanny-port-range", nanny_range,
            f"at least {workers_per_node} ports for {workers_per_node} workers per node "
            "(one nanny each)",
            fix=f"Widen the range to {nanny_ports[0]}:{nanny_ports[0] + workers_per_node - 1} "
                "or more, or run fewer workers per node.",
        )
    return worker_ports, nanny_ports


def firewall_rules(
    worker_ports: PortRange,
    nanny_ports: PortRange | None = None,
    *,
    contact_address: str | None = None,
    scheduler_host: str | None = None,
    ingress_host: str | None = None,
    ingress_port: int = DEFAULT_PORT,
    gateway_http_port: int = DEFAULT_GATEWAY_HTTP_PORT,
) -> list[FirewallRule]:
    """The connections to allow, each named by the side that opens it."""
    scheduler = (f"scheduler ({scheduler_host})" if scheduler_host
                 else "scheduler pods (their egress address: Kubernetes nodes or NAT)")
    ingress = f"ingress ({ingress_host})" if ingress_host else "ingress (Traefik)"
    check_port(ingress_port, "--ingress-port")
    check_port(gateway_http_port, "--gateway-http-port")
    workers = "batch nodes (workers)"
    if contact_address:
        host, port = get_address_host_port(validate_value(
            Address, contact_address, "hybrid.worker.contact-address"))
        back_destination = f"contact address {host}"
        back_ports = str(port)
    else:
        back_destination = workers
        back_ports = _ports_text(worker_ports)
    rules = [
        FirewallRule(workers, ingress, "tcp", str(ingress_port),
                     "workers reach their scheduler: TLS, routed by SNI daskgateway-<cluster>"),
        FirewallRule("clients (submit nodes, notebooks)", ingress, "tcp", str(ingress_port),
                     "clients reach their scheduler: TLS, routed by SNI daskgateway-<cluster>"),
        FirewallRule("clients (submit nodes, notebooks)", "gateway HTTP (API, dashboards)",
                     "tcp", str(gateway_http_port),
                     "create, list and stop clusters; open dashboards"),
        FirewallRule(scheduler, back_destination, "tcp", back_ports,
                     "the scheduler dials each worker's listen address back"),
    ]
    if nanny_ports is not None:
        rules.append(FirewallRule(scheduler, workers, "tcp", _ports_text(nanny_ports),
                                  "the scheduler talks to each worker's nanny (restarts)"))
    rules.append(FirewallRule(workers, workers, "tcp", back_ports if contact_address
                              else _ports_text(worker_ports),
                              "workers fetch task results from each other directly"))
    return rules


def plan_ports(
    workers_per_node: int = 1,
    *,
    nanny: bool | None = None,
    scheduler_host: str | None = None,
    ingress_host: str | None = None,
    ingress_port: int = DEFAULT_PORT,
    gateway_http_port: int = DEFAULT_GATEWAY_HTTP_PORT,
) -> PortPlan:
    """Check the configured ranges for ``workers_per_node`` and list the rules they need.

    ``nanny`` ``None``: as ``hybrid.worker.nanny`` says. Workers that reach the scheduler
    through the SNI ingress run without a nanny (the nanny cannot pass the SNI).
    """
    use_nanny = bool(config.get("worker.nanny", True)) if nanny is None else nanny
    contact = config.get("worker.contact-address", None)
    worker_ports, nanny_ports = check_ranges(
        config.get("worker.port-range", None), config.get("worker.nanny-port-range", None),
        workers_per_node, use_nanny, contact,
    )
    rules = firewall_rules(
        worker_ports, nanny_ports, contact_address=contact, scheduler_host=scheduler_host,
        ingress_host=ingress_host, ingress_port=ingress_port, gateway_http_port=gateway_http_port,
    )
    return PortPlan(worker_ports, nanny_ports, workers_per_node, contact, tuple(rules))


def format_plan(plan: PortPlan) -> str:
    """The rules as an aligned text table, with the ranges above."""
    lines = [f"worker ports per node: {_ports_text(plan.worker_ports)} "
             f"({_size(plan.worker_ports)} ports for {plan.workers_per_node} worker(s))"]
    if plan.nanny_ports:
        lines.append(f"nanny ports per node:  {_ports_text(plan.nanny_ports)}")
    if plan.contact_address:
        lines.append(f"contact address:       {plan.contact_address}")
    lines.append("")
    header = ("FROM (opens the connection)", "TO", "PROTO", "PORTS", "WHY")
    rows = [header] + [(r.source, r.destination, r.protocol, r.ports, r.purpose)
                       for r in plan.rules]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4]))
                     + "  " + row[4])
    return "\n".join(lines)


def _port_range(value: object, field: str, fix: str | None = None) -> tuple[int, int] | None:
    """``(first, last)``; ``None`` when unset, or an error with ``fix`` where one is needed."""
    if value is None and fix is not None:
        raise ConfigurationError(field, value, 'a range "FIRST:LAST"', fix=fix)
    return None if value is None else port_range_bounds(
        validate_value(PortRangeText, value, field))
