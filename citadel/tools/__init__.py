"""Tools and the decisions about calling them (DESIGN.md §2, §10): the declarative side of the agentic plane.

- `spec`: `ToolSpec`, one tool as an operator declares it (argument and response schemas, risk tier,
  approver and lead groups, limits, escalation and expiry, audit share, who may request the write),
  and `load_tool_specs`, the registry read from YAML with a clear `InvalidToolSpec` for any problem;
- `schema`: the JSON Schema rules a tool's schemas follow, their validators (linear-time `pattern`),
  and bounded, human summaries of what failed;
- `policy`: `PolicyEngine`, plain code that decides run / run_and_audit / needs_approval / refuse with
  explicit reasons, checks a reviewer's edit and a tool's response; `AuditSampler`, the seeded T1 sample;
- `approvals`: `ApprovalStore`, where a T2 call waits for a person (request once per step, decide once,
  escalate and expire by a sweep; silence never approves), in process or in a SQLite file
  (`approvals_sqlite`) every process of the machine shares, chosen by `factory.make_approval_store`;
- `pause`: the `PauseSwitch` an admin uses to pause the model or a tool, per tenant or everywhere,
  without a restart (in process, or a SQLite file shared by processes).
- `caller`, `delegation`, `token_exchange`: who a call is made as — an access token the users' token
  service issued for the tool's system and the tool (OAuth 2.0 Token Exchange, RFC 8693) from the
  delegation the run took from its user's own context when it started; `http`: a tool over HTTP;
- `registry`: `ToolRegistry`, the tools of this process by name and the policy engine over them, and
  `StepTools`, the one tool a step may call, decided, called and its response checked.

The agent's step executor (`citadel/agent/executor.py`: the search tool, executing a step) calls tools
through the registry.
"""
