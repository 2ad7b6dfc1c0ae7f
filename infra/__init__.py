"""infra: the Pulumi program that provisions each stage's host cluster and zonal member clusters.

Today it holds the stack config files (``Pulumi.<stage>.yaml``) whose ``platformctl:topology`` key
is the one description of each stage; the program and its components come next.
"""
