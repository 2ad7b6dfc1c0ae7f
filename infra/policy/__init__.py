"""The policy pack of the stages (``pulumi preview --policy-pack infra/policy``)."""
