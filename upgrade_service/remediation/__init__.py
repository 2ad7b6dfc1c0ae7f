"""Node remediation: nodes that went bad on their own (health), replaced under a policy and a circuit breaker on the
executor's own drain and replacement steps."""
