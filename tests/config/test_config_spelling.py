"""Knob spelling: a knob name with whitespace around it is refused (not silently trimmed), and
every unknown knob or choice value that is close to a known one gets a "did you mean"."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecraft.checkpoint.config import CheckpointConfig
from statecraft.errors import ConfigError


def refused(*overrides: str) -> ConfigError:
    """Load ``overrides`` expecting a ConfigError; return it."""
    with pytest.raises(ConfigError) as exc:
        CheckpointConfig.load(None, list(overrides))
    return exc.value


class TestWhitespaceAroundKnobName:
    @pytest.mark.parametrize("override", ["save_every =3", " save_every=3", "save_every\t=3"])
    def test_refused_with_the_exact_spelling(self, override: str) -> None:
        """An override whose knob name has surrounding whitespace is refused, naming the knob
        and the exact spelling to write instead."""
        error = refused(override)
        assert [i.path for i in error.issues] == ["save_every"]
        assert error.issues[0].found == override
        assert "did you mean 'save_every=3'?" in str(error)

    def test_nested_knob_with_rl_prefix(self) -> None:
        """The rule holds for a dotted knob behind the rl. prefix too."""
        error = refused("rl.upload.enabled =true")
        assert [i.path for i in error.issues] == ["upload.enabled"]
        assert "did you mean 'upload.enabled=true'?" in str(error)

    def test_unknown_knob_with_whitespace_gets_no_suggestion(self) -> None:
        """Whitespace around a name that is no knob at all is refused without a made-up
        suggestion."""
        error = refused("nothing_like_it =3")
        assert "did you mean" not in str(error)
        assert "no whitespace around the knob name" in str(error)

    def test_exact_spelling_still_loads(self) -> None:
        """The exact spelling is unaffected."""
        assert CheckpointConfig.load(None, ["save_every=3"]).save_every == 3


class TestDidYouMean:
    @pytest.mark.parametrize(
        ("override", "meant"),
        [
            ("save_evry=3", "save_every"),
            ("SAVE_EVERY=3", "save_every"),
            ("upload.enabeld=true", "upload.enabled"),
            ("keep_optim_lst=2", "keep_optim_last"),
            ("termination.sentinel_nme=x", "termination.sentinel_name"),
        ],
    )
    def test_override_typo_names_the_knob(self, override: str, meant: str) -> None:
        """Every misspelled knob of an override is answered with the knob it is closest to,
        before the list of known knobs."""
        error = refused(override)
        assert f"did you mean {meant!r}?" in str(error)
        assert "one of: save_every" in str(error)

    def test_file_and_mapping_typos(self, tmp_path: Path) -> None:
        """A misspelled key of a YAML file or of a mapping (at any level, or with a stray space)
        gets the same suggestion."""
        path = tmp_path / "c.yaml"
        path.write_text("save_evry: 3\nupload:\n  bukket: b\n'keep_model_last ': 1\n")
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(path)
        message = str(exc.value)
        assert "save_evry: got 3; expected a known knob; did you mean 'save_every'?" in message
        assert "did you mean 'upload.bucket'?" in message
        assert "did you mean 'keep_model_last'?" in message

    def test_far_typo_gets_no_suggestion(self) -> None:
        """A name close to no knob is not answered with a guess."""
        assert "did you mean" not in str(refused("xyz=1"))

    @pytest.mark.parametrize(
        ("override", "meant"),
        [
            ("checkpoint_format=dpc", "dcp"),
            ("verify=Digest", "digest"),
            ("data.cursor_resume=strct", "strict"),
        ],
    )
    def test_choice_value_typo(self, override: str, meant: str) -> None:
        """A misspelled value of a knob with fixed choices names the choice it is closest to."""
        assert f"did you mean {meant!r}?" in str(refused(override))
