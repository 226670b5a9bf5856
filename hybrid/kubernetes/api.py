"""What every Kubernetes module shares: the API client, API errors, names and quantities.

The API is reached through the official ``kubernetes`` client's typed calls
(``CoreV1Api.create_namespaced_pod(namespace, body)``, ``list_namespaced_pod(...,
label_selector=..., limit=..., _continue=...)``, ``kubernetes.watch``); every failure becomes
a :class:`KubernetesAPIError` that names what was attempted and carries the server's words.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from hybrid.errors import BatchError, ConfigurationError

__all__ = [
    "KubernetesAPIError",
    "api_errors",
    "call_api",
    "dns_name",
    "kubernetes_quantity",
    "load_api_client",
]

#: What to do when no configuration reaches the API.
CONFIGURATION_FIX = (
    "Give kube_config='/path/to/kubeconfig' (and kube_context), set KUBECONFIG, pass "
    "api_client=..., or run inside a pod with a service account."
)


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

    def __reduce__(self):
        return (type(self), (str(self), self.status, self.reason))


def load_api_client(api_client: Any = None, kube_config: str | os.PathLike | None = None,
                    context: str | None = None) -> Any:
    """The ``kubernetes.client.ApiClient`` to use.

    ``api_client`` as given; else the kubeconfig file ``kube_config`` (and ``context``); else
    the in-cluster service account when running in a pod; else ``$KUBECONFIG`` or
    ``~/.kube/config``. The global ``kubernetes`` configuration is never changed.
    """
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:  # pragma: no cover - the extra is part of the test environment
        raise ConfigurationError(
            "kubernetes", None, "the kubernetes package",
            "pip install 'hybrid[kubernetes]'") from None
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
        from kubernetes.config import kube_config as files

        where = (os.fspath(kube_config) if kube_config is not None
                 else files.KUBE_CONFIG_DEFAULT_LOCATION)
        raise ConfigurationError(
            "kube_config", where,
            "a readable kubeconfig file" + (f" with the context {context!r}" if context else "")
            + f" (loading it failed: {error})",
            CONFIGURATION_FIX + " `hybrid doctor --system kubernetes` checks the result.",
        ) from None


def _status_message(body: Any) -> str:
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return str(body or "").strip()[:500]
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return json.dumps(data)[:500]


@contextlib.contextmanager
def api_errors(what: str) -> Iterator[None]:
    """Turn the client's failures inside the block into :class:`KubernetesAPIError`.

    ``what`` says what was attempted (``"create pod x"``); the error carries the server's
    own message, or why the server could not be reached.
    """
    from kubernetes.client.exceptions import ApiException
    from pydantic import ValidationError
    from urllib3.exceptions import HTTPError

    try:
        yield
    except ApiException as error:
        message = _status_message(error.body) or str(error.reason or "").strip()
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


def call_api(what: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a typed ``CoreV1Api`` method; failures become :class:`KubernetesAPIError`."""
    with api_errors(what):
        return function(*args, **kwargs)
