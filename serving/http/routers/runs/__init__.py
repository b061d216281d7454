"""The runs family (DESIGN.md §10): conversations, messages that start runs, a run's state and its
replayable event log (Server-Sent Events), cancellation, feedback on answers, and deleting a user's
own data. Another user's conversation or run is 404."""
