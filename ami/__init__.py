"""ami: image manifests (``ami/manifests/*.yaml``), their inheritance, and the builder that turns
them into AMIs. Filled by the AMI issue."""
