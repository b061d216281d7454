"""Reviews (DESIGN.md §10): what goes to a person when a check fails, and what that person sees.

- `checks`: the checks an answer must pass before it leaves (an unsettled conflict among the documents
  it cites, a reference to no source), asked by a run's synthesis and the single-shot path alike;
- `tasks`: review tasks for failed checks — the reasons, who reviews (`ReviewPolicy`), rounds, the
  verdict a held request gets (go, hold, closed) and what its user is told, suspicious-content reports;
- `evidence`: the lines of evidence a reviewer reads beside a proposal or a held answer;
- `items`: what the reviewer page shows of one pending task (the diff, the evidence, the decisions, the
  editable arguments), as plain data.

A review task is an approval of kind REVIEW in the approvals store (citadel/tools/approvals.py). The
HTTP side — deciding tasks (serving/services/approvals.py) and rendering the page
(serving/http/routers/review/) — only wires and renders what this room defines.
"""
