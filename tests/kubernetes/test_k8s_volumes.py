"""Volumes: what each puts in the pod, and the errors for bad values."""

from __future__ import annotations

import json
import pickle

import kubernetes_validate
import pytest

from hybrid.errors import ConfigurationError
from hybrid.kubernetes import (
    KubernetesEmptyDirVolume,
    KubernetesPersistentVolumeClaim,
    KubernetesPods,
    KubernetesSecret,
)
from hybrid.units import unit


def pod_with(*volumes) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "worker", "image": "img",
                        "volumeMounts": [v.mount() for v in volumes]}],
        "volumes": [v.volume() for v in volumes]}}


def test_openeye_license_secret_mounts_one_key_as_a_file() -> None:
    secret = KubernetesSecret(name="openeye-license", secret_name="oe-license",
                              mount_path="/secrets/oe_license.txt", sub_path="oe_license.txt",
                              read_only=True)
    assert secret.volume() == {"name": "openeye-license", "secret": {"secretName": "oe-license"}}
    assert secret.mount() == {"name": "openeye-license", "mountPath": "/secrets/oe_license.txt",
                              "readOnly": True, "subPath": "oe_license.txt"}
    whole = KubernetesSecret("certs", "site-certs", "/etc/certs/", read_only=False)
    assert whole.mount() == {"name": "certs", "mountPath": "/etc/certs"}
    kubernetes_validate.validate(pod_with(secret, whole), "1.33", strict=True)


def test_claim_and_scratch_volumes() -> None:
    claim = KubernetesPersistentVolumeClaim("evaluator-storage", "/evaluator-storage")
    assert claim.volume() == {"name": "evaluator-storage",
                              "persistentVolumeClaim": {"claimName": "evaluator-storage"}}
    assert claim.mount() == {"name": "evaluator-storage", "mountPath": "/evaluator-storage"}
    dotted = KubernetesPersistentVolumeClaim("data.v2", "/data", read_only=True)
    assert dotted.volume()["persistentVolumeClaim"] == {"claimName": "data.v2", "readOnly": True}
    assert "." not in dotted.volume_name and dotted.volume_name.startswith("data-v2-")
    scratch = KubernetesEmptyDirVolume("scratch", "/scratch", size_limit=500 * unit.megabytes)
    assert scratch.volume() == {"name": "scratch", "emptyDir": {"sizeLimit": "500M"}}
    unlimited = KubernetesEmptyDirVolume("tmp", "/tmp")
    assert unlimited.volume() == {"name": "tmp", "emptyDir": {}}
    kubernetes_validate.validate(pod_with(claim, dotted, scratch, unlimited), "1.33", strict=True)


def test_volumes_compare_by_value_pickle_and_travel_as_plain_data() -> None:
    secret = KubernetesSecret("a", "b", "/c", sub_path="d")
    assert secret == KubernetesSecret("a", "b", "/c", sub_path="d")
    assert secret != KubernetesSecret("a", "b", "/c")
    assert pickle.loads(pickle.dumps(secret)) == secret
    scratch = KubernetesEmptyDirVolume("s", "/s", size_limit="1 GiB")
    assert pickle.loads(pickle.dumps(scratch)) == scratch
    assert len({secret, KubernetesSecret("a", "b", "/c", sub_path="d")}) == 1
    # As a system's settings they become JSON and come back as the same objects.
    claim = KubernetesPersistentVolumeClaim("data.v2", "/data", read_only=True)
    system = KubernetesPods(volumes=[claim, scratch], secrets=[secret])
    options = json.loads(json.dumps(system.options()))
    assert [v["kind"] for v in options["volumes"]] == ["persistent_volume_claim", "empty_dir"]
    again = KubernetesPods(**options)
    assert again.settings == system.settings
    assert again.settings.volumes == (claim, scratch)
    assert again.settings.secrets == (secret,)


@pytest.mark.parametrize(("make", "field"), [
    (lambda: KubernetesSecret(name="openeye-license", secret_name="oe-license"),
     "KubernetesSecret.mount_path"),
    (lambda: KubernetesSecret("license", "oe-license", ""), "KubernetesSecret.mount_path"),
    (lambda: KubernetesSecret("license", "oe-license", "secrets/x"),
     "KubernetesSecret.mount_path"),
    (lambda: KubernetesSecret("license", "oe-license", "/a/../b"), "KubernetesSecret.mount_path"),
    (lambda: KubernetesSecret("license", "oe-license", "/a:b"), "KubernetesSecret.mount_path"),
    (lambda: KubernetesSecret("license", "oe-license", "/s", sub_path="/abs"),
     "KubernetesSecret.sub_path"),
    (lambda: KubernetesSecret("license", "oe-license", "/s", sub_path="../up"),
     "KubernetesSecret.sub_path"),
    (lambda: KubernetesSecret("License", "oe-license", "/s"), "KubernetesSecret.name"),
    (lambda: KubernetesSecret("license", "oe_license", "/s"), "KubernetesSecret.secret_name"),
    (lambda: KubernetesSecret("license", "oe-license", "/s", read_only="yes"),
     "KubernetesSecret.read_only"),
    (lambda: KubernetesPersistentVolumeClaim("Claim", "/data"),
     "KubernetesPersistentVolumeClaim.name"),
    (lambda: KubernetesPersistentVolumeClaim("claim", None),
     "KubernetesPersistentVolumeClaim.mount_path"),
    (lambda: KubernetesEmptyDirVolume("scratch", "/s", size_limit="-1 GiB"),
     "KubernetesEmptyDirVolume.size_limit"),
    (lambda: KubernetesEmptyDirVolume("scratch", "/s", size_limit=0 * unit.byte),
     "KubernetesEmptyDirVolume.size_limit"),
    (lambda: KubernetesEmptyDirVolume("scratch", "/s", size_limit=5),
     "KubernetesEmptyDirVolume.size_limit"),
    (lambda: KubernetesEmptyDirVolume("scratch", "/s", size_limit="5 seconds"),
     "KubernetesEmptyDirVolume.size_limit"),
    (lambda: KubernetesEmptyDirVolume("a.b", "/s"), "KubernetesEmptyDirVolume.name"),
])
def test_bad_volume_values_name_their_field(make, field: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        make()
    assert error.value.field == field
    assert field in str(error.value)
