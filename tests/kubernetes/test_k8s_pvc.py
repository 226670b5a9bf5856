"""Persistent volume claims against the API server double: bound, stuck, refused."""

from __future__ import annotations

import time

import pytest

from hybrid.errors import ConfigurationError
from hybrid.kubernetes import (
    AccessMode,
    KubernetesAPIError,
    PersistentVolumeClaimNotBound,
    create_persistent_volume_claim,
    delete_persistent_volume_claim,
)
from hybrid.units import unit


def test_claim_is_created_and_waited_for_until_bound(kube) -> None:
    api = kube.api_client()
    start = time.monotonic()
    claim = create_persistent_volume_claim("evaluator-storage", 5 * unit.terabytes,
                                           storage_class="standard", api_client=api, timeout=20,
                                           poll_interval=0.1)
    assert time.monotonic() - start >= kube.bind_delay  # it really waited for the binding
    assert claim.status.phase == "Bound"
    assert claim.spec.resources.requests["storage"] == "5T"
    assert claim.spec.access_modes == ["ReadWriteMany"]
    # It watched the claim (no polling): one watch request, no repeated reads.
    paths = [path for method, path in kube.requests if method == "GET"]
    assert any("watch=" in path for path in paths)
    assert not any(path.endswith("/persistentvolumeclaims/evaluator-storage") for path in paths)
    stored = kube.list_objects("persistentvolumeclaims")
    assert [c["metadata"]["name"] for c in stored] == ["evaluator-storage"]
    assert kube.claim_directory("evaluator-storage").is_dir()
    # Creating it again waits for the existing claim instead of failing.
    again = create_persistent_volume_claim("evaluator-storage", "5 TB", api_client=api)
    assert again.metadata.uid == claim.metadata.uid
    assert delete_persistent_volume_claim("evaluator-storage", api_client=api) is True
    assert delete_persistent_volume_claim("evaluator-storage", api_client=api) is False
    assert kube.list_objects("persistentvolumeclaims") == []


def test_default_storage_class_and_access_modes(kube) -> None:
    claim = create_persistent_volume_claim("scratch", "100 GiB",
                                           access_modes=AccessMode.READ_WRITE_ONCE,
                                           namespace="science", api_client=kube.api_client(),
                                           labels={"team": "ff"}, poll_interval=0.1)
    assert claim.status.phase == "Bound"
    assert claim.spec.storage_class_name == "standard"
    assert claim.spec.access_modes == ["ReadWriteOnce"]
    assert claim.spec.resources.requests["storage"] == "100Gi"
    assert claim.metadata.labels == {"team": "ff"}
    assert claim.metadata.namespace == "science"


def test_a_claim_stuck_pending_names_its_phase(kube) -> None:
    start = time.monotonic()
    with pytest.raises(PersistentVolumeClaimNotBound) as error:
        create_persistent_volume_claim("stuck", "1 GiB", storage_class="no-such-class",
                                       api_client=kube.api_client(), timeout=1.0,
                                       poll_interval=0.2)
    waited = time.monotonic() - start
    assert 1.0 <= waited < 5
    message = str(error.value)
    assert error.value.phase == "Pending"
    assert "'stuck'" in message and "still Pending after" in message
    assert 'storageclass.storage.k8s.io "no-such-class" not found' in message
    assert "kubectl describe pvc stuck -n default" in message
    # The claim is left for inspection, still Pending.
    assert kube.list_objects("persistentvolumeclaims")[0]["status"]["phase"] == "Pending"


def test_wait_false_returns_the_pending_claim(kube) -> None:
    claim = create_persistent_volume_claim("first-consumer", "1 GiB", storage_class="local-wffc",
                                           api_client=kube.api_client(), wait=False)
    assert claim.status.phase == "Pending"


@pytest.mark.parametrize(("arguments", "field"), [
    ({"storage": -5 * unit.gigabytes}, "storage"),
    ({"storage": "-1 GiB"}, "storage"),
    ({"storage": 0 * unit.gigabytes}, "storage"),
    ({"storage": 100}, "storage"),
    ({"storage": 3 * unit.second}, "storage"),
    ({"name": "Bad_Name"}, "persistent volume claim name"),
    ({"storage_class": "Fast SSD"}, "storage_class"),
    ({"namespace": "no.dots"}, "namespace"),
    ({"access_modes": ("ReadWriteAlways",)}, "access_modes"),
    ({"access_modes": ()}, "access_modes"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": "soon"}, "timeout"),
    ({"timeout": -3 * unit.minute}, "timeout"),
    ({"labels": {"a": "b c"}}, "labels"),
    ({"labels": {"bad key!": "v"}}, "labels"),
])
def test_bad_arguments_are_refused_before_any_request(kube, arguments: dict, field: str) -> None:
    values = {"name": "claim", "api_client": kube.api_client(), **arguments}
    with pytest.raises(ConfigurationError) as error:
        create_persistent_volume_claim(**values)
    assert error.value.field == field
    assert kube.requests == []


def test_api_refusals_are_reported_with_the_servers_words(kube) -> None:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = kube.url  # no token: the double answers 401
    with pytest.raises(KubernetesAPIError) as error:
        create_persistent_volume_claim("claim", api_client=client.ApiClient(configuration))
    assert error.value.status == 401
    assert "create persistent volume claim claim" in str(error.value)
    assert "Unauthorized" in str(error.value)
