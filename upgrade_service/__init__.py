"""upgrade_service: the rotation planner (a networkx DAG under SLO constraints), the executor that
carries a plan out, and node remediation. Filled by the rotation issues."""
