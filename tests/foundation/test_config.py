"""hybrid.config: packaged defaults in dask.config, environment overrides, worker settings.

Import-time behaviour is tested in fresh ``python -c`` subprocesses (environment without any
``DASK_*`` variable of the developer's), since this test process imported hybrid long ago.
"""

from __future__ import annotations

from typing import Any

import dask
import pytest
import yaml

from hybrid import config
from hybrid.errors import ConfigurationError

pytestmark = pytest.mark.packaged_config

PACKAGED = yaml.safe_load(config.DEFAULTS_FILE.read_text())


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; ``worker-dask-config`` stays one mapping."""
    flat = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and key != "worker-dask-config":
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def test_packaged_file_has_only_the_hybrid_section():
    assert set(PACKAGED) == {"hybrid"}
    assert PACKAGED["hybrid"]["annotator"]["gpu-fraction"] == 0.5
    assert PACKAGED["hybrid"]["annotator"]["enabled"] is True


@pytest.mark.parametrize("key", sorted(_flatten(PACKAGED["hybrid"])))
def test_every_packaged_key_is_loaded_under_hybrid(key):
    expected = _flatten(PACKAGED["hybrid"])[key]
    assert dask.config.get(f"hybrid.{key}") == expected
    assert config.get(key) == expected


def test_get_with_a_default():
    assert config.get("annotator.gpu-fraction") == 0.5
    assert config.get("no.such.key", default="fallback") == "fallback"
    with pytest.raises(KeyError):
        config.get("no.such.key")
    with dask.config.set({"hybrid.annotator.gpu-fraction": 0.125}):
        assert config.get("annotator.gpu-fraction") == 0.125


def test_environment_variable_overrides_a_packaged_value(run_python):
    code = (
        "import json, hybrid, dask\n"
        "from hybrid.annotator import task_resources\n"
        "print(json.dumps([dask.config.get('hybrid.annotator.gpu-fraction'),"
        " task_resources(True), dask.config.get('hybrid.annotator.enabled')]))"
    )
    assert run_python(code) == [0.5, {"GPU": 0.5}, True]
    assert run_python(code, env={"DASK_HYBRID__ANNOTATOR__GPU_FRACTION": "0.25"}) == [
        0.25, {"GPU": 0.25}, True]
    assert run_python(code, env={"DASK_HYBRID__ANNOTATOR__ENABLED": "False"})[2] is False


def test_a_users_yaml_file_overrides_a_packaged_value(run_python, tmp_path):
    (tmp_path / "mine.yaml").write_text("hybrid:\n  batch:\n    poll-interval: 7s\n")
    code = ("import json, hybrid, dask\n"
            "print(json.dumps(dask.config.get('hybrid.batch.poll-interval')))")
    assert run_python(code, env={"DASK_CONFIG": str(tmp_path)}) == "7s"


DISTRIBUTED_KEYS = [
    "distributed.worker.daemon",
    "distributed.comm.timeouts.connect",
    "distributed.comm.timeouts.tcp",
    "distributed.deploy.lost-worker-timeout",
    "logging.distributed",
]


def _dask_values(run_python, imports: str, env: dict[str, str] | None = None) -> dict:
    code = (f"import json, dask\n{imports}\n"
            f"print(json.dumps({{k: dask.config.get(k, None) for k in {DISTRIBUTED_KEYS!r}}}))")
    return run_python(code, env=env)


@pytest.mark.parametrize("imports", ["import hybrid; import distributed",
                                     "import distributed; import hybrid",
                                     "import hybrid; from hybrid import HybridCluster"])
def test_importing_hybrid_changes_no_setting_of_dask_or_distributed(run_python, imports):
    """The caller's process keeps distributed's own defaults (and the user's settings)."""
    assert _dask_values(run_python, imports) == _dask_values(run_python, "import distributed")
    users = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s",
             "DASK_DISTRIBUTED__WORKER__DAEMON": "True"}
    assert _dask_values(run_python, imports, env=users) == _dask_values(
        run_python, "import distributed", env=users)


def test_importing_hybrid_adds_only_its_own_section(run_python):
    code = ("import json, dask, distributed\nbefore = set(dask.config.config)\n"
            "import hybrid\nprint(json.dumps(sorted(set(dask.config.config) - before)))")
    assert run_python(code) == ["hybrid"]


def test_worker_dask_environment_gives_dask_variables():
    env = config.worker_dask_environment()
    assert env == {
        "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "60s",
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": "120s",
    }
    with dask.config.set({"hybrid.worker-dask-config": {"distributed.worker.memory.spill": 0.9,
                                                        "distributed.scheduler.work-stealing":
                                                            False}}):
        assert config.worker_dask_environment() == {
            "DASK_DISTRIBUTED__WORKER__MEMORY__SPILL": "0.9",
            "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False",
        }


def test_worker_dask_environment_is_read_back_by_dask(run_python):
    """A worker that gets these variables (and never imports hybrid) has the settings."""
    env = config.worker_dask_environment()
    code = ("import json, dask, distributed\n"
            "print(json.dumps([dask.config.get('distributed.worker.daemon'),"
            " dask.config.get('distributed.comm.timeouts.connect'),"
            " dask.config.get('distributed.comm.timeouts.tcp')]))")
    assert run_python(code, env=env) == [False, "60s", "120s"]


def test_config_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("DASK_CONFIG", str(tmp_path))
    assert config.config_directory() == tmp_path
    monkeypatch.delenv("DASK_CONFIG")
    assert str(config.config_directory()).endswith(".config/dask")


def test_every_packaged_key_is_documented_where_it_is_declared():
    """Each key of hybrid.yaml carries its comment (docs/configuration.md shows them all)."""
    import sys

    sys.path.insert(0, str(config.DEFAULTS_FILE.parents[1] / "docs" / "_ext"))
    from hybrid_docs import config_keys

    rows = config_keys(config.DEFAULTS_FILE.read_text())
    assert {key for key, _, _ in rows} >= {f"hybrid.{k}" for k in _flatten(PACKAGED["hybrid"])}
    assert [key for key, _, doc in rows if not doc] == []
    text = (config.DEFAULTS_FILE.parents[1] / "docs" / "configuration.md").read_text()
    assert "{hybrid-config}" in text


def test_a_checked_value_is_not_taken_for_an_equal_one_of_another_type():
    """``True == 1`` and ``1.0 == 1``: the check of one is not the check of the other (the
    second read of a setting used to answer from the first's check)."""
    with dask.config.set({"hybrid.annotator.feed-priority": 1}):
        assert config.get("annotator.feed-priority") == 1
    with dask.config.set({"hybrid.annotator.feed-priority": True}):
        with pytest.raises(ConfigurationError, match="feed-priority"):
            config.get("annotator.feed-priority")
    with dask.config.set({"hybrid.scheduler.tls": True}):
        assert config.get("scheduler.tls") is True
    with dask.config.set({"hybrid.scheduler.tls": 1}):
        with pytest.raises(ConfigurationError, match=r"scheduler\.tls"):
            config.get("scheduler.tls")


@pytest.mark.parametrize(("where", "env"), [
    ("yaml", {}), ("environment", {"DASK_HYBRID__BATCH": "5"})])
def test_a_value_where_a_section_belongs_is_said_with_the_fix(run_python, tmp_path, where,
                                                               env):
    """``batch: 5`` (a value where the section of batch settings belongs, an indentation
    slip) was silently replaced by the packaged section: the user's settings of it were
    lost and nothing said so."""
    if where == "yaml":
        (tmp_path / "mine.yaml").write_text("hybrid:\n  batch: 5\n  scheduler:\n"
                                            "    tls: [1]\n")
    code = ("import json, warnings\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    import hybrid, dask\n"
            "print(json.dumps([str(w.message) for w in caught "
            "if 'section' in str(w.message)]))")
    said = run_python(code, env={"DASK_CONFIG": str(tmp_path), **env})
    assert len(said) == 1, said
    assert "hybrid.batch is 5" in said[0] and "a section of settings" in said[0], said
    assert "DASK_HYBRID__BATCH" in said[0] and "hybrid.yaml" in said[0], said
    assert "ignored" in said[0], said
    if where == "yaml":  # (a list where a value belongs is the setting's own check's)
        assert "tls" not in said[0]


def test_a_users_sections_raise_no_warning(run_python, tmp_path):
    (tmp_path / "mine.yaml").write_text("hybrid:\n  batch:\n    poll-interval: 7s\n"
                                        "  worker-dask-config: {}\n  gateway:\n")
    code = ("import json, warnings\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    import hybrid, dask\n"
            "print(json.dumps([str(w.message) for w in caught if 'hybrid.' in str(w.message)]))")
    assert run_python(code, env={"DASK_CONFIG": str(tmp_path)}) == []
