"""Notifications: e-mail and signed webhooks when a job succeeds, fails, is preempted or
stalls (docs/design.md "Notifications")."""
