"""Tools for the facility admin and the submit node: the ingress, the firewall, ``doctor``.

* :mod:`hybrid.admin.ingress`: the Traefik route that brings workers to their scheduler
  (``IngressRouteTCP`` or the file provider's dynamic configuration).
* :mod:`hybrid.admin.ports`: the worker port ranges checked, and the firewall rules they need.
* :mod:`hybrid.admin.doctor`: checks a submit node or notebook runs before submitting workers.
"""
