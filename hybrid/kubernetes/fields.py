"""Kubernetes' own kinds of value, as pydantic types with the API server's rules.

One validator per kind, in the style of :mod:`hybrid.fields`: DNS-1123 labels (namespaces,
volume names) and subdomains (secret, claim, service account and storage class names),
label keys and values, label mappings, container paths and extended resource names (image
references: ``hybrid.fields.ImageReference``, the one rule the gateway's images follow
too). A bad value is a :class:`~hybrid.errors.ConfigurationError` (through
:func:`hybrid.fields.validate`) before any request is made, not a 422 from the server.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

from hybrid.fields import (
    DNS_SUBDOMAIN,
    LINE_BREAKS,
    QUALIFIED_NAME_PART,
    ImageReference,
    Memory,
    ResourceLimits,
    is_qualified_name,
    reject,
)

__all__ = [
    "Bytes",
    "DNSLabel",
    "DNSSubdomain",
    "ImageReference",
    "KubeConfigPath",
    "LabelKey",
    "LabelValue",
    "Labels",
    "MountPath",
    "ResourceLimits",
    "ResourceName",
    "SubPath",
    "Word",
    "dns_label",
    "dns_subdomain",
    "label_key",
    "label_value",
]

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

DNS_LABEL_RULE = "1-63 characters from a-z 0-9 -, starting and ending with a letter or digit"
DNS_SUBDOMAIN_RULE = ("1-253 characters from a-z 0-9 - ., each dot-separated part starting "
                      "and ending with a letter or digit")
LABEL_KEY_RULE = ("a label key NAME or PREFIX/NAME (NAME: 1-63 characters from A-Z a-z 0-9 - "
                  "_ ., starting and ending with a letter or digit; PREFIX: a DNS subdomain)")
LABEL_VALUE_RULE = ("a label value: at most 63 characters from A-Z a-z 0-9 - _ ., starting "
                    "and ending with a letter or digit")


def dns_label(value: Any) -> Any:
    """A DNS-1123 label (namespaces, volume and container names)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise reject(DNS_LABEL_RULE)
    return value


def dns_subdomain(value: Any) -> Any:
    """A DNS-1123 subdomain (pod, secret, claim, service account, storage class names)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 253 or not DNS_SUBDOMAIN.fullmatch(value):
        raise reject(DNS_SUBDOMAIN_RULE)
    return value


def _is_label_value(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and (
        not value or bool(QUALIFIED_NAME_PART.fullmatch(value)))


def label_key(value: Any) -> Any:
    """A qualified label key ``[prefix/]name``."""
    if not is_qualified_name(value):
        raise reject(LABEL_KEY_RULE)
    return value


def label_value(value: Any) -> Any:
    """A label value: empty, or up to 63 characters starting and ending alphanumeric."""
    if not _is_label_value(value):
        raise reject(LABEL_VALUE_RULE)
    return value


def _labels(value: Any) -> Any:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise reject("a mapping of label keys to string values, e.g. {'team': 'chemistry'}")
    for key, text in value.items():
        if not is_qualified_name(key):
            raise reject(f"{LABEL_KEY_RULE} as keys; {key!r} is not one")
        if not _is_label_value(text):
            raise reject(f"{LABEL_VALUE_RULE}; the value of {key!r}, {text!r}, is not one")
    return dict(value)


def _mount_path(value: Any) -> Any:
    accepted = 'an absolute path in the container, e.g. "/data"'
    if value is None or value == "":
        raise reject(accepted, "Every volume needs a mount path.")
    if not isinstance(value, str) or not value.startswith("/"):
        raise reject(accepted)
    if ":" in value or any(ord(c) < 32 for c in value) or ".." in value.split("/"):
        raise reject(accepted + " without '..', ':' or control characters")
    return value.rstrip("/") or "/"


def _sub_path(value: Any) -> Any:
    if value is None:
        return None
    accepted = 'a relative path inside the volume, e.g. "oe_license.txt", or None'
    if not isinstance(value, str) or not value or value.startswith("/"):
        raise reject(accepted)
    if any(ord(c) < 32 for c in value) or ".." in value.split("/"):
        raise reject(accepted + " without '..' or control characters")
    return value


def _word(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or any(
            ord(c) < 32 or c in LINE_BREAKS for c in value):
        raise reject("a non-empty string on one line")
    return value


def _kube_config(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    _word(value)
    return os.path.abspath(os.path.expanduser(value))


def _resource_name(value: Any) -> Any:
    if not is_qualified_name(value) or "/" not in value:
        raise reject('an extended resource name with a domain, e.g. "nvidia.com/gpu" or '
                     '"amd.com/gpu"')
    return value


#: A DNS-1123 label: namespaces, volume names.
DNSLabel = Annotated[str, BeforeValidator(dns_label)]
#: A DNS-1123 subdomain: secret, claim, service account and storage class names.
DNSSubdomain = Annotated[str, BeforeValidator(dns_subdomain)]
#: A label key ``[prefix/]name``.
LabelKey = Annotated[str, BeforeValidator(label_key)]
#: A label value.
LabelValue = Annotated[str, BeforeValidator(label_value)]
#: Labels (or a node selector): a mapping of label keys to label values.
Labels = Annotated[dict[str, str], BeforeValidator(_labels)]
#: An absolute path in the container, without ``..`` or ``:`` (trailing ``/`` dropped).
MountPath = Annotated[str, BeforeValidator(_mount_path)]
#: A relative path inside a volume (a secret's key).
SubPath = Annotated[str, BeforeValidator(_sub_path)]
#: A command, a context name: a non-empty string on one line.
Word = Annotated[str, BeforeValidator(_word)]
#: A kubeconfig file (``~`` expanded, made absolute).
KubeConfigPath = Annotated[str, BeforeValidator(_kube_config)]
#: A size (a memory, a volume's size), as bytes; written ``"<n> B"`` in plain data, which
#: reads back as the same size.
Bytes = Annotated[Memory, PlainSerializer(lambda n: f"{n} B", return_type=str,
                                          when_used="json")]
#: An extended resource name with a domain (``nvidia.com/gpu``).
ResourceName = Annotated[str, BeforeValidator(_resource_name)]

