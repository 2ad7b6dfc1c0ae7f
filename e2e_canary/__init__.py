"""e2e_canary: canary workloads that act like a user, what they measure, the judgement of those
measurements, and the dashboard. Filled by the canary issues."""
