"""Tests for statecraft.checkpoint.config: knob records, loading, validation, and the feature
declarations that refuse knobs of unbuilt features."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import attrs
import pytest

import statecraft.checkpoint.config as config_package
from statecraft.checkpoint.config import (
    CONFIG_SCHEMA,
    FULL_PLAN,
    CheckpointConfig,
    CheckpointStoreConfig,
    DataConfig,
    Feature,
    KnobNote,
    KnobRequest,
    UploadConfig,
    ValidationConfig,
    declared_features,
)
from statecraft.errors import ConfigError, NotSupportedYetError

# A config that require_supported accepts without warnings.
QUIET = {"save_async": False, "keep_optim_last": 0}


def paths(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    """The dotted knob paths of a raised ConfigError's issues."""
    return [issue.path for issue in exc.value.issues]


def rejected(data: dict[str, Any]) -> pytest.ExceptionInfo[ConfigError]:
    """Build from ``data`` expecting a ConfigError; return its info."""
    with pytest.raises(ConfigError) as exc:
        CheckpointConfig.from_dict(data)
    return exc


class TestDefaults:
    def test_defaults_match_reference_table(self) -> None:
        """Every knob defaults to the value the reference's config table states."""
        cfg = CheckpointConfig()
        assert cfg.save_every == 0
        assert cfg.resume == "auto"
        assert cfg.run_ts == ""
        assert cfg.checkpoint_format == "consolidated"
        assert cfg.checkpoint_components == ("model", "optimizer", "training_state")
        assert cfg.emergency_checkpoint_components == "full"
        assert cfg.checkpoint_store == CheckpointStoreConfig(
            backend="local", bucket="", credentials="", prefix=""
        )
        assert cfg.save_async is True
        assert cfg.keep_optim_last is None
        assert cfg.keep_model_last == 0
        assert cfg.upload == UploadConfig(enabled=False, bucket="", credentials="", prefix="")
        assert cfg.validation == ValidationConfig(
            every=0, before_training=False, save_checkpoint=False, checkpoint_components=FULL_PLAN
        )
        assert cfg.data == DataConfig(cursor_resume="auto")
        assert cfg.verify == "digest"

    def test_empty_mapping_gives_defaults(self) -> None:
        """from_dict of an empty mapping equals the default-constructed config."""
        assert CheckpointConfig.from_dict({}) == CheckpointConfig()

    def test_full_plan_and_schema_constants(self) -> None:
        """FULL_PLAN is the canonical three-component plan and the schema name is versioned."""
        assert FULL_PLAN == ("model", "optimizer", "training_state")
        assert CONFIG_SCHEMA == "statecraft.checkpoint-config.v1"

    def test_config_is_frozen(self) -> None:
        """Assigning to a knob after construction fails."""
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            CheckpointConfig().save_every = 5  # type: ignore[misc]

    def test_direct_construction_validates(self) -> None:
        """Building the class directly runs the same checks as from_dict."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig(save_every=-1)
        assert paths(exc) == ["save_every"]

    def test_nested_direct_construction_names_dotted_path(self) -> None:
        """A bad nested section built directly reports its dotted knob."""
        with pytest.raises(ConfigError) as exc:
            CheckpointStoreConfig(backend="s3")  # type: ignore[arg-type]
        assert paths(exc) == ["checkpoint_store.backend"]


class TestIsFullPlan:
    def test_default_is_full_plan(self) -> None:
        """The default plan is the full plan."""
        assert CheckpointConfig().is_full_plan
        assert ValidationConfig().is_full_plan

    def test_subset_is_not_full_plan(self) -> None:
        """A proper subset is not the full plan."""
        assert not CheckpointConfig.from_dict({"checkpoint_components": ["model"]}).is_full_plan
        assert not ValidationConfig(checkpoint_components=("model",)).is_full_plan


class TestComponents:
    def test_plan_is_canonicalized(self) -> None:
        """A plan given out of order is stored in FULL_PLAN order as a tuple."""
        cfg = CheckpointConfig.from_dict(
            {
                "checkpoint_components": ["training_state", "model"],
                "validation": {"checkpoint_components": ["training_state", "optimizer", "model"]},
            }
        )
        assert cfg.checkpoint_components == ("model", "training_state")
        assert cfg.validation.checkpoint_components == FULL_PLAN

    def test_direct_construction_canonicalizes(self) -> None:
        """Direct construction with a list stores the canonical tuple."""
        cfg = CheckpointConfig(checkpoint_components=["optimizer", "model"])  # type: ignore[arg-type]
        assert cfg.checkpoint_components == ("model", "optimizer")

    def test_empty_plan_rejected(self) -> None:
        """An empty plan is refused naming the knob and what is allowed."""
        exc = rejected({"checkpoint_components": []})
        assert paths(exc) == ["checkpoint_components"]
        assert "non-empty list" in str(exc.value)

    def test_unknown_name_rejected(self) -> None:
        """A name outside the three components is refused at its index."""
        exc = rejected({"checkpoint_components": ["model", "weights"]})
        assert paths(exc) == ["checkpoint_components[1]"]
        message = str(exc.value)
        assert "'weights'" in message
        assert "'model', 'optimizer', 'training_state'" in message

    def test_duplicate_rejected(self) -> None:
        """A repeated name is refused at the index of the repeat."""
        exc = rejected({"validation": {"checkpoint_components": ["model", "model"]}})
        assert paths(exc) == ["validation.checkpoint_components[1]"]
        assert "at most once" in str(exc.value)

    def test_non_string_rejected(self) -> None:
        """A non-string entry is refused at its index."""
        exc = rejected({"checkpoint_components": [1, "model"]})
        assert paths(exc) == ["checkpoint_components[0]"]
        assert "a string" in str(exc.value)

    def test_bare_string_rejected(self) -> None:
        """A single string instead of a list is refused, not split or wrapped."""
        exc = rejected({"checkpoint_components": "model"})
        assert paths(exc) == ["checkpoint_components"]
        assert "'model'" in str(exc.value)


class TestFromDict:
    def test_accepts_every_knob(self) -> None:
        """A mapping setting every knob builds the matching config."""
        cfg = CheckpointConfig.from_dict(
            {
                "save_every": 100,
                "resume": "/ckpt/iter_000000100",
                "run_ts": "20260901120000",
                "checkpoint_format": "dcp",
                "checkpoint_components": ["model"],
                "emergency_checkpoint_components": "run",
                "checkpoint_store": {"backend": "local", "bucket": "b", "prefix": "p"},
                "save_async": False,
                "keep_optim_last": 3,
                "keep_model_last": 2,
                "upload": {"enabled": True, "bucket": "b", "credentials": "c", "prefix": ""},
                "validation": {"save_checkpoint": True, "checkpoint_components": ["model"]},
                "data": {"cursor_resume": "strict"},
                "verify": "size",
            }
        )
        assert cfg.save_every == 100
        assert cfg.resume == "/ckpt/iter_000000100"
        assert cfg.checkpoint_store.bucket == "b"
        assert cfg.upload.credentials == "c"
        assert cfg.validation.checkpoint_components == ("model",)
        assert cfg.data.cursor_resume == "strict"
        assert cfg.verify == "size"

    def test_empty_resume_normalizes_to_off(self) -> None:
        """resume='' means a fresh run and is stored as 'off'."""
        assert CheckpointConfig.from_dict({"resume": ""}).resume == "off"

    def test_source_named_in_message(self) -> None:
        """The source argument heads the error message and is kept on the error."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.from_dict({"save_every": -1}, source="job.yaml")
        assert str(exc.value).startswith("job.yaml:")
        assert exc.value.source == "job.yaml"

    def test_non_mapping_rejected(self) -> None:
        """A list instead of a mapping is one ConfigError."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.from_dict([1, 2])  # type: ignore[arg-type]
        assert "a mapping of knobs" in str(exc.value)

    def test_section_not_mapping_rejected(self) -> None:
        """A section given a scalar is refused at the section's name."""
        exc = rejected({"upload": True})
        assert paths(exc) == ["upload"]
        assert "upload.enabled" in str(exc.value)

    def test_errors_are_config_and_value_errors(self) -> None:
        """The raised error is both a ConfigError and a ValueError."""
        with pytest.raises(ValueError, match="save_every"):
            CheckpointConfig.from_dict({"save_every": "x"})


class TestUnknownKnobs:
    def test_unknown_top_level_knob(self) -> None:
        """An unknown top-level key is an error listing the known knobs."""
        exc = rejected({"save_evry": 10})
        assert paths(exc) == ["save_evry"]
        message = str(exc.value)
        assert "save_evry: got 10" in message
        assert "save_every" in message
        assert "checkpoint_store" in message

    def test_unknown_nested_knob(self) -> None:
        """An unknown key inside a section is named by its dotted path."""
        exc = rejected({"upload": {"bukket": "x"}})
        assert paths(exc) == ["upload.bukket"]
        assert "upload.bucket" in str(exc.value)

    def test_rl_wrapper_not_accepted_by_from_dict(self) -> None:
        """from_dict takes the knob mapping itself; an 'rl' key is an unknown knob with a hint."""
        exc = rejected({"rl": {"save_every": 1}, "save_every": 2})
        assert paths(exc) == ["rl"]
        assert "only top-level key" in str(exc.value)


class TestTypeRejections:
    @pytest.mark.parametrize(
        ("knob", "value"),
        [
            ("save_every", "100"),
            ("save_every", True),
            ("save_every", 1.5),
            ("keep_model_last", False),
            ("keep_optim_last", 2.0),
        ],
    )
    def test_counts_must_be_real_ints(self, knob: str, value: object) -> None:
        """Strings, bools and floats are not counts."""
        exc = rejected({knob: value})
        assert paths(exc) == [knob]
        assert exc.value.issues[0].found == value
        assert f"{knob}: got {value!r}" in str(exc.value)
        assert "non-negative integer" in str(exc.value)

    @pytest.mark.parametrize(
        "knob",
        [
            "save_async",
            "upload.enabled",
            "validation.save_checkpoint",
            "validation.before_training",
        ],
    )
    def test_flags_must_be_real_bools(self, knob: str) -> None:
        """An int or string where a bool belongs is refused."""
        section, _, leaf = knob.rpartition(".")
        data: dict[str, Any] = {section: {leaf: 1}} if section else {leaf: 1}
        exc = rejected(data)
        assert paths(exc) == [knob]
        assert f"{knob}: got 1; expected true or false" in str(exc.value)

    @pytest.mark.parametrize("value", ["5", True, 2.5, -1, 10**9 + 1, None])
    def test_validation_every_is_a_count(self, value: object) -> None:
        """validation.every takes a non-negative integer only, named in the refusal."""
        exc = rejected({"validation": {"every": value}})
        assert paths(exc) == ["validation.every"]
        assert f"validation.every: got {value!r}; expected a non-negative integer" in str(exc.value)

    def test_validation_every_and_before_training_load(self) -> None:
        """The new validation knobs load from overrides and survive to_dict/from_dict."""
        cfg = CheckpointConfig.load(
            None, ["validation.every=50", "rl.validation.before_training=true"]
        )
        assert (cfg.validation.every, cfg.validation.before_training) == (50, True)
        assert CheckpointConfig.from_dict(cfg.to_dict()) == cfg

    def test_string_knob_rejects_number(self) -> None:
        """A number where a string belongs is refused with a hint to quote it."""
        exc = rejected({"checkpoint_store": {"bucket": 5}})
        assert paths(exc) == ["checkpoint_store.bucket"]
        assert "quote it" in str(exc.value)

    def test_yaml_off_read_as_bool_gets_hint(self) -> None:
        """A bare YAML off (read as False) for a choice knob explains the quoting fix."""
        exc = rejected({"data": {"cursor_resume": False}})
        assert paths(exc) == ["data.cursor_resume"]
        message = str(exc.value)
        assert "'auto', 'strict', 'off'" in message
        assert "quote it" in message

    @pytest.mark.parametrize(
        ("knob", "value", "allowed"),
        [
            ("checkpoint_format", "torch", "'consolidated', 'dcp'"),
            ("emergency_checkpoint_components", "partial", "'full', 'run'"),
            ("checkpoint_store.backend", "s3", "'local', 'object_store'"),
            ("data.cursor_resume", "exact", "'auto', 'strict', 'off'"),
            ("verify", "none", "'digest', 'size'"),
        ],
    )
    def test_choice_knobs_reject_other_values(self, knob: str, value: str, allowed: str) -> None:
        """A value outside a choice knob's set names the knob, the value and the choices."""
        section, _, leaf = knob.rpartition(".")
        data: dict[str, Any] = {section: {leaf: value}} if section else {leaf: value}
        exc = rejected(data)
        assert paths(exc) == [knob]
        assert f"{knob}: got {value!r}; expected one of {allowed}" in str(exc.value)

    def test_resume_rejects_non_string(self) -> None:
        """resume must be a string; False (YAML off) is refused with the allowed forms."""
        exc = rejected({"resume": False})
        assert paths(exc) == ["resume"]
        assert "'auto', 'off'" in str(exc.value)


class TestValueRejections:
    @pytest.mark.parametrize("knob", ["save_every", "keep_optim_last", "keep_model_last"])
    def test_negative_counts_rejected(self, knob: str) -> None:
        """A negative count is refused."""
        exc = rejected({knob: -1})
        assert paths(exc) == [knob]
        assert f"{knob}: got -1" in str(exc.value)

    def test_keep_optim_last_accepts_null(self) -> None:
        """keep_optim_last alone may be null."""
        assert CheckpointConfig.from_dict({"keep_optim_last": None}).keep_optim_last is None

    def test_save_every_rejects_null(self) -> None:
        """save_every may not be null."""
        assert paths(rejected({"save_every": None})) == ["save_every"]

    @pytest.mark.parametrize(
        "run_ts",
        [
            "2026090112000",
            "202609011200000",
            "2026-09-01T12",
            "20261301120000",
            "20260230120000",
            "20260901246000",
            "\uff12\uff10\uff12\uff16\uff10\uff19\uff10\uff11\uff11\uff12\uff10\uff10\uff10\uff10",
        ],
    )
    def test_bad_run_ts_rejected(self, run_ts: str) -> None:
        """run_ts must be 14 ASCII digits naming a real date and time."""
        exc = rejected({"run_ts": run_ts})
        assert paths(exc) == ["run_ts"]
        assert "YYYYmmddHHMMSS" in str(exc.value)

    def test_run_ts_as_int_rejected_with_hint(self) -> None:
        """An unquoted YAML run_ts (an int) is refused with the quoting fix."""
        exc = rejected({"run_ts": 20260901120000})
        assert "quote it" in str(exc.value)

    def test_good_run_ts_accepted(self) -> None:
        """A real 14-digit timestamp is kept as given."""
        assert CheckpointConfig.from_dict({"run_ts": "20240229235959"}).run_ts == "20240229235959"

    def test_multiple_errors_reported_together(self) -> None:
        """Problems at several levels come back in one ConfigError."""
        exc = rejected(
            {
                "save_every": -5,
                "checkpoint_format": "zip",
                "checkpoint_store": {"backend": "s3", "extra": 1},
                "validation": {"checkpoint_components": []},
                "bogus": True,
            }
        )
        assert set(paths(exc)) == {
            "save_every",
            "checkpoint_format",
            "checkpoint_store.backend",
            "checkpoint_store.extra",
            "validation.checkpoint_components",
            "bogus",
        }
        assert "6 invalid value(s)" in str(exc.value)


class TestCrossOptionRules:
    def test_object_store_requires_dcp(self) -> None:
        """A direct object-store primary refuses the consolidated format."""
        exc = rejected({"checkpoint_store": {"backend": "object_store"}})
        assert paths(exc) == ["checkpoint_format"]
        message = str(exc.value)
        assert "got 'consolidated'" in message
        assert "'dcp'" in message
        assert "object_store" in message

    def test_object_store_with_dcp_accepted(self) -> None:
        """Object store plus dcp is a valid config whose optimizer retention resolves to 0."""
        cfg = CheckpointConfig.from_dict(
            {"checkpoint_format": "dcp", "checkpoint_store": {"backend": "object_store"}}
        )
        assert cfg.resolved_keep_optim_last() == 0

    def test_object_store_rejects_upload_and_retention(self) -> None:
        """Object store refuses upload.enabled and explicit non-zero retention, all at once."""
        exc = rejected(
            {
                "checkpoint_format": "dcp",
                "checkpoint_store": {"backend": "object_store"},
                "upload": {"enabled": True},
                "keep_optim_last": 1,
                "keep_model_last": 3,
            }
        )
        assert paths(exc) == ["upload.enabled", "keep_optim_last", "keep_model_last"]
        message = str(exc.value)
        assert "keep_optim_last: got 1; expected null or 0 when" in message
        assert "keep_model_last: got 3; expected 0 when" in message
        assert "the direct primary's retention is checkpoint_store.keep_last" in message

    def test_object_store_allows_zero_retention(self) -> None:
        """Explicit zero retention is fine for an object-store primary."""
        cfg = CheckpointConfig.from_dict(
            {
                "checkpoint_format": "dcp",
                "checkpoint_store": {"backend": "object_store"},
                "keep_optim_last": 0,
                "keep_model_last": 0,
            }
        )
        assert cfg.resolved_keep_optim_last() == 0

    def test_run_emergency_requires_covering_validation_plan(self) -> None:
        """run + saving validation refuses a validation plan missing a run-plan component."""
        exc = rejected(
            {
                "emergency_checkpoint_components": "run",
                "checkpoint_components": ["model", "training_state"],
                "validation": {"save_checkpoint": True, "checkpoint_components": ["model"]},
            }
        )
        assert paths(exc) == ["validation.checkpoint_components"]
        message = str(exc.value)
        assert "['model', 'training_state']" in message
        assert "stands in for its emergency save" in message

    def test_run_emergency_requires_model_in_validation_plan(self) -> None:
        """run + saving validation refuses a validation plan without model."""
        exc = rejected(
            {
                "emergency_checkpoint_components": "run",
                "checkpoint_components": ["optimizer"],
                "validation": {"save_checkpoint": True, "checkpoint_components": ["optimizer"]},
            }
        )
        assert paths(exc) == ["validation.checkpoint_components"]
        assert "'model'" in str(exc.value)

    def test_run_emergency_with_covering_plan_accepted(self) -> None:
        """A validation superset of the run plan plus model is accepted."""
        cfg = CheckpointConfig.from_dict(
            {
                "emergency_checkpoint_components": "run",
                "checkpoint_components": ["training_state"],
                "validation": {
                    "save_checkpoint": True,
                    "checkpoint_components": ["model", "training_state"],
                },
            }
        )
        assert cfg.validation.checkpoint_components == ("model", "training_state")

    def test_run_emergency_with_inactive_validation_accepted(self) -> None:
        """An inactive validation plan is not checked against the run plan."""
        cfg = CheckpointConfig.from_dict(
            {
                "emergency_checkpoint_components": "run",
                "checkpoint_components": ["optimizer"],
                "validation": {"checkpoint_components": ["optimizer"]},
            }
        )
        assert cfg.emergency_checkpoint_components == "run"


class TestResolvedKeepOptimLast:
    def test_null_resolves_to_one_for_local(self) -> None:
        """keep_optim_last=None resolves to 1 for a local primary."""
        assert CheckpointConfig().resolved_keep_optim_last() == 1

    def test_explicit_value_is_kept(self) -> None:
        """An explicit count is returned unchanged."""
        assert CheckpointConfig(keep_optim_last=0).resolved_keep_optim_last() == 0
        assert CheckpointConfig(keep_optim_last=4).resolved_keep_optim_last() == 4


class TestLoad:
    def test_load_without_file_gives_defaults(self) -> None:
        """load(None) with no overrides is the default config."""
        assert CheckpointConfig.load(None) == CheckpointConfig()

    def test_load_plain_file(self, tmp_path: Path) -> None:
        """A YAML file whose top level is the knob mapping is read."""
        path = tmp_path / "ckpt.yaml"
        path.write_text(
            "save_every: 50\nresume: 'off'\ncheckpoint_store:\n  backend: local\n"
            "data:\n  cursor_resume: 'off'\n"
        )
        cfg = CheckpointConfig.load(path)
        assert cfg.save_every == 50
        assert cfg.resume == "off"
        assert cfg.data.cursor_resume == "off"

    def test_load_rl_wrapped_file(self, tmp_path: Path) -> None:
        """A single top-level rl: key holding the knobs is unwrapped."""
        path = tmp_path / "ckpt.yaml"
        path.write_text("rl:\n  save_every: 7\n  checkpoint_components: [optimizer, model]\n")
        cfg = CheckpointConfig.load(str(path))
        assert cfg.save_every == 7
        assert cfg.checkpoint_components == ("model", "optimizer")

    def test_empty_file_gives_defaults(self, tmp_path: Path) -> None:
        """An empty YAML document sets no knobs."""
        path = tmp_path / "empty.yaml"
        path.write_text("")
        assert CheckpointConfig.load(path) == CheckpointConfig()

    def test_missing_file_rejected(self, tmp_path: Path) -> None:
        """A file that does not exist is a ConfigError naming the file."""
        path = tmp_path / "nope.yaml"
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(path)
        assert str(path) in str(exc.value)
        assert exc.value.source == str(path)

    def test_non_mapping_file_rejected(self, tmp_path: Path) -> None:
        """A YAML file whose top level is a list is a ConfigError naming the file."""
        path = tmp_path / "list.yaml"
        path.write_text("- save_every\n- 10\n")
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(path)
        assert str(path) in str(exc.value)
        assert "YAML mapping" in str(exc.value)

    def test_invalid_yaml_rejected(self, tmp_path: Path) -> None:
        """Unparseable YAML is a ConfigError naming the file."""
        path = tmp_path / "bad.yaml"
        path.write_text("save_every: [1\n")
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(path)
        assert str(path) in str(exc.value)

    def test_bad_knob_in_file_names_file(self, tmp_path: Path) -> None:
        """A bad value in the file is reported with the file as the source."""
        path = tmp_path / "ckpt.yaml"
        path.write_text("rl:\n  keep_model_last: -2\n")
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(path)
        assert paths(exc) == ["keep_model_last"]
        assert str(exc.value).startswith(f"{path}:")

    def test_bare_yaml_false_in_file_rejected_with_hint(self, tmp_path: Path) -> None:
        """A bare false for resume in the file is refused with the quoting fix; a bare off is
        the string 'off' (booleans are only true/false)."""
        path = tmp_path / "ckpt.yaml"
        path.write_text("resume: false\n")
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(path)
        assert paths(exc) == ["resume"]
        assert "quote it" in str(exc.value)
        path.write_text("resume: off\n")
        assert CheckpointConfig.load(path).resume == "off"

    def test_overrides_apply_after_file(self, tmp_path: Path) -> None:
        """An override replaces the file's value for the same knob."""
        path = tmp_path / "ckpt.yaml"
        path.write_text("save_every: 10\nupload:\n  bucket: b\n")
        cfg = CheckpointConfig.load(path, ["save_every=20", "upload.prefix=p"])
        assert cfg.save_every == 20
        assert cfg.upload == UploadConfig(bucket="b", prefix="p")


class TestOverrides:
    def test_int_override(self) -> None:
        """An int right-hand side sets an int knob."""
        assert CheckpointConfig.load(None, ["save_every=100"]).save_every == 100

    def test_bool_override(self) -> None:
        """true/false set a bool knob."""
        cfg = CheckpointConfig.load(None, ["save_async=false", "upload.enabled=true"])
        assert cfg.save_async is False
        assert cfg.upload.enabled is True

    def test_null_override(self) -> None:
        """null sets a nullable knob to None."""
        cfg = CheckpointConfig.load(None, ["keep_optim_last=null"])
        assert cfg.keep_optim_last is None

    def test_list_override_is_canonicalized(self) -> None:
        """A [a,b] right-hand side sets a component plan, canonicalized."""
        cfg = CheckpointConfig.load(None, ["checkpoint_components=[optimizer,model]"])
        assert cfg.checkpoint_components == ("model", "optimizer")

    def test_nested_override(self) -> None:
        """A dotted knob sets a nested value."""
        cfg = CheckpointConfig.load(
            None,
            [
                "checkpoint_format=dcp",
                "checkpoint_store.backend=object_store",
                "checkpoint_store.bucket=my-bucket",
                "validation.checkpoint_components=[model]",
            ],
        )
        assert cfg.checkpoint_store.backend == "object_store"
        assert cfg.checkpoint_store.bucket == "my-bucket"
        assert cfg.validation.checkpoint_components == ("model",)

    def test_rl_prefix_is_stripped(self) -> None:
        """An rl. prefix on the key is accepted and removed."""
        cfg = CheckpointConfig.load(None, ["rl.save_every=5", "rl.data.cursor_resume=strict"])
        assert cfg.save_every == 5
        assert cfg.data.cursor_resume == "strict"

    def test_path_override(self) -> None:
        """resume=<path> sets an explicit checkpoint path."""
        cfg = CheckpointConfig.load(None, ["resume=/path/to/iter_000000100"])
        assert cfg.resume == "/path/to/iter_000000100"

    def test_string_knobs_take_unquoted_text_literally(self) -> None:
        """off, digits and empty text stay strings for string knobs (not YAML bools or ints)."""
        cfg = CheckpointConfig.load(
            None, ["resume=off", "data.cursor_resume=off", "run_ts=20260901120000"]
        )
        assert cfg.resume == "off"
        assert cfg.data.cursor_resume == "off"
        assert cfg.run_ts == "20260901120000"
        assert CheckpointConfig.load(None, ["resume="]).resume == "off"

    def test_quoted_string_override(self) -> None:
        """A quoted right-hand side is unquoted."""
        assert CheckpointConfig.load(None, ["upload.prefix='a b'"]).upload.prefix == "a b"

    def test_section_override(self) -> None:
        """A section knob takes a YAML mapping."""
        cfg = CheckpointConfig.load(None, ["upload={enabled: true, bucket: b}"])
        assert cfg.upload == UploadConfig(enabled=True, bucket="b")

    def test_override_without_equals_rejected(self) -> None:
        """An override lacking = is an error listing the known knobs."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, ["save_every"])
        assert paths(exc) == ["overrides[0]"]
        message = str(exc.value)
        assert "KNOB=VALUE" in message
        assert "checkpoint_store.backend" in message
        assert "upload.enabled" in message

    def test_unknown_override_rejected(self) -> None:
        """An override naming an unknown knob lists the known knobs."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, ["save_evry=1"])
        assert paths(exc) == ["save_evry"]
        assert "save_every" in str(exc.value)

    def test_unknown_nested_override_rejected(self) -> None:
        """An override naming an unknown nested knob is refused with its dotted path."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, ["upload.bukket=x"])
        assert paths(exc) == ["upload.bukket"]
        assert "upload.bucket" in str(exc.value)

    def test_override_below_a_leaf_rejected(self) -> None:
        """A dotted key under a non-section knob is unknown."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, ["save_every.x=1"])
        assert paths(exc) == ["save_every.x"]

    def test_override_errors_reported_with_value_errors(self) -> None:
        """Malformed overrides and bad values come back in one ConfigError."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, ["nope=1", "save_every=1.5", "verify"])
        assert set(paths(exc)) == {"nope", "save_every", "overrides[2]"}

    def test_bad_override_value_names_knob(self) -> None:
        """A float for an int knob via override names knob, value and what is allowed."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, ["save_every=1.5"])
        assert "save_every: got 1.5; expected a non-negative integer" in str(exc.value)

    def test_string_instead_of_list_rejected(self) -> None:
        """Passing one string as overrides is refused, not split into characters."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, "save_every=1")
        assert paths(exc) == ["overrides"]


class TestRequireSupported:
    def test_object_store_primary_is_built(self) -> None:
        """checkpoint_store.backend=object_store (with checkpoint_format=dcp) is built:
        nothing refused, no warning (machines/direct_save.toml)."""
        cfg = CheckpointConfig.from_dict(
            {**QUIET, "checkpoint_format": "dcp", "checkpoint_store": {"backend": "object_store"}}
        )
        assert cfg.require_supported() == []

    def test_is_not_implemented_error(self) -> None:
        """NotSupportedYetError (what an unbuilt feature raises) is a NotImplementedError."""
        assert issubclass(NotSupportedYetError, NotImplementedError)

    def test_dcp_is_built(self) -> None:
        """checkpoint_format=dcp (local store) is built: nothing refused."""
        CheckpointConfig.from_dict({**QUIET, "checkpoint_format": "dcp"}).require_supported()

    def test_defaults_do_not_warn(self) -> None:
        """The defaults (save_async=true, keep_optim_last=null) are built: no warning."""
        assert CheckpointConfig().require_supported() == []

    @pytest.mark.parametrize(
        "data",
        [{"keep_optim_last": 1}, {"keep_model_last": 2}, {"save_async": True}],
    )
    def test_built_features_pass(self, data: dict[str, Any]) -> None:
        """Retention counts and asynchronous saves are built: no refusal, no warning."""
        assert CheckpointConfig.from_dict(data).require_supported() == []

    def test_explicit_settings_silence_warnings(self) -> None:
        """save_async=false and keep_optim_last=0 leave no warnings."""
        assert CheckpointConfig.from_dict(QUIET).require_supported() == []

    def test_supported_non_defaults_pass(self) -> None:
        """Supported non-default knobs (cadence, resume path, verify=size) pass quietly."""
        cfg = CheckpointConfig.from_dict(
            {
                **QUIET,
                "save_every": 10,
                "resume": "/x/iter_000000010",
                "verify": "size",
                "data": {"cursor_resume": "off"},
                "validation": {"checkpoint_components": ["model"]},
            }
        )
        assert cfg.require_supported() == []

    def test_archive_upload_is_built(self) -> None:
        """upload.enabled (issue 12 builds the archive upload) passes the gate quietly."""
        cfg = CheckpointConfig.from_dict(
            {**QUIET, "upload": {"enabled": True, "bucket": "b", "credentials": "c.json"}}
        )
        assert cfg.require_supported() == []

    def test_partial_plans_and_validation_saves_are_built(self) -> None:
        """A partial run plan and a saving validation plan (issue 9 builds both) pass the gate;
        their trade is told by plan_warnings instead."""
        cfg = CheckpointConfig.from_dict(
            {
                **QUIET,
                "checkpoint_components": ["model", "optimizer"],
                "validation": {"every": 5, "save_checkpoint": True},
            }
        )
        assert cfg.require_supported() == []


class TestToDict:
    def test_round_trip_defaults(self) -> None:
        """to_dict then from_dict gives back an equal config."""
        cfg = CheckpointConfig()
        assert CheckpointConfig.from_dict(cfg.to_dict()) == cfg

    def test_round_trip_non_defaults(self) -> None:
        """A config with many non-default knobs survives the round trip, also through JSON."""
        cfg = CheckpointConfig.from_dict(
            {
                "save_every": 3,
                "resume": "",
                "run_ts": "20260101000000",
                "checkpoint_format": "dcp",
                "checkpoint_components": ["training_state", "model"],
                "checkpoint_store": {"backend": "object_store", "bucket": "b"},
                "keep_optim_last": 0,
                "validation": {"save_checkpoint": True, "checkpoint_components": ["model"]},
                "data": {"cursor_resume": "off"},
                "verify": "size",
            }
        )
        data = json.loads(json.dumps(cfg.to_dict()))
        assert CheckpointConfig.from_dict(data) == cfg

    def test_plain_data(self) -> None:
        """to_dict gives nested dicts and lists, with components as a list."""
        data = CheckpointConfig().to_dict()
        assert data["checkpoint_components"] == ["model", "optimizer", "training_state"]
        assert data["checkpoint_store"] == {
            "backend": "local",
            "bucket": "",
            "credentials": "",
            "prefix": "",
            "lease_ttl_s": 600,
            "lease_takeover": False,
            "retry_wait_s": 90,
            "keep_last": 0,
        }
        assert data["keep_optim_last"] is None
        assert set(data) == {f.name for f in attrs.fields(CheckpointConfig)}


class TestFeatureDeclarations:
    def test_one_declaration_per_unbuilt_feature(self) -> None:
        """Each unbuilt feature of the reference has its own declaration naming its knobs."""
        features = {f.name: f for f in declared_features()}
        assert {name: f.knobs for name, f in features.items()} == {
            "object-store primary": ("checkpoint_store.backend",),
            "DCP (sharded) checkpoint format": ("checkpoint_format",),
        }
        assert {name: f.built for name, f in features.items()} == {
            "object-store primary": True,
            "DCP (sharded) checkpoint format": True,
        }

    def test_every_declared_knob_is_a_knob(self) -> None:
        """A declaration can only name knobs the config has (a typo would never refuse)."""
        cfg = CheckpointConfig()
        for feature in declared_features():
            for knob in feature.knobs:
                obj: Any = cfg
                for part in knob.split("."):
                    assert hasattr(obj, part), (feature.name, knob)
                    obj = getattr(obj, part)

    def test_object_store_is_named_before_dcp(self) -> None:
        """An object-store primary (which requires dcp) is refused as the backend, not the
        format: declaration order decides which refusal comes first."""
        names = [f.name for f in declared_features()]
        assert names.index("object-store primary") < names.index("DCP (sharded) checkpoint format")

    def test_a_built_feature_refuses_nothing(self) -> None:
        """Flipping a declaration to built=True lets its knobs through and silences its notes."""
        dcp = attrs.evolve(
            next(f for f in declared_features() if f.name.startswith("DCP")), built=False
        )
        cfg = CheckpointConfig.from_dict({**QUIET, "checkpoint_format": "dcp"})
        refusal = dcp.refusal(cfg)
        assert isinstance(refusal, NotSupportedYetError)
        assert refusal.knob == "checkpoint_format"
        assert attrs.evolve(dcp, built=True).refusal(cfg) is None
        note = KnobNote("keep_optim_last", lambda v: v is None, "keep_optim_last=null: ...")
        noted = Feature("retention", notes=(note,))
        assert len(noted.warnings(CheckpointConfig())) == 1
        assert attrs.evolve(noted, built=True).warnings(CheckpointConfig()) == []

    def test_declarations_are_collected_from_any_module(self) -> None:
        """A declaration living in the feature's own module is found by passing that module;
        there is no central list to edit."""
        home = types.ModuleType("future_feature_home")
        home.GADGET = Feature(  # type: ignore[attr-defined]
            "gadget",
            requests=(KnobRequest("verify", lambda v: v == "size", "set verify=digest"),),
        )
        home.not_a_feature = 3  # type: ignore[attr-defined]
        (found,) = declared_features(home)
        assert found.name == "gadget"
        error = found.refusal(CheckpointConfig(verify="size"))
        assert isinstance(error, NotSupportedYetError)
        assert str(error).startswith(
            "verify='size' is accepted by the schema but not supported yet"
        )
        assert "set verify=digest" in str(error)
        assert found.refusal(CheckpointConfig()) is None

    def test_notes_warn_only_where_they_apply(self) -> None:
        """A KnobNote warns for the value it applies to and not otherwise."""
        note = KnobNote("save_async", bool, "save_async=true: ...; set save_async=false")
        feature = Feature("asynchronous saves", notes=(note,))
        assert feature.warnings(CheckpointConfig()) == [note.text]
        assert feature.warnings(CheckpointConfig(save_async=False)) == []


class TestPackageLayout:
    def test_every_module_is_small(self) -> None:
        """The config package's modules stay under ~400 lines each."""
        package = Path(config_package.__file__).parent
        for module in package.glob("*.py"):
            assert len(module.read_text().splitlines()) <= 400, module.name


class TestStrictScalars:
    """Issue 8 item 5: values are read strictly, and everything else is refused by knob."""

    @pytest.mark.parametrize(
        ("override", "knob", "found", "hint"),
        [
            ("save_every=0x10", "save_every", "0x10", "plain decimal"),
            ("save_every=0o20", "save_every", "0o20", "plain decimal"),
            ("save_every=1_000", "save_every", "1_000", "plain decimal"),
            ("save_every=016", "save_every", "016", "plain decimal"),
            ("save_every= 3", "save_every", " 3", "no surrounding whitespace"),
            ("save_every=3 ", "save_every", "3 ", "no surrounding whitespace"),
            ("save_every=3 # comment", "save_every", "3 # comment", "'# comment'"),
            ("save_every=99999999999999999999", "save_every", 99999999999999999999, "at most"),
            ("save_every=1000000001", "save_every", 1000000001, "at most 1000000000"),
            ("keep_model_last=0x1", "keep_model_last", "0x1", "plain decimal"),
            ("save_async=yes", "save_async", "yes", "spelled true or false"),
            ("save_async=on", "save_async", "on", "spelled true or false"),
            ("save_async=True", "save_async", "True", "spelled true or false"),
            ("upload.enabled=no", "upload.enabled", "no", "spelled true or false"),
            ("verify= size", "verify", " size", "one of 'digest', 'size'"),
            ("verify=size # fast", "verify", "size # fast", "one of 'digest', 'size'"),
        ],
    )
    def test_lenient_override_refused(
        self, override: str, knob: str, found: object, hint: str
    ) -> None:
        """A value outside the strict spelling is refused, naming the knob, value and rule."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, [override])
        (issue,) = exc.value.issues
        assert issue.path == knob
        assert issue.found == found
        assert hint in issue.allowed

    @pytest.mark.parametrize(
        ("override", "knob", "value"),
        [
            ("save_every=16", "save_every", 16),
            ("save_every=0", "save_every", 0),
            ("save_every=1000000000", "save_every", 10**9),
            ("save_async=true", "save_async", True),
            ("save_async=false", "save_async", False),
            ("keep_optim_last=null", "keep_optim_last", None),
        ],
    )
    def test_strict_spellings_accepted(self, override: str, knob: str, value: object) -> None:
        """Plain decimal integers up to 10**9, true/false and null are accepted."""
        cfg = CheckpointConfig.load(None, [override])
        obj: Any = cfg
        for part in knob.split("."):
            obj = getattr(obj, part)
        assert obj == value

    @pytest.mark.parametrize(
        ("text", "knob", "found"),
        [
            ("save_every: 0x10\n", "save_every", "0x10"),
            ("save_every: 1_0\n", "save_every", "1_0"),
            ("save_async: yes\n", "save_async", "yes"),
            ("save_every: 99999999999999999999\n", "save_every", 99999999999999999999),
        ],
    )
    def test_lenient_file_value_refused(
        self, tmp_path: Path, text: str, knob: str, found: object
    ) -> None:
        """The YAML file follows the same strict scalars as the overrides."""
        path = tmp_path / "ckpt.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(path)
        assert [(i.path, i.found) for i in exc.value.issues] == [(knob, found)]

    def test_duplicate_key_in_file_refused(self, tmp_path: Path) -> None:
        """A knob given twice in the YAML file is an error naming it (not last-one-wins)."""
        path = tmp_path / "ckpt.yaml"
        path.write_text("save_every: 2\nsave_every: 4\n")
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(path)
        assert "found the key 'save_every' twice" in str(exc.value)

    def test_duplicate_override_names_both(self) -> None:
        """A knob given twice in the overrides is an error naming both, with every other issue."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, ["save_every=2", "rl.save_every=4", "verify=sha1"])
        issues = {i.path: i for i in exc.value.issues}
        assert set(issues) == {"save_every", "verify"}
        assert issues["save_every"].found == "'save_every=2' and 'rl.save_every=4'"
        assert "each knob at most once" in issues["save_every"].allowed

    @pytest.mark.parametrize(
        ("value", "meant"),
        [("OFF", "off"), ("Off", "off"), ("none", "off"), ("None", "off"), ("null", "off"),
         ("Auto", "auto"), ("AUTO", "auto"), (" auto", "auto")],
    )  # fmt: skip
    def test_resume_lookalike_suggests_the_keyword(self, value: str, meant: str) -> None:
        """resume=OFF / Auto / none is not taken as a path: the error suggests the keyword."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.from_dict({"resume": value})
        (issue,) = exc.value.issues
        assert issue.path == "resume"
        assert f"did you mean {meant!r}?" in issue.allowed
        assert "./" in issue.allowed

    def test_resume_keywords_and_paths_still_accepted(self) -> None:
        """The lowercase keywords, '' and real paths are unchanged."""
        assert CheckpointConfig.load(None, ["resume=off"]).resume == "off"
        assert CheckpointConfig.load(None, ["resume=auto"]).resume == "auto"
        assert CheckpointConfig.load(None, ["resume="]).resume == "off"
        assert CheckpointConfig.load(None, ["resume=./Auto"]).resume == "./Auto"
        assert CheckpointConfig.load(None, ["resume=/ck/a #1"]).resume == "/ck/a #1"
        assert CheckpointConfig.load(None, ["resume='off'"]).resume == "off"
        assert CheckpointConfig.load(None, ["resume=/ck/iter_000000004"]).resume == (
            "/ck/iter_000000004"
        )
