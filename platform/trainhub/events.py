"""Project-wide signals that let lower layers ask upper ones to act, without importing them."""

from django.dispatch import Signal

# Sent (after commit) when something changed that a scheduling cycle should look at:
# a job submitted, finished or cancelled, a node joined or was lost, a quota changed.
scheduling_needed = Signal()
