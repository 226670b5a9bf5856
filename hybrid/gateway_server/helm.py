"""Values for the dask-gateway Helm chart that run hybrid's gateway.

The chart writes its own ``dask_gateway_config.py`` (backend, addresses, authentication from
its values) and appends ``gateway.extraConfig``. hybrid's part is :data:`HELM_SNIPPET`, the same
text for every site; the site's settings travel as the settings YAML in the gateway pod's
environment (``gateway.env``, :data:`~hybrid.gateway_server.settings.SETTINGS_TEXT_ENV`).
The gateway pod's image needs hybrid installed (``gateway.image``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from hybrid.errors import ConfigurationError
from hybrid.fields import ImageReference, validate_value
from hybrid.gateway_server.settings import (
    SETTINGS_TEXT_ENV,
    GatewaySettings,
    settings_yaml,
)

__all__ = ["HELM_SNIPPET", "helm_values", "render_helm_values"]

#: ``gateway.extraConfig.hybrid``: hybrid's backend and clusters, settings from the env.
HELM_SNIPPET = (
    "# hybrid (hybrid.gateway_server): batch workers in gateway clusters. The same text at\n"
    f"# every site; the settings are the YAML in ${SETTINGS_TEXT_ENV} (gateway.env).\n"
    "from hybrid.gateway_server.backend import configure_from_environment\n"
    "\n"
    "configure_from_environment(c, helm=True)\n"
)

#: Settings the chart sets itself from its own values.
_CHART_SETS = {
    "password_file": "set gateway.auth.simple.password (from a secret) in the values instead",
    "address": "the chart sets the addresses",
    "proxy_address": "the chart sets the addresses",
    "tcp_proxy_address": "the chart sets the addresses",
}


def _image(reference: str) -> dict[str, str]:
    if "@" in reference:
        return {"name": reference, "tag": ""}
    name, sep, tag = reference.rpartition(":")
    if sep and "/" not in tag:
        return {"name": name, "tag": tag}
    return {"name": reference, "tag": ""}


def helm_values(settings: GatewaySettings, *, gateway_image: str | None = None,
                scheduler_extra_pod_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The values (a mapping) for ``settings`` (backend ``kubernetes``).

    ``gateway_image`` is the gateway pod's image, which must have hybrid installed;
    ``scheduler_extra_pod_config`` is merged into every scheduler pod.
    """
    if settings.backend != "kubernetes":
        raise ConfigurationError("backend", settings.backend, '"kubernetes" for the Helm chart',
                                 "Give --backend kubernetes.")
    for name, fix in _CHART_SETS.items():
        if getattr(settings, name) is not None:
            raise ConfigurationError(name, getattr(settings, name),
                                     "nothing in Helm values", f"Remove it: {fix}.")
    if scheduler_extra_pod_config is not None and not isinstance(scheduler_extra_pod_config,
                                                                 Mapping):
        raise ConfigurationError("scheduler_extra_pod_config", scheduler_extra_pod_config,
                                 "a mapping merged into the scheduler pod spec")
    gateway: dict[str, Any] = {}
    if gateway_image is not None:
        gateway["image"] = _image(validate_value(ImageReference, gateway_image,
                                                 "gateway_image"))
    auth: dict[str, Any] = {"type": settings.authenticator or "simple"}
    if settings.jupyterhub_api_url:
        auth["jupyterhub"] = {"apiUrl": settings.jupyterhub_api_url}
    gateway["auth"] = auth
    if settings.log_level:
        gateway["loglevel"] = settings.log_level
    backend: dict[str, Any] = {"image": _image(settings.images[0])}
    if scheduler_extra_pod_config:
        backend["scheduler"] = {"extraPodConfig": dict(scheduler_extra_pod_config)}
    gateway["backend"] = backend
    gateway["env"] = [{"name": SETTINGS_TEXT_ENV, "value": settings_yaml(settings)}]
    gateway["extraConfig"] = {"hybrid": HELM_SNIPPET}
    return {"gateway": gateway}


class _BlockStyleDumper(yaml.SafeDumper):
    """Writes multi-line strings (the snippet, the settings) as YAML literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockStyleDumper.add_representer(str, _represent_str)


def render_helm_values(settings: GatewaySettings, **options: Any) -> str:
    """:func:`helm_values` as a YAML document, with a header saying what to do with it."""
    values = helm_values(settings, **options)
    header = (
        "# Values for the dask-gateway Helm chart, written by `hybrid admin gateway-config "
        "--helm`.\n"
        "# Merge them into yours: helm upgrade --install dask-gateway dask/dask-gateway -f "
        "THIS_FILE\n"
        "# The gateway image (gateway.image) must have hybrid installed: "
        "pip install 'hybrid[gateway-server]'.\n"
    )
    if "image" not in values["gateway"]:
        header += "# gateway.image is not set here: set it to such an image (--gateway-image).\n"
    return header + yaml.dump(values, Dumper=_BlockStyleDumper, sort_keys=False,
                              default_flow_style=False, width=10000)
