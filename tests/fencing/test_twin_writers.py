"""Tests of the twin-writer explorer (``statecraft.proofs.twin_writers``)."""

from __future__ import annotations

import pytest

from statecraft.proofs.twin_writers import explore_twin_writers


class TestTwinWriters:
    def test_live_owner_refuses_the_second_writer_at_every_point(self) -> None:
        """While A lives, B is refused at every I/O point of A's save and A commits."""
        report = explore_twin_writers(mode="live")
        assert len(report.outcomes) > 20
        assert report.violations == []
        assert {o.b_error for o in report.outcomes} == {"refused: WriterLeaseError"}
        assert {o.a_error for o in report.outcomes} == {None}

    def test_stolen_lease_never_rewrites_a_commit_nor_moves_latest_back(self) -> None:
        """B takes the lease over at every point of A's save: no commit is rewritten and
        latest never goes back; A refuses with WriterLeaseError wherever B came before its
        commit."""
        report = explore_twin_writers(mode="stolen")
        assert report.violations == []
        errors = [o.a_error for o in report.outcomes]
        assert errors.count("WriterLeaseError") >= len(errors) - 4

    def test_broken_variant_without_lease_checks_is_caught(self) -> None:
        """A save without its lease checks moves latest back over B's commit: caught."""
        report = explore_twin_writers(mode="stolen", broken=True)
        assert len(report.violations) >= len(report.outcomes) // 2
        assert any(
            "went back from iter 6 to iter 4" in v for o in report.violations for v in o.violations
        )

    def test_unknown_mode_is_refused(self) -> None:
        """A mode other than live / stolen is refused with the choices named."""
        with pytest.raises(ValueError, match="'live' or 'stolen'"):
            explore_twin_writers(mode="both")
