"""The stage's network: one VPC, a private and a public subnet per zone, and NAT per zone.

Private subnets hold every node and the control planes' network interfaces; they are large because
the VPC CNI gives each pod a VPC address. Public subnets hold only the NAT gateways and internet
facing load balancers. Each zone has its own NAT gateway and private route table, so losing a zone
never takes another zone's egress with it.
"""

from __future__ import annotations

import ipaddress
import math

import pulumi
import pulumi_aws as aws

from infra.components.common import ZONE_TAG, child, tags


def subnet_blocks(vpc_cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """Private and public CIDR blocks for ``zones`` zones: the VPC is cut into ``zones + 1`` equal
    blocks, one private block per zone, and the last one is cut into the public /24s (or smaller)."""
    vpc = ipaddress.IPv4Network(vpc_cidr)
    bits = math.ceil(math.log2(zones + 1))
    blocks = list(vpc.subnets(prefixlen_diff=bits))
    private = [str(b) for b in blocks[:zones]]
    public_bits = math.ceil(math.log2(zones))
    public_prefix = max(blocks[-1].prefixlen + public_bits, 24)
    public = [str(b) for b in list(blocks[-1].subnets(new_prefix=public_prefix))[:zones]]
    return private, public


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnets: dict[str, pulumi.Output[str]]
    public_subnets: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, stage: str, cidr: str, zones: tuple[str, ...],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("platformctl:infra:Network", name, None, opts)
        private_blocks, public_blocks = subnet_blocks(cidr, len(zones))
        vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=cidr, enable_dns_hostnames=True, enable_dns_support=True,
                          tags=tags(stage, f"{name}-vpc"), opts=child(self))
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=tags(stage, f"{name}-igw"), opts=child(self))
        public_routes = aws.ec2.RouteTable(
            f"{name}-public", vpc_id=vpc.id, tags=tags(stage, f"{name}-public"), opts=child(self),
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)])
        self.private_subnets = {}
        self.public_subnets = {}
        for zone, private_block, public_block in zip(zones, private_blocks, public_blocks, strict=True):
            public = aws.ec2.Subnet(
                f"{name}-public-{zone}", vpc_id=vpc.id, cidr_block=public_block, availability_zone=zone,
                map_public_ip_on_launch=False, opts=child(self),
                tags=tags(stage, f"{name}-public-{zone}", **{ZONE_TAG: zone, "platformctl.io/tier": "public",
                                                             "kubernetes.io/role/elb": "1"}))
            aws.ec2.RouteTableAssociation(f"{name}-public-{zone}", subnet_id=public.id, route_table_id=public_routes.id,
                                          opts=child(self))
            eip = aws.ec2.Eip(f"{name}-nat-{zone}", domain="vpc", tags=tags(stage, f"{name}-nat-{zone}", **{ZONE_TAG: zone}),
                              opts=child(self, depends_on=[igw]))
            nat = aws.ec2.NatGateway(f"{name}-nat-{zone}", subnet_id=public.id, allocation_id=eip.id,
                                     tags=tags(stage, f"{name}-nat-{zone}", **{ZONE_TAG: zone}), opts=child(self))
            private = aws.ec2.Subnet(
                f"{name}-private-{zone}", vpc_id=vpc.id, cidr_block=private_block, availability_zone=zone,
                opts=child(self),
                tags=tags(stage, f"{name}-private-{zone}", **{ZONE_TAG: zone, "platformctl.io/tier": "private",
                                                              "kubernetes.io/role/internal-elb": "1"}))
            routes = aws.ec2.RouteTable(
                f"{name}-private-{zone}", vpc_id=vpc.id, tags=tags(stage, f"{name}-private-{zone}", **{ZONE_TAG: zone}),
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)], opts=child(self))
            aws.ec2.RouteTableAssociation(f"{name}-private-{zone}", subnet_id=private.id, route_table_id=routes.id,
                                          opts=child(self))
            self.private_subnets[zone] = private.id
            self.public_subnets[zone] = public.id
        self.vpc_id = vpc.id
        self.register_outputs({"vpcId": vpc.id, "privateSubnets": self.private_subnets, "publicSubnets": self.public_subnets})
