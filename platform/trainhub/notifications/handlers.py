"""Domain events to notifications (an `EVENT_HANDLERS` entry): a job that succeeded,
failed, was preempted or stalled gets one delivery per subscribed endpoint, and each is
queued for a worker at once (the beat sweep sends what a lost message leaves due)."""

from __future__ import annotations

from django.utils import timezone

from trainhub.events import Event, JobStalled, JobStateChanged
from trainhub.jobs.choices import JobState

from .choices import NotifyEvent
from .services import Occurrence, record_occurrence
from .tasks import queue_deliveries

_BY_STATE = {
    JobState.SUCCEEDED: NotifyEvent.JOB_SUCCEEDED,
    JobState.FAILED: NotifyEvent.JOB_FAILED,
    JobState.PREEMPTED: NotifyEvent.JOB_PREEMPTED,
}


def occurrence_of(event: Event) -> Occurrence | None:
    """What, if anything, the domain event is to notifications."""
    if isinstance(event, JobStateChanged) and event.state in _BY_STATE:
        return Occurrence(_BY_STATE[JobState(event.state)], event.job_id, reason=event.message)
    if isinstance(event, JobStalled):
        return Occurrence(NotifyEvent.JOB_STALLED, event.job_id, reason=event.reason)
    return None


def on_event(event: Event) -> None:
    """Events arrive after their transaction committed: the deliveries are queued now."""
    occurrence = occurrence_of(event)
    if occurrence is not None:
        queue_deliveries(record_occurrence(occurrence, now=timezone.now()))
