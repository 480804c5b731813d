"""Tests of ``statecraft.logs``: what a script that configures no logging sees on stderr, the
``quiet`` knob, a user's own logging configuration, and the user guide's knob table.

The end-to-end tests run real processes: a tiny training script saves, is relaunched and
resumes, with no logging setup, with ``quiet`` and with ``logging.basicConfig``.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import re
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from statecraft.checkpoint.config import CheckpointConfig, knob_rows
from statecraft.errors import ConfigError
from statecraft.logs import LOGGER_NAME, configure_default_output, default_output_installed

REPO = Path(__file__).resolve().parents[1]

# A tiny loop that saves every 2 steps up to --steps and resumes on relaunch.
SCRIPT = textwrap.dedent(
    """
    import logging, sys
    import torch
    import statecraft as sc

    out, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "basic-before":
        logging.basicConfig(level=logging.INFO, format="USER %(name)s %(message)s")
    knobs = ["save_every=2"]
    if mode == "quiet-knob":
        knobs.append("quiet=true")
    if mode in ("plain", "basic-before", "basic-after"):
        knobs += ["save_async=false", "keep_optim_last=0"]  # no warnings: only the INFO lines
    config = sc.CheckpointConfig.load(None, knobs)
    quiet = True if mode == "quiet-arg" else None
    ckpt = sc.Checkpointer(config, run=sc.RunIdentity("p", "g", "tiny"), output_root=out,
                           quiet=quiet)
    if mode == "basic-after":
        logging.basicConfig(level=logging.INFO, format="USER %(name)s %(message)s")
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt.track(model=model, optimizer=opt)
    start = ckpt.resume()
    for step in range(start.step, steps):
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    ckpt.finalize()
    print("done", ckpt.step)
    """
)


def _run(tmp_path: Path, steps: int, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "tiny.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), str(steps), mode],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"done {steps}\n"  # nothing of statecraft's goes to stdout
    return done


@contextlib.contextmanager
def bare_logging() -> Iterator[logging.Logger]:
    """A process logging state as a script that configured nothing has it (pytest's capture
    handlers on the root logger, added around each test phase, are set aside), restored
    afterwards."""
    root, logger = logging.getLogger(), logging.getLogger(LOGGER_NAME)
    saved = (root.handlers[:], logger.handlers[:], logger.level, logger.propagate)
    root.handlers.clear()
    logger.handlers.clear()
    logger.setLevel(logging.NOTSET)
    try:
        yield logger
    finally:
        root.handlers[:], logger.handlers[:] = saved[0], saved[1]
        logger.setLevel(saved[2])
        logger.propagate = saved[3]


def _emit_all(name: str = "statecraft.save") -> None:
    log = logging.getLogger(name)
    log.info("an info")
    log.warning("a warning")
    log.error("an error")


class TestConfigureDefaultOutput:
    def test_rank_zero_prints_info_and_up_with_the_prefix(self, capsys):
        """On rank 0 every record from INFO up is one 'statecraft: ' line on stderr."""
        with bare_logging():
            configure_default_output(rank=0, quiet=False)
            _emit_all()
            captured = capsys.readouterr()
            assert (
                captured.err == "statecraft: an info\nstatecraft: a warning\nstatecraft: an error\n"
            )
            assert captured.out == ""
            assert default_output_installed()

    def test_other_ranks_print_errors_only(self, capsys):
        """On a rank other than 0 only ERROR and up is printed (rank 0 speaks for the job)."""
        with bare_logging():
            configure_default_output(rank=3, quiet=False)
            _emit_all()
            assert capsys.readouterr().err == "statecraft: an error\n"

    def test_quiet_prints_nothing_not_even_bare_warnings(self, capsys):
        """quiet silences every record, including the warnings Python's last resort would
        print without a handler."""
        with bare_logging():
            configure_default_output(rank=0, quiet=True)
            _emit_all()
            assert capsys.readouterr().err == ""
            assert not default_output_installed()

    def test_idempotent_one_handler_latest_call_decides(self, capsys):
        """Repeated calls keep one handler; the latest call's rank and quiet decide."""
        with bare_logging() as logger:
            for _ in range(3):
                configure_default_output(rank=0, quiet=False)
            assert len(logger.handlers) == 1
            _emit_all()
            configure_default_output(rank=0, quiet=True)
            _emit_all()
            assert len(logger.handlers) == 1
            assert capsys.readouterr().err.count("statecraft: an info\n") == 1
            assert logger.level == logging.NOTSET  # the level it raised is given back

    def test_a_users_handler_is_left_alone(self, capsys):
        """With a handler on the root logger nothing is installed and records propagate to it
        at the user's levels."""
        with bare_logging() as logger:
            seen: list[str] = []
            handler = logging.Handler()
            handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
            logging.getLogger().addHandler(handler)
            configure_default_output(rank=0, quiet=True)
            configure_default_output(rank=0, quiet=False)
            _emit_all()
            assert logger.handlers == []
            assert seen == ["a warning", "an error"]  # root's WARNING: the user's level rules
            assert capsys.readouterr().err == ""

    def test_configuring_logging_later_prints_each_line_once(self, capsys):
        """A handler the user adds after installation takes over; the default steps aside."""
        with bare_logging() as logger:
            configure_default_output(rank=0, quiet=False)
            seen: list[str] = []
            handler = logging.Handler()
            handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
            logging.getLogger().addHandler(handler)
            _emit_all()
            _emit_all()
            assert capsys.readouterr().err == ""
            assert seen.count("a warning") == seen.count("an error") == 2
            assert logger.level == logging.NOTSET

    def test_warnings_warn_is_untouched(self):
        """warnings.warn still goes through Python's warnings machinery."""
        with bare_logging():
            configure_default_output(rank=0, quiet=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                warnings.warn("still a warning", UserWarning, stacklevel=1)
            assert [str(w.message) for w in caught] == ["still a warning"]

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"rank": -1, "quiet": False}, "rank=...): a non-negative int, got -1"),
            ({"rank": True, "quiet": False}, "a non-negative int, got True"),
            ({"rank": 0, "quiet": "no"}, "quiet=...): true or false, got 'no'"),
        ],
    )
    def test_bad_arguments_are_named(self, kwargs, message):
        """A bad rank or quiet is a TypeError naming the argument; nothing is installed."""
        with bare_logging() as logger:
            with pytest.raises(TypeError, match=re.escape(message)):
                configure_default_output(**kwargs)
            assert logger.handlers == []


class TestQuietKnob:
    def test_default_false_and_overrides(self):
        """quiet defaults to false and takes true from an override."""
        assert CheckpointConfig().quiet is False
        assert CheckpointConfig.load(None, ["quiet=true"]).quiet is True

    def test_non_boolean_refused_naming_the_knob(self):
        """quiet=yes is a ConfigError naming quiet and the spelling of booleans."""
        with pytest.raises(ConfigError) as exc:
            CheckpointConfig.load(None, ["quiet=yes"])
        assert "quiet" in str(exc.value)
        assert "booleans are spelled true or false" in str(exc.value)

    def test_checkpointer_quiet_argument_must_be_a_bool(self, tmp_path):
        """Checkpointer(quiet="yes") is a ConfigError naming quiet and what it takes; nothing
        is created under the output root."""
        import statecraft as sc

        out = tmp_path / "out"
        with pytest.raises(ConfigError) as exc:
            sc.Checkpointer(CheckpointConfig(), run="q", output_root=out, quiet="yes")  # type: ignore[arg-type]
        assert "quiet" in str(exc.value)
        assert "True, False or None" in str(exc.value)
        assert not out.exists()


@pytest.mark.slow
class TestRealProcesses:
    def test_save_and_resume_are_visible_without_logging_setup(self, tmp_path):
        """A script with no logging setup sees the fresh start and each save on stderr, and
        after a relaunch the resume decision, each line prefixed 'statecraft:'."""
        first = _run(tmp_path, 4, "plain").stderr.splitlines()
        assert "statecraft: fresh start: resume=auto: new attempt, starting fresh" in first
        saved = [line for line in first if line.startswith("statecraft: saved ")]
        assert [line.split("/checkpoints/")[1].split()[0] for line in saved] == [
            "iter_000000002",
            "iter_000000004",
        ]
        assert all(
            re.match(r"statecraft: saved iter \d+: [0-9.]+ MiB in [0-9.]+ s -> /", line)
            for line in saved
        )
        second = _run(tmp_path, 6, "plain").stderr.splitlines()
        resumed = [line for line in second if line.startswith("statecraft: resumed from ")]
        assert len(resumed) == 1
        assert resumed[0].endswith("iter_000000004 (iter 4)")
        assert all(line.startswith("statecraft: ") for line in first + second)

    @pytest.mark.parametrize("mode", ["quiet-knob", "quiet-arg"])
    def test_quiet_shows_nothing(self, tmp_path, mode):
        """quiet (the knob, or Checkpointer(quiet=True)) prints nothing at all, not even the
        save_async warning of the default knobs."""
        assert _run(tmp_path, 4, mode).stderr == ""
        assert _run(tmp_path, 6, mode).stderr == ""

    @pytest.mark.parametrize("mode", ["basic-before", "basic-after"])
    def test_users_basic_config_sees_each_line_once(self, tmp_path, mode):
        """With logging.basicConfig (before or after the Checkpointer) every statecraft
        record is printed exactly once, in the user's format."""
        _run(tmp_path, 4, mode)
        lines = _run(tmp_path, 6, mode).stderr.splitlines()
        assert not [line for line in lines if line.startswith("statecraft: ")]
        resumed = [line for line in lines if "resumed from" in line]
        assert len(resumed) == 1
        assert resumed[0].startswith("USER statecraft.resume resumed from ")
        saved = [line for line in lines if " saved " in line]
        assert len(saved) == len(set(saved)) == 1  # iteration 6 once


class TestNoBarePrints:
    def test_library_code_outside_the_cli_never_prints(self):
        """No module of statecraft outside statecraft/cli calls print(): output goes through
        the 'statecraft' logger."""
        offenders = []
        for path in sorted((REPO / "statecraft").rglob("*.py")):
            if "cli" in path.relative_to(REPO / "statecraft").parts[:1]:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "print"
                ):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
        assert offenders == []


class TestDocsKnobTable:
    def test_docs_table_lists_every_knob_with_its_default(self):
        """docs/checkpointing.md's knob table has one row per knob of knob_rows(), in order,
        each with the default as it is written in YAML, and no other row."""
        text = (REPO / "docs" / "checkpointing.md").read_text(encoding="utf-8")
        section = text.split("| knob | default |", 1)[1].split("\n\n", 1)[0]
        rows = [
            [cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines()[2:]
            if line.startswith("|")
        ]
        documented = [(cells[0].strip("`"), cells[1].strip("`")) for cells in rows]
        assert documented == [(row.knob, row.default_text) for row in knob_rows()]
