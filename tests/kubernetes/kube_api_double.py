"""``KubeAPIServerDouble``: a TEST DOUBLE of the Kubernetes API server.

No real API server (or kubelet) can run on the test machine, so this double stands in for
both. It speaks real HTTP on 127.0.0.1, and the official ``kubernetes`` client talks to it
exactly as to a cluster. It implements only what hybrid uses:

* pods: create, read, list (label selector, ``limit``/``continue``), delete (graceful), log;
* secrets: create, read, replace, list, delete;
* persistent volume claims: create, read, list, delete; events: list (field selector);
* watches (``?watch=true``) of any of these, from a ``resourceVersion`` on: ``ADDED``,
  ``MODIFIED`` and ``DELETED`` events as JSON lines of a chunked response, until
  ``timeoutSeconds``.

Every object it receives is validated against the official OpenAPI schema (the
``kubernetes-validate`` package, strict, Kubernetes 1.33) and against the API server's own
rules for names, labels, quantities, volumes and mounts; an invalid object gets the same
``422 Invalid`` a real server answers.

What a pod does is REAL: the double schedules it onto one of its (pretend) nodes, honouring
resource requests, ``nodeSelector``, required node affinity, taints and tolerations (a pod
that fits nowhere stays ``Pending`` with an ``Unschedulable`` condition, worded as the real
scheduler words it); it "pulls" the image (names in ``missing_images`` fail with
``ErrImagePull`` then ``ImagePullBackOff``); it "mounts" the volumes; and then it starts the
container's command as a real local process, with the container's environment (the
downward API ``fieldRef`` and ``secretKeyRef``, ``$(VAR)`` expansion as the kubelet does
it). The "image" is this machine's Python environment: its ``bin`` directory heads ``PATH``.
Deleting a pod sends SIGTERM to its process group, then SIGKILL after the grace period;
``activeDeadlineSeconds`` is enforced (``DeadlineExceeded``).

The one liberty it takes: a process cannot get a private mount namespace without
privileges, so every volume lives in a directory of the double, and each mountPath that
appears at the start of a command argument or an env value is rewritten to that directory.
Secret files are written with the volume's ``defaultMode``; claims are shared directories.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import kubernetes_validate

SCHEMA_VERSION = "1.33"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)"
                       r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SUFFIX = {
    None: Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
    "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_KINDS = {"pods": "Pod", "secrets": "Secret", "persistentvolumeclaims": "PersistentVolumeClaim",
          "events": "Event"}


def now_text() -> str:
    """The current time as the API writes it."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes quantity (``"4Gi"``, ``"500m"``, ``"1e3"``, ``2``) as an exact number."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    number, suffix = Fraction(match[1]), match[2]
    if suffix and suffix[0] in "eE" and len(suffix) > 1:
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def expand(text: str, mapping: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (third_party/forked/golang/expansion in kubernetes).

    ``$$`` is a literal ``$``; an unknown ``$(VAR)`` stays as it is.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(mapping.get(name, f"$({name})"))
                    i = end + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _split_requirements(selector: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def label_selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Whether ``labels`` satisfy a label selector (equality, set and existence forms)."""
    if not selector:
        return True
    for requirement in _split_requirements(selector):
        set_form = re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", requirement)
        if set_form:
            key, operator = set_form[1], set_form[2]
            values = {v.strip() for v in set_form[3].split(",")}
            if operator == "in" and labels.get(key) not in values:
                return False
            if operator == "notin" and key in labels and labels[key] in values:
                return False
        elif "!=" in requirement:
            key, value = (p.strip() for p in requirement.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = (p.strip() for p in re.split(r"==?", requirement, maxsplit=1))
            if labels.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:].strip() in labels:
                return False
        elif requirement not in labels:
            return False
    return True


def field_selector_matches(selector: str | None, obj: dict[str, Any]) -> bool:
    """Equality field selectors over dotted paths (``involvedObject.name=x``)."""
    if not selector:
        return True
    for requirement in selector.split(","):
        path, _, value = requirement.partition("=")
        current: Any = obj
        for part in path.strip().split("."):
            current = current.get(part) if isinstance(current, dict) else None
        if str(current) != value.strip():
            return False
    return True


class APIError(Exception):
    """An error answer of the double: HTTP code, Kubernetes reason, message."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self) -> dict[str, Any]:
        """The ``Status`` object the API answers with."""
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


def _invalid(kind: str, name: str, problems: list[str]) -> APIError:
    return APIError(422, "Invalid", f'{kind} "{name}" is invalid: ' + "; ".join(problems))


@dataclass
class NodeDouble:
    """A pretend node: its labels, what it can allocate, its taints."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=lambda: {
        "cpu": "16", "memory": "64Gi", "ephemeral-storage": "500Gi", "pods": "110"})
    taints: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.labels = {"kubernetes.io/hostname": self.name, **self.labels}


@dataclass
class _Runtime:
    """The kubelet's side of one pod: its process and directories."""

    root: Path
    process: subprocess.Popen | None = None
    log: Path | None = None
    pull_failed_at: float | None = None
    started_at: float | None = None
    deadline_hit: bool = False


def _toleration_matches(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    operator = toleration.get("operator", "Equal")
    key = toleration.get("key")
    if operator == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and toleration.get("value", "") == taint.get("value", "")


def _expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    values = expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > want if operator == "Gt" else have < want
    return False


class KubeAPIServerDouble:
    """A TEST DOUBLE of the Kubernetes API server and kubelet (see the module docstring).

    ``nodes`` are the pretend nodes; ``storage_classes`` the classes that provision claims
    (``default_storage_class`` is used when a claim names none); ``missing_images`` cannot be
    pulled; ``token`` (if set) must come as ``Authorization: Bearer <token>``;
    ``page_size`` caps list pages (a real server may return fewer items than ``limit``);
    ``pod_quota`` is a ResourceQuota on the number of live pods per namespace (403 beyond);
    ``termination_delay`` is how long the pretend kubelet takes to act on a pod's deletion
    (a real one takes its time too: the pod stays listed, being deleted, meanwhile).
    """

    def __init__(self, root: Path, nodes: list[NodeDouble] | None = None,
                 storage_classes: tuple[str, ...] = ("standard",),
                 default_storage_class: str | None = "standard",
                 missing_images: tuple[str, ...] = (), token: str | None = None,
                 page_size: int | None = None, bind_delay: float = 0.3,
                 image_env: dict[str, str] | None = None, pod_quota: int | None = None,
                 termination_delay: float = 0.0):
        self.root = Path(root)
        self.nodes = nodes if nodes is not None else [NodeDouble("node-1")]
        self.storage_classes = set(storage_classes)
        self.default_storage_class = default_storage_class
        self.missing_images = set(missing_images)
        self.token = token
        self.page_size = page_size
        self.bind_delay = bind_delay
        self.image_env = dict(image_env or {})
        self.pod_quota = pod_quota
        self.termination_delay = termination_delay
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.runtimes: dict[tuple[str, str], _Runtime] = {}
        #: Every request served: (method, path with query).
        self.requests: list[tuple[str, str]] = []
        #: Metadata of every pod ever created, in order (pods are gone once deleted).
        self.created_pods: list[dict[str, Any]] = []
        #: PIDs of every process the double started.
        self.started_pids: list[int] = []
        self._claim_created: dict[tuple[str, str], float] = {}
        #: (resource, namespace, name) -> the version at which the object was created.
        self._created_version: dict[tuple[str, str, str], int] = {}
        #: Deleted objects, for watches: (version of the deletion, resource, namespace, obj).
        self._tombstones: list[tuple[int, str, str, dict[str, Any]]] = []
        self._claim_reported: set[tuple[str, str]] = set()
        self._lock = threading.RLock()
        self._version = 0
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._server is not None, "start() the double first"
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> KubeAPIServerDouble:
        """Serve on a free loopback port and start the controller loop."""
        self.root.mkdir(parents=True, exist_ok=True)
        double = self

        class Handler(_Handler):
            server_double = double

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        server = self._server
        for target, name in ((lambda: server.serve_forever(poll_interval=0.05),
                              "kube-double-http"),
                             (self._controller, "kube-double-controller")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop serving; stop every process the double started (TERM, then KILL)."""
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        with self._lock:
            runtimes = list(self.runtimes.values())
        for runtime in runtimes:
            self._terminate(runtime, grace=5)

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` for this double."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        if self.token:
            configuration.api_key = {"authorization": self.token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        return configuration

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this double."""
        from kubernetes import client

        return client.ApiClient(self.configuration())

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig file whose current context is this double."""
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "double",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": user}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "tester",
                                                         "namespace": namespace}}],
        }
        path.write_text(json.dumps(config))
        return path

    # ------------------------------------------------------------------ inspection
    def list_objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Stored objects of one resource (deep copies)."""
        with self._lock:
            return [json.loads(json.dumps(obj)) for (res, ns, _), obj in self.objects.items()
                    if res == resource and (namespace is None or ns == namespace)]

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        """One stored pod, or None."""
        with self._lock:
            obj = self.objects.get(("pods", namespace, name))
            return json.loads(json.dumps(obj)) if obj else None

    def pod_log(self, name: str, namespace: str = "default") -> str:
        """What the pod's process printed."""
        runtime = self.runtimes.get((namespace, name))
        if runtime is None or runtime.log is None or not runtime.log.exists():
            return ""
        return runtime.log.read_text(errors="replace")

    def secret_files(self, pod: str, volume: str, namespace: str = "default") -> Path:
        """Where the double materialised a pod's secret volume."""
        return self.root / "pods" / namespace / pod / "volumes" / volume

    def claim_directory(self, claim: str, namespace: str = "default") -> Path:
        """The shared directory behind a bound claim."""
        return self.root / "claims" / namespace / claim

    def live_processes(self) -> list[int]:
        """PIDs of pod processes still running."""
        with self._lock:
            return [r.process.pid for r in self.runtimes.values()
                    if r.process is not None and r.process.poll() is None]

    # ------------------------------------------------------------------ request handling
    def handle(self, method: str, raw_path: str, body: bytes,
               headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """Answer one request: (HTTP status, JSON body)."""
        with self._lock:
            self.requests.append((method, raw_path))
        if self.token and headers.get("authorization") != f"Bearer {self.token}":
            raise APIError(401, "Unauthorized", "Unauthorized")
        url = urlparse(raw_path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [p for p in url.path.split("/") if p]
        if len(parts) < 5 or parts[:3] != ["api", "v1", "namespaces"] or parts[4] not in _KINDS:
            raise APIError(404, "NotFound", f"the server could not find the requested resource "
                                            f"({method} {url.path})")
        namespace, resource = parts[3], parts[4]
        name = parts[5] if len(parts) > 5 else None
        sub = parts[6] if len(parts) > 6 else None
        payload = None
        if body:
            try:
                payload = json.loads(body)
            except ValueError:
                raise APIError(400, "BadRequest", "the request body is not JSON") from None
        with self._lock:
            answer: tuple[int, dict[str, Any]] | None = None
            if name is None and method == "GET" and str(query.get("watch", "")).lower() in (
                    "true", "1"):
                raise _WatchAnswer(resource, namespace, query)
            if name is None and method == "GET":
                answer = 200, self._list(resource, namespace, query)
            elif name is None and method == "POST":
                answer = 201, self._create(resource, namespace, payload)
            elif name is not None and sub == "log" and method == "GET" and resource == "pods":
                raise _LogAnswer(self.pod_log(name, namespace))
            elif name is not None and sub is None:
                if method == "GET":
                    answer = 200, self._get(resource, namespace, name)
                elif method == "PUT":
                    answer = 200, self._replace(resource, namespace, name, payload)
                elif method == "DELETE":
                    answer = 200, self._delete(resource, namespace, name, query, payload)
            if answer is not None:
                # A copy taken under the lock: the controller keeps changing the originals.
                return answer[0], json.loads(json.dumps(answer[1]))
        raise APIError(405, "MethodNotAllowed", f"{method} is not supported on {url.path}")

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        obj = self.objects.get((resource, namespace, name))
        if obj is None:
            raise APIError(404, "NotFound", f'{resource} "{name}" not found')
        return obj

    def _list(self, resource: str, namespace: str, query: dict[str, str]) -> dict[str, Any]:
        items = [obj for (res, ns, _), obj in sorted(self.objects.items())
                 if res == resource and ns == namespace
                 and label_selector_matches(query.get("labelSelector"),
                                            obj["metadata"].get("labels") or {})
                 and field_selector_matches(query.get("fieldSelector"), obj)]
        start = int(query.get("continue") or 0)
        limit = int(query["limit"]) if query.get("limit") else None
        if self.page_size is not None:
            limit = min(limit or self.page_size, self.page_size)
        metadata: dict[str, Any] = {"resourceVersion": str(self._version)}
        if limit is not None and start + limit < len(items):
            page = items[start:start + limit]
            metadata["continue"] = str(start + limit)
        else:
            page = items[start:]
        return {"kind": _KINDS[resource] + "List", "apiVersion": "v1", "metadata": metadata,
                "items": page}

    def _validate(self, resource: str, namespace: str, obj: Any) -> None:
        kind = _KINDS[resource]
        if not isinstance(obj, dict) or obj.get("kind") != kind or obj.get("apiVersion") != "v1":
            raise APIError(400, "BadRequest", f"expected a v1 {kind} object")
        metadata = obj.setdefault("metadata", {})
        name = metadata.get("name") or ""
        if metadata.get("namespace", namespace) != namespace:
            raise APIError(400, "BadRequest", "the namespace of the provided object does not "
                                              "match the namespace sent on the request")
        try:
            kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            raise _invalid(kind, name, [f"{path}: {error.message}"]) from None
        problems: list[str] = []
        if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            problems.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 "
                            "subdomain must consist of lower case alphanumeric characters, '-' "
                            "or '.'")
        for key, value in (metadata.get("labels") or {}).items():
            prefix, _, label = key.rpartition("/")
            if (prefix and not _DNS_SUBDOMAIN.match(prefix)) or len(label) > 63 or (
                    not _LABEL_NAME.match(label)):
                problems.append(f"metadata.labels: Invalid value: {key!r}: bad label key")
            if not isinstance(value, str) or len(value) > 63 or (
                    value and not _LABEL_NAME.match(value)):
                problems.append(f"metadata.labels: Invalid value: {value!r}: bad label value")
        if resource == "pods":
            problems += self._pod_problems(obj)
        elif resource == "secrets":
            for key, value in (obj.get("data") or {}).items():
                if not _SECRET_KEY.match(key):
                    problems.append(f"data[{key}]: Invalid value: a valid config key is needed")
                try:
                    base64.b64decode(value, validate=True)
                except (ValueError, TypeError):
                    problems.append(f"data[{key}]: Invalid value: not base64")
        elif resource == "persistentvolumeclaims":
            spec = obj.get("spec") or {}
            if not spec.get("accessModes"):
                problems.append("spec.accessModes: Required value: at least 1 access mode")
            storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
            try:
                if storage is None or parse_quantity(storage) <= 0:
                    problems.append("spec.resources.requests.storage: must be greater than zero")
            except ValueError as error:
                problems.append(f"spec.resources.requests.storage: {error}")
        if problems:
            raise _invalid(kind, name, problems)

    def _pod_problems(self, pod: dict[str, Any]) -> list[str]:
        spec = pod.get("spec") or {}
        problems: list[str] = []
        volumes: dict[str, dict[str, Any]] = {}
        for i, volume in enumerate(spec.get("volumes") or []):
            vname = volume.get("name", "")
            if not _DNS_LABEL.match(vname) or len(vname) > 63:
                problems.append(f"spec.volumes[{i}].name: Invalid value: {vname!r}")
            if vname in volumes:
                problems.append(f"spec.volumes[{i}].name: Duplicate value: {vname!r}")
            mode = (volume.get("secret") or {}).get("defaultMode")
            if mode is not None and not 0 <= mode <= 0o777:
                problems.append(f"spec.volumes[{i}].secret.defaultMode: Invalid value: {mode}")
            volumes[vname] = volume
        for toleration in spec.get("tolerations") or []:
            if toleration.get("operator") == "Exists" and toleration.get("value"):
                problems.append("spec.tolerations: value must be empty when operator is Exists")
        for c, container in enumerate(spec.get("containers") or []):
            where = f"spec.containers[{c}]"
            if not _DNS_LABEL.match(container.get("name", "")):
                problems.append(f"{where}.name: Invalid value")
            if not container.get("image"):
                problems.append(f"{where}.image: Required value")
            mounts = set()
            for m, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in volumes:
                    problems.append(f"{where}.volumeMounts[{m}].name: Not found: "
                                    f"{mount.get('name')!r}")
                path = mount.get("mountPath", "")
                if path in mounts:
                    problems.append(f"{where}.volumeMounts[{m}].mountPath: must be unique")
                if ":" in path or not path:
                    problems.append(f"{where}.volumeMounts[{m}].mountPath: Invalid value")
                sub = mount.get("subPath")
                if sub and (sub.startswith("/") or ".." in sub.split("/")):
                    problems.append(f"{where}.volumeMounts[{m}].subPath: Invalid value")
                mounts.add(path)
            resources = container.get("resources") or {}
            parsed: dict[str, dict[str, Fraction]] = {}
            for section in ("requests", "limits"):
                parsed[section] = {}
                for key, value in (resources.get(section) or {}).items():
                    try:
                        parsed[section][key] = parse_quantity(value)
                    except ValueError as error:
                        problems.append(f"{where}.resources.{section}[{key}]: {error}")
            for key, request in parsed["requests"].items():
                limit = parsed["limits"].get(key)
                if limit is not None and request > limit:
                    problems.append(f"{where}.resources.requests[{key}]: must be less than or "
                                    "equal to the limit")
                if "/" in key and not key.startswith("kubernetes.io/") and limit is not None and (
                        request != limit):
                    problems.append(f"{where}.resources.requests[{key}]: must be equal to "
                                    f"{key} limit")
            for e, env in enumerate(container.get("env") or []):
                if "value" in env and "valueFrom" in env:
                    problems.append(f"{where}.env[{e}].valueFrom: may not be specified when "
                                    "`value` is not empty")
        return problems

    def _create(self, resource: str, namespace: str, obj: Any) -> dict[str, Any]:
        self._validate(resource, namespace, obj)
        name = obj["metadata"]["name"]
        if (resource, namespace, name) in self.objects:
            raise APIError(409, "AlreadyExists", f'{resource} "{name}" already exists')
        if resource == "pods" and self.pod_quota is not None:
            used = sum(1 for (res, ns, _), o in self.objects.items()
                       if res == "pods" and ns == namespace
                       and o["status"]["phase"] not in ("Succeeded", "Failed"))
            if used >= self.pod_quota:
                raise APIError(403, "Forbidden", (
                    f'pods "{name}" is forbidden: exceeded quota: compute-resources, '
                    f"requested: pods=1, used: pods={used}, limited: pods={self.pod_quota}"))
        metadata = obj["metadata"]
        metadata.update(namespace=namespace, uid=str(uuid.uuid4()),
                        creationTimestamp=now_text(), resourceVersion=self._next_version())
        if resource == "pods":
            obj["status"] = {"phase": "Pending", "qosClass": _qos(obj)}
            self.runtimes[(namespace, name)] = _Runtime(self.root / "pods" / namespace / name)
            self.created_pods.append(json.loads(json.dumps(metadata)))
        elif resource == "persistentvolumeclaims":
            obj["status"] = {"phase": "Pending"}
            if obj["spec"].get("storageClassName") is None and self.default_storage_class:
                obj["spec"]["storageClassName"] = self.default_storage_class
            self._claim_created[(namespace, name)] = time.monotonic()
        elif resource == "secrets":
            obj.setdefault("type", "Opaque")
        self.objects[(resource, namespace, name)] = obj
        self._created_version[(resource, namespace, name)] = int(metadata["resourceVersion"])
        if resource == "persistentvolumeclaims" and self.bind_delay <= 0:
            self._bind_claim(namespace, obj)
        return obj

    def _replace(self, resource: str, namespace: str, name: str, obj: Any) -> dict[str, Any]:
        if resource != "secrets":
            raise APIError(405, "MethodNotAllowed", "the double replaces only secrets")
        old = self._get(resource, namespace, name)
        self._validate(resource, namespace, obj)
        if obj["metadata"]["name"] != name:
            raise APIError(400, "BadRequest", "the name of the object does not match the URL")
        obj["metadata"].update(namespace=namespace, uid=old["metadata"]["uid"],
                               creationTimestamp=old["metadata"]["creationTimestamp"],
                               resourceVersion=self._next_version())
        self.objects[(resource, namespace, name)] = obj
        return obj

    def _delete(self, resource: str, namespace: str, name: str, query: dict[str, str],
                options: Any) -> dict[str, Any]:
        obj = self._get(resource, namespace, name)
        if resource == "persistentvolumeclaims":  # answered with the deleted object
            self._forget(resource, namespace, name)
            return obj
        if resource != "pods":  # answered with a Status, as for secrets
            self._forget(resource, namespace, name)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": name, "kind": resource}}
        grace = query.get("gracePeriodSeconds")
        if grace is None and isinstance(options, dict):
            grace = options.get("gracePeriodSeconds")
        grace = int(grace) if grace is not None else int(
            obj["spec"].get("terminationGracePeriodSeconds", 30))
        runtime = self.runtimes.get((namespace, name))
        running = runtime is not None and runtime.process is not None and (
            runtime.process.poll() is None)
        if not running:
            self._forget(resource, namespace, name)
            return obj
        if not obj["metadata"].get("deletionTimestamp"):
            obj["metadata"]["deletionTimestamp"] = now_text()
            obj["metadata"]["deletionGracePeriodSeconds"] = grace
            obj["metadata"]["resourceVersion"] = self._next_version()
            thread = threading.Thread(target=self._finish_deletion,
                                      args=(namespace, name, runtime, grace), daemon=True)
            thread.start()
        return obj

    def _finish_deletion(self, namespace: str, name: str, runtime: _Runtime, grace: int) -> None:
        self._stop.wait(self.termination_delay)
        self._terminate(runtime, grace)
        with self._lock:
            if ("pods", namespace, name) in self.objects:
                self._forget("pods", namespace, name)

    def _forget(self, resource: str, namespace: str, name: str) -> None:
        """Remove a stored object, leaving a tombstone for watches (call under the lock)."""
        obj = self.objects.pop((resource, namespace, name))
        self._created_version.pop((resource, namespace, name), None)
        gone = json.loads(json.dumps(obj))
        gone["metadata"]["resourceVersion"] = self._next_version()
        self._tombstones.append((int(gone["metadata"]["resourceVersion"]), resource, namespace,
                                 gone))

    # ------------------------------------------------------------------ watches
    def watch_events(self, resource: str, namespace: str, query: dict[str, str]) -> Any:
        """The events of a watch, as the API streams them (a generator of dicts).

        From ``resourceVersion`` on (without one: ``ADDED`` for every object first), until
        ``timeoutSeconds`` or until the double stops.
        """
        end = time.monotonic() + float(query.get("timeoutSeconds") or 1800)

        def matches(obj: dict[str, Any]) -> bool:
            return label_selector_matches(query.get("labelSelector"),
                                          obj["metadata"].get("labels") or {}) and (
                field_selector_matches(query.get("fieldSelector"), obj))

        def current() -> dict[str, dict[str, Any]]:
            return {name: json.loads(json.dumps(obj))
                    for (res, ns, name), obj in self.objects.items()
                    if res == resource and ns == namespace and matches(obj)}

        with self._lock:
            since_text = query.get("resourceVersion")
            initial = since_text in (None, "", "0")
            since = self._version if initial else int(since_text)
            events: list[tuple[int, dict[str, Any]]] = []
            sent: dict[str, int] = {}  # name -> the version the watcher knows
            for name, obj in current().items():
                version = int(obj["metadata"]["resourceVersion"])
                if initial:
                    events.append((version, {"type": "ADDED", "object": obj}))
                    sent[name] = version
                elif version <= since:
                    sent[name] = version
                elif self._created_version.get((resource, namespace, name), 0) <= since:
                    sent[name] = since  # known before, changed since: MODIFIED follows
            seen_tombstones = 0
        while not self._stop.is_set():
            with self._lock:
                for version, res, ns, obj in self._tombstones[seen_tombstones:]:
                    if version > since and res == resource and ns == namespace and matches(obj):
                        events.append((version, {"type": "DELETED", "object": obj}))
                        sent.pop(obj["metadata"]["name"], None)
                seen_tombstones = len(self._tombstones)
                for name, obj in current().items():
                    version = int(obj["metadata"]["resourceVersion"])
                    if name not in sent or version > sent[name]:
                        kind = "MODIFIED" if name in sent else "ADDED"
                        events.append((version, {"type": kind, "object": obj}))
                        sent[name] = version
            for _, event in sorted(events, key=lambda item: item[0]):
                yield event
            events = []
            if time.monotonic() > end:
                return
            time.sleep(0.05)

    # ------------------------------------------------------------------ the controller
    def _controller(self) -> None:
        while not self._stop.wait(0.1):
            try:
                with self._lock:
                    claims = [(k, o) for k, o in self.objects.items()
                              if k[0] == "persistentvolumeclaims"]
                    pods = [(k, o) for k, o in self.objects.items() if k[0] == "pods"]
                for key, claim in claims:
                    self._bind_claim(key[1], claim)
                for key, pod in pods:
                    self._step_pod(key[1], key[2], pod)
            except Exception as error:  # keep the double alive; tests see the symptom
                print(f"kube double controller error: {error!r}", file=sys.stderr)

    def _bind_claim(self, namespace: str, claim: dict[str, Any]) -> None:
        with self._lock:
            if claim["status"].get("phase") != "Pending":
                return
            name = claim["metadata"]["name"]
            storage_class = claim["spec"].get("storageClassName")
            if storage_class not in self.storage_classes:
                if (namespace, name) not in self._claim_reported:
                    self._claim_reported.add((namespace, name))
                    message = (f'storageclass.storage.k8s.io "{storage_class}" not found'
                               if storage_class else "no persistent volumes available for this "
                               "claim and no storage class is set")
                    self._event(namespace, "PersistentVolumeClaim", name,
                                "ProvisioningFailed" if storage_class else "FailedBinding",
                                message)
                return
            if time.monotonic() - self._claim_created.get((namespace, name), 0) < self.bind_delay:
                return
            self.claim_directory(name, namespace).mkdir(parents=True, exist_ok=True)
            claim["spec"]["volumeName"] = f"pvc-{claim['metadata']['uid']}"
            claim["status"] = {"phase": "Bound",
                               "accessModes": list(claim["spec"]["accessModes"]),
                               "capacity": {"storage": claim["spec"]["resources"]["requests"]
                                            ["storage"]}}
            claim["metadata"]["resourceVersion"] = self._next_version()

    def _event(self, namespace: str, kind: str, name: str, reason: str, message: str) -> None:
        event_name = f"{name}.{secrets.token_hex(8)}"
        self.objects[("events", namespace, event_name)] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name, "namespace": namespace,
                         "resourceVersion": self._next_version()},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace,
                               "apiVersion": "v1"},
            "reason": reason, "message": message, "type": "Warning",
            "lastTimestamp": now_text(), "count": 1,
        }

    def _step_pod(self, namespace: str, name: str, pod: dict[str, Any]) -> None:
        with self._lock:
            if self.objects.get(("pods", namespace, name)) is not pod:
                return  # deleted since the controller looked
            if pod["metadata"].get("deletionTimestamp") or pod["status"]["phase"] in (
                    "Succeeded", "Failed"):
                return
            runtime = self.runtimes[(namespace, name)]
            if not pod["spec"].get("nodeName"):
                self._schedule(namespace, pod)
                return
            if runtime.process is None:
                self._start(namespace, pod, runtime)
                return
            code = runtime.process.poll()
            deadline = pod["spec"].get("activeDeadlineSeconds")
            if code is None and deadline is not None and runtime.started_at is not None and (
                    time.monotonic() - runtime.started_at > deadline) and not runtime.deadline_hit:
                runtime.deadline_hit = True
                threading.Thread(target=self._terminate, args=(runtime, 2), daemon=True).start()
                return
            if code is None:
                return
            finished = now_text()
            started = pod["status"].get("startTime", finished)
            pod["status"]["containerStatuses"][0].update(ready=False, started=False, state={
                "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                               "startedAt": started, "finishedAt": finished}})
            if runtime.deadline_hit:
                pod["status"].update(phase="Failed", reason="DeadlineExceeded",
                                     message="Pod was active on the node longer than the "
                                             "specified deadline")
            else:
                pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            pod["status"]["conditions"] = [c for c in pod["status"].get("conditions", [])
                                           if c["type"] == "PodScheduled"]
            pod["metadata"]["resourceVersion"] = self._next_version()

    def _schedule(self, namespace: str, pod: dict[str, Any]) -> None:
        spec = pod["spec"]
        message = None
        for volume in spec.get("volumes") or []:
            claim_ref = volume.get("persistentVolumeClaim")
            if claim_ref:
                claim = self.objects.get(("persistentvolumeclaims", namespace,
                                          claim_ref["claimName"]))
                if claim is None:
                    message = f'persistentvolumeclaim "{claim_ref["claimName"]}" not found'
                elif claim["status"].get("phase") != "Bound":
                    message = "pod has unbound immediate PersistentVolumeClaims"
        reasons: dict[str, int] = {}
        chosen = None
        if message is None:
            for node in self.nodes:
                why = self._does_not_fit(pod, node, namespace)
                if why is None:
                    chosen = node
                    break
                reasons[why] = reasons.get(why, 0) + 1
            if chosen is None:
                detail = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
                total = len(self.nodes)
                message = (f"0/{total} nodes are available: {detail}. preemption: 0/{total} "
                           f"nodes are available: {total} Preemption is not helpful for "
                           "scheduling.")
        scheduled = {"type": "PodScheduled", "lastTransitionTime": now_text()}
        if chosen is None:
            scheduled.update(status="False", reason="Unschedulable", message=message)
        else:
            spec["nodeName"] = chosen.name
            scheduled["status"] = "True"
            pod["status"].update(hostIP="127.0.0.1", podIP="127.0.0.1",
                                 startTime=now_text(), containerStatuses=[
                                     self._container_status(pod, {"waiting": {
                                         "reason": "ContainerCreating"}})])
        old = pod["status"].get("conditions") or []
        if old != [scheduled] and (not old or old[0].get("message") != scheduled.get("message")
                                   or old[0].get("status") != scheduled["status"]):
            pod["status"]["conditions"] = [scheduled]
            pod["metadata"]["resourceVersion"] = self._next_version()

    def _does_not_fit(self, pod: dict[str, Any], node: NodeDouble, namespace: str) -> str | None:
        spec = pod["spec"]
        for key, value in (spec.get("nodeSelector") or {}).items():
            if node.labels.get(key) != value:
                return "node(s) didn't match Pod's node affinity/selector"
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution")
        if required:
            terms = required.get("nodeSelectorTerms") or []
            if not any(all(_expression_matches(e, node.labels)
                           for e in term.get("matchExpressions") or [])
                       for term in terms):
                return "node(s) didn't match Pod's node affinity/selector"
        for taint in node.taints:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                    _toleration_matches(t, taint) for t in spec.get("tolerations") or []):
                label = f"{taint['key']}: {taint.get('value', '')}".rstrip(": ")
                return f"node(s) had untolerated taint {{{label}}}"
        wanted = _requests(pod)
        used: dict[str, Fraction] = {}
        for (res, _, _), other in self.objects.items():
            if res == "pods" and other is not pod and other["spec"].get("nodeName") == node.name \
                    and other["status"]["phase"] not in ("Succeeded", "Failed"):
                for key, amount in _requests(other).items():
                    used[key] = used.get(key, Fraction(0)) + amount
        for key, amount in wanted.items():
            capacity = parse_quantity(node.allocatable.get(key, "0"))
            if used.get(key, Fraction(0)) + amount > capacity:
                return f"Insufficient {key}"
        return None

    def _container_status(self, pod: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        container = pod["spec"]["containers"][0]
        return {"name": container["name"], "image": container["image"], "imageID": "",
                "ready": False, "restartCount": 0, "started": False, "state": state}

    def _start(self, namespace: str, pod: dict[str, Any], runtime: _Runtime) -> None:
        container = pod["spec"]["containers"][0]
        status = pod["status"]
        if container["image"] in self.missing_images:
            now = time.monotonic()
            if runtime.pull_failed_at is None:
                runtime.pull_failed_at = now
                waiting = {"reason": "ErrImagePull", "message": (
                    f'failed to pull and unpack image "{container["image"]}": not found')}
            elif now - runtime.pull_failed_at > 1.0:
                waiting = {"reason": "ImagePullBackOff",
                           "message": f'Back-off pulling image "{container["image"]}"'}
            else:
                return
            if status["containerStatuses"][0]["state"].get("waiting") != waiting:
                status["containerStatuses"][0]["state"] = {"waiting": waiting}
                pod["metadata"]["resourceVersion"] = self._next_version()
            return
        try:
            mounts = self._mount(namespace, pod, runtime)
            env = self._environment(namespace, pod, mounts)
        except _NotReady as problem:
            waiting = {"reason": problem.reason, "message": problem.message}
            if status["containerStatuses"][0]["state"].get("waiting") != waiting:
                status["containerStatuses"][0]["state"] = {"waiting": waiting}
                pod["metadata"]["resourceVersion"] = self._next_version()
            return
        words = [expand(w, env) for w in (container.get("command") or [])
                 + (container.get("args") or [])]
        words = [_rewrite(w, mounts) for w in words]
        process_env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(runtime.root / "home"), "TMPDIR": str(runtime.root / "tmp"),
            "HOSTNAME": pod["metadata"]["name"], "LANG": "C.UTF-8", **self.image_env, **env,
        }
        (runtime.root / "home").mkdir(parents=True, exist_ok=True)
        (runtime.root / "tmp").mkdir(parents=True, exist_ok=True)
        runtime.log = runtime.root / "container.log"
        with open(runtime.log, "ab") as log:
            try:
                process = subprocess.Popen(
                    words, env=process_env, cwd=runtime.root / "home", stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as error:
                status["containerStatuses"][0]["state"] = {"waiting": {
                    "reason": "RunContainerError", "message": str(error)}}
                pod["metadata"]["resourceVersion"] = self._next_version()
                runtime.process = None
                return
        runtime.process = process
        runtime.started_at = time.monotonic()
        self.started_pids.append(process.pid)
        now = now_text()
        status["phase"] = "Running"
        status["containerStatuses"] = [dict(self._container_status(pod, {
            "running": {"startedAt": now}}), ready=True, started=True)]
        status["conditions"] = [c for c in status.get("conditions", [])
                                if c["type"] == "PodScheduled"] + [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now}]
        pod["metadata"]["resourceVersion"] = self._next_version()

    def _mount(self, namespace: str, pod: dict[str, Any], runtime: _Runtime) -> dict[str, Path]:
        """Materialise the volumes; mountPath -> the directory or file standing in for it."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        container = pod["spec"]["containers"][0]
        table: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            base = runtime.root / "volumes" / volume["name"]
            if "secret" in volume:
                source = volume["secret"]
                secret = self.objects.get(("secrets", namespace, source["secretName"]))
                if secret is None:
                    if source.get("optional"):
                        base.mkdir(parents=True, exist_ok=True)
                    else:
                        raise _NotReady("ContainerCreating",
                                        f'MountVolume.SetUp failed for volume "{volume["name"]}"'
                                        f': secret "{source["secretName"]}" not found')
                else:
                    base.mkdir(parents=True, exist_ok=True)
                    mode = source.get("defaultMode", 0o644)
                    for key, value in (secret.get("data") or {}).items():
                        path = base / key
                        if path.exists():
                            path.chmod(0o600)
                        path.write_bytes(base64.b64decode(value))
                        path.chmod(mode)
            elif "emptyDir" in volume:
                base.mkdir(parents=True, exist_ok=True)
            elif "persistentVolumeClaim" in volume:
                base = self.claim_directory(volume["persistentVolumeClaim"]["claimName"], namespace)
            else:
                raise _NotReady("CreateContainerConfigError",
                                f"the double does not support volume {volume['name']!r}")
            target = base / mount["subPath"] if mount.get("subPath") else base
            table[mount["mountPath"].rstrip("/") or "/"] = target
        return table

    def _environment(self, namespace: str, pod: dict[str, Any],
                     mounts: dict[str, Path]) -> dict[str, str]:
        container = pod["spec"]["containers"][0]
        env: dict[str, str] = {}
        for entry in container.get("env") or []:
            if "valueFrom" in entry:
                value = self._value_from(namespace, pod, entry["valueFrom"])
            else:
                value = expand(entry.get("value", ""), env)
            env[entry["name"]] = _rewrite(value, mounts)
        return env

    def _value_from(self, namespace: str, pod: dict[str, Any], source: dict[str, Any]) -> str:
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            metadata = pod["metadata"]
            simple = {"metadata.name": metadata["name"], "metadata.namespace": namespace,
                      "metadata.uid": metadata["uid"], "spec.nodeName": pod["spec"]["nodeName"],
                      "spec.serviceAccountName": pod["spec"].get("serviceAccountName",
                                                                 "default"),
                      "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1"}
            if path in simple:
                return simple[path]
            match = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
            if match:
                return (metadata.get(match[1]) or {}).get(match[2], "")
            raise _NotReady("CreateContainerConfigError", f"unsupported fieldPath {path!r}")
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = self.objects.get(("secrets", namespace, ref["name"]))
            if secret is None or ref["key"] not in (secret.get("data") or {}):
                if ref.get("optional"):
                    return ""
                raise _NotReady("CreateContainerConfigError",
                                f'secret "{ref["name"]}" not found or has no key {ref["key"]!r}')
            return base64.b64decode(secret["data"][ref["key"]]).decode()
        raise _NotReady("CreateContainerConfigError", "unsupported valueFrom")

    def _terminate(self, runtime: _Runtime, grace: float) -> None:
        process = runtime.process
        if process is None or process.poll() is not None:
            return
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(max(grace, 0.1))
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait(10)
        # The nanny's children are in the same session; make sure none is left behind.
        _signal_group(process, signal.SIGKILL)

    def remove_all_files(self) -> None:
        """Delete the double's directories (after :meth:`stop`)."""
        shutil.rmtree(self.root, ignore_errors=True)


class _NotReady(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class _WatchAnswer(Exception):
    """A streamed answer (a watch)."""

    def __init__(self, resource: str, namespace: str, query: dict[str, str]):
        super().__init__(resource)
        self.resource = resource
        self.namespace = namespace
        self.query = query


class _LogAnswer(Exception):
    """A plain-text answer (the pod log endpoint)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _rewrite(text: str, mounts: dict[str, Path]) -> str:
    for mount_path in sorted(mounts, key=len, reverse=True):
        if text == mount_path or text.startswith(mount_path.rstrip("/") + "/"):
            return str(mounts[mount_path]) + text[len(mount_path):]
    return text


def _requests(pod: dict[str, Any]) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {"pods": Fraction(1)}
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        amounts = dict(resources.get("limits") or {})
        amounts.update(resources.get("requests") or {})
        for key, value in amounts.items():
            total[key] = total.get(key, Fraction(0)) + parse_quantity(value)
    return total


def _qos(pod: dict[str, Any]) -> str:
    containers = pod["spec"].get("containers") or []
    if not any((c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get(
            "limits") for c in containers):
        return "BestEffort"
    for container in containers:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        for key in ("cpu", "memory"):
            if key not in limits or requests.get(key, limits[key]) != limits[key]:
                return "Burstable"
    return "Guaranteed"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_double: KubeAPIServerDouble

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        content_type = "application/json"
        try:
            code, payload = self.server_double.handle(self.command, self.path, body, headers)
            data = json.dumps(payload).encode()
        except APIError as error:
            code, data = error.code, json.dumps(error.status()).encode()
        except _WatchAnswer as watch:
            self._stream(watch)
            return
        except _LogAnswer as answer:
            code, data, content_type = 200, answer.text.encode(), "text/plain"
        except Exception as error:  # a bug in the double: answer 500 and say so
            code = 500
            data = json.dumps(APIError(500, "InternalError", repr(error)).status()).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, watch: _WatchAnswer) -> None:
        """Send a watch's events as JSON lines, one chunk each, until it ends."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in self.server_double.watch_events(watch.resource, watch.namespace,
                                                         watch.query):
                data = (json.dumps(event) + "\n").encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client stopped watching
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request list on the double records what was asked."""
