"""IAM for one cluster: the control plane's role, the nodes' role and instance profile.

Each role gets AWS's managed policies only where the role needs them (the control plane one, the
nodes the four a node needs to join, pull images, run the VPC CNI and be reached by SSM). Documents
this program writes name every action: the policy pack rejects wildcard actions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pulumi
import pulumi_aws as aws

from infra.access import Grant, document
from infra.components.common import child, tags

CLUSTER_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly",
                 "AmazonSSMManagedInstanceCore")


def managed_policy(name: str) -> str:
    return f"arn:aws:iam::aws:policy/{name}"


def service_trust(service: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": service}, "Action": ["sts:AssumeRole", "sts:TagSession"],
    }]})


def web_identity_trust(provider_arn: str, issuer: str, namespace: str, service_account: str) -> str:
    """Only the one service account of the one cluster may assume the role (IAM roles for service accounts)."""
    host = issuer.removeprefix("https://")
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Federated": provider_arn}, "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{host}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                                       f"{host}:aud": "sts.amazonaws.com"}},
    }]})


class ClusterIam(pulumi.ComponentResource):
    cluster_role_arn: pulumi.Output[str]
    node_role_arn: pulumi.Output[str]
    node_instance_profile_arn: pulumi.Output[str]

    def __init__(self, name: str, stage: str, cluster: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("platformctl:infra:ClusterIam", name, None, opts)
        cluster_role = self._role(f"{cluster}-cluster", stage, cluster, service_trust("eks.amazonaws.com"), CLUSTER_POLICIES)
        node_role = self._role(f"{cluster}-node", stage, cluster, service_trust("ec2.amazonaws.com"), NODE_POLICIES)
        profile = aws.iam.InstanceProfile(f"{cluster}-node", name=f"{cluster}-node", role=node_role.name,
                                          tags=tags(stage, f"{cluster}-node"), opts=child(self))
        self.cluster_role_arn = cluster_role.arn
        self.node_role_arn = node_role.arn
        self.node_instance_profile_arn = profile.arn
        self.register_outputs({"clusterRoleArn": cluster_role.arn, "nodeRoleArn": node_role.arn,
                               "nodeInstanceProfileArn": profile.arn})

    def _role(self, name: str, stage: str, cluster: str, trust: str, policies: Sequence[str]) -> aws.iam.Role:
        role = aws.iam.Role(name, name=name, assume_role_policy=trust, opts=child(self),
                            tags=tags(stage, name, **{"platformctl.io/cluster": cluster}))
        for policy in policies:
            aws.iam.RolePolicyAttachment(f"{name}-{policy}", role=role.name, policy_arn=managed_policy(policy),
                                         opts=child(self))
        return role


def irsa_role(name: str, stage: str, provider_arn: pulumi.Input[str], issuer: pulumi.Input[str], namespace: str,
              service_account: str, grants: Sequence[Grant], parent: pulumi.Resource) -> aws.iam.Role:
    """A role one service account assumes through the cluster's OIDC provider, allowed exactly ``grants``
    (``infra.access``: each its actions, on its resources, where its condition holds)."""
    trust = pulumi.Output.all(provider_arn, issuer).apply(
        lambda a: web_identity_trust(a[0], a[1], namespace, service_account))
    role = aws.iam.Role(name, name=name, assume_role_policy=trust, tags=tags(stage, name), opts=child(parent))
    counts = [len(g.resources) for g in grants]
    policy = pulumi.Output.all(*[r for g in grants for r in g.resources]).apply(
        lambda flat: document(grants, [flat[sum(counts[:i]):sum(counts[:i + 1])] for i in range(len(grants))]))
    aws.iam.RolePolicy(name, role=role.id, policy=policy, opts=child(parent))
    return role
