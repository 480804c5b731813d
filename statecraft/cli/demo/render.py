"""The demo's text report."""

from __future__ import annotations

from pathlib import Path

from statecraft.checkpoint.kernel.layout import LATEST_POINTER
from statecraft.cli.demo.launch import SENTINEL_NAME
from statecraft.cli.demo.records import DemoReport, Launch

__all__ = ["render"]


def _short(source: str) -> str:
    """``<attempt>/checkpoints/iter_...`` of a resume source (the rest is the run's root)."""
    parts = source.split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else source


_STAGE = {
    "evaluation_pending": "evaluation-pending",
    "publication_pending": "publication-pending",
    "published": "published",
}


def _stage(value: str | None) -> str:
    return _STAGE.get(value or "", value or "unknown")


def _describe_launch(launch: Launch) -> str:
    start = (
        "fresh start"
        if launch.resume_source is None
        else f"resumed at step {launch.resumed_step} from {_short(launch.resume_source)}"
    )
    if launch.resumed_stage is not None:
        again = (
            "evaluated again, "
            if launch.resumed_stage == "evaluation_pending"
            and launch.resumed_step in launch.evaluated
            else "evaluation not repeated, "
        )
        start += f" ({_stage(launch.resumed_stage)} -> {again}published)"
    saved = (
        ", saved " + ", ".join(f"{int(x[0])} ({x[1] * 1000:.0f} ms)" for x in launch.saves)
        if launch.saves
        else ""
    )
    published = [
        i for i in launch.published if i != launch.resumed_step or not launch.resumed_stage
    ]
    if published:
        saved += ", validated (pending -> published) " + ", ".join(map(str, published))
    text = f"  launch {launch.index}: {start}{saved}"
    if launch.error:
        return f"{text}\n    ERROR: {launch.error}"
    if launch.stop_step is not None:
        return f"{text}\n{_describe_stop(launch)}"
    if not launch.killed:
        return f"{text}\n    completed: done {launch.done_step} ({launch.wall_s:.1f} s)"
    if launch.killed_in_validation is not None:
        where = f"INSIDE the validation of iter {launch.killed_in_validation}"
    elif launch.killed_in_save is not None:
        where = f"INSIDE the save of iter {launch.killed_in_save}"
    elif launch.last_line and launch.last_line.startswith("save-end"):
        where = f"just after the save of iter {launch.last_line.split()[1]} completed"
    elif launch.last_line and launch.last_line.startswith("done"):
        where = "after training finished, during the process exit"
    else:
        where = f"mid-training after step {launch.last_step}"
    delay = f" + {launch.kill_delay_ms:.0f} ms" if launch.kill_delay_ms else ""
    lines = [
        text,
        f"    SIGKILL on '{launch.trigger}'{delay} -> died {where} ({launch.wall_s:.1f} s)",
    ]
    if launch.save_state:
        lines.append(f"    iter {launch.killed_in_save} on disk: {launch.save_state}")
    if launch.validation_state:
        lines.append(
            f"    iter {launch.killed_in_validation} on disk: committed, validation "
            f"{_stage(launch.validation_state)} (adopted by resume=auto, not yet published)"
            if launch.validation_state != "published"
            else f"    iter {launch.killed_in_validation} on disk: committed and published"
        )
    if launch.latest is None:
        pointer = f"no {LATEST_POINTER} yet"
    else:
        state = (
            "verifies" if launch.latest_verified else f"DOES NOT VERIFY: {launch.latest_problem}"
        )
        pointer = f"{LATEST_POINTER} -> iter {launch.latest} ({state})"
    lines.append(f"    {pointer}")
    return "\n".join(lines)


def _describe_stop(launch: Launch) -> str:
    """The preempted launch: the sentinel, the emergency save, the exit code, DONE.json."""
    done = launch.done_record or {}
    preempted = done.get("preempted")
    seconds = f"{1000 * launch.stop_seconds:.0f} ms" if launch.stop_seconds is not None else "?"
    saved = (
        f"already on disk ({launch.stop_path}), nothing saved"
        if launch.stop_kind == "covered"
        else f"{launch.stop_kind} {launch.stop_path} durable in {seconds}"
    )
    verified = {True: " (verifies)", False: " (DOES NOT VERIFY)", None: ""}[launch.stop_verified]
    consumed = (
        f"sentinel renamed {SENTINEL_NAME}.consumed"
        if launch.sentinel_consumed
        else "sentinel NOT consumed"
    )
    return "\n".join(
        [
            f"    sentinel {SENTINEL_NAME} created on '{launch.trigger}' -> stopped at step "
            f"{launch.stop_step}: {launch.stop_reason}; emergency save {saved}{verified}",
            f"    exit code {launch.returncode}; DONE.json: step {done.get('step')}, preempted: "
            f"{preempted}; {consumed} ({launch.wall_s:.1f} s)",
        ]
    )


def render(report: DemoReport) -> str:
    """The human-readable account of a demo."""
    validation = (
        f", validate every {report.validate_every} (durable)" if report.validate_every else ""
    )
    lines = [
        f"statecraft demo: {report.steps} steps, save every {report.save_every}{validation}, "
        f"{report.kills_requested} SIGKILL(s)"
        + (", 1 preemption through the sentinel file" if report.preempt else "")
        + f", kill seed {report.seed}"
    ]
    for run in ("reference", "killed"):
        title = (
            "uninterrupted"
            if run == "reference"
            else "killed, preempted and relaunched"
            if report.preempt
            else "killed and relaunched"
        )
        lines.append(f"{run} run ({title}): {Path(report.out) / run}")
        lines += [_describe_launch(x) for x in report.launches if x.run == run]
    in_save = sum(1 for x in report.kills if x.killed_in_save is not None)
    lines.append(
        f"kills: {len(report.kills)} of {report.kills_requested} ({in_save} inside a save)"
    )
    for launch in report.preemptions:
        after = [x for x in report.launches if x.run == "killed" and x.index == launch.index + 1]
        requeue = (
            f"launch {after[0].index} (the unchanged command) resumed at step "
            f"{after[0].resumed_step}"
            if after
            else "not relaunched"
        )
        lines.append(
            f"preemption: launch {launch.index} stopped at step {launch.stop_step} "
            f"({launch.stop_reason}), exit code {launch.returncode}; {requeue}"
        )
    extra = (
        f" (emergency checkpoint {report.extra_checkpoints} off the cadence)"
        if report.extra_checkpoints
        else ""
    )
    lines.append(
        f"checkpoints: reference {report.reference_checkpoints}, "
        f"killed run {report.killed_checkpoints}{extra}; final iter {report.final_iteration} "
        f"({report.final_bytes / 1024:.0f} KiB)"
    )
    if report.save_seconds:
        s = report.save_seconds
        lines.append(
            f"save times: {s['count']} saves, min {s['min'] * 1000:.0f} ms, median "
            f"{s['median'] * 1000:.0f} ms, max {s['max'] * 1000:.0f} ms; training blocked "
            f"(median) {s.get('blocking_median', s['median']) * 1000:.1f} ms per save"
        )
    if report.validate_every:
        lines.append(
            f"validation: published iterations: reference {report.reference_published}, "
            f"killed run {report.killed_published}"
        )
    lines.append(
        f"compared bit-for-bit (model.pt, optim.pt, trainer.pt, data.pt): iterations "
        f"{report.compared}"
    )
    for line in report.differences[:20]:
        lines.append(f"  DIFFERS: {line}")
    if len(report.differences) > 20:
        lines.append(f"  ... and {len(report.differences) - 20} more")
    lines.append(f"bit-exact: {'yes' if report.bit_exact else 'no'}")
    lines.append(f"output root (kept): {report.out}   wall time: {report.wall_s:.1f} s")
    return "\n".join(lines)
