"""hybrid's dask-gateway-server configuration: the same file for every site.

    dask-gateway-server -f "$(python -c 'import hybrid.gateway_server as g; print(g.CONFIG_FILE)')"

Batch workers join gateway clusters and stay; the admin's cluster limits apply to them.
What changes per site is in the settings YAML: the file named by $HYBRID_GATEWAY_SETTINGS, else
the YAML text in $HYBRID_GATEWAY_SETTINGS_YAML, else hybrid-gateway.yaml beside this file
(`hybrid admin gateway-config` writes it; docs/gateway-server.md lists the keys). Secrets are
never settings: passwords and keys come from 0600 files, a JupyterHub token from the
environment.
"""

from hybrid.gateway_server.backend import configure_from_environment

configure_from_environment(get_config(), beside=__file__)  # noqa: F821 (traitlets provides it)
