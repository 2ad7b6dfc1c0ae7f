"""e2e_canary: canary workloads that act like a platform user, what they measure, and the judgement of
those measurements. So far the definitions (``definitions.py``), pod startup latency (``measure.py``) and
the judge (``judge.py``); the runner and the verdict over stored results follow."""
