"""What every Kubernetes module shares: name rules, quantities, the API client, API errors.

Names and labels are checked here with the API server's own rules (DNS-1123 labels and
subdomains, qualified label keys), so a bad value is a :class:`~hybrid.errors.ConfigurationError`
before any request is made, not a 422 from the server.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from hybrid.errors import BatchError, ConfigurationError

__all__ = [
    "KubernetesAPIError",
    "call_api",
    "check_dns_label",
    "check_dns_subdomain",
    "check_label_key",
    "check_label_value",
    "check_labels",
    "dns_name",
    "kubernetes_quantity",
    "load_api_client",
    "read_json",
]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

DNS_LABEL_RULE = "1-63 characters from a-z 0-9 -, starting and ending with a letter or digit"
DNS_SUBDOMAIN_RULE = (
    "1-253 characters from a-z 0-9 - ., each dot-separated part starting and ending with a "
    "letter or digit"
)
LABEL_VALUE_RULE = (
    "at most 63 characters from A-Z a-z 0-9 - _ ., starting and ending with a letter or digit"
)


def check_dns_label(value: Any, field: str) -> str:
    """A DNS-1123 label (namespaces, volume and container names)."""
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.match(value):
        raise ConfigurationError(field, value, DNS_LABEL_RULE)
    return value


def check_dns_subdomain(value: Any, field: str) -> str:
    """A DNS-1123 subdomain (pod, secret, claim, service account and storage class names)."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ConfigurationError(field, value, DNS_SUBDOMAIN_RULE)
    return value


def check_label_key(value: Any, field: str) -> str:
    """A qualified label key: ``[prefix/]name`` with a DNS subdomain prefix."""
    accepted = ("a label key NAME or PREFIX/NAME (NAME: 1-63 characters from A-Z a-z 0-9 - _ ., "
                "starting and ending with a letter or digit; PREFIX: a DNS subdomain)")
    if not isinstance(value, str) or value.count("/") > 1:
        raise ConfigurationError(field, value, accepted)
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ConfigurationError(field, value, accepted)
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise ConfigurationError(field, value, accepted)
    return value


def check_label_value(value: Any, field: str) -> str:
    """A label value: empty, or up to 63 characters starting and ending alphanumeric."""
    if not isinstance(value, str) or len(value) > 63 or (value and not _LABEL_NAME.match(value)):
        raise ConfigurationError(field, value, LABEL_VALUE_RULE)
    return value


def check_labels(labels: Mapping[str, str] | None, field: str) -> dict[str, str]:
    """A validated copy of a label mapping."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise ConfigurationError(field, labels, "a mapping of label keys to string values")
    out = {}
    for key, value in labels.items():
        check_label_key(key, f"{field} key")
        out[key] = check_label_value(value, f"{field}[{key!r}]")
    return out


def dns_name(text: str, limit: int = 63) -> str:
    """``text`` turned into a DNS-1123 label: lower case, other characters become ``-``.

    When that changes the text, a short hash of the original keeps distinct names distinct.
    """
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name) or "x"
    if name != text:
        digest = hashlib.sha1(text.encode()).hexdigest()[:6]
        name = f"{name[: limit - 7].rstrip('-')}-{digest}"
    return name[:limit].rstrip("-")


def kubernetes_quantity(n_bytes: int) -> str:
    """Bytes as a Kubernetes quantity, in the unit giving the smallest whole number.

    ``4294967296`` -> ``"4Gi"``, ``10**9`` -> ``"1G"``, ``5 * 10**12`` -> ``"5T"``.
    """
    n_bytes = int(n_bytes)
    best = (n_bytes, "")
    if n_bytes > 0:
        for suffix, size in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30),
                             ("Mi", 2**20), ("Ki", 2**10), ("E", 10**18), ("P", 10**15),
                             ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
            if n_bytes % size == 0 and n_bytes // size < best[0]:
                best = (n_bytes // size, suffix)
    return f"{best[0]}{best[1]}"


class KubernetesAPIError(BatchError):
    """The Kubernetes API refused a request or could not be reached (``status`` 0)."""

    def __init__(self, message: str, status: int = 0, reason: str | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason


def load_api_client(api_client: Any = None, kube_config: str | os.PathLike | None = None,
                    context: str | None = None) -> Any:
    """The ``kubernetes.client.ApiClient`` to use.

    ``api_client`` as given; else the kubeconfig file ``kube_config`` (and ``context``); else
    the in-cluster service account when running in a pod; else ``~/.kube/config``
    (or ``$KUBECONFIG``). The global ``kubernetes`` configuration is never changed.
    """
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:  # pragma: no cover - the extra is part of the test environment
        raise ConfigurationError(
            "kubernetes", None, "the kubernetes package: pip install 'hybrid[kubernetes]'"
        ) from None
    if api_client is not None:
        if not isinstance(api_client, client.ApiClient):
            raise ConfigurationError("api_client", api_client, "a kubernetes.client.ApiClient")
        return api_client
    try:
        if kube_config is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        return config.new_client_from_config(
            config_file=os.fspath(kube_config) if kube_config is not None else None,
            context=context, persist_config=False,
        )
    except (ConfigException, OSError, TypeError, ValueError) as error:
        raise ConfigurationError(
            "kube_config", os.fspath(kube_config) if kube_config is not None else "~/.kube/config",
            "a readable kubeconfig file (with `context` naming one of its contexts), or an "
            "api_client, or running inside a pod with a service account",
            f"({error})",
        ) from None


def _status_message(body: Any) -> str:
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return str(body or "").strip()[:500]
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return json.dumps(data)[:500]


def call_api(what: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a ``CoreV1Api`` method; failures become :class:`KubernetesAPIError` naming ``what``."""
    from kubernetes.client.exceptions import ApiException
    from pydantic import ValidationError
    from urllib3.exceptions import HTTPError

    try:
        return function(*args, **kwargs)
    except ApiException as error:
        message = _status_message(error.body)
        raise KubernetesAPIError(
            f"Kubernetes refused to {what} ({error.status} {error.reason}): {message}",
            status=error.status or 0, reason=error.reason,
        ) from None
    except ValidationError as error:
        raise KubernetesAPIError(
            f"cannot {what}: the object does not fit the Kubernetes API model: {error}"
        ) from None
    except HTTPError as error:
        raise KubernetesAPIError(f"could not reach the Kubernetes API to {what}: {error}") from None


def read_json(response: Any) -> Any:
    """The JSON body of a ``_preload_content=False`` response."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()
