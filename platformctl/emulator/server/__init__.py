"""The local region as a running place: a background server with the AWS and Kubernetes APIs.

- ``state``: one simulated cluster behind the API's objects (namespaces, workloads, the change log
  that watches read, the CronJob controller);
- ``kubeapi``: the Kubernetes REST subset, as a WSGI application over those states;
- ``tables``: the ``meta.k8s.io/v1 Table`` answers that ``kubectl get`` asks for;
- ``process``: the server process itself (moto's server, the local region, the virtual clock);
- ``control``: what ``platformctl local up|status|down`` and every other command use to find,
  start and stop it.
"""
