# platformctl's image: what every CronJob of infra/components/kubernetes.py runs (rotation, remediation, the release
# tick) and every canary runner. It holds the toolkit installed with its pinned constraints.txt, the checkout's data
# (infra/, ami/, the canaries, the pipeline) at /opt/platformctl, the AWS CLI v2 (each job's kubeconfig signs in with
# `aws eks get-token`), the Pulumi CLI with the two provider plugins the program uses (the tick deploys with the
# Automation API), and git (a candidate's commit is extracted with `git archive`).
#
# The pods run it non-root with a read-only root: the user is numeric (runAsNonRoot cannot check a name), and every
# write goes to the scratch volume the job mounts at /var/lib/platformctl (HOME, TMPDIR, PLATFORMCTL_HOME,
# PULUMI_HOME). PULUMI_HOME is scratch, so the provider plugins are not in it: they sit on PATH, where Pulumi finds
# ambient plugins. tests/infra/test_image.py keeps this file and the job specs in step (user, entrypoint, paths, and
# the versions below against constraints.txt).
#
#     docker build -t ghcr.io/platformctl/platformctl:0.1.0 .

ARG PYTHON_VERSION=3.11.7

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
# The Pulumi CLI and the plugins at the versions of the Python packages constraints.txt pins.
ARG PULUMI_VERSION=3.272.0
ARG PULUMI_AWS_VERSION=7.51.1
ARG PULUMI_KUBERNETES_VERSION=4.34.2
ARG AWS_CLI_VERSION=2.17.50
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl unzip \
    && rm -rf /var/lib/apt/lists/*
RUN curl -fsSL "https://awscli.amazonaws.com/awscli-exe-linux-x86_64-${AWS_CLI_VERSION}.zip" -o /tmp/awscli.zip \
    && unzip -q /tmp/awscli.zip -d /tmp \
    && /tmp/aws/install --install-dir /opt/aws-cli --bin-dir /opt/aws-cli/bin
RUN curl -fsSL "https://get.pulumi.com/releases/sdk/pulumi-v${PULUMI_VERSION}-linux-x64.tar.gz" | tar -xz -C /opt \
    && curl -fsSL "https://github.com/pulumi/pulumi-aws/releases/download/v${PULUMI_AWS_VERSION}/pulumi-resource-aws-v${PULUMI_AWS_VERSION}-linux-amd64.tar.gz" \
        | tar -xz -C /opt/pulumi pulumi-resource-aws \
    && curl -fsSL "https://github.com/pulumi/pulumi-kubernetes/releases/download/v${PULUMI_KUBERNETES_VERSION}/pulumi-resource-kubernetes-v${PULUMI_KUBERNETES_VERSION}-linux-amd64.tar.gz" \
        | tar -xz -C /opt/pulumi pulumi-resource-kubernetes
COPY pyproject.toml constraints.txt README.md /src/
COPY platformctl /src/platformctl
COPY upgrade_service /src/upgrade_service
COPY e2e_canary /src/e2e_canary
COPY release_pipeline /src/release_pipeline
COPY ami /src/ami
COPY infra /src/infra
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir -c /src/constraints.txt /src

FROM python:${PYTHON_VERSION}-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /var/lib/platformctl platformctl
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/aws-cli /opt/aws-cli
COPY --from=build /opt/pulumi /opt/pulumi
# The checkout's data, where the jobs' --infra-dir points and where checkout-relative defaults resolve (WORKDIR).
COPY infra /opt/platformctl/infra
COPY ami /opt/platformctl/ami
COPY e2e_canary/canaries /opt/platformctl/e2e_canary/canaries
COPY release_pipeline/pipeline.yaml /opt/platformctl/release_pipeline/pipeline.yaml
COPY upgrade_service/examples /opt/platformctl/upgrade_service/examples
ENV PATH=/opt/venv/bin:/opt/pulumi:/opt/aws-cli/bin:/usr/local/bin:/usr/bin:/bin \
    PULUMI_SKIP_UPDATE_CHECK=true \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/platformctl
USER 10001:10001
ENTRYPOINT ["platformctl"]
