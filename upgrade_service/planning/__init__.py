"""The planner: a rotation policy, the disruption each node causes, waves packed under the policy's limits, the plan and
its estimate. Reads a snapshot; never acts."""
