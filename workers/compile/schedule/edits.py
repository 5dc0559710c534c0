"""Schedule edits: one field of one op's OpSchedule (or of the params) changed, as the advisor proposes them."""
from __future__ import annotations

import dataclasses

from workers.compile.schedule.tiles import ScheduleError
from workers.records import OpSchedule, ScheduleEdit, ScheduleParams


SCHEDULE_FIELDS = {f.name for f in dataclasses.fields(OpSchedule)} - {"op_index", "family"}
PARAM_FIELDS = {f.name for f in dataclasses.fields(ScheduleParams)} - {"ops"}


RETILING_FIELDS = ("img2col", "tensor_core", "vectorize")
WHOLE_SCHEDULE = "schedule"  # op X's "schedule": its whole OpSchedule (a repair: the conservative path)
ALL_SCHEDULES = "ops"  # the params' "ops": every op's OpSchedule (a repair: all on the conservative path)


def apply_edit(params: ScheduleParams, edit: ScheduleEdit) -> ScheduleParams:
    """A copy of `params` with exactly one field changed; op X's `schedule` and the params' `ops` replace whole
    OpSchedules (dicts)."""
    new = ScheduleParams.from_dict(params.to_dict())
    if edit.op_index == -1 and edit.field == ALL_SCHEDULES:
        new.ops = [_whole_schedule(value, value.get("op_index") if isinstance(value, dict) else None)
                   for value in edit.value]
        return new
    if edit.op_index == -1:
        if edit.field not in PARAM_FIELDS:
            raise ScheduleError(f"unknown schedule parameter {edit.field!r}")
        setattr(new, edit.field, edit.value)
        return new
    if edit.field == WHOLE_SCHEDULE:
        replacement = _whole_schedule(edit.value, edit.op_index)
        new.ops = sorted([s for s in new.ops if s.op_index != edit.op_index] + [replacement], key=lambda s: s.op_index)
        return new
    targets = [s for s in new.ops if s.op_index == edit.op_index]
    if not targets or edit.field not in SCHEDULE_FIELDS:
        raise ScheduleError(f"no op {edit.op_index} field {edit.field!r} in the schedule")
    if edit.field in RETILING_FIELDS and isinstance(edit.value, dict):
        # what the tiles address changes with these fields (img2col: the loops; tensor_core: warps or the
        # warpgroup): the edit carries the new tiles
        unknown = set(edit.value) - (SCHEDULE_FIELDS | {"family"})
        if unknown or edit.field not in edit.value:
            raise ScheduleError(f"op {edit.op_index}: a {edit.field} edit sets {edit.field} and tile fields, "
                                f"not {sorted(unknown)}")
        for field, value in edit.value.items():
            setattr(targets[0], field, value)
        return new
    setattr(targets[0], edit.field, edit.value)
    return new


def _whole_schedule(value, op_index: int | None) -> OpSchedule:
    try:
        schedule = OpSchedule.from_dict(value)
    except (TypeError, ValueError, AttributeError) as e:
        raise ScheduleError(f"op {op_index}: a schedule edit carries a whole OpSchedule: {e}") from None
    if schedule.op_index != op_index:
        raise ScheduleError(f"op {op_index}: the schedule edit carries op {schedule.op_index}'s schedule")
    return schedule
