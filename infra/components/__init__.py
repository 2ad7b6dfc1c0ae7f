"""The component resources of a stage: network, IAM, host and member clusters, node pools and the
Kubernetes objects each cluster gets."""
