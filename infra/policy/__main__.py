"""Serve the rules of ``infra/policy/rules.py`` as the ``platformctl-security`` policy pack."""

from pulumi_policy import EnforcementLevel, PolicyPack

from infra.policy.rules import policies

PolicyPack(name="platformctl-security", enforcement_level=EnforcementLevel.MANDATORY, policies=policies())
